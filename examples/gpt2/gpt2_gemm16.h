/*
 * gpt2_gemm16.h — where a bf16 / fp16 run's GEMM finds its 16-bit operands
 * in the scratch (gpt2_cuda.cu's cu_gemm), in plain C so that
 * tests/unit/test_gpt2_gemm16.c checks it where no GPU is. An fp32 operand
 * that is neither a registered 16-bit weight nor the cross-entropy's held
 * copy is rounded into the scratch; the copies one GEMM made or reused stay
 * for the next GEMM, which reuses a copy of the same operand (same pointer,
 * stride and shape: a linear's backward takes its output gradient for dX
 * and again for dW) instead of rounding it again. A GEMM whose C overlaps a
 * copy's source drops that copy; every other op of the CUDA table forgets
 * them all (g16_forget), so a copy is reused only while nothing but GEMMs
 * ran since it was made. New copies go at the first 256-byte-aligned offset
 * past the held region (res) that overlaps no reused copy; when a reused
 * copy leaves no room, the GEMM rounds both operands anew from res.
 */
#ifndef GPT2_GEMM16_H
#define GPT2_GEMM16_H

#include <stddef.h>
#include <stdint.h>

typedef struct g16_entry {
  const void *src; /* the fp32 operand */
  int64_t ld, rows, cols;
  size_t at, bytes; /* its copy in the scratch */
} g16_entry;

typedef struct g16_state {
  g16_entry ent[2]; /* what the last GEMM rounded or reused */
  int n;
  size_t scratch_bytes, res; /* the scratch's size; bytes held at its start */
} g16_state;

/* One operand of a GEMM: round = 1 when it needs a 16-bit copy (filled by
 * g16_plan: reused, or to be rounded now at `at`). */
typedef struct g16_operand {
  const void *src;
  int64_t ld, rows, cols;
  int round;  /* in: needs a copy; out: needs rounding now */
  int reused; /* out: the previous GEMM's copy */
  size_t at;  /* out: the copy's offset */
} g16_operand;

static inline void g16_forget(g16_state *s) { s->n = 0; }

static inline size_t g16_up256(size_t x) { return (x + 255) / 256 * 256; }

/* The first aligned offset >= from where `bytes` overlap none of keep[0..n);
 * SIZE_MAX when the scratch has no such room. */
static inline size_t g16_place(const g16_state *s, size_t from, size_t bytes, const g16_entry *keep,
                               int n) {
  size_t at = g16_up256(from);
  for (int moved = 1; moved;) {
    moved = 0;
    for (int i = 0; i < n; i++)
      if (at < keep[i].at + keep[i].bytes && keep[i].at < at + bytes) {
        at = g16_up256(keep[i].at + keep[i].bytes);
        moved = 1;
      }
  }
  return at + bytes <= s->scratch_bytes ? at : SIZE_MAX;
}

/* Plans op[0..2): copies reused (when reuse) and placed; next[] gets what
 * this GEMM leaves. 0 when the scratch has no room. */
static inline int g16_try(const g16_state *s, g16_operand *op, int reuse, g16_entry *next,
                          int *nnext) {
  *nnext = 0;
  for (int i = 0; i < 2; i++) {
    op[i].reused = 0;
    if (!op[i].round || !reuse) continue;
    for (int j = 0; j < s->n; j++) {
      const g16_entry *e = &s->ent[j];
      if (e->src == op[i].src && e->ld == op[i].ld && e->rows == op[i].rows &&
          e->cols == op[i].cols && e->at >= s->res && e->at + e->bytes <= s->scratch_bytes) {
        op[i].reused = 1;
        op[i].at = e->at;
        next[(*nnext)++] = *e;
        break;
      }
    }
  }
  size_t used = s->res;
  for (int i = 0; i < 2; i++) {
    if (!op[i].round || op[i].reused) continue;
    size_t bytes = (size_t)(op[i].rows * op[i].cols) * 2;
    size_t at = g16_place(s, used, bytes, next, *nnext);
    if (at == SIZE_MAX) return 0;
    op[i].at = at;
    next[(*nnext)++] = (g16_entry){op[i].src, op[i].ld, op[i].rows, op[i].cols, at, bytes};
    used = at + bytes;
  }
  return 1;
}

/* The whole step for one GEMM writing C (c, rows m of ldc floats, n wide):
 * plans, falls back to no reuse when a reused copy leaves no room, and
 * keeps for the next GEMM the copies whose source C does not overlap.
 * 0 when even fresh copies do not fit. */
static inline int g16_plan(g16_state *s, g16_operand *op, const void *c, int64_t m, int64_t n,
                           int64_t ldc) {
  g16_entry next[2];
  int nnext = 0;
  if (!g16_try(s, op, 1, next, &nnext) && !g16_try(s, op, 0, next, &nnext)) {
    s->n = 0;
    return 0;
  }
  const char *c0 = (const char *)c, *c1 = c0 + ((size_t)(m - 1) * (size_t)ldc + (size_t)n) * 4;
  s->n = 0;
  for (int i = 0; i < nnext; i++) {
    const char *s0 = (const char *)next[i].src;
    const char *s1 =
        s0 + ((size_t)(next[i].rows - 1) * (size_t)next[i].ld + (size_t)next[i].cols) * 4;
    if (!(s0 < c1 && c0 < s1)) s->ent[s->n++] = next[i];
  }
  return 1;
}

#endif
