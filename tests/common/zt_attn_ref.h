/*
 * zt_attn_ref.h — plain causal attention in double, the reference of the
 * tests of the GPT example's fused attention (test_gpt2_flash_emu,
 * test_gpt2_flash_tc_emu, test_gpt2_cuda): out, lse (when not NULL), and
 * dqkv += the backward for the upstream gradient dout. qkv [B, T, 3C]
 * (q | k | v, head h at h * C / NH), out and dout [B, T, C], lse [B*NH, T].
 * zt_attn_case runs one shape through a kernel's emulation (its forward and
 * backward over the whole grid) against it, on seeded inputs.
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
 * (ADDs into dqkv; dstat: its per-row scratch; out: the forward's). */
typedef struct zt_attn_kernel {
  void (*forward)(const float *qkv, float *out, float *lse, int B, int T, int C, int NH);
  void (*backward)(float *dqkv, float *dstat, const float *dout, const float *qkv, const float *out,
                   const float *lse, int B, int T, int C, int NH);
  float (*round)(float); /* the inputs' rounding (the kernel's operand type), NULL: none */
  double tol_out, tol_lse, tol_dqkv; /* absolute */
  const char *dtype;                 /* for zt_attn_dump */
  int dump_hs;                       /* ZRT_ATTN_DUMP: the T = 100 case with this head size */
} zt_attn_kernel;

static inline float zt_attn_frand(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((*s >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* One shape: inputs uniform in [-1, 1) from seed (rounded by k->round),
 * dqkv starting non-zero (the backward adds), out poisoned with NaN (every
 * row must be written); checked against zt_attn_ref at k's tolerances. */
static inline void zt_attn_case(const zt_attn_kernel *k, int B, int T, int NH, int hs,
                                uint64_t seed) {
  int C = NH * hs;
  size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nst = (size_t)B * NH * T;
  float *qkv = malloc(nqkv * 4), *dout = malloc(nout * 4), *out = malloc(nout * 4);
  float *lse = malloc(nst * 4), *dstat = malloc(nst * 4), *dqkv = malloc(nqkv * 4);
  float *dqkv0 = malloc(nqkv * 4);
  double *rout = malloc(nout * 8), *rlse = malloc(nst * 8), *rdqkv = malloc(nqkv * 8);
  uint64_t s = seed;
  for (size_t i = 0; i < nqkv; i++) qkv[i] = zt_attn_frand(&s);
  for (size_t i = 0; i < nout; i++) dout[i] = zt_attn_frand(&s);
  if (k->round) {
    for (size_t i = 0; i < nqkv; i++) qkv[i] = k->round(qkv[i]);
    for (size_t i = 0; i < nout; i++) dout[i] = k->round(dout[i]);
  }
  for (size_t i = 0; i < nqkv; i++) rdqkv[i] = dqkv[i] = 0.25f * zt_attn_frand(&s);
  for (size_t i = 0; i < nout; i++) out[i] = NAN;
  for (size_t i = 0; i < nst; i++) lse[i] = dstat[i] = NAN;
  memcpy(dqkv0, dqkv, nqkv * 4);
  k->forward(qkv, out, lse, B, T, C, NH);
  k->backward(dqkv, dstat, dout, qkv, out, lse, B, T, C, NH);
  const char *dump = getenv("ZRT_ATTN_DUMP");
  if (dump && *dump && T == 100 && hs == k->dump_hs)
    zt_attn_dump(dump, qkv, dout, dqkv0, out, dqkv, B, T, NH, hs, k->dtype);
  zt_attn_ref(qkv, dout, rout, rlse, rdqkv, B, T, C, NH);
  char what[96];
  snprintf(what, sizeof what, "B=%d T=%d NH=%d hs=%d out", B, T, NH, hs);
  ZT_CLOSE_ARRAY(what, out, rout, nout, k->tol_out);
  snprintf(what, sizeof what, "B=%d T=%d NH=%d hs=%d lse", B, T, NH, hs);
  ZT_CLOSE_ARRAY(what, lse, rlse, nst, k->tol_lse);
  snprintf(what, sizeof what, "B=%d T=%d NH=%d hs=%d dqkv", B, T, NH, hs);
  ZT_CLOSE_ARRAY(what, dqkv, rdqkv, nqkv, k->tol_dqkv);
  free(qkv), free(dout), free(out), free(lse), free(dstat), free(dqkv), free(dqkv0);
  free(rout), free(rlse), free(rdqkv);
}

#endif
