#include "samplers/sampler_table.h"

#include <stdexcept>

#include "diffusion/gaussian_diffusion.h"
#include "samplers/ddim.h"
#include "samplers/ddpm.h"
#include "samplers/dopri5.h"
#include "samplers/dpm_solver.h"
#include "samplers/flow_ode.h"

namespace nala::samplers {
namespace {

diffusion::GaussianDiffusion process(const SamplingOptions& o, const std::string& respacing) {
  return diffusion::GaussianDiffusion(o.schedule, 1000, respacing, diffusion::parse_variance_type(o.variance));
}

diffusion::Transport transport(const SamplingOptions& o) {
  diffusion::TransportConfig tc;
  tc.path = diffusion::parse_path_type(o.path);
  tc.prediction = diffusion::parse_prediction(o.prediction);
  return diffusion::Transport(tc);
}

SampleResult run_ddpm(const ModelFn& f, const SamplingOptions& o, const at::Tensor& x, std::optional<at::Generator> gen, const ProgressFn& p) {
  return sample_ddpm(f, process(o, std::to_string(o.steps)), x, o.clip_denoised, gen, p);
}
SampleResult run_ddim(const ModelFn& f, const SamplingOptions& o, const at::Tensor& x, std::optional<at::Generator> gen, const ProgressFn& p) {
  return sample_ddim(f, process(o, "ddim" + std::to_string(o.steps)), x, o.eta, o.clip_denoised, gen, p);
}
SampleResult run_dpm(const ModelFn& f, const SamplingOptions& o, const at::Tensor& x, std::optional<at::Generator>, const ProgressFn& p) {
  const auto base = process(o, "");
  return sample_dpm_solver_pp(f, base, x, dpm_solver_timesteps(base, o.steps, o.dpm_spacing), p);
}
SampleResult run_ode_euler(const ModelFn& f, const SamplingOptions& o, const at::Tensor& x, std::optional<at::Generator>, const ProgressFn& p) {
  return sample_ode_fixed(f, transport(o), x, o.steps, FixedMethod::Euler, p);
}
SampleResult run_ode_heun(const ModelFn& f, const SamplingOptions& o, const at::Tensor& x, std::optional<at::Generator>, const ProgressFn& p) {
  return sample_ode_fixed(f, transport(o), x, o.steps, FixedMethod::Heun, p);
}
SampleResult run_dopri5(const ModelFn& f, const SamplingOptions& o, const at::Tensor& x, std::optional<at::Generator>, const ProgressFn&) {
  return sample_ode_dopri5(f, transport(o), x, o.atol, o.rtol);
}
SampleResult run_sde(SdeMethod m, const ModelFn& f, const SamplingOptions& o, const at::Tensor& x, std::optional<at::Generator> gen,
                     const ProgressFn& p) {
  SdeOptions so;
  so.method = m;
  so.diffusion_form = o.diffusion_form;
  so.last_step = o.last_step;
  so.last_step_size = o.last_step_size;
  so.num_points = o.steps;
  return sample_sde(f, transport(o), x, so, gen, p);
}
SampleResult run_sde_euler(const ModelFn& f, const SamplingOptions& o, const at::Tensor& x, std::optional<at::Generator> gen, const ProgressFn& p) {
  return run_sde(SdeMethod::Euler, f, o, x, gen, p);
}
SampleResult run_sde_heun(const ModelFn& f, const SamplingOptions& o, const at::Tensor& x, std::optional<at::Generator> gen, const ProgressFn& p) {
  return run_sde(SdeMethod::Heun, f, o, x, gen, p);
}

}  // namespace

Objective parse_objective(const std::string& s) {
  if (s == "ddpm") return Objective::Ddpm;
  if (s == "flow") return Objective::Flow;
  throw std::runtime_error("unknown objective '" + s + "' (known: ddpm, flow)");
}

const char* objective_name(Objective o) { return o == Objective::Ddpm ? "ddpm" : "flow"; }

const std::vector<SamplerInfo>& sampler_table() {
  static const std::vector<SamplerInfo> table = {
      {"ddpm", Objective::Ddpm, run_ddpm, "ancestral DDPM over the respaced process (ADM p_sample_loop); --steps model calls"},
      {"ddim", Objective::Ddpm, run_ddim, "DDIM (--eta 0: deterministic); --steps model calls"},
      {"dpm++", Objective::Ddpm, run_dpm, "DPM-Solver++(2M), steps uniform in log-SNR; --steps model calls"},
      {"ode-euler", Objective::Flow, run_ode_euler, "probability-flow ODE, Euler on --steps grid points"},
      {"ode-heun", Objective::Flow, run_ode_heun, "probability-flow ODE, Heun on --steps grid points (2 calls a step)"},
      {"dopri5", Objective::Flow, run_dopri5, "probability-flow ODE, adaptive Dormand-Prince 5(4) (SiT's default)"},
      {"sde-euler", Objective::Flow, run_sde_euler, "reverse SDE, Euler-Maruyama on --steps grid points"},
      {"sde-heun", Objective::Flow, run_sde_heun, "reverse SDE, stochastic Heun on --steps grid points"},
  };
  return table;
}

std::string sampler_names() {
  std::string s;
  for (const auto& e : sampler_table()) s += (s.empty() ? "" : ", ") + std::string(e.name);
  return s;
}

std::string sampler_help() {
  std::string s;
  for (const auto& e : sampler_table()) s += std::string("  ") + e.name + " (" + objective_name(e.objective) + "): " + e.help + "\n";
  return s;
}

const SamplerInfo& find_sampler(const std::string& name) {
  for (const auto& e : sampler_table())
    if (name == e.name) return e;
  throw std::runtime_error("unknown sampler '" + name + "' (known: " + sampler_names() + ")");
}

const char* default_sampler(Objective o) { return o == Objective::Ddpm ? "ddpm" : "ode-heun"; }

}  // namespace nala::samplers
