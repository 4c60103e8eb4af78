// Column sums a backward already has, handed to the backward that would otherwise compute them.
// A fused kernel that writes a gradient g (R, C) can often sum its rows on the way for nearly
// nothing; a later backward that needs Σ_rows g (a linear layer's bias gradient, ops/linear.h
// linear_grads) takes those sums instead of reading g again. The training backward of the gated
// residual + LayerNorm-modulate (ops/block_ops.cpp) offers Σ_rows dy, the bias gradient of the layer
// whose output y is (attention's proj, the MLP's fc2): at DiT-S/2 two column sums of 50 MB a block.
//
// An offer names the very tensor, contiguous: its storage (held weakly), offset, element count and
// version counter. take_column_sums(g2) returns the sums only for a contiguous tensor with all four
// equal (a view such as g.reshape(-1, C) qualifies; a copy, another tensor, a transposed alias or g
// changed in place since does not) and uses the offer up. Offers live on the thread that made them (the autograd engine's device thread, where the
// consumer's backward runs too); the last kMaxOffers are kept.
#pragma once
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace nala::ops {

constexpr int kMaxOffers = 4;
// sums (C) float32 = Σ over all but the last dimension of g (…, C) contiguous, on g's device
void offer_column_sums(const at::Tensor& g, const at::Tensor& sums);
// the sums offered for g2 (any shape with g's storage, offset, element count and version), used up; else undefined
at::Tensor take_column_sums(const at::Tensor& g2);
int64_t column_sums_taken();  // in this process so far: tests count them

}  // namespace nala::ops
