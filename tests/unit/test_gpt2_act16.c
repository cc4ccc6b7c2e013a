/*
 * test_gpt2_act16.c — the 16-bit activations of a bf16 or fp16 run
 * (examples/gpt2/gpt2_act16.h), checked where no GPU is:
 *   - the registry marks exactly ln1, atty, ln2, fch, fch_gelu of every
 *     layer slot, lnf, the logits, dC and d4C, by their first element, and
 *     forgets them when cleared;
 *   - the model's real passes (forward, head with backward, backward with
 *     the recompute of checkpointed layers, 3 layers with 0 and 2 of them
 *     checkpointed) under the audit over the CPU ops: no violation, and
 *     exactly the writes and reads the passes' op sequence has (7 writes
 *     and 7 reads per block forward, 6 writes and 15 reads per block
 *     backward, 3 writes and 6 reads in the head), with losses bitwise
 *     equal to an unaudited
 *     run;
 *   - a CUDA 16-bit run's layout (GPT2_ACTS_HALF16) holds those slots in half
 *     the floats: GPT-2 124M at B = 8 saves exactly 5.5 N C floats per
 *     layer slot, N C / 2 for lnf, N V / 2 for the logits and 2.5 N C for
 *     d4C and dC (the printout gives the bytes); the
 *     passes over it (ops that do nothing, under the audit, with 0 and 2
 *     checkpointed layers) stay inside each slot's 16-bit extent with the
 *     same writes and reads as over the fp32 layout;
 *   - the emulation's GEMM rounds both operands (copies) to the dtype and
 *     accumulates in fp32 (against double on rounded values, 1e-5);
 *   - what gpu.test_gpt2_cuda's micro-step asserts, on the CUDA kernels'
 *     numbers emulated here (gpt2_emu.h, bf16 and fp16): registering the
 *     slots moves the loss (through the rounding of dC, fch and the
 *     logits, which the fp32-activation run keeps) and each gradient (also
 *     through d4C's rounding and D = dO . O read from the 16-bit O) by
 *     measured amounts (printed: loss 5.7e-6 / 2.4e-6 relative, gradients 1.04% / 0.10% of
 *     a tensor's largest entry, bf16 / fp16), under the GPU test's
 *     tolerances (1e-4; 5% bf16, 1% fp16) with a margin of 4 or more (a
 *     slot read in the wrong type moves them by O(1));
 *   - each way a change could read a 16-bit slot as fp32 is a violation
 *     that the table's check() returns (ZRT_ERR_INTERNAL) with a message
 *     naming the op, the argument and the slot: a non-GEMM reader (GELU
 *     backward of fch_gelu, a residual over atty), a GEMM operand that
 *     starts inside a slot, a GEMM writing C into one, a memset that
 *     overlaps a slot's first element, a LayerNorm backward reading the
 *     cross-entropy's gradient in the logits slot, a GEMM accumulating
 *     (beta 1) into the logits, a GEMM reading the logits before the
 *     cross-entropy wrote its gradient there.
 */
#include "../../examples/gpt2/gpt2_act16.c"
#include "../../examples/gpt2/gpt2_emu.c"
#include "../../examples/gpt2/gpt2_model.c"

#include <stdlib.h>
#include <unistd.h>

#include "ztest.h"

#define B 2
#define NL 3

static gpt2_config cfg;
static int nmod, mod_np[NL + 2];
static gpt2_param_spec specs[NL + 2][GPT2_BLOCK_NPARAMS];
static float *w[NL + 2][GPT2_BLOCK_NPARAMS], *g[NL + 2][GPT2_BLOCK_NPARAMS];
static int *tokens, *targets;

static uint64_t rng = 88172645463325252ull;
static float urand(void) { /* xorshift64, uniform in [-1, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((double)(rng >> 11) / (double)(1ull << 52) - 1.0);
}

/* One micro-batch as the trainer runs it: block inputs of checkpointed
 * layers kept (the engine's checkpoints) and recomputed before their
 * backward. Returns the summed loss. */
static double step(const gpt2_ops_f32 *ops, const gpt2_acts_layout *L, float *acts, int nckpt) {
  int N = B * cfg.seq_len, C = cfg.n_embd;
  float *ckpt[NL] = {0};
  ZT_OK(gpt2_embed_forward_f32(ops, &cfg, L, acts, tokens, B, w[0]));
  for (int l = 0; l < NL; l++) {
    if (l < nckpt) {
      ckpt[l] = malloc((size_t)N * C * sizeof(float));
      memcpy(ckpt[l], acts + gpt2_acts_block_input(L, l), (size_t)N * C * sizeof(float));
    }
    ZT_OK(gpt2_block_forward_f32(ops, &cfg, L, acts, B, l, NULL, w[1 + l]));
  }
  ZT_OK(gpt2_head_f32(ops, &cfg, L, acts, B, targets, w[NL + 1], w[0][GPT2_WTE], 1.0f / N,
                      g[NL + 1], g[0][GPT2_WTE]));
  double loss = 0;
  for (int i = 0; i < N; i++) loss += acts[L->losses + i];
  for (int l = NL - 1; l >= 0; l--) {
    if (l < nckpt) ZT_OK(gpt2_block_forward_f32(ops, &cfg, L, acts, B, l, ckpt[l], w[1 + l]));
    ZT_OK(gpt2_block_backward_f32(ops, &cfg, L, acts, B, l, ckpt[l], w[1 + l], g[1 + l]));
    free(ckpt[l]);
  }
  ZT_OK(gpt2_embed_backward_f32(ops, &cfg, L, acts, tokens, B, g[0]));
  return loss;
}

static void registry(const gpt2_acts_layout *L, const float *acts, int nckpt) {
  int slots = gpt2_acts_layer_slots(&cfg, nckpt);
  ZT_OK(gpt2_a16_set(L, &cfg, B, acts));
  size_t n = 0;
  for (size_t i = 0; i < L->total; i++) n += (size_t)gpt2_a16_is(acts + i);
  ZT_CHECK(n == (size_t)slots * 5 + 4); /* and lnf, the logits, dC, d4C */
  for (int s = 0; s < slots; s++) {
    const float *base = acts + L->layer_stride * (size_t)s;
    ZT_CHECK(gpt2_a16_is(base + L->ln1) && gpt2_a16_is(base + L->atty));
    ZT_CHECK(gpt2_a16_is(base + L->ln2) && gpt2_a16_is(base + L->fch_gelu));
    ZT_CHECK(gpt2_a16_is(base + L->fch));
    ZT_CHECK(!gpt2_a16_is(base + L->ln1 + 1) && !gpt2_a16_is(base + L->res2));
    ZT_CHECK(!gpt2_a16_is(base + L->qkv) && !gpt2_a16_is(base + L->res3));
  }
  ZT_CHECK(gpt2_a16_is(acts + L->lnf) && !gpt2_a16_is(acts + L->encoded));
  ZT_CHECK(gpt2_a16_is(acts + L->logits) && !gpt2_a16_is(acts + L->logits + 1));
  ZT_CHECK(gpt2_a16_is(acts + L->d4C) && !gpt2_a16_is(acts + L->d4C + 1));
  ZT_CHECK(gpt2_a16_is(acts + L->dC) && !gpt2_a16_is(acts + L->dC + 1));
  ZT_CHECK(!gpt2_a16_is(acts + L->losses) && !gpt2_a16_is(acts + L->dres));
  gpt2_a16_clear();
  ZT_CHECK(!gpt2_a16_is(acts + L->ln1) && !gpt2_a16_is(acts + L->lnf));
}

static void passes(int nckpt) {
  gpt2_acts_layout L;
  gpt2_acts_layout_init(&L, &cfg, B, nckpt, 0);
  float *acts = calloc(L.total, sizeof(float));
  registry(&L, acts, nckpt);
  double plain = step(&gpt2_cpu_ops_f32, &L, acts, nckpt);
  ZT_OK(gpt2_a16_set(&L, &cfg, B, acts));
  gpt2_ops_f32 audited;
  gpt2_a16_audit_start(&gpt2_cpu_ops_f32, &audited);
  double loss = step(&audited, &L, acts, nckpt);
  long wr, rd, bad;
  gpt2_a16_audit_counts(&wr, &rd, &bad);
  long fwd = NL + nckpt; /* block forwards, recomputes included */
  printf("nckpt %d: loss %.9g (unaudited %.9g), %ld slot writes, %ld reads, %ld violations\n",
         nckpt, loss, plain, wr, rd, bad);
  ZT_CHECK(loss == plain);
  ZT_CHECK(bad == 0);
  /* per block forward 7 writes (4 producers, the GEMMs' C: fc into fch,
   * the projections into dC) and 7 reads (4 GEMM operands, GELU's fch, the
   * residual adds' dC); per backward 6 writes (of d4C: the fcproj dX GEMM's
   * C, the GELU backward's dinp, the attention backward's dqkv; of dC: the
   * other three dX GEMMs' C) and 15 reads (4 GEMM operands of activations
   * and 4 of d4C, the attention's out and dout, GELU's fch and dout, the
   * qkv bias's gradient, the two LayerNorm backwards' dout); the head 3
   * writes (lnf, the logits GEMM's C, the dlnf GEMM's C) and 6 reads (lnf
   * by the logits and dwte GEMMs, the logits by the cross-entropy and the
   * dlnf and dwte GEMMs, dC by the lnf backward) */
  ZT_CHECK(wr == 7 * fwd + 6 * NL + 3);
  ZT_CHECK(rd == 7 * fwd + 15 * NL + 6);
  ZT_CHECK(audited.check() == ZRT_OK);
  gpt2_a16_clear();
  free(acts);
}

/* Ops that do nothing: the passes' pointers and extents only (the half
 * layout's slots are too small for the CPU ops' fp32 elements). */
static zrt_status n_gemm(void *ctx, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                         float *c, int64_t ldc) {
  (void)ctx, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda;
  (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
  return ZRT_OK;
}
static zrt_status n_attn_fwd(void *ctx, float *out, float *att, const float *qkv, const float *bias,
                             int B_, int T, int C, int NH) {
  (void)ctx, (void)out, (void)att, (void)qkv, (void)bias, (void)B_, (void)T, (void)C, (void)NH;
  return ZRT_OK;
}
static zrt_status n_attn_bwd(void *ctx, float *dqkv, const float *dout, const float *qkv,
                             const float *bias, const float *out, const float *att, int B_, int T,
                             int C, int NH) {
  (void)ctx, (void)dqkv, (void)dout, (void)qkv, (void)bias, (void)out, (void)att, (void)B_, (void)T;
  (void)C;
  (void)NH;
  return ZRT_OK;
}
static void n_zero(float *p, size_t n) { (void)p, (void)n; }
static void n_enc_fwd(float *o, const int *t, const float *a, const float *b, int x, int y, int z) {
  (void)o, (void)t, (void)a, (void)b, (void)x, (void)y, (void)z;
}
static void n_enc_bwd(float *o, float *p, const float *d, const int *t, int x, int y, int z) {
  (void)o, (void)p, (void)d, (void)t, (void)x, (void)y, (void)z;
}
static void n_ln_fwd(float *o, float *m, float *r, const float *i, const float *w, const float *b,
                     int N, int C) {
  (void)o, (void)m, (void)r, (void)i, (void)w, (void)b, (void)N, (void)C;
}
static void n_ln_bwd(float *di, float *dw, float *db, const float *d, const float *i,
                     const float *w, const float *m, const float *r, int N, int C) {
  (void)di, (void)dw, (void)db, (void)d, (void)i, (void)w, (void)m, (void)r, (void)N, (void)C;
}
static void n_bias(float *o, const float *b, int N, int OC) { (void)o, (void)b, (void)N, (void)OC; }
static void n_gelu_fwd(float *o, const float *i, const float *b, int N, int OC) {
  (void)o, (void)i, (void)b, (void)N, (void)OC;
}
static void n_gelu_bwd(float *di, float *db, const float *i, const float *b, const float *d, int N,
                       int OC) {
  (void)di, (void)db, (void)i, (void)b, (void)d, (void)N, (void)OC;
}
static void n_residual(float *o, const float *a, const float *b, const float *bias, int N, int C) {
  (void)o, (void)a, (void)b, (void)bias, (void)N, (void)C;
}
static void n_ce(float *l, float *g, const int *t, int N, int V, int ld, float d) {
  (void)l, (void)g, (void)t, (void)N, (void)V, (void)ld, (void)d;
}
static const gpt2_ops_f32 null_ops = {.gemm = n_gemm,
                                      .zero = n_zero,
                                      .encoder_forward = n_enc_fwd,
                                      .encoder_backward = n_enc_bwd,
                                      .layernorm_forward = n_ln_fwd,
                                      .layernorm_backward = n_ln_bwd,
                                      .bias_backward = n_bias,
                                      .attention_forward = n_attn_fwd,
                                      .attention_backward = n_attn_bwd,
                                      .gelu_forward = n_gelu_fwd,
                                      .gelu_backward = n_gelu_bwd,
                                      .residual_forward = n_residual,
                                      .crossentropy = n_ce};

static void half_layout(void) {
  gpt2_config big;
  ZT_CHECK(gpt2_config_preset("gpt2", &big) == 0);
  big.vocab = 50257; /* the real tokenizer's: rows of 50304 */
  gpt2_acts_layout full, half;
  gpt2_acts_layout_init(&full, &big, 8, 0, GPT2_ACTS_LSE_ONLY);
  gpt2_acts_layout_init(&half, &big, 8, 0, GPT2_ACTS_LSE_ONLY | GPT2_ACTS_HALF16);
  size_t NC = (size_t)8 * big.seq_len * big.n_embd;
  size_t NV = (size_t)8 * big.seq_len * 50304; /* the logits: N V' even, no rounding up */
  ZT_CHECK(full.logits_ld == 50304 && half.logits_ld == 50304);
  /* d4C's 4 N C / 2, dC's N C / 2 */
  size_t want = (size_t)big.n_layer * (11 * NC / 2) + NC / 2 + NV / 2 + 2 * NC + NC / 2;
  printf("GPT-2 124M, B = 8, CUDA layout: %.1f MiB fp32, %.1f MiB with the 16-bit "
         "activations (per layer %.1f -> %.1f MiB)\n",
         full.total * 4 / 1048576.0, half.total * 4 / 1048576.0, full.layer_stride * 4 / 1048576.0,
         half.layer_stride * 4 / 1048576.0);
  ZT_CHECK(half.half16 == 1 && full.half16 == 0);
  ZT_CHECK(full.total - half.total == want);
  ZT_CHECK(full.layer_stride - half.layer_stride == 11 * NC / 2);
  /* an odd B*T: every buffer of a 16-bit layout still starts on 256 bytes */
  gpt2_config odd = cfg;
  odd.seq_len = 33;
  gpt2_acts_layout Lo;
  gpt2_acts_layout_init(&Lo, &odd, 1, 1, GPT2_ACTS_LSE_ONLY | GPT2_ACTS_HALF16);
  const size_t at[] = {Lo.ln1,    Lo.ln1_mean, Lo.ln1_rstd, Lo.qkv,         Lo.att,  Lo.atty,
                       Lo.res2,   Lo.ln2,      Lo.fch,      Lo.fch_gelu,    Lo.res3, Lo.lnf,
                       Lo.logits, Lo.dres,     Lo.d4C,      Lo.layer_stride};
  int unaligned = 0;
  for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) unaligned += at[i] % 64 != 0;
  ZT_CHECK(unaligned == 0);
  /* the tiny model's passes over a half layout stay inside the slots */
  for (int nckpt = 0; nckpt <= 2; nckpt += 2) {
    gpt2_acts_layout L;
    gpt2_acts_layout_init(&L, &cfg, B, nckpt, GPT2_ACTS_LSE_ONLY | GPT2_ACTS_HALF16);
    float *acts = calloc(L.total, sizeof(float));
    ZT_OK(gpt2_a16_set(&L, &cfg, B, acts));
    gpt2_ops_f32 audited;
    gpt2_a16_audit_start(&null_ops, &audited);
    (void)step(&audited, &L, acts, nckpt);
    long wr, rd, bad, fwd = NL + nckpt;
    gpt2_a16_audit_counts(&wr, &rd, &bad);
    printf("half layout, nckpt %d: %ld slot writes, %ld reads, %ld violations\n", nckpt, wr, rd,
           bad);
    ZT_CHECK(bad == 0 && wr == 7 * fwd + 6 * NL + 3 && rd == 7 * fwd + 15 * NL + 6);
    ZT_CHECK(audited.check() == ZRT_OK);
    /* an fp32 reader of a half slot is still caught */
    audited.layernorm_backward(acts + L.dres, NULL, NULL, acts + L.dC, acts + L.ln1, NULL, NULL,
                               NULL, B * cfg.seq_len, cfg.n_embd);
    gpt2_a16_audit_counts(NULL, NULL, &bad);
    ZT_CHECK(bad == 1 && audited.check() == ZRT_ERR_INTERNAL);
    gpt2_a16_clear();
    free(acts);
  }
}

/* The emulation's GEMM (gpt2_emu.h): both operands rounded to the dtype
 * (round to nearest even), every transpose pair, beta 1, against double
 * on the rounded values: only fp32 accumulation is left (entries are sums
 * of 40 products of magnitude <= 1: within 1e-5). The operands must stay
 * as they were (the emulation rounds copies). */
static void emulated_gemm(zrt_dtype dt) {
  enum { M = 13, N = 17, K = 40 };
  gpt2_ops_f32 e;
  gpt2_emu_cuda_ops(&gpt2_cpu_ops_f32, dt, &e);
  float a[M * K], b[K * N], a0[M * K], b0[K * N], c[M * N], c0[M * N];
  for (int i = 0; i < M * K; i++) a0[i] = a[i] = urand();
  for (int i = 0; i < K * N; i++) b0[i] = b[i] = urand();
  for (int i = 0; i < M * N; i++) c0[i] = urand();
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      memcpy(c, c0, sizeof c);
      int64_t lda = ta ? M : K, ldb = tb ? K : N;
      ZT_OK(e.gemm(NULL, ta, tb, M, N, K, 0.5f, a, lda, b, ldb, 1.0f, c, N));
      double worst = 0;
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          double acc = 0;
          for (int k = 0; k < K; k++) {
            float av = ta ? a[k * lda + i] : a[i * lda + k],
                  bv = tb ? b[j * ldb + k] : b[k * ldb + j];
            acc += (double)emu_round(av) * (double)emu_round(bv);
          }
          worst = fmax(worst, fabs(c[i * N + j] - (0.5 * acc + c0[i * N + j])));
        }
      if (worst > 1e-5)
        printf("emulated %s gemm %d%d: max diff %.3g\n", zrt_dtype_name(dt), ta, tb, worst);
      ZT_CHECK(worst <= 1e-5);
    }
  ZT_CHECK(!memcmp(a, a0, sizeof a) && !memcmp(b, b0, sizeof b));
  /* rounding happened: a bf16/fp16 product differs from the fp32 one */
  float craw[M * N], cemu[M * N];
  ZT_OK(gpt2_cpu_ops_f32.gemm(NULL, 0, 0, M, N, K, 1.0f, a, K, b, N, 0.0f, craw, N));
  ZT_OK(e.gemm(NULL, 0, 0, M, N, K, 1.0f, a, K, b, N, 0.0f, cemu, N));
  ZT_CHECK(memcmp(craw, cemu, sizeof craw) != 0);
  gpt2_emu_cuda_done();
}

/* The GPU test's micro-step on the emulated CUDA numbers: the worst
 * gradient change from registering the slots, over each tensor's largest
 * entry. */
static void emulated(zrt_dtype dt, double gpu_loss_tol, double gpu_tol) {
  gpt2_acts_layout L;
  gpt2_acts_layout_init(&L, &cfg, B, 0, 0);
  float *acts = calloc(L.total, sizeof(float));
  float *g0[NL + 2][GPT2_BLOCK_NPARAMS] = {{0}};
  gpt2_ops_f32 e;
  gpt2_emu_cuda_ops(&gpt2_cpu_ops_f32, dt, &e);
  double loss[2], worst = 0;
  for (int reg = 0; reg < 2; reg++) {
    for (int m = 0; m < nmod; m++)
      for (int p = 0; p < mod_np[m]; p++)
        memset(g[m][p], 0, (size_t)gpt2_param_numel(&specs[m][p]) * sizeof(float));
    if (reg) ZT_OK(gpt2_a16_set(&L, &cfg, B, acts));
    loss[reg] = step(&e, &L, acts, 0);
    gpt2_a16_clear();
    for (int m = 0; m < nmod; m++)
      for (int p = 0; p < mod_np[m]; p++) {
        size_t n = (size_t)gpt2_param_numel(&specs[m][p]);
        if (!reg) {
          g0[m][p] = malloc(n * sizeof(float));
          memcpy(g0[m][p], g[m][p], n * sizeof(float));
          continue;
        }
        double big = 0, d = 0;
        for (size_t i = 0; i < n; i++) {
          big = fmax(big, fabs(g0[m][p][i]));
          d = fmax(d, fabs((double)g[m][p][i] - g0[m][p][i]));
        }
        if (big > 0) worst = fmax(worst, d / big);
        free(g0[m][p]);
      }
  }
  double dl = fabs(loss[1] - loss[0]) / fabs(loss[0]);
  printf("emulated %s micro-step: loss moved %.3g (relative), worst gradient change %.3g of its "
         "tensor's largest entry (the GPU test allows %g and %g)\n",
         zrt_dtype_name(dt), dl, worst, gpu_loss_tol, gpu_tol);
  /* dC's, fch's and the logits' rounding move the loss (the other slots
   * hold what the GEMMs read) */
  ZT_CHECK(dl > 0 && dl * 4 <= gpu_loss_tol);
  ZT_CHECK(worst > 0 && worst * 4 <= gpu_tol); /* > 0: the registry reached D */
  gpt2_emu_cuda_done();
  free(acts);
}

/* Runs one op through a fresh audit: its check() and the message. */
typedef enum {
  V_GELU_BWD,
  V_RESIDUAL,
  V_GEMM_INSIDE,
  V_GEMM_C,
  V_ZERO_EDGE,
  V_LOGITS,    /* the cross-entropy's gradient, over the logits slot, read by the LayerNorm bwd */
  V_LOGITS_C1, /* a GEMM accumulating (beta 1) into the logits slot */
  V_LOGITS_EARLY, /* a GEMM reading the logits slot before the cross-entropy's gradient */
  V_D4C_READ,     /* a residual add reading the d4C slot (the GELU backward's gradient) */
  V_D4C_GELU,     /* a GELU backward reading d4C as dout but writing dinp elsewhere */
  V_DC_GEMM,      /* a GEMM reading dC (the projections' 16-bit output) as an operand */
  V_HELD_READ,    /* the GELU backward's result read by an op that is not a GEMM */
  V_HELD_BIAS,    /* ... by the bias backward reaching past it */
  V_HELD_BETA,    /* ... by a GEMM's C with beta 1 */
  V_HELD_SLICE,   /* ... by a GEMM operand reaching past it */
  V_HELD_CE,      /* the cross-entropy's gradient read by the LayerNorm backward */
  V_HELD_ATT,     /* the attention backward's dqkv read by the LayerNorm backward */
  V_STALE,        /* dqkv read by the qkv GEMM after another op voided its copy */
  V_STALE_PART,   /* d4C's tail, never written since the GELU backward's copy, read */
} violation;

static void expect_violation(violation v, const char *needle) {
  gpt2_acts_layout L;
  gpt2_acts_layout_init(&L, &cfg, B, 0, 0);
  float *acts = calloc(L.total, sizeof(float));
  int N = B * cfg.seq_len, C = cfg.n_embd;
  float *s1 = acts + L.layer_stride; /* layer slot 1 */
  /* no slot: where a CUDA run holds a result as a 16-bit copy (the passes'
   * d4C is a slot, kept in 16 bits) */
  float *extbuf = calloc((size_t)4 * N * C + 1, sizeof(float));
  float *ext = extbuf + 1; /* one float before it: the cases reaching past its start */
  ZT_OK(gpt2_a16_set(&L, &cfg, B, acts));
  gpt2_ops_f32 o;
  gpt2_a16_audit_start(&gpt2_cpu_ops_f32, &o);
  char path[] = "/tmp/zt_act16_XXXXXX";
  int fd = mkstemp(path), saved = dup(2);
  fflush(stderr);
  dup2(fd, 2);
  switch (v) {
  case V_GELU_BWD: o.gelu_backward(ext, NULL, s1 + L.fch_gelu, NULL, ext, N, C); break;
  case V_RESIDUAL: o.residual_forward(acts + L.dres, s1 + L.atty, acts + L.dC, NULL, N, C); break;
  case V_GEMM_INSIDE:
    (void)o.gemm(NULL, 0, 0, N - 1, C, C, 1, acts + L.ln1 + C, C, w[1][GPT2_ATTNPROJ_W], C, 0,
                 acts + L.dC, C);
    break;
  case V_GEMM_C:
    (void)o.gemm(NULL, 0, 0, N, C, C, 1, acts + L.dres, C, w[1][GPT2_ATTNPROJ_W], C, 0, s1 + L.ln2,
                 C);
    break;
  case V_ZERO_EDGE: o.zero(s1 + L.ln2 - 4, 5); break;
  case V_HELD_READ:
  case V_HELD_BIAS:
  case V_HELD_BETA:
  case V_HELD_SLICE: {
    float *d4C = ext;
    o.gelu_backward(d4C, g[1][GPT2_FC_B], s1 + L.fch, w[1][GPT2_FC_B], d4C, N, 4 * C);
    if (v == V_HELD_READ) o.residual_forward(acts + L.dres, d4C, acts + L.dC, NULL, N, C);
    if (v == V_HELD_BIAS) o.bias_backward(g[1][GPT2_FC_B], d4C - 1, N, 4 * C);
    if (v == V_HELD_BETA)
      (void)o.gemm(NULL, 0, 0, N, C, C, 1, acts + L.dres, C, w[1][GPT2_ATTNPROJ_W], C, 1, d4C, C);
    if (v == V_HELD_SLICE) /* one float before the range (dC's last): starts outside it */
      (void)o.gemm(NULL, 0, 1, N, C, 4 * C, 1, d4C - 1, 4 * C, w[1][GPT2_FC_W], 4 * C, 0,
                   acts + L.dres, C);
    break;
  }
  case V_HELD_ATT:
  case V_STALE:
  case V_STALE_PART: {
    float *d4C = ext;
    if (v == V_STALE_PART) { /* the GELU copy's range, void; dqkv rewrites its first 3NC */
      o.gelu_backward(d4C, g[1][GPT2_FC_B], s1 + L.fch, w[1][GPT2_FC_B], d4C, N, 4 * C);
      o.zero(acts + L.dres, (size_t)N * C);
    }
    ZT_OK(o.attention_backward(NULL, d4C, acts + L.dC, acts + L.qkv, w[1][GPT2_ATTN_B],
                               acts + L.atty, acts + L.att, B, cfg.seq_len, C, cfg.n_head));
    if (v == V_HELD_ATT)
      o.layernorm_backward(acts + L.dres, g[1][GPT2_LN1_W], g[1][GPT2_LN1_B], d4C, acts + L.encoded,
                           w[1][GPT2_LN1_W], acts + L.ln1_mean, acts + L.ln1_rstd, N, C);
    if (v == V_STALE) o.zero(acts + L.dres, (size_t)N * C);
    if (v == V_STALE) /* the qkv GEMM's dX reading dqkv [N, 3C] */
      (void)o.gemm(NULL, 0, 1, N, C, 3 * C, 1, d4C, 3 * C, w[1][GPT2_ATTN_W], 3 * C, 0, acts + L.dC,
                   C);
    if (v == V_STALE_PART) /* the N x C floats past dqkv: the GELU copy's, never written */
      (void)o.gemm(NULL, 0, 0, N, C, C, 1, d4C + (size_t)3 * N * C, C, w[1][GPT2_ATTNPROJ_W], C, 0,
                   acts + L.dC, C);
    break;
  }
  case V_LOGITS:
  case V_LOGITS_EARLY:
    (void)o.gemm(NULL, 0, 1, N, cfg.vocab, C, 1, acts + L.lnf, C, w[0][GPT2_WTE], C, 0,
                 acts + L.logits, (int)L.logits_ld);
    if (v == V_LOGITS_EARLY) { /* dlnf = dlogits wte before the cross-entropy */
      (void)o.gemm(NULL, 0, 0, N, C, cfg.vocab, 1, acts + L.logits, (int)L.logits_ld,
                   w[0][GPT2_WTE], C, 0, acts + L.dC, C);
      break;
    }
    o.crossentropy(acts + L.losses, acts + L.logits, targets, N, cfg.vocab, (int)L.logits_ld, 1.0f);
    o.layernorm_backward(acts + L.dres, g[0][0], g[0][0], acts + L.logits, acts + L.encoded,
                         w[NL + 1][0], acts + L.lnf_mean, acts + L.lnf_rstd, N, C);
    break;
  case V_D4C_READ:
    o.gemm(NULL, 0, 1, N, 4 * C, C, 1, acts + L.dres, C, w[1][GPT2_FCPROJ_W], C, 0, acts + L.d4C,
           4 * C);
    o.gelu_backward(acts + L.d4C, g[1][GPT2_FC_B], s1 + L.fch, w[1][GPT2_FC_B], acts + L.d4C, N,
                    4 * C);
    o.residual_forward(acts + L.dres, acts + L.d4C, acts + L.dC, NULL, N, C);
    break;
  case V_DC_GEMM:
    (void)o.gemm(NULL, 0, 0, N, C, C, 1, acts + L.dC, C, w[1][GPT2_ATTNPROJ_W], C, 0, acts + L.dres,
                 C);
    break;
  case V_D4C_GELU:
    o.gelu_backward(ext, g[1][GPT2_FC_B], s1 + L.fch, w[1][GPT2_FC_B], acts + L.d4C, N, 4 * C);
    break;
  case V_LOGITS_C1:
    (void)o.gemm(NULL, 0, 1, N, cfg.vocab, C, 1, acts + L.lnf, C, w[0][GPT2_WTE], C, 1,
                 acts + L.logits, (int)L.logits_ld);
    break;
  case V_HELD_CE: /* logits that are no slot (ext's N V floats: the tiny model's V is 4C) */
    o.crossentropy(acts + L.losses, ext, targets, N, cfg.vocab, cfg.vocab, 1.0f);
    o.layernorm_backward(acts + L.dres, g[0][0], g[0][0], ext, acts + L.encoded, w[NL + 1][0],
                         acts + L.lnf_mean, acts + L.lnf_rstd, N, C);
    break;
  }
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  char msg[2048] = {0};
  ssize_t got = pread(fd, msg, sizeof msg - 1, 0);
  close(fd);
  unlink(path);
  ZT_CHECK(got > 0);
  printf("violation %d: %s", (int)v, msg);
  long bad;
  gpt2_a16_audit_counts(NULL, NULL, &bad);
  ZT_CHECK(bad == 1);
  ZT_CHECK(o.check() == ZRT_ERR_INTERNAL);
  ZT_CONTAINS(msg, needle);
  ZT_CONTAINS(msg, v >= V_HELD_READ ? "keeps only as the 16-bit copy" : "keeps in 16 bits");
  gpt2_a16_clear();
  free(acts);
  free(extbuf);
}

int main(void) {
  char msg[256];
  ZT_CHECK(gpt2_config_preset("tiny", &cfg) == 0);
  cfg.n_layer = NL;
  ZT_CHECK(gpt2_config_validate(&cfg, msg, sizeof msg) == 0);
  nmod = NL + 2;
  for (int m = 0; m < nmod; m++) {
    mod_np[m] = gpt2_module_params(&cfg, m - 1, specs[m]);
    for (int p = 0; p < mod_np[m]; p++) {
      int64_t n = gpt2_param_numel(&specs[m][p]);
      w[m][p] = malloc((size_t)n * sizeof(float));
      g[m][p] = calloc((size_t)n, sizeof(float));
      for (int64_t i = 0; i < n; i++)
        w[m][p][i] = (specs[m][p].init.kind == ZRT_INIT_ONES ? 1.0f : 0.0f) + 0.1f * urand();
    }
  }
  int N = B * cfg.seq_len;
  ZT_CHECK(cfg.vocab == 4 * cfg.n_embd); /* V_HELD_CE's logits in ext's 4 N C floats */
  tokens = malloc((size_t)N * sizeof(int));
  targets = malloc((size_t)N * sizeof(int));
  for (int i = 0; i < N; i++) {
    tokens[i] = (int)((urand() + 1) * 0.5f * (float)cfg.vocab) % cfg.vocab;
    targets[i] = (int)((urand() + 1) * 0.5f * (float)cfg.vocab) % cfg.vocab;
  }
  passes(0);
  passes(2);
  half_layout();
  emulated_gemm(ZRT_BF16);
  emulated_gemm(ZRT_F16);
  emulated(ZRT_BF16, 1e-4, 5e-2);
  emulated(ZRT_F16, 1e-4, 1e-2);
  expect_violation(V_GELU_BWD, "gelu_backward's argument inp");
  expect_violation(V_RESIDUAL, "residual_forward's argument a");
  expect_violation(V_GEMM_INSIDE, "gemm's argument A");
  expect_violation(V_GEMM_C, "gemm's argument C");
  expect_violation(V_ZERO_EDGE, "zero's argument p");
  expect_violation(V_GELU_BWD, "layer slot 1's fch_gelu activation");
  expect_violation(V_LOGITS, "layernorm_backward's argument dout (");
  expect_violation(V_LOGITS, "the final logits activation");
  expect_violation(V_LOGITS_C1, "gemm's argument C (");
  expect_violation(V_LOGITS_C1, "the cross-entropy reads it and writes its gradient over it");
  expect_violation(V_LOGITS_EARLY,
                   "gemm's argument A reads the logits slot, which holds the logits");
  expect_violation(V_D4C_READ, "residual_forward's argument a (");
  expect_violation(V_D4C_READ, "the passes' d4C activation");
  expect_violation(V_D4C_GELU, "gelu_backward's argument dout (");
  expect_violation(V_DC_GEMM, "gemm's argument A (");
  expect_violation(V_DC_GEMM, "the passes' dC activation");
  expect_violation(V_HELD_READ, "residual_forward's argument a touches the GELU backward's");
  expect_violation(V_HELD_BIAS, "bias_backward's argument dout touches the GELU backward's");
  expect_violation(V_HELD_BETA, "gemm's argument C touches the GELU backward's");
  expect_violation(V_HELD_SLICE, "gemm's argument A touches the GELU backward's");
  expect_violation(V_HELD_CE, "layernorm_backward's argument dout touches the cross-entropy's");
  expect_violation(V_HELD_ATT,
                   "layernorm_backward's argument dout touches the attention backward's");
  expect_violation(V_STALE, "gemm's argument A touches the attention backward's result");
  expect_violation(V_STALE, "that copy is void by now");
  expect_violation(V_STALE_PART, "gemm's argument A touches the GELU backward's result");
  for (int m = 0; m < nmod; m++)
    for (int p = 0; p < mod_np[m]; p++) {
      free(w[m][p]);
      free(g[m][p]);
    }
  free(tokens);
  free(targets);
  ZT_DONE();
}
