// Options of NaLa attention and its baselines (docs/nala_attention.md §3-§4, defaults there).
// Shapes in attention/: q, k, v, o are (B, H, N, d): batch, heads, tokens, head dim; feature maps
// produce F features per token (F = 2d for the nala variants, d for the baselines).
#pragma once
#include <cstdint>
#include <string>

namespace nala::attention {

enum class FeatureMap : int {
  Nala = 0,      // cosine direction, norm-aware query power (the paper; default)
  NalaRelu = 1,  // [relu(x̂)^p, relu(-x̂)^p] (the authors' public code)
  Elu = 2,       // elu(x) + 1
  Relu = 3,      // relu(x)
  Focused = 4,   // FLatten: ‖relu x‖ / ‖relu(x)^3‖ · relu(x)^3
};

struct NalaOptions {
  FeatureMap feature_map = FeatureMap::Nala;
  double lambda = 3.0;     // λ: key power, and scale of the query power p(n) = λ(τ + tanh n)
  double tau = 0.5;        // τ
  double alpha = 1.0;      // α: angle scale, θ = (π/4) tanh(α x̂)   (§7: 1 vs 20 is an open choice)
  double eps = 1e-6;       // ε of the output normaliser φ_q·z + ε
  double eps_norm = 1e-6;  // ε_n of x̂ = x / max(‖x‖, ε_n)
  double focus_power = 3;  // power of the `focused` baseline
};

// "nala", "nala-relu", "elu", "relu", "focused"; throws with the known names otherwise.
FeatureMap parse_feature_map(const std::string& name);
std::string feature_map_name(FeatureMap f);
// F for head dim d.
inline int64_t feature_dim(FeatureMap f, int64_t d) {
  return (f == FeatureMap::Nala || f == FeatureMap::NalaRelu) ? 2 * d : d;
}

}  // namespace nala::attention
