/*
 * gpt2_flash_attn.h — the fused causal attention of the GPT example's CUDA
 * path (flash-attention style), written once for two compilers: nvcc builds
 * the kernels from it (gpt2_cuda.cu), and a C compiler builds an emulation
 * that runs the very same block functions on the CPU, one thread after the
 * other between barriers (tests/unit/test_gpt2_flash_emu.c checks that
 * against plain attention, so the algorithm is tested where no GPU is).
 *
 * Shapes: qkv [B, T, 3C] (q | k | v, head h at h*hs), out [B, T, C], head
 * size hs = C / NH of at most FA_HS = 64 (GPT-2's 64; the tiny preset's 32:
 * the caller checks C % NH == 0 and hs <= FA_HS), any T >= 1. A head
 * smaller than FA_HS is loaded into the tiles padded with zero columns,
 * which add exact zeros to every dot product and are never written back,
 * so one kernel serves every such head at the cost of the padding.
 * Tiles of FA_TILE = 32 query rows or key rows, one thread per row, one warp
 * per block, tiles staged in shared memory.
 *   forward: grid (ceil(T/32), B*NH); thread = query row; online softmax over
 *     the causal key tiles; writes out and lse = m + log(l) per row.
 *   backward, two kernels, no atomics: dq (thread = query row) computes
 *     D_i = sum_j P_ij (dO_i . v_j) in a first pass over the keys and dq in a
 *     second, and stores D; dkv (thread = key row, grid over key tiles) walks
 *     the query tiles at or below the diagonal and accumulates dk, dv of its
 *     own row in registers: every output element has exactly one writer.
 *     Both WRITE dqkv (the ops contract): no zeroing pass precedes them.
 * bias: qkv's bias [3C] (or NULL), added to q, k and v as their tiles are
 * loaded: the passes keep the qkv GEMM's output without it.
 * Invariants: a barrier separates a phase that writes shared memory from one
 * that reads it; control flow around barriers depends only on the block
 * (tile) index; rows past T are loaded as zeros and never written; a key
 * tile with no visible key for a row is skipped (its max would be -inf).
 */
#ifndef GPT2_FLASH_ATTN_H
#define GPT2_FLASH_ATTN_H

#include <math.h>

#include "gpt2_block.h"

#define FA_HS 64
#define FA_TILE 32
#define FA_NT FA_TILE /* threads per block */

/* the phases (gpt2_block.h): one phase, every thread runs the body once with its own tid */
#define FA_DEV GB_DEV
#define FA_SYNC() GB_SYNC()
#define FA_THREADS(tid) GB_THREADS(tid, FA_NT)
#define FA_END GB_END
#ifdef __CUDACC__
#define FA_TS(ts, tid) ((ts)[0]) /* a thread's registers */
#else
#define FA_TS(ts, tid) ((ts)[tid]) /* the emulation keeps every thread's state */
#endif
#define FA_UNROLL GB_UNROLL

typedef struct fa_fwd_smem {
  float q[FA_TILE][FA_HS + 1]; /* +1: row-per-thread reads hit distinct banks */
  float k[FA_TILE][FA_HS];     /* read by all threads at once: broadcast */
  float v[FA_TILE][FA_HS];
} fa_fwd_smem;
typedef struct fa_fwd_ts {
  float o[FA_HS];
  float m, l;
} fa_fwd_ts;

typedef struct fa_dq_smem {
  float q[FA_TILE][FA_HS + 1];
  float dout[FA_TILE][FA_HS + 1];
  float k[FA_TILE][FA_HS];
  float v[FA_TILE][FA_HS];
} fa_dq_smem;
typedef struct fa_dq_ts {
  float dq[FA_HS];
  float lse, d;
} fa_dq_ts;

typedef struct fa_dkv_smem {
  float k[FA_TILE][FA_HS + 1];
  float v[FA_TILE][FA_HS + 1];
  float q[FA_TILE][FA_HS];
  float dout[FA_TILE][FA_HS];
  float lse[FA_TILE], d[FA_TILE];
} fa_dkv_smem;
typedef struct fa_dkv_ts {
  float dk[FA_HS], dv[FA_HS];
} fa_dkv_ts;

/* Loads rows [r0, r0+FA_TILE) of one head's slice (offset `col` in rows of
 * `ld` floats, hs columns) into a tile; rows >= T and columns >= hs become
 * zeros. Consecutive threads take consecutive elements (coalesced). */
#define FA_LOAD_TILE(dst, src, ld, col, r0, T, hs, tid, bias)                                      \
  for (int e_ = (tid); e_ < FA_TILE * FA_HS; e_ += FA_NT) {                                        \
    int r_ = e_ / FA_HS, d_ = e_ % FA_HS, row_ = (r0) + r_;                                        \
    const float *b_ = (bias); /* the slice's bias from its column 0, or NULL */                    \
    float x_ = 0.0f;                                                                               \
    if (row_ < (T) && d_ < (hs)) {                                                                 \
      x_ = (src)[(size_t)row_ * (size_t)(ld) + (size_t)(col) + d_];                                \
      if (b_) x_ += b_[d_];                                                                        \
    }                                                                                              \
    (dst)[r_][d_] = x_;                                                                            \
  }

/* The bias of qkv's column `col` on, or NULL (no bias). */
#define FA_BIAS(bias, col) ((bias) ? (bias) + (col) : (const float *)NULL)

/* Forward of query tile qt of head bh. lse: [B*NH, T]. */
FA_DEV void fa_forward_block(const float *qkv, const float *bias, float *out, float *lse, int T,
                             int C, int NH, int qt, int bh, fa_fwd_smem *sm, fa_fwd_ts *ts) {
  const int b = bh / NH, h = bh % NH, C3 = 3 * C, q0 = qt * FA_TILE;
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  const float *base = qkv + (size_t)b * T * C3;
  const int q_last = (q0 + FA_TILE < T ? q0 + FA_TILE : T) - 1;
  FA_THREADS(tid)
  FA_LOAD_TILE(sm->q, base, C3, h * hs, q0, T, hs, tid, FA_BIAS(bias, h * hs));
  FA_TS(ts, tid).m = -INFINITY;
  FA_TS(ts, tid).l = 0.0f;
  FA_UNROLL for (int d = 0; d < FA_HS; d++) FA_TS(ts, tid).o[d] = 0.0f;
  FA_END
  for (int k0 = 0; k0 <= q_last; k0 += FA_TILE) {
    FA_SYNC(); /* q is loaded; the previous tile's k, v are no longer read */
    FA_THREADS(tid)
    FA_LOAD_TILE(sm->k, base, C3, C + h * hs, k0, T, hs, tid, FA_BIAS(bias, C + h * hs));
    FA_LOAD_TILE(sm->v, base, C3, 2 * C + h * hs, k0, T, hs, tid, FA_BIAS(bias, 2 * C + h * hs));
    FA_END
    FA_SYNC();
    FA_THREADS(tid)
    const int i = q0 + tid;
    if (i < T) {
      fa_fwd_ts *me = &FA_TS(ts, tid);
      float s[FA_TILE], mt = -INFINITY;
      FA_UNROLL for (int jj = 0; jj < FA_TILE; jj++) {
        s[jj] = -INFINITY;
        if (k0 + jj <= i) { /* causal; k0 + jj <= i < T keeps j in range */
          float dot = 0.0f;
          FA_UNROLL for (int d = 0; d < FA_HS; d++) dot += sm->q[tid][d] * sm->k[jj][d];
          s[jj] = dot * scale;
          mt = fmaxf(mt, s[jj]);
        }
      }
      if (mt > -INFINITY) { /* some key of this tile is visible to row i */
        float mnew = fmaxf(me->m, mt);
        float alpha = expf(me->m - mnew); /* 0 on the first visible tile (m = -inf) */
        float lsum = 0.0f;
        FA_UNROLL for (int jj = 0; jj < FA_TILE; jj++) {
          float p = k0 + jj <= i ? expf(s[jj] - mnew) : 0.0f;
          s[jj] = p;
          lsum += p;
        }
        me->l = me->l * alpha + lsum;
        FA_UNROLL for (int d = 0; d < FA_HS; d++) {
          float acc = me->o[d] * alpha;
          FA_UNROLL for (int jj = 0; jj < FA_TILE; jj++) acc += s[jj] * sm->v[jj][d];
          me->o[d] = acc;
        }
        me->m = mnew;
      }
    }
    FA_END
  }
  FA_THREADS(tid)
  const int i = q0 + tid;
  if (i < T) {
    fa_fwd_ts *me = &FA_TS(ts, tid);
    float inv = 1.0f / me->l; /* l >= 1: the row's max term is exp(0) */
    float *o = out + ((size_t)b * T + i) * C + h * hs;
    FA_UNROLL for (int d = 0; d < FA_HS; d++) if (d < hs) o[d] = me->o[d] * inv;
    lse[(size_t)bh * T + i] = me->m + logf(me->l);
  }
  FA_END
}

/* dq of query tile qt of head bh, written into dqkv's q part; stores
 * D_i = sum_j P_ij (dO_i . v_j) into dstat [B*NH, T] for fa_dkv_block. */
FA_DEV void fa_dq_block(float *dqkv, float *dstat, const float *dout, const float *qkv,
                        const float *bias, const float *lse, int T, int C, int NH, int qt, int bh,
                        fa_dq_smem *sm, fa_dq_ts *ts) {
  const int b = bh / NH, h = bh % NH, C3 = 3 * C, q0 = qt * FA_TILE;
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  const float *base = qkv + (size_t)b * T * C3, *dbase = dout + (size_t)b * T * C;
  const int q_last = (q0 + FA_TILE < T ? q0 + FA_TILE : T) - 1;
  FA_THREADS(tid)
  FA_LOAD_TILE(sm->q, base, C3, h * hs, q0, T, hs, tid, FA_BIAS(bias, h * hs));
  FA_LOAD_TILE(sm->dout, dbase, C, h * hs, q0, T, hs, tid, (const float *)NULL);
  const int i = q0 + tid;
  FA_TS(ts, tid).lse = i < T ? lse[(size_t)bh * T + i] : 0.0f;
  FA_TS(ts, tid).d = 0.0f;
  FA_UNROLL for (int d = 0; d < FA_HS; d++) FA_TS(ts, tid).dq[d] = 0.0f;
  FA_END
  /* pass 0 accumulates D, pass 1 dq with the complete D */
  for (int pass = 0; pass < 2; pass++) {
    for (int k0 = 0; k0 <= q_last; k0 += FA_TILE) {
      FA_SYNC();
      FA_THREADS(tid)
      FA_LOAD_TILE(sm->k, base, C3, C + h * hs, k0, T, hs, tid, FA_BIAS(bias, C + h * hs));
      FA_LOAD_TILE(sm->v, base, C3, 2 * C + h * hs, k0, T, hs, tid, FA_BIAS(bias, 2 * C + h * hs));
      FA_END
      FA_SYNC();
      FA_THREADS(tid)
      const int i = q0 + tid;
      if (i < T) {
        fa_dq_ts *me = &FA_TS(ts, tid);
        for (int jj = 0; jj < FA_TILE && k0 + jj <= i; jj++) {
          float dot = 0.0f, dp = 0.0f;
          FA_UNROLL for (int d = 0; d < FA_HS; d++) {
            dot += sm->q[tid][d] * sm->k[jj][d];
            dp += sm->dout[tid][d] * sm->v[jj][d];
          }
          float p = expf(dot * scale - me->lse);
          if (pass == 0) {
            me->d += p * dp;
          } else {
            float ds = p * (dp - me->d) * scale;
            FA_UNROLL for (int d = 0; d < FA_HS; d++) me->dq[d] += ds * sm->k[jj][d];
          }
        }
      }
      FA_END
    }
  }
  FA_THREADS(tid)
  const int i = q0 + tid;
  if (i < T) {
    fa_dq_ts *me = &FA_TS(ts, tid);
    float *dq = dqkv + ((size_t)b * T + i) * C3 + h * hs;
    FA_UNROLL for (int d = 0; d < FA_HS; d++) if (d < hs) dq[d] = me->dq[d];
    dstat[(size_t)bh * T + i] = me->d;
  }
  FA_END
}

/* dk, dv of key tile kt of head bh, written into dqkv's k and v parts. Needs
 * lse (forward) and dstat (fa_dq_block) of every query row. */
FA_DEV void fa_dkv_block(float *dqkv, const float *dout, const float *qkv, const float *bias,
                         const float *lse, const float *dstat, int T, int C, int NH, int kt, int bh,
                         fa_dkv_smem *sm, fa_dkv_ts *ts) {
  const int b = bh / NH, h = bh % NH, C3 = 3 * C, k0 = kt * FA_TILE;
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  const float *base = qkv + (size_t)b * T * C3, *dbase = dout + (size_t)b * T * C;
  FA_THREADS(tid)
  FA_LOAD_TILE(sm->k, base, C3, C + h * hs, k0, T, hs, tid, FA_BIAS(bias, C + h * hs));
  FA_LOAD_TILE(sm->v, base, C3, 2 * C + h * hs, k0, T, hs, tid, FA_BIAS(bias, 2 * C + h * hs));
  FA_UNROLL for (int d = 0; d < FA_HS; d++) {
    FA_TS(ts, tid).dk[d] = 0.0f;
    FA_TS(ts, tid).dv[d] = 0.0f;
  }
  FA_END
  /* query rows i >= k0 see keys of this tile: tiles from the diagonal on */
  for (int q0 = k0; q0 < T; q0 += FA_TILE) {
    FA_SYNC();
    FA_THREADS(tid)
    FA_LOAD_TILE(sm->q, base, C3, h * hs, q0, T, hs, tid, FA_BIAS(bias, h * hs));
    FA_LOAD_TILE(sm->dout, dbase, C, h * hs, q0, T, hs, tid, (const float *)NULL);
    const int i = q0 + tid;
    sm->lse[tid] = i < T ? lse[(size_t)bh * T + i] : 0.0f;
    sm->d[tid] = i < T ? dstat[(size_t)bh * T + i] : 0.0f;
    FA_END
    FA_SYNC();
    FA_THREADS(tid)
    const int j = k0 + tid;
    if (j < T) {
      fa_dkv_ts *me = &FA_TS(ts, tid);
      for (int r = 0; r < FA_TILE; r++) {
        const int i = q0 + r;
        if (i >= T) break;
        if (i < j) continue; /* causal: row i does not see key j */
        float dot = 0.0f, dp = 0.0f;
        FA_UNROLL for (int d = 0; d < FA_HS; d++) {
          dot += sm->q[r][d] * sm->k[tid][d];
          dp += sm->dout[r][d] * sm->v[tid][d];
        }
        float p = expf(dot * scale - sm->lse[r]);
        float ds = p * (dp - sm->d[r]) * scale;
        FA_UNROLL for (int d = 0; d < FA_HS; d++) {
          me->dv[d] += p * sm->dout[r][d];
          me->dk[d] += ds * sm->q[r][d];
        }
      }
    }
    FA_END
  }
  FA_THREADS(tid)
  const int j = k0 + tid;
  if (j < T) {
    fa_dkv_ts *me = &FA_TS(ts, tid);
    float *dk = dqkv + ((size_t)b * T + j) * C3 + C + h * hs, *dv = dk + C;
    FA_UNROLL for (int d = 0; d < FA_HS; d++) {
      if (d < hs) {
        dk[d] = me->dk[d];
        dv[d] = me->dv[d];
      }
    }
  }
  FA_END
}

#endif
