#include "diffusion/sampling.h"

#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "diffusion/dit.h"
#include "diffusion/gaussian_diffusion.h"
#include "diffusion/transport.h"
#include "samplers/ddim.h"
#include "samplers/ddpm.h"
#include "samplers/dopri5.h"
#include "samplers/dpm_solver.h"
#include "samplers/flow_ode.h"
#include "samplers/flow_sde.h"
#include "samplers/guidance.h"

namespace nala::diffusion {

SamplingOptions resolve(SamplingOptions o, const DiT& model) {
  const auto& c = model.config();
  if (o.objective == "auto") o.objective = c.family == "SiT" ? "flow" : "ddpm";
  if (o.objective != "ddpm" && o.objective != "flow") throw std::runtime_error("unknown objective '" + o.objective + "' (known: ddpm, flow)");
  if (o.sampler == "auto") o.sampler = o.objective == "ddpm" ? "ddpm" : "ode-heun";
  const bool ddpm_sampler = o.sampler == "ddpm" || o.sampler == "ddim" || o.sampler == "dpm++";
  const bool flow_sampler = o.sampler == "ode-euler" || o.sampler == "ode-heun" || o.sampler == "dopri5" || o.sampler == "sde-euler" ||
                            o.sampler == "sde-heun";
  if (!ddpm_sampler && !flow_sampler)
    throw std::runtime_error("unknown sampler '" + o.sampler + "' (known: ddpm, ddim, dpm++, ode-euler, ode-heun, dopri5, sde-euler, sde-heun)");
  if (ddpm_sampler && o.objective != "ddpm")
    throw std::runtime_error("sampler '" + o.sampler + "' needs a DDPM model, but " + c.name + " is sampled as " + o.objective);
  if (flow_sampler && o.objective != "flow")
    throw std::runtime_error("sampler '" + o.sampler + "' needs a flow-matching model, but " + c.name + " is sampled as " + o.objective);
  if (o.variance == "auto") o.variance = c.learn_sigma ? "learned-range" : "fixed-small";
  if (o.steps < 1) throw std::runtime_error("--steps must be positive, got " + std::to_string(o.steps));
  if (o.cfg_scale < 1.0) throw std::runtime_error("--cfg-scale must be >= 1, got " + std::to_string(o.cfg_scale));
  return o;
}

samplers::SampleResult generate(DiT& model, const SamplingOptions& opt, const at::Tensor& x_init, const at::Tensor& y,
                                std::optional<at::Generator> gen, const samplers::ProgressFn& progress) {
  const SamplingOptions o = resolve(opt, model);
  torch::NoGradGuard ng;
  const auto dtype = model.parameters()[0].scalar_type();
  samplers::LabelledNet net = [&model, dtype](const at::Tensor& x, const at::Tensor& t, const at::Tensor& yy) {
    return model.forward(x.to(dtype), t, yy).to(at::kFloat);
  };
  const auto& c = model.config();
  const int64_t model_channels = c.in_channels;
  samplers::ModelFn f = samplers::classifier_free_guidance(net, y, c.num_classes, o.cfg_scale, o.cfg_channels, model_channels);
  if (o.objective == "ddpm") {
    const auto vt = parse_variance_type(o.variance);
    if (o.sampler == "dpm++") {
      GaussianDiffusion base(o.schedule, 1000, "", vt);
      return samplers::sample_dpm_solver_pp(f, base, x_init, samplers::dpm_solver_timesteps(base, o.steps, o.dpm_spacing), progress);
    }
    const std::string respacing = o.sampler == "ddim" ? "ddim" + std::to_string(o.steps) : std::to_string(o.steps);
    GaussianDiffusion d(o.schedule, 1000, respacing, vt);
    if (o.sampler == "ddim") return samplers::sample_ddim(f, d, x_init, o.eta, o.clip_denoised, gen, progress);
    return samplers::sample_ddpm(f, d, x_init, o.clip_denoised, gen, progress);
  }
  TransportConfig tc;
  tc.path = parse_path_type(o.path);
  tc.prediction = parse_prediction(o.prediction);
  Transport tr(tc);
  if (o.sampler == "ode-euler") return samplers::sample_ode_fixed(f, tr, x_init, o.steps, samplers::FixedMethod::Euler, progress);
  if (o.sampler == "ode-heun") return samplers::sample_ode_fixed(f, tr, x_init, o.steps, samplers::FixedMethod::Heun, progress);
  if (o.sampler == "dopri5") return samplers::sample_ode_dopri5(f, tr, x_init, o.atol, o.rtol);
  samplers::SdeOptions so;
  so.method = o.sampler == "sde-euler" ? "Euler" : "Heun";
  so.diffusion_form = o.diffusion_form;
  so.last_step = o.last_step;
  so.last_step_size = o.last_step_size;
  so.num_points = o.steps;
  return samplers::sample_sde(f, tr, x_init, so, gen, progress);
}

}  // namespace nala::diffusion
