// Host side of the one-pass NaLa kernels: (head dim, feature count) to template arguments, the
// shared-memory reservation and the cluster launch.
#include <algorithm>
#include <stdexcept>
#include <string>

#include <cuda_runtime.h>

#include "attention/cuda/nala_launch.cuh"
#include "attention/cuda/onepass_backward.cuh"

namespace nala::attention::cuda {

bool onepass_supported(int D, int feat) { return (D == 64 || D == 72) && (feat == 1 || feat == 2); }
bool onepass_backward_sums(int D) { return D == 64; }

bool onepass_bf16_state_adds_a_block(int D, int feat) {
#define NALA_GAIN(DD, FF) \
  if (D == DD && feat == FF) return OnePassBwd<DD, FF, false>::MIN_BLOCKS > OnePassBwd<DD, FF, true>::MIN_BLOCKS;
  NALA_GAIN(64, 2) NALA_GAIN(72, 2) NALA_GAIN(64, 1) NALA_GAIN(72, 1)
#undef NALA_GAIN
  return false;
}

bool onepass_lepe_layout(int D, int feat, int ks, int window_bytes, int& offset, int& smem_bytes) {
  if (!onepass_supported(D, feat) || feat != 2 || (ks != 3 && ks != 5) || window_bytes <= 0) return false;
  int bytes = 0, front = 0;  // the kernel's shared memory; the front that phase 2 leaves unused (up to the φ tile)
#define NALA_SIZES(DD, FF)                                                 \
  if (D == DD && feat == FF) bytes = OnePass<DD, FF>::BYTES, front = OnePass<DD, FF>::PHI;
  NALA_SIZES(64, 2) NALA_SIZES(72, 2) NALA_SIZES(64, 1) NALA_SIZES(72, 1)
#undef NALA_SIZES
  offset = window_bytes <= front ? 0 : (bytes + 15) / 16 * 16;
  smem_bytes = window_bytes <= front ? bytes : offset + window_bytes;
  // two CTAs an SM: 228 KB of shared memory, 1 KB of it reserved a CTA
  return 2 * (smem_bytes + 1024) <= 228 * 1024;
}

bool onepass_lepe_backward_fits(int D, int feat, int ks, int window_bytes) {
  if (!onepass_supported(D, feat) || feat != 2 || (ks != 3 && ks != 5) || window_bytes <= 0) return false;
  int phi_bytes = 0;  // the φ tile's memory, free in phase 2 once the products have read it (the same with and without lo)
#define NALA_PHI(DD, FF) \
  if (D == DD && feat == FF) phi_bytes = OnePassBwd<DD, FF, true>::GS - OnePassBwd<DD, FF, true>::PHI;
  NALA_PHI(64, 2) NALA_PHI(72, 2) NALA_PHI(64, 1) NALA_PHI(72, 1)
#undef NALA_PHI
  return window_bytes <= phi_bytes;
}

// Where a one-pass kernel with LePE keeps its head's taps (ks² × D float32; onepass_kernels.cuh
// lepe_stage_taps): past the launch's other shared memory when that costs no CTA an SM (two at most
// resident by the kernels' launch bounds; 228 KB an SM, 1 KB of it reserved a CTA; 227 KB a CTA),
// smem_bytes grown to hold them; else −1, the taps read from global memory. In shared memory the
// taps' loads do not wait on L2 (Nsight Compute, NaLaDiT-S/2: the weights' loads from global memory
// were the LePE sums' main stall).
// (place_past: bytes more past smem_bytes, 16-byte aligned, where that costs no CTA an SM: the offset,
// smem_bytes grown; else −1)
static int place_past(int bytes, int& smem_bytes) {
  const int at = (smem_bytes + 15) / 16 * 16;
  auto ctas = [](int b) { return std::min(2, 228 * 1024 / (b + 1024)); };
  if (at + bytes > 227 * 1024 || ctas(at + bytes) < ctas(smem_bytes)) return -1;
  smem_bytes = at + bytes;
  return at;
}
static int onepass_lepe_taps(int D, int ks, int& smem_bytes) { return place_past(ks * ks * D * 4, smem_bytes); }

// Where a persistent one-pass grid (P.slots ≠ 0) stages the next (batch, head) pair's first tiles
// (onepass_kernels.cuh stage_first_tile): two tiles of kOnePassTile × D bf16 (forward k, v; backward q,
// grad_o) and, backward, den a thread (256 floats), past the launch's other shared memory where that
// costs no CTA an SM; else −1 (the first tiles then load as the pair starts).
static int onepass_next_stage(const NalaKernelParams& P, bool backward, int& smem_bytes) {
  if (P.slots == 0) return -1;
  return place_past(2 * kOnePassTile * P.D * 2 + (backward ? 256 * 4 : 0), smem_bytes);
}

// The grid's clusters for P.slots: one a (batch, head) pair (0), a given count, or (−1) as many as are
// resident at once (the occupancy of kernel, every SM, in clusters of P.chunks), never more than the pairs.
template <typename Kernel>
static int grid_slots(Kernel kernel, const NalaKernelParams& P, int threads, int smem_bytes) {
  const int pairs = P.B * P.H;
  int slots = P.slots;
  if (slots == 0) return pairs;
  if (slots < 0) {
    int device = 0, sms = 0, per_sm = 0;
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes) != cudaSuccess || per_sm < 1)
      throw std::runtime_error("nala one-pass kernel: cannot read its occupancy");
    slots = std::max(1, sms * per_sm / P.chunks);
  }
  return std::min(slots, pairs);
}

template <typename Kernel>
static void launch_clustered(Kernel kernel, const NalaKernelParams& P, int threads, int smem_bytes, cudaStream_t st, const char* what) {
  if (P.chunks < 1 || P.chunks > 8 || P.tokens_per_chunk % kOnePassTile != 0)
    throw std::runtime_error(std::string("nala one-pass ") + what + ": bad split, " + std::to_string(P.chunks) + " ranks of " +
                             std::to_string(P.tokens_per_chunk) + " tokens");
  allow_smem(kernel, smem_bytes);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(P.chunks, grid_slots(kernel, P, threads, smem_bytes));
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem_bytes;
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = unsigned(P.chunks);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = P.chunks > 1 ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, P);
  if (e != cudaSuccess) throw std::runtime_error(std::string("nala one-pass ") + what + " failed to launch: " + cudaGetErrorString(e));
  check_launch(what);
}

// PERSIST: the persistent kernels (P.slots ≠ 0; d 64 and the nala maps only, fewer kernels to compile).
// Each is its own instantiation: the (batch, head) loop would cost the one-pair kernels registers.
template <int D, int FEAT, bool LO, bool PERSIST>
static void onepass_backward_lo(const NalaKernelParams& P, cudaStream_t st) {
  constexpr int threads = OnePass<D, FEAT>::THREADS, bytes = OnePassBwd<D, FEAT, LO>::BYTES;
  NalaKernelParams Q = P;
  int smem = bytes;
  if (P.lepe_ks == 0) {
    if (P.grad_sums != nullptr) throw std::runtime_error("nala one-pass backward: the gradients' column sums come with LePE only");
    Q.next_stage = onepass_next_stage(P, true, smem);
    launch_clustered(onepass_backward_kernel<D, FEAT, LO, 0, false, PERSIST>, Q, threads, smem, st, "backward");
    return;
  }
  if constexpr (FEAT == 2) {  // LePE variants for the nala maps only (the gated block's; fewer kernels to compile)
    Q.lepe_taps = onepass_lepe_taps(D, P.lepe_ks, smem);
    Q.next_stage = onepass_next_stage(P, true, smem);
    if (P.grad_sums != nullptr) {  // the summing kernels: d 64 only (onepass_backward_sums)
      if constexpr (D == 64) {
        if (P.lepe_ks == 5) return launch_clustered(onepass_backward_kernel<D, FEAT, LO, 5, true, PERSIST>, Q, threads, smem, st, "backward with LePE and sums");
        if (P.lepe_ks == 3) return launch_clustered(onepass_backward_kernel<D, FEAT, LO, 3, true, PERSIST>, Q, threads, smem, st, "backward with LePE and sums");
      }
      throw std::runtime_error("nala one-pass backward: no summing kernel for head dim " + std::to_string(D));
    }
    if (P.lepe_ks == 5) return launch_clustered(onepass_backward_kernel<D, FEAT, LO, 5, false, PERSIST>, Q, threads, smem, st, "backward with LePE");
    if (P.lepe_ks == 3) return launch_clustered(onepass_backward_kernel<D, FEAT, LO, 3, false, PERSIST>, Q, threads, smem, st, "backward with LePE");
  }
  throw std::runtime_error("nala one-pass backward: no LePE kernel of size " + std::to_string(P.lepe_ks) + " for " + std::to_string(FEAT) +
                           " features");
}

template <int D, int FEAT, bool PERSIST>
static void onepass_forward(const NalaKernelParams& P, cudaStream_t st) {
  constexpr int threads = OnePass<D, FEAT>::THREADS;
  NalaKernelParams Q = P;
  if (P.lepe_ks == 0) {
    int smem = OnePass<D, FEAT>::BYTES;
    Q.next_stage = onepass_next_stage(P, false, smem);
    return launch_clustered(onepass_forward_kernel<D, FEAT, 0, PERSIST>, Q, threads, smem, st, "forward");
  }
  if constexpr (FEAT == 2) {
    int smem = P.lepe_smem;
    // LePE on the tensor cores (one cluster a pair): the head's table in place of its taps where it costs no CTA an
    // SM, else the taps and the blocks
    Q.lepe_taps = P.lepe_mma && D == 64 && !PERSIST ? place_past(lepe_mma_table_bytes(D, P.lepe_ks), smem) : -1;
    Q.lepe_mma = Q.lepe_taps >= 0;
    if constexpr (D == 64 && !PERSIST) {
      if (Q.lepe_mma && P.lepe_ks == 5) return launch_clustered(onepass_forward_kernel<D, FEAT, 5, false, true>, Q, threads, smem, st, "forward with LePE on the tensor cores");
      if (Q.lepe_mma && P.lepe_ks == 3) return launch_clustered(onepass_forward_kernel<D, FEAT, 3, false, true>, Q, threads, smem, st, "forward with LePE on the tensor cores");
    }
    Q.lepe_taps = onepass_lepe_taps(D, P.lepe_ks, smem);
    Q.next_stage = onepass_next_stage(P, false, smem);
    if (P.lepe_ks == 5) return launch_clustered(onepass_forward_kernel<D, FEAT, 5, PERSIST>, Q, threads, smem, st, "forward with LePE");
    if (P.lepe_ks == 3) return launch_clustered(onepass_forward_kernel<D, FEAT, 3, PERSIST>, Q, threads, smem, st, "forward with LePE");
  }
  throw std::runtime_error("nala one-pass forward: no LePE kernel of size " + std::to_string(P.lepe_ks) + " for " + std::to_string(FEAT) +
                           " features");
}

template <int D, int FEAT>
static void onepass(const NalaKernelParams& P, cudaStream_t st, bool forward) {
  if constexpr (FEAT == 2 && D == 64) {
    if (P.slots != 0 && (forward || P.persist_backward)) {
      if (forward) onepass_forward<D, FEAT, true>(P, st);
      else if (P.state_lo) onepass_backward_lo<D, FEAT, true, true>(P, st);
      else onepass_backward_lo<D, FEAT, false, true>(P, st);
      return;
    }
  }
  NalaKernelParams Q = P;
  Q.slots = 0;  // (d 72 and the baselines' maps: one cluster a pair)
  if (forward) onepass_forward<D, FEAT, false>(Q, st);
  else if (P.state_lo) onepass_backward_lo<D, FEAT, true, false>(Q, st);
  else onepass_backward_lo<D, FEAT, false, false>(Q, st);
}

static void dispatch_onepass(const NalaKernelParams& p, void* stream, bool forward) {
  auto st = static_cast<cudaStream_t>(stream);
  if (p.dtype != DType::BF16) throw std::runtime_error("nala one-pass kernel: bf16 inputs only");
  const int feat = p.F / p.D;
#define NALA_ONEPASS(DD, FF)           \
  if (p.D == DD && feat == FF) {       \
    onepass<DD, FF>(p, st, forward);   \
    return;                            \
  }
  NALA_ONEPASS(64, 2) NALA_ONEPASS(72, 2) NALA_ONEPASS(64, 1) NALA_ONEPASS(72, 1)
#undef NALA_ONEPASS
  throw std::runtime_error("nala one-pass kernel: no kernel for head dim " + std::to_string(p.D) + " with " + std::to_string(p.F) + " features");
}

void launch_nala_forward_onepass(const NalaKernelParams& p, void* stream) { dispatch_onepass(p, stream, true); }
void launch_nala_backward_onepass(const NalaKernelParams& p, void* stream) { dispatch_onepass(p, stream, false); }

}  // namespace nala::attention::cuda
