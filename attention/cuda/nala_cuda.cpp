#include "attention/cuda/nala_cuda.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "attention/cuda/nala_params.h"
#include "attention/cuda/tensor_strides.h"
#include "ops/cuda/column_sum.h"

namespace nala::attention {

static_assert(int(cuda::KernelMap::Nala) == int(FeatureMap::Nala) && int(cuda::KernelMap::NalaRelu) == int(FeatureMap::NalaRelu) &&
                  int(cuda::KernelMap::Elu) == int(FeatureMap::Elu) && int(cuda::KernelMap::Relu) == int(FeatureMap::Relu) &&
                  int(cuda::KernelMap::Focused) == int(FeatureMap::Focused),
              "cuda::KernelMap must equal attention::FeatureMap value for value");
namespace {

bool g_poison = false;

void poison(std::initializer_list<at::Tensor> ts) {
  if (!g_poison) return;
  for (const auto& t : ts)
    if (t.defined()) const_cast<at::Tensor&>(t).fill_(std::numeric_limits<float>::quiet_NaN());
}

cuda::DType dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return cuda::DType::F32;
    case at::kHalf: return cuda::DType::F16;
    case at::kBFloat16: return cuda::DType::BF16;
    default:
      TORCH_CHECK(false, "nala_attention on CUDA supports float32, float16 and bfloat16 inputs, got ", t.scalar_type());
  }
}

// Unit stride along the head dim is required; anything else is copied once.
at::Tensor rows_contiguous(const at::Tensor& t) { return t.stride(3) == 1 ? t : t.contiguous(); }

bool aligned16(const at::Tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 != 0) return false;
  for (int i = 0; i < 3; ++i)
    if ((t.stride(i) * t.element_size()) % 16 != 0) return false;
  return true;
}

// Sequence split: enough blocks to fill the GPU a few times over, each block at least one tile.
void split(int N, int BH, int tile, int& chunks, int& per_chunk) {
  static const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int max_chunks = (N + tile - 1) / tile;
  chunks = std::max(1, std::min(max_chunks, (4 * sms + BH - 1) / BH));
  per_chunk = ((N + chunks - 1) / chunks + tile - 1) / tile * tile;
  chunks = (N + per_chunk - 1) / per_chunk;
}

cuda::NalaKernelParams base_params(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const NalaOptions& opt) {
  cuda::NalaKernelParams p;
  p.B = int(q.size(0));
  p.H = int(q.size(1));
  p.N = int(q.size(2));
  p.D = int(q.size(3));
  const int feat = int(feature_dim(opt.feature_map, 1));
  const auto shape = cuda::nala_kernel_shape(p.D, feat);
  p.F = shape.F;
  p.Fp = shape.Fp;
  p.Dp = shape.Dp;
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  set_strides(p.q_stride, q);
  set_strides(p.k_stride, k);
  set_strides(p.v_stride, v);
  p.map = static_cast<cuda::KernelMap>(opt.feature_map);
  p.lambda = float(opt.lambda);
  p.tau = float(opt.tau);
  p.alpha = float(opt.alpha);
  p.eps = float(opt.eps);
  p.eps_norm = float(opt.eps_norm);
  p.focus_power = float(opt.focus_power);
  p.inv_n = 1.f / float(p.N);
  p.dtype = dtype_of(q);
  p.vec_loads = aligned16(q) && aligned16(k) && aligned16(v);
  return p;
}

// A setting from the environment, read at first use (not at library load, where a bad value could
// only abort): unset or empty gives the first choice; a bad value is a clear error from the call.
template <typename E>
struct EnvChoice {
  const char* name;
  std::vector<std::pair<std::string, E>> choices;  // the first is the default
  std::optional<E> value;
  E get() {
    if (value) return *value;
    const char* e = std::getenv(name);
    if (e == nullptr || *e == '\0') return *(value = choices.front().second);
    std::string known;
    for (const auto& [key, v] : choices) {
      if (key == e) return *(value = v);
      known += (known.empty() ? "" : ", ") + key;
    }
    TORCH_CHECK(false, name, " must be one of ", known, "; got '", e, "'");
  }
};

EnvChoice<NalaCudaKernel> g_kernel{
    "NALA_ATTENTION_KERNEL", {{"auto", NalaCudaKernel::Auto}, {"chunked", NalaCudaKernel::Chunked}, {"onepass", NalaCudaKernel::OnePass}}, {}};
NalaCudaKernel current_kernel() { return g_kernel.get(); }

// NALA_ONEPASS_BWD_STATE=auto (default) | hilo | bf16: how the one-pass backward holds S and dS'.
// bf16 alone halves its mma passes and shared memory (at d = 64: two CTAs an SM, 0.99 → 0.63 ms at
// N = 256; docs/benchmarks.md) within the gradient tolerances; auto takes it where it buys a second
// CTA an SM and keeps the hi + lo pairs elsewhere (d = 72: no occupancy gain, less error).
EnvChoice<OnePassBackwardState> g_backward_state{
    "NALA_ONEPASS_BWD_STATE", {{"auto", OnePassBackwardState::Auto}, {"hilo", OnePassBackwardState::HiLo}, {"bf16", OnePassBackwardState::Bf16}}, {}};
OnePassBackwardState current_backward_state() { return g_backward_state.get(); }

// NALA_ONEPASS_RANKS=auto (default) | 1 | 2 | 4 | 8: the one-pass kernels' ranks per (batch, head),
// at most one a tile; auto is onepass_split's rule. For timing the split (a cluster of more ranks: more
// CTAs, fewer tiles each, a cluster barrier and a distributed-shared-memory sum of the state).
EnvChoice<int> g_onepass_ranks{"NALA_ONEPASS_RANKS", {{"auto", 0}, {"1", 1}, {"2", 2}, {"4", 4}, {"8", 8}}, {}};

// NALA_ONEPASS_EARLY_Q=1 (default) | 0: the one-pass forward issues its first q tile's loads under the
// last k tile's work (1) or after phase 1, before the reduce (0, the earlier kernel). The same results
// bit for bit: only when the loads fly differs (docs/benchmarks.md, forty-first session).
EnvChoice<bool> g_early_q{"NALA_ONEPASS_EARLY_Q", {{"1", true}, {"0", false}}, {}};

// NALA_ONEPASS_REDUCE=2 (default) | 1 | 0: how the one-pass forward's reduce walks the state (onepass_kernels.cuh,
// reduce_state): 0 consecutive threads along n (S'ᵀ's transposed 2-byte stores hit a bank ≈ 10 times: 39 % of the
// forward's shared-memory wavefronts, forty-eighth session), 1 along f (those stores conflict-free; the saved S then
// goes to memory 16 bytes a row), 2 along f with S written by a second pass along n (whole rows a warp). The same bits.
EnvChoice<int> g_reduce_order{"NALA_ONEPASS_REDUCE", {{"2", 2}, {"1", 1}, {"0", 0}}, {}};

// NALA_LEPE_BLOCKS=all (default) | forward | 0: LePE in the one-pass kernels (both, the forward alone,
// neither) over blocks of 2 × 4 (the forward also 1 × 8) tokens and 2 channels a thread where a tile is
// whole grid rows and the head's taps fit shared memory, else runs of 4 tokens and 4 channels (the
// earlier loop). The same sums in the same order: the same bits (onepass_kernels.cuh, lepe_blocks_out; docs/benchmarks.md, forty-sixth session).
enum class LepeBlocks { None, Forward, All };
EnvChoice<LepeBlocks> g_lepe_blocks{"NALA_LEPE_BLOCKS", {{"all", LepeBlocks::All}, {"forward", LepeBlocks::Forward}, {"0", LepeBlocks::None}}, {}};

// NALA_LEPE_MMA=0 (default) | 1: the one-pass forward's LePE on the tensor cores (onepass_kernels.cuh
// lepe_mma_out) where the head dim is 64 and the grid 16 tokens wide (NaLaDiT at 256 px) and the grid takes one
// cluster a pair (not with NALA_ONEPASS_PERSISTENT), the taps as bf16 hi + lo pairs: within rounding of the other
// paths (float32 taps, fmaf), not the same bits. Off: 2 % slower on an H100 (docs/benchmarks.md, forty-seventh session).
EnvChoice<bool> g_lepe_mma{"NALA_LEPE_MMA", {{"0", false}, {"1", true}}, {}};

// NALA_ONEPASS_PERSISTENT=0 (default) | forward | all: which one-pass kernels (head dim 64, the nala
// maps) run as a persistent grid, as many clusters as fit the GPU at once, each taking (batch, head)
// pairs in turn and copying the next pair's first tiles to shared memory under the current pair's last
// tile; the others take one cluster a pair. The same results bit for bit. On an H100 (docs/benchmarks.md,
// forty-second session) the persistent forward alone was 2-4 % faster (nala bench attention), the
// persistent backward 10 % slower (its loop costs registers: spills) and NaLaDiT-S/2's step with both
// 1.2 ms longer; with `forward` alone the step was 0.1-0.2 ms longer (forty-fifth session). set_nala_onepass_slots
// overrides it (tests).
enum class Persistent { None, Forward, All };
EnvChoice<Persistent> g_persistent{"NALA_ONEPASS_PERSISTENT", {{"0", Persistent::None}, {"forward", Persistent::Forward}, {"all", Persistent::All}}, {}};
std::optional<int> g_slots;

// The one-pass forward's cluster: the fewest ranks (CTAs per (batch, head), 1..8) that give the
// GPU at least two waves of CTAs (two fit an SM), each rank at least one tile. Returns false when
// even 8 ranks would leave SMs idle: the chunked kernels split long sequences further.
bool onepass_split(int N, int BH, int& ranks, int& per_rank) {
  static const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int tiles = (N + cuda::kOnePassTile - 1) / cuda::kOnePassTile;
  ranks = 1;
  while (ranks < 8 && ranks < tiles && int64_t(BH) * ranks < 4 * sms) ranks *= 2;
  if (const int forced = g_onepass_ranks.get(); forced > 0) ranks = std::min(forced, tiles);
  per_rank = ((N + ranks - 1) / ranks + cuda::kOnePassTile - 1) / cuda::kOnePassTile * cuda::kOnePassTile;
  ranks = (N + per_rank - 1) / per_rank;
  return int64_t(BH) * ranks >= 2 * sms;
}

// Whether this call runs the one-pass kernels (bf16, d 64 / 72, 16-byte rows; forced, or by the
// automatic rule: enough (batch, head) pairs to fill the GPU); if so, sets p's rank split.
bool take_onepass(cuda::NalaKernelParams& p, int feat, const at::Tensor& q) {
  const bool ok = p.dtype == cuda::DType::BF16 && p.vec_loads && cuda::onepass_supported(p.D, feat);
  int ranks = 1, per_rank = 0;
  const bool fills = ok && onepass_split(p.N, p.B * p.H, ranks, per_rank);
  const NalaCudaKernel kernel = current_kernel();
  TORCH_CHECK(kernel != NalaCudaKernel::OnePass || ok, "NALA_ATTENTION_KERNEL=onepass: the one-pass kernel needs bf16 ",
              "inputs with 16-byte aligned rows and head dim 64 or 72; got ", q.scalar_type(), ", d = ", p.D);
  if (!(kernel == NalaCudaKernel::OnePass || (kernel == NalaCudaKernel::Auto && fills))) return false;
  p.chunks = ranks;
  p.tokens_per_chunk = per_rank;
  p.early_q = g_early_q.get();
  p.reduce_order = g_reduce_order.get();
  p.lepe_blocks = g_lepe_blocks.get() != LepeBlocks::None;  // (the backward's caller narrows it)
  p.slots = g_slots ? *g_slots : (g_persistent.get() == Persistent::None ? 0 : -1);
  p.persist_backward = g_slots ? *g_slots != 0 : g_persistent.get() == Persistent::All;
  return true;
}

// Bytes of the largest window (of v forward, of ∂L/∂u backward) any one-pass tile of p's rank split
// reads for LePE: its tokens' grid rows and R = ks / 2 rows either side (within the grid), every
// column, p.D bf16 channels a position; the kernel's lepe_rows (attention/cuda/onepass_kernels.cuh)
// for every tile of every rank.
int lepe_window_bytes(const cuda::NalaKernelParams& p, int64_t grid_h, int64_t grid_w, int ks) {
  const int R = ks / 2, gh = int(grid_h), gw = int(grid_w);
  int rows = 0;
  for (int r = 0; r < p.chunks; ++r) {
    const int begin = r * p.tokens_per_chunk, end = std::min(p.N, begin + p.tokens_per_chunk);
    for (int t0 = begin; t0 < end; t0 += cuda::kOnePassTile) {
      const int t_last = std::min(end, t0 + cuda::kOnePassTile) - 1;
      rows = std::max(rows, std::min(gh - 1, t_last / gw + R) - std::max(0, t0 / gw - R) + 1);
    }
  }
  return rows * gw * p.D * 2;
}

// t as float32, contiguous and 16-byte aligned (the kernels' float4 loads)
at::Tensor aligned_f32(const at::Tensor& t) {
  at::Tensor c = t.to(at::kFloat).contiguous();
  return reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 == 0 ? c : c.clone();
}

// LePE's taps (D, 1, ks, ks) as the kernels read them: (ks², D) float32 tap-major
at::Tensor taps_f32(const at::Tensor& lepe_w) { return aligned_f32(lepe_w.reshape({lepe_w.size(0), -1}).t()); }

// The forward's saved state, allocated and set in p: S, z, den as the backward reads them
void keep_state(cuda::NalaKernelParams& p, NalaForward& r, const at::TensorOptions& f32) {
  r.S = at::empty({p.B, p.H, p.Fp, p.Dp}, f32);  // (B, H, Fp, Dp)
  r.z = at::empty({p.B, p.H, p.Fp}, f32);        // (B, H, Fp)
  r.den = at::empty({p.B, p.H, p.N}, f32);       // (B, H, N)
  p.S = r.S.data_ptr<float>();
  p.z = r.z.data_ptr<float>();
  p.den = r.den.data_ptr<float>();
}

}  // namespace

void set_nala_cuda_poison(bool on) { g_poison = on; }
void set_nala_cuda_kernel(NalaCudaKernel k) { g_kernel.value = k; }
void set_nala_onepass_backward_state(OnePassBackwardState s) { g_backward_state.value = s; }
void set_nala_onepass_early_q(bool on) { g_early_q.value = on; }
void set_nala_onepass_reduce_order(int order) { g_reduce_order.value = order; }
void set_nala_lepe_blocks(bool on) { g_lepe_blocks.value = on ? LepeBlocks::All : LepeBlocks::None; }
void set_nala_lepe_mma(bool on) { g_lepe_mma.value = on; }

at::Tensor nala_lepe_mma_table(const at::Tensor& taps, int64_t H, int64_t d, int64_t ks) {
  TORCH_CHECK(taps.dim() == 2 && taps.size(0) == ks * ks && taps.size(1) == H * d && taps.scalar_type() == at::kFloat && (ks == 3 || ks == 5),
              "nala_lepe_mma_table: taps must be (ks², H·d) float32 with ks 3 or 5; got ", taps.sizes(), " ", taps.scalar_type(), ", H ", H, ", d ", d,
              ", ks ", ks);
  const int64_t bytes = cuda::lepe_mma_table_bytes(int(d), int(ks));
  at::Tensor out = at::empty({H, bytes}, taps.options().dtype(at::kByte));  // (H, bytes)
  if (taps.is_cuda()) {
    const c10::cuda::CUDAGuard guard(taps.device());
    const at::Tensor t = aligned_f32(taps);  // (ks², H·d)
    cuda::launch_lepe_mma_table(t.data_ptr<float>(), int(H), int(d), int(ks), out.data_ptr(), at::cuda::getCurrentCUDAStream().stream());
    return out;
  }
  // the twin: w[dy, dx, h, c] padded with zero rows dy = −3 … −1 and ks … 7; row j + 2 (j = −2 … 7) the pair (w[j − 1], w[j])
  const at::Tensor w = taps.contiguous().view({ks, ks, H, d});                       // (dy, dx, H, d)
  at::Tensor wp = at::zeros({11, ks, H, d}, taps.options());                        // (dy + 3, dx, H, d)
  wp.narrow(0, 3, ks).copy_(w);
  const at::Tensor pair = at::stack({wp.narrow(0, 0, 10), wp.narrow(0, 1, 10)}, -1);  // (j + 2, dx, H, d, 2)
  const at::Tensor hi = pair.to(at::kBFloat16);                                    // (j + 2, dx, H, d, 2)
  const at::Tensor lo = (pair - hi.to(at::kFloat)).to(at::kBFloat16);               // (j + 2, dx, H, d, 2)
  auto col = [](const at::Tensor& t, int64_t dx) { return t.select(1, dx).view(at::kShort); };  // (j + 2, H, d, 2)
  std::vector<at::Tensor> k16;  // each (8, H, d, 4, 2): rows j + 2 < 8 of a pair of tap columns
  for (int64_t g = 0; g < ks / 2; ++g)
    k16.push_back(at::stack({col(hi, 2 * g), col(hi, 2 * g + 1), col(lo, 2 * g), col(lo, 2 * g + 1)}, -2).narrow(0, 0, 8));
  const at::Tensor part16 = at::constant_pad_nd(at::cat(k16, 0).permute({1, 0, 2, 3, 4}), {0, 0, 0, 0, 0, 1, 0, 2});  // (H, 8·(ks/2) + 2, d + 1, 4, 2)
  std::vector<at::Tensor> parts{part16.reshape({H, -1})};  // each (H, its bytes / 2) int16
  if (ks % 2 == 1)  // the last tap column: (H, 10, d + 1, 2, 2)
    parts.push_back(at::constant_pad_nd(at::stack({col(hi, ks - 1), col(lo, ks - 1)}, -2).permute({1, 0, 2, 3, 4}), {0, 0, 0, 0, 0, 1}).reshape({H, -1}));
  const at::Tensor e = at::cat(parts, 1);  // (H, bytes / 2) int16
  TORCH_CHECK(e.size(1) * 2 == bytes, "nala_lepe_mma_table: ", e.size(1) * 2, " bytes a head, the layout has ", bytes);
  out.copy_(e.contiguous().view(at::kByte).view({H, bytes}));
  return out;
}
void set_nala_onepass_slots(std::optional<int> slots) {
  TORCH_CHECK(!slots || *slots >= -1, "set_nala_onepass_slots: -1 (as many as fit), 0 (one cluster a pair) or a count, got ", *slots);
  g_slots = slots;
}
void set_nala_onepass_ranks(int ranks) {
  TORCH_CHECK(ranks == 0 || ranks == 1 || ranks == 2 || ranks == 4 || ranks == 8, "set_nala_onepass_ranks: 0 (the rule), 1, 2, 4 or 8, got ", ranks);
  g_onepass_ranks.value = ranks;
}
NalaCudaKernel nala_cuda_kernel() { return current_kernel(); }

NalaForward nala_forward_cuda(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, const NalaOptions& opt,
                              bool save_state) {
  const c10::cuda::CUDAGuard guard(q_in.device());
  TORCH_CHECK(q_in.size(2) <= INT32_MAX / 2, "nala_attention on CUDA: sequence length ", q_in.size(2), " is too long");
  at::Tensor q = rows_contiguous(q_in), k = rows_contiguous(k_in), v = rows_contiguous(v_in);
  cuda::NalaKernelParams p = base_params(q, k, v, opt);
  const int feat = int(feature_dim(opt.feature_map, 1));
  const auto shape = cuda::nala_kernel_shape(p.D, feat);
  const int BH = p.B * p.H;
  auto f32 = q.options().dtype(at::kFloat);
  NalaForward r;
  if (take_onepass(p, feat, q)) {
    r.o = at::empty(q.sizes(), q.options());  // (B, H, N, D)
    if (save_state) keep_state(p, r, f32);
    poison({r.o, r.S, r.z, r.den});
    p.o = r.o.data_ptr();
    cuda::launch_nala_forward_onepass(p, at::cuda::getCurrentCUDAStream().stream());
    return r;
  }
  split(p.N, BH, shape.tile_state, p.chunks, p.tokens_per_chunk);
  split(p.N, BH, shape.tile_out, p.out_chunks, p.out_tokens_per_chunk);
  r.o = at::empty(q.sizes(), q.options());  // (B, H, N, D)
  keep_state(p, r, f32);                    // the chunked kernels make the state anyway
  at::Tensor S_part, z_part;
  if (p.chunks > 1) {
    S_part = at::empty({BH, p.chunks, p.Fp, p.Dp}, f32);
    z_part = at::empty({BH, p.chunks, p.Fp}, f32);
    p.S_part = S_part.data_ptr<float>();
    p.z_part = z_part.data_ptr<float>();
  }
  poison({r.o, r.S, r.z, r.den, S_part, z_part});
  p.o = r.o.data_ptr();
  cuda::launch_nala_forward(p, at::cuda::getCurrentCUDAStream().stream());
  return r;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> nala_backward_cuda(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                                                   const at::Tensor& S, const at::Tensor& z, const at::Tensor& den,
                                                                   const at::Tensor& grad_o_in, const NalaOptions& opt, const at::Tensor& lepe_w,
                                                                   int64_t grid_h, int64_t grid_w, const at::Tensor& dq_out, const at::Tensor& dk_out,
                                                                   const at::Tensor& dv_out, at::Tensor* column_sums,
                                                                   std::vector<nala::ops::PartialSums>* pending, const at::Tensor& lepe_taps) {
  const c10::cuda::CUDAGuard guard(q_in.device());
  const bool outs = dq_out.defined();
  TORCH_CHECK(outs == dk_out.defined() && outs == dv_out.defined(), "nala_backward_cuda: give dq_out, dk_out and dv_out together or none");
  if (outs)
    for (const at::Tensor* t : {&dq_out, &dk_out, &dv_out}) {
      TORCH_CHECK(t->sizes() == q_in.sizes() && t->scalar_type() == q_in.scalar_type() && t->device() == q_in.device() && t->stride(3) == 1 &&
                      t->strides() == dq_out.strides() && aligned16(*t),
                  "nala_backward_cuda: the gradients' outputs must be ", q_in.sizes(), " ", q_in.scalar_type(), " on ", q_in.device(),
                  " with one set of strides, unit along d and 16-byte aligned rows; got ", t->sizes(), " ", t->scalar_type(), " strides ",
                  t->strides());
    }
  at::Tensor q = rows_contiguous(q_in), k = rows_contiguous(k_in), v = rows_contiguous(v_in);
  at::Tensor go = rows_contiguous(grad_o_in.to(q.scalar_type()));
  cuda::NalaKernelParams p = base_params(q, k, v, opt);
  TORCH_CHECK(S.defined() && z.defined() && den.defined(), "nala_backward_cuda: the forward saved no state (it ran without gradients)");
  TORCH_CHECK(S.is_contiguous() && z.is_contiguous() && den.is_contiguous(), "nala_backward_cuda: saved state must be contiguous");
  const int feat = int(feature_dim(opt.feature_map, 1));
  const auto shape = cuda::nala_kernel_shape(p.D, feat);
  const int BH = p.B * p.H;
  p.grad_o = go.data_ptr();
  set_strides(p.go_stride, go);
  p.vec_loads = p.vec_loads && aligned16(go);
  p.S = const_cast<float*>(S.data_ptr<float>());
  p.z = const_cast<float*>(z.data_ptr<float>());
  p.den = const_cast<float*>(den.data_ptr<float>());
  if (take_onepass(p, feat, q)) {  // the forward's rule; it reads S, z, den as either forward saved them
    p.lepe_blocks = g_lepe_blocks.get() == LepeBlocks::All;
    const OnePassBackwardState state = current_backward_state();
    p.state_lo = state == OnePassBackwardState::HiLo ||
                 (state == OnePassBackwardState::Auto && !cuda::onepass_bf16_state_adds_a_block(p.D, feat));
    at::Tensor dq = outs ? dq_out : at::empty(q.sizes(), q.options()), dk = outs ? dk_out : at::empty(q.sizes(), q.options()),
               dv = outs ? dv_out : at::empty(q.sizes(), q.options());  // (B, H, N, d) ×3
    poison({dq, dk, dv});
    p.dq = dq.data_ptr();
    p.dk = dk.data_ptr();
    p.dv = dv.data_ptr();
    for (int i = 0; i < 3; ++i) p.grad_stride[i] = dq.stride(i);
    at::Tensor wt;  // (ks², D): LePE's taps, which the kernel reads reversed (the transposed convolution)
    if (lepe_w.defined()) {
      const int ks = int(lepe_w.size(-1)), Dm = p.H * p.D;
      TORCH_CHECK(lepe_w.dim() == 4 && lepe_w.size(0) == Dm && lepe_w.device() == q.device() && grid_h * grid_w == p.N &&
                      cuda::onepass_lepe_backward_fits(p.D, feat, ks, lepe_window_bytes(p, grid_h, grid_w, ks)),
                  "nala_backward_cuda: the one-pass backward does not take LePE (weight ", lepe_w.sizes(), ", grid ", grid_h, "x", grid_w,
                  ") here; nala_lepe_backward_takes says where it does");
      if (lepe_taps.defined())
        TORCH_CHECK(lepe_taps.scalar_type() == at::kFloat && lepe_taps.is_contiguous() && lepe_taps.device() == q.device() &&
                        lepe_taps.sizes() == c10::IntArrayRef({int64_t(ks) * ks, int64_t(Dm)}) &&
                        reinterpret_cast<uintptr_t>(lepe_taps.data_ptr()) % 16 == 0,
                    "nala_backward_cuda: lepe_taps must be the forward's (", ks * ks, ", ", Dm, ") float32 contiguous 16-byte aligned taps, got ",
                    lepe_taps.sizes(), " ", lepe_taps.scalar_type(), " on ", lepe_taps.device());
      wt = lepe_taps.defined() ? lepe_taps : taps_f32(lepe_w);
      p.lepe_ks = ks;
      p.grid_h = int(grid_h);
      p.grid_w = int(grid_w);
      p.lepe_wt = wt.data_ptr<float>();
    }
    at::Tensor sum_part;  // (B·ranks, 3, H, d): each CTA's column sums of dq, dk, dv
    if (column_sums != nullptr && outs && lepe_w.defined() && cuda::onepass_backward_sums(p.D)) {
      sum_part = at::empty({int64_t(p.B) * p.chunks, 3, p.H, p.D}, q.options().dtype(at::kFloat));
      poison({sum_part});
      p.grad_sums = sum_part.data_ptr<float>();
    }
    cuda::launch_nala_backward_onepass(p, at::cuda::getCurrentCUDAStream().stream());
    if (sum_part.defined()) {
      if (pending == nullptr) {
        *column_sums = nala::ops::cuda::sum_partials(sum_part);  // (3, H, d)
      } else {
        if (!column_sums->defined()) *column_sums = at::empty({3, p.H, p.D}, q.options().dtype(at::kFloat));  // (3, H, d)
        pending->push_back({sum_part, *column_sums});
      }
    }
    return {dq, dk, dv};
  }
  TORCH_CHECK(!lepe_w.defined(), "nala_backward_cuda: LePE's gradient needs the one-pass backward, which does not take these tensors");
  split(p.N, BH, shape.tile_dq, p.chunks, p.tokens_per_chunk);
  split(p.N, BH, shape.tile_dkv, p.out_chunks, p.out_tokens_per_chunk);
  auto f32 = q.options().dtype(at::kFloat);
  at::Tensor dq = at::empty(q.sizes(), q.options()), dk = at::empty(q.sizes(), q.options()), dv = at::empty(q.sizes(), q.options());
  at::Tensor dS = at::empty({BH, p.Fp, p.Dp}, f32), dz = at::empty({BH, p.Fp}, f32);
  at::Tensor S_part, z_part;
  if (p.chunks > 1) {
    S_part = at::empty({BH, p.chunks, p.Fp, p.Dp}, f32);
    z_part = at::empty({BH, p.chunks, p.Fp}, f32);
    p.S_part = S_part.data_ptr<float>();
    p.z_part = z_part.data_ptr<float>();
  }
  poison({dq, dk, dv, dS, dz, S_part, z_part});
  p.dS = dS.data_ptr<float>();
  p.dz = dz.data_ptr<float>();
  p.dq = dq.data_ptr();
  p.dk = dk.data_ptr();
  p.dv = dv.data_ptr();
  cuda::launch_nala_backward(p, at::cuda::getCurrentCUDAStream().stream());
  if (!outs) return {dq, dk, dv};
  dq_out.copy_(dq);
  dk_out.copy_(dk);
  dv_out.copy_(dv);
  return {dq_out, dk_out, dv_out};
}

bool nala_backward_sums_columns(int64_t head_dim) { return cuda::onepass_backward_sums(int(head_dim)); }

bool nala_lepe_backward_takes(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, const NalaOptions& opt, int64_t ks,
                              int64_t grid_h, int64_t grid_w) {
  if (q_in.scalar_type() != at::kBFloat16 || (ks != 3 && ks != 5) || grid_h * grid_w != q_in.size(2)) return false;
  at::Tensor q = rows_contiguous(q_in), k = rows_contiguous(k_in), v = rows_contiguous(v_in);
  cuda::NalaKernelParams p = base_params(q, k, v, opt);
  const int feat = int(feature_dim(opt.feature_map, 1));
  if (!(p.vec_loads && cuda::onepass_supported(p.D, feat)) || !take_onepass(p, feat, q)) return false;
  return cuda::onepass_lepe_backward_fits(p.D, feat, int(ks), lepe_window_bytes(p, grid_h, grid_w, int(ks)));
}

NalaLepeForward nala_forward_lepe_cuda(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, const NalaOptions& opt,
                                       bool save_state, const at::Tensor& lepe_w, const at::Tensor& lepe_b, int64_t grid_h, int64_t grid_w) {
  const c10::cuda::CUDAGuard guard(q_in.device());
  NalaLepeForward r;
  TORCH_CHECK(q_in.dim() == 4 && grid_h * grid_w == q_in.size(2), "nala_forward_lepe_cuda: ", q_in.size(2), " tokens do not fill a ", grid_h,
              "x", grid_w, " grid");
  if (q_in.scalar_type() != at::kBFloat16 || !lepe_w.defined() || lepe_w.dim() != 4) return r;
  const int ks = int(lepe_w.size(-1)), Dm = int(q_in.size(1) * q_in.size(3));
  TORCH_CHECK(lepe_w.size(0) == Dm && lepe_w.size(1) == 1 && lepe_w.size(2) == ks, "nala_forward_lepe_cuda: lepe weight ", lepe_w.sizes(),
              " is not (", Dm, ", 1, k, k)");
  at::Tensor q = rows_contiguous(q_in), k = rows_contiguous(k_in), v = rows_contiguous(v_in);
  cuda::NalaKernelParams p = base_params(q, k, v, opt);
  const int feat = int(feature_dim(opt.feature_map, 1));
  if (!(p.vec_loads && cuda::onepass_supported(p.D, feat) && (ks == 3 || ks == 5))) return r;
  if (!take_onepass(p, feat, q)) return r;
  // LePE on the tensor cores (one cluster a pair: a persistent grid never takes it, so no table is built for it)
  // reads a window of 8 rows of 16 positions, whatever the tile's rows
  const bool mma = g_lepe_mma.get() && p.D == 64 && feat == 2 && grid_w == 16 && p.slots == 0;
  const int rows_window = lepe_window_bytes(p, grid_h, grid_w, ks);
  const int window = mma ? std::max(rows_window, 8 * 16 * p.D * 2) : rows_window;
  if (!cuda::onepass_lepe_layout(p.D, feat, ks, window, p.lepe_window, p.lepe_smem)) return r;
  TORCH_CHECK(lepe_w.device() == q.device() && (!lepe_b.defined() || lepe_b.device() == q.device()), "nala_forward_lepe_cuda: the LePE parameters are on ",
              lepe_w.device(), ", q on ", q.device());
  const at::Tensor wt = taps_f32(lepe_w);                                                                          // (ks², D)
  const at::Tensor bias = lepe_b.defined() ? aligned_f32(lepe_b) : at::zeros({Dm}, q.options().dtype(at::kFloat));  // (D)
  at::Tensor table;  // (H, bytes): LePE on the tensor cores (d 64, 16 tokens wide; the launch may still fall back to the taps)
  if (mma) {
    table = nala_lepe_mma_table(wt, p.H, p.D, ks);
    p.lepe_mma = true;
    p.lepe_mma_table = table.data_ptr();
  }
  p.lepe_ks = ks;
  p.grid_h = int(grid_h);
  p.grid_w = int(grid_w);
  p.lepe_wt = wt.data_ptr<float>();
  p.lepe_b = bias.data_ptr<float>();
  r.taps = wt;
  r.u = at::empty({p.B, p.N, Dm}, q.options());  // (B, N, H·d)
  if (save_state) keep_state(p, r.state, q.options().dtype(at::kFloat));
  poison({r.u, r.state.S, r.state.z, r.state.den});
  p.u = r.u.data_ptr();
  cuda::launch_nala_forward_onepass(p, at::cuda::getCurrentCUDAStream().stream());
  return r;
}

}  // namespace nala::attention
