// Every sampler nala offers, in one table {name, objective, function, help}: the table serves
// name resolution, generate() and the CLI's --help, so a new sampler is one new row (and its file).
// SamplingOptions carries what any of them reads; each row's function picks its part.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include "diffusion/transport.h"
#include "samplers/flow_sde.h"
#include "samplers/sampler.h"

namespace nala::samplers {

enum class Objective { Ddpm, Flow };
Objective parse_objective(const std::string& s);  // "ddpm", "flow"; throws with the known names
const char* objective_name(Objective o);

struct SamplingOptions {
  std::string sampler = "auto";    // a name of sampler_table(); auto: the objective's default
  std::string objective = "auto";  // ddpm or flow; auto from the model family
  int64_t steps = 250;             // DDPM/DDIM/DPM++: model evaluations; ODE/SDE: grid points
  double cfg_scale = 1.0;
  int64_t cfg_channels = 3;        // 3: the official guidance; -1: all channels
  double eta = 0.0;                // DDIM
  bool clip_denoised = false;      // DDPM/DDIM (the DiT scripts: false)
  std::string schedule = "linear", variance = "auto";    // DDPM process ("auto": learned-range if learn_sigma)
  std::string path = "Linear", prediction = "velocity";  // flow process
  double atol = 1e-6, rtol = 1e-3;                       // dopri5
  diffusion::DiffusionForm diffusion_form = diffusion::DiffusionForm::Sigma;  // SDE samplers
  LastStep last_step = LastStep::Mean;
  double last_step_size = 0.04;
  std::string dpm_spacing = "logsnr";
  bool cuda_graphs = false;  // the network call replayed as a CUDA graph (samplers/graphed_net.h); same results
};

// Runs one sampler: f is the (guided) model call, x_init (N, C, h, w) the starting noise.
using SamplerFn = SampleResult (*)(const ModelFn& f, const SamplingOptions& o, const at::Tensor& x_init, std::optional<at::Generator> gen,
                                   const ProgressFn& progress);

struct SamplerInfo {
  const char* name;
  Objective objective;
  SamplerFn run;
  const char* help;
};

const std::vector<SamplerInfo>& sampler_table();
// The row named `name`; throws with every known name.
const SamplerInfo& find_sampler(const std::string& name);
// "ddpm, ddim, ..." and a multi-line "name (objective): help" listing for --help.
std::string sampler_names();
std::string sampler_help();
// The sampler used when --sampler is auto.
const char* default_sampler(Objective o);

}  // namespace nala::samplers
