/*
 * zt_attn_ref.h — plain causal attention in double, the reference of the
 * tests of the GPT example's fused attention (test_gpt2_flash_emu,
 * test_gpt2_flash_tc_emu, test_gpt2_cuda): out, lse (when not NULL), and
 * dqkv += the backward for the upstream gradient dout. qkv [B, T, 3C]
 * (q | k | v, head h at h * C / NH), out and dout [B, T, C], lse [B*NH, T].
 */
#ifndef ZT_ATTN_REF_H
#define ZT_ATTN_REF_H

#include <math.h>
#include <stdlib.h>

static void zt_attn_ref(const float *qkv, const float *dout, double *out, double *lse, double *dqkv,
                        int B, int T, int C, int NH) {
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

#endif
