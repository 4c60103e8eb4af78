#include "ops/patch_embed.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "ops/fused_ops.h"
#include "ops/linear.h"
#include "ops/weight_casts.h"

#ifdef NALA_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "ops/cuda/patch_embed_kernels.h"
#endif

namespace nala::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

#ifdef NALA_WITH_CUDA
// pb (R, K) and wc (D, K) bf16, pos (1, T, D) float32 → (R, D) float32
struct PatchEmbedPosFn : torch::autograd::Function<PatchEmbedPosFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& pb, const at::Tensor& wc, const at::Tensor& b, const at::Tensor& pos) {
    ctx->save_for_backward({pb, wc});
    ctx->saved_data["b_dtype"] = int64_t(b.scalar_type());
    const at::Tensor bc = bias_operand(b, wc.scalar_type()).contiguous();  // (D) bf16, as the GEMM's epilogue reads it
    const at::Tensor pc = pos.contiguous();                                  // (1, T, D), 16-byte aligned (patch_embed_pos_applies)
    const int64_t R = pb.size(0), K = pb.size(1), D = wc.size(0), T = pos.size(1);
    at::Tensor out = at::empty({R, D}, pos.options());  // (R, D) float32
    const c10::cuda::CUDAGuard guard(pb.device());
    cuda::PatchEmbedParams p;
    // the kernel reads w's rows 8 bytes at a time (a cast in the step's buffer starts 512 bytes after the last)
    const at::Tensor wk = reinterpret_cast<uintptr_t>(wc.data_ptr()) % 8 == 0 ? wc : wc.clone();  // (D, K)
    p.patches = pb.data_ptr(), p.w = wk.data_ptr(), p.b = bc.data_ptr(), p.pos = pc.data_ptr<float>(), p.out = out.data_ptr<float>();
    p.R = R, p.T = int(T), p.K = int(K), p.D = int(D);
    cuda::launch_patch_embed(p, at::cuda::getCurrentCUDAStream().stream());
    return out;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &pb = saved[0], &wc = saved[1];
    // the gradient of the GEMM's bf16 output, as autograd converts the add's float32 one
    const at::Tensor g2 = grads[0].to(wc.scalar_type()).contiguous();  // (R, D)
    const LinearGrads d = linear_grads(g2, pb, wc, at::ScalarType(ctx->saved_data["b_dtype"].toInt()), false, ctx->needs_input_grad(1),
                                       ctx->needs_input_grad(2));
    return {at::Tensor(), d.w, d.b, at::Tensor()};
  }
};
#endif

}  // namespace

bool patch_embed_pos_applies(const at::Tensor& patches, const at::Tensor& w, const at::Tensor& b, const at::Tensor& pos) {
#ifdef NALA_WITH_CUDA
  if (!patch_embed_pos_fused() || !patches.is_cuda() || fused_result_dtype(patches) != at::kBFloat16) return false;
  if (patches.dim() != 3 || w.dim() != 2 || !b.defined() || b.dim() != 1 || pos.dim() != 3) return false;
  const int64_t T = patches.size(1), K = patches.size(2), D = w.size(0);
  if (w.size(1) != K || b.size(0) != D || pos.size(0) != 1 || pos.size(1) != T || pos.size(2) != D || D % 4 != 0) return false;
  // no gradient for the patches or pos (the input and a fixed table), as the kernel's backward gives none
  if (patches.scalar_type() != at::kFloat || pos.scalar_type() != at::kFloat || b.scalar_type() != at::kFloat || pos.requires_grad() ||
      patches.requires_grad())
    return false;
  // the kernel reads pos 16 bytes at a time: a contiguous pos must start there (a copy of another one does)
  if (pos.is_contiguous() && reinterpret_cast<uintptr_t>(pos.data_ptr()) % 16 != 0) return false;
  if (patches.numel() == 0 || T > INT32_MAX || D > INT32_MAX || patches.size(0) * T > cuda::patch_embed_max_rows()) return false;
  return cuda::patch_embed_supported(int(K), int(D));
#else
  (void)patches, (void)w, (void)b, (void)pos;
  return false;
#endif
}

at::Tensor patch_embed_pos(const at::Tensor& patches, const at::Tensor& w, const at::Tensor& b, const at::Tensor& pos) {
  TORCH_CHECK(patch_embed_pos_applies(patches, w, b, pos), "patch_embed_pos: patches ", patches.sizes(), ", weight ", w.sizes(), ", bias ",
              b.sizes(), " and pos ", pos.sizes(), " are not what its kernel takes");
#ifdef NALA_WITH_CUDA
  const int64_t N = patches.size(0), T = patches.size(1), K = patches.size(2), D = w.size(0);
  const at::Tensor pb = patches.reshape({N * T, K}).to(at::kBFloat16).contiguous();  // (R, K) autocast's cast of the GEMM's input
  const at::Tensor wc = autocast_gemm_operand(w).contiguous();                     // (D, K) bf16
  return PatchEmbedPosFn::apply(pb, wc, b, pos).view({N, T, D});                   // (N, T, D) float32
#else
  return at::Tensor();
#endif
}

}  // namespace nala::ops
