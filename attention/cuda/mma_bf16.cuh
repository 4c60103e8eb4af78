// bf16 tensor-core helpers of the one-pass NaLa kernels: ldmatrix fragment loads from bf16 shared
// memory tiles and mma.sync m16n8k16 (bf16 operands, fp32 accumulation).
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16", 16-bit types), g = lane / 4,
// t = lane % 4, two bf16 per 32-bit register (the lower column / row in the low half):
//   A (16×16): a0 = A(g, 2t..2t+1), a1 = A(g+8, 2t..), a2 = A(g, 2t+8..), a3 = A(g+8, 2t+8..)
//   B (16×8):  b0 = B(2t..2t+1, g), b1 = B(2t+8..2t+9, g)
//   C (16×8):  c0 = C(g, 2t), c1 = C(g, 2t+1), c2 = C(g+8, 2t), c3 = C(g+8, 2t+1)
// ldmatrix.x4 loads four 8×8 matrices, lanes 8i..8i+7 giving the row addresses of matrix i; with
// .trans each matrix arrives transposed. The address helpers below return, for this lane, the
// row start that makes the four matrices the fragment(s) named.
// Bank conflicts: a tile row of L bf16 elements is read 16 bytes at a time by 8 lanes at 8 rows;
// rows L·2 bytes apart never collide when L·2/16 is odd (ld_bf16 picks such an L).
#pragma once
#include <cstdint>

#include <cuda_bf16.h>

namespace nala::attention::cuda {

// smallest leading dimension ≥ x (elements, a multiple of 8) whose byte stride is an odd multiple of 16
constexpr int ld_bf16(int x) { return ((x + 7) / 8 % 2 == 1) ? (x + 7) / 8 * 8 : (x + 7) / 8 * 8 + 8; }

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x2_t(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(smem_u32(p)));
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// m16n8k8: a0 = A(g, 2t..2t+1), a1 = A(g+8, 2t..); b0 = B(2t..2t+1, g); C as m16n8k16's
__device__ __forceinline__ void mma_bf16_k8(float (&c)[4], const uint32_t (&a)[2], uint32_t b0) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(b0));
}

// ---- where this lane points ldmatrix (tiles are bf16, row-major with leading dimension ld) -----
// A(m, k) stored as rows m (k contiguous): the 16×16 A fragment at (m0, k0), non-transposed load.
__device__ __forceinline__ int a_rows_at(int m0, int k0, int ld) {
  const int l = threadIdx.x % 32;
  return (m0 + l % 16) * ld + k0 + (l / 16) * 8;
}
// A(m, k) stored as rows k (m contiguous): the 16×16 A fragment at (m0, k0), transposed load.
__device__ __forceinline__ int a_cols_at(int m0, int k0, int ld) {
  const int l = threadIdx.x % 32, i = l / 8;
  return (k0 + l % 8 + (i / 2) * 8) * ld + m0 + (i % 2) * 8;
}
// B(k, n) stored as rows n (k contiguous): B fragments of the n8 tiles at n0 and n0 + 8 (x4; an x2
// load uses the first 16 lanes' addresses: the tile at n0), non-transposed load.
__device__ __forceinline__ int b_rows_at(int n0, int k0, int ld) {
  const int l = threadIdx.x % 32, i = l / 8;
  return (n0 + l % 8 + (i / 2) * 8) * ld + k0 + (i % 2) * 8;
}
// B(k, n) stored as rows k (n contiguous): the same fragments, transposed load.
__device__ __forceinline__ int b_cols_at(int n0, int k0, int ld) {
  const int l = threadIdx.x % 32, i = l / 8;
  return (k0 + l % 8 + (i % 2) * 8) * ld + n0 + (i / 2) * 8;
}

// The 16×16 A fragment at (m0, k0); A_T: A is stored transposed (rows k).
template <bool A_T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const __nv_bfloat16* A, int lda, int m0, int k0) {
  if (A_T) ldsm_x4_t(a, A + a_cols_at(m0, k0, lda));
  else ldsm_x4(a, A + a_rows_at(m0, k0, lda));
}

// c[j] += a · B(k0..k0+16, n0 + 8j..) for j < NT (B fragments in pairs by x4, an odd last one by
// x2). B_T: B is stored transposed (rows k).
template <int NT, bool B_T>
__device__ __forceinline__ void mma_row(float (&c)[NT][4], const uint32_t (&a)[4], const __nv_bfloat16* B, int ldb, int n0, int k0) {
#pragma unroll
  for (int j = 0; j + 1 < NT; j += 2) {
    uint32_t b[4];
    if (B_T) ldsm_x4_t(b, B + b_cols_at(n0 + 8 * j, k0, ldb));
    else ldsm_x4(b, B + b_rows_at(n0 + 8 * j, k0, ldb));
    mma_bf16(c[j], a, b[0], b[1]);
    mma_bf16(c[j + 1], a, b[2], b[3]);
  }
  if constexpr (NT % 2 == 1) {
    uint32_t b[2];
    if (B_T) ldsm_x2_t(b, B + b_cols_at(n0 + 8 * (NT - 1), k0, ldb));
    else ldsm_x2(b, B + b_rows_at(n0 + 8 * (NT - 1), k0, ldb));
    mma_bf16(c[NT - 1], a, b[0], b[1]);
  }
}

// Visits this lane's elements of an m16 × (8·NT) accumulator in pairs of adjacent columns (col even):
// f(row, col, float2) — one 8-byte store a pair where element-wise stores take two.
template <int NT, typename Fn>
__device__ __forceinline__ void for_each_c_pair(const float (&c)[NT][4], int m0, int n0, Fn f) {
  const int l = threadIdx.x % 32, g = l / 4, t = l % 4;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) f(m0 + g + hf * 8, n0 + 8 * j + 2 * t, make_float2(c[j][2 * hf], c[j][2 * hf + 1]));
}

}  // namespace nala::attention::cuda
