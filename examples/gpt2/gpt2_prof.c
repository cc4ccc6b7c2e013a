/*
 * gpt2_prof.c — train_gpt2 --profile_ops (gpt2_prof.h): the wrapping ops
 * table, the wall clock, the per-step records and their JSON summary.
 */
#include "gpt2_prof.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *const gpt2_prof_names[GPT2_PROF_KINDS] = {
    "gemm",          "zero",     "encoder_fwd",   "encoder_bwd",   "layernorm_fwd",
    "layernorm_bwd", "bias_bwd", "attention_fwd", "attention_bwd", "gelu_fwd",
    "gelu_bwd",      "residual", "crossentropy"};

/* ------------------------------------------------------------ the profiler */

typedef struct gpt2_prof_step {
  double ms[GPT2_PROF_KINDS];
  long calls[GPT2_PROF_KINDS];
  double step_ms;
} gpt2_prof_step;

static struct {
  const gpt2_ops_f32 *in;
  gpt2_prof_clock clk;
  long calls[GPT2_PROF_KINDS]; /* since the last step's end */
  gpt2_prof_step *steps;
  size_t nsteps, cap;
} g_prof;

#define P_BEGIN(k) (g_prof.calls[k]++, g_prof.clk.mark(g_prof.clk.ctx, (k), 0))
#define P_END(k) g_prof.clk.mark(g_prof.clk.ctx, (k), 1)

static zrt_status p_gemm(void *ctx, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                         float *c, int64_t ldc) {
  P_BEGIN(GPT2_PROF_GEMM);
  zrt_status st = g_prof.in->gemm(ctx, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  P_END(GPT2_PROF_GEMM);
  return st;
}
static void p_zero(float *p, size_t n) {
  P_BEGIN(GPT2_PROF_ZERO);
  g_prof.in->zero(p, n);
  P_END(GPT2_PROF_ZERO);
}
static void p_encoder_forward(float *out, const int *tok, const float *wte, const float *wpe, int B,
                              int T, int C) {
  P_BEGIN(GPT2_PROF_ENCODER_FWD);
  g_prof.in->encoder_forward(out, tok, wte, wpe, B, T, C);
  P_END(GPT2_PROF_ENCODER_FWD);
}
static void p_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tok, int B,
                               int T, int C) {
  P_BEGIN(GPT2_PROF_ENCODER_BWD);
  g_prof.in->encoder_backward(dwte, dwpe, dout, tok, B, T, C);
  P_END(GPT2_PROF_ENCODER_BWD);
}
static void p_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                const float *w, const float *b, int N, int C) {
  P_BEGIN(GPT2_PROF_LAYERNORM_FWD);
  g_prof.in->layernorm_forward(out, mean, rstd, inp, w, b, N, C);
  P_END(GPT2_PROF_LAYERNORM_FWD);
}
static void p_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                 const float *inp, const float *w, const float *mean,
                                 const float *rstd, int N, int C) {
  P_BEGIN(GPT2_PROF_LAYERNORM_BWD);
  g_prof.in->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  P_END(GPT2_PROF_LAYERNORM_BWD);
}
static void p_bias_backward(float *db, const float *dout, int N, int OC) {
  P_BEGIN(GPT2_PROF_BIAS_BWD);
  g_prof.in->bias_backward(db, dout, N, OC);
  P_END(GPT2_PROF_BIAS_BWD);
}
static zrt_status p_attention_forward(void *ctx, float *out, float *att, const float *qkv,
                                      const float *bias, int B, int T, int C, int NH) {
  P_BEGIN(GPT2_PROF_ATTENTION_FWD);
  zrt_status st = g_prof.in->attention_forward(ctx, out, att, qkv, bias, B, T, C, NH);
  P_END(GPT2_PROF_ATTENTION_FWD);
  return st;
}
static zrt_status p_attention_backward(void *ctx, float *dqkv, const float *dout, const float *qkv,
                                       const float *bias, const float *out, const float *att, int B,
                                       int T, int C, int NH) {
  P_BEGIN(GPT2_PROF_ATTENTION_BWD);
  zrt_status st = g_prof.in->attention_backward(ctx, dqkv, dout, qkv, bias, out, att, B, T, C, NH);
  P_END(GPT2_PROF_ATTENTION_BWD);
  return st;
}
static void p_gelu_forward(float *out, const float *inp, const float *bias, int N, int OC) {
  P_BEGIN(GPT2_PROF_GELU_FWD);
  g_prof.in->gelu_forward(out, inp, bias, N, OC);
  P_END(GPT2_PROF_GELU_FWD);
}
static void p_gelu_backward(float *dinp, float *db, const float *inp, const float *bias,
                            const float *dout, int N, int OC) {
  P_BEGIN(GPT2_PROF_GELU_BWD);
  g_prof.in->gelu_backward(dinp, db, inp, bias, dout, N, OC);
  P_END(GPT2_PROF_GELU_BWD);
}
static void p_residual(float *out, const float *a, const float *b, const float *bias, int N,
                       int C) {
  P_BEGIN(GPT2_PROF_RESIDUAL);
  g_prof.in->residual_forward(out, a, b, bias, N, C);
  P_END(GPT2_PROF_RESIDUAL);
}
static void p_crossentropy(float *losses, float *logits, const int *targets, int N, int V, int ld,
                           float dloss) {
  P_BEGIN(GPT2_PROF_CROSSENTROPY);
  g_prof.in->crossentropy(losses, logits, targets, N, V, ld, dloss);
  P_END(GPT2_PROF_CROSSENTROPY);
}

zrt_status gpt2_prof_start(const gpt2_ops_f32 *ops, const gpt2_prof_clock *clock,
                           gpt2_ops_f32 *out) {
  memset(&g_prof, 0, sizeof g_prof);
  g_prof.in = ops;
  g_prof.clk = *clock;
  gpt2_ops_f32 o = *ops; /* ctx and check pass through */
  o.gemm = p_gemm;
  o.zero = p_zero;
  o.encoder_forward = p_encoder_forward;
  o.encoder_backward = p_encoder_backward;
  o.layernorm_forward = p_layernorm_forward;
  o.layernorm_backward = p_layernorm_backward;
  o.bias_backward = p_bias_backward;
  o.attention_forward = p_attention_forward;
  o.attention_backward = p_attention_backward;
  o.gelu_forward = p_gelu_forward;
  o.gelu_backward = p_gelu_backward;
  o.residual_forward = p_residual;
  o.crossentropy = p_crossentropy;
  *out = o;
  return ZRT_OK;
}

zrt_status gpt2_prof_step_end(double step_s) {
  if (g_prof.nsteps == g_prof.cap) {
    size_t nc = g_prof.cap ? 2 * g_prof.cap : 64;
    gpt2_prof_step *n = realloc(g_prof.steps, nc * sizeof *n);
    if (!n) return ZRT_ERR_OOM;
    g_prof.steps = n;
    g_prof.cap = nc;
  }
  gpt2_prof_step *s = &g_prof.steps[g_prof.nsteps];
  memset(s, 0, sizeof *s);
  zrt_status st = g_prof.clk.flush(g_prof.clk.ctx, s->ms);
  if (st != ZRT_OK) return st;
  memcpy(s->calls, g_prof.calls, sizeof s->calls);
  memset(g_prof.calls, 0, sizeof g_prof.calls);
  s->step_ms = 1e3 * step_s;
  g_prof.nsteps++;
  return ZRT_OK;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of n values (sorts them). */
static double median(double *v, size_t n) {
  if (!n) return 0;
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

zrt_status gpt2_prof_finish(const char *path, int skip, int print) {
  size_t first = g_prof.nsteps > (size_t)skip ? (size_t)skip : 0, n = g_prof.nsteps - first;
  double *v = malloc((n ? n : 1) * sizeof *v);
  cJSON *root = cJSON_CreateObject(), *kinds = cJSON_AddObjectToObject(root, "kinds");
  zrt_status st = v && root && kinds ? ZRT_OK : ZRT_ERR_OOM;
  double total = 0, step_ms = 0;
  if (st == ZRT_OK) {
    cJSON_AddNumberToObject(root, "steps", (double)n);
    cJSON_AddNumberToObject(root, "skipped_steps", (double)first);
    for (size_t i = 0; i < n; i++) v[i] = g_prof.steps[first + i].step_ms;
    step_ms = median(v, n);
    for (size_t i = 0; i < n; i++) {
      v[i] = 0;
      for (int k = 0; k < GPT2_PROF_KINDS; k++) v[i] += g_prof.steps[first + i].ms[k];
    }
    total = median(v, n);
    cJSON_AddNumberToObject(root, "step_ms", step_ms);
    cJSON_AddNumberToObject(root, "model_ops_ms", total);
    if (print)
      printf("model ops per step (median of %zu steps): %.3f ms of a %.3f ms step\n", n, total,
             step_ms);
    for (int k = 0; k < GPT2_PROF_KINDS; k++) {
      for (size_t i = 0; i < n; i++) v[i] = g_prof.steps[first + i].ms[k];
      double ms = median(v, n);
      long calls = n ? g_prof.steps[first].calls[k] : 0;
      cJSON *o = cJSON_AddObjectToObject(kinds, gpt2_prof_names[k]);
      if (!o) {
        st = ZRT_ERR_OOM;
        break;
      }
      cJSON_AddNumberToObject(o, "ms_per_step", ms);
      cJSON_AddNumberToObject(o, "calls_per_step", (double)calls);
      if (print && calls)
        printf("  %-14s %9.3f ms %6.1f%% %6ld calls\n", gpt2_prof_names[k], ms,
               total > 0 ? 100.0 * ms / total : 0.0, calls);
    }
  }
  char *text = st == ZRT_OK ? cJSON_Print(root) : NULL;
  if (st == ZRT_OK && !text) st = ZRT_ERR_OOM;
  if (st == ZRT_OK && path) {
    /* no symlink followed: the path is the user's, its target is not */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f || fprintf(f, "%s\n", text) < 0 || fclose(f) != 0) {
      fprintf(stderr, "train_gpt2: cannot write the op profile --profile_ops %s: %s\n", path,
              strerror(errno));
      if (!f && fd >= 0) close(fd);
      st = ZRT_ERR_IO;
    }
  }
  free(text);
  cJSON_Delete(root);
  free(v);
  free(g_prof.steps);
  memset(&g_prof, 0, sizeof g_prof);
  return st;
}

/* ------------------------------------------------------------ wall clock */

typedef struct wall_clock {
  zrt_engine *eng;
  double t0, ms[GPT2_PROF_KINDS];
} wall_clock;

static wall_clock g_wall;

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void wall_mark(void *ctx, int kind, int end) {
  wall_clock *w = ctx;
  if (!end)
    w->t0 = wall_now();
  else
    w->ms[kind] += 1e3 * (wall_now() - w->t0);
}

static zrt_status wall_flush(void *ctx, double *ms) {
  wall_clock *w = ctx;
  if (w->eng) { /* the tasks ran on a stream worker (twin): wait for them */
    zrt_status st = zrt_engine_synchronize(w->eng);
    if (st != ZRT_OK) return st;
  }
  for (int k = 0; k < GPT2_PROF_KINDS; k++) ms[k] += w->ms[k];
  memset(w->ms, 0, sizeof w->ms);
  return ZRT_OK;
}

void gpt2_prof_wall_clock(gpt2_prof_clock *out, zrt_engine *eng) {
  memset(&g_wall, 0, sizeof g_wall);
  g_wall.eng = eng;
  out->ctx = &g_wall;
  out->mark = wall_mark;
  out->flush = wall_flush;
}
