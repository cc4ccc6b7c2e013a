/*
 * gpt2_cuda.cu — CUDA C kernels of the GPT-2 example with the contract of
 * the CPU ops table (gpt2_ops_decl.h): encoder, LayerNorm, causal softmax
 * attention, GELU (tanh), residual, softmax cross-entropy, each with its
 * backward, and the biases' gradients (a linear's bias is added by its
 * reader: the attention's tile loads, GELU, the residual add), plus the
 * working-dtype staging kernels. GEMMs go through
 * zrt_engine_gemm (cuBLAS inside the engine's CUDA backend). In a 16-bit
 * run (gpt2_cuda_gemm_setup with bf16 / fp16) every GEMM runs on tensor
 * cores with fp32 accumulation: the module's weight matrices are the
 * engine's gathered 16-bit tensors themselves (registered with
 * gpt2_cuda_weight16, no fp32 copy); the activations only GEMMs read
 * (ln1, atty, ln2, fch_gelu, lnf: gpt2_act16.h's registry) are written in
 * the run's dtype by their producers and read as they are, and fch is the
 * fc GEMM's 16-bit C, the logits the head GEMM's (the cross-entropy
 * writes its 16-bit gradient over them) and d4C the fcproj dX GEMM's (the
 * GELU backward writes its 16-bit gradient over it, the attention backward
 * its 16-bit dqkv), and dC the projections' and the dX GEMMs' (read by the
 * residual adds and the LayerNorm and attention backwards); the one other
 * fp32 operand, dres, is rounded to the run's dtype into the scratch (as
 * autocast does), other C (the qkv GEMM's, the weights' gradients) stays
 * fp32. For
 * buffers that are no slot (the ops' general form, tests) the GELU
 * backward's, the attention backward's and the cross-entropy's gradients
 * are written only as the 16-bit copy their next GEMMs read (the held
 * copy, below), when the caller's scratch holds it.
 *
 * Attention is fused (online softmax over shared-memory tiles, backward
 * without atomics): on tensor cores in a bf16 or fp16 run (gpt2_flash_tc.h,
 * warp MMAs on operands of the run's dtype, fp32 softmax), on the CUDA
 * cores in an fp32 run (gpt2_flash_attn.h); its `att` buffer keeps only the per-row logsumexp
 * (the first B*NH*T floats), and the backward's D rows live in the
 * scratch. The cross-entropy and the column sums (the biases' gradients,
 * the LayerNorms' weight and bias gradients) are block reductions from
 * gpt2_rows.h (coalesced, deterministic, no atomics; also emulated on the
 * CPU by test_gpt2_rows_emu). Other kernels favour
 * obviously-correct indexing over speed: one thread per element, a warp
 * per row for LayerNorm; the embedding's gradients use atomicAdd (tokens
 * repeat), which keeps the backward's ADD contract. All launches go to the
 * engine's stream.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "gpt2_act16.h"
#include "gpt2_cuda.h"
#include "gpt2_flash_attn.h"
#include "gpt2_flash_tc.h"
#include "gpt2_gemm16.h"
#include "gpt2_rows.h"

static_assert(TC_HS == FA_HS, "one head-size limit (fa_shape_ok) for both attentions");

static unsigned nblocks(size_t n, unsigned threads) {
  return (unsigned)((n + threads - 1) / threads);
}

/* wte and wpe fp32, or each the engine's 16-bit tensor as is (e16, p16:
 * a 16-bit run's registered embedding, of the type f16 selects): widened
 * exactly, so the sum is the fp32 staging's. */
__global__ void k_encoder_forward(float *out, const int *tok, const void *wte, int e16,
                                  const void *wpe, int p16, int f16, int B, int T, int C) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)B * T * C) return;
  size_t bt = i / C;
  int c = (int)(i % C), t = (int)(bt % T);
  out[i] =
      rw_act(wte, (size_t)tok[bt] * C + c, e16, f16) + rw_act(wpe, (size_t)t * C + c, p16, f16);
}

__global__ void k_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tok,
                                   int B, int T, int C) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)B * T * C) return;
  size_t bt = i / C;
  int c = (int)(i % C), t = (int)(bt % T);
  atomicAdd(&dwte[(size_t)tok[bt] * C + c], dout[i]);
  atomicAdd(&dwpe[(size_t)t * C + c], dout[i]);
}

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* out[i] = y: fp32 (o16 0), or the run's 16-bit dtype (o16: ZRT_BF16 or
 * ZRT_F16, a 16-bit activation slot of gpt2_act16.h) */
__device__ __forceinline__ void store_act(void *out, int o16, size_t i, float y) {
  if (o16 == ZRT_BF16)
    ((__nv_bfloat16 *)out)[i] = __float2bfloat16(y);
  else if (o16 == ZRT_F16)
    ((__half *)out)[i] = __float2half(y);
  else
    ((float *)out)[i] = y;
}

/* One warp per row. out: see store_act. */
__global__ void k_layernorm_forward(void *out, int o16, float *mean, float *rstd, const float *inp,
                                    const float *w, const float *b, int N, int C) {
  int row = (int)((blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
  if (row >= N) return;
  const float *x = inp + (size_t)row * C;
  float s = 0;
  for (int c = lane; c < C; c += 32) s += x[c];
  float m = warp_sum(s) / C;
  float v = 0;
  for (int c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
  float r = rsqrtf(warp_sum(v) / C + 1e-5f);
  size_t o = (size_t)row * C;
  for (int c = lane; c < C; c += 32) store_act(out, o16, o + c, (x[c] - m) * r * w[c] + b[c]);
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

/* gpt2_rows.h's LayerNorm backward with its weight's and bias's
 * gradients (block s = blockIdx.x of rw_ln_plan(N)). */
__global__ void __launch_bounds__(RW_LN_NT)
    k_layernorm_backward(float *dinp, float *dw, float *db, float *part, const void *dout, int d16,
                         int f16, const float *inp, const float *w, const float *mean,
                         const float *rstd, int N, int C, rw_plan p) {
  __shared__ rw_ln_smem sm;
  rw_layernorm_backward_block(dinp, dw, db, part, dout, d16, f16, inp, w, mean, rstd, N, C, p,
                              (int)blockIdx.x, &sm);
}

/* A bias's gradient: gpt2_rows.h's column sums, block (blockIdx.x,
 * blockIdx.y) of rw_col_plan(N, OC). */
__global__ void __launch_bounds__(RW_COL_NT) k_colsum(float *db, float *part, const void *dout,
                                                      int in16, int f16, int N, int OC, rw_plan p) {
  __shared__ rw_col_smem sm;
  rw_colsum_block(db, part, dout, in16, f16, N, OC, p, (int)blockIdx.x, (int)blockIdx.y, &sm);
}

/* The partials' rows added to o0 (columns below W0) and o1. */
__global__ void __launch_bounds__(RW_COL_NT)
    k_part_fold(float *o0, float *o1, int W0, const float *part, int S, int W) {
  __shared__ rw_col_smem sm;
  rw_part_fold_block(o0, o1, W0, part, S, W, (int)blockIdx.x, &sm);
}

__global__ void __launch_bounds__(FA_NT) k_fa_forward(float *out, float *lse, const float *qkv,
                                                      const float *bias, int T, int C, int NH) {
  __shared__ fa_fwd_smem sm;
  fa_fwd_ts ts[1];
  fa_forward_block(qkv, bias, out, lse, T, C, NH, (int)blockIdx.x, (int)blockIdx.y, &sm, ts);
}

__global__ void __launch_bounds__(FA_NT)
    k_fa_dq(float *dqkv, float *dstat, const float *dout, const float *qkv, const float *bias,
            const float *lse, int T, int C, int NH) {
  __shared__ fa_dq_smem sm;
  fa_dq_ts ts[1];
  fa_dq_block(dqkv, dstat, dout, qkv, bias, lse, T, C, NH, (int)blockIdx.x, (int)blockIdx.y, &sm,
              ts);
}

/* The tensor-core attention of 16-bit runs (gpt2_flash_tc.h): 64 rows a
 * block; F16: fp16 operands (else bf16), a constant of each instance so
 * that the block functions (inlined) carry no branch on it. */
template <int F16>
__global__ void __launch_bounds__(TC_NT)
    k_tc_forward(void *out, int o16, float *lse, const float *qkv, const float *bias, int T, int C,
                 int NH) {
  const int f16 = F16;
  __shared__ tc_fwd_smem sm;
  tc_fwd_lane st[1];
  tc_forward_block(qkv, bias, out, o16, lse, T, C, NH, (int)blockIdx.x, (int)blockIdx.y, f16, &sm,
                   st);
}

template <int F16>
__global__ void __launch_bounds__(TC_NT)
    k_tc_dq(void *dqkv, int d16, float *dstat, const void *dout, int do16, const float *qkv,
            const float *bias, const void *out, int o16, const float *lse, int T, int C, int NH) {
  const int f16 = F16;
  __shared__ tc_dq_smem sm;
  tc_dq_lane st[1];
  tc_dq_block(dqkv, d16, dstat, dout, do16, qkv, bias, out, o16, lse, T, C, NH, (int)blockIdx.x,
              (int)blockIdx.y, f16, &sm, st);
}

template <int F16>
__global__ void __launch_bounds__(TC_NT)
    k_tc_dkv(void *dqkv, int d16, const void *dout, int do16, const float *qkv, const float *bias,
             const float *lse, const float *dstat, int T, int C, int NH) {
  const int f16 = F16;
  __shared__ tc_dkv_smem sm;
  tc_dkv_lane st[1];
  tc_dkv_block(dqkv, d16, dout, do16, qkv, bias, lse, dstat, T, C, NH, (int)blockIdx.x,
               (int)blockIdx.y, f16, &sm, st);
}

__global__ void __launch_bounds__(FA_NT)
    k_fa_dkv(float *dqkv, const float *dout, const float *qkv, const float *bias, const float *lse,
             const float *dstat, int T, int C, int NH) {
  __shared__ fa_dkv_smem sm;
  fa_dkv_ts ts[1];
  fa_dkv_block(dqkv, dout, qkv, bias, lse, dstat, T, C, NH, (int)blockIdx.x, (int)blockIdx.y, &sm,
               ts);
}

/* dst (packed rows x cols, dtype dt) = src (rows x cols, row stride ld) */
__global__ void k_f32_to_16(void *dst, const float *src, int64_t ld, int64_t rows, int64_t cols,
                            int dt) {
  int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= rows * cols) return;
  float x = src[(e / cols) * ld + e % cols];
  if (dt == ZRT_BF16)
    ((__nv_bfloat16 *)dst)[e] = __float2bfloat16(x);
  else
    ((__half *)dst)[e] = __float2half(x);
}

/* values in [-1, 1) from the index (a hash): operands of the peak GEMM */
__global__ void k_fill16(void *dst, int64_t n, int dt) {
  int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= n) return;
  uint32_t h = (uint32_t)e * 2654435761u;
  h ^= h >> 15;
  float x = (float)(h & 0xffff) / 32768.0f - 1.0f;
  if (dt == ZRT_BF16)
    ((__nv_bfloat16 *)dst)[e] = __float2bfloat16(x);
  else
    ((__half *)dst)[e] = __float2half(x);
}

/* out = gelu(inp + bias), [N, OC] (bias NULL: none). out: see store_act;
 * inp: fp32, or with i16 the 16-bit fch (gpt2_act16.h) of type f16. */
__global__ void k_gelu_forward(void *out, int o16, const void *inp, int i16, int f16,
                               const float *bias, int N, int OC) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)N * OC) return;
  float x = rw_act(inp, i, i16, f16) + (bias ? bias[i % (size_t)OC] : 0.0f);
  store_act(out, o16, i, 0.5f * x * (1.0f + tanhf(RW_GELU_S * (x + 0.044715f * x * x * x))));
}

/* dinp = dout * gelu'(inp + bias), without the bias's gradient
 * (k_gelu_colsum has it). */
__global__ void k_gelu_backward(float *dinp, const void *inp, int i16, int f16, const float *bias,
                                const float *dout, int N, int OC) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)N * OC) return;
  dinp[i] = dout[i] * rw_gelu_grad(rw_act(inp, i, i16, f16) + (bias ? bias[i % (size_t)OC] : 0.0f));
}

/* gpt2_rows.h's fused GELU backward and bias gradient. */
__global__ void __launch_bounds__(RW_COL_NT)
    k_gelu_colsum(float *dinp, float *db, float *part, const void *dout, int d16, const void *inp,
                  int i16, const float *bias, int N, int OC, rw_plan p, uint16_t *g16, int f16) {
  __shared__ rw_col_smem sm;
  rw_gelu_colsum_block(dinp, db, part, dout, d16, inp, i16, bias, N, OC, p, (int)blockIdx.x,
                       (int)blockIdx.y, &sm, g16, f16);
}

/* out = a + (b + bias), [N, C] (bias NULL: none); b: fp32, or with b16
 * 16-bit elements of the type f16 selects (a 16-bit run's dC slot: the
 * projection GEMM's 16-bit C). */
__global__ void k_residual(float *out, const float *a, const void *b, int b16, int f16,
                           const float *bias, int N, int C) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (size_t)N * C)
    out[i] = a[i] + (rw_act(b, i, b16, f16) + (bias ? bias[i % (size_t)C] : 0.0f));
}

/* One block per row (gpt2_rows.h). */
__global__ void __launch_bounds__(RW_CE_NT)
    k_crossentropy(float *losses, void *logits, int in16, const int *targets, int V, int ld,
                   float dloss, uint16_t *g16, int f16) {
  __shared__ rw_ce_smem sm;
  rw_crossentropy_block(losses, logits, in16, targets, V, ld, dloss, (int)blockIdx.x, &sm, g16,
                        f16);
}

__global__ void k_to_f32(float *dst, const void *src, int dt, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (dt == ZRT_BF16)
    dst[i] = __bfloat162float(((const __nv_bfloat16 *)src)[i]);
  else if (dt == ZRT_F16)
    dst[i] = __half2float(((const __half *)src)[i]);
  else
    dst[i] = ((const float *)src)[i];
}

__global__ void k_add_from_f32(void *dst, const float *src, int dt, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (dt == ZRT_BF16) {
    __nv_bfloat16 *d = (__nv_bfloat16 *)dst;
    d[i] = __float2bfloat16(__bfloat162float(d[i]) + src[i]);
  } else if (dt == ZRT_F16) {
    __half *d = (__half *)dst;
    d[i] = __float2half(__half2float(d[i]) + src[i]);
  } else {
    ((float *)dst)[i] += src[i];
  }
}

/* ------------------------------------------------------ host wrappers */

#define TPB 256

/* The engine's stream (zrt_engine_stream): every launch and memset of this
 * file goes there, never to the legacy default stream, which the engine's
 * non-blocking stream does not wait for. Set by gpt2_cuda_set_stream
 * before the first launch. */
static cudaStream_t g_stream;

/* The GEMM dtype of the run and the scratch (gpt2_cuda_gemm_setup). */
static zrt_dtype g_gemm_dt = ZRT_F32;
static char *g_scratch;
static size_t g_scratch_bytes;
/* The 16-bit weight matrices of the module being run (gpt2_cuda_weight16). */
#define GPT2_CUDA_MAX_W16 8
static struct {
  const char *p;
  size_t bytes;
} g_w16[GPT2_CUDA_MAX_W16];
static int g_nw16;
/* The 16-bit gradients the module's dW GEMMs add into as they are
 * (gpt2_cuda_grad16): a GEMM whose C starts in one writes a 16-bit C. */
static struct {
  const char *p;
  size_t bytes;
} g_g16c[GPT2_CUDA_MAX_W16];
static int g_ng16c;

/* The 16-bit copy of an fp32 activation that its producer wrote instead of
 * it, for buffers that are no 16-bit slot (the ops' general form: a
 * training run's passes use the slots; gpt2_cuda_scratch_bytes does not
 * count these copies, the caller's scratch must hold them) (in a 16-bit
 * run, in the run's dtype, at the scratch's start,
 * g_scratch_res bytes): the cross-entropy's gradient of the logits, the
 * GELU backward's gradient of fch (with the fc bias's gradient), and the
 * tensor-core attention backward's dqkv (also read by the qkv bias's
 * gradient, cu_bias_backward). A GEMM
 * operand inside the fp32 range is read from the copy, at the same element
 * offset and stride, instead of being rounded into the scratch (same bits:
 * both round to nearest even). The fp32 range does not hold those values:
 * only the GEMMs that directly follow the producer may read it, and any
 * other op of the table voids the copy (r16_forget). The audit
 * (gpt2_act16.c) checks on every backend that no other op reads the range
 * in between. */
static struct {
  const char *p, *t16;
  size_t bytes; /* of the fp32 range */
} g_t16;
static size_t g_scratch_res;

/* The held copy is void (any op but a GEMM, a GEMM writing over its
 * source, the next module's staging): the scratch is free again. */
static void t16_drop(void) {
  memset(&g_t16, 0, sizeof g_t16);
  g_scratch_res = 0;
}

/* The held 16-bit copy of the fp32 range [p, p + n floats) at the
 * scratch's start, or NULL (an fp32 run, or a scratch too small for it and
 * the `after` bytes its producer places after it: the caller's scratch, not
 * gpt2_cuda_scratch_bytes; the producer writes the fp32 values then, the
 * same numbers). */
static uint16_t *t16_hold(const float *p, size_t n, size_t after) {
  size_t res = (n * 2 + 255) / 256 * 256;
  if (g_gemm_dt == ZRT_F32 || res + after > g_scratch_bytes) return NULL;
  g_t16.p = (const char *)p;
  g_t16.bytes = n * sizeof(float);
  g_t16.t16 = g_scratch;
  g_scratch_res = res;
  return (uint16_t *)g_scratch;
}

static const void *twin16(const void *p, int64_t ld, int64_t rows, int64_t cols) {
  const char *c = (const char *)p;
  size_t last = ((size_t)(rows - 1) * (size_t)ld + (size_t)cols) * sizeof(float);
  if (!g_t16.p || c < g_t16.p || c + last > g_t16.p + g_t16.bytes) return NULL;
  return g_t16.t16 + (size_t)(c - g_t16.p) / 2;
}

/* A 16-bit run's 16-bit activation slot (gpt2_act16.h): written in the
 * run's dtype by its producer, read as is by the GEMMs (and the
 * attention backward). The dtype (ZRT_BF16 / ZRT_F16), 0 elsewhere. */
static int o16_at(const void *p) {
  return g_gemm_dt != ZRT_F32 && gpt2_a16_is(p) ? (int)g_gemm_dt : 0;
}

static int is_w16(const void *p) {
  for (int i = 0; i < g_nw16; i++)
    if ((const char *)p >= g_w16[i].p && (const char *)p < g_w16[i].p + g_w16[i].bytes) return 1;
  return 0;
}

/* 1 when C's m x n (rows ldc apart) lies inside a registered 16-bit
 * gradient (gpt2_cuda_grad16); -1 when it starts in one and runs past
 * its end (this file's caller's mistake); else 0. */
static int is_g16c(const void *c, int64_t m, int64_t n, int64_t ldc) {
  const char *q = (const char *)c;
  size_t span = ((size_t)(m - 1) * (size_t)ldc + (size_t)n) * 2;
  for (int i = 0; i < g_ng16c; i++)
    if (q >= g_g16c[i].p && q < g_g16c[i].p + g_g16c[i].bytes)
      return q + span <= g_g16c[i].p + g_g16c[i].bytes ? 1 : -1;
  return 0;
}

/* Where the GEMMs' 16-bit operands are (gpt2_gemm16.h): rounded copies
 * reused by the next GEMM that takes the same operand. Every other entry
 * point of this file calls r16_forget first: it may write a copy's source
 * or the scratch. */
static g16_state g_g16;
static void r16_forget(void) {
  g16_forget(&g_g16);
  t16_drop();
}

static zrt_status cu_gemm(void *ctx, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                          float *c, int64_t ldc) {
  if (g_gemm_dt == ZRT_F32)
    return zrt_engine_gemm((zrt_engine *)ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, ZRT_F32, beta,
                           c, ldc, ZRT_F32);
  /* op(A) is m x k: stored m x k, or k x m when transposed; likewise B */
  const float *src[2] = {a, b};
  int64_t ld[2] = {lda, ldb}, rows[2] = {ta ? k : m, tb ? n : k},
          cols[2] = {ta ? m : k, tb ? k : n};
  const void *p16[2] = {a, b};
  int64_t ld16[2] = {lda, ldb};
  g16_operand op[2];
  for (int i = 0; i < 2; i++) {
    op[i] = (g16_operand){src[i], ld[i], rows[i], cols[i], 0, 0, 0};
    /* the engine's 16-bit weight, or a 16-bit activation, as is */
    if (is_w16(src[i]) || o16_at(src[i])) continue;
    const void *t = twin16(src[i], ld[i], rows[i], cols[i]);
    if (t)
      p16[i] = t; /* a held 16-bit copy, same stride */
    else
      op[i].round = 1;
  }
  /* C in the run's dtype when it is a 16-bit slot (a 16-bit run's fch,
   * logits, d4C or dC, gpt2_act16.h: beta 0) or a registered 16-bit
   * gradient (gpt2_cuda_grad16: the dW GEMMs add into the engine's
   * gradient, beta 1, rounded once); else fp32 */
  const int gc = is_g16c(c, m, n, ldc);
  if (gc < 0) {
    fprintf(stderr,
            "train_gpt2: internal error: a %lldx%lld GEMM's C at %p runs past the end of the "
            "registered 16-bit gradient it starts in\n",
            (long long)m, (long long)n, (void *)c);
    return ZRT_ERR_INTERNAL;
  }
  const int c16 = gc ? (int)g_gemm_dt : o16_at(c);
  if (c16 && !gc && beta != 0.0f) {
    fprintf(stderr,
            "train_gpt2: internal error: a GEMM accumulates (beta %g) into the 16-bit "
            "activation slot at %p; only a beta-0 GEMM may write it\n",
            (double)beta, (void *)c);
    return ZRT_ERR_INTERNAL;
  }
  /* a C over the held copy's fp32 range voids the copy */
  const char *c0 = (const char *)c, *c1 = c0 + ((size_t)(m - 1) * (size_t)ldc + (size_t)n) * 4;
  int c_over_t16 = g_t16.p && c0 < g_t16.p + g_t16.bytes && g_t16.p < c1;
  g_g16.scratch_bytes = g_scratch_bytes;
  g_g16.res = g_scratch_res;
  if (!g16_plan(&g_g16, op, c, m, n, ldc)) {
    fprintf(
        stderr,
        "train_gpt2: CUDA GEMM scratch too small for the 16-bit operands of a %lldx%lld by "
        "%lldx%lld GEMM (%zu bytes, %zu held; gpt2_cuda_scratch_bytes undercounts this shape)\n",
        (long long)rows[0], (long long)cols[0], (long long)rows[1], (long long)cols[1],
        g_scratch_bytes, g_scratch_res);
    return ZRT_ERR_INTERNAL;
  }
  for (int i = 0; i < 2; i++) {
    if (!op[i].round) continue;
    p16[i] = g_scratch + op[i].at;
    ld16[i] = cols[i];
    if (!op[i].reused)
      k_f32_to_16<<<nblocks((size_t)(rows[i] * cols[i]), TPB), TPB, 0, g_stream>>>(
          g_scratch + op[i].at, src[i], ld[i], rows[i], cols[i], (int)g_gemm_dt);
  }
  if (c_over_t16) t16_drop();
  return zrt_engine_gemm((zrt_engine *)ctx, ta, tb, m, n, k, alpha, p16[0], ld16[0], p16[1],
                         ld16[1], g_gemm_dt, beta, c, ldc, c16 ? (zrt_dtype)c16 : ZRT_F32);
}
static void cu_zero(float *p, size_t n) {
  r16_forget();
  cudaMemsetAsync(p, 0, n * sizeof(float), g_stream);
}
static void cu_encoder_forward(float *out, const int *tok, const float *wte, const float *wpe,
                               int B, int T, int C) {
  r16_forget();
  /* the 16-bit wte and wpe as they are when registered (train_gpt2's
   * stage_weights: a 16-bit run's embedding forward) */
  k_encoder_forward<<<nblocks((size_t)B * T * C, TPB), TPB, 0, g_stream>>>(
      out, tok, wte, is_w16(wte), wpe, is_w16(wpe), g_gemm_dt == ZRT_F16, B, T, C);
}
static void cu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tok, int B,
                                int T, int C) {
  r16_forget();
  k_encoder_backward<<<nblocks((size_t)B * T * C, TPB), TPB, 0, g_stream>>>(dwte, dwpe, dout, tok,
                                                                            B, T, C);
}
static void cu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                 const float *w, const float *b, int N, int C) {
  r16_forget();
  k_layernorm_forward<<<nblocks((size_t)N * 32, TPB), TPB, 0, g_stream>>>(out, o16_at(out), mean,
                                                                          rstd, inp, w, b, N, C);
}
/* The partials of a split column reduction (gpt2_rows.h's rw_plan, W
 * output columns): in the scratch after the held 16-bit copy (the one the
 * reduction may be reading or writing; a training run's passes hold none:
 * gpt2_cuda_scratch_bytes counts the partials alone), NULL when none are
 * needed. A scratch too small is this file's mistake: the sticky error
 * cu_check reports, and no launch. */
static zrt_status g_err = ZRT_OK;
static float *part_at(rw_plan p, int W, int *ok) {
  size_t bytes = rw_part_floats(p, W) * sizeof(float);
  *ok = 1;
  if (!bytes) return NULL;
  if (g_scratch_res + bytes > g_scratch_bytes) {
    fprintf(stderr,
            "train_gpt2: internal error: the CUDA scratch (%zu bytes, %zu held) is below the "
            "%zu bytes of a column reduction's partials (%d chunks of %d columns; "
            "gpt2_cuda_scratch_bytes undercounts this shape)\n",
            g_scratch_bytes, g_scratch_res, bytes, p.S, W);
    g_err = ZRT_ERR_INTERNAL;
    *ok = 0;
    return NULL;
  }
  return (float *)(g_scratch + g_scratch_res);
}
/* The partials' S rows added in order to o0 (columns below W0) and o1. */
static void part_fold(float *o0, float *o1, int W0, const float *part, rw_plan p, int W) {
  if (part)
    k_part_fold<<<nblocks((size_t)W, RW_COLS), RW_COL_NT, 0, g_stream>>>(o0, o1, W0, part, p.S, W);
}
static void cu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                  const float *inp, const float *w, const float *mean,
                                  const float *rstd, int N, int C) {
  r16_forget();
  if (N <= 0) return;
  rw_plan p = rw_ln_plan(N);
  int ok;
  float *part = part_at(p, 2 * C, &ok);
  if (!ok) return;
  /* dout: the 16-bit dC slot in a registered 16-bit run (gpt2_act16.h) */
  k_layernorm_backward<<<(unsigned)p.S, RW_LN_NT, 0, g_stream>>>(
      dinp, dw, db, part, dout, o16_at(dout) != 0, g_gemm_dt == ZRT_F16, inp, w, mean, rstd, N, C,
      p);
  part_fold(dw, db, C, part, p, 2 * C);
}
/* A bias's gradient: from the held 16-bit copy when dout lies in its range
 * (then the copy is void, after the reduction: its partials lie beyond the
 * copy), or from a 16-bit slot (a 16-bit run's d4C: the attention
 * backward's dqkv). */
static void cu_bias_backward(float *db, const float *dout, int N, int OC) {
  const void *t = N > 0 ? twin16(dout, OC, N, OC) : NULL;
  if (!t) r16_forget();
  if (!t && o16_at(dout)) t = dout; /* the 16-bit d4C slot (the qkv bias's dqkv) */
  if (N > 0) {
    rw_plan p = rw_col_plan(N, OC);
    int ok;
    float *part = part_at(p, OC, &ok);
    if (ok) {
      k_colsum<<<dim3((unsigned)p.G, (unsigned)p.S), RW_COL_NT, 0, g_stream>>>(
          db, part, t ? t : dout, t != NULL, g_gemm_dt == ZRT_F16, N, OC, p);
      part_fold(db, NULL, OC, part, p, OC);
    }
  }
  r16_forget();
}
static zrt_status fa_shape_ok(int B, int T, int C, int NH) {
  (void)T;
  if (NH > 0 && C % NH == 0 && C / NH <= FA_HS && B * NH <= 65535) return ZRT_OK;
  fprintf(stderr,
          "train_gpt2: the fused CUDA attention takes a head size (n_embd / n_head) of at most "
          "%d and B * n_head <= 65535; this model has n_embd %d, n_head %d, micro-batch %d: "
          "raise --n_head (n_embd %% n_head == 0) or lower --batch_size\n",
          FA_HS, C, NH, B);
  return ZRT_ERR_UNSUPPORTED;
}
static zrt_status cu_attention_forward(void *ctx, float *out, float *att, const float *qkv,
                                       const float *bias, int B, int T, int C, int NH) {
  r16_forget();
  (void)ctx;
  zrt_status st = fa_shape_ok(B, T, C, NH);
  if (st != ZRT_OK) return st;
  if (g_gemm_dt != ZRT_F32) { /* tensor cores, operands rounded as the GEMMs' */
    dim3 grid((unsigned)((T + TC_ROWS - 1) / TC_ROWS), (unsigned)(B * NH));
    if (g_gemm_dt == ZRT_F16)
      k_tc_forward<1>
          <<<grid, TC_NT, 0, g_stream>>>(out, o16_at(out), att /* lse rows */, qkv, bias, T, C, NH);
    else
      k_tc_forward<0>
          <<<grid, TC_NT, 0, g_stream>>>(out, o16_at(out), att /* lse rows */, qkv, bias, T, C, NH);
    return ZRT_OK;
  }
  dim3 grid((unsigned)((T + FA_TILE - 1) / FA_TILE), (unsigned)(B * NH));
  k_fa_forward<<<grid, FA_NT, 0, g_stream>>>(out, att /* lse rows */, qkv, bias, T, C, NH);
  return ZRT_OK; /* launch errors: the pass's check() */
}
static zrt_status cu_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                        const float *bias, const float *out, const float *att,
                                        int B, int T, int C, int NH) {
  r16_forget(); /* also voids an earlier held copy */
  (void)ctx;
  zrt_status st = fa_shape_ok(B, T, C, NH);
  if (st != ZRT_OK) return st;
  size_t dbytes = (size_t)B * NH * T * sizeof(float), n3 = (size_t)B * T * 3 * (size_t)C;
  /* a 16-bit run: dqkv in the 16-bit d4C slot, or for a dqkv that is no
   * slot only as the 16-bit copy the qkv GEMMs and the qkv bias's gradient
   * read next (held), when the caller's scratch holds it beside D's rows
   * and the bias gradient's partials; else fp32 */
  void *dst = dqkv;
  int d16 = o16_at(dqkv) != 0; /* the 16-bit d4C slot (gpt2_act16.h): written there */
  if (!d16) {
    const size_t part3 = rw_part_floats(rw_col_plan(B * T, 3 * C), 3 * C) * sizeof(float);
    uint16_t *t = t16_hold(dqkv, n3, dbytes > part3 ? dbytes : part3);
    if (t) dst = t, d16 = 1;
  }
  if (g_scratch_res + dbytes > g_scratch_bytes) {
    fprintf(stderr, "train_gpt2: CUDA scratch of %zu bytes is below the attention's %zu\n",
            g_scratch_bytes, dbytes);
    return ZRT_ERR_INTERNAL;
  }
  /* free between GEMMs (stream order), after the held 16-bit copy */
  float *dstat = (float *)(g_scratch + g_scratch_res);
  const int do16 = o16_at(dout) != 0; /* the 16-bit dC slot (gpt2_act16.h) */
  if (g_gemm_dt != ZRT_F32) {
    dim3 grid((unsigned)((T + TC_ROWS - 1) / TC_ROWS), (unsigned)(B * NH));
    if (g_gemm_dt == ZRT_F16) {
      k_tc_dq<1><<<grid, TC_NT, 0, g_stream>>>(dst, d16, dstat, dout, do16, qkv, bias, out,
                                               o16_at(out), att, T, C, NH);
      k_tc_dkv<1>
          <<<grid, TC_NT, 0, g_stream>>>(dst, d16, dout, do16, qkv, bias, att, dstat, T, C, NH);
    } else {
      k_tc_dq<0><<<grid, TC_NT, 0, g_stream>>>(dst, d16, dstat, dout, do16, qkv, bias, out,
                                               o16_at(out), att, T, C, NH);
      k_tc_dkv<0>
          <<<grid, TC_NT, 0, g_stream>>>(dst, d16, dout, do16, qkv, bias, att, dstat, T, C, NH);
    }
    return ZRT_OK;
  }
  (void)out; /* the fp32 kernels find D from P and dP */
  dim3 grid((unsigned)((T + FA_TILE - 1) / FA_TILE), (unsigned)(B * NH));
  k_fa_dq<<<grid, FA_NT, 0, g_stream>>>(dqkv, dstat, dout, qkv, bias, att, T, C, NH);
  k_fa_dkv<<<grid, FA_NT, 0, g_stream>>>(dqkv, dout, qkv, bias, att, dstat, T, C, NH);
  return ZRT_OK;
}
static void cu_gelu_forward(float *out, const float *inp, const float *bias, int N, int OC) {
  r16_forget();
  k_gelu_forward<<<nblocks((size_t)N * OC, TPB), TPB, 0, g_stream>>>(
      out, o16_at(out), inp, o16_at(inp) != 0, g_gemm_dt == ZRT_F16, bias, N, OC);
}
static void cu_gelu_backward(float *dinp, float *db, const float *inp, const float *bias,
                             const float *dout, int N, int OC) {
  r16_forget(); /* also voids an earlier held copy */
  const int d16 = o16_at(dout) != 0;
  if (d16 && (!db || dinp != dout)) { /* only the passes' form reads a 16-bit dout */
    fprintf(stderr,
            "train_gpt2: internal error: the GELU backward reads the 16-bit slot at %p as its "
            "dout but %s; only the in-place form with the bias's gradient takes one\n",
            (const void *)dout, db ? "writes dinp elsewhere" : "has no bias gradient");
    g_err = ZRT_ERR_INTERNAL;
    return;
  }
  if (db) { /* the passes' form: the MLP's dX and dW GEMMs read the 16-bit gradient next */
    if (N <= 0) return;
    /* over the 16-bit d4C slot in place (gpt2_act16.h), or the held copy */
    rw_plan p = rw_col_plan(N, OC);
    const size_t pb = rw_part_floats(p, OC) * sizeof(float);
    uint16_t *g16 = d16 ? (uint16_t *)dinp : t16_hold(dinp, (size_t)N * OC, pb);
    int ok;
    float *part = part_at(p, OC, &ok); /* after the copy */
    if (!ok) {
      t16_drop();
      return;
    }
    k_gelu_colsum<<<dim3((unsigned)p.G, (unsigned)p.S), RW_COL_NT, 0, g_stream>>>(
        dinp, db, part, dout, d16, inp, o16_at(inp) != 0, bias, N, OC, p, g16,
        g_gemm_dt == ZRT_F16);
    part_fold(db, NULL, OC, part, p, OC);
  } else
    k_gelu_backward<<<nblocks((size_t)N * OC, TPB), TPB, 0, g_stream>>>(
        dinp, inp, o16_at(inp) != 0, g_gemm_dt == ZRT_F16, bias, dout, N, OC);
}
static void cu_residual(float *out, const float *a, const float *b, const float *bias, int N,
                        int C) {
  r16_forget();
  k_residual<<<nblocks((size_t)N * C, TPB), TPB, 0, g_stream>>>(out, a, b, o16_at(b) != 0,
                                                                g_gemm_dt == ZRT_F16, bias, N, C);
}
static void cu_crossentropy(float *losses, float *logits, const int *targets, int N, int V, int ld,
                            float dloss) {
  r16_forget(); /* also voids an earlier held copy */
  if (N <= 0) return;
  /* a 16-bit run's logits slot (gpt2_act16.h, the head GEMM's 16-bit C):
   * read as it is, the gradient written over it in 16 bits, where the
   * head's two GEMMs read it. Else, in a 16-bit run's backward, the
   * gradient as the held 16-bit copy those GEMMs read; the logits stay. */
  const int in16 = o16_at(logits) != 0;
  uint16_t *g16 = NULL;
  if (dloss != 0.0f) g16 = in16 ? (uint16_t *)logits : t16_hold(logits, (size_t)N * (size_t)ld, 0);
  k_crossentropy<<<(unsigned)N, RW_CE_NT, 0, g_stream>>>(losses, logits, in16, targets, V, ld,
                                                         dloss, g16, g_gemm_dt == ZRT_F16);
}
static zrt_status cu_check(void) {
  if (g_err != ZRT_OK) {
    zrt_status st = g_err;
    g_err = ZRT_OK;
    return st;
  }
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return ZRT_OK;
  fprintf(stderr, "train_gpt2: CUDA kernel failed: %s\n", cudaGetErrorString(e));
  return ZRT_ERR_CUDA;
}

static gpt2_ops_f32 make_cuda_ops(void) {
  gpt2_ops_f32 o;
  o.ctx = NULL;
  o.gemm = cu_gemm;
  o.zero = cu_zero;
  o.encoder_forward = cu_encoder_forward;
  o.encoder_backward = cu_encoder_backward;
  o.layernorm_forward = cu_layernorm_forward;
  o.layernorm_backward = cu_layernorm_backward;
  o.bias_backward = cu_bias_backward;
  o.attention_forward = cu_attention_forward;
  o.attention_backward = cu_attention_backward;
  o.gelu_forward = cu_gelu_forward;
  o.gelu_backward = cu_gelu_backward;
  o.residual_forward = cu_residual;
  o.crossentropy = cu_crossentropy;
  o.check = cu_check;
  return o;
}

extern "C" {
const gpt2_ops_f32 gpt2_cuda_ops_f32 = make_cuda_ops();

void gpt2_cuda_set_stream(void *stream) { g_stream = (cudaStream_t)stream; }

void gpt2_cuda_gemm_setup(zrt_dtype dt, void *scratch, size_t bytes) {
  g_gemm_dt = dt;
  g_scratch = (char *)scratch;
  g_scratch_bytes = bytes;
  gpt2_cuda_weight16_clear();
}

void gpt2_cuda_weight16_clear(void) {
  r16_forget(); /* the scratch's held 16-bit copy goes too */
  g_nw16 = 0;
}

int gpt2_cuda_weight16(const void *raw, int64_t n) {
  if (g_gemm_dt == ZRT_F32 || g_nw16 == GPT2_CUDA_MAX_W16) return -1;
  g_w16[g_nw16].p = (const char *)raw;
  g_w16[g_nw16].bytes = (size_t)n * 2;
  g_nw16++;
  return 0;
}

int gpt2_cuda_grad16(void *raw, int64_t n) {
  if (g_gemm_dt == ZRT_F32 || g_ng16c == GPT2_CUDA_MAX_W16) return -1;
  g_g16c[g_ng16c].p = (const char *)raw;
  g_g16c[g_ng16c].bytes = (size_t)n * 2;
  g_ng16c++;
  return 0;
}

void gpt2_cuda_grad16_clear(void) { g_ng16c = 0; }

void gpt2_cuda_fill16(void *dst, zrt_dtype dt, int64_t n) {
  r16_forget();
  k_fill16<<<nblocks((size_t)n, TPB), TPB, 0, g_stream>>>(dst, n, (int)dt);
}

void gpt2_cuda_to_f32(float *dst, const void *src, zrt_dtype dt, int64_t n) {
  r16_forget();
  k_to_f32<<<nblocks((size_t)n, TPB), TPB, 0, g_stream>>>(dst, src, (int)dt, n);
}
void gpt2_cuda_add_from_f32(void *dst, const float *src, zrt_dtype dt, int64_t n) {
  r16_forget();
  k_add_from_f32<<<nblocks((size_t)n, TPB), TPB, 0, g_stream>>>(dst, src, (int)dt, n);
}
/* The op profile's clock (gpt2_prof.h): timing events around each call. */
#define GPT2_CUDA_PROF_PAIRS 4096
static struct {
  cudaEvent_t ev[2 * GPT2_CUDA_PROF_PAIRS];
  int kind[GPT2_CUDA_PROF_PAIRS];
  int n;       /* pairs recorded since the last drain */
  int created; /* events made */
  cudaError_t err;
  double ms[GPT2_PROF_KINDS];
} g_prof_ev;

static void prof_keep(cudaError_t e) {
  if (e != cudaSuccess && g_prof_ev.err == cudaSuccess) g_prof_ev.err = e;
}

/* Waits for the recorded pairs and adds their times up. */
static void prof_drain(void) {
  if (!g_prof_ev.n) return;
  prof_keep(cudaEventSynchronize(g_prof_ev.ev[2 * g_prof_ev.n - 1]));
  for (int i = 0; i < g_prof_ev.n && g_prof_ev.err == cudaSuccess; i++) {
    float ms = 0;
    prof_keep(cudaEventElapsedTime(&ms, g_prof_ev.ev[2 * i], g_prof_ev.ev[2 * i + 1]));
    g_prof_ev.ms[g_prof_ev.kind[i]] += ms;
  }
  g_prof_ev.n = 0;
}

static void prof_mark(void *ctx, int kind, int end) {
  (void)ctx;
  if (!end) {
    if (g_prof_ev.n == GPT2_CUDA_PROF_PAIRS) prof_drain();
    g_prof_ev.kind[g_prof_ev.n] = kind;
    prof_keep(cudaEventRecord(g_prof_ev.ev[2 * g_prof_ev.n], g_stream));
  } else {
    prof_keep(cudaEventRecord(g_prof_ev.ev[2 * g_prof_ev.n + 1], g_stream));
    g_prof_ev.n++;
  }
}

static zrt_status prof_flush(void *ctx, double *ms) {
  (void)ctx;
  prof_drain();
  if (g_prof_ev.err != cudaSuccess) {
    fprintf(stderr, "train_gpt2: --profile_ops: CUDA timing events failed: %s\n",
            cudaGetErrorString(g_prof_ev.err));
    return ZRT_ERR_CUDA;
  }
  for (int k = 0; k < GPT2_PROF_KINDS; k++) ms[k] += g_prof_ev.ms[k];
  memset(g_prof_ev.ms, 0, sizeof g_prof_ev.ms);
  return ZRT_OK;
}

zrt_status gpt2_cuda_prof_clock(gpt2_prof_clock *out) {
  for (; g_prof_ev.created < 2 * GPT2_CUDA_PROF_PAIRS; g_prof_ev.created++) {
    cudaError_t e = cudaEventCreate(&g_prof_ev.ev[g_prof_ev.created]);
    if (e != cudaSuccess) {
      fprintf(stderr, "train_gpt2: --profile_ops: cudaEventCreate: %s\n", cudaGetErrorString(e));
      return ZRT_ERR_CUDA;
    }
  }
  g_prof_ev.n = 0;
  g_prof_ev.err = cudaSuccess;
  memset(g_prof_ev.ms, 0, sizeof g_prof_ev.ms);
  out->ctx = NULL;
  out->mark = prof_mark;
  out->flush = prof_flush;
  return ZRT_OK;
}
}
