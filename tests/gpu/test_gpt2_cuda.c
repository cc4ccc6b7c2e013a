/*
 * test_gpt2_cuda.c — the GPT example's CUDA ops that the end-to-end run
 * (test_engine_cuda.sh) only sees through the loss:
 *   - GEMMs in a bf16 and an fp16 run (gpt2_cuda_gemm_setup): a 16-bit
 *     weight matrix registered with gpt2_cuda_weight16 and used as is, fp32
 *     activation operands rounded to the dtype into the scratch, every
 *     transpose pair and the GPT shapes' operand roles (weight as B; both
 *     operands activations, beta 1), against double loops on the same
 *     rounded inputs (round-to-nearest-even, as the kernel's conversion):
 *     only the fp32 accumulation order differs, within 1e-4 absolute
 *     (entries are sums of <= 256 products of magnitude <= 1), and one in
 *     a scratch of exactly gpt2_cuda_scratch_bytes (the tiny preset's
 *     projection dX GEMM, its one rounded operand, at an odd B*T);
 *   - the fused attention forward and backward against plain causal
 *     attention in double (zt_attn_ref.h), both kernels: the fp32 cores'
 *     (gpt2_flash_attn.h, an fp32 run) and the tensor cores' (gpt2_flash_tc.h,
 *     a bf16 run on bf16 inputs and an fp16 run on fp16 inputs: the MMA's
 *     two operand types): GPT-2 124M's head shape (12 heads of 64)
 *     at T = 1024, and T = 100 (a ragged last tile), batch 2, the tiny
 *     preset's (2 heads of 32, T = 64: tiles zero-padded past the head), T = 7
 *     (under a warp's 16 rows) and T = 130 with heads of 48, each without
 *     and with the qkv GEMM's bias (the kernels add it as they load); out
 *     within 1e-4 absolute, dqkv (written over NaN) within 1e-3
 *     (fp32 cores), 4e-3 and 1e-2 (tensor cores, bf16: P and dS in bf16),
 *     5e-4 and 1.5e-3 (fp16), the tolerances of their emulations' tests.
 * With ZRT_ATTN_DUMP=DIR the T = 1024 cases also write their inputs and
 * results (raw float32: qkv, dout, dqkv0, out, dqkv) and shape.json to DIR
 * (fp32 cores) and DIR/bf16 (tensor cores) for
 * scripts/check_attention_torch.py (PyTorch's scaled_dot_product_attention).
 *   - every other op of the CUDA table (encoder, LayerNorm, bias, GELU,
 *     residual, cross-entropy; forward and backward) against the CPU ops
 *     table on the same inputs, the backward ones ADDING onto non-zero
 *     outputs: N = B*T = 200 rows (ragged against every block), C = 768,
 *     the MLP's 3072 for the biases, a 1000-token embedding, and the
 *     cross-entropy over GPT-2's 50257 logits on 37 rows, with and
 *     without its gradient. Tolerances absolute, from the magnitudes:
 *     1e-5 elementwise, 1e-4 for sums over the 200 rows and the losses,
 *     4e-6 for the cross-entropy's gradient (entries <= 1/37; an H200
 *     measured 1.24e-6: CUDA's expf against the CPU's); the
 *     encoder forward over the engine's registered 16-bit wte and wpe (a
 *     16-bit run's embedding, no fp32 staging) bit for bit the CPU op on
 *     the widened values (bf16, fp16); a dW GEMM adding into a
 *     registered 16-bit gradient (beta 1, rounded once: two 16-bit ulps
 *     of the largest |C| plus 1e-4), and one running past it refused;
 *     over rows
 *     50304 apart (the layout's padded logits, NaN in the padding) its
 *     losses and gradient bit for bit the contiguous rows', the padding
 *     untouched.
 *   - the split column reductions at N = 8225 (gpt2_rows.h's plans: the
 *     LayerNorm backward in chunks of 64 rows, two passes a block; a
 *     bias's gradient in 11 chunks), on a scratch of exactly
 *     gpt2_cuda_scratch_bytes: dinp 1e-5, the column sums 4e-7 per row;
 *     at N = 200 above the LayerNorm's plan splits into 7 chunks and the
 *     MLP bias's into 2;
 *   - a bf16 run's operand reuse: a GEMM taking the previous GEMM's fp32
 *     operand reads its rounded copy; after a GEMM whose C overwrote the
 *     source, or a non-GEMM op that did, it is rounded anew (1e-4);
 *   - a 16-bit run's cross-entropy backward (bf16 and fp16): its gradient
 *     as a copy in the run's dtype that the head's GEMM on the logits
 *     pointer reads (the logits stay), against the CUDA op's own fp32
 *     gradient rounded to that dtype, within 1e-5 (entries <= 1/37).
 *   - a 16-bit run's GELU backward with the fc bias's gradient
 *     (gelu16_case): its gradient only as the copy the MLP's dX and dW
 *     GEMMs read, against the op's own fp32 gradient rounded (1e-5), the
 *     bias gradient bitwise the fp32 form's, the fp32 range untouched.
 *   - a 16-bit run's 16-bit activations (gpt2_act16.h), bf16 and fp16:
 *     one training micro-step of a 2-layer model (heads of 64, T = 65,
 *     B = 2: the column sums split) through the real passes (registered:
 *     in a scratch of gpt2_cuda_scratch_bytes plus one rounded fp32
 *     weight, since this test's weights are fp32), the CUDA ops under the audit, with
 *     and without the registry (and the half-size slots train_gpt2 gives
 *     it, GPT2_ACTS_HALF16): layer 0's ln1 and atty hold exactly the
 *     fp32 run's values rounded to the dtype (bit for bit: the producers
 *     round as the GEMMs' operand conversion), its ln2, fch, fch_gelu
 *     (after the attention projection's 16-bit C in dC and the fc GEMM's
 *     in fch, which the fp32 run keeps) and lnf,
 *     and every gradient, within 5% (bf16) or 1% (fp16) of the tensor's
 *     largest entry, the loss within 1e-4 relative (the rounding of dC,
 *     fch, the logits and d4C, 16-bit slots too, moves them: the emulation
 *     measures 1.04% / 0.10% and 5.7e-6 / 2.4e-6); no audit violation.
 * The CPU emulations of the same attention, cross-entropy and column-sum
 * code are checked in test_gpt2_flash_emu, test_gpt2_flash_tc_emu and
 * test_gpt2_rows_emu (unit). Skips (77) without a GPU,
 * fails under ZRT_REQUIRE_GPU=1.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "zrt.h"
#include "zt_gpu.h"

#ifdef GPT2_HAVE_CUDA
#include "gpt2_act16.h"
#include "gpt2_cuda.h"
#include "zt_attn_dump.h"
#include "zt_attn_ref.h"

static zrt_engine *eng;
static void *g_scratch; /* the attention's: gpt2_cuda_gemm_setup per case */
static size_t g_scratch_bytes;

static float frand(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((*s >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static uint16_t bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* RNE; inputs are finite */
}
static float round_to(float x, zrt_dtype dt) {
  if (dt == ZRT_F32) return x;
  if (dt == ZRT_F16) return (float)(_Float16)x;
  uint32_t u = (uint32_t)bf16_bits(x) << 16;
  float y;
  memcpy(&y, &u, 4);
  return y;
}
static float from16(uint16_t h, zrt_dtype dt) {
  if (dt == ZRT_F16) {
    _Float16 x;
    memcpy(&x, &h, 2);
    return (float)x;
  }
  uint32_t u = (uint32_t)h << 16;
  float y;
  memcpy(&y, &u, 4);
  return y;
}
static void to16(void *dst, const float *src, size_t n, zrt_dtype dt) {
  uint16_t *d = dst;
  for (size_t i = 0; i < n; i++) {
    if (dt == ZRT_F16) {
      _Float16 h = (_Float16)src[i];
      memcpy(&d[i], &h, 2);
    } else {
      d[i] = bf16_bits(src[i]);
    }
  }
}

static void *dev(size_t bytes, const void *host) {
  void *p = NULL;
  ZT_OK(zrt_engine_alloc(eng, bytes, ZRT_MEM_ACTIVATIONS, &p));
  if (host) ZT_OK(zrt_engine_memcpy(eng, p, host, bytes, ZRT_COPY_H2D));
  return p;
}

/* want[M x N] = op(A) op(B) in double on values rounded to dt (row-major,
 * A stored M x K, or K x M with ta; likewise B). */
static void ref_gemm(double *want, const float *a, int ta, int64_t lda, const float *b, int tb,
                     int64_t ldb, int64_t M, int64_t N, int64_t K, zrt_dtype dt) {
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double acc = 0;
      for (int64_t p = 0; p < K; p++) {
        float av = ta ? a[p * lda + i] : a[i * lda + p], bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        acc += (double)round_to(av, dt) * (double)round_to(bv, dt);
      }
      want[i * N + j] = acc;
    }
}

/* C = alpha op(A) op(B) + beta C through the ops; wb: B is a registered
 * 16-bit weight (else both are fp32 activations). */
static void gemm_case(zrt_dtype dt, int ta, int tb, int64_t m, int64_t n, int64_t k, int wb,
                      float beta) {
  int64_t lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
  size_t na = (size_t)(m * k), nb = (size_t)(k * n), nc = (size_t)(m * n);
  float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4), *got = malloc(nc * 4);
  double *want = malloc(nc * 8);
  uint16_t *b16 = malloc(nb * 2);
  uint64_t s = 7u + (uint64_t)(m * 131 + n * 7 + k + ta * 2 + tb);
  for (size_t i = 0; i < na; i++) a[i] = frand(&s);
  for (size_t i = 0; i < nb; i++) b[i] = frand(&s);
  for (size_t i = 0; i < nc; i++) c[i] = frand(&s);
  ref_gemm(want, a, ta, lda, b, tb, ldb, m, n, k, dt);
  for (size_t i = 0; i < nc; i++) want[i] = 0.75 * want[i] + (double)beta * c[i];
  to16(b16, b, nb, dt);
  float *da = dev(na * 4, a), *dc = dev(nc * 4, c);
  void *db = wb ? dev(nb * 2, b16) : dev(nb * 4, b);
  gpt2_cuda_weight16_clear();
  if (wb) ZT_CHECK(gpt2_cuda_weight16(db, (int64_t)nb) == 0);
  ZT_OK(gpt2_cuda_ops_f32.gemm(eng, ta, tb, m, n, k, 0.75f, da, lda, db, ldb, beta, dc, ldc));
  ZT_OK(gpt2_cuda_ops_f32.check());
  ZT_OK(zrt_engine_memcpy(eng, got, dc, nc * 4, ZRT_COPY_D2H));
  char what[128];
  snprintf(what, sizeof what, "%s gemm %c%c %lldx%lldx%lld %s beta=%g", zrt_dtype_name(dt),
           ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)m, (long long)n, (long long)k,
           wb ? "16-bit weight B" : "fp32 A and B", beta);
  ZT_CLOSE_ARRAY(what, got, want, nc, 1e-4);
  zrt_engine_free(eng, da), zrt_engine_free(eng, db), zrt_engine_free(eng, dc);
  free(a), free(b), free(c), free(got), free(want), free(b16);
}

/* A dW GEMM adding into the engine's 16-bit gradient as it is (registered
 * with gpt2_cuda_grad16, as train_gpt2's stage_grads does on CUDA): C =
 * 0.75 x^T dy + C16, from fp32 activations rounded by the ops, against
 * double on the rounded operands plus the widened C16; tolerance two
 * 16-bit ulps of the largest |C| (one rounding of C, fp32 accumulation)
 * plus 1e-4. A C running past the registered gradient: an internal
 * error, nothing written. */
static void grad16_case(zrt_dtype dt, void *scratch, size_t sb) {
  enum { M = 96, N = 192, K = 130 };
  size_t na = (size_t)K * M, nb = (size_t)K * N, nc = (size_t)M * N;
  float *a = malloc(na * 4), *b = malloc(nb * 4), *c = malloc(nc * 4), *got = malloc(nc * 4);
  double *want = malloc(nc * 8);
  uint16_t *c16 = malloc(nc * 2), *back = malloc(nc * 2);
  uint64_t s = 5150;
  for (size_t i = 0; i < na; i++) a[i] = frand(&s);
  for (size_t i = 0; i < nb; i++) b[i] = frand(&s);
  for (size_t i = 0; i < nc; i++) c[i] = 4.0f * frand(&s);
  to16(c16, c, nc, dt);
  ref_gemm(want, a, 1, M, b, 0, N, M, N, K, dt);
  double mx = 0;
  for (size_t i = 0; i < nc; i++) {
    want[i] = 0.75 * want[i] + (double)from16(c16[i], dt);
    mx = fmax(mx, fabs(want[i]));
  }
  float *da = dev(na * 4, a), *db = dev(nb * 4, b);
  void *dc = dev(nc * 2, c16);
  gpt2_cuda_gemm_setup(dt, scratch, sb);
  gpt2_cuda_grad16_clear();
  ZT_CHECK(gpt2_cuda_grad16(dc, (int64_t)nc) == 0);
  ZT_OK(gpt2_cuda_ops_f32.gemm(eng, 1, 0, M, N, K, 0.75f, da, M, db, N, 1.0f, (float *)dc, N));
  ZT_OK(gpt2_cuda_ops_f32.check());
  ZT_OK(zrt_engine_memcpy(eng, back, dc, nc * 2, ZRT_COPY_D2H));
  for (size_t i = 0; i < nc; i++) got[i] = from16(back[i], dt);
  const double ulp = dt == ZRT_F16 ? 1.0 / 1024 : 1.0 / 128;
  char what[96];
  snprintf(what, sizeof what, "%s dW GEMM into a registered 16-bit gradient (beta 1)",
           zrt_dtype_name(dt));
  ZT_CLOSE_ARRAY(what, got, want, nc, 2 * ulp * mx + 1e-4);
  /* registered one element short: the C runs past it */
  gpt2_cuda_grad16_clear();
  ZT_CHECK(gpt2_cuda_grad16(dc, (int64_t)nc - 1) == 0);
  zrt_status st =
      gpt2_cuda_ops_f32.gemm(eng, 1, 0, M, N, K, 0.75f, da, M, db, N, 1.0f, (float *)dc, N);
  ZT_CHECK(st == ZRT_ERR_INTERNAL);
  gpt2_cuda_grad16_clear();
  zrt_engine_free(eng, da), zrt_engine_free(eng, db), zrt_engine_free(eng, dc);
  free(a), free(b), free(c), free(got), free(want), free(c16), free(back);
}

/* dt: the run's GEMM dtype, which picks the kernels (ZRT_F32: the fp32
 * cores', gpt2_flash_attn.h; ZRT_BF16 / ZRT_F16: the tensor cores',
 * gpt2_flash_tc.h, fed values of that type so that the reference sees what
 * the MMAs see) */
static void attention_case(zrt_dtype dt, int B, int T, int NH, int HS, int with_bias) {
  int C = NH * HS;
  size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
  float *qkv = malloc(nqkv * 4), *dout = malloc(nout * 4), *out = malloc(nout * 4);
  float *dqkv = malloc(nqkv * 4);
  double *rout = malloc(nout * 8), *rdqkv = malloc(nqkv * 8);
  uint64_t s = 99u + (uint64_t)T + 7u * (uint64_t)with_bias;
  float *bias = malloc((size_t)3 * C * 4), *qe = malloc(nqkv * 4);
  for (size_t i = 0; i < nqkv; i++) qkv[i] = round_to(frand(&s), dt);
  for (size_t i = 0; i < nout; i++) dout[i] = round_to(frand(&s), dt);
  for (int i = 0; i < 3 * C; i++) bias[i] = 0.5f * frand(&s);
  for (size_t i = 0; i < nqkv; i++) { /* q, k, v as the kernels read them */
    qe[i] = round_to(with_bias ? qkv[i] + bias[i % (size_t)(3 * C)] : qkv[i], dt);
    rdqkv[i] = 0, dqkv[i] = NAN; /* the backward writes every element */
  }
  zt_attn_ref(qe, dout, rout, NULL, rdqkv, B, T, C, NH);
  gpt2_cuda_gemm_setup(dt, g_scratch, g_scratch_bytes);
  const int C3 = 3 * C, tc = dt != ZRT_F32;
  float *dq = dev(nqkv * 4, qkv), *ddo = dev(nout * 4, dout), *dout_ = dev(nout * 4, NULL);
  float *datt = dev(natt * 4, NULL), *ddqkv = dev(nqkv * 4, dqkv);
  float *dbias = with_bias ? dev((size_t)C3 * 4, bias) : NULL;
  /* a 16-bit run keeps dqkv only as the 16-bit copy the qkv GEMMs and the
   * bias gradient read (gpt2_cuda.cu's held copy): read it as they do,
   * through a GEMM with a 16-bit identity weight (exact) and bias_backward */
  void *deye = NULL;
  float *dext = NULL, *dcol = NULL;
  if (tc) {
    float *eye = calloc((size_t)C3 * C3, 4);
    uint16_t *eye16 = malloc((size_t)C3 * C3 * 2);
    for (int i = 0; i < C3; i++) eye[(size_t)i * C3 + i] = 1.0f;
    to16(eye16, eye, (size_t)C3 * C3, dt);
    deye = dev((size_t)C3 * C3 * 2, eye16);
    ZT_CHECK(gpt2_cuda_weight16(deye, (int64_t)C3 * C3) == 0);
    dext = dev(nqkv * 4, NULL), dcol = dev((size_t)C3 * 4, NULL);
    gpt2_cuda_ops_f32.zero(dcol, (size_t)C3);
    free(eye), free(eye16);
  }
  ZT_OK(gpt2_cuda_ops_f32.attention_forward(eng, dout_, datt, dq, dbias, B, T, C, NH));
  ZT_OK(gpt2_cuda_ops_f32.attention_backward(eng, ddqkv, ddo, dq, dbias, dout_, datt, B, T, C, NH));
  if (tc) {
    ZT_OK(gpt2_cuda_ops_f32.gemm(eng, 0, 0, B * T, C3, C3, 1, ddqkv, C3, (const float *)deye, C3, 0,
                                 dext, C3));
    gpt2_cuda_ops_f32.bias_backward(dcol, ddqkv, B * T, C3);
  }
  ZT_OK(gpt2_cuda_ops_f32.check());
  float *dqkv0 = calloc(nqkv, 4); /* for the dump: the backward writes, from zero */
  ZT_OK(zrt_engine_memcpy(eng, out, dout_, nout * 4, ZRT_COPY_D2H));
  ZT_OK(zrt_engine_memcpy(eng, dqkv, tc ? dext : ddqkv, nqkv * 4, ZRT_COPY_D2H));
  if (tc) { /* the bias gradient: column sums of those same 16-bit values */
    float *col = malloc((size_t)C3 * 4);
    double *want = calloc((size_t)C3, 8), big = 0;
    ZT_OK(zrt_engine_memcpy(eng, col, dcol, (size_t)C3 * 4, ZRT_COPY_D2H));
    for (size_t i = 0; i < nqkv; i++)
      want[i % (size_t)C3] += dqkv[i], big = fmax(big, fabs(dqkv[i]));
    float *wf = malloc((size_t)C3 * 4);
    for (int c = 0; c < C3; c++) wf[c] = (float)want[c];
    char w2[112];
    snprintf(w2, sizeof w2, "%s attention B=%d T=%d: the qkv bias gradient from the held copy",
             zrt_dtype_name(dt), B, T);
    ZT_CLOSE_ARRAY(w2, col, wf, (size_t)C3, 4e-7 * B * T * big + 1e-6);
    free(col), free(want), free(wf);
    zrt_engine_free(eng, deye), zrt_engine_free(eng, dext), zrt_engine_free(eng, dcol);
  }
  const char *dump = getenv("ZRT_ATTN_DUMP");
  /* the fp32 case in DIR, the bf16 case in DIR/bf16 (fp16: not dumped) */
  if (dump && *dump && T == 1024 && HS == 64 && dt != ZRT_F16 && !with_bias) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s%s", dump, dt == ZRT_BF16 ? "/bf16" : "");
    ZT_CHECK(dt != ZRT_BF16 || mkdir(dir, 0755) == 0 || errno == EEXIST);
    zt_attn_dump(dir, qe, dout, dqkv0, out, dqkv, B, T, NH, HS, dt == ZRT_BF16 ? "bf16" : "f32");
    printf("attention tensors written to %s\n", dir);
  }
  free(dqkv0);
  /* tolerances: the emulations' (test_gpt2_flash_emu, test_gpt2_flash_tc_emu) */
  const char *kind = dt == ZRT_BF16 ? "tensor-core bf16" : tc ? "tensor-core fp16" : "fused fp32";
  char what[112];
  const char *bw = with_bias ? " bias" : "";
  snprintf(what, sizeof what, "%s attention B=%d T=%d NH=%d HS=%d%s out", kind, B, T, NH, HS, bw);
  ZT_CLOSE_ARRAY(what, out, rout, nout, dt == ZRT_BF16 ? 4e-3 : tc ? 5e-4 : 1e-4);
  snprintf(what, sizeof what, "%s attention B=%d T=%d NH=%d HS=%d%s dqkv", kind, B, T, NH, HS, bw);
  /* a 16-bit run's held copy adds its rounding: half a unit in the last
   * place, at most 2^-8 (bf16) / 2^-11 (fp16) of the largest entry */
  double rmax = 0;
  for (size_t i = 0; i < nqkv; i++) rmax = fmax(rmax, fabs(rdqkv[i]));
  const double held = dt == ZRT_BF16 ? rmax / 256 : tc ? rmax / 2048 : 0;
  ZT_CLOSE_ARRAY(what, dqkv, rdqkv, nqkv, (dt == ZRT_BF16 ? 1e-2 : tc ? 1.5e-3 : 1e-3) + held);
  zrt_engine_free(eng, dq), zrt_engine_free(eng, ddo), zrt_engine_free(eng, dout_);
  zrt_engine_free(eng, datt), zrt_engine_free(eng, ddqkv);
  if (dbias) zrt_engine_free(eng, dbias);
  free(qkv), free(dout), free(out), free(dqkv), free(rout), free(rdqkv), free(bias), free(qe);
}

static void fill(float *x, size_t n, float scale, uint64_t *s) {
  for (size_t i = 0; i < n; i++) x[i] = scale * frand(s);
}

/* One op's output on the GPU (device d, n floats) against the CPU's (want). */
static void check_op(const char *what, const void *d, const float *want, size_t n, double tol) {
  float *got = malloc(n * sizeof *got);
  ZT_OK(gpt2_cuda_ops_f32.check());
  ZT_OK(zrt_engine_memcpy(eng, got, d, n * sizeof *got, ZRT_COPY_D2H));
  ZT_CLOSE_ARRAY(what, got, want, n, tol);
  free(got);
}

/* Operand reuse in a bf16 run (cu_gemm): a GEMM that takes the previous
 * GEMM's fp32 operand again reads the copy rounded for it (dX then dW of a
 * linear's backward); one whose C overwrote that source rounds it anew; a
 * non-GEMM op in between forgets the copies. Each result against double on
 * rounded values (the overwritten operand as the device holds it). */
static void reuse_case(void *scratch, size_t sb) {
  enum { M = 48, K = 64, N = 40, MAX = M * K };
  uint64_t s = 4711;
  float *x = malloc(MAX * 4), *b1 = malloc(K * N * 4), *b2 = malloc(M * N * 4);
  float *dwm = malloc(K * K * 4), *xn = malloc(MAX * 4), *want = malloc(MAX * 4);
  double *ref = malloc(MAX * 8);
  for (int i = 0; i < M * K; i++) x[i] = frand(&s);
  for (int i = 0; i < K * N; i++) b1[i] = frand(&s);
  for (int i = 0; i < M * N; i++) b2[i] = frand(&s);
  for (int i = 0; i < K * K; i++) dwm[i] = frand(&s);
  float *dx = dev(MAX * 4, x), *d1 = dev(K * N * 4, b1), *d2 = dev(M * N * 4, b2);
  float *d3 = dev(K * K * 4, dwm), *c1 = dev(M * N * 4, NULL), *c2 = dev(K * N * 4, NULL);
  float *c4 = dev(M * N * 4, NULL), *c6 = dev(K * N * 4, NULL);
  const gpt2_ops_f32 *G = &gpt2_cuda_ops_f32;
  gpt2_cuda_gemm_setup(ZRT_BF16, scratch, sb);
  ZT_OK(G->gemm(eng, 0, 0, M, N, K, 1, dx, K, d1, N, 0, c1, N)); /* x, b1 rounded */
  ZT_OK(G->gemm(eng, 1, 0, K, N, M, 1, dx, K, d2, N, 0, c2, N)); /* x's copy reused */
  ZT_OK(G->gemm(eng, 0, 0, M, K, K, 1, dx, K, d3, K, 0, dx, K)); /* reads x's copy, C over x */
  ZT_OK(G->gemm(eng, 0, 0, M, N, K, 1, dx, K, d1, N, 0, c4, N)); /* the new x rounded */
  G->residual_forward(dx, dx, dx, NULL, MAX / K, K);             /* x doubled, off the GEMMs */
  ZT_OK(G->gemm(eng, 1, 0, K, N, M, 1, dx, K, d2, N, 0, c6, N)); /* the doubled x rounded */
  ZT_OK(G->check());
  ZT_OK(zrt_engine_memcpy(eng, xn, dx, MAX * 4, ZRT_COPY_D2H));
  for (int i = 0; i < MAX; i++) xn[i] *= 0.5f; /* exact: the x the third GEMM wrote */
  static const char *what[] = {
      "bf16 reuse: x b1 (both rounded)", "bf16 reuse: x^T b2 (x's copy reused)",
      "bf16 reuse: x = x w (x's copy read, C over its source)",
      "bf16 reuse: new x b1 (rounded anew)", "bf16 reuse: (2 x)^T b2 after a non-GEMM op wrote x"};
  for (int c = 0; c < 5; c++) {
    int64_t n = c == 1 || c == 4 ? K * N : c == 2 ? M * K : M * N;
    if (c == 0) ref_gemm(ref, x, 0, K, b1, 0, N, M, N, K, ZRT_BF16);
    if (c == 1) ref_gemm(ref, x, 1, K, b2, 0, N, K, N, M, ZRT_BF16);
    if (c == 2) ref_gemm(ref, x, 0, K, dwm, 0, K, M, K, K, ZRT_BF16);
    if (c == 3) ref_gemm(ref, xn, 0, K, b1, 0, N, M, N, K, ZRT_BF16);
    if (c == 4) {
      for (int i = 0; i < MAX; i++) xn[i] *= 2.0f;
      ref_gemm(ref, xn, 1, K, b2, 0, N, K, N, M, ZRT_BF16);
    }
    for (int64_t i = 0; i < n; i++) want[i] = (float)ref[i];
    if (c == 2) { /* the device's x, read back above */
      ZT_CLOSE_ARRAY(what[c], xn, want, (size_t)n, 1e-4);
      continue;
    }
    check_op(what[c], c == 0 ? c1 : c == 1 ? c2 : c == 3 ? c4 : c6, want, (size_t)n, 1e-4);
  }
  gpt2_cuda_gemm_setup(ZRT_F32, scratch, sb);
  void *bufs[] = {dx, d1, d2, d3, c1, c2, c4, c6};
  for (int i = 0; i < 8; i++) zrt_engine_free(eng, bufs[i]);
  free(x), free(b1), free(b2), free(dwm), free(xn), free(want), free(ref);
}

/* A 16-bit run's cross-entropy backward (dt: bf16 or fp16): the gradient
 * goes to the scratch as a copy in dt and the logits stay; the head's GEMM on the logits pointer
 * then reads the copy (no rounding pass), the other operand (fp32, not a
 * registered weight) rounded after the held copy. Against the CPU op's
 * gradient rounded to dt times the rounded operand, in double; the losses
 * as the CPU's. */
static void ce16_case(zrt_dtype dt, void *scratch, size_t sb) {
  enum { N = 37, V = 1000, C = 64 };
  uint64_t s = 777;
  float *lg = malloc((size_t)N * V * 4), *g = malloc((size_t)N * V * 4), *w = malloc(V * C * 4);
  float *loss = malloc(N * 4), *back = malloc((size_t)N * V * 4), *want = malloc(V * C * 4);
  float *xin = malloc(N * C * 4);
  double *ref = malloc((size_t)V * C * 8);
  int *tgt = malloc(N * sizeof *tgt);
  for (size_t i = 0; i < (size_t)N * V; i++) g[i] = lg[i] = 4.0f * frand(&s);
  for (int i = 0; i < V * C; i++) w[i] = frand(&s);
  for (int i = 0; i < N * C; i++) xin[i] = frand(&s);
  for (int i = 0; i < N; i++) tgt[i] = (int)((frand(&s) * 0.5f + 0.5f) * V) % V;
  gpt2_cpu_ops_f32.crossentropy(loss, g, tgt, N, V, V, 1.0f / N);
  /* the reference gradient: the CUDA op's own in fp32 (its expf is not the
   * CPU op's, and a 1e-7 difference flips a 16-bit rounding) */
  {
    float *dg32 = dev((size_t)N * V * 4, lg), *dl32 = dev(N * 4, NULL);
    int *dt32 = dev(N * sizeof *tgt, tgt);
    gpt2_cuda_gemm_setup(ZRT_F32, scratch, sb);
    gpt2_cuda_ops_f32.crossentropy(dl32, dg32, dt32, N, V, V, 1.0f / N);
    ZT_OK(gpt2_cuda_ops_f32.check());
    ZT_OK(zrt_engine_memcpy(eng, g, dg32, (size_t)N * V * 4, ZRT_COPY_D2H));
    zrt_engine_free(eng, dg32), zrt_engine_free(eng, dl32), zrt_engine_free(eng, dt32);
  }
  ref_gemm(ref, g, 0, V, w, 0, C, N, C, V, dt);
  for (int i = 0; i < N * C; i++) want[i] = (float)ref[i];
  float *dlg = dev((size_t)N * V * 4, lg), *dw = dev(V * C * 4, w), *dout = dev(N * C * 4, NULL);
  float *dloss = dev(N * 4, NULL), *dxin = dev(N * C * 4, xin), *dwte = dev(V * C * 4, NULL);
  int *dtgt = dev(N * sizeof *tgt, tgt);
  gpt2_cuda_gemm_setup(dt, scratch, sb);
  gpt2_cuda_ops_f32.crossentropy(dloss, dlg, dtgt, N, V, V, 1.0f / N);
  ZT_OK(gpt2_cuda_ops_f32.gemm(eng, 0, 0, N, C, V, 1, dlg, V, dw, C, 0, dout, C));
  /* dwte's shape: the copy read transposed, the other operand rounded past it */
  ZT_OK(gpt2_cuda_ops_f32.gemm(eng, 1, 0, V, C, N, 1, dlg, V, dxin, C, 0, dwte, C));
  char what[96];
  const char *dn = zrt_dtype_name(dt);
  snprintf(what, sizeof what, "%s run: cross-entropy loss", dn);
  check_op(what, dloss, loss, N, 1e-4);
  snprintf(what, sizeof what, "%s run: the GEMM on the logits reads the 16-bit gradient copy", dn);
  check_op(what, dout, want, N * C, 1e-5);
  ref_gemm(ref, g, 1, V, xin, 0, C, V, C, N, dt);
  for (int i = 0; i < V * C; i++) want[i] = (float)ref[i];
  snprintf(what, sizeof what, "%s run: dwte = copy^T x (the copy transposed, x after it)", dn);
  check_op(what, dwte, want, V * C, 1e-5);
  ZT_OK(zrt_engine_memcpy(eng, back, dlg, (size_t)N * V * 4, ZRT_COPY_D2H));
  ZT_CHECK(memcmp(back, lg, (size_t)N * V * 4) == 0); /* the logits stay */
  gpt2_cuda_gemm_setup(ZRT_F32, scratch, sb);
  zrt_engine_free(eng, dlg), zrt_engine_free(eng, dw), zrt_engine_free(eng, dout);
  zrt_engine_free(eng, dloss), zrt_engine_free(eng, dtgt), zrt_engine_free(eng, dxin);
  zrt_engine_free(eng, dwte);
  free(lg), free(g), free(w), free(loss), free(back), free(want), free(tgt), free(xin), free(ref);
}

/* The GELU backward's 16-bit copy (a bf16 / fp16 run): the passes' call
 * (in place, with the fc bias's gradient) writes the gradient only as the
 * copy, which the MLP's dX GEMM (the copy times a weight) and dW GEMM (an
 * fp32 activation, rounded past the copy, times the copy) read: both
 * against double on the CPU op's gradient rounded, the bias gradient
 * against the CPU op's, and the fp32 range left as it was. */
static void gelu16_case(zrt_dtype dt, void *scratch, size_t sb) {
  enum { N = 37, C = 64, OC = 4 * C };
  uint64_t s = 4242;
  size_t n = (size_t)N * OC;
  float *d = malloc(n * 4), *keep = malloc(n * 4), *fch = malloc(n * 4), *bias = malloc(OC * 4);
  float *db = malloc(OC * 4), *wfc = malloc((size_t)C * OC * 4), *x = malloc((size_t)N * C * 4);
  float *want = malloc((size_t)C * OC * 4), *back = malloc(n * 4);
  double *ref = malloc((size_t)C * OC * 8);
  for (size_t i = 0; i < n; i++) keep[i] = d[i] = frand(&s), fch[i] = 3.0f * frand(&s);
  for (int c = 0; c < OC; c++) bias[c] = 0.5f * frand(&s), db[c] = frand(&s);
  for (int i = 0; i < C * OC; i++) wfc[i] = frand(&s);
  for (int i = 0; i < N * C; i++) x[i] = frand(&s);
  float *dd = dev(n * 4, d), *dfch = dev(n * 4, fch), *dbias = dev(OC * 4, bias);
  float *ddb = dev(OC * 4, db), *dw = dev((size_t)C * OC * 4, wfc), *dx = dev((size_t)N * C * 4, x);
  float *ddx = dev((size_t)N * C * 4, NULL), *ddw = dev((size_t)C * OC * 4, NULL);
  /* the reference gradient: the CUDA op's own in fp32 (its tanhf is not the
   * CPU op's, and a 1e-7 difference flips a 16-bit rounding), run in an
   * fp32 setup on copies */
  float *dd32 = dev(n * 4, d), *ddb32 = dev(OC * 4, db);
  gpt2_cuda_gemm_setup(ZRT_F32, scratch, sb);
  gpt2_cuda_ops_f32.gelu_backward(dd32, ddb32, dfch, dbias, dd32, N, OC);
  ZT_OK(gpt2_cuda_ops_f32.check());
  ZT_OK(zrt_engine_memcpy(eng, d, dd32, n * 4, ZRT_COPY_D2H));
  ZT_OK(zrt_engine_memcpy(eng, db, ddb32, OC * 4, ZRT_COPY_D2H));
  zrt_engine_free(eng, dd32), zrt_engine_free(eng, ddb32);
  gpt2_cuda_gemm_setup(dt, scratch, sb);
  gpt2_cuda_ops_f32.gelu_backward(dd, ddb, dfch, dbias, dd, N, OC);
  ZT_OK(gpt2_cuda_ops_f32.gemm(eng, 0, 1, N, C, OC, 1, dd, OC, dw, OC, 0, ddx, C));
  ZT_OK(gpt2_cuda_ops_f32.gemm(eng, 1, 0, C, OC, N, 1, dx, C, dd, OC, 0, ddw, OC));
  char what[112];
  const char *dn = zrt_dtype_name(dt);
  ref_gemm(ref, d, 0, OC, wfc, 1, OC, N, C, OC, dt);
  for (int i = 0; i < N * C; i++) want[i] = (float)ref[i];
  snprintf(what, sizeof what, "%s run: the MLP's dX GEMM reads the GELU backward's copy", dn);
  check_op(what, ddx, want, (size_t)N * C, 1e-5);
  ref_gemm(ref, x, 1, C, d, 0, OC, C, OC, N, dt);
  for (int i = 0; i < C * OC; i++) want[i] = (float)ref[i];
  snprintf(what, sizeof what, "%s run: dW = x^T copy (x rounded past the copy)", dn);
  check_op(what, ddw, want, (size_t)C * OC, 1e-5);
  snprintf(what, sizeof what, "%s run: the fused fc bias gradient (the fp32 form's, bitwise)", dn);
  check_op(what, ddb, db, OC, 0.0);
  ZT_OK(zrt_engine_memcpy(eng, back, dd, n * 4, ZRT_COPY_D2H));
  ZT_CHECK(memcmp(back, keep, n * 4) == 0); /* only the copy was written */
  gpt2_cuda_gemm_setup(ZRT_F32, scratch, sb);
  zrt_engine_free(eng, dd), zrt_engine_free(eng, dfch), zrt_engine_free(eng, dbias);
  zrt_engine_free(eng, ddb), zrt_engine_free(eng, dw), zrt_engine_free(eng, dx);
  zrt_engine_free(eng, ddx), zrt_engine_free(eng, ddw);
  free(d), free(keep), free(fch), free(bias), free(db), free(wfc), free(x), free(want), free(back);
  free(ref);
}

/* One micro-step of the passes on the CUDA ops in a dt (bf16 / fp16) run
 * (see the top): with reg, the 16-bit activation slots registered. Fills
 * the step's losses, every gradient (module by module) and the slots (ln1,
 * atty, ln2, fch, fch_gelu of layer 0, lnf: 16-bit elements when reg). */
enum { A16_L = 2, A16_B = 2 };
enum { A16_SLOTS = 6 };
typedef struct a16_run {
  float *loss, *grad[A16_L + 2][GPT2_BLOCK_NPARAMS];
  unsigned char *slot[A16_SLOTS]; /* layer 0's ln1, atty, ln2, fch, fch_gelu; lnf */
} a16_run;

static void act16_step(const gpt2_config *cfg, float *const (*w)[GPT2_BLOCK_NPARAMS], const int *np,
                       const int64_t (*numel)[GPT2_BLOCK_NPARAMS], const int *dtok, zrt_dtype dt,
                       int reg, void *scratch, size_t sb, a16_run *r) {
  gpt2_acts_layout L;
  /* as train_gpt2 lays them out: 16-bit slots at half size when registered */
  gpt2_acts_layout_init(&L, cfg, A16_B, 0, GPT2_ACTS_LSE_ONLY | (reg ? GPT2_ACTS_HALF16 : 0));
  int N = A16_B * cfg->seq_len, C = cfg->n_embd;
  float *acts = dev(L.total * 4, NULL), *g[A16_L + 2][GPT2_BLOCK_NPARAMS];
  gpt2_cuda_ops_f32.zero(acts, L.total);
  for (int m = 0; m < A16_L + 2; m++)
    for (int p = 0; p < np[m]; p++) {
      g[m][p] = dev((size_t)numel[m][p] * 4, NULL);
      gpt2_cuda_ops_f32.zero(g[m][p], (size_t)numel[m][p]);
    }
  /* registered: a scratch of gpt2_cuda_scratch_bytes (what a training run
   * gets) plus room for one rounded weight (the largest, 256-aligned, and
   * the alignment of the operand beside it): this test's weights are fp32,
   * a training run's the engine's 16-bit tensors; an undercount of the
   * formula fails here as "scratch too small" */
  size_t wmax = (size_t)cfg->vocab * cfg->n_embd;
  if ((size_t)4 * cfg->n_embd * cfg->n_embd > wmax) wmax = (size_t)4 * cfg->n_embd * cfg->n_embd;
  size_t sreg = gpt2_cuda_scratch_bytes(cfg, A16_B, dt) + (wmax * 2 + 255) / 256 * 256 + 256;
  ZT_CHECK(sreg <= sb);
  gpt2_cuda_gemm_setup(dt, scratch, reg ? sreg : sb);
  if (reg) ZT_OK(gpt2_a16_set(&L, cfg, A16_B, acts));
  gpt2_ops_f32 o;
  gpt2_a16_audit_start(&gpt2_cuda_ops_f32, &o);
  o.ctx = eng;
  ZT_OK(gpt2_embed_forward_f32(&o, cfg, &L, acts, dtok, A16_B, w[0]));
  for (int l = 0; l < A16_L; l++)
    ZT_OK(gpt2_block_forward_f32(&o, cfg, &L, acts, A16_B, l, NULL, w[1 + l]));
  ZT_OK(gpt2_head_f32(&o, cfg, &L, acts, A16_B, dtok + N, w[A16_L + 1], w[0][GPT2_WTE], 1.0f / N,
                      g[A16_L + 1], g[0][GPT2_WTE]));
  for (int l = A16_L - 1; l >= 0; l--)
    ZT_OK(gpt2_block_backward_f32(&o, cfg, &L, acts, A16_B, l, NULL, w[1 + l], g[1 + l]));
  ZT_OK(gpt2_embed_backward_f32(&o, cfg, &L, acts, dtok, A16_B, g[0]));
  ZT_OK(o.check());
  long bad;
  gpt2_a16_audit_counts(NULL, NULL, &bad);
  ZT_CHECK(bad == 0);
  r->loss = malloc((size_t)N * 4);
  ZT_OK(zrt_engine_memcpy(eng, r->loss, acts + L.losses, (size_t)N * 4, ZRT_COPY_D2H));
  const size_t at[A16_SLOTS] = {L.ln1, L.atty, L.ln2, L.fch, L.fch_gelu, L.lnf};
  for (int k = 0; k < A16_SLOTS; k++) {
    size_t n = (size_t)N * C * (k == 3 || k == 4 ? 4 : 1), off = at[k];
    size_t bytes = n * (reg ? 2 : 4); /* 16-bit elements, or the fp32 run's */
    r->slot[k] = malloc(bytes);
    ZT_OK(zrt_engine_memcpy(eng, r->slot[k], acts + off, bytes, ZRT_COPY_D2H));
  }
  for (int m = 0; m < A16_L + 2; m++)
    for (int p = 0; p < np[m]; p++) {
      r->grad[m][p] = malloc((size_t)numel[m][p] * 4);
      ZT_OK(zrt_engine_memcpy(eng, r->grad[m][p], g[m][p], (size_t)numel[m][p] * 4, ZRT_COPY_D2H));
      zrt_engine_free(eng, g[m][p]);
    }
  gpt2_a16_clear();
  gpt2_cuda_gemm_setup(ZRT_F32, scratch, sb);
  zrt_engine_free(eng, acts);
}

static void act16_case(zrt_dtype dt, void *scratch, size_t sb) {
  gpt2_config cfg = {0};
  /* T = 65: N = 130 rows split the biases' column sums into two chunks and
   * the LayerNorms' into five (partials in the scratch) */
  cfg.n_layer = A16_L, cfg.n_embd = 128, cfg.n_head = 2, cfg.vocab = 256, cfg.seq_len = 65;
  cfg.n_ctx = 65;
  char msg[256];
  ZT_CHECK(gpt2_config_validate(&cfg, msg, sizeof msg) == 0);
  ZT_CHECK(gpt2_cuda_scratch_bytes(&cfg, A16_B, dt) <= sb);
  int np[A16_L + 2], N = A16_B * cfg.seq_len, C = cfg.n_embd;
  gpt2_param_spec spec[GPT2_BLOCK_NPARAMS];
  int64_t numel[A16_L + 2][GPT2_BLOCK_NPARAMS];
  float *w[A16_L + 2][GPT2_BLOCK_NPARAMS];
  uint64_t s = 1601;
  for (int m = 0; m < A16_L + 2; m++) {
    np[m] = gpt2_module_params(&cfg, m - 1, spec);
    for (int p = 0; p < np[m]; p++) {
      numel[m][p] = gpt2_param_numel(&spec[p]);
      float *h = malloc((size_t)numel[m][p] * 4);
      for (int64_t i = 0; i < numel[m][p]; i++)
        h[i] = (spec[p].init.kind == ZRT_INIT_ONES ? 1.0f : 0.0f) + 0.1f * frand(&s);
      w[m][p] = dev((size_t)numel[m][p] * 4, h);
      free(h);
    }
  }
  int *tok = malloc((size_t)2 * N * sizeof *tok);
  for (int i = 0; i < 2 * N; i++) tok[i] = (int)((frand(&s) * 0.5f + 0.5f) * 256) % 256;
  int *dtok = dev((size_t)2 * N * sizeof *tok, tok);
  a16_run f32 = {0}, b16 = {0};
  act16_step(&cfg, w, np, numel, dtok, dt, 0, scratch, sb, &f32);
  act16_step(&cfg, w, np, numel, dtok, dt, 1, scratch, sb, &b16);
  static const char *names[A16_SLOTS] = {"ln1", "atty", "ln2", "fch", "fch_gelu", "lnf"};
  const char *dn = zrt_dtype_name(dt);
  /* the gradients' and the later slots' tolerance, of a tensor's largest
   * entry: unit.test_gpt2_act16 measures 1.04% (bf16) and 0.10% (fp16) on
   * the gradients of the emulated kernels */
  const double rel = dt == ZRT_BF16 ? 5e-2 : 1e-2;
  for (int k = 0; k < A16_SLOTS; k++) {
    size_t n = (size_t)N * C * (k == 3 || k == 4 ? 4 : 1), differ = 0;
    uint16_t *want = malloc(n * 2);
    float *got = malloc(n * 4);
    const float *w32 = (const float *)f32.slot[k];
    to16(want, w32, n, dt); /* the fp32 run's values, rounded */
    const uint16_t *h = (const uint16_t *)b16.slot[k];
    double big = 0; /* the slot's largest entry */
    for (size_t i = 0; i < n; i++) {
      differ += h[i] != want[i];
      got[i] = from16(h[i], dt);
      big = fmax(big, fabs(w32[i]));
    }
    printf("%s activations: layer 0 %s: %zu of %zu elements differ from the fp32 run's rounding\n",
           dn, names[k], differ, n);
    if (k < 2) /* before the attention projection's 16-bit C (dC), the first value a 16-bit
                  run rounds that the fp32 run keeps */
      ZT_CHECK(differ == 0);
    else { /* after it: moved by that rounding (and fch's, the fc GEMM's own 16-bit C) */
      char what[96];
      snprintf(what, sizeof what, "%s activations: %s", dn, names[k]);
      ZT_CLOSE_ARRAY(what, got, w32, n, rel * big);
    }
    free(want), free(got);
  }
  double l0 = 0, l1 = 0;
  for (int i = 0; i < N; i++) l0 += f32.loss[i], l1 += b16.loss[i];
  printf("%s activations: loss %.9g, fp32 activations %.9g (relative %.3g; the emulation: 5.7e-6 "
         "bf16, 2.4e-6 fp16)\n",
         dn, l1, l0, fabs(l1 - l0) / fabs(l0));
  ZT_CHECK(fabs(l1 - l0) <= 1e-4 * fabs(l0));
  for (int m = 0; m < A16_L + 2; m++)
    for (int p = 0; p < np[m]; p++) {
      double big = 0;
      for (int64_t i = 0; i < numel[m][p]; i++)
        if (fabs(f32.grad[m][p][i]) > big) big = fabs(f32.grad[m][p][i]);
      char what[96];
      snprintf(what, sizeof what, "%s activations: module %d param %d gradient", dn, m, p);
      /* D = dO . O from the 16-bit O, fch rounded (rounding unit 2^-8
       * bf16, 2^-11 fp16) */
      ZT_CLOSE_ARRAY(what, b16.grad[m][p], f32.grad[m][p], (size_t)numel[m][p], rel * big);
      free(f32.grad[m][p]), free(b16.grad[m][p]);
      zrt_engine_free(eng, w[m][p]);
    }
  for (int k = 0; k < A16_SLOTS; k++) free(f32.slot[k]), free(b16.slot[k]);
  free(f32.loss), free(b16.loss), free(tok);
  zrt_engine_free(eng, dtok);
}

/* The non-GEMM, non-attention ops against gpt2_cpu_ops_f32 (see the top). */
/* The split column reductions at a larger N (gpt2_rows.h): the LayerNorm
 * backward at 8225 rows (rw_ln_plan: chunks of 64 rows, two passes a
 * block, a ragged last chunk) and a bias's gradient at GPT-2's width (11
 * chunks), the partials in the scratch and folded; against the CPU ops,
 * the column sums within 4e-7 per row (sums of 8225 terms in two orders). */
static void split_case(void) {
  const gpt2_ops_f32 *G = &gpt2_cuda_ops_f32, *H = &gpt2_cpu_ops_f32;
  enum { N = 8225, C = 768 };
  uint64_t s = 5151;
  size_t nc = (size_t)N * C;
  float *x = malloc(nc * 4), *y = malloc(nc * 4), *z = malloc(nc * 4), *o = malloc(nc * 4);
  float *m = malloc(N * 4), *r = malloc(N * 4), *lw = malloc(C * 4), *lb = malloc(C * 4);
  float *gw = malloc(C * 4), *gb = malloc(C * 4);
  fill(x, nc, 2.0f, &s), fill(lw, C, 1.0f, &s), fill(lb, C, 1.0f, &s);
  float *dx = dev(nc * 4, x), *dlw = dev(C * 4, lw), *dlb = dev(C * 4, lb);
  float *dm = dev(N * 4, NULL), *dr = dev(N * 4, NULL), *dout = dev(nc * 4, NULL);
  G->layernorm_forward(dout, dm, dr, dx, dlw, dlb, N, C);
  H->layernorm_forward(o, m, r, x, lw, lb, N, C);
  check_op("split: layernorm_forward rstd", dr, r, N, 1e-5);
  ZT_OK(zrt_engine_memcpy(eng, dm, m, N * 4, ZRT_COPY_H2D)); /* the same statistics */
  ZT_OK(zrt_engine_memcpy(eng, dr, r, N * 4, ZRT_COPY_H2D));
  fill(y, nc, 1.0f, &s), fill(z, nc, 1.0f, &s), fill(gw, C, 1.0f, &s), fill(gb, C, 1.0f, &s);
  float *dy = dev(nc * 4, y), *dz = dev(nc * 4, z), *dgw = dev(C * 4, gw), *dgb = dev(C * 4, gb);
  G->layernorm_backward(dz, dgw, dgb, dy, dx, dlw, dm, dr, N, C);
  H->layernorm_backward(z, gw, gb, y, x, lw, m, r, N, C);
  check_op("split: layernorm_backward dinp", dz, z, nc, 1e-5);
  check_op("split: layernorm_backward dw", dgw, gw, C, 4e-7 * N);
  check_op("split: layernorm_backward db", dgb, gb, C, 4e-7 * N);
  fill(gb, C, 1.0f, &s);
  ZT_OK(zrt_engine_memcpy(eng, dgb, gb, C * 4, ZRT_COPY_H2D));
  G->bias_backward(dgb, dy, N, C);
  H->bias_backward(gb, y, N, C);
  check_op("split: bias_backward", dgb, gb, C, 4e-7 * N);
  void *bufs[] = {dx, dlw, dlb, dm, dr, dout, dy, dz, dgw, dgb};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) zrt_engine_free(eng, bufs[i]);
  free(x), free(y), free(z), free(o), free(m), free(r), free(lw), free(lb), free(gw), free(gb);
}

/* The encoder forward over the engine's 16-bit wte and wpe, registered as
 * train_gpt2's stage_weights does in a 16-bit run (the embedding read as
 * is, no fp32 staging): each entry widened exactly, so bit for bit the CPU
 * op on the widened values; and one of the two registered alone. */
static void encoder16_case(zrt_dtype dt, void *scratch, size_t sb) {
  enum { B = 2, T = 33, C = 96, V = 300 };
  const size_t ne = (size_t)V * C, np = (size_t)T * C, nc = (size_t)B * T * C;
  uint64_t s = 99;
  float *wte = malloc(ne * 4), *wpe = malloc(np * 4), *want = malloc(nc * 4);
  uint16_t *e16 = malloc(ne * 2), *p16 = malloc(np * 2);
  int tok[B * T];
  fill(wte, ne, 1.0f, &s), fill(wpe, np, 1.0f, &s);
  to16(e16, wte, ne, dt), to16(p16, wpe, np, dt);
  for (size_t i = 0; i < ne; i++) wte[i] = from16(e16[i], dt);
  for (size_t i = 0; i < np; i++) wpe[i] = from16(p16[i], dt);
  for (int i = 0; i < B * T; i++) tok[i] = (int)((frand(&s) * 0.5f + 0.5f) * V) % V;
  gpt2_cpu_ops_f32.encoder_forward(want, tok, wte, wpe, B, T, C);
  void *de = dev(ne * 2, e16), *dp = dev(np * 2, p16);
  float *dwpe32 = dev(np * 4, wpe), *dout = dev(nc * 4, NULL);
  int *dtok = dev(sizeof tok, tok);
  gpt2_cuda_gemm_setup(dt, scratch, sb);
  ZT_CHECK(gpt2_cuda_weight16(de, (int64_t)ne) == 0 && gpt2_cuda_weight16(dp, (int64_t)np) == 0);
  gpt2_cuda_ops_f32.encoder_forward(dout, dtok, (const float *)de, (const float *)dp, B, T, C);
  check_op(dt == ZRT_BF16 ? "bf16 encoder_forward, 16-bit wte and wpe"
                          : "fp16 encoder_forward, 16-bit wte and wpe",
           dout, want, nc, 0.0);
  gpt2_cuda_weight16_clear();
  ZT_CHECK(gpt2_cuda_weight16(de, (int64_t)ne) == 0);
  gpt2_cuda_ops_f32.encoder_forward(dout, dtok, (const float *)de, dwpe32, B, T, C);
  check_op("encoder_forward, 16-bit wte, fp32 wpe", dout, want, nc, 0.0);
  gpt2_cuda_weight16_clear();
  void *bufs[] = {de, dp, dwpe32, dout, dtok};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) zrt_engine_free(eng, bufs[i]);
  free(wte), free(wpe), free(want), free(e16), free(p16);
}

static void ops_case(void) {
  const gpt2_ops_f32 *G = &gpt2_cuda_ops_f32, *H = &gpt2_cpu_ops_f32;
  enum { B = 2, T = 100, N = B * T, C = 768, OC = 4 * C, V = 1000, NCE = 37, VCE = 50257 };
  uint64_t s = 4242;
  size_t nc = (size_t)N * C, noc = (size_t)N * OC, nce = (size_t)NCE * VCE;
  float *x = malloc(noc * 4), *y = malloc(noc * 4), *z = malloc(noc * 4), *o = malloc(noc * 4);
  float *w = malloc((size_t)V * C * 4), *w2 = malloc((size_t)T * C * 4);
  float *m = malloc(N * 4), *r = malloc(N * 4), *bo = malloc(OC * 4), *bo2 = malloc(OC * 4);
  int *tok = malloc(N * sizeof *tok), *tgt = malloc(NCE * sizeof *tgt);
  for (int i = 0; i < N; i++) tok[i] = (int)((frand(&s) * 0.5f + 0.5f) * V) % V;
  for (int i = 0; i < NCE; i++) tgt[i] = (int)((frand(&s) * 0.5f + 0.5f) * VCE) % VCE;
  int *dtok = dev(N * sizeof *tok, tok), *dtgt = dev(NCE * sizeof *tgt, tgt);

  /* encoder forward and backward (ADD into dwte, dwpe) */
  fill(w, (size_t)V * C, 1.0f, &s), fill(w2, (size_t)T * C, 1.0f, &s);
  float *dw = dev((size_t)V * C * 4, w), *dw2 = dev((size_t)T * C * 4, w2),
        *dout = dev(nc * 4, NULL);
  G->encoder_forward(dout, dtok, dw, dw2, B, T, C);
  H->encoder_forward(o, tok, w, w2, B, T, C);
  check_op("encoder_forward", dout, o, nc, 1e-5);
  fill(x, nc, 1.0f, &s);
  float *dx = dev(nc * 4, x);
  G->encoder_backward(dw, dw2, dx, dtok, B, T, C);
  H->encoder_backward(w, w2, x, tok, B, T, C);
  check_op("encoder_backward dwte", dw, w, (size_t)V * C, 1e-4);
  check_op("encoder_backward dwpe", dw2, w2, (size_t)T * C, 1e-4);

  /* LayerNorm forward, backward (ADD into dinp, dw, db) */
  fill(x, nc, 2.0f, &s), fill(bo, C, 1.0f, &s), fill(bo2, C, 1.0f, &s);
  float *dxin = dev(nc * 4, x), *dlw = dev(C * 4, bo), *dlb = dev(C * 4, bo2);
  float *dm = dev(N * 4, NULL), *dr = dev(N * 4, NULL);
  G->layernorm_forward(dout, dm, dr, dxin, dlw, dlb, N, C);
  H->layernorm_forward(o, m, r, x, bo, bo2, N, C);
  check_op("layernorm_forward out", dout, o, nc, 1e-5);
  check_op("layernorm_forward mean", dm, m, N, 1e-5);
  check_op("layernorm_forward rstd", dr, r, N, 1e-5);
  fill(y, nc, 1.0f, &s), fill(z, nc, 1.0f, &s);
  float *dy = dev(nc * 4, y), *dz = dev(nc * 4, z);
  float *gw = malloc(C * 4), *gb = malloc(C * 4);
  fill(gw, C, 1.0f, &s), fill(gb, C, 1.0f, &s);
  float *dgw = dev(C * 4, gw), *dgb = dev(C * 4, gb);
  G->layernorm_backward(dz, dgw, dgb, dy, dxin, dlw, dm, dr, N, C);
  H->layernorm_backward(z, gw, gb, y, x, bo, m, r, N, C);
  check_op("layernorm_backward dinp", dz, z, nc, 1e-5);
  check_op("layernorm_backward dw", dgw, gw, C, 1e-4);
  check_op("layernorm_backward db", dgb, gb, C, 1e-4);

  /* bias backward (ADD into db), at the MLP's width */
  fill(x, noc, 1.0f, &s), fill(bo, OC, 1.0f, &s), fill(bo2, OC, 1.0f, &s);
  float *dbig = dev(noc * 4, x), *dbias = dev(OC * 4, bo), *ddb = dev(OC * 4, bo2);
  memcpy(o, x, noc * 4);
  G->bias_backward(ddb, dbig, N, OC);
  H->bias_backward(bo2, o, N, OC);
  check_op("bias_backward", ddb, bo2, OC, 1e-4);

  /* GELU forward and backward (not aliased), residual: with the bias of
   * the GEMM before them (the passes'), and without */
  fill(x, noc, 3.0f, &s), fill(y, noc, 1.0f, &s), fill(bo, OC, 1.0f, &s), fill(bo2, OC, 1.0f, &s);
  float *dg = dev(noc * 4, x), *dgo = dev(noc * 4, y), *dgi = dev(noc * 4, NULL);
  ZT_OK(zrt_engine_memcpy(eng, dbias, bo, OC * 4, ZRT_COPY_H2D));
  ZT_OK(zrt_engine_memcpy(eng, ddb, bo2, OC * 4, ZRT_COPY_H2D));
  for (int wb = 0; wb < 2; wb++) {
    const float *gb = wb ? dbias : NULL, *hb = wb ? bo : NULL;
    G->gelu_forward(dgi, dg, gb, N, OC);
    H->gelu_forward(o, x, hb, N, OC);
    check_op(wb ? "gelu_forward (bias)" : "gelu_forward", dgi, o, noc, 1e-5);
    G->gelu_backward(dgi, NULL, dg, gb, dgo, N, OC);
    H->gelu_backward(o, NULL, x, hb, y, N, OC);
    check_op(wb ? "gelu_backward (bias)" : "gelu_backward", dgi, o, noc, 1e-5);
    G->residual_forward(dgi, dg, dgo, gb, N, OC);
    H->residual_forward(o, x, y, hb, N, OC);
    check_op(wb ? "residual_forward (bias)" : "residual_forward", dgi, o, noc, 1e-5);
  }
  /* the fused bias gradient (ADDs into db), in place as the passes run it */
  ZT_OK(zrt_engine_memcpy(eng, dgi, y, noc * 4, ZRT_COPY_H2D));
  memcpy(o, y, noc * 4);
  G->gelu_backward(dgi, ddb, dg, dbias, dgi, N, OC);
  H->gelu_backward(o, bo2, x, bo, o, N, OC);
  check_op("gelu_backward in place, fused", dgi, o, noc, 1e-5);
  check_op("gelu_backward's bias gradient", ddb, bo2, OC, 1e-4);

  /* cross-entropy over GPT-2's vocabulary: loss only, then with the gradient */
  float *lg = malloc(nce * 4), *lg2 = malloc(nce * 4), *loss = malloc(NCE * 4);
  fill(lg, nce, 6.0f, &s);
  for (int i = 0; i < NCE; i++) lg[(size_t)i * VCE] += 20.0f; /* a large max: subtracted */
  float *dlg = dev(nce * 4, lg), *dloss = dev(NCE * 4, NULL);
  memcpy(lg2, lg, nce * 4);
  G->crossentropy(dloss, dlg, dtgt, NCE, VCE, VCE, 0.0f);
  H->crossentropy(loss, lg2, tgt, NCE, VCE, VCE, 0.0f);
  check_op("crossentropy loss (dloss 0)", dloss, loss, NCE, 1e-4);
  check_op("crossentropy logits untouched (dloss 0)", dlg, lg, nce, 0.0);
  G->crossentropy(dloss, dlg, dtgt, NCE, VCE, VCE, 1.0f / NCE);
  H->crossentropy(loss, lg2, tgt, NCE, VCE, VCE, 1.0f / NCE);
  check_op("crossentropy loss", dloss, loss, NCE, 1e-4);
  check_op("crossentropy dlogits", dlg, lg2, nce, 4e-6); /* H200: 1.24e-6 */
  { /* rows 50304 apart (the layout's logits_ld), the padding NaN: the
       contiguous rows' losses and gradient bit for bit, the padding kept */
    enum { LD = 50304 };
    size_t np = (size_t)NCE * LD, bad = 0, pads = 0;
    float *hp = malloc(np * 4), *gc = malloc(nce * 4), *lc = malloc(NCE * 4), *lp = malloc(NCE * 4);
    for (size_t e = 0; e < np; e++) hp[e] = NAN;
    for (int i = 0; i < NCE; i++) memcpy(hp + (size_t)i * LD, lg + (size_t)i * VCE, VCE * 4);
    float *dlp = dev(np * 4, hp);
    ZT_OK(zrt_engine_memcpy(eng, dlg, lg, nce * 4, ZRT_COPY_H2D));
    G->crossentropy(dloss, dlg, dtgt, NCE, VCE, VCE, 1.0f / NCE);
    ZT_OK(G->check());
    ZT_OK(zrt_engine_memcpy(eng, lc, dloss, NCE * 4, ZRT_COPY_D2H));
    ZT_OK(zrt_engine_memcpy(eng, gc, dlg, nce * 4, ZRT_COPY_D2H));
    G->crossentropy(dloss, dlp, dtgt, NCE, VCE, LD, 1.0f / NCE);
    ZT_OK(G->check());
    ZT_OK(zrt_engine_memcpy(eng, lp, dloss, NCE * 4, ZRT_COPY_D2H));
    ZT_OK(zrt_engine_memcpy(eng, hp, dlp, np * 4, ZRT_COPY_D2H));
    for (int i = 0; i < NCE; i++) {
      bad += memcmp(hp + (size_t)i * LD, gc + (size_t)i * VCE, VCE * 4) != 0;
      for (int v = VCE; v < LD; v++) pads += !isnan(hp[(size_t)i * LD + v]);
    }
    printf("crossentropy rows %d apart: %zu rows differ, %zu pads touched\n", (int)LD, bad, pads);
    ZT_CHECK(memcmp(lc, lp, NCE * 4) == 0 && bad == 0 && pads == 0);
    zrt_engine_free(eng, dlp);
    free(hp), free(gc), free(lc), free(lp);
  }

  void *dev_bufs[] = {dtok, dtgt, dw,  dw2,  dout,  dx,  dxin, dlw, dlb, dm,  dr,   dy,
                      dz,   dgw,  dgb, dbig, dbias, ddb, dg,   dgo, dgi, dlg, dloss};
  for (size_t i = 0; i < sizeof dev_bufs / sizeof dev_bufs[0]; i++)
    zrt_engine_free(eng, dev_bufs[i]);
  free(x), free(y), free(z), free(o), free(w), free(w2), free(m), free(r), free(bo), free(bo2);
  free(tok), free(tgt), free(gw), free(gb), free(lg), free(lg2), free(loss);
}

int main(void) {
  zt_gpu_or_skip();
  zrt_config *zc = NULL;
  ZT_OK(zrt_config_from_env(&zc));
  ZT_OK(zrt_config_set(zc, "zrt.backend", "cuda", "test"));
  ZT_OK(zrt_engine_create(zc, &eng));
  gpt2_cuda_set_stream(zrt_engine_stream(eng));
  gpt2_config cfg = {0};
  cfg.n_embd = 768, cfg.n_head = 12, cfg.vocab = 1000, cfg.seq_len = 1024;
  /* the ops' general form (buffers that are no 16-bit slot) keeps held
   * 16-bit copies in the scratch: room for the T = 1024 attention's dqkv
   * copy (6 N C bytes at N = 2048) with its D rows and its bias's partials,
   * a rounded N x C operand, and the cases' GEMMs; a training run's scratch
   * (gpt2_cuda_scratch_bytes, with the registry's slots) is far smaller */
  size_t sb = (size_t)10 * 2048 * 768 + ((size_t)1 << 20);
  if (gpt2_cuda_scratch_bytes(&cfg, 2, ZRT_BF16) > sb)
    sb = gpt2_cuda_scratch_bytes(&cfg, 2, ZRT_BF16);
  void *scratch = dev(sb, NULL);
  static const zrt_dtype dts[] = {ZRT_BF16, ZRT_F16};
  for (int d = 0; d < 2; d++) {
    gpt2_cuda_gemm_setup(dts[d], scratch, sb);
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        gemm_case(dts[d], ta, tb, 96, 192, 64, 1, 0.0f);  /* x W: the block forward */
        gemm_case(dts[d], ta, tb, 72, 130, 256, 0, 1.0f); /* dW += x^T dy */
      }
  }
  /* the scratch as gpt2_cuda_scratch_bytes sizes it, for the one fp32
   * operand a registered run's GEMMs round: dres, the projections' output
   * gradient, in the fc proj's dX = dres W^T (N x C by a 16-bit weight):
   * the tiny preset's shape at an odd N = B*T = 33 */
  gpt2_config tiny = {0};
  tiny.n_embd = 64, tiny.n_head = 2, tiny.vocab = 256, tiny.seq_len = 33;
  gpt2_cuda_gemm_setup(ZRT_BF16, scratch, gpt2_cuda_scratch_bytes(&tiny, 1, ZRT_BF16));
  gemm_case(ZRT_BF16, 0, 1, 33, 256, 64, 1, 0.0f);
  g_scratch = scratch, g_scratch_bytes = sb; /* attention needs only the scratch */
  static const zrt_dtype adts[] = {ZRT_F32, ZRT_BF16, ZRT_F16};
  for (int d = 0; d < 3; d++)
    for (int wb = 0; wb < 2; wb++) { /* without and with the qkv GEMM's bias */
      attention_case(adts[d], 2, 100, 12, 64, wb);
      attention_case(adts[d], 2, 1024, 12, 64, wb);
      attention_case(adts[d], 2, 64, 2, 32, wb);  /* the tiny preset's heads (zero-padded tiles) */
      attention_case(adts[d], 1, 7, 2, 64, wb);   /* under one warp's 16 rows */
      attention_case(adts[d], 1, 130, 2, 48, wb); /* ragged tiles, a zero-padded 48-wide head */
    }
  gpt2_cuda_gemm_setup(ZRT_F32, scratch, sb);
  ops_case();
  gpt2_config big = cfg; /* a scratch sized for the split case's N */
  big.seq_len = 8225;
  size_t sbig = gpt2_cuda_scratch_bytes(&big, 1, ZRT_F32);
  void *scr2 = dev(sbig, NULL);
  gpt2_cuda_gemm_setup(ZRT_F32, scr2, sbig);
  split_case();
  zrt_engine_free(eng, scr2);
  gpt2_cuda_gemm_setup(ZRT_F32, scratch, sb);
  ce16_case(ZRT_BF16, scratch, sb);
  ce16_case(ZRT_F16, scratch, sb);
  encoder16_case(ZRT_BF16, scratch, sb);
  encoder16_case(ZRT_F16, scratch, sb);
  grad16_case(ZRT_BF16, scratch, sb);
  grad16_case(ZRT_F16, scratch, sb);
  gelu16_case(ZRT_BF16, scratch, sb);
  gelu16_case(ZRT_F16, scratch, sb);
  reuse_case(scratch, sb);
  act16_case(ZRT_BF16, scratch, sb);
  act16_case(ZRT_F16, scratch, sb);
  zrt_engine_free(eng, scratch);
  zrt_engine_destroy(eng);
  zrt_config_destroy(zc);
  ZT_DONE();
}
#else
int main(void) {
  zt_gpu_or_skip(); /* built without CUDA: skips, or fails under ZRT_REQUIRE_GPU=1 */
  ZT_DONE();
}
#endif
