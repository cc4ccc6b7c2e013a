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
 *     fp32 one); the logits may be 16-bit themselves (a 16-bit run's
 *     logits slot), the gradient then written over them. Coalesced: the
 *     kernel it replaced ran one thread per row, each walking its own row
 *     of up to 50257 floats, on N / 128 blocks.
 *   column sums: db[c] += sum_i dout[i, c] (a bias's gradient): blocks of
 *     RW_COLS columns by a chunk of rows (rw_col_plan: about RW_BLOCKS
 *     blocks in all), RW_ROWS row lanes each walking every RW_ROWS-th row
 *     of its chunk with RW_UNROLL loads in flight, the lanes' partials
 *     folded in lane order; with more than one chunk, each block writes
 *     one row of a partials matrix in the scratch and rw_part_fold_block
 *     adds the rows in order. Deterministic and without atomics (the
 *     kernels before: one block per 32 columns over every row, 24 blocks
 *     for GPT-2's 768 columns on a 132-SM GPU; before those, one thread
 *     per column, and the LayerNorm's two N-way contended atomicAdd per
 *     element).
 *   GELU backward with its bias's gradient: the column sum's walk, each
 *     element turned into dout * gelu'(inp + bias) and written back before
 *     it is summed (one pass over the MLP's [N, 4C] instead of two); in a
 *     16-bit run written only in 16 bits for the next two GEMMs: over its
 *     16-bit dout in place (a training run's d4C slot), or as a held copy.
 *   LayerNorm backward with its weight's and bias's gradients: blocks of
 *     a chunk of rows (rw_ln_plan), a warp per row for dinp, then a
 *     thread per column summing the chunk's rows (from the caches) into
 *     the partials [S, 2C] the fold adds to dw and db: dout and inp read
 *     once from HBM, not twice.
 * Every output has one writer; the outputs of the ops' contract are
 * ADDED to (partials are written). Invariants: a barrier separates a
 * phase that writes shared memory from one that reads it; control flow
 * around barriers depends only on the block's arguments; the sums' order
 * is fixed by the shapes alone.
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

/* Element e of an activation: fp32, or with in16 of the 16-bit type f16
 * selects (0 bf16, 1 fp16). */
GB_DEV float rw_act(const void *p, size_t e, int in16, int f16) {
  if (!in16) return ((const float *)p)[e];
  const uint32_t b = ((const uint16_t *)p)[e];
  return f16 ? gb_from_f16(b) : gb_from_bf16(b);
}

/* Row `row` of logits [., ld] (V entries read, the ld - V past them never;
 * fp32, or with in16 16-bit elements of the type f16 selects: a 16-bit
 * run's logits slot, gpt2_act16.h):
 * losses[row] = logsumexp - logit of the target; when dloss != 0 the
 * row's gradient (softmax - onehot(target)) * dloss goes over the fp32
 * row, or with g16 non-NULL to g16 [., ld] as bf16, or fp16 when f16
 * (round to nearest even), the row staying. g16 may be the 16-bit logits
 * themselves (in16: the gradient in place; each element is read, then
 * written, by one thread, after the loss read the target's); in16 with
 * dloss != 0 needs g16. */
GB_DEV void rw_crossentropy_block(float *losses, void *logits, int in16, const int *targets, int V,
                                  int ld, float dloss, int row, rw_ce_smem *sm, uint16_t *g16,
                                  int f16) {
  const size_t r0 = (size_t)row * (size_t)ld;
  float *l = in16 ? NULL : (float *)logits + r0;
  GB_THREADS(tid, RW_CE_NT)
  float m = -INFINITY;
  for (int v = tid; v < V; v += RW_CE_NT) m = fmaxf(m, rw_act(logits, r0 + (size_t)v, in16, f16));
  sm->mx[tid] = m;
  GB_END
  GB_SYNC();
  RW_TREE(sm->mx, 1)
  GB_THREADS(tid, RW_CE_NT)
  const float mx = sm->mx[0];
  float a = 0.0f;
  for (int v = tid; v < V; v += RW_CE_NT) a += expf(rw_act(logits, r0 + (size_t)v, in16, f16) - mx);
  sm->sum[tid] = a;
  GB_END
  GB_SYNC();
  RW_TREE(sm->sum, 0)
  GB_THREADS(tid, RW_CE_NT)
  if (tid == 0)
    losses[row] =
        logf(sm->sum[0]) + sm->mx[0] - rw_act(logits, r0 + (size_t)targets[row], in16, f16);
  GB_END
  if (dloss != 0.0f) {
    GB_SYNC(); /* the loss read the target's logit before it is overwritten */
    GB_THREADS(tid, RW_CE_NT)
    const float mx = sm->mx[0], k = dloss / sm->sum[0]; /* the CPU op's k */
    const int tg = targets[row];
    uint16_t *g = g16 ? g16 + r0 : NULL;
    for (int v = tid; v < V; v += RW_CE_NT) {
      float p = expf(rw_act(logits, r0 + (size_t)v, in16, f16) - mx) * k;
      p = v == tg ? p - dloss : p;
      if (g)
        g[v] = (uint16_t)(f16 ? gb_f16(p) : gb_bf16(p));
      else
        l[v] = p;
    }
    GB_END
  }
}

/* A column reduction's grid (rw_col_plan, rw_ln_plan): G column groups
 * by S row chunks of R rows each. With S > 1 each block writes its chunk's
 * sums as one row of a partials matrix [S, W] in the caller's scratch
 * (rw_part_floats), and rw_part_fold_block adds the S rows, in order, to
 * the outputs; with S == 1 the blocks add to the outputs directly. The
 * plan depends on the shapes alone (RW_BLOCKS is a constant, not the
 * device's SM count), so the sums' order, and their bits, do too. */
typedef struct rw_plan {
  int G, S, R;
} rw_plan;

#define RW_BLOCKS 256 /* blocks a split reduction aims at: two per SM of an H100's 132 */
#define RW_STEP (RW_ROWS * RW_UNROLL) /* rows one walk of a column-sum block's lanes covers */

/* The column sums of [N, OC]: RW_COLS columns per group, and the rows
 * split into chunks (multiples of RW_STEP) until the grid has about
 * RW_BLOCKS blocks: one group per block left OC / 32 blocks (24 for
 * GPT-2's 768 columns) on a 132-SM GPU. */
GB_HD rw_plan rw_col_plan(int N, int OC) {
  rw_plan p;
  p.G = (OC + RW_COLS - 1) / RW_COLS;
  int s = p.G > 0 ? (RW_BLOCKS + p.G - 1) / p.G : 1, smax = (N + RW_STEP - 1) / RW_STEP;
  if (s > smax) s = smax;
  if (s < 1) s = 1;
  const int r = (N + s - 1) / s;
  p.R = (r + RW_STEP - 1) / RW_STEP * RW_STEP;
  p.S = p.R > 0 ? (N + p.R - 1) / p.R : 1;
  return p;
}

#define RW_LN_ROWS 32 /* rows of one pass of a LayerNorm-backward block: a warp each */
#define RW_LN_NT (RW_LN_ROWS * 32)

/* The LayerNorm backward's grid over N rows: one group (every column),
 * chunks of R rows (multiples of RW_LN_ROWS) making about RW_BLOCKS
 * blocks. */
GB_HD rw_plan rw_ln_plan(int N) {
  rw_plan p;
  p.G = 1;
  const int r = (N + RW_BLOCKS - 1) / RW_BLOCKS;
  p.R = r < RW_LN_ROWS ? RW_LN_ROWS : (r + RW_LN_ROWS - 1) / RW_LN_ROWS * RW_LN_ROWS;
  p.S = N > 0 ? (N + p.R - 1) / p.R : 1;
  return p;
}

/* The end of row chunk s of a plan over N rows: rows [s * R, end). */
GB_HD int rw_chunk_end(rw_plan p, int s, int N) { return N < (s + 1) * p.R ? N : (s + 1) * p.R; }

/* Floats of the partials matrix of a plan over W output columns (0 when
 * the blocks add to the outputs directly). */
GB_HD size_t rw_part_floats(rw_plan p, int W) { return p.S > 1 ? (size_t)p.S * (size_t)W : 0; }

typedef struct rw_col_smem {
  float b[RW_ROWS][RW_COLS + 1]; /* the lanes' partials (+1: no bank conflicts) */
} rw_col_smem;

/* The lanes' partials in sm folded in lane order, for columns c of group
 * grp below W: into o0[c] when c < W0, else o1[c - W0]; added (add) or
 * written. */
GB_DEV void rw_col_fold(float *o0, float *o1, int W0, int add, int W, int grp, rw_col_smem *sm) {
  GB_THREADS(tid, RW_COL_NT)
  const int c = grp * RW_COLS + tid;
  if (tid < RW_COLS && c < W) {
    float b = 0.0f;
    for (int r = 0; r < RW_ROWS; r++) b += sm->b[r][tid];
    float *o = c < W0 ? o0 + c : o1 + (c - W0);
    *o = add ? *o + b : b;
  }
  GB_END
}

/* Where block (grp, s) of a column-sum plan puts its sums: db itself
 * (added) when S == 1, else row s of the partials (written). */
#define RW_COL_OUT(p, s, db, part, OC) ((p).S > 1 ? (part) + (size_t)(s) * (size_t)(OC) : (db))

/* Block (grp, s) of plan p (rw_col_plan(N, OC)): columns [grp * RW_COLS,
 * +RW_COLS) of rows [s * R, +R) of dout [N, OC], summed per column (the
 * bias's gradient): added to db[c] when S == 1, else written to part[s,
 * c] for rw_part_fold_block. dout: fp32, or with in16 16-bit elements of
 * the type f16 selects (a held gradient copy). */
GB_DEV void rw_colsum_block(float *db, float *part, const void *dout, int in16, int f16, int N,
                            int OC, rw_plan p, int grp, int s, rw_col_smem *sm) {
  const int r1 = rw_chunk_end(p, s, N);
  GB_THREADS(tid, RW_COL_NT)
  const int col = tid % RW_COLS, lane = tid / RW_COLS, c = grp * RW_COLS + col;
  float b = 0.0f;
  if (c < OC)
    for (int i0 = s * p.R + lane; i0 < r1; i0 += RW_STEP) {
      float d[RW_UNROLL];
      for (int k = 0; k < RW_UNROLL; k++) { /* the loads first: RW_UNROLL in flight */
        const int i = i0 + k * RW_ROWS;
        d[k] = i < r1 ? rw_act(dout, (size_t)i * (size_t)OC + (size_t)c, in16, f16) : 0.0f;
      }
      for (int k = 0; k < RW_UNROLL; k++) b += d[k];
    }
  sm->b[lane][col] = b;
  GB_END
  GB_SYNC();
  rw_col_fold(RW_COL_OUT(p, s, db, part, OC), NULL, OC, p.S == 1, OC, grp, sm);
}

/* Columns [grp * RW_COLS, +RW_COLS) of the partials part [S, W]: the S
 * rows summed (lanes striding the rows, folded in lane order) and added
 * to o0[c] for c < W0, o1[c - W0] beyond (the LayerNorm's dw then db). */
GB_DEV void rw_part_fold_block(float *o0, float *o1, int W0, const float *part, int S, int W,
                               int grp, rw_col_smem *sm) {
  GB_THREADS(tid, RW_COL_NT)
  const int col = tid % RW_COLS, lane = tid / RW_COLS, c = grp * RW_COLS + col;
  float b = 0.0f;
  if (c < W)
    for (int s = lane; s < S; s += RW_ROWS) b += part[(size_t)s * (size_t)W + (size_t)c];
  sm->b[lane][col] = b;
  GB_END
  GB_SYNC();
  rw_col_fold(o0, o1, W0, 1, W, grp, sm);
}

#define RW_GELU_S 0.7978845608028654f /* sqrt(2/pi) */

/* d gelu(x) / dx of the tanh GELU (the CPU op's formula, in fp32) */
GB_DEV float rw_gelu_grad(float x) {
  const float th = tanhf(RW_GELU_S * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + th) +
         0.5f * x * (1.0f - th * th) * RW_GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
}

/* The GELU backward with its bias's gradient in the same pass, block
 * (grp, s) of rw_col_plan(N, OC): columns [grp * RW_COLS, +RW_COLS) of
 * rows [s * R, +R) of the [N, OC] matrices: dinp[i, c] = dout[i, c] *
 * gelu'(inp[i, c] + bias[c]) (dinp may alias dout: each element is read,
 * then written, by one thread), and the column sums of dinp go where
 * rw_colsum_block puts them (db[c] += when S == 1, else part[s, c]),
 * summed from the fp32 values. bias NULL: none. g16 non-NULL (a 16-bit
 * run): the gradient goes to g16 [N, OC] instead of dinp, rounded to bf16
 * (fp16 when f16; to nearest even), what the next GEMMs read (the d4C slot
 * itself, or a held copy); dinp is not written. in16: inp holds 16-bit elements of that type (a
 * 16-bit run's fch, gpt2_act16.h); d16: dout does (a 16-bit run's d4C, which g16 may then be: the
 * gradient over it in place, each element read, then written, by one thread). */
GB_DEV void rw_gelu_colsum_block(float *dinp, float *db, float *part, const void *dout, int d16,
                                 const void *inp, int in16, const float *bias, int N, int OC,
                                 rw_plan p, int grp, int s, rw_col_smem *sm, uint16_t *g16,
                                 int f16) {
  const int r1 = rw_chunk_end(p, s, N);
  GB_THREADS(tid, RW_COL_NT)
  const int col = tid % RW_COLS, lane = tid / RW_COLS, c = grp * RW_COLS + col;
  float b = 0.0f;
  if (c < OC) {
    const float bc = bias ? bias[c] : 0.0f;
    for (int i0 = s * p.R + lane; i0 < r1; i0 += RW_STEP) {
      float d[RW_UNROLL], x[RW_UNROLL];
      for (int k = 0; k < RW_UNROLL; k++) { /* the loads first: RW_UNROLL in flight */
        const int i = i0 + k * RW_ROWS;
        const size_t e = (size_t)i * (size_t)OC + (size_t)c;
        d[k] = i < r1 ? rw_act(dout, e, d16, f16) : 0.0f;
        x[k] = i < r1 ? rw_act(inp, e, in16, f16) : 0.0f;
      }
      for (int k = 0; k < RW_UNROLL; k++) {
        const int i = i0 + k * RW_ROWS;
        if (i < r1) {
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
  sm->b[lane][col] = b;
  GB_END
  GB_SYNC();
  rw_col_fold(RW_COL_OUT(p, s, db, part, OC), NULL, OC, p.S == 1, OC, grp, sm);
}

typedef struct rw_ln_smem {
  float pa[RW_LN_ROWS][33], pb[RW_LN_ROWS][33]; /* the lanes' partial row sums */
  float ra[RW_LN_ROWS], rb[RW_LN_ROWS];         /* each row's two means */
} rw_ln_smem;

/* The LayerNorm backward, block s of rw_ln_plan(N): rows [s * R, +R) of
 * the [N, C] matrices, RW_LN_ROWS at a time (a warp of 32 lanes per row),
 * with the weight's and bias's gradients in the same walk:
 *   dinp[i, c] += (w[c] dout[i, c] - a_i - norm[i, c] b_i) rstd[i], where
 *     norm = (inp - mean[i]) rstd[i], a_i and b_i the row's means of
 *     w dout and of w dout norm (the lanes' partials folded in lane order);
 *   then thread t takes columns t, t + RW_LN_NT, ...: the chunk's sums of
 *     norm dout (dw) and dout (db), row by row in order, added to dw[c] and
 *     db[c] when S == 1, else written to part[s, c] and part[s, C + c] (the
 *     partials [S, 2C], rw_part_fold_block's W0 = C).
 * One HBM read of dout and inp (the chunk's rows are re-read from the
 * caches): the column sums' own kernel read both again. dout: fp32, or
 * with d16 16-bit elements of the type f16 selects (a 16-bit run's dC
 * slot). */
GB_DEV void rw_layernorm_backward_block(float *dinp, float *dw, float *db, float *part,
                                        const void *dout, int d16, int f16, const float *inp,
                                        const float *w, const float *mean, const float *rstd, int N,
                                        int C, rw_plan p, int s, rw_ln_smem *sm) {
  const int r0 = s * p.R, r1 = rw_chunk_end(p, s, N), add = p.S == 1;
  float *ow = add ? dw : part + (size_t)s * 2 * (size_t)C, *ob = add ? db : ow + C;
  for (int i0 = r0; i0 < r1; i0 += RW_LN_ROWS) {
    GB_THREADS(tid, RW_LN_NT)
    const int row = i0 + tid / 32, lane = tid % 32;
    float a = 0.0f, b = 0.0f;
    if (row < r1) {
      const float *x = inp + (size_t)row * (size_t)C;
      const size_t d0 = (size_t)row * (size_t)C;
      const float m = mean[row], r = rstd[row];
      for (int c = lane; c < C; c += 32) {
        const float dn = w[c] * rw_act(dout, d0 + (size_t)c, d16, f16);
        a += dn;
        b += dn * (x[c] - m) * r;
      }
    }
    sm->pa[tid / 32][lane] = a;
    sm->pb[tid / 32][lane] = b;
    GB_END
    GB_SYNC();
    GB_THREADS(tid, RW_LN_NT)
    if (tid < RW_LN_ROWS) {
      float a = 0.0f, b = 0.0f;
      for (int l = 0; l < 32; l++) {
        a += sm->pa[tid][l];
        b += sm->pb[tid][l];
      }
      sm->ra[tid] = a / (float)C;
      sm->rb[tid] = b / (float)C;
    }
    GB_END
    GB_SYNC();
    /* the next pass's first barrier keeps its folds from overwriting ra,
     * rb before every thread has read them here */
    GB_THREADS(tid, RW_LN_NT)
    const int row = i0 + tid / 32, lane = tid % 32;
    if (row < r1) {
      const float *x = inp + (size_t)row * (size_t)C;
      const size_t d0 = (size_t)row * (size_t)C;
      const float m = mean[row], r = rstd[row], a = sm->ra[tid / 32], b = sm->rb[tid / 32];
      float *di = dinp + (size_t)row * (size_t)C;
      for (int c = lane; c < C; c += 32)
        di[c] += (w[c] * rw_act(dout, d0 + (size_t)c, d16, f16) - a - (x[c] - m) * r * b) * r;
    }
    const int rn = r1 < i0 + RW_LN_ROWS ? r1 : i0 + RW_LN_ROWS;
    for (int c = tid; c < C; c += RW_LN_NT) {
      float sw = 0.0f, sb = 0.0f;
      for (int i = i0; i < rn; i++) {
        const float d = rw_act(dout, (size_t)i * (size_t)C + (size_t)c, d16, f16);
        sw += (inp[(size_t)i * (size_t)C + (size_t)c] - mean[i]) * rstd[i] * d;
        sb += d;
      }
      const int acc = add || i0 > r0; /* a block's first pass writes its partials */
      ow[c] = acc ? ow[c] + sw : sw;
      ob[c] = acc ? ob[c] + sb : sb;
    }
    GB_END
  }
}

#endif
