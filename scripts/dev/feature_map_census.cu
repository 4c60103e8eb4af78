// The nala maps' per-element machine code on the CPU machine (no GPU): one kernel per element function
// of the one-pass kernels, each running it on the 16 elements a thread takes of a d-64 token (4 lanes a
// token), so SASS instructions ÷ 16 ≈ instructions an element, less the probe's own loads and sums (3
// loads and 2 float ops an element; 5 loads for the φ-row query backward). `Old` element functions are
// the fp32 recomputation (feature_of, nala_element_backward with λ tested an element), the others what the
// one-pass kernels run:
//   bash scripts/dev/sass.sh scripts/dev/feature_map_census.cu
// 2026-12-07 (forty-third session), SASS instructions a kernel: query φ 368 → 304, key φ 480 → 288 (λ = 3
// tested once a token), query backward 816 → 560, key backward 832 → 576.
#include "attention/cuda/feature_maps.cuh"
using namespace nala::attention::cuda;
constexpr int E = 16;  // a thread's elements of a token (d 64, 4 lanes a token)

// φ of E elements: F(x, st, P, f0, f1)
template <typename F>
__global__ void forward_probe(const float* x, float* out, const NalaKernelParams P, const TokenStats* s) {
  const TokenStats st = s[threadIdx.x];
  float acc = 0.f;
#pragma unroll
  for (int j = 0; j < E; ++j) {
    float f0, f1;
    F{}(x[j * 256 + threadIdx.x], st, P, f0, f1);
    acc += f0 * 1.5f + f1;
  }
  out[threadIdx.x] = acc;
}
// the backward of E elements from ∂L/∂φ (g) and, for the φ-row query backward, φ itself (phi):
// F(x, g0, g1, f0, f1, st, P, gxh, direct, gp)
template <typename F>
__global__ void backward_probe(const float* x, const float* g, const float* phi, float* out, const NalaKernelParams P, const TokenStats* s) {
  const TokenStats st = s[threadIdx.x];
  float gp = 0.f, acc = 0.f;
#pragma unroll
  for (int j = 0; j < E; ++j) {
    float gxh, direct = 0.f;
    const int i0 = j * 512 + threadIdx.x, i1 = i0 + 256;
    F{}(x[j * 256 + threadIdx.x], g[i0], g[i1], F::kPhi ? phi[i0] : 0.f, F::kPhi ? phi[i1] : 0.f, st, P, gxh, direct, gp);
    acc += gxh * st.inv + direct;
  }
  out[threadIdx.x] = acc + gp;
}

struct QueryOld {
  __device__ void operator()(float x, const TokenStats& st, const NalaKernelParams& P, float& f0, float& f1) const {
    feature_of<KernelMap::Nala, true>(x, st, P, true, f0, f1);
  }
};
struct QueryNew {
  __device__ void operator()(float x, const TokenStats& st, const NalaKernelParams& P, float& f0, float& f1) const {
    nala_feature_fast<KernelMap::Nala>(x, st, nala_token_consts(st, P, true), true, f0, f1);  // (the constants: once a token)
  }
};
struct KeyOld {
  __device__ void operator()(float x, const TokenStats& st, const NalaKernelParams& P, float& f0, float& f1) const {
    feature_of<KernelMap::Nala, true>(x, st, P, false, f0, f1);
  }
};
struct KeyCube {
  __device__ void operator()(float x, const TokenStats& st, const NalaKernelParams& P, float& f0, float& f1) const {
    nala_feature_fast<KernelMap::Nala, true>(x, st, nala_token_consts(st, P, false), false, f0, f1);
  }
};
template <bool QUERY, bool CUBE>
struct BackwardRecomputed {
  static constexpr bool kPhi = false;
  __device__ void operator()(float x, float g0, float g1, float, float, const TokenStats& st, const NalaKernelParams& P, float& gxh,
                             float& direct, float& gp) const {
    nala_element_backward<true, false, CUBE>(x, st, g0, g1, P, QUERY, gxh, direct, gp);
  }
};
struct QueryBackwardFromPhi {
  static constexpr bool kPhi = true;
  __device__ void operator()(float x, float g0, float g1, float f0, float f1, const TokenStats& st, const NalaKernelParams& P, float& gxh,
                             float&, float& gp) const {
    nala_query_backward_from_phi<false>(x * st.inv, f0, f1, st, g0, g1, P, gxh, gp);
  }
};

template __global__ void forward_probe<QueryOld>(const float*, float*, const NalaKernelParams, const TokenStats*);
template __global__ void forward_probe<QueryNew>(const float*, float*, const NalaKernelParams, const TokenStats*);
template __global__ void forward_probe<KeyOld>(const float*, float*, const NalaKernelParams, const TokenStats*);
template __global__ void forward_probe<KeyCube>(const float*, float*, const NalaKernelParams, const TokenStats*);
template __global__ void backward_probe<BackwardRecomputed<true, false>>(const float*, const float*, const float*, float*, const NalaKernelParams,
                                                                         const TokenStats*);
template __global__ void backward_probe<QueryBackwardFromPhi>(const float*, const float*, const float*, float*, const NalaKernelParams,
                                                               const TokenStats*);
template __global__ void backward_probe<BackwardRecomputed<false, false>>(const float*, const float*, const float*, float*, const NalaKernelParams,
                                                                          const TokenStats*);
template __global__ void backward_probe<BackwardRecomputed<false, true>>(const float*, const float*, const float*, float*, const NalaKernelParams,
                                                                         const TokenStats*);
