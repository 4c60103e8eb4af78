// Fréchet distance between two Gaussians fitted to features (FID, sFID).
#pragma once
#include <ATen/core/Tensor.h>

namespace nala::metrics {

// Fréchet distance ‖μ1 − μ2‖² + tr Σ1 + tr Σ2 − 2 tr √(Σ1 Σ2) (Heusel et al. 2017, eq. 6), with
// tr √(Σ1Σ2) = Σ √λ_i(A Σ2 A), A = Σ1^½ by symmetric eigendecompositions in float64 (negative
// eigenvalues clamped to 0). If the result is not finite, ε = 1e-6 is added to both diagonals,
// as ADM's evaluator does (evaluator.py:96-104).
double frechet_distance(const at::Tensor& mu1, const at::Tensor& sigma1, const at::Tensor& mu2, const at::Tensor& sigma2);

}  // namespace nala::metrics
