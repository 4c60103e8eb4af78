#include "ops/cuda/column_sum.h"

#include <algorithm>

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

void sum_partials_into(const std::vector<PartialSums>& sums) {
  TORCH_CHECK(!sums.empty() && sums.size() <= size_t(kMaxPartialSumsSegments), "sum_partials_into: ", sums.size(), " pairs (1 to ",
              kMaxPartialSumsSegments, ")");
  std::vector<PartialSumsSegment> segments;
  for (size_t i = 0; i < sums.size(); ++i) {
    const at::Tensor &part = sums[i].part, &out = sums[i].out;
    TORCH_CHECK(part.defined() && out.defined() && part.is_cuda() && part.scalar_type() == at::kFloat && part.dim() >= 2 && part.size(0) >= 1,
                "sum_partials_into: pair ", i, ": part must be float32 (K ≥ 1, ...) on CUDA, got ",
                part.defined() ? c10::str(part.sizes(), " ", part.scalar_type(), " on ", part.device()) : std::string("undefined"));
    TORCH_CHECK(part.select(0, 0).is_contiguous() && part.stride(0) >= part.select(0, 0).numel(), "sum_partials_into: pair ", i, ": part ",
                part.sizes(), " with strides ", part.strides(), " must hold each partial contiguous");
    TORCH_CHECK(out.scalar_type() == at::kFloat && out.device() == part.device() && out.sizes() == part.sizes().slice(1), "sum_partials_into: pair ", i,
                ": out must be float32 ", part.sizes().slice(1), " on ", part.device(), ", got ", out.sizes(), " ", out.scalar_type(), " on ",
                out.device());
    std::vector<int64_t> shape, strides;  // out as (C) or (R, W): unit dimensions dropped, dense neighbours merged
    for (int64_t d = 0; d < out.dim(); ++d) {
      if (out.size(d) == 1) continue;
      if (!shape.empty() && strides.back() == out.stride(d) * out.size(d)) {
        shape.back() *= out.size(d);
        strides.back() = out.stride(d);
      } else {
        shape.push_back(out.size(d));
        strides.push_back(out.stride(d));
      }
    }
    TORCH_CHECK(shape.size() <= 2, "sum_partials_into: pair ", i, ": out ", out.sizes(), " has more than two dimensions of size > 1 that are not one dense block");
    const int64_t cols = out.numel();
    TORCH_CHECK(part.size(0) <= INT32_MAX && cols <= INT32_MAX - 31, "sum_partials_into: pair ", i, ": ", part.sizes(), " is too large");
    PartialSumsSegment g;
    g.part = part.data_ptr<float>();
    g.ld = part.stride(0);
    g.splits = int(part.size(0));
    g.cols = int(cols);
    g.width = shape.size() == 2 ? int(shape[1]) : int(std::max<int64_t>(cols, 1));
    g.out = out.data_ptr<float>();
    g.out_row = shape.size() == 2 ? strides[0] : 0;
    g.out_col = shape.empty() ? 1 : strides.back();
    if (cols > 0) segments.push_back(g);
  }
  if (segments.empty()) return;
  const c10::cuda::CUDAGuard guard(sums[0].part.device());
  launch_sum_partials_into(segments.data(), int(segments.size()), at::cuda::getCurrentCUDAStream().stream());
}

}  // namespace nala::ops::cuda
