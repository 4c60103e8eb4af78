#include "samplers/generate.h"

#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "models/dit.h"
#include "samplers/flow_likelihood.h"
#include "samplers/graphed_net.h"
#include "samplers/guidance.h"

namespace nala::samplers {

SamplingOptions resolve(SamplingOptions o, const models::DiT& model) {
  const auto& c = model.config();
  if (o.objective == "auto") o.objective = c.family == "SiT" ? "flow" : "ddpm";
  const Objective objective = parse_objective(o.objective);
  if (o.sampler == "auto") o.sampler = default_sampler(objective);
  const SamplerInfo& s = find_sampler(o.sampler);
  if (s.objective != objective)
    throw std::runtime_error("sampler '" + o.sampler + "' needs a " + (s.objective == Objective::Ddpm ? "DDPM" : "flow-matching") + " model, but " +
                             c.name + " is sampled as " + o.objective);
  if (o.variance == "auto") o.variance = c.learn_sigma ? "learned-range" : "fixed-small";
  if (o.steps < 1) throw std::runtime_error("--steps must be positive, got " + std::to_string(o.steps));
  if (o.cfg_scale < 1.0) throw std::runtime_error("--cfg-scale must be >= 1, got " + std::to_string(o.cfg_scale));
  return o;
}

SampleResult generate(models::DiT& model, const SamplingOptions& opt, const at::Tensor& x_init, const at::Tensor& y,
                      std::optional<at::Generator> gen, const ProgressFn& progress) {
  const SamplingOptions o = resolve(opt, model);
  torch::NoGradGuard ng;
  const auto dtype = model.parameters()[0].scalar_type();
  LabelledNet net = [&model, dtype](const at::Tensor& x, const at::Tensor& t, const at::Tensor& yy) {
    return model.forward(x.to(dtype), t, yy).to(at::kFloat);
  };
  if (o.cuda_graphs) net = graphed(net);
  const auto& c = model.config();
  ModelFn f = classifier_free_guidance(net, y, c.num_classes, o.cfg_scale, o.cfg_channels, c.in_channels);
  return find_sampler(o.sampler).run(f, o, x_init, gen, progress);
}

ModelLikelihood likelihood(models::DiT& model, const SamplingOptions& so, const at::Tensor& x, const at::Tensor& y, int64_t num_points,
                           at::Generator gen) {
  if (so.objective != "flow")
    throw std::runtime_error("likelihood needs a flow-matching (SiT-family) model; " + model.config().name + " is sampled as " + so.objective);
  diffusion::TransportConfig tc;
  tc.path = diffusion::parse_path_type(so.path);
  tc.prediction = diffusion::parse_prediction(so.prediction);
  diffusion::Transport tr(tc);
  auto [t0, t1] = tr.interval(true, false);
  ModelFn drift = [&](const at::Tensor& xx, const at::Tensor& t) { return tr.velocity(model.forward(xx, t, y), xx, t); };
  Likelihood r = ode_likelihood(drift, x, t0, t1, num_points, gen);
  const double dims = double(x[0].numel());
  return {-r.log_p.cpu() / (dims * std::log(2.0)), r.nfe};
}

}  // namespace nala::samplers
