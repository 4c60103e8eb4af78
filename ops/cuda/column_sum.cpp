#include "ops/cuda/column_sum.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "ops/cuda/column_sum_kernels.h"

namespace nala::ops::cuda {

bool column_sum_supported(const at::Tensor& x) {
  if (!x.is_cuda() || x.dim() != 2 || !x.is_contiguous()) return false;
  const auto st = x.scalar_type();
  if (st != at::kFloat && st != at::kBFloat16 && st != at::kHalf) return false;
  if (x.size(1) == 0 || x.size(1) > (int64_t(1) << 30)) return false;
  return (x.size(1) * x.element_size()) % 16 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
}

at::Tensor column_sum(const at::Tensor& x) {
  TORCH_CHECK(column_sum_supported(x), "column_sum: needs a contiguous (R, C) CUDA float32/bf16/fp16 matrix with 16-byte rows, got ",
              x.sizes(), " ", x.scalar_type());
  const c10::cuda::CUDAGuard guard(x.device());
  const auto f32 = x.options().dtype(at::kFloat);
  if (x.size(0) == 0) return at::zeros({x.size(1)}, f32);
  ColumnSumParams p;
  p.x = x.data_ptr();
  p.R = x.size(0);
  p.C = int(x.size(1));
  p.element_size = int(x.element_size());
  p.bf16 = x.scalar_type() == at::kBFloat16;
  column_sum_plan(p, at::cuda::getCurrentDeviceProperties()->multiProcessorCount);
  at::Tensor part = at::empty({p.splits, p.C}, f32), out = at::empty({p.C}, f32);  // (splits, C), (C)
  p.part = part.data_ptr<float>();
  p.out = out.data_ptr<float>();
  launch_column_sum(p, at::cuda::getCurrentCUDAStream().stream());
  return out;
}

at::Tensor sum_partials(const at::Tensor& part) {
  TORCH_CHECK(part.is_cuda() && part.scalar_type() == at::kFloat && part.is_contiguous() && part.dim() >= 1,
              "sum_partials: needs contiguous float32 CUDA partial sums (K, ...), got ", part.sizes(), " ", part.scalar_type());
  const c10::cuda::CUDAGuard guard(part.device());
  const int64_t K = part.size(0), C = K == 0 ? 0 : part.numel() / K;
  TORCH_CHECK(K <= INT32_MAX && C <= INT32_MAX, "sum_partials: ", part.sizes(), " is too large");
  at::Tensor out = at::empty(part.sizes().slice(1), part.options());  // part.shape[1:]
  if (K == 0) return out.zero_();
  if (C > 0) launch_column_sum_final(part.data_ptr<float>(), int(K), int(C), out.data_ptr<float>(), at::cuda::getCurrentCUDAStream().stream());
  return out;
}

}  // namespace nala::ops::cuda
