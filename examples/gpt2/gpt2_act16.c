/*
 * gpt2_act16.c — the registry of a 16-bit run's 16-bit activation slots and
 * the audit of the ops that touch them (gpt2_act16.h): a sorted table of
 * byte ranges, a binary search per pointer argument, and an ops table that
 * checks each call's activation arguments before passing it on.
 */
#include "gpt2_act16.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* In a layer slot's (and the layout's) order. */
enum { A16_LN1, A16_ATTY, A16_LN2, A16_FCH, A16_FCH_GELU, A16_LNF, A16_KINDS };
static const char *const a16_names[A16_KINDS] = {"ln1", "atty", "ln2", "fch", "fch_gelu", "lnf"};

typedef struct a16_slot {
  const char *p;
  size_t bytes; /* its elements' extent: 4 or (half) 2 bytes each */
  int kind, layer_slot;
} a16_slot;

/* Sorted by p, disjoint (the layout's order). */
static struct {
  a16_slot *s;
  size_t n;
  int half; /* the layout's half16 */
} g_reg;

void gpt2_a16_clear(void) {
  free(g_reg.s);
  memset(&g_reg, 0, sizeof g_reg);
}

zrt_status gpt2_a16_set(const gpt2_acts_layout *L, const gpt2_config *cfg, int B,
                        const float *acts) {
  gpt2_a16_clear();
  int slots = gpt2_acts_layer_slots(cfg, L->nckpt);
  a16_slot *s = calloc((size_t)slots * A16_LNF + 1, sizeof *s);
  if (!s) return ZRT_ERR_OOM;
  size_t NC = (size_t)B * (size_t)cfg->seq_len * (size_t)cfg->n_embd, n = 0;
  size_t el = L->half16 ? 2 : sizeof(float);
  const size_t off[A16_LNF] = {L->ln1, L->atty, L->ln2, L->fch, L->fch_gelu};
  const size_t len[A16_LNF] = {NC, NC, NC, 4 * NC, 4 * NC};
  for (int l = 0; l < slots; l++)
    for (int k = 0; k < A16_LNF; k++)
      s[n++] = (a16_slot){(const char *)(acts + off[k] + L->layer_stride * (size_t)l), len[k] * el,
                          k, l};
  s[n++] = (a16_slot){(const char *)(acts + L->lnf), NC * el, A16_LNF, -1};
  g_reg.s = s;
  g_reg.n = n;
  g_reg.half = L->half16;
  return ZRT_OK;
}

/* The registered slot [p, p + bytes) overlaps, NULL when none. */
static const a16_slot *a16_overlap(const void *p, size_t bytes) {
  const char *q0 = (const char *)p, *q1 = q0 + bytes;
  size_t lo = 0, hi = g_reg.n; /* the first slot ending after q0 */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (g_reg.s[mid].p + g_reg.s[mid].bytes <= q0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < g_reg.n && g_reg.s[lo].p < q1 && bytes ? &g_reg.s[lo] : NULL;
}

int gpt2_a16_is(const void *p) {
  const a16_slot *s = a16_overlap(p, 1);
  return s && s->p == (const char *)p;
}

/* ------------------------------------------------------------- the audit */

static struct {
  const gpt2_ops_f32 *in;
  long writes, reads, violations;
  /* the fp32 range a 16-bit CUDA run holds only as a 16-bit copy for the
   * GEMMs right after its producer (gpt2_cuda.cu's held copy), or NULL */
  const char *held, *held_by;
  size_t held_bytes;
} g_aud;

/* The first violation's message (later ones are only counted). */
static int a16_first(void) { return g_aud.violations++ == 0; }

/* bytes as an fp32 extent; a registered slot's in a half16 layout holds 2
 * bytes per element. */
static int a16_in_held(const void *p, size_t bytes) {
  const char *q = (const char *)p;
  if (g_reg.half && gpt2_a16_is(p)) bytes /= 2;
  return g_aud.held && p && bytes && q < g_aud.held + g_aud.held_bytes && g_aud.held < q + bytes;
}

/* An op other than a GEMM touches [p, p + bytes) while it is held. */
static void a16_held_arg(const char *op, const char *arg, const void *p, size_t bytes) {
  if (!a16_in_held(p, bytes) || !a16_first()) return;
  fprintf(stderr,
          "train_gpt2: internal error: %s's argument %s touches the %s's result, which a 16-bit "
          "CUDA run keeps only as the 16-bit copy the GEMMs right after it read (gpt2_cuda.cu's "
          "held copy; its fp32 range holds other values): the model's passes and that rule "
          "disagree: please report it\n",
          op, arg, g_aud.held_by);
}

/* A GEMM operand or the bias backward's dout reads held values only from
 * inside the range (the CUDA op then reads the copy), never C with beta !=
 * 0. */
static void a16_held_reader(const char *op, const char *arg, const void *p, size_t bytes,
                            int reads_fp32) {
  const char *q = (const char *)p;
  if (g_reg.half && gpt2_a16_is(p)) bytes /= 2;
  int inside = q >= g_aud.held && q + bytes <= g_aud.held + g_aud.held_bytes;
  if (a16_in_held(p, bytes) && (reads_fp32 || !inside)) a16_held_arg(op, arg, p, bytes);
}

/* [p, p + bytes) held from here (by: its producer), or nothing (p NULL):
 * any op but a GEMM ends the holding, as it voids the CUDA copy. (What the
 * fp32 range holds after that is not tracked: the passes rewrite it, the
 * attention backward d4C's dqkv, before anything reads it.) */
static void a16_hold(const char *by, const void *p, size_t bytes) {
  g_aud.held = (const char *)p;
  g_aud.held_bytes = bytes;
  g_aud.held_by = by;
}

/* What an argument may do to a slot: nothing, or one of its kind's roles:
 * ln1, atty, ln2, fch_gelu and lnf are written by their producer (the
 * LayerNorm, attention and GELU forwards' out: A_WRITE) and read by GEMM
 * operands and the attention backward's out (A_READ); fch is written by
 * the fc GEMM's C (beta 0: A_GEMM_C) and read by the GELU forward's and
 * backward's inp (A_GELU_INP). */
enum { A_NONE, A_WRITE, A_READ, A_GEMM_C, A_GELU_INP };

static int a16_role_ok(int kind, int may) {
  if (kind == A16_FCH) return may == A_GEMM_C || may == A_GELU_INP;
  return may == A_WRITE || may == A_READ;
}

/* bytes: the argument's extent as fp32 elements; a producer's or reader's
 * at a slot's start counts 2 bytes per element in a half16 layout. */
static void a16_arg(const char *op, const char *arg, const void *p, size_t bytes, int may) {
  if (!p) return;
  if (strcmp(op, "gemm") && strcmp(op, "bias_backward")) a16_held_arg(op, arg, p, bytes);
  if (may != A_NONE && g_reg.half && gpt2_a16_is(p)) bytes /= 2;
  const a16_slot *s = a16_overlap(p, bytes);
  if (!s) return;
  if (may != A_NONE && s->p == (const char *)p && bytes <= s->bytes && a16_role_ok(s->kind, may)) {
    if (may == A_WRITE || may == A_GEMM_C)
      g_aud.writes++;
    else
      g_aud.reads++;
    return;
  }
  if (!a16_first()) return;
  char where[32] = "the final";
  if (s->layer_slot >= 0) snprintf(where, sizeof where, "layer slot %d's", s->layer_slot);
  fprintf(stderr,
          "train_gpt2: internal error: %s's argument %s (%zu bytes at offset %lld of the slot) "
          "touches %s %s activation, which a 16-bit run keeps in 16 bits: %s, from its start "
          "(gpt2_act16.h); the model's passes and that rule disagree: please report it\n",
          op, arg, bytes, (long long)((const char *)p - s->p), where, a16_names[s->kind],
          s->kind == A16_FCH ? "only the fc GEMM's C (beta 0) writes it and only the GELU "
                               "forward's and backward's inp read it"
                             : "only the LayerNorm, attention and GELU forwards write it and only "
                               "GEMM operands and the attention backward's out read it");
}

/* Bytes of a row-major operand: rows of ld floats, the last cols wide. */
static size_t a16_mat(int64_t rows, int64_t cols, int64_t ld) {
  return rows > 0 && cols > 0 ? ((size_t)(rows - 1) * (size_t)ld + (size_t)cols) * sizeof(float)
                              : 0;
}
#define F4(n) ((size_t)(n) * sizeof(float))

static zrt_status a_gemm(void *ctx, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                         float *c, int64_t ldc) {
  a16_arg("gemm", "A", a, ta ? a16_mat(k, m, lda) : a16_mat(m, k, lda), A_READ);
  a16_arg("gemm", "B", b, tb ? a16_mat(n, k, ldb) : a16_mat(k, n, ldb), A_READ);
  a16_arg("gemm", "C", c, a16_mat(m, n, ldc), beta == 0 ? A_GEMM_C : A_NONE);
  a16_held_reader("gemm", "A", a, ta ? a16_mat(k, m, lda) : a16_mat(m, k, lda), 0);
  a16_held_reader("gemm", "B", b, tb ? a16_mat(n, k, ldb) : a16_mat(k, n, ldb), 0);
  if (beta != 0) a16_held_reader("gemm", "C", c, a16_mat(m, n, ldc), 1);
  if (a16_in_held(c, a16_mat(m, n, ldc))) a16_hold(NULL, NULL, 0); /* new values there */
  return g_aud.in->gemm(ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
static void a_zero(float *p, size_t n) {
  a16_arg("zero", "p", p, F4(n), A_NONE);
  a16_hold(NULL, NULL, 0);
  g_aud.in->zero(p, n);
}
static void a_encoder_forward(float *out, const int *tok, const float *wte, const float *wpe, int B,
                              int T, int C) {
  a16_arg("encoder_forward", "out", out, F4((size_t)B * T * C), A_NONE);
  a16_hold(NULL, NULL, 0);
  g_aud.in->encoder_forward(out, tok, wte, wpe, B, T, C);
}
static void a_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tok, int B,
                               int T, int C) {
  a16_arg("encoder_backward", "dout", dout, F4((size_t)B * T * C), A_NONE);
  a16_hold(NULL, NULL, 0);
  g_aud.in->encoder_backward(dwte, dwpe, dout, tok, B, T, C);
}
static void a_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                const float *w, const float *b, int N, int C) {
  size_t nc = F4((size_t)N * C);
  a16_arg("layernorm_forward", "out", out, nc, A_WRITE);
  a16_arg("layernorm_forward", "mean", mean, F4(N), A_NONE);
  a16_arg("layernorm_forward", "rstd", rstd, F4(N), A_NONE);
  a16_arg("layernorm_forward", "inp", inp, nc, A_NONE);
  a16_hold(NULL, NULL, 0);
  g_aud.in->layernorm_forward(out, mean, rstd, inp, w, b, N, C);
}
static void a_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                 const float *inp, const float *w, const float *mean,
                                 const float *rstd, int N, int C) {
  size_t nc = F4((size_t)N * C);
  a16_arg("layernorm_backward", "dinp", dinp, nc, A_NONE);
  a16_arg("layernorm_backward", "dout", dout, nc, A_NONE);
  a16_arg("layernorm_backward", "inp", inp, nc, A_NONE);
  a16_arg("layernorm_backward", "mean", mean, F4(N), A_NONE);
  a16_arg("layernorm_backward", "rstd", rstd, F4(N), A_NONE);
  a16_hold(NULL, NULL, 0);
  g_aud.in->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
static void a_bias_backward(float *db, const float *dout, int N, int OC) {
  a16_arg("bias_backward", "dout", dout, F4((size_t)N * OC), A_NONE);
  a16_held_reader("bias_backward", "dout", dout, F4((size_t)N * OC), 0); /* reads the copy */
  a16_hold(NULL, NULL, 0);
  g_aud.in->bias_backward(db, dout, N, OC);
}
static zrt_status a_attention_forward(void *ctx, float *out, float *att, const float *qkv,
                                      const float *bias, int B, int T, int C, int NH) {
  size_t btc = F4((size_t)B * T * C);
  a16_arg("attention_forward", "out", out, btc, A_WRITE);
  a16_arg("attention_forward", "att", att, F4((size_t)B * NH * T), A_NONE);
  a16_arg("attention_forward", "qkv", qkv, 3 * btc, A_NONE);
  a16_hold(NULL, NULL, 0);
  return g_aud.in->attention_forward(ctx, out, att, qkv, bias, B, T, C, NH);
}
static zrt_status a_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                       const float *bias, const float *out, const float *att, int B,
                                       int T, int C, int NH) {
  size_t btc = F4((size_t)B * T * C);
  a16_arg("attention_backward", "dqkv", dqkv, 3 * btc, A_NONE);
  a16_arg("attention_backward", "dout", dout, btc, A_NONE);
  a16_arg("attention_backward", "qkv", qkv, 3 * btc, A_NONE);
  a16_arg("attention_backward", "out", out, btc, A_READ);
  a16_arg("attention_backward", "att", att, F4((size_t)B * NH * T), A_NONE);
  a16_hold(NULL, NULL, 0);
  zrt_status st = g_aud.in->attention_backward(ctx, dqkv, dout, qkv, bias, out, att, B, T, C, NH);
  a16_hold("attention backward", dqkv, 3 * btc); /* held for the qkv GEMMs and bias gradient */
  return st;
}
static void a_gelu_forward(float *out, const float *inp, const float *bias, int N, int OC) {
  size_t n = F4((size_t)N * OC);
  a16_arg("gelu_forward", "out", out, n, A_WRITE);
  a16_arg("gelu_forward", "inp", inp, n, A_GELU_INP);
  a16_hold(NULL, NULL, 0);
  g_aud.in->gelu_forward(out, inp, bias, N, OC);
}
static void a_gelu_backward(float *dinp, float *db, const float *inp, const float *bias,
                            const float *dout, int N, int OC) {
  size_t n = F4((size_t)N * OC);
  a16_arg("gelu_backward", "dinp", dinp, n, A_NONE);
  a16_arg("gelu_backward", "inp", inp, n, A_GELU_INP);
  a16_arg("gelu_backward", "dout", dout, n, A_NONE);
  a16_hold(NULL, NULL, 0);
  g_aud.in->gelu_backward(dinp, db, inp, bias, dout, N, OC);
  if (db) a16_hold("GELU backward", dinp, n); /* the passes' form: held for the MLP's GEMMs */
}
static void a_residual(float *out, const float *a, const float *b, const float *bias, int N,
                       int C) {
  size_t n = F4((size_t)N * C);
  a16_arg("residual_forward", "out", out, n, A_NONE);
  a16_arg("residual_forward", "a", a, n, A_NONE);
  a16_arg("residual_forward", "b", b, n, A_NONE);
  a16_hold(NULL, NULL, 0);
  g_aud.in->residual_forward(out, a, b, bias, N, C);
}
static void a_crossentropy(float *losses, float *logits, const int *targets, int N, int V,
                           float dloss) {
  a16_arg("crossentropy", "losses", losses, F4(N), A_NONE);
  a16_arg("crossentropy", "logits", logits, F4((size_t)N * V), A_NONE);
  a16_hold(NULL, NULL, 0);
  g_aud.in->crossentropy(losses, logits, targets, N, V, dloss);
  if (dloss != 0) a16_hold("cross-entropy", logits, F4((size_t)N * V)); /* the gradient */
}
static zrt_status a_check(void) {
  zrt_status st = g_aud.in->check ? g_aud.in->check() : ZRT_OK;
  return st == ZRT_OK && g_aud.violations ? ZRT_ERR_INTERNAL : st;
}

void gpt2_a16_audit_start(const gpt2_ops_f32 *ops, gpt2_ops_f32 *out) {
  memset(&g_aud, 0, sizeof g_aud);
  g_aud.in = ops;
  gpt2_ops_f32 o = *ops; /* ctx passes through */
  o.gemm = a_gemm;
  o.zero = a_zero;
  o.encoder_forward = a_encoder_forward;
  o.encoder_backward = a_encoder_backward;
  o.layernorm_forward = a_layernorm_forward;
  o.layernorm_backward = a_layernorm_backward;
  o.bias_backward = a_bias_backward;
  o.attention_forward = a_attention_forward;
  o.attention_backward = a_attention_backward;
  o.gelu_forward = a_gelu_forward;
  o.gelu_backward = a_gelu_backward;
  o.residual_forward = a_residual;
  o.crossentropy = a_crossentropy;
  o.check = a_check;
  *out = o;
}

void gpt2_a16_audit_counts(long *writes, long *reads, long *violations) {
  if (writes) *writes = g_aud.writes;
  if (reads) *reads = g_aud.reads;
  if (violations) *violations = g_aud.violations;
}
