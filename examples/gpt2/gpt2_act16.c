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

/* A layer slot's kinds in its order, then the layout's final ones (the
 * table below is sorted by address, not by kind). */
enum {
  A16_LN1,
  A16_ATTY,
  A16_LN2,
  A16_FCH,
  A16_FCH_GELU,
  A16_LNF,
  A16_LOGITS,
  A16_D4C,
  A16_DC,
  A16_KINDS
};

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
  a16_slot *s = calloc((size_t)slots * A16_LNF + 4, sizeof *s);
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
  const size_t NV = (size_t)B * (size_t)cfg->seq_len * L->logits_ld;
  s[n++] = (a16_slot){(const char *)(acts + L->logits), NV * el, A16_LOGITS, -1};
  /* the layout's order: dC, then d4C */
  s[n++] = (a16_slot){(const char *)(acts + L->dC), NC * el, A16_DC, -1};
  s[n++] = (a16_slot){(const char *)(acts + L->d4C), 4 * NC * el, A16_D4C, -1};
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

/* A range of the arena a 16-bit CUDA run does not hold in fp32 (gpt2_cuda.cu's
 * held copies): the cross-entropy's, the GELU backward's (with db) and the
 * attention backward's result are written only as a 16-bit copy. While the
 * copy is held, only GEMM operands and a bias gradient inside the range
 * read it (through the copy) and nothing else touches it; once any other op
 * voids the copy, the fp32 range is stale until ops write all of it. */
typedef struct a16_range {
  const char *p, *by; /* by: the producer */
  size_t bytes;
} a16_range;
#define A16_STALE 4

static struct {
  const gpt2_ops_f32 *in;
  long writes, reads, violations;
  a16_range held;             /* p NULL: none */
  a16_range stale[A16_STALE]; /* the newest last */
  int nstale;
  int logits; /* what the logits slot holds: 0 nothing yet, 1 logits, 2 their gradient */
} g_aud;

/* The first violation's message (later ones are only counted). */
static int a16_first(void) { return g_aud.violations++ == 0; }

/* An argument's extent: bytes as fp32 elements, a registered slot's start
 * in a half16 layout 2 bytes per element. */
static size_t a16_extent(const void *p, size_t bytes) {
  return g_reg.half && gpt2_a16_is(p) ? bytes / 2 : bytes;
}

static int a16_overlaps(const a16_range *r, const void *p, size_t bytes) {
  const char *q = (const char *)p;
  return r->p && p && bytes && q < r->p + r->bytes && r->p < q + bytes;
}
static int a16_inside(const a16_range *r, const void *p, size_t bytes) {
  const char *q = (const char *)p;
  return q >= r->p && q + bytes <= r->p + r->bytes;
}

static void a16_held_msg(const char *op, const char *arg, const a16_range *r, int stale) {
  if (!a16_first()) return;
  fprintf(stderr,
          "train_gpt2: internal error: %s's argument %s touches the %s's result, which a 16-bit "
          "CUDA run keeps only as the 16-bit copy the GEMMs right after it read (gpt2_cuda.cu's "
          "held copy; %s): the model's passes and that rule disagree: please report it\n",
          op, arg, r->by,
          stale ? "that copy is void by now and the fp32 range was never written"
                : "its fp32 range holds other values");
}

/* A read of [p, p + bytes) by a GEMM operand or a bias gradient: inside a
 * held range it reads the copy (fine); reaching past it, or reading fp32 C
 * (beta != 0) there, it does not. */
static void a16_held_reader(const char *op, const char *arg, const void *p, size_t bytes,
                            int reads_fp32) {
  if (a16_overlaps(&g_aud.held, p, bytes) && (reads_fp32 || !a16_inside(&g_aud.held, p, bytes)))
    a16_held_msg(op, arg, &g_aud.held, 0);
}

/* The held copy is void (any op but a GEMM or the bias gradient that reads
 * it): its fp32 range is stale from here. */
static void a16_end_hold(void) {
  if (!g_aud.held.p) return;
  if (g_aud.nstale == A16_STALE) { /* the oldest goes untracked */
    memmove(g_aud.stale, g_aud.stale + 1, (A16_STALE - 1) * sizeof g_aud.stale[0]);
    g_aud.nstale--;
  }
  g_aud.stale[g_aud.nstale++] = g_aud.held;
  memset(&g_aud.held, 0, sizeof g_aud.held);
}

/* [p, p + bytes) held from here (by: its producer). */
static void a16_hold(const char *by, const void *p, size_t bytes) {
  a16_end_hold();
  g_aud.held = (a16_range){(const char *)p, by, bytes};
}

/* An argument against the stale ranges: a read of one is a violation; a
 * write (out) of a whole stale range, or of its first bytes, makes those
 * valid again. */
static void a16_stale_arg(const char *op, const char *arg, const void *p, size_t bytes, int out) {
  const char *q = (const char *)p;
  for (int i = 0; i < g_aud.nstale; i++) {
    a16_range *r = &g_aud.stale[i];
    if (!a16_overlaps(r, p, bytes)) continue;
    if (!out) {
      a16_held_msg(op, arg, r, 1);
      continue;
    }
    if (q <= r->p && q + bytes >= r->p + r->bytes) { /* all of it written */
      memmove(r, r + 1, (size_t)(g_aud.nstale - i - 1) * sizeof *r);
      g_aud.nstale--, i--;
    } else if (q <= r->p) { /* its start written */
      size_t cut = (size_t)(q + bytes - r->p);
      r->p += cut, r->bytes -= cut;
    }
  }
}

/* What an argument may do to a slot: nothing, or one of its kind's roles
 * (a16_kind's table). A_OUT (or-ed in): the op writes the whole argument
 * without reading it. */
enum { A_NONE, A_WRITE, A_READ, A_GEMM_C, A_GELU_INP, A_CE, A_OP16, A_OUT = 16 };
#define A_ROLE(r) (1u << (r))

/* Each kind: its name, the roles an argument may take on it, the rule
 * (for the violation's message) and where its slot is (NULL: a layer
 * slot's). ln1, atty, ln2, fch_gelu and lnf are written by their producer
 * (the LayerNorm, attention and GELU forwards' out: A_WRITE) and read by
 * GEMM operands and the attention backward's out (A_READ); fch is written
 * by the fc GEMM's C (beta 0: A_GEMM_C) and read by the GELU forward's and
 * backward's inp (A_GELU_INP); the logits are written by the head GEMM's
 * C, read by the cross-entropy, which writes its gradient over them
 * (A_CE), and read so by the head's backward GEMMs; d4C, the block
 * backward's wide gradient, is written by the fcproj dX GEMM's C, turned
 * in place into the GELU's input gradient by the GELU backward (its dout
 * and dinp) and written with dqkv by the attention backward (A_OP16), and
 * read by GEMM operands and the qkv bias's gradient (A_OP16); dC, the N x
 * C buffer of the projections' outputs in the forward and the dX GEMMs'
 * in the backward, is written by GEMMs' C and read by the residual add's
 * b, the LayerNorm backward's and the attention backward's dout (A_OP16),
 * never by a GEMM. */
/* the producers' slots (ln1, atty, ln2, fch_gelu, lnf) */
#define A16_PRODUCED (A_ROLE(A_WRITE) | A_ROLE(A_READ))
static const char a16_produced_rule[] =
    "only the LayerNorm, attention and GELU forwards write it and only GEMM operands and the "
    "attention backward's out read it";
static const struct {
  const char *name;
  unsigned roles;
  const char *rule, *where;
} a16_kind[A16_KINDS] = {
    [A16_LN1] = {"ln1", A16_PRODUCED, a16_produced_rule, NULL},
    [A16_ATTY] = {"atty", A16_PRODUCED, a16_produced_rule, NULL},
    [A16_LN2] = {"ln2", A16_PRODUCED, a16_produced_rule, NULL},
    [A16_FCH] = {"fch", A_ROLE(A_GEMM_C) | A_ROLE(A_GELU_INP),
                 "only the fc GEMM's C (beta 0) writes it and only the GELU forward's and "
                 "backward's inp read it",
                 NULL},
    [A16_FCH_GELU] = {"fch_gelu", A16_PRODUCED, a16_produced_rule, NULL},
    [A16_LNF] = {"lnf", A16_PRODUCED, a16_produced_rule, "the final"},
    [A16_LOGITS] = {"logits", A_ROLE(A_GEMM_C) | A_ROLE(A_CE) | A_ROLE(A_READ),
                    "only the head GEMM's C (beta 0) writes it, the cross-entropy reads it and "
                    "writes its gradient over it, and GEMM operands read that",
                    "the final"},
    [A16_D4C] = {"d4C", A_ROLE(A_GEMM_C) | A_ROLE(A_OP16) | A_ROLE(A_READ),
                 "only GEMMs' C (beta 0; the passes': the fcproj dX GEMM's), the GELU backward "
                 "(in place) and the attention backward write it, and only GEMM operands, the "
                 "16-bit-aware ops (the GELU backward, a bias's gradient) read it",
                 "the passes'"},
    [A16_DC] = {"dC", A_ROLE(A_GEMM_C) | A_ROLE(A_OP16),
                "only GEMMs' C (beta 0) write it, and only the residual add's b and the "
                "LayerNorm and attention backwards' dout read it",
                "the passes'"},
};
#undef A16_PRODUCED

/* The logits slot's life, in order: the head GEMM writes the logits (C),
 * the cross-entropy reads them (and with dloss != 0 writes their gradient
 * over them: a_crossentropy), GEMM operands read only that gradient. */
static void a16_logits_life(const char *op, const char *arg, int may) {
  static const char *const holds[3] = {"nothing written yet", "the logits", "their gradient"};
  const int want = may == A_CE ? 1 : may == A_READ ? 2 : -1;
  if (may == A_GEMM_C) g_aud.logits = 1;
  if (want < 0 || g_aud.logits == want || !a16_first()) return;
  fprintf(stderr,
          "train_gpt2: internal error: %s's argument %s reads the logits slot, which holds %s: "
          "a 16-bit run keeps in 16 bits the logits and then the cross-entropy's gradient over "
          "them, so the head GEMM writes them, the cross-entropy reads them, and only then "
          "GEMMs read the gradient (gpt2_act16.h); the model's passes and that order disagree: "
          "please report it\n",
          op, arg, holds[g_aud.logits]);
}

/* bytes: the argument's extent as fp32 elements. A wrapper checks the
 * arguments an op reads before those it writes (they may alias). */
static void a16_arg(const char *op, const char *arg, const void *p, size_t bytes, int may) {
  if (!p) return;
  const int out = (may & A_OUT) != 0;
  may &= ~A_OUT;
  bytes = a16_extent(p, bytes);
  if (strcmp(op, "gemm") && strcmp(op, "bias_backward") && a16_overlaps(&g_aud.held, p, bytes))
    a16_held_msg(op, arg, &g_aud.held, 0);
  a16_stale_arg(op, arg, p, bytes, out);
  const a16_slot *s = a16_overlap(p, bytes);
  if (!s) return;
  if (may != A_NONE && s->p == (const char *)p && bytes <= s->bytes &&
      (a16_kind[s->kind].roles & A_ROLE(may))) {
    if (may == A_WRITE || may == A_GEMM_C || out)
      g_aud.writes++;
    else
      g_aud.reads++;
    if (s->kind == A16_LOGITS) a16_logits_life(op, arg, may);
    return;
  }
  if (!a16_first()) return;
  char where[32];
  if (a16_kind[s->kind].where)
    snprintf(where, sizeof where, "%s", a16_kind[s->kind].where);
  else
    snprintf(where, sizeof where, "layer slot %d's", s->layer_slot);
  fprintf(stderr,
          "train_gpt2: internal error: %s's argument %s (%zu bytes at offset %lld of the slot) "
          "touches %s %s activation, which a 16-bit run keeps in 16 bits: %s, from its start "
          "(gpt2_act16.h); the model's passes and that rule disagree: please report it\n",
          op, arg, bytes, (long long)((const char *)p - s->p), where, a16_kind[s->kind].name,
          a16_kind[s->kind].rule);
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
  const size_t ab = ta ? a16_mat(k, m, lda) : a16_mat(m, k, lda);
  const size_t bb = tb ? a16_mat(n, k, ldb) : a16_mat(k, n, ldb), cb = a16_mat(m, n, ldc);
  a16_arg("gemm", "A", a, ab, A_READ);
  a16_arg("gemm", "B", b, bb, A_READ);
  a16_held_reader("gemm", "A", a, a16_extent(a, ab), 0);
  a16_held_reader("gemm", "B", b, a16_extent(b, bb), 0);
  if (beta != 0) a16_held_reader("gemm", "C", c, a16_extent(c, cb), 1);
  /* C over a held range voids the copy: with beta 0 the range is written
   * where C covers it (stale elsewhere); a beta != 0 read of it was
   * reported above */
  const int c_held = a16_overlaps(&g_aud.held, c, a16_extent(c, cb));
  if (c_held && beta == 0) a16_end_hold();
  a16_arg("gemm", "C", c, cb, beta == 0 ? (A_GEMM_C | A_OUT) : A_NONE);
  if (c_held && beta != 0) a16_end_hold();
  return g_aud.in->gemm(ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
static void a_zero(float *p, size_t n) {
  a16_arg("zero", "p", p, F4(n), A_OUT);
  a16_end_hold();
  g_aud.in->zero(p, n);
}
static void a_encoder_forward(float *out, const int *tok, const float *wte, const float *wpe, int B,
                              int T, int C) {
  a16_arg("encoder_forward", "out", out, F4((size_t)B * T * C), A_OUT);
  a16_end_hold();
  g_aud.in->encoder_forward(out, tok, wte, wpe, B, T, C);
}
static void a_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tok, int B,
                               int T, int C) {
  a16_arg("encoder_backward", "dout", dout, F4((size_t)B * T * C), A_NONE);
  a16_end_hold();
  g_aud.in->encoder_backward(dwte, dwpe, dout, tok, B, T, C);
}
static void a_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                const float *w, const float *b, int N, int C) {
  size_t nc = F4((size_t)N * C);
  a16_arg("layernorm_forward", "inp", inp, nc, A_NONE);
  a16_arg("layernorm_forward", "out", out, nc, A_WRITE | A_OUT);
  a16_arg("layernorm_forward", "mean", mean, F4(N), A_OUT);
  a16_arg("layernorm_forward", "rstd", rstd, F4(N), A_OUT);
  a16_end_hold();
  g_aud.in->layernorm_forward(out, mean, rstd, inp, w, b, N, C);
}
static void a_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                 const float *inp, const float *w, const float *mean,
                                 const float *rstd, int N, int C) {
  size_t nc = F4((size_t)N * C);
  a16_arg("layernorm_backward", "dinp", dinp, nc, A_NONE);
  a16_arg("layernorm_backward", "dout", dout, nc, A_OP16);
  a16_arg("layernorm_backward", "inp", inp, nc, A_NONE);
  a16_arg("layernorm_backward", "mean", mean, F4(N), A_NONE);
  a16_arg("layernorm_backward", "rstd", rstd, F4(N), A_NONE);
  a16_end_hold();
  g_aud.in->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
static void a_bias_backward(float *db, const float *dout, int N, int OC) {
  a16_arg("bias_backward", "dout", dout, F4((size_t)N * OC), A_OP16);
  a16_held_reader("bias_backward", "dout", dout, a16_extent(dout, F4((size_t)N * OC)), 0);
  a16_end_hold();
  g_aud.in->bias_backward(db, dout, N, OC);
}
static zrt_status a_attention_forward(void *ctx, float *out, float *att, const float *qkv,
                                      const float *bias, int B, int T, int C, int NH) {
  size_t btc = F4((size_t)B * T * C);
  a16_arg("attention_forward", "qkv", qkv, 3 * btc, A_NONE);
  a16_arg("attention_forward", "out", out, btc, A_WRITE | A_OUT);
  a16_arg("attention_forward", "att", att, F4((size_t)B * NH * T), A_OUT);
  a16_end_hold();
  return g_aud.in->attention_forward(ctx, out, att, qkv, bias, B, T, C, NH);
}
static zrt_status a_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                       const float *bias, const float *out, const float *att, int B,
                                       int T, int C, int NH) {
  size_t btc = F4((size_t)B * T * C);
  a16_arg("attention_backward", "dout", dout, btc, A_OP16);
  a16_arg("attention_backward", "qkv", qkv, 3 * btc, A_NONE);
  a16_arg("attention_backward", "out", out, btc, A_READ);
  a16_arg("attention_backward", "att", att, F4((size_t)B * NH * T), A_NONE);
  a16_arg("attention_backward", "dqkv", dqkv, 3 * btc, A_OP16 | A_OUT);
  a16_end_hold();
  zrt_status st = g_aud.in->attention_backward(ctx, dqkv, dout, qkv, bias, out, att, B, T, C, NH);
  /* dqkv in 16 bits in the d4C slot, or held for the qkv GEMMs and bias
   * gradient */
  if (!gpt2_a16_is(dqkv)) a16_hold("attention backward", dqkv, 3 * btc);
  return st;
}
static void a_gelu_forward(float *out, const float *inp, const float *bias, int N, int OC) {
  size_t n = F4((size_t)N * OC);
  a16_arg("gelu_forward", "inp", inp, n, A_GELU_INP);
  a16_arg("gelu_forward", "out", out, n, A_WRITE | A_OUT);
  a16_end_hold();
  g_aud.in->gelu_forward(out, inp, bias, N, OC);
}
static void a_gelu_backward(float *dinp, float *db, const float *inp, const float *bias,
                            const float *dout, int N, int OC) {
  size_t n = F4((size_t)N * OC);
  a16_arg("gelu_backward", "inp", inp, n, A_GELU_INP);
  a16_arg("gelu_backward", "dout", dout, n, db && dinp == dout ? A_OP16 : A_NONE);
  a16_arg("gelu_backward", "dinp", dinp, n, db && dinp == dout ? A_OP16 | A_OUT : A_OUT);
  a16_end_hold();
  g_aud.in->gelu_backward(dinp, db, inp, bias, dout, N, OC);
  /* the passes' form: in 16 bits in the d4C slot, or held for the MLP's GEMMs */
  if (db && !gpt2_a16_is(dinp)) a16_hold("GELU backward", dinp, n);
}
static void a_residual(float *out, const float *a, const float *b, const float *bias, int N,
                       int C) {
  size_t n = F4((size_t)N * C);
  a16_arg("residual_forward", "a", a, n, A_NONE);
  a16_arg("residual_forward", "b", b, n, A_OP16);
  a16_arg("residual_forward", "out", out, n, A_OUT);
  a16_end_hold();
  g_aud.in->residual_forward(out, a, b, bias, N, C);
}
static void a_crossentropy(float *losses, float *logits, const int *targets, int N, int V, int ld,
                           float dloss) {
  const size_t span = a16_mat(N, V, ld);
  a16_arg("crossentropy", "logits", logits, span, A_CE);
  a16_arg("crossentropy", "losses", losses, F4(N), A_OUT);
  a16_end_hold();
  g_aud.in->crossentropy(losses, logits, targets, N, V, ld, dloss);
  /* the gradient: in the logits slot, in 16 bits; logits elsewhere (not
   * the passes') hold it as a 16-bit copy on CUDA */
  if (dloss != 0) {
    if (gpt2_a16_is(logits))
      g_aud.logits = 2;
    else
      a16_hold("cross-entropy", logits, span);
  }
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
