/*
 * test_gpt2_rows_emu.c — the cross-entropy and column-sum kernels of the GPT
 * example's CUDA path (examples/gpt2/gpt2_rows.h), run here through their C
 * emulation: the same block functions, strided passes, shared-memory trees
 * and row lanes the kernels use, with the threads of a block run one after
 * the other between barriers. Checked against double references of the
 * CPU ops' contract (gpt2_ops_impl.h):
 *   - cross-entropy: loss = logsumexp(row) - row[target], and with dloss the
 *     row overwritten by (softmax - onehot(target)) * dloss; V = 1, 7, 255,
 *     256, 257 (a vocabulary shorter than, equal to and just past the
 *     block's 256 threads), 1000 and GPT-2's 50257, logits spread over
 *     [-8, 8] around offsets up to 30 (the max subtraction matters), dloss 0
 *     (the row must be left as it was) and 1/N. Tolerance: 1e-5 absolute
 *     on the loss (magnitudes <= ~40), 1e-6 * dloss on the gradient; the
 *     16-bit runs' form (the gradient into a bf16 or fp16 copy, g16)
 *     leaves the row as it was, gives the same losses, and its copy is the
 *     in-place gradient rounded to nearest even, bit for bit; over 16-bit
 *     logits (a 16-bit run's logits slot, in16), the losses are bitwise
 *     the fp32 form's on the same values and the gradient written over
 *     them is its gradient rounded, bit for bit (V = 257 and 50257); rows
 *     ld apart (50257 in 50304, 1000 in 1024, 7 in 64: the layout's
 *     padded logits) with NaN padding give the contiguous rows' losses
 *     and gradients bit for bit in every form, the padding untouched;
 *   - a bias's column sums, ADDED onto non-zero outputs, at N = 1, 7, 33,
 *     100, 129, 1000, 8192 rows and OC = 1, 31, 32, 33, 65, 768 columns
 *     (groups of 32: a ragged last group), through the grid rw_col_plan
 *     gives (row chunks of 128-row multiples beyond one chunk, their
 *     partials poisoned with NaN first and folded by rw_part_fold_block:
 *     1000 x 33 splits into 8 chunks, 8192 x 768 into 11, 129 x 1 into a
 *     128-row chunk and a 1-row one). Tolerance: 4e-7 * N + 1e-6 absolute
 *     (sums of N terms of magnitude <= ~2); also from a held 16-bit copy
 *     (bf16 and fp16 elements, in16) against the double sum of those
 *     values;
 *   - the LayerNorm backward with its weight's and bias's gradients in the
 *     same walk, dinp, dw and db ADDED onto non-zero values, against
 *     double: N = 1 to 8192 (one block up to 32 rows, then chunks of 32)
 *     and 8225 (chunks of 64: two passes a block, a ragged last chunk), C
 *     = 1, 31, 33, 768 and GPT-2 XL's 1600 (more columns than the block's
 *     1024 threads), and 8225 x 1025 (both at once); over a 16-bit dout
 *     (bf16, fp16: a 16-bit run's dC slot) bit for bit the fp32 dout's
 *     on the same values. Tolerance: 2e-5 absolute on dinp (terms of
 *     size <= ~10), the column sums' on dw and db;
 *   - the GELU backward with its bias's gradient fused (the MLP's
 *     gelu_backward with db): dinp = dout * gelu'(inp + bias) against the
 *     tanh GELU's derivative in double, in place (dinp = dout, the passes'
 *     form) and not, with a bias and without, db ADDED onto non-zero
 *     values, over the same N and OC = 1, 33, 3072 (GPT-2's MLP width).
 *     Tolerance: 4e-6 absolute on dinp (|gelu'| <= 1.13, |dout| <= 1),
 *     the column sums' on db. Its 16-bit runs' form (the gradient into a
 *     bf16 or fp16 copy, g16, for the GEMMs after it) leaves dinp as it
 *     was, gives db bit for bit, and its copy is the fp32 gradient rounded
 *     to nearest even, bit for bit; over a 16-bit dout in place (a 16-bit
 *     run's d4C slot, read and overwritten in 16 bits, with a 16-bit inp)
 *     it gives the fp32 form's gradient on the same values rounded, and
 *     its db, bit for bit.
 * The kernels compile from the same text (gpt2_cuda.cu); test_gpt2_cuda
 * (gpu label) runs them against the CPU ops on a GPU.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../examples/gpt2/gpt2_rows.h"
#include "ztest.h"

static float frand(uint64_t *s) { /* uniform in [-1, 1) */
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((*s >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* the CUDA grids, block by block */
static void emu_crossentropy_ld(float *losses, void *logits, int in16, const int *targets, int N,
                                int V, int ld, float dloss, uint16_t *g16, int f16) {
  static rw_ce_smem sm;
  for (int row = 0; row < N; row++)
    rw_crossentropy_block(losses, logits, in16, targets, V, ld, dloss, row, &sm, g16, f16);
}
static void emu_crossentropy16(float *losses, void *logits, int in16, const int *targets, int N,
                               int V, float dloss, uint16_t *g16, int f16) {
  emu_crossentropy_ld(losses, logits, in16, targets, N, V, V, dloss, g16, f16);
}
static void emu_crossentropy(float *losses, float *logits, const int *targets, int N, int V,
                             float dloss, uint16_t *g16, int f16) {
  emu_crossentropy16(losses, logits, 0, targets, N, V, dloss, g16, f16);
}

/* 16-bit logits (a 16-bit run's logits slot): the losses bitwise those of
 * the fp32 form on the same (rounded) values, and the gradient written
 * over the logits is that form's gradient rounded, bit for bit. */
static void ce16_case(int N, int V, int f16, uint64_t seed) {
  uint64_t s = seed;
  size_t n = (size_t)N * V;
  uint16_t *l16 = malloc(n * 2);
  float *lr = malloc(n * 4), *loss32 = malloc(N * 4), *loss16 = malloc(N * 4);
  int *tg = malloc(N * sizeof *tg);
  for (int i = 0; i < N; i++) {
    float off = 30.0f * frand(&s);
    for (int v = 0; v < V; v++) {
      size_t e = (size_t)i * V + v;
      l16[e] = (uint16_t)(f16 ? gb_f16(off + 8.0f * frand(&s)) : gb_bf16(off + 8.0f * frand(&s)));
      lr[e] = f16 ? gb_from_f16(l16[e]) : gb_from_bf16(l16[e]);
    }
    tg[i] = (int)((frand(&s) * 0.5f + 0.5f) * (float)V) % V;
  }
  emu_crossentropy16(loss16, l16, 1, tg, N, V, 0.0f, NULL, f16); /* eval: the logits stay */
  emu_crossentropy(loss32, lr, tg, N, V, 0.0f, NULL, 0);
  ZT_CHECK(memcmp(loss16, loss32, N * 4) == 0);
  size_t kept = 0;
  for (size_t e = 0; e < n; e++)
    kept += (f16 ? gb_from_f16(l16[e]) : gb_from_bf16(l16[e])) == lr[e];
  ZT_CHECK(kept == n);
  emu_crossentropy16(loss16, l16, 1, tg, N, V, 1.0f / (float)N, l16, f16);
  emu_crossentropy(loss32, lr, tg, N, V, 1.0f / (float)N, NULL, 0);
  ZT_CHECK(memcmp(loss16, loss32, N * 4) == 0);
  size_t bad = 0;
  for (size_t e = 0; e < n; e++) bad += l16[e] != (uint16_t)(f16 ? gb_f16(lr[e]) : gb_bf16(lr[e]));
  if (bad)
    printf("  cross-entropy over 16-bit logits N %d V %d: %zu gradient entries differ\n", N, V,
           bad);
  ZT_CHECK(bad == 0);
  free(l16), free(lr), free(loss32), free(loss16), free(tg);
}

/* Rows ld > V apart (the layout's logits_ld: GPT-2's 50257 padded to
 * 50304), the padding NaN: each form (fp32 in place, fp32 with a 16-bit
 * gradient copy, 16-bit in place) gives the losses and gradient rows of
 * the contiguous rows bit for bit, and the padding stays as it was
 * (neither read nor written). */
static void ce_ld_case(int N, int V, int ld, uint64_t seed) {
  uint64_t s = seed;
  size_t n = (size_t)N * V, np = (size_t)N * ld;
  float *lc = malloc(n * 4), *lp = malloc(np * 4), *loss_c = malloc(N * 4), *loss_p = malloc(N * 4);
  uint16_t *hc = malloc(n * 2), *hp = malloc(np * 2), *gc = malloc(n * 2), *gp = malloc(np * 2);
  int *tg = malloc(N * sizeof *tg);
  for (int f16 = 0; f16 < 2; f16++)
    for (int form = 0; form < 3; form++) {
      const uint16_t nan16 = (uint16_t)(f16 ? 0x7e01 : 0x7fc1);
      for (size_t e = 0; e < np; e++) lp[e] = NAN, hp[e] = gp[e] = nan16;
      for (int i = 0; i < N; i++) {
        float off = 30.0f * frand(&s);
        for (int v = 0; v < V; v++) {
          float x = off + 8.0f * frand(&s);
          uint16_t h = (uint16_t)(f16 ? gb_f16(x) : gb_bf16(x));
          lc[(size_t)i * V + v] = lp[(size_t)i * ld + v] = x;
          hc[(size_t)i * V + v] = hp[(size_t)i * ld + v] = h;
        }
        tg[i] = i == N - 1 ? V - 1 : (int)((frand(&s) * 0.5f + 0.5f) * (float)V) % V;
      }
      const float dloss = 1.0f / (float)N;
      size_t bad = 0, pads = 0;
      if (form < 2) { /* fp32 logits, the gradient in place or into a 16-bit copy */
        emu_crossentropy_ld(loss_c, lc, 0, tg, N, V, V, dloss, form ? gc : NULL, f16);
        emu_crossentropy_ld(loss_p, lp, 0, tg, N, V, ld, dloss, form ? gp : NULL, f16);
      } else { /* 16-bit logits, the gradient over them */
        emu_crossentropy_ld(loss_c, hc, 1, tg, N, V, V, dloss, hc, f16);
        emu_crossentropy_ld(loss_p, hp, 1, tg, N, V, ld, dloss, hp, f16);
      }
      for (int i = 0; i < N; i++) {
        for (int v = 0; v < V; v++) {
          size_t c = (size_t)i * V + v, p = (size_t)i * ld + v;
          bad += form == 0   ? memcmp(&lc[c], &lp[p], 4) != 0
                 : form == 1 ? gc[c] != gp[p]
                             : hc[c] != hp[p];
        }
        for (int v = V; v < ld; v++) {
          size_t p = (size_t)i * ld + v;
          pads += !isnan(lp[p]) || gp[p] != nan16 || hp[p] != nan16;
        }
      }
      if (bad || pads)
        printf("  cross-entropy N %d V %d ld %d %s form %d: %zu entries differ, %zu pads touched\n",
               N, V, ld, f16 ? "fp16" : "bf16", form, bad, pads);
      ZT_CHECK(memcmp(loss_c, loss_p, N * 4) == 0);
      ZT_CHECK(bad == 0 && pads == 0);
    }
  free(lc), free(lp), free(loss_c), free(loss_p), free(hc), free(hp), free(gc), free(gp), free(tg);
}

/* The partials of a split reduction (the scratch's, on a GPU), poisoned
 * with NaN: a block that did not write its row shows in the sums. */
static float *g_part;
static size_t g_part_cap;
static float *emu_part(rw_plan p, int W) {
  size_t n = rw_part_floats(p, W);
  if (!n) return NULL;
  if (n > g_part_cap) {
    free(g_part);
    g_part = malloc(n * sizeof *g_part);
    g_part_cap = n;
  }
  for (size_t i = 0; i < n; i++) g_part[i] = NAN;
  return g_part;
}

/* The fold of the partials (k_part_fold's grid), when the plan split. */
static void emu_fold(float *o0, float *o1, int W0, const float *part, rw_plan p, int W) {
  static rw_col_smem sm;
  if (part)
    for (int g = 0; g < (W + RW_COLS - 1) / RW_COLS; g++)
      rw_part_fold_block(o0, o1, W0, part, p.S, W, g, &sm);
}

/* cu_bias_backward's grid: rw_col_plan's blocks, then the fold */
static void emu_colsum(float *db, const void *dout, int in16, int f16, int N, int OC) {
  static rw_col_smem sm;
  rw_plan p = rw_col_plan(N, OC);
  float *part = emu_part(p, OC);
  for (int sc = 0; sc < p.S; sc++)
    for (int g = 0; g < p.G; g++) rw_colsum_block(db, part, dout, in16, f16, N, OC, p, g, sc, &sm);
  emu_fold(db, NULL, OC, part, p, OC);
}

/* cu_gelu_backward's (with db); d16: dout holds 16-bit elements */
static void emu_gelu_colsum_d16(float *dinp, float *db, const void *dout, int d16, const void *inp,
                                int in16, const float *bias, int N, int OC, uint16_t *g16,
                                int f16) {
  static rw_col_smem sm;
  rw_plan p = rw_col_plan(N, OC);
  float *part = emu_part(p, OC);
  for (int sc = 0; sc < p.S; sc++)
    for (int g = 0; g < p.G; g++)
      rw_gelu_colsum_block(dinp, db, part, dout, d16, inp, in16, bias, N, OC, p, g, sc, &sm, g16,
                           f16);
  emu_fold(db, NULL, OC, part, p, OC);
}
static void emu_gelu_colsum16(float *dinp, float *db, const float *dout, const void *inp, int in16,
                              const float *bias, int N, int OC, uint16_t *g16, int f16) {
  emu_gelu_colsum_d16(dinp, db, dout, 0, inp, in16, bias, N, OC, g16, f16);
}
static void emu_gelu_colsum(float *dinp, float *db, const float *dout, const float *inp,
                            const float *bias, int N, int OC) {
  emu_gelu_colsum16(dinp, db, dout, inp, 0, bias, N, OC, NULL, 0);
}

/* cu_layernorm_backward's: rw_ln_plan's blocks, then the fold into dw, db;
 * with g_ln_d16 dout holds 16-bit elements (of fp16 with g_ln_f16) */
static int g_ln_d16, g_ln_f16;
static void emu_layernorm_backward(float *dinp, float *dw, float *db, const void *dout,
                                   const float *inp, const float *w, const float *mean,
                                   const float *rstd, int N, int C) {
  static rw_ln_smem sm;
  rw_plan p = rw_ln_plan(N);
  float *part = emu_part(p, 2 * C);
  for (int sc = 0; sc < p.S; sc++)
    rw_layernorm_backward_block(dinp, dw, db, part, dout, g_ln_d16, g_ln_f16, inp, w, mean, rstd, N,
                                C, p, sc, &sm);
  emu_fold(dw, db, C, part, p, 2 * C);
}

static double worst_ce = 0, worst_grad = 0, worst_col = 0, worst_gelu = 0, worst_gelu_db = 0;
static double worst_ln = 0, worst_ln_col = 0;

static void ce_case(int N, int V, int with_grad, uint64_t seed) {
  uint64_t s = seed;
  size_t n = (size_t)N * V;
  float *l = malloc(n * sizeof *l), *l0 = malloc(n * sizeof *l0), *loss = malloc(N * sizeof *loss);
  int *tg = malloc(N * sizeof *tg);
  for (int i = 0; i < N; i++) {
    float off = 30.0f * frand(&s);
    for (int v = 0; v < V; v++) l0[(size_t)i * V + v] = off + 8.0f * frand(&s);
    tg[i] = (int)((frand(&s) * 0.5f + 0.5f) * (float)V) % V;
  }
  tg[N - 1] = V - 1; /* the last column as a target */
  memcpy(l, l0, n * sizeof *l);
  float dloss = with_grad ? 1.0f / (float)N : 0.0f;
  /* the 16-bit runs' form first: the gradient into a bf16 (then an fp16)
   * copy, the row kept */
  uint16_t *g16[2] = {malloc(n * sizeof(uint16_t)), malloc(n * sizeof(uint16_t))};
  float *loss16 = malloc(N * sizeof *loss16);
  for (int f16 = 0; f16 < 2; f16++) {
    for (size_t e = 0; e < n; e++) g16[f16][e] = 0xdead;
    emu_crossentropy(loss16, l, tg, N, V, dloss, with_grad ? g16[f16] : NULL, f16);
    ZT_CHECK(memcmp(l, l0, n * sizeof *l) == 0); /* the logits stay */
  }
  emu_crossentropy(loss, l, tg, N, V, dloss, NULL, 0);
  ZT_CHECK(memcmp(loss, loss16, N * sizeof *loss) == 0);
  for (int f16 = 0; f16 < 2 && with_grad; f16++) {
    /* the copy: the in-place gradient rounded to nearest even, bit for bit */
    size_t bad = 0;
    for (size_t e = 0; e < n; e++)
      bad += g16[f16][e] != (uint16_t)(f16 ? gb_f16(l[e]) : gb_bf16(l[e]));
    if (bad)
      printf("  cross-entropy N %d V %d: %zu %s gradient entries differ\n", N, V, bad,
             f16 ? "fp16" : "bf16");
    ZT_CHECK(bad == 0);
  }
  free(g16[0]), free(g16[1]);
  free(loss16);
  int ok = 1;
  for (int i = 0; i < N && ok; i++) {
    const float *r = l0 + (size_t)i * V;
    double mx = r[0], sum = 0;
    for (int v = 1; v < V; v++) mx = r[v] > mx ? r[v] : mx;
    for (int v = 0; v < V; v++) sum += exp((double)r[v] - mx);
    double want = log(sum) + mx - r[tg[i]], e = fabs(loss[i] - want);
    if (e > worst_ce) worst_ce = e;
    if (e > 1e-5) {
      printf("  cross-entropy N %d V %d row %d: loss %.9g, want %.9g\n", N, V, i, loss[i], want);
      ok = 0;
    }
    for (int v = 0; v < V && ok; v++) {
      double g = with_grad ? (exp((double)r[v] - mx) / sum - (v == tg[i])) * dloss : r[v];
      double eg = fabs(l[(size_t)i * V + v] - g);
      if (with_grad && eg > worst_grad) worst_grad = eg;
      if (eg > (with_grad ? 1e-6 * dloss : 0.0)) {
        printf("  cross-entropy N %d V %d row %d col %d: %s %.9g, want %.9g\n", N, V, i, v,
               with_grad ? "grad" : "logit (dloss 0: untouched)", l[(size_t)i * V + v], g);
        ok = 0;
      }
    }
  }
  ZT_CHECK(ok);
  free(l);
  free(l0);
  free(loss);
  free(tg);
}

static void col_case(int N, int OC, uint64_t seed) {
  uint64_t s = seed;
  size_t n = (size_t)N * OC;
  float *dout = malloc(n * sizeof *dout);
  float *db = malloc(OC * sizeof *db), *db0 = malloc(OC * sizeof *db0);
  for (size_t i = 0; i < n; i++) dout[i] = frand(&s);
  for (int c = 0; c < OC; c++) db0[c] = db[c] = frand(&s);
  emu_colsum(db, dout, 0, 0, N, OC);
  double tol = 4e-7 * N + 1e-6;
  int ok = 1;
  for (int c = 0; c < OC && ok; c++) {
    double sb = db0[c];
    for (int i = 0; i < N; i++) sb += dout[(size_t)i * OC + c];
    double eb = fabs(db[c] - sb);
    if (eb > worst_col) worst_col = eb;
    if (!(eb <= tol)) {
      printf("  column sums N %d OC %d col %d: db %.9g want %.9g\n", N, OC, c, db[c], sb);
      ok = 0;
    }
  }
  ZT_CHECK(ok);
  free(dout), free(db), free(db0);
}

/* The LayerNorm backward with its weight's and bias's gradients, against
 * double: dinp, dw and db ADDED onto non-zero values. */
static void ln_case(int N, int C, uint64_t seed) {
  uint64_t s = seed;
  size_t n = (size_t)N * C;
  float *dout = malloc(n * 4), *inp = malloc(n * 4), *dinp = malloc(n * 4), *dinp0 = malloc(n * 4);
  float *mean = malloc(N * 4), *rstd = malloc(N * 4), *w = calloc((size_t)C, 4);
  float *dw = malloc(C * 4), *db = malloc(C * 4), *dw0 = malloc(C * 4), *db0 = malloc(C * 4);
  for (size_t i = 0; i < n; i++) {
    dout[i] = frand(&s);
    inp[i] = 1.5f * frand(&s);
    dinp0[i] = dinp[i] = frand(&s);
  }
  for (int i = 0; i < N; i++) {
    mean[i] = 0.2f * frand(&s);
    rstd[i] = 1.0f + 0.3f * frand(&s);
  }
  for (int c = 0; c < C; c++) {
    w[c] = 1.0f + 0.5f * frand(&s);
    dw0[c] = dw[c] = frand(&s);
    db0[c] = db[c] = frand(&s);
  }
  emu_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  double *sw = malloc(C * sizeof *sw), *sb = malloc(C * sizeof *sb);
  for (int c = 0; c < C; c++) sw[c] = dw0[c], sb[c] = db0[c];
  int ok = 1;
  for (int i = 0; i < N; i++) {
    const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
    double a = 0, b = 0;
    for (int c = 0; c < C; c++) {
      double nm = ((double)x[c] - mean[i]) * rstd[i], dn = (double)w[c] * d[c];
      a += dn, b += dn * nm;
      sw[c] += nm * d[c], sb[c] += d[c];
    }
    a /= C, b /= C;
    for (int c = 0; c < C && ok; c++) {
      double nm = ((double)x[c] - mean[i]) * rstd[i];
      double want = dinp0[(size_t)i * C + c] + ((double)w[c] * d[c] - a - nm * b) * rstd[i];
      double e = fabs(dinp[(size_t)i * C + c] - want);
      if (e > worst_ln) worst_ln = e;
      if (!(e <= 2e-5)) {
        printf("  layernorm backward N %d C %d [%d, %d]: dinp %.9g want %.9g\n", N, C, i, c,
               dinp[(size_t)i * C + c], want);
        ok = 0;
      }
    }
  }
  double tol = 4e-7 * N + 1e-6;
  for (int c = 0; c < C && ok; c++) {
    double ew = fabs(dw[c] - sw[c]), eb = fabs(db[c] - sb[c]);
    if (ew > worst_ln_col) worst_ln_col = ew;
    if (eb > worst_ln_col) worst_ln_col = eb;
    if (!(ew <= tol && eb <= tol)) {
      printf("  layernorm backward N %d C %d col %d: dw %.9g want %.9g, db %.9g want %.9g\n", N, C,
             c, dw[c], sw[c], db[c], sb[c]);
      ok = 0;
    }
  }
  ZT_CHECK(ok);
  free(sw), free(sb);
  free(dout), free(inp), free(dinp), free(dinp0), free(mean), free(rstd), free(w);
  free(dw), free(db), free(dw0), free(db0);
}

/* The LayerNorm backward over a 16-bit dout (a 16-bit run's dC slot):
 * dinp, dw and db bit for bit those of an fp32 dout holding the same
 * values. */
static void ln16_case(int N, int C, int f16, uint64_t seed) {
  uint64_t s = seed;
  size_t n = (size_t)N * C;
  uint16_t *d16 = malloc(n * 2);
  float *dr = malloc(n * 4), *inp = malloc(n * 4), *di32 = malloc(n * 4), *di16 = malloc(n * 4);
  float *mean = malloc(N * 4), *rstd = malloc(N * 4), *w = calloc((size_t)C, 4);
  float *g32 = malloc(2 * C * 4), *g16 = malloc(2 * C * 4);
  for (size_t i = 0; i < n; i++) {
    d16[i] = (uint16_t)(f16 ? gb_f16(frand(&s)) : gb_bf16(frand(&s)));
    dr[i] = f16 ? gb_from_f16(d16[i]) : gb_from_bf16(d16[i]);
    inp[i] = 1.5f * frand(&s);
    di32[i] = di16[i] = frand(&s);
  }
  for (int i = 0; i < N; i++) mean[i] = 0.2f * frand(&s), rstd[i] = 1.0f + 0.3f * frand(&s);
  for (int c = 0; c < C; c++) w[c] = 1.0f + 0.5f * frand(&s);
  for (int c = 0; c < 2 * C; c++) g32[c] = g16[c] = frand(&s);
  emu_layernorm_backward(di32, g32, g32 + C, dr, inp, w, mean, rstd, N, C);
  g_ln_d16 = 1, g_ln_f16 = f16;
  emu_layernorm_backward(di16, g16, g16 + C, d16, inp, w, mean, rstd, N, C);
  g_ln_d16 = 0, g_ln_f16 = 0;
  ZT_CHECK(memcmp(di16, di32, n * 4) == 0 && memcmp(g16, g32, 2 * (size_t)C * 4) == 0);
  free(d16), free(dr), free(inp), free(di32), free(di16), free(mean), free(rstd), free(w);
  free(g32), free(g16);
}

static double gelu_grad_ref(double x) {
  const double k = 0.7978845608028654, th = tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * k * (1 + 3 * 0.044715 * x * x);
}

static void gelu_case(int N, int OC, int with_bias, int in_place, uint64_t seed) {
  uint64_t s = seed;
  size_t n = (size_t)N * OC;
  float *dout = malloc(n * sizeof *dout), *inp = malloc(n * sizeof *inp);
  float *dinp = in_place ? dout : malloc(n * sizeof *dinp);
  float *keep = malloc(n * sizeof *keep), *bias = malloc(OC * sizeof *bias);
  float *db = malloc(OC * sizeof *db), *db0 = malloc(OC * sizeof *db0);
  for (size_t i = 0; i < n; i++) {
    keep[i] = dout[i] = frand(&s);
    inp[i] = 3.0f * frand(&s);
  }
  for (int c = 0; c < OC; c++) {
    bias[c] = 0.5f * frand(&s);
    db0[c] = db[c] = frand(&s);
  }
  emu_gelu_colsum(dinp, db, dout, inp, with_bias ? bias : NULL, N, OC);
  double tol_db = 4e-7 * N + 1e-6;
  int ok = 1;
  for (int c = 0; c < OC && ok; c++) {
    double sb = db0[c];
    for (int i = 0; i < N && ok; i++) {
      size_t k = (size_t)i * OC + c;
      double x = (double)inp[k] + (with_bias ? (double)bias[c] : 0.0);
      double want = keep[k] * gelu_grad_ref((float)x), e = fabs(dinp[k] - want);
      sb += dinp[k];
      if (e > worst_gelu) worst_gelu = e;
      if (!(e <= 4e-6)) {
        printf("  gelu backward N %d OC %d [%d, %d]: %.9g want %.9g\n", N, OC, i, c, dinp[k], want);
        ok = 0;
      }
    }
    double eb = fabs(db[c] - sb);
    if (eb > worst_gelu_db) worst_gelu_db = eb;
    if (!(eb <= tol_db)) {
      printf("  gelu backward's db N %d OC %d col %d: %.9g want %.9g\n", N, OC, c, db[c], sb);
      ok = 0;
    }
  }
  if (!in_place)
    for (size_t i = 0; i < n && ok; i++) ok = dout[i] == keep[i]; /* dout left as it was */
  ZT_CHECK(ok);
  if (!in_place) free(dinp);
  free(dout), free(inp), free(keep), free(bias), free(db), free(db0);
}

/* The bias gradient from a held 16-bit copy (in16: the attention
 * backward's dqkv in a 16-bit run): the column sums of the 16-bit values,
 * against double at the column sums' tolerance. */
static void col16_case(int N, int OC, int f16, uint64_t seed) {
  uint64_t s = seed;
  size_t n = (size_t)N * OC;
  uint16_t *d16 = malloc(n * 2);
  float *db = malloc(OC * 4), *db0 = malloc(OC * 4);
  for (size_t i = 0; i < n; i++) {
    float x = frand(&s);
    d16[i] = (uint16_t)(f16 ? gb_f16(x) : gb_bf16(x));
  }
  for (int c = 0; c < OC; c++) db0[c] = db[c] = frand(&s);
  emu_colsum(db, d16, 1, f16, N, OC);
  int ok = 1;
  for (int c = 0; c < OC; c++) {
    double want = db0[c];
    for (int i = 0; i < N; i++) {
      uint32_t b = d16[(size_t)i * OC + c];
      want += f16 ? gb_from_f16(b) : gb_from_bf16(b);
    }
    double e = fabs(db[c] - want);
    if (e > worst_col) worst_col = e;
    ok &= e <= 4e-7 * N + 1e-6; /* false for a NaN */
  }
  ZT_CHECK(ok);
  free(d16), free(db), free(db0);
}

/* A 16-bit run's form (g16): the copy is the fp32 form's dinp rounded to
 * nearest even, bit for bit; db bitwise the fp32 form's; dinp (here aliased
 * with dout, as the passes run it) left as it was. */
static void gelu16_case(int N, int OC, int f16, uint64_t seed) {
  uint64_t s = seed;
  size_t n = (size_t)N * OC;
  float *d32 = malloc(n * 4), *d16 = malloc(n * 4), *keep = malloc(n * 4), *inp = malloc(n * 4);
  float *bias = malloc(OC * 4), *db32 = malloc(OC * 4), *db16 = malloc(OC * 4);
  uint16_t *g16 = malloc(n * 2);
  for (size_t i = 0; i < n; i++) {
    keep[i] = d32[i] = d16[i] = frand(&s);
    inp[i] = 3.0f * frand(&s);
  }
  for (int c = 0; c < OC; c++) {
    bias[c] = 0.5f * frand(&s);
    db32[c] = db16[c] = frand(&s);
  }
  emu_gelu_colsum(d32, db32, d32, inp, bias, N, OC);
  emu_gelu_colsum16(d16, db16, d16, inp, 0, bias, N, OC, g16, f16);
  long bad = 0;
  for (size_t i = 0; i < n; i++)
    bad += g16[i] != (uint16_t)(f16 ? gb_f16(d32[i]) : gb_bf16(d32[i])) || d16[i] != keep[i];
  ZT_CHECK(bad == 0);
  ZT_CHECK(memcmp(db16, db32, OC * 4) == 0);
  /* a 16-bit fch as inp (in16): the same numbers as its values in fp32 */
  uint16_t *i16 = malloc(n * 2);
  float *ir = malloc(n * 4), *e32 = malloc(n * 4), *e16 = malloc(n * 4);
  for (size_t i = 0; i < n; i++) {
    i16[i] = (uint16_t)(f16 ? gb_f16(inp[i]) : gb_bf16(inp[i]));
    ir[i] = f16 ? gb_from_f16(i16[i]) : gb_from_bf16(i16[i]);
    e32[i] = e16[i] = keep[i];
  }
  memcpy(db16, db32, OC * 4);
  emu_gelu_colsum16(e32, db32, e32, ir, 0, bias, N, OC, NULL, f16);
  emu_gelu_colsum16(e16, db16, e16, i16, 1, bias, N, OC, NULL, f16);
  ZT_CHECK(memcmp(e16, e32, n * 4) == 0 && memcmp(db16, db32, OC * 4) == 0);
  /* a 16-bit dout with the gradient over it in place (a 16-bit run's d4C
   * slot): the fp32 form on the same (rounded) values, its gradient
   * rounded, bit for bit, and the same db */
  uint16_t *s16 = malloc(n * 2);
  for (size_t i = 0; i < n; i++) {
    s16[i] = (uint16_t)(f16 ? gb_f16(keep[i]) : gb_bf16(keep[i]));
    e32[i] = f16 ? gb_from_f16(s16[i]) : gb_from_bf16(s16[i]);
  }
  memcpy(db16, db32, OC * 4);
  emu_gelu_colsum16(e32, db32, e32, i16, 1, bias, N, OC, NULL, f16);
  emu_gelu_colsum_d16(NULL, db16, s16, 1, i16, 1, bias, N, OC, s16, f16);
  long bad16 = 0;
  for (size_t i = 0; i < n; i++)
    bad16 += s16[i] != (uint16_t)(f16 ? gb_f16(e32[i]) : gb_bf16(e32[i]));
  ZT_CHECK(bad16 == 0 && memcmp(db16, db32, OC * 4) == 0);
  free(s16);
  free(i16), free(ir), free(e32), free(e16);
  free(d32), free(d16), free(keep), free(inp), free(bias), free(db32), free(db16), free(g16);
}

int main(void) {
  static const int Vs[] = {1, 7, 255, 256, 257, 1000, 50257};
  for (size_t k = 0; k < sizeof Vs / sizeof Vs[0]; k++)
    for (int g = 0; g < 2; g++) ce_case(Vs[k] > 1000 ? 3 : 5, Vs[k], g, 1000 + 7 * k + (size_t)g);
  printf("cross-entropy: worst loss error %.3g, worst gradient error %.3g\n", worst_ce, worst_grad);
  for (int f16 = 0; f16 < 2; f16++) {
    ce16_case(5, 257, f16, 1200 + (uint64_t)f16);
    ce16_case(3, 50257, f16, 1210 + (uint64_t)f16);
  }
  ce_ld_case(4, 50257, 50304, 1300);
  ce_ld_case(3, 1000, 1024, 1310);
  ce_ld_case(2, 7, 64, 1320);
  printf("cross-entropy over rows ld apart (50257 in 50304, 1000 in 1024, 7 in 64): the "
         "contiguous rows' losses and gradients bit for bit, the padding untouched\n");
  printf(
      "cross-entropy over 16-bit logits (bf16, fp16): losses bitwise the fp32 form's on the same "
      "values, the gradient over the logits its rounding, bit for bit\n");
  static const int Ns[] = {1, 7, 33, 100, 129, 1000, 8192};
  static const int OCs[] = {1, 31, 32, 33, 65, 768};
  for (size_t i = 0; i < sizeof Ns / sizeof Ns[0]; i++)
    for (size_t j = 0; j < sizeof OCs / sizeof OCs[0]; j++) {
      if (Ns[i] == 8192 && OCs[j] != 768) continue; /* the large N at GPT-2's width only */
      col_case(Ns[i], OCs[j], 77 + 13 * i + 5 * j);
    }
  for (int f16 = 0; f16 < 2; f16++) {
    col16_case(129, 33, f16, 700 + (uint64_t)f16);
    col16_case(2048, 2304, f16, 710 + (uint64_t)f16); /* GPT-2's dqkv at B*T = 2048 */
  }
  printf("column sums: worst error %.3g (a bias's, ADD onto non-zero outputs; also from a 16-bit "
         "copy)\n",
         worst_col);
  /* the LayerNorm backward: the same N (one block up to 32 rows, split
   * beyond), 8225 rows (chunks of 64: two passes a block, a ragged last
   * one), C from 1 to GPT-2 XL's 1600 (over the block's 1024 threads) */
  static const int lNs[] = {1, 7, 33, 100, 129, 1000, 8192, 8225};
  static const int lCs[] = {1, 31, 33, 768, 1600};
  for (size_t i = 0; i < sizeof lNs / sizeof lNs[0]; i++)
    for (size_t j = 0; j < sizeof lCs / sizeof lCs[0]; j++) {
      if (lNs[i] >= 8192 && lCs[j] < 768) continue;
      if (lNs[i] == 8225 && lCs[j] == 1600) continue; /* 13M elements: 1025 below has it */
      ln_case(lNs[i], lCs[j], 300 + 17 * i + 3 * j);
    }
  ln_case(8225, 1025, 399); /* two passes a block, and a column past the block's 1024 threads */
  for (int f16 = 0; f16 < 2; f16++) {
    ln16_case(129, 33, f16, 420 + (uint64_t)f16);
    ln16_case(1000, 768, f16, 430 + (uint64_t)f16);
  }
  printf("layernorm backward: worst dinp error %.3g, worst dw/db error %.3g (ADD onto non-zero "
         "outputs)\n",
         worst_ln, worst_ln_col);
  static const int gOCs[] = {1, 33, 3072};
  for (size_t i = 0; i < sizeof Ns / sizeof Ns[0]; i++)
    for (size_t j = 0; j < sizeof gOCs / sizeof gOCs[0]; j++) {
      if (Ns[i] == 8192 && gOCs[j] == 3072) continue; /* 100 MB of doubles: too slow */
      for (int v = 0; v < 4; v++)
        gelu_case(Ns[i], gOCs[j], v & 1, v >> 1, 500 + 11 * i + 3 * j + (size_t)v);
    }
  printf("gelu backward with the bias's gradient: worst dinp error %.3g, worst db error %.3g\n",
         worst_gelu, worst_gelu_db);
  for (int f16 = 0; f16 < 2; f16++) {
    gelu16_case(129, 33, f16, 900 + (uint64_t)f16);
    gelu16_case(1000, 3072, f16, 910 + (uint64_t)f16);
  }
  printf("gelu backward's 16-bit copy: bf16 and fp16 bit for bit the fp32 gradient rounded\n");
  ZT_DONE();
}
