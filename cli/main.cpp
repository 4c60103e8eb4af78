// nala: train, sample and evaluate diffusion transformers (DiT, SiT, NaLaDiT, NaLaSiT).
// This file only dispatches to the sub-commands; each lives in its own file in cli/.
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

#include <c10/util/Exception.h>
#include <cxxopts.hpp>

#include "cli/commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

const Command kCommands[] = {
    {"train", nala::cli::run_train, "train a model (DDPM or flow matching) on images, latents or Fashion-MNIST"},
    {"sample", nala::cli::run_sample, "sample images from a checkpoint: a PNG grid, or N samples to an .npz for FID"},
    {"eval", nala::cli::run_eval, "FID, sFID, IS, precision and recall of a sample .npz against a reference .npz"},
    {"extract-latents", nala::cli::run_extract_latents, "encode an image folder once with the VAE into latent shards"},
    {"forward", nala::cli::run_forward, "one model forward pass on x, t, y from an .npz (checkpoint parity checks)"},
    {"convert", nala::cli::run_convert, "official DiT/SiT .pt checkpoints and other weights to safetensors"},
    {"bench", nala::cli::run_bench, "benchmarks (attention kernels, training step, sampling) as tables"},
};

void usage(std::ostream& os) {
  os << "usage: nala <command> [options]    (nala <command> --help for its options)\n\ncommands:\n";
  for (const auto& c : kCommands) os << "  " << c.name << std::string(18 - std::strlen(c.name), ' ') << c.summary << "\n";
  os << "\n  --version         print the version, the LibTorch version and the CUDA device\n";
}

// The flag a value that failed to parse was given to (cxxopts' message names the value alone):
// "--flag value" or "--flag=value" in argv; empty when the value is not found.
std::string flag_of_value(const std::string& message, int argc, char** argv) {
  const std::string lq = cxxopts::LQUOTE, rq = cxxopts::RQUOTE;
  const size_t a = message.find(lq), b = message.rfind(rq);
  if (a == std::string::npos || b == std::string::npos || b < a + lq.size()) return "";
  const std::string value = message.substr(a + lq.size(), b - a - lq.size());
  for (int i = 2; i < argc; ++i) {
    const std::string t = argv[i];
    if (t == value && std::string(argv[i - 1]).rfind("-", 0) == 0) return argv[i - 1];  // (a value may begin with '-')
    const size_t eq = t.find('=');
    if (t.rfind("--", 0) == 0 && eq != std::string::npos && t.substr(eq + 1) == value) return t.substr(0, eq);
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  nala::cli::install_fatal_signal_handler();
  if (argc < 2) {
    usage(std::cerr);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    usage(std::cout);
    return 0;
  }
  if (cmd == "--version") {
    nala::cli::print_version();
    return 0;
  }
  for (const auto& c : kCommands) {
    if (cmd != c.name) continue;
    std::string prog = std::string("nala ") + c.name;
    argv[1] = prog.data();
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const cxxopts::exceptions::incorrect_argument_type& e) {  // names the value, not its flag
      const std::string flag = flag_of_value(e.what(), argc, argv);
      std::cerr << "error: " << (flag.empty() ? "" : flag + ": ") << e.what() << " (not a value of the flag's type; --help lists the flags)\n";
    } catch (const c10::Error& e) {
      std::cerr << "error: " << e.what_without_backtrace() << "\n";
    } catch (const std::exception& e) {
      std::cerr << "error: " << e.what() << "\n";
    }
    return 1;
  }
  std::cerr << "nala: unknown command '" << cmd << "'\n\n";
  usage(std::cerr);
  return 2;
}
