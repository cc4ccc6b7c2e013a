/*
 * zt_attn_ref.h — plain causal attention in double, the reference of the
 * tests of the GPT example's fused attention (test_gpt2_flash_emu,
 * test_gpt2_flash_tc_emu, test_gpt2_cuda): out, lse (when not NULL), and
 * dqkv += the backward for the upstream gradient dout. qkv [B, T, 3C]
 * (q | k | v, head h at h * C / NH), out and dout [B, T, C], lse [B*NH, T].
 * zt_attn_case runs one shape through a kernel's emulation (its forward and
 * backward over the whole grid) against it, on seeded inputs, without and
 * with the qkv GEMM's bias (which the kernels add as they load q, k, v).
 */
#ifndef ZT_ATTN_REF_H
#define ZT_ATTN_REF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zt_attn_dump.h"
#include "ztest.h"

static inline void zt_attn_ref(const float *qkv, const float *dout, double *out, double *lse,
                               double *dqkv, int B, int T, int C, int NH) {
  int HS = C / NH, C3 = 3 * C;
  double scale = 1.0 / sqrt((double)HS);
  double *p = malloc(sizeof(double) * (size_t)T), *dp = malloc(sizeof(double) * (size_t)T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int i = 0; i < T; i++) {
        const float *q = qkv + ((size_t)b * T + i) * C3 + h * HS;
        double mx = -INFINITY, sum = 0, dsum = 0;
        for (int j = 0; j <= i; j++) {
          const float *k = qkv + ((size_t)b * T + j) * C3 + C + h * HS;
          double s = 0;
          for (int d = 0; d < HS; d++) s += (double)q[d] * k[d];
          p[j] = s * scale;
          if (p[j] > mx) mx = p[j];
        }
        for (int j = 0; j <= i; j++) sum += (p[j] = exp(p[j] - mx));
        for (int j = 0; j <= i; j++) p[j] /= sum;
        if (lse) lse[((size_t)b * NH + h) * T + i] = mx + log(sum);
        const float *dy = dout + ((size_t)b * T + i) * C + h * HS;
        for (int d = 0; d < HS; d++) {
          double acc = 0;
          for (int j = 0; j <= i; j++)
            acc += p[j] * qkv[((size_t)b * T + j) * C3 + 2 * C + h * HS + d];
          out[((size_t)b * T + i) * C + h * HS + d] = acc;
        }
        for (int j = 0; j <= i; j++) {
          const float *v = qkv + ((size_t)b * T + j) * C3 + 2 * C + h * HS;
          dp[j] = 0;
          for (int d = 0; d < HS; d++) dp[j] += (double)dy[d] * v[d];
          dsum += p[j] * dp[j];
        }
        for (int j = 0; j <= i; j++) {
          double ds = p[j] * (dp[j] - dsum) * scale;
          size_t rj = ((size_t)b * T + j) * C3 + h * HS, ri = ((size_t)b * T + i) * C3 + h * HS;
          for (int d = 0; d < HS; d++) {
            dqkv[ri + d] += ds * qkv[rj + C + d];
            dqkv[rj + C + d] += ds * q[d];
            dqkv[rj + 2 * C + d] += p[j] * dy[d];
          }
        }
      }
  free(p);
  free(dp);
}

/* An attention's emulation, whole grids: forward (out, lse) and backward
 * (WRITES dqkv; dstat: its per-row scratch; out: the forward's). bias: [3C]
 * or NULL, added to qkv as it is read. */
typedef struct zt_attn_kernel {
  void (*forward)(const float *qkv, const float *bias, float *out, float *lse, int B, int T, int C,
                  int NH);
  void (*backward)(float *dqkv, float *dstat, const float *dout, const float *qkv,
                   const float *bias, const float *out, const float *lse, int B, int T, int C,
                   int NH);
  float (*round)(float); /* the inputs' rounding (the kernel's operand type), NULL: none */
  double tol_out, tol_lse, tol_dqkv; /* absolute */
  const char *dtype;                 /* for zt_attn_dump */
  int dump_hs;                       /* ZRT_ATTN_DUMP: the T = 100 case with this head size */
} zt_attn_kernel;

static inline float zt_attn_frand(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((*s >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* q, k, v as the kernels read them: qkv + bias (bias NULL: qkv), rounded
 * to the operand type by round (NULL: fp32) after the add, as the kernels'
 * loads round. */
static inline void zt_attn_effective(float *qe, const float *qkv, const float *bias, size_t n,
                                     int C3, float (*round)(float)) {
  for (size_t i = 0; i < n; i++) {
    float x = bias ? qkv[i] + bias[i % (size_t)C3] : qkv[i];
    qe[i] = round ? round(x) : x;
  }
}

/* One shape: inputs uniform in [-1, 1) from seed (rounded by k->round),
 * with_bias: a bias in [-0.5, 0.5) the kernels add to q, k, v as they load
 * them; dqkv and out poisoned with NaN (the backward writes every element
 * of dqkv, the forward every row of out); checked against zt_attn_ref on
 * the effective q, k, v at k's tolerances. */
static inline void zt_attn_case_bias(const zt_attn_kernel *k, int B, int T, int NH, int hs,
                                     uint64_t seed, int with_bias) {
  int C = NH * hs;
  size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nst = (size_t)B * NH * T;
  float *qkv = malloc(nqkv * 4), *dout = malloc(nout * 4), *out = malloc(nout * 4);
  float *lse = malloc(nst * 4), *dstat = malloc(nst * 4), *dqkv = malloc(nqkv * 4);
  float *qe = malloc(nqkv * 4), *zero = calloc(nqkv, 4), *bias = NULL;
  double *rout = malloc(nout * 8), *rlse = malloc(nst * 8), *rdqkv = calloc(nqkv, 8);
  uint64_t s = seed;
  for (size_t i = 0; i < nqkv; i++) qkv[i] = zt_attn_frand(&s);
  for (size_t i = 0; i < nout; i++) dout[i] = zt_attn_frand(&s);
  if (k->round) {
    for (size_t i = 0; i < nqkv; i++) qkv[i] = k->round(qkv[i]);
    for (size_t i = 0; i < nout; i++) dout[i] = k->round(dout[i]);
  }
  if (with_bias) {
    bias = malloc((size_t)3 * C * 4);
    for (int i = 0; i < 3 * C; i++) bias[i] = 0.5f * zt_attn_frand(&s);
  }
  zt_attn_effective(qe, qkv, bias, nqkv, 3 * C, k->round);
  for (size_t i = 0; i < nqkv; i++) dqkv[i] = NAN;
  for (size_t i = 0; i < nout; i++) out[i] = NAN;
  for (size_t i = 0; i < nst; i++) lse[i] = dstat[i] = NAN;
  k->forward(qkv, bias, out, lse, B, T, C, NH);
  k->backward(dqkv, dstat, dout, qkv, bias, out, lse, B, T, C, NH);
  const char *dump = getenv("ZRT_ATTN_DUMP");
  if (dump && *dump && T == 100 && hs == k->dump_hs && !with_bias)
    zt_attn_dump(dump, qe, dout, zero, out, dqkv, B, T, NH, hs, k->dtype);
  zt_attn_ref(qe, dout, rout, rlse, rdqkv, B, T, C, NH);
  char what[96];
  const char *bw = with_bias ? " bias" : "";
  snprintf(what, sizeof what, "B=%d T=%d NH=%d hs=%d%s out", B, T, NH, hs, bw);
  ZT_CLOSE_ARRAY(what, out, rout, nout, k->tol_out);
  snprintf(what, sizeof what, "B=%d T=%d NH=%d hs=%d%s lse", B, T, NH, hs, bw);
  ZT_CLOSE_ARRAY(what, lse, rlse, nst, k->tol_lse);
  snprintf(what, sizeof what, "B=%d T=%d NH=%d hs=%d%s dqkv", B, T, NH, hs, bw);
  ZT_CLOSE_ARRAY(what, dqkv, rdqkv, nqkv, k->tol_dqkv);
  free(qkv), free(dout), free(out), free(lse), free(dstat), free(dqkv), free(qe), free(zero);
  free(bias), free(rout), free(rlse), free(rdqkv);
}

/* One shape without and with the bias. */
static inline void zt_attn_case(const zt_attn_kernel *k, int B, int T, int NH, int hs,
                                uint64_t seed) {
  zt_attn_case_bias(k, B, T, NH, hs, seed, 0);
  zt_attn_case_bias(k, B, T, NH, hs, seed + 1000003u, 1);
}

#endif
