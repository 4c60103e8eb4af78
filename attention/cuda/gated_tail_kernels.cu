// The gated NaLa block's tail, forward and backward (parameters: gated_tail_kernels.h; formulas and
// the ATen counterpart the tests compare with: attention/gated_tail.cpp). Five kernel launches:
//   lepe_conv     u = o + LePE(v) + b       a block a tile (64 channels × 16 columns × 2-8 rows) with
//                                           its input window in shared memory; a lane 2 channels, the
//                                           taps' weights in registers; a warp a row of 16 outputs
//   ln_gate_fwd   y = LN(u)·SiLU(g)         one warp a token (LayerNorm needs all D channels); also
//                                           alone, to recompute y from u in a backward
//   ln_gate_bwd   dg, du, Σ dnorm_w/b       one warp a token; sums per block, in a fixed order
//                 (and Σ dg as stored: qkvg's bias gradient, where asked)
//   lepe_conv     dv = conv(du, reversed taps)   the transposed convolution, as the forward
//   lepe_wgrad    Σ dw per tap, Σ db        tiles as lepe_conv, sums per block in warp order
// No atomics: every sum runs in a fixed order, so results are bitwise repeatable.
// With p.lepe_staged the forward's lepe_conv and lepe_wgrad also stage their tile's second input
// (the residual o; du) in shared memory with the window, instead of a 4-byte global load a position,
// and (kStageCopy16) copy windows and tiles in 16-byte pieces where the inputs' layout allows.
#include "attention/cuda/gated_tail_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "attention/cuda/mma_bf16.cuh"
#include "ops/cuda/vec_io.cuh"

namespace nala::attention::cuda {
namespace {

using namespace nala::cuda_vec;  // load2, store2, load4, store4, warp_sum, clamped_vec

constexpr int kWarps = 4;           // warps a block
constexpr int kChunkChannels = 64;  // channels of a lepe block: 32 lanes × 2

void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("nala CUDA kernel ") + what + " failed to launch: " + cudaGetErrorString(e));
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// LePE works on tiles: a block owns a 64-channel chunk (a lane 2 channels) and kStrip consecutive
// columns × TileRows<T, KS>::rows grid rows of one sample. It stages the input window those outputs
// read, (rows + ks − 1) × (kStrip + ks − 1) positions, in shared memory once (zeros outside the
// grid) with asynchronous copies (cp.async: all of a tile's loads in flight at once, no registers),
// and every tap then reads it at a compile-time offset; a warp computes whole rows of kStrip
// outputs with the taps' weights (or the weight-gradient sums) in registers. A block that walks
// several tiles (the weight gradient's) copies the next tile's window while it computes this one.
constexpr int kStrip = 16;
// A lane's channel pair as it lies in memory (the window keeps the input's dtype: bf16 halves it).
template <typename T>
struct ChannelPair;
template <>
struct ChannelPair<float> {
  using type = float2;
  static __device__ __forceinline__ float2 to_float2(float2 v) { return v; }
};
template <>
struct ChannelPair<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static __device__ __forceinline__ float2 to_float2(__nv_bfloat162 v) { return cuda_vec::unpack_bf16x2(*reinterpret_cast<const unsigned*>(&v)); }
};
template <typename T>
using PairT = typename ChannelPair<T>::type;
template <typename T, int KS>
struct TileRows {  // output rows a block: as many as let one window fit 48 KB of shared memory
  static constexpr int cols = kStrip + (KS > 0 ? KS - 1 : 0);
  static constexpr int bytes_per_row = cols * 32 * int(sizeof(PairT<T>));
  static constexpr int halo = KS > 0 ? KS - 1 : 0;
  static constexpr int rows = (8 + halo) * bytes_per_row <= 48 * 1024 ? 8 : (4 + halo) * bytes_per_row <= 48 * 1024 ? 4 : 2;
  static constexpr int window_rows = rows + halo;
  static constexpr int elems = window_rows * cols * 32;  // PairT<T> values of one window
  static constexpr int side_elems = rows * kStrip * 32;   // PairT<T> values of a staged tile side input
};
int64_t tiles_per_sample(const GatedTailParams& p, int rows) { return ceil_div(p.grid_h, rows) * ceil_div(p.grid_w, kStrip); }
// Blocks along the tiles. The convolution gives every tile its own block (up to the grid's y limit;
// one window, copies and compute overlap across the ≈ 4 blocks resident an SM): measured against
// ≈ 3 blocks an SM walking tiles with double-buffered windows, the latter was slower (the tail's
// forward 0.270 against 0.233 ms at B 256, N 256, D 384 on the H200, docs/benchmarks.md). The
// weight gradient (whose partial sums are per block) takes about 8 blocks an SM over the channel
// chunks, walking tiles double-buffered; its tensor-core version (wgrad_mma) 2 blocks of 8 warps an SM (its
// launch bounds).
enum class LepeKernel { conv, wgrad, wgrad_mma };
int64_t lepe_blocks(const GatedTailParams& p, int rows, LepeKernel k) {
  const int64_t tiles = p.B * tiles_per_sample(p, rows), chunks = ceil_div(p.D, kChunkChannels);
  const int64_t cap = k == LepeKernel::conv ? 65535 : std::max<int64_t>(1, ceil_div((k == LepeKernel::wgrad ? 8 : 2) * p.sms, chunks));
  return std::max<int64_t>(1, std::min<int64_t>(tiles, cap));
}
// Rows (tokens) a ln_gate_bwd block walks: about p.ln_bwd_blocks_per_sm blocks an SM (4 by default).
int64_t ln_rows_per_block(const GatedTailParams& p) {
  return std::max<int64_t>(kWarps, ceil_div(p.B * p.N, int64_t(std::max(1, p.ln_bwd_blocks_per_sm)) * p.sms));
}

// σ(x) = 1 / (1 + e^−x) by the hardware's reciprocal (__fdividef: 2 ulp; 0 once e^−x overflows): the
// IEEE division's slow path (a call and a branch an element) split ln_gate_bwd's rows into blocks the
// compiler could not interleave (docs/benchmarks.md, forty-fifth session)
__device__ __forceinline__ float sigmoid(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }

// A (B, N, D) activation stored as (b, h, n, e) with strides (b, h, n) and unit stride along e < d:
// o, v (a view of qkvg) and du all are.
struct Strided {
  const void* p = nullptr;
  int64_t sb = 0, sh = 0, sn = 0;
};

// This lane's channels c, c + 1 (one head: d is even) of every token.
template <typename T>
__device__ __forceinline__ const T* lane_base(const Strided& a, int c, int d) {
  return static_cast<const T*>(a.p) + (c / d) * a.sh + c % d;
}

// Tile t of the grid: sample b, output rows y0 .. y0 + rows − 1, columns x0 .. x0 + kStrip − 1.
struct TilePos {
  int64_t b;
  int y0, x0;
};
__device__ __forceinline__ TilePos tile_pos(const GatedTailParams& p, int64_t t, int rows) {
  const int tx = (p.grid_w + kStrip - 1) / kStrip, ty = (p.grid_h + rows - 1) / rows;
  TilePos r;
  r.b = t / (int64_t(tx) * ty);
  const int rem = int(t - r.b * tx * ty);
  r.y0 = (rem / tx) * rows;
  r.x0 = (rem % tx) * kStrip;
  return r;
}

// cp.async (sm_80+): copies BYTES from global to shared memory without the registers, zeros when
// !valid (source size 0; the address must still be a mapped one).
template <int BYTES>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem, bool valid) {
  const unsigned dst = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(gmem), "n"(BYTES), "r"(valid ? BYTES : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING)); }

// A tile's second input, read at the tile's own positions (no halo): lepe_conv's residual o,
// lepe_wgrad's du. base is the lane's channel pair (lane_base); null: none, or not staged.
template <typename T>
struct TileSide {
  const T* base = nullptr;
  int64_t sb = 0, sn = 0;
};

// 16-byte window copies (kStageCopy16): a 64-channel chunk's position is kCount pieces of kChannels
// channels (8 × 8 for bf16, 16 × 4 for float32); thread t copies piece t % kCount of every
// (kWarps·32 / kCount)-th position, one cp.async of 16 bytes where the 4-byte copies took one a
// lane a position (a quarter of the copies for bf16; their address arithmetic was half a
// lepe_wgrad's instructions: docs/benchmarks.md, fortieth session). The window's layout is the
// same. in: the thread's piece of the window's input (lane_base of its first channel), side: of the
// side input; in null: the 4-byte copies.
template <typename T>
struct Pieces {
  static constexpr int kChannels = 16 / int(sizeof(T)), kCount = kChunkChannels / kChannels;
  const T* in = nullptr;
  const T* side = nullptr;
  bool active = false;  // the piece's channels < D (a piece lies in one head: d % kChannels == 0)
};
// This thread's pieces of a kernel's window input and side input (side.p null: none); none at all
// (the 4-byte copies) unless copy16.
template <typename T>
__device__ __forceinline__ Pieces<T> pieces_of(bool copy16, const GatedTailParams& p, const Strided& in, const Strided& side) {
  Pieces<T> pc;
  if (!copy16) return pc;
  const int c = blockIdx.x * kChunkChannels + (threadIdx.x % Pieces<T>::kCount) * Pieces<T>::kChannels;
  pc.active = c < p.D;
  const int ch = pc.active ? c : 0;  // a valid channel for the base pointers of inactive pieces
  pc.in = lane_base<T>(in, ch, p.d);
  if (side.p) pc.side = lane_base<T>(side, ch, p.d);
  return pc;
}

// Issues the copies of the lane's channel pair of the window around tile s into shared memory
// (window[row][col][lane]), zeros outside the grid or past D, as one cp.async group. With a side
// input, the same group also copies its ROWS × kStrip positions of tile s to
// window + TileRows::elems (side[row][col][lane], zeros outside the grid or past D).
template <typename T, int KS, int ROWS>
__device__ __forceinline__ void stage_window(const GatedTailParams& p, const T* in, int64_t sb, int64_t sn, bool active, const TilePos& s,
                                             PairT<T>* window, const TileSide<T>& side, const Pieces<T>& pc) {
  constexpr int R = KS / 2, COLS = TileRows<T, KS>::cols, WROWS = TileRows<T, KS>::window_rows;
  static_assert(ROWS == TileRows<T, KS>::rows, "the side tile's size (TileRows::side_elems) assumes the tile's rows");
  if (pc.in) {  // 16-byte pieces
    constexpr int POS_BYTES = 32 * int(sizeof(PairT<T>)), STEP = kWarps * 32 / Pieces<T>::kCount;  // positions a pass
    const int piece = threadIdx.x % Pieces<T>::kCount, first = threadIdx.x / Pieces<T>::kCount;
    unsigned char* wb = reinterpret_cast<unsigned char*>(window) + piece * 16;
    for (int pos = first; pos < WROWS * COLS; pos += STEP) {
      const int r = pos / COLS, col = pos - r * COLS;
      const int yy = s.y0 + r - R, xx = s.x0 + col - R;
      const bool valid = pc.active && yy >= 0 && yy < p.grid_h && xx >= 0 && xx < p.grid_w;
      const T* src = valid ? pc.in + s.b * sb + (int64_t(yy) * p.grid_w + xx) * sn : pc.in;
      cp_async<16>(wb + pos * POS_BYTES, src, valid);
    }
    if (side.base) {
      unsigned char* tb = reinterpret_cast<unsigned char*>(window + TileRows<T, KS>::elems) + piece * 16;
      for (int pos = first; pos < ROWS * kStrip; pos += STEP) {
        const int r = pos / kStrip, col = pos - r * kStrip;
        const int yy = s.y0 + r, xx = s.x0 + col;
        const bool valid = pc.active && yy < p.grid_h && xx < p.grid_w;
        const T* src = valid ? pc.side + s.b * side.sb + (int64_t(yy) * p.grid_w + xx) * side.sn : pc.side;
        cp_async<16>(tb + pos * POS_BYTES, src, valid);
      }
    }
    cp_async_commit();
    return;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int pos = warp; pos < WROWS * COLS; pos += kWarps) {
    const int r = pos / COLS, col = pos - r * COLS;
    const int yy = s.y0 + r - R, xx = s.x0 + col - R;
    const bool valid = active && yy >= 0 && yy < p.grid_h && xx >= 0 && xx < p.grid_w;
    const T* src = valid ? in + s.b * sb + (int64_t(yy) * p.grid_w + xx) * sn : in;
    cp_async<int(sizeof(PairT<T>))>(window + pos * 32 + lane, src, valid);
  }
  if (side.base) {
    PairT<T>* tile = window + TileRows<T, KS>::elems;
    for (int pos = warp; pos < ROWS * kStrip; pos += kWarps) {
      const int r = pos / kStrip, col = pos - r * kStrip;
      const int yy = s.y0 + r, xx = s.x0 + col;
      const bool valid = active && yy < p.grid_h && xx < p.grid_w;
      const T* src = valid ? side.base + s.b * side.sb + (int64_t(yy) * p.grid_w + xx) * side.sn : side.base;
      cp_async<int(sizeof(PairT<T>))>(tile + pos * 32 + lane, src, valid);
    }
  }
  cp_async_commit();
}

// Walks the block's tiles (blockIdx.y, + gridDim.y, ...) and calls body(tile, window) with the
// tile's input window (and its side input's tile, at window + TileRows::elems, where side.base is
// set) staged and visible to the whole block. With two buffers (buffers == 2) the next tile's
// copies run while body works on this one. Ends with a block barrier after the last body, so the
// caller may reuse the window memory.
template <typename T, int KS, int ROWS, typename Body>
__device__ __forceinline__ void for_each_tile(const GatedTailParams& p, const T* in, int64_t sb, int64_t sn, bool active, int buffers,
                                              PairT<T>* window, const TileSide<T>& side, const Pieces<T>& pc, Body&& body) {
  const int64_t tiles = p.B * ((p.grid_h + ROWS - 1) / ROWS) * ((p.grid_w + kStrip - 1) / kStrip);
  // buffer 1 − cur at window + (1 − cur)·stride
  const int stride = buffers == 2 ? TileRows<T, KS>::elems + (side.base ? TileRows<T, KS>::side_elems : 0) : 0;
  int cur = 0;
  int64_t ti = blockIdx.y;
  if (ti < tiles) stage_window<T, KS, ROWS>(p, in, sb, sn, active, tile_pos(p, ti, ROWS), window, side, pc);
  for (; ti < tiles; ti += gridDim.y) {
    const int64_t next = ti + gridDim.y;
    const bool ahead = buffers == 2 && next < tiles;
    if (ahead) {
      stage_window<T, KS, ROWS>(p, in, sb, sn, active, tile_pos(p, next, ROWS), window + (cur ^ 1) * stride, side, pc);
      cp_async_wait<1>();  // this tile's group is done, the next one's may run on
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // every warp's copies of this window are visible
    body(tile_pos(p, ti, ROWS), static_cast<const PairT<T>*>(window + cur * stride));
    __syncthreads();  // the window is read before it is refilled
    if (buffers == 2) cur ^= 1;
    else if (next < tiles) stage_window<T, KS, ROWS>(p, in, sb, sn, active, tile_pos(p, next, ROWS), window, side, pc);
  }
}

// For output row r of the tile, calls f(tap, xo, value) for every (tap, output) pair: output
// x0 + xo reads window column xo + j of window row r + i for tap (i, j) (PyTorch's conv2d, a
// cross-correlation with zero padding R). Offsets are compile-time constants.
template <typename T, int KS, typename F>
__device__ __forceinline__ void for_each_tap(const PairT<T>* window, int r, F&& f) {
  constexpr int COLS = TileRows<T, KS>::cols;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < KS; ++i) {
    const PairT<T>* row = window + ((r + i) * COLS) * 32 + lane;
#pragma unroll
    for (int xi = 0; xi < COLS; ++xi) {
      const float2 val = ChannelPair<T>::to_float2(row[xi * 32]);
#pragma unroll
      for (int j = 0; j < KS; ++j) {
        const int xo = xi - j;  // known at compile time: no branch
        if (xo >= 0 && xo < kStrip) f(i * KS + j, xo, val);
      }
    }
  }
}

// out = conv(in; wt) (+ bias) (+ res): the forward's u = o + LePE(v) + b, and the backward's
// dv = conv(du; flipped taps) (the transposed convolution). wt (ks·ks, D) tap-major. Blocks loop
// over tiles (gridDim.y of them at a time). STAGED (KS > 0 and res given): res's tile is copied
// to shared memory with the window; else each output loads its residual from global memory just
// before its store (a memory round trip an output: `out` may alias `res` for all the compiler knows).
template <typename T, int KS, bool STAGED>
__global__ void __launch_bounds__(kWarps * 32) lepe_conv(const GatedTailParams p, const Strided in, const float* __restrict__ wt,
                                                         const float* __restrict__ bias, const Strided res, T* __restrict__ out, int buffers,
                                                         bool copy16) {
  constexpr int TAPS = KS * KS > 0 ? KS * KS : 1, ROWS = TileRows<T, KS>::rows;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  PairT<T>* window = reinterpret_cast<PairT<T>*>(smem_raw);  // (buffers, window rows, cols, 32 lanes)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c = blockIdx.x * kChunkChannels + 2 * lane;
  const bool active = c < p.D;
  float w0[TAPS], w1[TAPS], b0 = 0, b1 = 0;
  if (active) {
    if constexpr (KS > 0)
#pragma unroll
      for (int t = 0; t < KS * KS; ++t) w0[t] = wt[t * p.D + c], w1[t] = wt[t * p.D + c + 1];
    if (bias) b0 = bias[c], b1 = bias[c + 1];
  }
  const int ch = active ? c : 0;  // a valid channel for the base pointers of inactive lanes
  const T* ib = lane_base<T>(in, ch, p.d);
  const T* rb = res.p ? lane_base<T>(res, ch, p.d) : nullptr;
  TileSide<T> side;
  if (STAGED) side = {rb, res.sb, res.sn};
  // a tile's rows: out = Σ taps (from the window) + bias + res
  auto rows_of = [&](const TilePos& s, const PairT<T>* win) {
    for (int r = warp; r < ROWS; r += kWarps) {
      const int y = s.y0 + r;
      if (y >= p.grid_h || !active) continue;
      float a0[kStrip], a1[kStrip];
#pragma unroll
      for (int xo = 0; xo < kStrip; ++xo) a0[xo] = b0, a1[xo] = b1;
      if constexpr (KS > 0)
        for_each_tap<T, KS>(win, r, [&](int t, int xo, float2 val) {  // fmaf: the one-pass kernel's LePE sums the same way
          a0[xo] = fmaf(w0[t], val.x, a0[xo]);
          a1[xo] = fmaf(w1[t], val.y, a1[xo]);
        });
      const int64_t n0 = int64_t(y) * p.grid_w + s.x0;
#pragma unroll
      for (int xo = 0; xo < kStrip; ++xo) {
        if (s.x0 + xo >= p.grid_w) break;
        float2 rv = make_float2(0.0f, 0.0f);
        if constexpr (STAGED) {
          if (rb) rv = ChannelPair<T>::to_float2(win[TileRows<T, KS>::elems + (r * kStrip + xo) * 32 + lane]);
        } else if (rb) {
          rv = load2(rb + s.b * res.sb + (n0 + xo) * res.sn);
        }
        store2(out + (s.b * p.N + n0 + xo) * p.D + c, make_float2(a0[xo] + rv.x, a1[xo] + rv.y));
      }
    }
  };
  if constexpr (KS > 0) {
    const Pieces<T> pc = pieces_of<T>(copy16, p, in, STAGED && res.p ? res : Strided{});
    for_each_tile<T, KS, ROWS>(p, ib, in.sb, in.sn, active, buffers, window, side, pc, rows_of);
  } else {  // no convolution: u = o + b, no window
    const int64_t tiles = p.B * ((p.grid_h + ROWS - 1) / ROWS) * ((p.grid_w + kStrip - 1) / kStrip);
    for (int64_t ti = blockIdx.y; ti < tiles; ti += gridDim.y) rows_of(tile_pos(p, ti, ROWS), window);
  }
}

// ---- y = (x̂·norm_w + norm_b)·SiLU(g), x̂ = (u − μ)·r: a warp a token, 4·NV channels a lane ----
template <typename T, int NV>
__global__ void __launch_bounds__(kWarps * 32) ln_gate_fwd(const GatedTailParams p, const T* __restrict__ u, T* __restrict__ y,
                                                           float* __restrict__ mean_out, float* __restrict__ rstd_out) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= p.B * p.N) return;
  const int64_t b = row / p.N, n = row - b * p.N;
  const int D4 = p.D / 4;
  const T* g = static_cast<const T*>(p.g) + b * p.g_stride[0] + n * p.g_stride[1];
  // the row's u and g, every load issued before the first is used (clamped_vec: no branch between them)
  float x[NV][4], gv[NV][4];
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    const int c = 4 * clamped_vec(lane, j, D4);
    load4(u + row * p.D + c, x[j]);
    load4(g + c, gv[j]);
  }
  float s = 0;
#pragma unroll
  for (int j = 0; j < NV; ++j)
    if (lane + 32 * j < D4) s += x[j][0] + x[j][1] + x[j][2] + x[j][3];
  const float mean = warp_sum(s) / float(p.D);
  float q = 0;
#pragma unroll
  for (int j = 0; j < NV; ++j)
    if (lane + 32 * j < D4)
#pragma unroll
      for (int k = 0; k < 4; ++k) q += (x[j][k] - mean) * (x[j][k] - mean);
  const float rstd = rsqrtf(warp_sum(q) / float(p.D) + p.eps);  // biased variance, as nn.LayerNorm
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    float w[4], bb[4];  // the norm's weight and bias (the same for every row: from L1), loaded unguarded
    const int cw = 4 * clamped_vec(lane, j, D4);
    load4(p.norm_w + cw, w);
    load4(p.norm_b + cw, bb);
    const int c = 4 * (lane + 32 * j);
    if (c < p.D) {
      float out[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) out[k] = ((x[j][k] - mean) * rstd * w[k] + bb[k]) * gv[j][k] * sigmoid(gv[j][k]);
      store4(y + row * p.D + c, out);
    }
  }
  if (mean_out && lane == 0) mean_out[row] = mean, rstd_out[row] = rstd;
}

// ---- backward of y = n·s, n = x̂·w + b, s = SiLU(g), x̂ = (u − μ)·r (attention/gated_tail.cpp):
// dg = dy·n·σ(g)(1 + g(1 − σ(g))), dn = dy·s, Σ dn·x̂ → dw, Σ dn → db, e = dn·w,
// du = r·(e − mean_D(e) − x̂·mean_D(e·x̂)). The sums over tokens are per warp (no block
// synchronisation in the loop) and added in warp order at the end: in registers where a lane's
// vectors are few (REG: NV ≤ 4, D ≤ 512), written to the warp's row of shared memory once at the end;
// else in that row, read and written each row. The same additions in the same order either way.
// (The row's shared-memory round trip cost D = 384's rows a serial dependency each.)
template <typename T, int NV>
__global__ void __launch_bounds__(kWarps * 32) ln_gate_bwd(const GatedTailParams p, const T* __restrict__ dy, const T* __restrict__ u,
                                                           const float* __restrict__ mean_in, const float* __restrict__ rstd_in,
                                                           T* __restrict__ dg, T* __restrict__ du, float* __restrict__ part,
                                                           float* __restrict__ dg_part, int64_t rows_per_block) {
  extern __shared__ float sums[];  // (kWarps, 2, D): Σ dn·x̂, Σ dn; with dg_part (kWarps, 3, D): and Σ dg
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int D4 = p.D / 4, S = (dg_part != nullptr ? 3 : 2) * p.D;  // a warp's sums
  float* sw = sums + warp * S;
  float* sb = sw + p.D;
  float* sd = sb + p.D;  // with dg_part
  constexpr bool REG = NV <= 4;
  float rw[REG ? NV : 1][4] = {}, rb[REG ? NV : 1][4] = {}, rd[REG ? NV : 1][4] = {};  // REG: Σ dn·x̂, Σ dn, Σ dg
  if constexpr (!REG) {
    for (int c = 4 * lane; c < p.D; c += 128) {
      const float z[4] = {0, 0, 0, 0};
      store4(sw + c, z);
      store4(sb + c, z);
      if (dg_part != nullptr) store4(sd + c, z);
    }
  }
  const int64_t dg_stride = p.dg_row_stride > 0 ? p.dg_row_stride : p.D;  // dg's rows
  const int64_t rows = p.B * p.N, begin = int64_t(blockIdx.x) * rows_per_block;
  const int64_t end = begin + rows_per_block < rows ? begin + rows_per_block : rows;
  for (int64_t row = begin + warp; row < end; row += kWarps) {
    const int64_t b = row / p.N, n = row - b * p.N;
    const float mu = mean_in[row], r = rstd_in[row];
    const T* g = static_cast<const T*>(p.g) + b * p.g_stride[0] + n * p.g_stride[1];
    // the row's u, dy and g, every global load issued before the first is used (clamped_vec: no
    // branch between them; guarded, each vector's loads waited for the previous one's); dy lands in e
    float xh[NV][4], e[NV][4], gv[NV][4];
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const int c = 4 * clamped_vec(lane, j, D4);
      load4(u + row * p.D + c, xh[j]);
      load4(dy + row * p.D + c, e[j]);
      load4(g + c, gv[j]);
    }
    float se = 0, sex = 0;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const int c = 4 * (lane + 32 * j);
      if (c < p.D) {
        float w[4], bb[4], dgv[4], aw[4], ab[4];
        load4(p.norm_w + c, w);  // (the same for every row: from L1)
        load4(p.norm_b + c, bb);
        if constexpr (REG) {
#pragma unroll
          for (int k = 0; k < 4; ++k) aw[k] = rw[j][k], ab[k] = rb[j][k];
        } else {
          load4(sw + c, aw);
          load4(sb + c, ab);
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float d = e[j][k];
          xh[j][k] = (xh[j][k] - mu) * r;
          const float sg = sigmoid(gv[j][k]), nk = xh[j][k] * w[k] + bb[k];
          dgv[k] = d * nk * sg * (1.0f + gv[j][k] * (1.0f - sg));
          const float dn = d * gv[j][k] * sg;
          aw[k] += dn * xh[j][k];
          ab[k] += dn;
          e[j][k] = dn * w[k];
          se += e[j][k];
          sex += e[j][k] * xh[j][k];
        }
        if (dg_part != nullptr) {  // Σ dg as stored (rounded to T)
          store4_rounded(dg + row * dg_stride + c, dgv);
          if constexpr (REG) {
#pragma unroll
            for (int k = 0; k < 4; ++k) rd[j][k] += dgv[k];
          } else {
            float ad[4];
            load4(sd + c, ad);
#pragma unroll
            for (int k = 0; k < 4; ++k) ad[k] += dgv[k];
            store4(sd + c, ad);
          }
        } else {
          store4(dg + row * dg_stride + c, dgv);
        }
        if constexpr (REG) {
#pragma unroll
          for (int k = 0; k < 4; ++k) rw[j][k] = aw[k], rb[j][k] = ab[k];
        } else {
          store4(sw + c, aw);
          store4(sb + c, ab);
        }
      }
    }
    const float me = warp_sum(se) / float(p.D), mex = warp_sum(sex) / float(p.D);
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const int c = 4 * (lane + 32 * j);
      if (c < p.D) {
        float o[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) o[k] = r * (e[j][k] - me - xh[j][k] * mex);
        const int h = c / p.d;
        store4(du + ((b * p.H + h) * p.N + n) * p.d + (c - h * p.d), o);
      }
    }
  }
  if constexpr (REG) {
#pragma unroll
    for (int j = 0; j < NV; ++j) {
      const int c = 4 * (lane + 32 * j);
      if (c < p.D) {
        store4(sw + c, rw[j]);
        store4(sb + c, rb[j]);
        if (dg_part != nullptr) store4(sd + c, rd[j]);
      }
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < S; c += blockDim.x) {
    float s = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += sums[w * S + c];
    if (c < 2 * p.D) part[int64_t(blockIdx.x) * 2 * p.D + c] = s;
    else dg_part[int64_t(blockIdx.x) * p.D + c - 2 * p.D] = s;
  }
}

// ---- LePE weight gradient: dw_t = Σ_p du(p)·v(p + off_t), db = Σ_p du(p), off_t = (i − R, j − R)
// for tap t = i·KS + j: the window of v around a tile in shared memory (as lepe_conv), a row's
// kStrip du values in registers, the forward's (tap, output) pairs. Sums per lane over the block's
// tiles and rows, then per block in warp order. STAGED: du's tile copied to shared memory with the
// window (double-buffered with it); else loaded from global memory at each row's start.
template <typename T, int KS, bool STAGED>
__global__ void __launch_bounds__(kWarps * 32) lepe_wgrad(const GatedTailParams p, const Strided du, const Strided v, float* __restrict__ part,
                                                          int buffers, bool copy16) {
  constexpr int TAPS = KS * KS, ROWS = TileRows<T, KS>::rows;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  PairT<T>* window = reinterpret_cast<PairT<T>*>(smem_raw);  // (buffers, window rows, cols, 32 lanes); then the final sums
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c = blockIdx.x * kChunkChannels + 2 * lane;
  const bool active = c < p.D;
  const int ch = active ? c : 0;
  float a0[TAPS + 1], a1[TAPS + 1];  // Σ dw per tap, then Σ db
#pragma unroll
  for (int t = 0; t <= TAPS; ++t) a0[t] = 0, a1[t] = 0;
  const T* gb = lane_base<T>(du, ch, p.d);
  const T* vb = lane_base<T>(v, ch, p.d);
  TileSide<T> side;
  if (STAGED) side = {gb, du.sb, du.sn};
  const Pieces<T> pc = pieces_of<T>(copy16, p, v, STAGED ? du : Strided{});
  for_each_tile<T, KS, ROWS>(p, vb, v.sb, v.sn, active, buffers, window, side, pc, [&](const TilePos& s, const PairT<T>* win) {
    for (int r = warp; r < ROWS; r += kWarps) {
      const int y = s.y0 + r;
      if (y >= p.grid_h || !active) continue;
      const int64_t n0 = int64_t(y) * p.grid_w + s.x0;
      float g0[kStrip], g1[kStrip];
#pragma unroll
      for (int xo = 0; xo < kStrip; ++xo) {
        g0[xo] = 0, g1[xo] = 0;
        if constexpr (STAGED) {
          // zeros past the grid's edge: db += +0.0 there, which leaves the bits as the unstaged sum's
          // (the sum starts at +0.0 and, without flush-to-zero, never becomes −0.0); a guard here
          // costs 12 bytes of spills (bf16, LePE 5)
          const float2 val = ChannelPair<T>::to_float2(win[TileRows<T, KS>::elems + (r * kStrip + xo) * 32 + lane]);
          g0[xo] = val.x, g1[xo] = val.y;
          a0[TAPS] += val.x, a1[TAPS] += val.y;
        } else if (s.x0 + xo < p.grid_w) {
          const float2 val = load2(gb + s.b * du.sb + (n0 + xo) * du.sn);
          g0[xo] = val.x, g1[xo] = val.y;
          a0[TAPS] += val.x, a1[TAPS] += val.y;
        }
      }
      for_each_tap<T, KS>(win, r, [&](int t, int xo, float2 val) {
        a0[t] += g0[xo] * val.x;
        a1[t] += g1[xo] * val.y;
      });
    }
  });
  // the warps' sums, added in warp order (3 + 2 + 1, then + 0) through the window's memory
  float* red = reinterpret_cast<float*>(smem_raw);  // (TAPS + 1, 64) floats ≤ the window's size
  for (int w = kWarps - 1; w > 0; --w) {
    __syncthreads();
    if (warp == w)
#pragma unroll
      for (int t = 0; t <= TAPS; ++t) red[t * kChunkChannels + 2 * lane] = a0[t], red[t * kChunkChannels + 2 * lane + 1] = a1[t];
    __syncthreads();
    if (warp == w - 1)
#pragma unroll
      for (int t = 0; t <= TAPS; ++t) a0[t] += red[t * kChunkChannels + 2 * lane], a1[t] += red[t * kChunkChannels + 2 * lane + 1];
  }
  if (warp == 0 && active)
#pragma unroll
    for (int t = 0; t <= TAPS; ++t) {
      float* dst = part + (int64_t(blockIdx.y) * (TAPS + 1) + t) * p.D + c;
      dst[0] = a0[t], dst[1] = a1[t];
    }
}

// ---- LePE weight gradient on the tensor cores (bf16, kStageWgradMma) ----
// With y' = y + i − R (a row of v) the weight gradient above is
//   dw[i][j] = Σ_{b, y', x} du(b, y' − i + R, x) · v(b, y', x + j − R),
// so over one row y' of v and a strip of 16 columns x = x0 + k it is a matrix product
//   D[i][j] += Σ_k A[i][k]·B[k][j],  A[i][k] = du(b, y' − i + R, x0 + k),  B[k][j] = v(b, y', x0 + k + j − R):
// one mma.m16n8k16 (bf16 products, exact in fp32, fp32 sums) a row of 16 columns and a channel. Rows
// i < KS of D and columns j < KS are the taps; the others are never stored, so A's rows and B's
// columns past KS hold whatever their lanes read (D's row i depends on A's row i only, its column j on
// B's column j only). B's column 7 is all ones (j < 7 for every KS), so D[R][7] adds du(b, y', x0 + k)
// over every position once: the bias gradient. The FMA kernel above spends 25 multiply-adds a channel
// and position (KS 5) and a load and an unpack every ten; here a channel and 16 positions take one mma
// and four byte permutes.
// A block owns a 64-channel chunk and walks tiles of rows × 16 columns of one sample (lepe_wgrad's:
// TileRows<bf16, KS>::rows = 8), staging with cp.async, in 16-byte pieces of 8 channels, du's rows
// y0 − R .. y0 + rows − 1 + R and v's columns x0 − R .. x0 + 15 + R (zeros outside the grid or past D).
// Warp q (8 warps) owns channels 8q .. 8q + 7 of the chunk: for each row it reads the four du and four v
// positions its lane's fragments need as 16-byte pieces (8 channels each) and makes each channel's
// fragment registers from them with byte permutes. A position takes 144 bytes of shared memory (8 pieces
// and 16 bytes of padding) and du's tile rows are 17 positions apart, so piece q of position p sits in
// bank group (p + q) mod 8 and one instruction's 32 reads spread over the bank groups (≤ 3 lanes a group
// among the 20 whose rows are taps at KS 5). The lanes of B's column 7 read a fixed region of ones.
// Each (tap, channel) sum is held by one lane of one warp: no reduction in the block; the per-block
// partial sums go to part (gridDim.y, KS·KS + 1, D) as lepe_wgrad's do.
constexpr int kMmaWarps = 8;
constexpr int kMmaPosBytes = 144;  // a staged position: 64 bf16 channels and 16 bytes of padding
constexpr int kMmaSlots = kMmaWarps * 32 / (kChunkChannels / 8);  // threads a piece index: 32
template <int KS>
struct MmaTile {
  static constexpr int R = KS / 2, rows = TileRows<__nv_bfloat16, KS>::rows;
  static constexpr int du_rows = rows + 2 * R, du_pitch = kStrip + 1;  // du: rows × 17 positions (16 used)
  static constexpr int v_cols = kStrip + 2 * R;                          // v: rows × (16 + 2R) positions
  static constexpr int du_bytes = du_rows * du_pitch * kMmaPosBytes, v_bytes = rows * v_cols * kMmaPosBytes;
  static constexpr int bytes = du_bytes + v_bytes;                    // one buffer
  static constexpr int ones_positions = 2 * 3 + 9 + 7 + 1;             // B's column-7 lanes read positions 2t + 7 + {0, 1, 8, 9}
  static constexpr int ones_bytes = ones_positions * kMmaPosBytes;   // after the buffers
  static_assert(KS <= 7, "B's column 7 holds the ones of the bias gradient");
  static_assert(du_rows % 2 == 0 && v_cols <= kMmaSlots, "the staging's thread layout");
};

// Issues the copies of tile s's du and v pieces into buf as one cp.async group: thread (slot, piece)
// copies piece `piece` of du's column slot % 16 at rows slot / 16, + 2, ... and of v's column slot
// (slot < v_cols) at every row.
template <int KS>
__device__ __forceinline__ void stage_mma_tile(const GatedTailParams& p, const Strided& du, const Strided& v, const TilePos& s,
                                               unsigned char* buf) {
  using M = MmaTile<KS>;
  constexpr int R = M::R, kPieces = kChunkChannels / 8;
  const int piece = threadIdx.x % kPieces, slot = threadIdx.x / kPieces;
  const int c = blockIdx.x * kChunkChannels + piece * 8;
  const bool active = c < p.D;
  const int64_t row_step = int64_t(p.grid_w) * du.sn;
  {
    const int col = slot % kStrip, r0 = slot / kStrip, xx = s.x0 + col;
    const bool col_in = active && xx < p.grid_w;
    const __nv_bfloat16* base = lane_base<__nv_bfloat16>(du, active ? c : 0, p.d) + s.b * du.sb;
    const __nv_bfloat16* src = base + (int64_t(s.y0 - R + r0) * p.grid_w + xx) * du.sn;
    unsigned char* dst = buf + (r0 * M::du_pitch + col) * kMmaPosBytes + piece * 16;
#pragma unroll
    for (int k = 0; k < M::du_rows / 2; ++k) {
      const int yy = s.y0 - R + r0 + 2 * k;
      const bool valid = col_in && yy >= 0 && yy < p.grid_h;
      cp_async<16>(dst + k * 2 * M::du_pitch * kMmaPosBytes, valid ? src + 2 * k * row_step : base, valid);
    }
  }
  if (slot < M::v_cols) {
    const int xx = s.x0 - R + slot;
    const bool col_in = active && xx >= 0 && xx < p.grid_w;
    const __nv_bfloat16* base = lane_base<__nv_bfloat16>(v, active ? c : 0, p.d) + s.b * v.sb;
    const __nv_bfloat16* src = base + (int64_t(s.y0) * p.grid_w + xx) * v.sn;
    const int64_t v_step = int64_t(p.grid_w) * v.sn;
    unsigned char* dst = buf + M::du_bytes + slot * kMmaPosBytes + piece * 16;
#pragma unroll
    for (int r = 0; r < M::rows; ++r) {
      const bool valid = col_in && s.y0 + r < p.grid_h;
      cp_async<16>(dst + r * M::v_cols * kMmaPosBytes, valid ? src + r * v_step : base, valid);
    }
  }
  cp_async_commit();
}

template <int KS>
__global__ void __launch_bounds__(kMmaWarps * 32, 2) lepe_wgrad_mma(const GatedTailParams p, const Strided du, const Strided v,
                                                                    float* __restrict__ part, int buffers) {
  using M = MmaTile<KS>;
  constexpr int R = M::R, TAPS = KS * KS;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int lane = threadIdx.x & 31, q = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  unsigned char* ones = smem_raw + buffers * M::bytes;
  for (int i = threadIdx.x; i < M::ones_bytes / 16; i += kMmaWarps * 32)
    reinterpret_cast<uint4*>(ones)[i] = make_uint4(0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u);  // bf16 1.0 pairs
  float acc[8][4];  // D(g, 2t..2t+1), D(g + 8, ·) of each of the warp's 8 channels
#pragma unroll
  for (int cc = 0; cc < 8; ++cc) acc[cc][0] = acc[cc][1] = acc[cc][2] = acc[cc][3] = 0.f;
  // this lane's byte offsets for row 0 of a buffer: A's positions (du row 2R − g, columns 2t + {0, 1, 8, 9}),
  // B's (v row 0, columns 2t + g + {0, 1, 8, 9}); a lane whose row or column is no tap reads row or
  // column KS − 1's (what it reads is never stored), B's column 7 the ones (the same for every row)
  const int gt = min(g, KS - 1);
  const int a_off = ((2 * R - gt) * M::du_pitch + 2 * t) * kMmaPosBytes + q * 16;
  const int b_off = g == 7 ? int(ones - smem_raw) + (2 * t + 7) * kMmaPosBytes + q * 16 : M::du_bytes + (2 * t + gt) * kMmaPosBytes + q * 16;
  const int b_row = g == 7 ? 0 : M::v_cols * kMmaPosBytes;
  const int64_t tiles = p.B * ((p.grid_h + M::rows - 1) / M::rows) * ((p.grid_w + kStrip - 1) / kStrip);
  int cur = 0;
  int64_t ti = blockIdx.y;
  if (ti < tiles) stage_mma_tile<KS>(p, du, v, tile_pos(p, ti, M::rows), smem_raw);
  for (; ti < tiles; ti += gridDim.y) {
    const int64_t next = ti + gridDim.y;
    const bool ahead = buffers == 2 && next < tiles;
    if (ahead) {
      stage_mma_tile<KS>(p, du, v, tile_pos(p, next, M::rows), smem_raw + (cur ^ 1) * M::bytes);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // every thread's copies of this tile (and the ones) are visible
    const TilePos s = tile_pos(p, ti, M::rows);
    const int rows = min(M::rows, p.grid_h - s.y0);
    const unsigned char* pa_row = smem_raw + cur * M::bytes + a_off;
    const unsigned char* pb_row = g == 7 ? smem_raw + b_off : smem_raw + cur * M::bytes + b_off;
#pragma unroll 2
    for (int r = 0; r < rows; ++r, pa_row += M::du_pitch * kMmaPosBytes, pb_row += b_row) {
      uint4 pa[4], pb[4];  // the pieces at columns 2t + {0, 1, 8, 9} (A) and those + g (B)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int col = (k / 2) * 8 + k % 2;  // 0, 1, 8, 9
        pa[k] = *reinterpret_cast<const uint4*>(pa_row + col * kMmaPosBytes);
        pb[k] = *reinterpret_cast<const uint4*>(pb_row + col * kMmaPosBytes);
      }
#pragma unroll
      for (int cc = 0; cc < 8; ++cc) {
        const unsigned sel = cc % 2 ? 0x7632u : 0x5410u;  // the high or the low bf16 of each word
        const auto word = [&](const uint4& x) { return reinterpret_cast<const uint32_t*>(&x)[cc / 2]; };
        const uint32_t a[4] = {__byte_perm(word(pa[0]), word(pa[1]), sel), 0u, __byte_perm(word(pa[2]), word(pa[3]), sel), 0u};  // rows 8..15 zero
        mma_bf16(acc[cc], a, __byte_perm(word(pb[0]), word(pb[1]), sel), __byte_perm(word(pb[2]), word(pb[3]), sel));
      }
    }
    __syncthreads();  // the buffer is read before it is refilled
    if (buffers == 2) cur ^= 1;
    else if (next < tiles) stage_mma_tile<KS>(p, du, v, tile_pos(p, next, M::rows), smem_raw);
  }
  // D(i, j) for i = g < KS and j = 2t + e < KS: tap i·KS + j; D(R, 7): the bias gradient
  float* out = part + int64_t(blockIdx.y) * (TAPS + 1) * p.D;
#pragma unroll
  for (int cc = 0; cc < 8; ++cc) {
    const int c = blockIdx.x * kChunkChannels + q * 8 + cc;
    if (c >= p.D) continue;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int j = 2 * t + e;
      if (g < KS && j < KS) out[int64_t(g * KS + j) * p.D + c] = acc[cc][e];
    }
    if (g == R && t == 3) out[int64_t(TAPS) * p.D + c] = acc[cc][1];
  }
}

// ---- dispatch ----
constexpr int kMaxNV = 12;  // D ≤ 1536
int nv_for(int D) {
  const int need = (D / 4 + 31) / 32;
  for (int nv : {1, 2, 3, 4, 6, 8, 9, 12})
    if (nv >= need) return nv;
  throw std::invalid_argument("gated tail kernels: D = " + std::to_string(D) + " is more than " + std::to_string(128 * kMaxNV));
}

template <typename F>
void with_nv(int D, F&& f) {
  switch (nv_for(D)) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    case 9: f(std::integral_constant<int, 9>{}); break;
    default: f(std::integral_constant<int, 12>{}); break;
  }
}

template <typename F>
void with_ks(int ks, bool allow_zero, F&& f) {
  switch (ks) {
    case 0:
      if (!allow_zero) break;
      f(std::integral_constant<int, 0>{});
      return;
    case 3: f(std::integral_constant<int, 3>{}); return;
    case 5: f(std::integral_constant<int, 5>{}); return;
    case 7: f(std::integral_constant<int, 7>{}); return;
    default: break;
  }
  throw std::invalid_argument("gated tail kernels: LePE kernel size " + std::to_string(ks) + " is not one of 0, 3, 5, 7");
}

Strided o_of(const GatedTailParams& p) { return {p.o, p.o_stride[0], p.o_stride[1], p.o_stride[2]}; }
Strided v_of(const GatedTailParams& p) { return {p.v, p.v_stride[0], p.d, p.v_stride[1]}; }
Strided du_of(const GatedTailParams& p, const void* du) { return {du, int64_t(p.H) * p.N * p.d, p.N * p.d, p.d}; }

std::atomic<int64_t> g_copy16_launches{0};  // lepe_copy16_launches()
std::atomic<int64_t> g_wgrad_mma_launches{0};  // lepe_wgrad_mma_launches()

template <int KS>
void launch_wgrad_mma(const GatedTailParams& p, const void* du, float* part, cudaStream_t st) {
  using M = MmaTile<KS>;
  const dim3 grid(unsigned(ceil_div(p.D, kChunkChannels)), unsigned(lepe_blocks(p, M::rows, LepeKernel::wgrad_mma)));
  const int64_t tiles = p.B * tiles_per_sample(p, M::rows);
  // two buffers where two blocks an SM still fit (sm_90: 228 KB of shared memory an SM, 1 KB of it reserved a block)
  const int buffers = tiles > int64_t(grid.y) && 2 * M::bytes + M::ones_bytes <= 113 * 1024 ? 2 : 1;
  const size_t smem = size_t(buffers) * M::bytes + M::ones_bytes;
  if (smem > 48 * 1024 && cudaFuncSetAttribute(lepe_wgrad_mma<KS>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess)
    throw std::runtime_error("nala CUDA kernel lepe_wgrad_mma: " + std::to_string(smem) + " bytes of shared memory refused: " +
                             cudaGetErrorString(cudaGetLastError()));
  lepe_wgrad_mma<KS><<<grid, kMmaWarps * 32, smem, st>>>(p, du_of(p, du), v_of(p), part, buffers);
  g_wgrad_mma_launches.fetch_add(1, std::memory_order_relaxed);
}

// Whether inputs may be read in 16-byte pieces (Pieces<T>): a piece's channels in one head, and every
// input (p null: none) 16-byte aligned with strides of whole pieces.
template <typename T>
bool pieces_aligned(const GatedTailParams& p, std::initializer_list<Strided> inputs) {
  constexpr int kCh = Pieces<T>::kChannels;
  if (p.d % kCh != 0) return false;
  for (const Strided& a : inputs)
    if (a.p && (reinterpret_cast<uintptr_t>(a.p) % 16 != 0 || a.sb % kCh != 0 || a.sh % kCh != 0 || a.sn % kCh != 0)) return false;
  return true;
}
// Whether a LePE kernel's windows may be copied in 16-byte pieces: asked for (kStageCopy16) and every
// input (the window's, the staged side input's) in pieces.
template <typename T>
bool pieces_fit(const GatedTailParams& p, std::initializer_list<Strided> inputs) {
  return (p.lepe_staged & kStageCopy16) != 0 && pieces_aligned<T>(p, inputs);
}
// Whether the weight gradient runs on the tensor cores (lepe_wgrad_mma): asked for (kStageWgradMma),
// bf16, LePE on, v and du in 16-byte pieces of 8 channels.
bool wgrad_mma_fits(const GatedTailParams& p, const void* du) {
  return p.bf16 && p.ks > 0 && (p.lepe_staged & kStageWgradMma) != 0 && pieces_aligned<__nv_bfloat16>(p, {v_of(p), du_of(p, du)});
}

// Launches a LePE kernel (STAGED: the instantiation that stages a side input) over its tiles with
// the windows' dynamic shared memory (opted in above 48 KB): one window when every block has one
// tile or one_buffer is asked for, else two (the next one copied in while this one is computed);
// each with its side input's tile where the kernel stages one; copy16: the windows in 16-byte pieces.
template <typename T, int KS, bool STAGED, typename Kernel, typename... Args>
void launch_lepe(Kernel kernel, bool one_buffer, bool copy16, const GatedTailParams& p, dim3 grid, cudaStream_t st, Args... args) {
  const int64_t tiles = p.B * tiles_per_sample(p, TileRows<T, KS>::rows);
  const int buffers = tiles > int64_t(grid.y) && !one_buffer ? 2 : 1;
  const size_t per_buffer = TileRows<T, KS>::elems + (STAGED ? TileRows<T, KS>::side_elems : 0);
  const size_t smem = KS > 0 ? size_t(buffers) * per_buffer * sizeof(PairT<T>) : 0;
  if (smem > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  kernel<<<grid, kWarps * 32, smem, st>>>(args..., buffers, KS > 0 && copy16);
  if (KS > 0 && copy16) g_copy16_launches.fetch_add(1, std::memory_order_relaxed);
}

template <typename T>
void forward_typed(const GatedTailParams& p, void* u, void* y, float* mean, float* rstd, cudaStream_t st) {
  with_ks(p.ks, true, [&](auto ks) {
    constexpr int K = ks();
    const dim3 grid(unsigned(ceil_div(p.D, kChunkChannels)), unsigned(lepe_blocks(p, TileRows<T, K>::rows, LepeKernel::conv)));
    auto conv = [&](auto staged) {  // std::bool_constant: the kernel and its shared memory from one flag
      constexpr bool S = decltype(staged)::value;
      const bool copy16 = pieces_fit<T>(p, {v_of(p), S ? o_of(p) : Strided{}});
      launch_lepe<T, K, S>(lepe_conv<T, K, S>, false, copy16, p, grid, st, p, v_of(p), p.lepe_wt, p.lepe_b, o_of(p), static_cast<T*>(u));
    };
    if constexpr (K > 0) {
      if (p.lepe_staged & kStageResidual) conv(std::true_type{});
      else conv(std::false_type{});
    } else {
      conv(std::false_type{});
    }
  });
  check_launch("lepe_conv");
  const unsigned blocks = unsigned(ceil_div(p.B * p.N, kWarps));
  with_nv(p.D, [&](auto nv) {
    ln_gate_fwd<T, nv()><<<blocks, kWarps * 32, 0, st>>>(p, static_cast<const T*>(u), static_cast<T*>(y), mean, rstd);
  });
  check_launch("ln_gate_fwd");
}

template <typename T>
void backward_typed(const GatedTailParams& p, const void* dy, const void* u, const float* mean, const float* rstd, void* dg, void* du, void* dv,
                    float* norm_part, float* lepe_part, float* dg_part, cudaStream_t st) {
  const int64_t rpb = ln_rows_per_block(p);
  const size_t smem = size_t(kWarps) * (dg_part != nullptr ? 3 : 2) * p.D * sizeof(float);  // ≤ 72 KB for D ≤ 1536
  with_nv(p.D, [&](auto nv) {
    auto kernel = ln_gate_bwd<T, nv()>;
    if (smem > 48 * 1024 && cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) != cudaSuccess)
      throw std::runtime_error("nala CUDA kernel ln_gate_bwd: " + std::to_string(smem) + " bytes of shared memory refused: " +
                               cudaGetErrorString(cudaGetLastError()));
    kernel<<<unsigned(ceil_div(p.B * p.N, rpb)), kWarps * 32, smem, st>>>(p, static_cast<const T*>(dy), static_cast<const T*>(u), mean, rstd,
                                                                          static_cast<T*>(dg), static_cast<T*>(du), norm_part, dg_part, rpb);
  });
  check_launch("ln_gate_bwd");
  if (p.ks == 0) return;
  with_ks(p.ks, false, [&](auto ks) {
    constexpr int K = ks();
    if constexpr (K > 0) {
      const unsigned chunks = unsigned(ceil_div(p.D, kChunkChannels));
      // dv(q) = Σ_t w_t·du(q − off_t): the forward's convolution of du with the taps reversed (none
      // asked for: the one-pass attention backward adds it to its own dv)
      if (dv != nullptr) {
        launch_lepe<T, K, false>(lepe_conv<T, K, false>, false, pieces_fit<T>(p, {du_of(p, du)}), p,
                                 dim3(chunks, unsigned(lepe_blocks(p, TileRows<T, K>::rows, LepeKernel::conv))), st, p, du_of(p, du),
                                 p.lepe_wt_flipped, static_cast<const float*>(nullptr), Strided{}, static_cast<T*>(dv));
        check_launch("lepe_conv (backward)");
      }
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        if (wgrad_mma_fits(p, du)) {
          launch_wgrad_mma<K>(p, du, lepe_part, st);
          check_launch("lepe_wgrad_mma");
          return;
        }
      }
      const dim3 wgrid(chunks, unsigned(lepe_blocks(p, TileRows<T, K>::rows, LepeKernel::wgrad)));
      const bool staged = (p.lepe_staged & kStageDu) != 0, copy16 = pieces_fit<T>(p, {v_of(p), staged ? du_of(p, du) : Strided{}});
      if (staged)
        launch_lepe<T, K, true>(lepe_wgrad<T, K, true>, (p.lepe_staged & kStageOneBuffer) != 0, copy16, p, wgrid, st, p, du_of(p, du), v_of(p),
                                lepe_part);
      else
        launch_lepe<T, K, false>(lepe_wgrad<T, K, false>, false, copy16, p, wgrid, st, p, du_of(p, du), v_of(p), lepe_part);
      check_launch("lepe_wgrad");
    }
  });
}

}  // namespace

int64_t lepe_copy16_launches() { return g_copy16_launches.load(std::memory_order_relaxed); }
int64_t lepe_wgrad_mma_launches() { return g_wgrad_mma_launches.load(std::memory_order_relaxed); }

int ln_gate_backward_chunks(const GatedTailParams& p) { return int(ceil_div(p.B * p.N, ln_rows_per_block(p))); }
int lepe_backward_chunks(const GatedTailParams& p, const void* du) {
  int rows = 0;
  with_ks(p.ks, false, [&](auto ks) {
    if constexpr (ks() > 0) rows = p.bf16 ? TileRows<__nv_bfloat16, ks()>::rows : TileRows<float, ks()>::rows;
  });
  if (wgrad_mma_fits(p, du)) return int(lepe_blocks(p, rows, LepeKernel::wgrad_mma));  // MmaTile's rows are TileRows<bf16>'s
  return int(lepe_blocks(p, rows, LepeKernel::wgrad));
}

void launch_gated_tail_forward(const GatedTailParams& p, void* u, void* y, float* mean, float* rstd, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  if (p.bf16) forward_typed<__nv_bfloat16>(p, u, y, mean, rstd, st);
  else forward_typed<float>(p, u, y, mean, rstd, st);
}

void launch_gated_tail_y(const GatedTailParams& p, const void* u, void* y, float* mean, float* rstd, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  const unsigned blocks = unsigned(ceil_div(p.B * p.N, kWarps));
  with_nv(p.D, [&](auto nv) {
    if (p.bf16)
      ln_gate_fwd<__nv_bfloat16, nv()><<<blocks, kWarps * 32, 0, st>>>(p, static_cast<const __nv_bfloat16*>(u), static_cast<__nv_bfloat16*>(y),
                                                                         mean, rstd);
    else
      ln_gate_fwd<float, nv()><<<blocks, kWarps * 32, 0, st>>>(p, static_cast<const float*>(u), static_cast<float*>(y), mean, rstd);
  });
  check_launch("ln_gate_fwd (y recomputed)");
}

void launch_gated_tail_backward(const GatedTailParams& p, const void* dy, const void* u, const float* mean, const float* rstd, void* dg,
                                void* du, void* dv, float* norm_part, float* lepe_part, float* dg_part, void* stream) {
  const auto st = static_cast<cudaStream_t>(stream);
  if (p.bf16) backward_typed<__nv_bfloat16>(p, dy, u, mean, rstd, dg, du, dv, norm_part, lepe_part, dg_part, st);
  else backward_typed<float>(p, dy, u, mean, rstd, dg, du, dv, norm_part, lepe_part, dg_part, st);
}

}  // namespace nala::attention::cuda
