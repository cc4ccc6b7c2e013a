/*
 * gpt2_flash_tc.h — the fused causal attention of the GPT example's CUDA
 * path on tensor cores (bf16 and fp16 runs): the five products of flash
 * attention (S = Q K^T, O = P V; backward dP = dO V^T, dQ = dS K,
 * dK = dS^T Q, dV = P^T dO) as warp-level mma.sync m16n8k16 on bf16 or
 * fp16 operands (the block functions' f16: the run's dtype) with fp32
 * accumulate,
 * the softmax and its backward in fp32 registers. Written once for two
 * compilers like gpt2_flash_attn.h: nvcc builds the kernels (gpt2_cuda.cu),
 * a C compiler an emulation (tests/unit/test_gpt2_flash_tc_emu.c) in which
 * a warp's 32 lanes are arrays and each warp-wide step (the MMA, ldmatrix,
 * a shuffle across a row's four lanes) is a function over all of them,
 * following the PTX ISA's layouts ("Matrix Fragments for mma.m16n8k16 with
 * floating point type", "ldmatrix"): with g = lane / 4 and t = lane % 4,
 *   A (16 x 16, row): a0,a1 (row g, cols 2t, 2t+1), a2,a3 (row g+8),
 *     a4..a7 the same 8 columns on; two elements per 32-bit register, the
 *     lower index in the low half;
 *   B (16 x 8, col): b0,b1 (rows 2t, 2t+1, col g), b2,b3 (rows + 8);
 *   C/D (16 x 8, fp32): c0,c1 (row g, cols 2t, 2t+1), c2,c3 (row g+8).
 * (the same for bf16 and fp16). Two C tiles side by side (16 x 16) are,
 * rounded to the operand type, exactly an A
 * fragment: P and dS go from one product into the next without shared
 * memory.
 *
 * Blocks of TC_NT = 128 threads, 4 warps of 16 rows: 64 query rows
 * (forward, dq) or 64 key rows (dkv) per block, against tiles of 64 keys
 * (or queries) staged in shared memory as 16-bit pairs (one uint32_t holds
 * columns 2c, 2c+1; rows of TC_LDW words, 144 bytes: 16-byte aligned for
 * ldmatrix, and 8 rows of a matrix fall on distinct banks). A fragments are
 * read once per block, B fragments by ldmatrix.x4, two 8-column groups per
 * load. Head size hs = C / NH of at most 64; a smaller head
 * is zero-padded (exact zeros in every product, never written back).
 *   forward: grid (ceil(T/64), B*NH); online softmax per row (each lane
 *     keeps its share of the row sum, the row max is a 4-lane shuffle);
 *     writes out (fp32, or the operand type in a 16-bit run's 16-bit atty
 *     slot, gpt2_act16.h) and lse = m + log(l).
 *   backward, two kernels, no atomics: dq (per query tile; first stores
 *     D_i = dO_i . O_i, which equals sum_j P_ij dP_ij, for dkv, from the
 *     forward's out as stored: fp32 or 16-bit) and dkv (per
 *     key tile, over the query tiles from the diagonal on); both WRITE
 *     dqkv (the ops contract); every output element has exactly one
 *     writer, so no zeroing pass precedes them.
 * bias: qkv's bias [3C] (or NULL), added to q, k and v as their tiles are
 * loaded: the passes keep the qkv GEMM's output without it.
 * Precision: q, k, v, dO, P and dS are rounded to the operand type for
 * the products (as the run's GEMMs round their operands), sums and the
 * softmax are fp32. In an fp16 run dO and dS carry the loss scale, as the
 * GEMMs' gradient operands do: an overflow to inf makes the step's
 * gradients non-finite and the loss scaler skips it. Invariants: a barrier separates a phase that
 * writes shared memory from one that reads it; control flow around barriers and warp-wide steps
 * depends only on the block and warp index; rows past T are loaded as
 * zeros, see only finite scores and are never written; on the diagonal
 * tile a warp skips the 8-column products its rows cannot see.
 */
#ifndef GPT2_FLASH_TC_H
#define GPT2_FLASH_TC_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2_block.h"

#define TC_HS 64   /* head columns in a tile */
#define TC_ROWS 64 /* rows of a block's own tile (queries, or keys for dkv) */
#define TC_COLS 64 /* rows of the tile it walks (keys, or queries for dkv) */
#define TC_WARPS 4 /* 16 rows each */
#define TC_NT (32 * TC_WARPS)
#define TC_LDW 36            /* 32-bit words per tile row: 32 pairs + 4 of padding */
#define TC_KS (TC_HS / 16)   /* 16-column steps over the head */
#define TC_NTS (TC_COLS / 8) /* 8-column accumulator tiles over the walked tile */
#define TC_NTH (TC_HS / 8)   /* 8-column accumulator tiles over the head */

typedef uint32_t tc_tile[TC_ROWS][TC_LDW];
/* the tiles' alignment: ldmatrix reads 16-byte rows (TC_LDW words = 144 B) */
#ifdef __CUDACC__
#define TC_ALIGN __align__(16)
#else
#define TC_ALIGN _Alignas(16)
#endif

#ifdef __CUDACC__
#define TC_WARP(w)                                                                                 \
  {                                                                                                \
    const int w = (int)(threadIdx.x >> 5);                                                         \
    (void)w;
#define TC_LANES(l)                                                                                \
  {                                                                                                \
    const int l = (int)(threadIdx.x & 31);                                                         \
    (void)l;
#define TC_L(W, l) ((W)[0]) /* a lane's registers: the thread's own */
#define TC_WS(st, w) (st)   /* a warp's lanes: the thread's own */
#else
#define TC_WARP(w) for (int w = 0; w < TC_WARPS; w++) {
#define TC_LANES(l) for (int l = 0; l < 32; l++) {
#define TC_L(W, l) ((W)[l])
#define TC_WS(st, w) ((st) + (size_t)(w)*32)
#endif
#define TC_END }
/* A warp-wide MMA on fields of the lane structs W: W.d += W.a x W.b, in
 * the element type of the block function's `f16` (every block function
 * has that parameter: 0 bf16, 1 fp16). */
#define TC_MMA(W, d, a, b) tc_mma((W)[0].d, (W)[0].a, (W)[0].b, sizeof *(W), f16)

/* x as the 16 bits of the operand type (f16: fp16, else bf16), and back */
GB_DEV uint32_t tc_bits(float x, int f16) { return f16 ? gb_f16(x) : gb_bf16(x); }
GB_DEV float tc_val(uint32_t bits, int f16) { return f16 ? gb_from_f16(bits) : gb_from_bf16(bits); }
GB_DEV uint32_t tc_pack(float lo, float hi, int f16) {
  return tc_bits(lo, f16) | tc_bits(hi, f16) << 16;
}
/* Element c (a column) of a tile row of pairs, as its 16 bits. */
GB_DEV uint32_t tc_elem(const uint32_t *row, int c) {
  return (row[c >> 1] >> ((c & 1) * 16)) & 0xffffu;
}
/* d += a x b over one warp (m16n8k16, bf16 or with f16 fp16 in, fp32
 * accumulate; the two share the fragment layouts). On CUDA every thread
 * passes its own fragments; the emulation passes lane 0's and finds lane
 * l's l * stride bytes further on. */
GB_DEV void tc_mma(float *d, const uint32_t *a, const uint32_t *b, size_t stride, int f16) {
#ifdef __CUDACC__
  (void)stride;
  /* volatile: never moved into lane-divergent code (f16 is uniform) */
  if (f16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  float A[16][16], Bm[16][8];
  for (int l = 0; l < 32; l++) {
    const uint32_t *al = (const uint32_t *)((const char *)a + (size_t)l * stride);
    const uint32_t *bl = (const uint32_t *)((const char *)b + (size_t)l * stride);
    int g = l >> 2, t = l & 3;
    for (int i = 0; i < 8; i++)
      A[g + 8 * ((i >> 1) & 1)][2 * t + (i & 1) + 8 * (i >> 2)] =
          tc_val(al[i >> 1] >> ((i & 1) * 16), f16);
    for (int i = 0; i < 4; i++)
      Bm[2 * t + (i & 1) + 8 * (i >> 1)][g] = tc_val(bl[i >> 1] >> ((i & 1) * 16), f16);
  }
  float D[16][8];
  for (int l = 0; l < 32; l++) {
    const float *dl = (const float *)((const char *)d + (size_t)l * stride);
    for (int i = 0; i < 4; i++) D[(l >> 2) + 8 * (i >> 1)][2 * (l & 3) + (i & 1)] = dl[i];
  }
  for (int m = 0; m < 16; m++)
    for (int n = 0; n < 8; n++) {
      float acc = D[m][n];
      for (int k = 0; k < 16; k++)
        acc += A[m][k] * Bm[k][n]; /* bf16 and fp16 products are exact in fp32 */
      D[m][n] = acc;
    }
  for (int l = 0; l < 32; l++) {
    float *dl = (float *)((char *)d + (size_t)l * stride);
    for (int i = 0; i < 4; i++) dl[i] = D[(l >> 2) + 8 * (i >> 1)][2 * (l & 3) + (i & 1)];
  }
#endif
}

/* x becomes the max (sum = 0) or sum (sum = 1) over its lane's quad: the
 * four lanes 4g..4g+3 that hold one accumulator row. Butterfly order
 * (xor 1, then xor 2) on both compilers. */
GB_DEV void tc_quad(float *x, size_t stride, int sum) {
#ifdef __CUDACC__
  (void)stride;
  float v = *x;
  GB_UNROLL for (int o = 1; o <= 2; o <<= 1) {
    float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = sum ? v + u : fmaxf(v, u);
  }
  *x = v;
#else
  float v[32], u[32];
  for (int l = 0; l < 32; l++) v[l] = *(const float *)((const char *)x + (size_t)l * stride);
  for (int o = 1; o <= 2; o <<= 1) {
    for (int l = 0; l < 32; l++) u[l] = sum ? v[l] + v[l ^ o] : fmaxf(v[l], v[l ^ o]);
    for (int l = 0; l < 32; l++) v[l] = u[l];
  }
  for (int l = 0; l < 32; l++) *(float *)((char *)x + (size_t)l * stride) = v[l];
#endif
}
#define TC_QUAD(W, f, sum) tc_quad(&(W)[0].f, sizeof *(W), sum)

/* An A fragment (rows m0.., cols k0..) from a tile holding A's rows (the
 * B fragments come by ldmatrix, tc_ldsm). */
GB_DEV void tc_frag_a(uint32_t a[4], const tc_tile t, int m0, int k0, int l) {
  int g = l >> 2, c = k0 / 2 + (l & 3);
  a[0] = t[m0 + g][c];
  a[1] = t[m0 + g + 8][c];
  a[2] = t[m0 + g][c + 4];
  a[3] = t[m0 + g + 8][c + 4];
}
/* Accumulator tiles 2j, 2j+1 (16 x 16) rounded into an A fragment. */
GB_DEV void tc_c_to_a(uint32_t a[4], const float (*c)[4], int j, int f16) {
  a[0] = tc_pack(c[2 * j][0], c[2 * j][1], f16);
  a[1] = tc_pack(c[2 * j][2], c[2 * j][3], f16);
  a[2] = tc_pack(c[2 * j + 1][0], c[2 * j + 1][1], f16);
  a[3] = tc_pack(c[2 * j + 1][2], c[2 * j + 1][3], f16);
}

/* ldmatrix.x4 (trans: .trans) over one warp: four 8x8 matrices of 16-bit
 * elements from shared memory, lane 8i + r giving the address of matrix
 * i's row r (16 bytes, 16-byte aligned). Lane t receives in r[i] the pair
 * (row t/4, columns 2(t%4), +1) of matrix i, or with trans (rows 2(t%4)
 * and +1, column t/4): exactly a B fragment's b0,b1 when the rows are B's
 * columns (non-trans) or B's rows (trans). On CUDA each thread passes its
 * own address (*ra); the emulation reads every lane's (lane 0's field, the
 * lanes stride bytes apart, as tc_mma) and dies on a misaligned one. */
GB_DEV void tc_ldsm(uint32_t *r, const uint32_t *const *ra, int trans, size_t stride) {
#ifdef __CUDACC__
  (void)stride;
  unsigned a = (unsigned)__cvta_generic_to_shared(*ra);
  if (trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#else
  const uint32_t *row[32];
  uint32_t out[32][4];
  for (int l = 0; l < 32; l++) {
    row[l] = *(const uint32_t *const *)((const char *)ra + (size_t)l * stride);
    if ((uintptr_t)row[l] % 16) abort(); /* ldmatrix's rows are 16-byte aligned */
  }
  for (int t = 0; t < 32; t++)
    for (int i = 0; i < 4; i++) {
      if (!trans) {
        out[t][i] = row[8 * i + t / 4][t % 4];
      } else {
        const uint32_t *r0 = row[8 * i + 2 * (t % 4)], *r1 = row[8 * i + 2 * (t % 4) + 1];
        out[t][i] = tc_elem(r0, t / 4) | tc_elem(r1, t / 4) << 16;
      }
    }
  for (int t = 0; t < 32; t++) memcpy((char *)r + (size_t)t * stride, out[t], sizeof out[t]);
#endif
}

/* acc[0..n) = 0 (n accumulator tiles of one lane). */
GB_DEV void tc_zero(float (*acc)[4], int n) {
  GB_UNROLL for (int t = 0; t < n; t++) GB_UNROLL for (int i = 0; i < 4; i++) acc[t][i] = 0.0f;
}

/* The two kinds of product, warp-wide on the lane structs W (fields named):
 * TC_PROD_NK: acc[nt] += A(a[ks]) x t^T over the head's 16-column steps ks,
 *   for the walked tile's 8-row groups nt in [nbeg, nend) (Q K^T, dO V^T,
 *   K Q^T, V dO^T: t holds B's columns as rows);
 * TC_PROD_KN: acc[nt] += (C tiles 2j, 2j+1 of c as A) x t[16j .. 16j+16)
 *   for every 8-column group nt of the head (P V, dS K, P^T dO, dS^T Q). */
#define TC_PROD_NK(W, acc, a, t, nbeg, nend)                                                       \
  GB_UNROLL for (int ks_ = 0; ks_ < TC_KS; ks_++)                                                  \
      GB_UNROLL for (int nt_ = 0; nt_ < TC_NTS; nt_ += 2) {                                        \
    if (nt_ >= (nbeg) && nt_ < (nend)) { /* groups nt_, nt_ + 1 by one ldmatrix */                 \
      TC_LANES(l)                                                                                  \
      TC_L(W, l).ra = &(t)[8 * nt_ + 8 * (l >> 4) + (l & 7)][(16 * ks_ + 8 * ((l >> 3) & 1)) / 2]; \
      TC_END                                                                                       \
      tc_ldsm((W)[0].b4, &(W)[0].ra, 0, sizeof *(W));                                              \
      TC_MMA(W, acc[nt_], a[ks_], b4);                                                             \
      TC_MMA(W, acc[nt_ + 1], a[ks_], b4 + 2);                                                     \
    }                                                                                              \
  }
#define TC_PROD_KN(W, acc, c, t, j)                                                                \
  {                                                                                                \
    TC_LANES(l)                                                                                    \
    tc_c_to_a(TC_L(W, l).pa, (const float(*)[4])TC_L(W, l).c, j, f16);                             \
    TC_END                                                                                         \
    GB_UNROLL for (int nt_ = 0; nt_ < TC_NTH; nt_ += 2) {                                          \
      TC_LANES(l)                                                                                  \
      TC_L(W, l).ra = &(t)[16 * (j) + 8 * ((l >> 3) & 1) + (l & 7)][(8 * nt_ + 8 * (l >> 4)) / 2]; \
      TC_END                                                                                       \
      tc_ldsm((W)[0].b4, &(W)[0].ra, 1, sizeof *(W));                                              \
      TC_MMA(W, acc[nt_], pa, b4);                                                                 \
      TC_MMA(W, acc[nt_ + 1], pa, b4 + 2);                                                         \
    }                                                                                              \
  }

/* Rows [r0, r0 + 64) of one head's slice (offset col in rows of ld floats,
 * hs columns) as pairs of the block's operand type (f16); rows >= T and
 * columns >= hs become zeros. */
#define TC_LOAD_TILE(dst, src, ld, col, r0, T, hs, tid, bias)                                      \
  for (int e_ = (tid); e_ < TC_ROWS * (TC_HS / 2); e_ += TC_NT) {                                  \
    int r_ = e_ / (TC_HS / 2), c_ = e_ % (TC_HS / 2), d_ = 2 * c_, row_ = (r0) + r_;               \
    float x0_ = 0.0f, x1_ = 0.0f;                                                                  \
    if (row_ < (T) && d_ < (hs)) {                                                                 \
      const float *p_ = (src) + (size_t)row_ * (size_t)(ld) + (size_t)(col) + d_;                  \
      const float *b_ = (bias); /* the slice's bias from its column 0, or NULL */                  \
      x0_ = b_ ? p_[0] + b_[d_] : p_[0];                                                           \
      if (d_ + 1 < (hs)) x1_ = b_ ? p_[1] + b_[d_ + 1] : p_[1];                                    \
    }                                                                                              \
    (dst)[r_][c_] = tc_pack(x0_, x1_, f16);                                                        \
  }

/* Element e of an fp32 array, or with s16 of an array of the operand type
 * (f16) */
GB_DEV float tc_in(const void *p, int s16, size_t e, int f16) {
  return s16 ? tc_val(((const uint16_t *)p)[e], f16) : ((const float *)p)[e];
}

/* TC_LOAD_TILE without a bias from src (elements from e0 on, rows of ld),
 * fp32 or with s16 of the operand type (a 16-bit run's dC slot, dO). */
#define TC_LOAD_TILE_IN(dst, src, s16, e0, ld, col, r0, T, hs, tid)                                \
  for (int e_ = (tid); e_ < TC_ROWS * (TC_HS / 2); e_ += TC_NT) {                                  \
    int r_ = e_ / (TC_HS / 2), c_ = e_ % (TC_HS / 2), d_ = 2 * c_, row_ = (r0) + r_;               \
    float x0_ = 0.0f, x1_ = 0.0f;                                                                  \
    if (row_ < (T) && d_ < (hs)) {                                                                 \
      const size_t o_ = (e0) + (size_t)row_ * (size_t)(ld) + (size_t)(col) + (size_t)d_;           \
      x0_ = tc_in((src), (s16), o_, f16);                                                          \
      if (d_ + 1 < (hs)) x1_ = tc_in((src), (s16), o_ + 1, f16);                                   \
    }                                                                                              \
    (dst)[r_][c_] = tc_pack(x0_, x1_, f16);                                                        \
  }

/* The bias of qkv's column `col` on, or NULL (no bias). */
#define TC_BIAS(bias, col) ((bias) ? (bias) + (col) : (const float *)NULL)

/* p[e] = y: fp32, or with d16 the operand type's bits (round to nearest
 * even). */
GB_DEV void tc_store(void *p, int d16, size_t e, float y, int f16) {
  if (d16)
    ((uint16_t *)p)[e] = (uint16_t)tc_bits(y, f16);
  else
    ((float *)p)[e] = y;
}

typedef struct tc_fwd_smem {
  TC_ALIGN tc_tile q, k, v;
} tc_fwd_smem;
typedef struct tc_fwd_lane {
  uint32_t qa[TC_KS][4]; /* the warp's 16 query rows as A fragments */
  uint32_t b4[4], pa[4]; /* B fragments of two 8-column groups; P or dS as A */
  const uint32_t *ra;    /* this lane's ldmatrix row */
  float s[TC_NTS][4];    /* scores, then probabilities, of 16 rows x 64 keys */
  float o[TC_NTH][4];
  float m[2], sum[2], mt[2]; /* rows g, g+8: running max, this lane's share of the sum, tile max */
} tc_fwd_lane;

/* Forward of query tile qt (64 rows) of head bh, on operands of type f16
 * (0 bf16, 1 fp16). out: [B*T, C] of fp32, or of the operand type when o16
 * (a 16-bit run's 16-bit atty, gpt2_act16.h: same element index). lse:
 * [B*NH, T]. st: the lanes' registers (one on CUDA, TC_NT in the
 * emulation). */
GB_DEV void tc_forward_block(const float *qkv, const float *bias, void *out, int o16, float *lse,
                             int T, int C, int NH, int qt, int bh, int f16, tc_fwd_smem *sm,
                             tc_fwd_lane *st) {
  const int b = bh / NH, h = bh % NH, C3 = 3 * C, q0 = qt * TC_ROWS, hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  const float *base = qkv + (size_t)b * T * C3;
  const int q_last = (q0 + TC_ROWS < T ? q0 + TC_ROWS : T) - 1;
  GB_THREADS(tid, TC_NT)
  TC_LOAD_TILE(sm->q, base, C3, h * hs, q0, T, hs, tid, TC_BIAS(bias, h * hs));
  GB_END
  GB_SYNC();
  TC_WARP(w)
  tc_fwd_lane *W = TC_WS(st, w);
  TC_LANES(l)
  tc_fwd_lane *me = &TC_L(W, l);
  GB_UNROLL for (int ks = 0; ks < TC_KS; ks++) tc_frag_a(me->qa[ks], sm->q, 16 * w, 16 * ks, l);
  GB_UNROLL for (int r = 0; r < 2; r++) {
    me->m[r] = -INFINITY;
    me->sum[r] = 0.0f;
  }
  tc_zero(me->o, TC_NTH);
  TC_END
  TC_END
  for (int k0 = 0; k0 <= q_last; k0 += TC_COLS) {
    GB_SYNC(); /* the previous tile's k, v are no longer read */
    GB_THREADS(tid, TC_NT)
    TC_LOAD_TILE(sm->k, base, C3, C + h * hs, k0, T, hs, tid, TC_BIAS(bias, C + h * hs));
    TC_LOAD_TILE(sm->v, base, C3, 2 * C + h * hs, k0, T, hs, tid, TC_BIAS(bias, 2 * C + h * hs));
    GB_END
    GB_SYNC();
    TC_WARP(w)
    tc_fwd_lane *W = TC_WS(st, w);
    /* on the diagonal tile (k0 == q0) rows 16w.. see keys < 16w + 16 only */
    const int ncol = k0 == q0 ? 2 * w + 2 : TC_NTS, nks = ncol / 2;
    TC_LANES(l)
    tc_zero(TC_L(W, l).s, TC_NTS);
    TC_END
    TC_PROD_NK(W, s, qa, sm->k, 0, ncol)
    TC_LANES(l)
    tc_fwd_lane *me = &TC_L(W, l);
    const int g = l >> 2, t = l & 3;
    GB_UNROLL for (int r = 0; r < 2; r++) {
      const int row = q0 + 16 * w + g + 8 * r;
      float mt = -INFINITY;
      GB_UNROLL for (int nt = 0; nt < TC_NTS; nt++) GB_UNROLL for (int c = 0; c < 2; c++) {
        const int col = k0 + 8 * nt + 2 * t + c;
        float x = col <= row ? me->s[nt][2 * r + c] * scale : -INFINITY; /* causal */
        me->s[nt][2 * r + c] = x;
        mt = fmaxf(mt, x);
      }
      me->mt[r] = mt;
    }
    TC_END
    TC_QUAD(W, mt[0], 0);
    TC_QUAD(W, mt[1], 0);
    TC_LANES(l)
    tc_fwd_lane *me = &TC_L(W, l);
    GB_UNROLL for (int r = 0; r < 2; r++) {
      /* every row sees key k0 of each tile it walks: mnew is finite */
      const float mnew = fmaxf(me->m[r], me->mt[r]);
      const float alpha = expf(me->m[r] - mnew); /* 0 on the first tile (m = -inf) */
      float lsum = 0.0f;
      GB_UNROLL for (int nt = 0; nt < TC_NTS; nt++) GB_UNROLL for (int c = 0; c < 2; c++) {
        float p = expf(me->s[nt][2 * r + c] - mnew); /* masked: exp(-inf) = 0 */
        me->s[nt][2 * r + c] = p;
        lsum += p;
      }
      me->sum[r] = me->sum[r] * alpha + lsum;
      me->m[r] = mnew;
      GB_UNROLL for (int nt = 0; nt < TC_NTH; nt++) GB_UNROLL for (int c = 0; c < 2; c++)
          me->o[nt][2 * r + c] *= alpha;
    }
    TC_END
    GB_UNROLL for (int j = 0; j < TC_COLS / 16; j++) {
      if (j < nks) TC_PROD_KN(W, o, s, sm->v, j)
    }
    TC_END
  }
  TC_WARP(w)
  tc_fwd_lane *W = TC_WS(st, w);
  TC_QUAD(W, sum[0], 1);
  TC_QUAD(W, sum[1], 1);
  TC_LANES(l)
  tc_fwd_lane *me = &TC_L(W, l);
  const int g = l >> 2, t = l & 3;
  GB_UNROLL for (int r = 0; r < 2; r++) {
    const int row = q0 + 16 * w + g + 8 * r;
    if (row < T) {
      const float inv = 1.0f / me->sum[r]; /* l >= 1: the row max's term is exp(0) */
      const size_t o0 = ((size_t)b * T + row) * C + h * hs;
      GB_UNROLL for (int nt = 0; nt < TC_NTH; nt++) GB_UNROLL for (int c = 0; c < 2; c++) {
        const int d = 8 * nt + 2 * t + c;
        const float y = me->o[nt][2 * r + c] * inv;
        if (d >= hs) continue;
        if (o16)
          ((uint16_t *)out)[o0 + d] = (uint16_t)tc_bits(y, f16);
        else
          ((float *)out)[o0 + d] = y;
      }
      if (t == 0) lse[(size_t)bh * T + row] = me->m[r] + logf(me->sum[r]);
    }
  }
  TC_END
  TC_END
}

typedef struct tc_dq_smem {
  TC_ALIGN tc_tile q, dout, k, v;
  float dpart[TC_ROWS][8]; /* D's partial sums: 8 threads per row */
  float d[TC_ROWS];
} tc_dq_smem;
typedef struct tc_dq_lane {
  uint32_t qa[TC_KS][4], da[TC_KS][4]; /* the warp's 16 rows of q and dO */
  uint32_t b4[4], pa[4];               /* B fragments of two 8-column groups; P or dS as A */
  const uint32_t *ra;                  /* this lane's ldmatrix row */
  float s[TC_NTS][4], dp[TC_NTS][4];   /* S then dS, dO V^T */
  float dq[TC_NTH][4];
  float lse[2], d[2];
} tc_dq_lane;

/* dq of query tile qt of head bh, written into dqkv's q part; stores
 * D_i = dO_i . O_i (out: the forward's output, of the operand type f16
 * when o16) into dstat [B*NH, T] for tc_dkv_block. dqkv: [B*T, 3C] of
 * fp32, or with d16 of the operand type (a 16-bit run's gradient for the
 * qkv GEMMs, in its d4C slot or gpt2_cuda.cu's held copy; same element
 * index). dout: [B*T, C] of fp32, or with do16 of the operand type (a
 * 16-bit run's dC slot). */
GB_DEV void tc_dq_block(void *dqkv, int d16, float *dstat, const void *dout, int do16,
                        const float *qkv, const float *bias, const void *out, int o16,
                        const float *lse, int T, int C, int NH, int qt, int bh, int f16,
                        tc_dq_smem *sm, tc_dq_lane *st) {
  const int b = bh / NH, h = bh % NH, C3 = 3 * C, q0 = qt * TC_ROWS, hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  const float *base = qkv + (size_t)b * T * C3;
  const size_t dbase = (size_t)b * T * C; /* dout's first element of sequence b */
  const int q_last = (q0 + TC_ROWS < T ? q0 + TC_ROWS : T) - 1;
  GB_THREADS(tid, TC_NT)
  TC_LOAD_TILE(sm->q, base, C3, h * hs, q0, T, hs, tid, TC_BIAS(bias, h * hs));
  TC_LOAD_TILE_IN(sm->dout, dout, do16, dbase, C, h * hs, q0, T, hs, tid);
  /* D_i = dO_i . O_i in fp32: 8 threads per row, a row's 8 threads reading
   * 8 neighbouring columns together (coalesced) */
  for (int r = tid >> 3; r < TC_ROWS; r += TC_NT / 8) {
    const int i = q0 + r, j = tid & 7;
    float acc = 0.0f;
    if (i < T) {
      const size_t y0 = ((size_t)b * T + i) * C + h * hs; /* dO's and O's */
      for (int d = j; d < hs; d += 8)
        acc += tc_in(dout, do16, y0 + d, f16) * tc_in(out, o16, y0 + d, f16);
    }
    sm->dpart[r][j] = acc;
  }
  GB_END
  GB_SYNC();
  GB_THREADS(tid, TC_NT)
  if (tid < TC_ROWS) {
    const int i = q0 + tid;
    float acc = 0.0f;
    for (int j = 0; j < 8; j++) acc += sm->dpart[tid][j];
    sm->d[tid] = acc; /* 0 past T */
    if (i < T) dstat[(size_t)bh * T + i] = acc;
  }
  GB_END
  GB_SYNC();
  TC_WARP(w)
  tc_dq_lane *W = TC_WS(st, w);
  TC_LANES(l)
  tc_dq_lane *me = &TC_L(W, l);
  GB_UNROLL for (int ks = 0; ks < TC_KS; ks++) {
    tc_frag_a(me->qa[ks], sm->q, 16 * w, 16 * ks, l);
    tc_frag_a(me->da[ks], sm->dout, 16 * w, 16 * ks, l);
  }
  GB_UNROLL for (int r = 0; r < 2; r++) {
    const int lr = 16 * w + (l >> 2) + 8 * r, i = q0 + lr;
    me->lse[r] = i < T ? lse[(size_t)bh * T + i] : 0.0f;
    me->d[r] = sm->d[lr];
  }
  tc_zero(me->dq, TC_NTH);
  TC_END
  TC_END
  for (int k0 = 0; k0 <= q_last; k0 += TC_COLS) {
    GB_SYNC();
    GB_THREADS(tid, TC_NT)
    TC_LOAD_TILE(sm->k, base, C3, C + h * hs, k0, T, hs, tid, TC_BIAS(bias, C + h * hs));
    TC_LOAD_TILE(sm->v, base, C3, 2 * C + h * hs, k0, T, hs, tid, TC_BIAS(bias, 2 * C + h * hs));
    GB_END
    GB_SYNC();
    TC_WARP(w)
    tc_dq_lane *W = TC_WS(st, w);
    const int ncol = k0 == q0 ? 2 * w + 2 : TC_NTS, nks = ncol / 2;
    TC_LANES(l)
    tc_zero(TC_L(W, l).s, TC_NTS);
    tc_zero(TC_L(W, l).dp, TC_NTS);
    TC_END
    TC_PROD_NK(W, s, qa, sm->k, 0, ncol)
    TC_PROD_NK(W, dp, da, sm->v, 0, ncol)
    TC_LANES(l)
    tc_dq_lane *me = &TC_L(W, l);
    const int g = l >> 2, t = l & 3;
    GB_UNROLL for (int r = 0; r < 2; r++) {
      const int row = q0 + 16 * w + g + 8 * r;
      GB_UNROLL for (int nt = 0; nt < TC_NTS; nt++) GB_UNROLL for (int c = 0; c < 2; c++) {
        const int col = k0 + 8 * nt + 2 * t + c, e = 2 * r + c;
        const float p = col <= row ? expf(me->s[nt][e] * scale - me->lse[r]) : 0.0f;
        me->s[nt][e] = p * (me->dp[nt][e] - me->d[r]) * scale; /* dS, scaled for dq */
      }
    }
    TC_END
    GB_UNROLL for (int j = 0; j < TC_COLS / 16; j++) {
      if (j < nks) TC_PROD_KN(W, dq, s, sm->k, j)
    }
    TC_END
  }
  TC_WARP(w)
  tc_dq_lane *W = TC_WS(st, w);
  TC_LANES(l)
  tc_dq_lane *me = &TC_L(W, l);
  const int g = l >> 2, t = l & 3;
  GB_UNROLL for (int r = 0; r < 2; r++) {
    const int row = q0 + 16 * w + g + 8 * r;
    if (row < T) {
      const size_t q = ((size_t)b * T + row) * C3 + h * hs;
      GB_UNROLL for (int nt = 0; nt < TC_NTH; nt++) GB_UNROLL for (int c = 0; c < 2; c++) {
        const int d = 8 * nt + 2 * t + c;
        if (d < hs) tc_store(dqkv, d16, q + d, me->dq[nt][2 * r + c], f16);
      }
    }
  }
  TC_END
  TC_END
}

typedef struct tc_dkv_smem {
  TC_ALIGN tc_tile k, v, q, dout;
  float lse[TC_COLS], d[TC_COLS];
} tc_dkv_smem;
typedef struct tc_dkv_lane {
  uint32_t ka[TC_KS][4], va[TC_KS][4]; /* the warp's 16 key rows of k and v */
  uint32_t b4[4], pa[4];               /* B fragments of two 8-column groups; P or dS as A */
  const uint32_t *ra;                  /* this lane's ldmatrix row */
  float s[TC_NTS][4], dp[TC_NTS][4];   /* S^T then P^T, dO V^T transposed then dS^T */
  float dk[TC_NTH][4], dv[TC_NTH][4];
} tc_dkv_lane;

/* dk, dv of key tile kt of head bh, written into dqkv's k and v parts (fp32,
 * or with d16 as tc_dq_block's). Needs lse (forward) and dstat
 * (tc_dq_block) of every query row. dout: as tc_dq_block's. */
GB_DEV void tc_dkv_block(void *dqkv, int d16, const void *dout, int do16, const float *qkv,
                         const float *bias, const float *lse, const float *dstat, int T, int C,
                         int NH, int kt, int bh, int f16, tc_dkv_smem *sm, tc_dkv_lane *st) {
  const int b = bh / NH, h = bh % NH, C3 = 3 * C, k0 = kt * TC_ROWS, hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  const float *base = qkv + (size_t)b * T * C3;
  const size_t dbase = (size_t)b * T * C; /* dout's first element of sequence b */
  GB_THREADS(tid, TC_NT)
  TC_LOAD_TILE(sm->k, base, C3, C + h * hs, k0, T, hs, tid, TC_BIAS(bias, C + h * hs));
  TC_LOAD_TILE(sm->v, base, C3, 2 * C + h * hs, k0, T, hs, tid, TC_BIAS(bias, 2 * C + h * hs));
  GB_END
  GB_SYNC();
  TC_WARP(w)
  tc_dkv_lane *W = TC_WS(st, w);
  TC_LANES(l)
  tc_dkv_lane *me = &TC_L(W, l);
  GB_UNROLL for (int ks = 0; ks < TC_KS; ks++) {
    tc_frag_a(me->ka[ks], sm->k, 16 * w, 16 * ks, l);
    tc_frag_a(me->va[ks], sm->v, 16 * w, 16 * ks, l);
  }
  tc_zero(me->dk, TC_NTH);
  tc_zero(me->dv, TC_NTH);
  TC_END
  TC_END
  /* query rows i >= key j: query tiles from the diagonal on */
  for (int q0 = k0; q0 < T; q0 += TC_COLS) {
    GB_SYNC();
    GB_THREADS(tid, TC_NT)
    TC_LOAD_TILE(sm->q, base, C3, h * hs, q0, T, hs, tid, TC_BIAS(bias, h * hs));
    TC_LOAD_TILE_IN(sm->dout, dout, do16, dbase, C, h * hs, q0, T, hs, tid);
    if (tid < TC_COLS) {
      const int i = q0 + tid;
      sm->lse[tid] = i < T ? lse[(size_t)bh * T + i] : 0.0f;
      sm->d[tid] = i < T ? dstat[(size_t)bh * T + i] : 0.0f;
    }
    GB_END
    GB_SYNC();
    TC_WARP(w)
    tc_dkv_lane *W = TC_WS(st, w);
    /* on the diagonal tile keys 16w.. are seen by queries >= 16w only */
    const int nbeg = q0 == k0 ? 2 * w : 0, jbeg = nbeg / 2;
    TC_LANES(l)
    tc_zero(TC_L(W, l).s, TC_NTS);
    tc_zero(TC_L(W, l).dp, TC_NTS);
    TC_END
    TC_PROD_NK(W, s, ka, sm->q, nbeg, TC_NTS)
    TC_PROD_NK(W, dp, va, sm->dout, nbeg, TC_NTS)
    TC_LANES(l)
    tc_dkv_lane *me = &TC_L(W, l);
    const int g = l >> 2, t = l & 3;
    GB_UNROLL for (int r = 0; r < 2; r++) {
      const int key = k0 + 16 * w + g + 8 * r;
      GB_UNROLL for (int nt = 0; nt < TC_NTS; nt++) GB_UNROLL for (int c = 0; c < 2; c++) {
        const int li = 8 * nt + 2 * t + c, i = q0 + li, e = 2 * r + c;
        const float p = i >= key && i < T ? expf(me->s[nt][e] * scale - sm->lse[li]) : 0.0f;
        me->s[nt][e] = p;
        me->dp[nt][e] = p * (me->dp[nt][e] - sm->d[li]) * scale;
      }
    }
    TC_END
    GB_UNROLL for (int j = 0; j < TC_COLS / 16; j++) {
      if (j >= jbeg) {
        TC_PROD_KN(W, dv, s, sm->dout, j)
        TC_PROD_KN(W, dk, dp, sm->q, j)
      }
    }
    TC_END
  }
  TC_WARP(w)
  tc_dkv_lane *W = TC_WS(st, w);
  TC_LANES(l)
  tc_dkv_lane *me = &TC_L(W, l);
  const int g = l >> 2, t = l & 3;
  GB_UNROLL for (int r = 0; r < 2; r++) {
    const int key = k0 + 16 * w + g + 8 * r;
    if (key < T) {
      const size_t k = ((size_t)b * T + key) * C3 + C + h * hs, v = k + C;
      GB_UNROLL for (int nt = 0; nt < TC_NTH; nt++) GB_UNROLL for (int c = 0; c < 2; c++) {
        const int d = 8 * nt + 2 * t + c;
        if (d < hs) {
          tc_store(dqkv, d16, k + d, me->dk[nt][2 * r + c], f16);
          tc_store(dqkv, d16, v + d, me->dv[nt][2 * r + c], f16);
        }
      }
    }
  }
  TC_END
  TC_END
}

#endif
