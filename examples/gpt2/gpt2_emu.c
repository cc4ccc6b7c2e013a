/*
 * gpt2_emu.c — train_gpt2 --emulate_cuda (gpt2_emu.h): the wrapping ops
 * table, its rounded GEMM operands and its tensor-core attention through
 * the kernels' C emulation.
 */
#include "gpt2_emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2_act16.h"
#include "gpt2_flash_tc.h"

static struct {
  const gpt2_ops_f32 *in;
  zrt_dtype dt;
  float *buf[2]; /* the GEMM's rounded operands */
  size_t cap[2];
  float *dstat; /* the attention backward's D rows */
  size_t dcap;
  tc_fwd_smem *fsm;
  tc_fwd_lane *fst;
  tc_dq_smem *qsm;
  tc_dq_lane *qst;
  tc_dkv_smem *ksm;
  tc_dkv_lane *kst;
} g_emu;

static float emu_round(float x) {
  if (g_emu.dt == ZRT_BF16) return gpt2_bf16_to_float(gpt2_float_to_bf16(x));
  return gpt2_half_to_float(gpt2_float_to_half(x));
}

/* buf[i] grown to n floats; NULL when the host refuses */
static float *emu_buf(float **buf, size_t *cap, size_t n) {
  if (n > *cap) {
    float *p = realloc(*buf, n * sizeof(float));
    if (!p) return NULL;
    *buf = p;
    *cap = n;
  }
  return *buf;
}

/* rows x cols of a row-major operand (row stride ld) rounded into a copy
 * with the same stride */
static const float *emu_operand(int i, const float *src, int64_t rows, int64_t cols, int64_t ld) {
  if (rows <= 0 || cols <= 0) return src;
  size_t n = (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
  float *d = emu_buf(&g_emu.buf[i], &g_emu.cap[i], n);
  if (!d) return NULL;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) d[r * ld + c] = emu_round(src[r * ld + c]);
  return d;
}

static zrt_status e_gemm(void *ctx, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                         float *c, int64_t ldc) {
  const float *a16 = emu_operand(0, a, ta ? k : m, ta ? m : k, lda);
  const float *b16 = emu_operand(1, b, tb ? n : k, tb ? k : n, ldb);
  if (!a16 || !b16) {
    fprintf(stderr,
            "train_gpt2: --emulate_cuda: no host memory for a %lldx%lldx%lld GEMM's "
            "rounded operands\n",
            (long long)m, (long long)n, (long long)k);
    return ZRT_ERR_OOM;
  }
  zrt_status st = g_emu.in->gemm(ctx, ta, tb, m, n, k, alpha, a16, lda, b16, ldb, beta, c, ldc);
  if (st == ZRT_OK && gpt2_a16_is(c)) /* a 16-bit slot (fch, logits, dC, d4C): 16 bits */
    for (int64_t r = 0; r < m; r++)
      for (int64_t j = 0; j < n; j++) c[r * ldc + j] = emu_round(c[r * ldc + j]);
  return st;
}

/* shared memory: ldmatrix's rows are 16-byte aligned (TC_ALIGN) */
static void *emu_smem(size_t bytes) { return aligned_alloc(64, (bytes + 63) / 64 * 64); }

static void emu_tc_free(void) {
  free(g_emu.fsm), free(g_emu.fst), free(g_emu.qsm), free(g_emu.qst), free(g_emu.ksm);
  free(g_emu.kst);
  g_emu.fsm = NULL, g_emu.fst = NULL, g_emu.qsm = NULL, g_emu.qst = NULL, g_emu.ksm = NULL;
  g_emu.kst = NULL;
}

/* the kernels' lanes and shared memory, made once (all or none) */
static int emu_tc_state(void) {
  if (g_emu.fsm) return 0;
  g_emu.fsm = emu_smem(sizeof *g_emu.fsm);
  g_emu.fst = calloc(TC_NT, sizeof *g_emu.fst);
  g_emu.qsm = emu_smem(sizeof *g_emu.qsm);
  g_emu.qst = calloc(TC_NT, sizeof *g_emu.qst);
  g_emu.ksm = emu_smem(sizeof *g_emu.ksm);
  g_emu.kst = calloc(TC_NT, sizeof *g_emu.kst);
  if (g_emu.fsm && g_emu.fst && g_emu.qsm && g_emu.qst && g_emu.ksm && g_emu.kst) return 0;
  emu_tc_free();
  return -1;
}

static zrt_status emu_tc_ok(int B, int T, int C, int NH) {
  (void)T;
  if (!(NH > 0 && C % NH == 0 && C / NH <= TC_HS)) {
    fprintf(stderr,
            "train_gpt2: --emulate_cuda: the tensor-core attention takes heads of at most %d "
            "(n_embd %d, n_head %d, micro-batch %d)\n",
            TC_HS, C, NH, B);
    return ZRT_ERR_UNSUPPORTED;
  }
  if (emu_tc_state() == 0) return ZRT_OK;
  fprintf(stderr, "train_gpt2: --emulate_cuda: no host memory for the attention's emulation\n");
  return ZRT_ERR_OOM;
}

static zrt_status e_attention_forward(void *ctx, float *out, float *att, const float *qkv,
                                      const float *bias, int B, int T, int C, int NH) {
  (void)ctx;
  zrt_status st = emu_tc_ok(B, T, C, NH);
  if (st != ZRT_OK) return st;
  int f16 = g_emu.dt == ZRT_F16;
  for (int bh = 0; bh < B * NH; bh++)
    for (int qt = 0; qt < (T + TC_ROWS - 1) / TC_ROWS; qt++)
      tc_forward_block(qkv, bias, out, 0, att /* lse rows */, T, C, NH, qt, bh, f16, g_emu.fsm,
                       g_emu.fst);
  if (gpt2_a16_is(out)) /* a 16-bit run keeps it in 16 bits: D reads those */
    for (size_t i = 0; i < (size_t)B * T * C; i++) out[i] = emu_round(out[i]);
  return ZRT_OK;
}

static zrt_status e_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                       const float *bias, const float *out, const float *att, int B,
                                       int T, int C, int NH) {
  (void)ctx;
  zrt_status st = emu_tc_ok(B, T, C, NH);
  if (st != ZRT_OK) return st;
  float *dstat = emu_buf(&g_emu.dstat, &g_emu.dcap, (size_t)B * NH * T);
  if (!dstat) return ZRT_ERR_OOM;
  int nt = (T + TC_ROWS - 1) / TC_ROWS, f16 = g_emu.dt == ZRT_F16;
  for (int bh = 0; bh < B * NH; bh++)
    for (int t = 0; t < nt; t++)
      tc_dq_block(dqkv, 0, dstat, dout, 0, qkv, bias, out, 0, att, T, C, NH, t, bh, f16, g_emu.qsm,
                  g_emu.qst);
  for (int bh = 0; bh < B * NH; bh++)
    for (int t = 0; t < nt; t++)
      tc_dkv_block(dqkv, 0, dout, 0, qkv, bias, att, dstat, T, C, NH, t, bh, f16, g_emu.ksm,
                   g_emu.kst);
  /* a 16-bit run keeps dqkv only in 16 bits (the d4C slot, or gpt2_cuda.cu's
   * held copy): the qkv GEMMs and the qkv bias's gradient read those values */
  for (size_t i = 0; i < (size_t)B * T * 3 * C; i++) dqkv[i] = emu_round(dqkv[i]);
  return ZRT_OK;
}

void gpt2_emu_cuda_ops(const gpt2_ops_f32 *cpu, zrt_dtype dt, gpt2_ops_f32 *out) {
  gpt2_emu_cuda_done();
  g_emu.in = cpu;
  g_emu.dt = dt;
  *out = *cpu;
  if (dt == ZRT_F32) return;
  out->gemm = e_gemm;
  out->attention_forward = e_attention_forward;
  out->attention_backward = e_attention_backward;
}

void gpt2_emu_cuda_done(void) {
  free(g_emu.buf[0]), free(g_emu.buf[1]), free(g_emu.dstat);
  emu_tc_free();
  memset(&g_emu, 0, sizeof g_emu);
}
