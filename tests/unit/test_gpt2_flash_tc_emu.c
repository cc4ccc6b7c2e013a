/*
 * test_gpt2_flash_tc_emu.c — the tensor-core attention of the GPT example's
 * CUDA path (examples/gpt2/gpt2_flash_tc.h, bf16 and fp16 runs) through its C
 * emulation: the same block functions, with a warp's 32 lanes as arrays and
 * the MMA and the row shuffles done over all of them by the PTX ISA's
 * fragment layouts. Checked against plain causal attention in double
 * (zt_attn_ref.h) on the same bf16-rounded q, k, v and dO, so what is left
 * is the kernels' own rounding: P and dS in bf16 (relative 2^-9), fp32
 * sums. Shapes: head size 64, T = 1, 15, 16, 63, 64, 65, 100, 200 (tiles
 * of 64, warps of 16 rows: a single row, ragged warps and tiles, several
 * tiles, the diagonal's skipped products), 3 heads, batch 2; heads of 32
 * (tiny's), 48 (zero-padded) and an odd 33 (a half-padded 16-bit pair).
 * Tolerances, from the measured errors with
 * margin (see the printout): 4e-3 absolute on out and lse (entries of size
 * <= 1 and ~3), 1.5e-2 on dqkv (entries of size <= ~5); a wrong fragment
 * index, a missing rescale or mask, or a skipped product moves them by
 * 0.05 to 1 (hand mutants, docs/gpt2.md). The kernels compile from the same
 * text (gpt2_cuda.cu); test_gpt2_cuda (gpu label) runs them against these
 * references on a GPU. With ZRT_ATTN_DUMP=DIR the B = 2, T = 100, 3 heads of
 * 64 case writes its tensors there (dtype "bf16") for
 * scripts/check_attention_torch.py (cli.test_attention_torch_emu).
 * The same kernels on fp16 operands (an fp16 run: the MMA's f16 form, P and
 * dS in fp16, relative 2^-11), on fp16-rounded inputs: measured max errors
 * out 1.7e-4, dqkv 4.3e-4 over the same shapes (tolerances 5e-4 and
 * 1.5e-3; 8e-4 on out stored in fp16), and one fp16 MMA against its
 * definition. With o16 the forward's 16-bit out must be the fp32 forward's
 * output rounded, bit for bit, in both types; with a 16-bit dO (a 16-bit
 * run's dC slot) the backward's dqkv and D rows must be those of the fp32
 * dO holding the same values, bit for bit.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../examples/gpt2/gpt2_flash_tc.h"
#include "zt_attn_ref.h"
#include "ztest.h"

/* the operand type the emulated kernels run with: 0 bf16, 1 fp16 */
static int g_f16;
static int g_do16; /* dout holds elements of the operand type (a 16-bit run's dC slot) */
#define FP16_TOL_OUT 5e-4
#define FP16_TOL_OUT16 8e-4
#define FP16_TOL_DQKV 1.5e-3
static float bf16_round(float x) { return gb_from_bf16(gb_bf16(x)); }
static float f16_round(float x) { return gb_from_f16(gb_f16(x)); }

/* the CUDA grids, block by block */
static void emu_forward(const float *qkv, const float *bias, float *out, float *lse, int B, int T,
                        int C, int NH) {
  static tc_fwd_smem sm;
  static tc_fwd_lane st[TC_NT];
  for (int bh = 0; bh < B * NH; bh++)
    for (int qt = 0; qt < (T + TC_ROWS - 1) / TC_ROWS; qt++)
      tc_forward_block(qkv, bias, out, 0, lse, T, C, NH, qt, bh, g_f16, &sm, st);
}

static void emu_backward_as(void *dqkv, int d16, float *dstat, const void *dout, const float *qkv,
                            const float *bias, const void *out, int o16, const float *lse, int B,
                            int T, int C, int NH) {
  static tc_dq_smem sq;
  static tc_dq_lane tq[TC_NT];
  static tc_dkv_smem skv;
  static tc_dkv_lane tkv[TC_NT];
  int nt = (T + TC_ROWS - 1) / TC_ROWS;
  for (int bh = 0; bh < B * NH; bh++)
    for (int t = 0; t < nt; t++)
      tc_dq_block(dqkv, d16, dstat, dout, g_do16, qkv, bias, out, o16, lse, T, C, NH, t, bh, g_f16,
                  &sq, tq);
  for (int bh = 0; bh < B * NH; bh++)
    for (int t = 0; t < nt; t++)
      tc_dkv_block(dqkv, d16, dout, g_do16, qkv, bias, lse, dstat, T, C, NH, t, bh, g_f16, &skv,
                   tkv);
}

static void emu_backward(float *dqkv, float *dstat, const float *dout, const float *qkv,
                         const float *bias, const float *out, const float *lse, int B, int T, int C,
                         int NH) {
  emu_backward_as(dqkv, 0, dstat, dout, qkv, bias, out, 0, lse, B, T, C, NH);
}

/* bf16 inputs; tolerances 4e-3 on out, 5e-6 on lse, 1e-2 on dqkv (see the top) */
static const zt_attn_kernel kernel = {emu_forward, emu_backward, bf16_round, 4e-3,
                                      5e-6,        1e-2,         "bf16",     TC_HS};

/* A bf16 run's 16-bit atty (gpt2_act16.h): the forward stores out in bf16
 * (o16), the backward reads it so for D. The forward's bf16 elements are
 * checked bit for bit against the fp32 forward's output rounded to nearest
 * even (o16_bad counts the differences); out is then compared as bf16
 * values, so its tolerance adds bf16's half ulp (2^-9 of entries <= 1):
 * 6e-3. */
static long o16_bad, d16_bad, do16_bad;
static void emu_forward16(const float *qkv, const float *bias, float *out, float *lse, int B, int T,
                          int C, int NH) {
  static tc_fwd_smem sm;
  static tc_fwd_lane st[TC_NT];
  size_t n = (size_t)B * T * C;
  uint16_t *o16 = malloc(n * 2);
  emu_forward(qkv, bias, out, lse, B, T, C, NH);
  for (int bh = 0; bh < B * NH; bh++)
    for (int qt = 0; qt < (T + TC_ROWS - 1) / TC_ROWS; qt++)
      tc_forward_block(qkv, bias, o16, 1, lse, T, C, NH, qt, bh, g_f16, &sm, st);
  for (size_t i = 0; i < n; i++) {
    o16_bad += o16[i] != (uint16_t)tc_bits(out[i], g_f16);
    out[i] = tc_val(o16[i], g_f16);
  }
  free(o16);
}
static void emu_backward16(float *dqkv, float *dstat, const float *dout, const float *qkv,
                           const float *bias, const float *out, const float *lse, int B, int T,
                           int C, int NH) {
  size_t n = (size_t)B * T * C;
  uint16_t *o16 = calloc(n, 2); /* what the forward stored: out holds its values */
  ZT_CHECK(o16 != NULL);
  for (size_t i = 0; i < n; i++) o16[i] = (uint16_t)tc_bits(out[i], g_f16);
  emu_backward_as(dqkv, 0, dstat, dout, qkv, bias, o16, 1, lse, B, T, C, NH);
  /* a 16-bit run's held dqkv copy (d16): the fp32 gradient rounded, bit for bit */
  size_t n3 = 3 * n;
  uint16_t *d16 = malloc(n3 * 2);
  ZT_CHECK(d16 != NULL);
  memset(d16, 0xff, n3 * 2); /* NaN in both types: every element must be written */
  emu_backward_as(d16, 1, dstat, dout, qkv, bias, o16, 1, lse, B, T, C, NH);
  for (size_t i = 0; i < n3; i++) d16_bad += d16[i] != (uint16_t)tc_bits(dqkv[i], g_f16);
  /* dO in the operand type (a 16-bit run's dC slot; dout holds its values,
   * rounded by the case): dqkv and D bit for bit the fp32 dO's */
  uint16_t *do16 = malloc(n * 2);
  float *dq2 = malloc(n3 * 4), *ds2 = malloc((size_t)B * NH * T * 4);
  ZT_CHECK(do16 && dq2 && ds2);
  for (size_t i = 0; i < n; i++) do16[i] = (uint16_t)tc_bits(dout[i], g_f16);
  for (size_t i = 0; i < n3; i++) dq2[i] = NAN;
  g_do16 = 1;
  emu_backward_as(dq2, 0, ds2, do16, qkv, bias, o16, 1, lse, B, T, C, NH);
  g_do16 = 0;
  do16_bad += memcmp(dq2, dqkv, n3 * 4) != 0;
  do16_bad += memcmp(ds2, dstat, (size_t)B * NH * T * 4) != 0;
  free(do16), free(dq2), free(ds2);
  free(d16);
  free(o16);
}
/* fp16 operands (an fp16 run): fp16 inputs, P and dS in fp16 (relative
 * 2^-11); tolerances from the measured errors with margin (see the top) */
static const zt_attn_kernel kernel_h = {emu_forward, emu_backward,  f16_round, FP16_TOL_OUT,
                                        5e-6,        FP16_TOL_DQKV, "f16",     0};
static const zt_attn_kernel kernel_h16 = {emu_forward16, emu_backward16, f16_round, FP16_TOL_OUT16,
                                          5e-6,          FP16_TOL_DQKV,  "f16",     0};
static const zt_attn_kernel kernel16 = {emu_forward16, emu_backward16, bf16_round, 6e-3,
                                        5e-6,          1e-2,           "bf16",     0};

static void one_case(int B, int T, int NH, int hs) {
  zt_attn_case(&kernel, B, T, NH, hs, 7u + (uint64_t)T);
}

/* One MMA against its definition, fragments placed by hand from the PTX
 * ISA's tables: A[m][k] = m - k / 4, B[k][n] = k + 2n - 8 (exact in bf16). */
static void mma_case(int f16) {
  struct lane {
    uint32_t a[4], b[2];
    float d[4];
  } L[32];
  for (int l = 0; l < 32; l++) {
    int g = l / 4, t = l % 4;
    for (int r = 0; r < 4;
         r++) { /* a_{2r}, a_{2r+1}: rows g (+8 for r odd), cols 2t (+8 for r >= 2) */
      int m = g + 8 * (r & 1), k = 2 * t + 8 * (r >> 1);
      L[l].a[r] = tc_pack((float)m - (float)k / 4, (float)m - (float)(k + 1) / 4, f16);
    }
    for (int r = 0; r < 2; r++) { /* b_{2r}, b_{2r+1}: rows 2t (+8 for r = 1), col g */
      int k = 2 * t + 8 * r;
      L[l].b[r] = tc_pack((float)(k + 2 * g - 8), (float)(k + 1 + 2 * g - 8), f16);
    }
    for (int i = 0; i < 4; i++) L[l].d[i] = 1.0f;
  }
  tc_mma(L[0].d, L[0].a, L[0].b, sizeof L[0], f16);
  int bad = 0;
  for (int l = 0; l < 32; l++)
    for (int i = 0; i < 4; i++) {
      int m = l / 4 + 8 * (i / 2), n = 2 * (l % 4) + i % 2;
      double want = 1;
      for (int k = 0; k < 16; k++) want += (m - k / 4.0) * (k + 2 * n - 8);
      bad += L[l].d[i] != (float)want;
    }
  ZT_CHECK(bad == 0);
}

/* B fragments straight from the ISA's fragment table (b0,b1: rows 2t, 2t+1
 * of column g; b2,b3: rows + 8), from a tile holding B's columns as rows
 * (nk) or B's rows (kn): the reference for what ldmatrix delivers. */
static void frag_b(uint32_t b[2], const tc_tile t, int k0, int n0, int l, int kn) {
  int g = l >> 2, k = k0 + 2 * (l & 3), n = n0 + g;
  for (int r = 0; r < 2; r++) {
    int kk = k + 8 * r;
    b[r] = kn ? tc_elem(t[kk], n) | tc_elem(t[kk + 1], n) << 16
              : tc_elem(t[n], kk) | tc_elem(t[n], kk + 1) << 16;
  }
}

/* tc_ldsm (the ldmatrix distribution, from the ISA's ldmatrix section) with
 * the kernels' row addresses against frag_b (from its mma section): every
 * 16-column step and pair of 8-column groups of a random tile, both ways. */
static void ldsm_case(void) {
  static TC_ALIGN tc_tile t;
  static struct lane {
    uint32_t b4[4];
    const uint32_t *ra;
  } L[32];
  uint64_t s = 99;
  for (int r = 0; r < TC_ROWS; r++)
    for (int c = 0; c < TC_LDW; c++) t[r][c] = (uint32_t)(zt_attn_frand(&s) * 2e9f);
  int bad = 0;
  for (int kn = 0; kn < 2; kn++)
    for (int k0 = 0; k0 < 64; k0 += 16)
      for (int n0 = 0; n0 < 64; n0 += 16) {
        for (int l = 0; l < 32; l++)
          L[l].ra = kn ? &t[k0 + 8 * ((l >> 3) & 1) + (l & 7)][(n0 + 8 * (l >> 4)) / 2]
                       : &t[n0 + 8 * (l >> 4) + (l & 7)][(k0 + 8 * ((l >> 3) & 1)) / 2];
        tc_ldsm(L[0].b4, &L[0].ra, kn, sizeof L[0]);
        for (int l = 0; l < 32; l++)
          for (int h = 0; h < 2; h++) {
            uint32_t want[2];
            frag_b(want, t, k0, n0 + 8 * h, l, kn);
            bad += L[l].b4[2 * h] != want[0] || L[l].b4[2 * h + 1] != want[1];
          }
      }
  if (bad) printf("ldmatrix: %d fragments differ from the mma table's\n", bad);
  ZT_CHECK(bad == 0);
}

int main(void) {
  mma_case(0);
  mma_case(1);
  ldsm_case();
  static const int Ts[] = {1, 15, 16, 63, 64, 65, 100, 200};
  for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++) one_case(2, Ts[i], 3, TC_HS);
  one_case(2, 64, 2, 32);
  one_case(2, 33, 2, 32);
  one_case(1, 100, 3, 48);
  one_case(1, 70, 2, 33); /* an odd head: the last 16-bit pair of a row half padded */
  static const int T16[] = {1, 65, 200};
  for (size_t i = 0; i < sizeof T16 / sizeof T16[0]; i++)
    zt_attn_case(&kernel16, 2, T16[i], 3, TC_HS, 7u + (uint64_t)T16[i]);
  zt_attn_case(&kernel16, 1, 100, 3, 48, 107u);
  printf("bf16 out: %ld elements differ from the fp32 forward's rounding; bf16 dqkv: %ld from "
         "the fp32 backward's; bf16 dO: %ld cases differ from the fp32 dO's\n",
         o16_bad, d16_bad, do16_bad);
  ZT_CHECK(o16_bad == 0 && d16_bad == 0 && do16_bad == 0);
  /* the same kernels on fp16 operands (an fp16 run) */
  g_f16 = 1;
  o16_bad = 0, d16_bad = 0, do16_bad = 0;
  for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++)
    zt_attn_case(&kernel_h, 2, Ts[i], 3, TC_HS, 7u + (uint64_t)Ts[i]);
  zt_attn_case(&kernel_h, 2, 33, 2, 32, 40u);
  zt_attn_case(&kernel_h, 1, 100, 3, 48, 107u);
  for (size_t i = 0; i < sizeof T16 / sizeof T16[0]; i++)
    zt_attn_case(&kernel_h16, 2, T16[i], 3, TC_HS, 7u + (uint64_t)T16[i]);
  printf("fp16 out: %ld elements differ from the fp32 forward's rounding; fp16 dqkv: %ld from "
         "the fp32 backward's; fp16 dO: %ld cases differ from the fp32 dO's\n",
         o16_bad, d16_bad, do16_bad);
  ZT_CHECK(o16_bad == 0 && d16_bad == 0 && do16_bad == 0);
  ZT_DONE();
}
