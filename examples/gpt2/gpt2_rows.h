/*
 * gpt2_rows.h — the row and column reductions of the GPT example's CUDA
 * path, written once for two compilers as gpt2_flash_attn.h is: nvcc builds
 * the kernels from it (gpt2_cuda.cu), and a C compiler builds an emulation
 * that runs the same block functions on the CPU, the threads of a block one
 * after the other between barriers (gpt2_block.h's phases;
 * tests/unit/test_gpt2_rows_emu.c checks
 * it against double references, so the algorithm is tested where no GPU is).
 *
 *   cross-entropy: one block of RW_CE_NT threads per row of logits [N, V]:
 *     the row's max, then the sum of exp(l - max), each a strided pass whose
 *     per-thread partials are folded by a tree in shared memory; the loss,
 *     then (dloss != 0) the row overwritten by its gradient, or, given g16,
 *     the gradient rounded to bf16 (or with f16 fp16) into g16 (the row
 *     kept: a 16-bit run's GEMMs read that copy instead of rounding the
 *     fp32 one). Coalesced: the
 *     kernel it replaced ran one thread per row, each walking its own row
 *     of up to 50257 floats, on N / 128 blocks.
 *   column sums: db[c] += sum_i dout[i, c] (the bias's gradient), and with
 *     inp, dw[c] += sum_i (inp[i, c] - mean[i]) rstd[i] dout[i, c] (the
 *     LayerNorm's weight gradient beside its bias's): one block per group
 *     of RW_COLS columns, RW_ROWS row lanes each walking every RW_ROWS-th
 *     row with RW_UNROLL loads in flight, the lanes' partials folded in lane
 *     order. Deterministic and without atomics (the LayerNorm's used two
 *     same-address atomicAdd per element, N-way contended; the bias's ran
 *     one thread per column on OC / 256 blocks).
 *   GELU backward with its bias's gradient: the column sum's walk, each
 *     element turned into dout * gelu'(inp + bias) and written back before
 *     it is summed (one pass over the MLP's [N, 4C] instead of two); in a
 *     16-bit run written only as the 16-bit copy the next two GEMMs read.
 * Every output has one writer; both ADD into their outputs (the ops
 * contract). Invariants: a barrier separates a phase that writes shared
 * memory from one that reads it; control flow around barriers depends only
 * on the block's arguments; the sums' order is fixed by the shapes alone.
 */
#ifndef GPT2_ROWS_H
#define GPT2_ROWS_H

#include <math.h>
#include <stddef.h>

#include "gpt2_block.h"

#define RW_CE_NT 256 /* threads per cross-entropy block (a power of two) */
#define RW_COLS 32   /* columns per column-sum block: one warp's 128-byte row segment */
#define RW_ROWS 32   /* row lanes per column-sum block */
#define RW_COL_NT (RW_COLS * RW_ROWS)
#define RW_UNROLL 4 /* rows each lane loads before it adds */

typedef struct rw_ce_smem {
  float mx[RW_CE_NT];  /* per-thread maxima, folded into mx[0] */
  float sum[RW_CE_NT]; /* per-thread sums of exp(l - max), folded into sum[0] */
} rw_ce_smem;

/* Folds a[0..RW_CE_NT) into a[0] (max when is_max, else sum), by halves. */
#define RW_TREE(a, is_max)                                                                         \
  for (int s_ = RW_CE_NT / 2; s_ > 0; s_ >>= 1) {                                                  \
    GB_THREADS(tid, RW_CE_NT)                                                                      \
    if (tid < s_) (a)[tid] = (is_max) ? fmaxf((a)[tid], (a)[tid + s_]) : (a)[tid] + (a)[tid + s_]; \
    GB_END                                                                                         \
    GB_SYNC();                                                                                     \
  }

/* Row `row` of logits [., V]: losses[row] = logsumexp - logit of the
 * target; when dloss != 0 the row becomes (softmax - onehot(target)) *
 * dloss, or with g16 non-NULL that gradient goes to g16 [., V] as bf16,
 * or fp16 when f16 (round to nearest even), and the row stays. */
GB_DEV void rw_crossentropy_block(float *losses, float *logits, const int *targets, int V,
                                  float dloss, int row, rw_ce_smem *sm, uint16_t *g16, int f16) {
  float *l = logits + (size_t)row * (size_t)V;
  GB_THREADS(tid, RW_CE_NT)
  float m = -INFINITY;
  for (int v = tid; v < V; v += RW_CE_NT) m = fmaxf(m, l[v]);
  sm->mx[tid] = m;
  GB_END
  GB_SYNC();
  RW_TREE(sm->mx, 1)
  GB_THREADS(tid, RW_CE_NT)
  const float mx = sm->mx[0];
  float a = 0.0f;
  for (int v = tid; v < V; v += RW_CE_NT) a += expf(l[v] - mx);
  sm->sum[tid] = a;
  GB_END
  GB_SYNC();
  RW_TREE(sm->sum, 0)
  GB_THREADS(tid, RW_CE_NT)
  if (tid == 0) losses[row] = logf(sm->sum[0]) + sm->mx[0] - l[targets[row]];
  GB_END
  if (dloss != 0.0f) {
    GB_SYNC(); /* the loss read the target's logit before it is overwritten */
    GB_THREADS(tid, RW_CE_NT)
    const float mx = sm->mx[0], k = dloss / sm->sum[0]; /* the CPU op's k */
    const int tg = targets[row];
    uint16_t *g = g16 ? g16 + (size_t)row * (size_t)V : NULL;
    for (int v = tid; v < V; v += RW_CE_NT) {
      float p = expf(l[v] - mx) * k;
      p = v == tg ? p - dloss : p;
      if (g)
        g[v] = (uint16_t)(f16 ? gb_f16(p) : gb_bf16(p));
      else
        l[v] = p;
    }
    GB_END
  }
}

/* Element e of an activation: fp32, or with in16 of the 16-bit type f16
 * selects (0 bf16, 1 fp16). */
GB_DEV float rw_act(const void *p, size_t e, int in16, int f16) {
  if (!in16) return ((const float *)p)[e];
  const uint32_t b = ((const uint16_t *)p)[e];
  return f16 ? gb_from_f16(b) : gb_from_bf16(b);
}

typedef struct rw_col_smem {
  float a[RW_ROWS][RW_COLS + 1]; /* the lanes' dw partials (+1: no bank conflicts) */
  float b[RW_ROWS][RW_COLS + 1]; /* the lanes' db partials */
} rw_col_smem;

/* The lanes' partials in sm folded in lane order: db[c] += the b's, and
 * dw[c] += the a's when dw is non-NULL. */
GB_DEV void rw_col_fold(float *dw, float *db, int OC, int grp, rw_col_smem *sm) {
  GB_THREADS(tid, RW_COL_NT)
  const int c = grp * RW_COLS + tid;
  if (tid < RW_COLS && c < OC) {
    float a = 0.0f, b = 0.0f;
    for (int r = 0; r < RW_ROWS; r++) {
      a += sm->a[r][tid];
      b += sm->b[r][tid];
    }
    if (dw) dw[c] += a;
    db[c] += b;
  }
  GB_END
}

/* Columns [grp * RW_COLS, +RW_COLS) of the [N, OC] matrices: db[c] +=
 * sum_i dout[i, c]; with inp (then dw, mean and rstd too), dw[c] += sum_i
 * (inp[i, c] - mean[i]) * rstd[i] * dout[i, c]. dout: fp32, or with in16
 * 16-bit elements of the type f16 selects (a held gradient copy). */
GB_DEV void rw_colsum_block(float *dw, float *db, const void *dout, int in16, int f16,
                            const float *inp, const float *mean, const float *rstd, int N, int OC,
                            int grp, rw_col_smem *sm) {
  GB_THREADS(tid, RW_COL_NT)
  const int col = tid % RW_COLS, lane = tid / RW_COLS, c = grp * RW_COLS + col;
  float a = 0.0f, b = 0.0f;
  if (c < OC)
    for (int i0 = lane; i0 < N; i0 += RW_UNROLL * RW_ROWS) {
      float d[RW_UNROLL], x[RW_UNROLL];
      for (int k = 0; k < RW_UNROLL; k++) { /* the loads first: RW_UNROLL in flight */
        const int i = i0 + k * RW_ROWS;
        d[k] = i < N ? rw_act(dout, (size_t)i * (size_t)OC + (size_t)c, in16, f16) : 0.0f;
        x[k] = inp && i < N ? (inp[(size_t)i * (size_t)OC + (size_t)c] - mean[i]) * rstd[i] : 0.0f;
      }
      for (int k = 0; k < RW_UNROLL; k++) {
        b += d[k];
        a += x[k] * d[k];
      }
    }
  sm->a[lane][col] = a;
  sm->b[lane][col] = b;
  GB_END
  GB_SYNC();
  rw_col_fold(inp ? dw : NULL, db, OC, grp, sm);
}

#define RW_GELU_S 0.7978845608028654f /* sqrt(2/pi) */

/* d gelu(x) / dx of the tanh GELU (the CPU op's formula, in fp32) */
GB_DEV float rw_gelu_grad(float x) {
  const float th = tanhf(RW_GELU_S * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + th) +
         0.5f * x * (1.0f - th * th) * RW_GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
}

/* The GELU backward with its bias's gradient in the same pass, columns
 * [grp * RW_COLS, +RW_COLS) of the [N, OC] matrices: dinp[i, c] = dout[i,
 * c] * gelu'(inp[i, c] + bias[c]) (dinp may alias dout: each element is
 * read, then written, by one thread), db[c] += sum_i dinp[i, c] (summed as
 * rw_colsum_block sums, from the fp32 values). bias NULL: none. g16
 * non-NULL (a 16-bit run): the gradient goes to g16 [N, OC] instead of
 * dinp, rounded to bf16 (fp16 when f16; to nearest even), the copy the
 * next GEMMs read; dinp is not written. in16: inp holds 16-bit elements of
 * that type (a 16-bit run's fch, gpt2_act16.h). */
GB_DEV void rw_gelu_colsum_block(float *dinp, float *db, const float *dout, const void *inp,
                                 int in16, const float *bias, int N, int OC, int grp,
                                 rw_col_smem *sm, uint16_t *g16, int f16) {
  GB_THREADS(tid, RW_COL_NT)
  const int col = tid % RW_COLS, lane = tid / RW_COLS, c = grp * RW_COLS + col;
  float b = 0.0f;
  if (c < OC) {
    const float bc = bias ? bias[c] : 0.0f;
    for (int i0 = lane; i0 < N; i0 += RW_UNROLL * RW_ROWS) {
      float d[RW_UNROLL], x[RW_UNROLL];
      for (int k = 0; k < RW_UNROLL; k++) { /* the loads first: RW_UNROLL in flight */
        const int i = i0 + k * RW_ROWS;
        const size_t e = (size_t)i * (size_t)OC + (size_t)c;
        d[k] = i < N ? dout[e] : 0.0f;
        x[k] = i < N ? rw_act(inp, e, in16, f16) : 0.0f;
      }
      for (int k = 0; k < RW_UNROLL; k++) {
        const int i = i0 + k * RW_ROWS;
        if (i < N) {
          const float g = d[k] * rw_gelu_grad(x[k] + bc);
          const size_t e = (size_t)i * (size_t)OC + (size_t)c;
          if (g16)
            g16[e] = (uint16_t)(f16 ? gb_f16(g) : gb_bf16(g));
          else
            dinp[e] = g;
          b += g;
        }
      }
    }
  }
  sm->a[lane][col] = 0.0f;
  sm->b[lane][col] = b;
  GB_END
  GB_SYNC();
  rw_col_fold(NULL, db, OC, grp, sm);
}

#endif
