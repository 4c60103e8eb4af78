#include "train/run_directory.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>
#include <unistd.h>
#include <utility>

#include "data/datasets.h"
#include "io/atomic_file.h"
#include "io/weights.h"
#include "models/checkpoint.h"

namespace fs = std::filesystem;

namespace nala::train {
namespace {

void write_json(const std::string& path, const nlohmann::json& j) {
  io::write_file_atomic(path, [&](std::ostream& o) { o << j.dump(2) << "\n"; });
}

// Leftovers of a writer that was killed: checkpoints/<step>.tmp.<pid> and .old.<pid> folders and
// <file>.tmp.<pid> files. Only called by the process that holds the run directory's lock.
void remove_stale_temporaries(const std::string& out_dir) {
  for (const fs::path& d : {fs::path(out_dir), fs::path(out_dir) / "checkpoints", fs::path(out_dir) / "samples"}) {
    if (!fs::is_directory(d)) continue;
    for (const auto& e : fs::directory_iterator(d)) {
      const std::string n = e.path().filename().string();
      if (n.find(".tmp.") == std::string::npos && n.find(".old.") == std::string::npos) continue;
      std::cerr << "removing " << e.path().string() << ", left by an interrupted writer\n";
      std::string err;
      if (!io::remove_tree(e.path().string(), &err)) std::cerr << "warning: " << err << "\n";
    }
  }
}

}  // namespace

std::string step_name(int64_t step) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%07ld", step);
  return buf;
}

void check_run_directory(const std::string& out_dir, const TrainConfig& cfg, bool writer) {
  if (!writer) return;
  const std::string cfg_path = out_dir + "/config.json";
  if (io::file_exists(cfg_path)) {
    TrainConfig saved = train_config_from_json(io::read_file(cfg_path), cfg_path);
    // runs on a latent folder recorded the default image size before nala read it from the latents:
    // such a run resumes with the latents' size, recorded from now on
    if (saved.image_size == TrainConfig{}.image_size && cfg.image_size != saved.image_size && saved.data == cfg.data &&
        data::latent_folder_image_size(cfg.data) == cfg.image_size) {
      static bool said = false;  // (checked twice: before the data is opened and as the run opens)
      if (!std::exchange(said, true))
        std::cerr << "note: " << cfg_path << " recorded image_size " << saved.image_size << " for the latents of " << cfg.data << ", which are "
                  << cfg.image_size << " px: recorded as " << cfg.image_size << " from now on\n";
      saved.image_size = cfg.image_size;
    }
    const auto diff = resume_conflicts(saved, cfg);
    if (!diff.empty()) {
      std::string list;
      for (const auto& d : diff) list += "\n  " + d;
      throw std::runtime_error(out_dir + " holds a run with a different configuration (" + cfg_path + "):" + list +
                               "\nresume with the same flags, or use a new --out");
    }
  }
}

void open_run_directory(const std::string& out_dir, const TrainConfig& cfg, bool writer) {
  if (!writer) return;  // rank 0 checks and writes; the others may not even see the directory
  check_run_directory(out_dir, cfg, writer);
  const std::string cfg_path = out_dir + "/config.json";
  remove_stale_temporaries(out_dir);
  io::make_dirs(out_dir + "/checkpoints");
  io::make_dirs(out_dir + "/samples");
  io::write_file_atomic(cfg_path, [&](std::ostream& o) { o << train_config_to_json(cfg) << "\n"; });
}

void save_checkpoint(const std::string& out_dir, const RunState& st, const models::DiT& model, const models::DiT& ema, const AdamW& opt,
                     const diffusion::ObjectiveSettings& objective, int64_t keep_last) {
  const std::string final_dir = out_dir + "/checkpoints/" + step_name(st.step);
  const std::string tmp = final_dir + ".tmp." + std::to_string(::getpid());
  std::string err;
  if (!io::remove_tree(tmp, &err)) throw std::runtime_error(err);
  io::make_dirs(tmp);
  const std::map<std::string, std::string> meta = {{diffusion::kObjectiveMetadataKey, diffusion::objective_to_json(objective)}};
  models::save_model(model, tmp + "/model.safetensors", meta);
  models::save_model(ema, tmp + "/ema.safetensors", meta);
  io::save_safetensors(tmp + "/optimizer.safetensors", opt.state());
  write_json(tmp + "/state.json", {{"step", st.step}, {"epoch", st.epoch}, {"batch_index", st.batch_index}, {"nonfinite", st.nonfinite},
                                   {"images_seen", st.images_seen}, {"model", model.config().name}});
  io::fsync_path(tmp);  // the folder's entries (every file in it was fsynced when written)
  // Into place by renames only, so the previous checkpoint of this step (one that proved unreadable
  // and was skipped on resume) is removed only once its successor is in place.
  std::error_code ec;
  const std::string old = final_dir + ".old." + std::to_string(::getpid());
  if (fs::exists(final_dir)) {
    fs::rename(final_dir, old, ec);
    if (ec) throw std::runtime_error("cannot move the previous checkpoint " + final_dir + " aside: " + ec.message());
  }
  fs::rename(tmp, final_dir, ec);
  if (ec) throw std::runtime_error("cannot move checkpoint " + tmp + " to " + final_dir + ": " + ec.message());
  io::fsync_parent_dir(final_dir);
  // the new checkpoint is in place: a failure to delete an older one costs disk space, not data
  if (!io::remove_tree(old, &err)) std::cerr << "warning: " << err << "\n";
  // keep-last counts this checkpoint and the older ones: one of a later step (none after a resume, which
  // moves unreadable later ones aside) is never the reason the one just written is deleted
  int64_t kept = 0;
  for (const auto& c : list_checkpoints(out_dir)) {
    if (c.step > st.step || kept++ < keep_last) continue;
    if (!io::remove_tree(c.dir, &err)) std::cerr << "warning: " << err << "\n";
  }
}

RunState load_latest_checkpoint(const std::string& out_dir, models::DiT& model, models::DiT& ema, AdamW& opt, bool verbose) {
  RunState st;
  std::vector<std::string> unreadable;  // newest first
  std::string first_error;
  for (const auto& [step, dir] : list_checkpoints(out_dir)) {
    try {
      auto state = nlohmann::json::parse(io::read_file(dir + "/state.json"));
      io::load_state_dict(model, io::load_safetensors(dir + "/model.safetensors"), dir + "/model.safetensors");
      io::load_state_dict(ema, io::load_safetensors(dir + "/ema.safetensors"), dir + "/ema.safetensors");
      opt.load_state(io::load_safetensors(dir + "/optimizer.safetensors"), dir + "/optimizer.safetensors");
      st.step = state.at("step");
      st.epoch = state.at("epoch");
      st.batch_index = state.at("batch_index");
      st.nonfinite = state.at("nonfinite");
      st.images_seen = state.at("images_seen");
      if (verbose) std::cerr << "resuming from " << dir << " (step " << st.step << ")\n";
      // the later, unreadable ones moved aside (kept, no longer listed): this run writes those steps
      // again, and keep-last would count them as its newest checkpoints and delete the new ones
      for (const std::string& u : unreadable) {
        std::string aside = u + ".unreadable";
        if (fs::exists(aside)) aside += "." + std::to_string(::getpid());
        std::error_code ec;
        fs::rename(u, aside, ec);
        if (ec) throw std::runtime_error("cannot move the unreadable checkpoint " + u + " aside to " + aside + ": " + ec.message());
        std::cerr << "moved the unreadable checkpoint " << u << " aside to " << aside << "\n";
      }
      return st;
    } catch (const std::exception& e) {
      if (verbose) std::cerr << "warning: checkpoint " << dir << " is unreadable (" << e.what() << "); trying the previous one\n";
      if (first_error.empty()) first_error = e.what();
      unreadable.push_back(dir);
    }
  }
  // none readable: starting over would overwrite them and keep-last would delete them
  if (!unreadable.empty())
    throw std::runtime_error("none of the " + std::to_string(unreadable.size()) + " checkpoints in " + out_dir + "/checkpoints can be read (the newest, " +
                             unreadable.front() + ": " + first_error + "); move them out of the way to start the run over, or use a new --out");
  return st;
}

}  // namespace nala::train
