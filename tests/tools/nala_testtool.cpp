// nala_testtool: lets the Python oracle tests (tests/python) call the C++ readers and writers on
// files made by independent implementations (numpy, safetensors, Pillow, torch). Not installed;
// not for users.
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "data/datasets.h"
#include "diffusion/gaussian_diffusion.h"
#include "models/vae.h"
#include "metrics/inception.h"
#include "metrics/frechet_distance.h"
#include "metrics/inception_score.h"
#include "metrics/precision_recall.h"
#include "metrics/statistics.h"
#include "io/image.h"
#include "io/npz.h"
#include "io/safetensors.h"

using namespace nala;

namespace {

int usage() {
  std::cerr << "usage: nala_testtool <npz-copy IN OUT [compress] | npz-stream-copy IN KEY ROWS OUT | safetensors-copy IN OUT |\n"
               "                      image-decode IN OUT.npz | center-crop IN SIZE OUT.npz |\n"
               "                      pil-resize IN.npz W H box|bilinear|bicubic OUT.npz | fmnist DIR SPLIT OUT.npz>\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string cmd = argv[1];
  std::vector<std::string> a(argv + 2, argv + argc);
  try {
    if (cmd == "npz-copy" && a.size() >= 2) {
      io::save_npz(a[1], io::load_npz(a[0]), a.size() > 2 && a[2] == "compress");
    } else if (cmd == "npz-stream-copy" && a.size() == 4) {
      io::NpzArrayReader r(a[0], a[1]);
      io::NpzWriter w(a[3], false);
      w.begin(a[1], r.dtype(), r.shape());
      while (r.rows_left() > 0) w.append(r.read_rows(std::stoll(a[2])));
      w.close();
    } else if (cmd == "safetensors-copy" && a.size() == 2) {
      std::map<std::string, std::string> meta;
      auto t = io::load_safetensors(a[0], &meta);
      io::save_safetensors(a[1], t, meta);
    } else if (cmd == "image-decode" && a.size() == 2) {
      io::save_npz(a[1], {{"arr_0", io::read_image(a[0])}});
    } else if (cmd == "center-crop" && a.size() == 3) {
      io::save_npz(a[2], {{"arr_0", io::center_crop_adm(io::read_image(a[0]), std::stoll(a[1]))}});
    } else if (cmd == "pil-resize" && a.size() == 5) {
      auto in = io::load_npz(a[0]).at(0).second;
      const std::string f = a[3];
      io::ResampleFilter filt = f == "box" ? io::ResampleFilter::Box : f == "bilinear" ? io::ResampleFilter::Bilinear : io::ResampleFilter::Bicubic;
      io::save_npz(a[4], {{"arr_0", io::pil_resize(in, std::stoll(a[1]), std::stoll(a[2]), filt)}});
    } else if (cmd == "diffusion-tables" && a.size() == 5) {
      diffusion::GaussianDiffusion d(a[0], std::stoll(a[1]), a[2] == "-" ? "" : a[2], diffusion::parse_variance_type(a[3]));
      auto t = [](const std::vector<double>& v) { return at::tensor(v, at::kDouble); };
      io::save_npz(a[4], {{"betas", t(d.betas)}, {"alphas_cumprod", t(d.alphas_cumprod)}, {"alphas_cumprod_prev", t(d.alphas_cumprod_prev)},
                          {"alphas_cumprod_next", t(d.alphas_cumprod_next)}, {"sqrt_recipm1_alphas_cumprod", t(d.sqrt_recipm1_alphas_cumprod)},
                          {"posterior_variance", t(d.posterior_variance)}, {"posterior_log_variance_clipped", t(d.posterior_log_variance_clipped)},
                          {"posterior_mean_coef1", t(d.posterior_mean_coef1)}, {"posterior_mean_coef2", t(d.posterior_mean_coef2)},
                          {"timestep_map", at::tensor(d.timestep_map, at::kLong)}});
    } else if (cmd == "diffusion-loss" && a.size() == 3) {
      // IN: x0, t, noise, model_out (float32) for the 1000-step linear process with variance type a[1]
      std::map<std::string, at::Tensor> in;
      for (auto& [k, v] : io::load_npz(a[0])) in[k] = v;
      diffusion::GaussianDiffusion d("linear", 1000, "", diffusion::parse_variance_type(a[1]));
      at::Tensor seen_x, seen_t;
      auto model = [&](const at::Tensor& x, const at::Tensor& t) { seen_x = x; seen_t = t; return in["model_out"]; };
      auto L = d.training_losses(model, in["x0"], in["t"], in["noise"]);
      io::save_npz(a[2], {{"loss", L.loss}, {"mse", L.mse}, {"vb", L.vb}, {"xt", seen_x}, {"t_model", seen_t}});
    } else if (cmd == "vae" && a.size() == 3) {
      // vae WEIGHTS IN.npz OUT.npz: encodes arr "images" (mean, unscaled moments too), decodes "latents", tiled too
      auto vae = models::load_vae(a[0]);
      std::map<std::string, at::Tensor> in;
      for (auto& [k, v] : io::load_npz(a[1])) in[k] = v;
      io::NamedTensors out;
      if (in.count("images")) {
        auto [mu, logvar] = vae->encode_moments(in["images"]);
        out.emplace_back("mean", mu.detach());
        out.emplace_back("logvar", logvar.detach());
        out.emplace_back("latents_scaled", vae->encode(in["images"], true));
        if (in["images"].size(2) > 64) out.emplace_back("latents_tiled", vae->encode_tiled(in["images"], true, 64));
      }
      if (in.count("latents")) {
        out.emplace_back("decoded", vae->decode(in["latents"]));
        out.emplace_back("decoded_tiled", vae->decode_tiled(in["latents"], 64));
      }
      io::save_npz(a[2], out);
    } else if (cmd == "inception" && a.size() == 3) {
      // inception WEIGHTS IN.npz OUT.npz: IN has "x" (N, 3, 299, 299) normalised and/or "images" uint8 NHWC
      auto net = metrics::load_inception(a[0]);
      std::map<std::string, at::Tensor> in;
      for (auto& [k, v] : io::load_npz(a[1])) in[k] = v;
      io::NamedTensors out;
      if (in.count("x")) {
        auto f = net->forward_normalised(in["x"]);
        out.insert(out.end(), {{"pool", f.pool}, {"spatial", f.spatial}, {"logits", f.logits}});
      }
      if (in.count("images")) {
        auto f = net->forward_uint8(in["images"]);
        out.insert(out.end(), {{"pool_u8", f.pool}, {"spatial_u8", f.spatial}, {"logits_u8", f.logits}});
      }
      io::save_npz(a[2], out);
    } else if (cmd == "tf-resize" && a.size() == 4) {
      auto x = io::load_npz(a[0]).at(0).second;
      io::save_npz(a[3], {{"out", metrics::tf1_resize_bilinear(x, std::stoll(a[1]), std::stoll(a[2]))}});
    } else if (cmd == "metrics" && a.size() == 2) {
      // metrics IN.npz OUT.npz: IN has a, b (features), logits; FID of (a, b) with a first, IS of logits, P/R (ref a, samples b)
      std::map<std::string, at::Tensor> in;
      for (auto& [k, v] : io::load_npz(a[0])) in[k] = v;
      metrics::RunningStats sa(in["a"].size(1)), sb(in["b"].size(1));
      for (int64_t i = 0; i < in["a"].size(0); i += 37) sa.add(in["a"].narrow(0, i, std::min<int64_t>(37, in["a"].size(0) - i)));
      sb.add(in["b"]);
      const double fid = metrics::frechet_distance(sb.mean(), sb.covariance(), sa.mean(), sa.covariance());
      const double is = metrics::inception_score(in["logits"], std::stoll(in.count("split") ? std::to_string(in["split"].item<int64_t>()) : "5000"));
      auto pr = metrics::precision_recall(in["a"], in["b"], 3, 64);
      io::save_npz(a[1], {{"fid", at::tensor(fid, at::kDouble)}, {"is", at::tensor(is, at::kDouble)}, {"precision", at::tensor(pr.precision, at::kDouble)},
                          {"recall", at::tensor(pr.recall, at::kDouble)}, {"mu_a", sa.mean()}, {"sigma_a", sa.covariance()},
                          {"radii_a", metrics::manifold_radii(in["a"], 3, 64)}});
    } else if (cmd == "fmnist" && a.size() == 3) {
      auto d = data::read_fashion_mnist(a[0], a[1]);
      io::save_npz(a[2], {{"images", d.images}, {"labels", d.labels}});
    } else {
      return usage();
    }
  } catch (const c10::Error& e) {
    std::cerr << "error: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
