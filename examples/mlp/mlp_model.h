/*
 * mlp_model.h — a 3-layer tanh MLP regression model written only against
 * include/zrt.h, shared by examples/mlp/train_mlp.c and the engine's
 * equivalence tests. Each layer (weight + bias) is one zrt module.
 * Forward and backward run on the CPU, launched on the engine's compute
 * stream (zrt_engine_launch): weights are widened from the engine's working
 * dtype into fp32 tiles in backend memory (accounted as activations), GEMMs
 * go through zrt_engine_gemm, the rest is plain C loops.
 *
 * Data are a pure function of the global sample index, so a run over N
 * ranks with micro batch B sees exactly the samples of one rank with micro
 * batch N*B: sample (step, micro, rank, b) = ((step*K + micro)*N + rank)*B + b.
 * Loss of a micro-batch: mean over its samples of 0.5*||yhat - y||^2.
 */
#ifndef ZRT_MLP_MODEL_H
#define ZRT_MLP_MODEL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "zrt.h"

#define MLP_LAYERS 3

typedef struct mlp {
  int dims[MLP_LAYERS + 1]; /* in, hidden, hidden, out */
  int mod[MLP_LAYERS], w[MLP_LAYERS], b[MLP_LAYERS];
  zrt_dtype dt;
  int batch;
  float *wt[MLP_LAYERS], *bt[MLP_LAYERS]; /* fp32 host copies of the working weights */
  float *act[MLP_LAYERS + 1];             /* activations: input, h1, h2, output */
  float *gw, *gb, *d0, *d1;               /* backward scratch */
  float *loss;                            /* the micro-batch loss */
} mlp;

static inline float mlp_h2f(uint16_t h, zrt_dtype dt) {
  uint32_t u;
  float f;
  if (dt == ZRT_BF16) {
    u = (uint32_t)h << 16;
    memcpy(&f, &u, 4);
    return f;
  }
  uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) return (s ? -1.0f : 1.0f) * (float)m * 5.9604644775390625e-8f;
  u = e == 31 ? (s | 0x7f800000u | (m << 13)) : (s | ((e + 112u) << 23) | (m << 13));
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t mlp_f2h(float f, zrt_dtype dt) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (dt == ZRT_BF16) {
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
  }
  uint16_t s = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u);
  if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00u);
  if (a < 0x38800000u) { /* subnormal: round the value to a multiple of 2^-24 */
    float q = fabsf(f) * 16777216.0f;
    return (uint16_t)(s | (uint16_t)lrintf(q));
  }
  uint32_t r = a + 0x0fffu + ((a >> 13) & 1u);
  return (uint16_t)(s | ((r - 0x38000000u) >> 13));
}

/* Target function and inputs: smooth, deterministic, in [-1, 1]. */
static inline void mlp_sample(const mlp *m, int64_t idx, float *x, float *y) {
  int D = m->dims[0], O = m->dims[MLP_LAYERS];
  for (int i = 0; i < D; i++) x[i] = (float)sin(0.37 * (double)idx * (i + 1) + 0.11 * i);
  for (int o = 0; o < O; o++) {
    double s = 0;
    for (int i = 0; i < D; i++) s += sin(0.5 * (o + 1) + 0.3 * i) * x[i];
    y[o] = (float)tanh(0.5 * s);
  }
}

static inline zrt_status mlp_register(zrt_engine *eng, mlp *m, int in, int hidden, int out,
                                      int batch) {
  zrt_engine_info info;
  zrt_status st = zrt_engine_get_info(eng, &info);
  if (st) return st;
  memset(m, 0, sizeof *m);
  m->dims[0] = in;
  m->dims[1] = m->dims[2] = hidden;
  m->dims[3] = out;
  m->dt = info.dtype;
  m->batch = batch;
  static const char *names[MLP_LAYERS] = {"fc1", "fc2", "head"};
  for (int l = 0; l < MLP_LAYERS; l++) {
    char n[64];
    if ((st = zrt_module_add(eng, names[l], &m->mod[l]))) return st;
    int64_t ws[2] = {m->dims[l + 1], m->dims[l]}, bs[1] = {m->dims[l + 1]};
    zrt_init wi = {ZRT_INIT_NORMAL, (float)(1.0 / sqrt((double)m->dims[l]))};
    zrt_init bi = {ZRT_INIT_UNIFORM, 0.1f};
    snprintf(n, sizeof n, "%s.weight", names[l]);
    if ((st = zrt_param_add(eng, m->mod[l], n, 2, ws, wi, 0, &m->w[l]))) return st;
    snprintf(n, sizeof n, "%s.bias", names[l]);
    if ((st = zrt_param_add(eng, m->mod[l], n, 1, bs, bi, ZRT_PARAM_NO_DECAY, &m->b[l]))) return st;
  }
  return ZRT_OK;
}

/* After zrt_engine_build: host tiles (accounted as activations). */
static inline zrt_status mlp_alloc(zrt_engine *eng, mlp *m) {
  zrt_status st;
  int H = m->dims[1], maxd = H > m->dims[0] ? H : m->dims[0];
  size_t fb = sizeof(float);
  for (int l = 0; l < MLP_LAYERS; l++) {
    if ((st = zrt_engine_alloc(eng, (size_t)m->dims[l] * m->dims[l + 1] * fb, ZRT_MEM_ACTIVATIONS,
                               (void **)&m->wt[l])))
      return st;
    if ((st = zrt_engine_alloc(eng, (size_t)m->dims[l + 1] * fb, ZRT_MEM_ACTIVATIONS,
                               (void **)&m->bt[l])))
      return st;
  }
  for (int l = 0; l <= MLP_LAYERS; l++)
    if ((st = zrt_engine_alloc(eng, (size_t)m->batch * m->dims[l] * fb, ZRT_MEM_ACTIVATIONS,
                               (void **)&m->act[l])))
      return st;
  size_t big = (size_t)maxd * maxd * fb;
  if ((st = zrt_engine_alloc(eng, big, ZRT_MEM_ACTIVATIONS, (void **)&m->gw))) return st;
  if ((st = zrt_engine_alloc(eng, (size_t)maxd * fb, ZRT_MEM_ACTIVATIONS, (void **)&m->gb)))
    return st;
  if ((st = zrt_engine_alloc(eng, (size_t)m->batch * maxd * fb, ZRT_MEM_ACTIVATIONS,
                             (void **)&m->d0)))
    return st;
  if ((st = zrt_engine_alloc(eng, (size_t)m->batch * maxd * fb, ZRT_MEM_ACTIVATIONS,
                             (void **)&m->d1)))
    return st;
  return zrt_engine_alloc(eng, sizeof(float), ZRT_MEM_ACTIVATIONS, (void **)&m->loss);
}

static inline void mlp_free(zrt_engine *eng, mlp *m) {
  for (int l = 0; l < MLP_LAYERS; l++) {
    zrt_engine_free(eng, m->wt[l]);
    zrt_engine_free(eng, m->bt[l]);
  }
  for (int l = 0; l <= MLP_LAYERS; l++) zrt_engine_free(eng, m->act[l]);
  zrt_engine_free(eng, m->gw);
  zrt_engine_free(eng, m->gb);
  zrt_engine_free(eng, m->d0);
  zrt_engine_free(eng, m->d1);
  zrt_engine_free(eng, m->loss);
}

/* The compute runs on the engine's compute stream (zrt_engine_launch), as
 * a GPU program's kernels do: each launch gets its pointers and scalars by
 * value, reads and writes only backend memory, and issues its GEMMs from
 * there (they run in place on the stream). The host never touches backend
 * memory; the loss comes back by a copy. One program text, one ordering on
 * the cpu (launches run at once), twin (a stream worker runs them) and cuda
 * backends. */

/* n working-dtype values at src as fp32 at dst (backend memory). */
static inline void mlp_widen(const mlp *m, float *dst, const void *src, int64_t n) {
  if (m->dt == ZRT_F32)
    memcpy(dst, src, (size_t)n * 4);
  else
    for (int64_t i = 0; i < n; i++) dst[i] = mlp_h2f(((const uint16_t *)src)[i], m->dt);
}

/* grad (working dtype, backend memory) += src (fp32). */
static inline void mlp_add_grad(const mlp *m, void *g, const float *src, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (m->dt == ZRT_F32)
      ((float *)g)[i] += src[i];
    else {
      uint16_t *h = (uint16_t *)g;
      h[i] = mlp_f2h(mlp_h2f(h[i], m->dt) + src[i], m->dt);
    }
  }
}

typedef struct mlp_launch {
  zrt_engine *eng;
  const mlp *m;
  int l;
  int64_t base;
  const void *w, *b; /* working weights (forward, backward) */
  void *gw, *gb;     /* gradient buffers (backward) */
  float scale;
  float *dy; /* backward: this layer's output gradient */
} mlp_launch;

static inline zrt_status mlp_k_data(void *a) {
  const mlp_launch *k = a;
  const mlp *m = k->m;
  int O = m->dims[MLP_LAYERS];
  for (int b = 0; b < m->batch; b++)
    mlp_sample(m, k->base + b, m->act[0] + (size_t)b * m->dims[0], m->d1 + (size_t)b * O);
  return ZRT_OK;
}

static inline zrt_status mlp_k_forward(void *a) {
  const mlp_launch *k = a;
  const mlp *m = k->m;
  int l = k->l, B = m->batch, in = m->dims[l], out = m->dims[l + 1];
  mlp_widen(m, m->wt[l], k->w, (int64_t)in * out);
  mlp_widen(m, m->bt[l], k->b, out);
  float *y = m->act[l + 1];
  for (int b = 0; b < B; b++) memcpy(y + (size_t)b * out, m->bt[l], (size_t)out * 4);
  /* y[B,out] += x[B,in] * W^T  (W is [out,in]) */
  zrt_status st = zrt_engine_gemm(k->eng, 0, 1, B, out, in, 1.0f, m->act[l], in, m->wt[l], in,
                                  ZRT_F32, 1.0f, y, out, ZRT_F32);
  if (st) return st;
  if (l < MLP_LAYERS - 1)
    for (size_t i = 0; i < (size_t)B * out; i++) y[i] = tanhf(y[i]);
  return ZRT_OK;
}

/* Loss (into m->loss, backend memory) and the scaled output gradient (d0). */
static inline zrt_status mlp_k_loss(void *a) {
  const mlp_launch *k = a;
  const mlp *m = k->m;
  int B = m->batch, O = m->dims[MLP_LAYERS];
  double L = 0;
  float *dy = m->d0, *yh = m->act[MLP_LAYERS];
  for (size_t i = 0; i < (size_t)B * O; i++) {
    float e = yh[i] - m->d1[i];
    L += 0.5 * (double)e * e;
    dy[i] = e * k->scale / (float)B;
  }
  *m->loss = (float)(L / B);
  return ZRT_OK;
}

static inline zrt_status mlp_k_backward(void *a) {
  const mlp_launch *k = a;
  const mlp *m = k->m;
  int l = k->l, B = m->batch, in = m->dims[l], out = m->dims[l + 1];
  float *dy = k->dy;
  mlp_widen(m, m->wt[l], k->w, (int64_t)in * out);
  /* gW[out,in] = dy^T[out,B] x[B,in]; gb = sum_b dy */
  zrt_status st = zrt_engine_gemm(k->eng, 1, 0, out, in, B, 1.0f, dy, out, m->act[l], in, ZRT_F32,
                                  0.0f, m->gw, in, ZRT_F32);
  if (st) return st;
  for (int o = 0; o < out; o++) {
    float s = 0;
    for (int b = 0; b < B; b++) s += dy[(size_t)b * out + o];
    m->gb[o] = s;
  }
  mlp_add_grad(m, k->gw, m->gw, (int64_t)in * out);
  mlp_add_grad(m, k->gb, m->gb, out);
  if (l > 0) {
    float *dx = dy == m->d0 ? m->d1 : m->d0;
    /* dx[B,in] = dy[B,out] W[out,in], through tanh of layer l-1's output */
    if ((st = zrt_engine_gemm(k->eng, 0, 0, B, in, out, 1.0f, dy, out, m->wt[l], in, ZRT_F32, 0.0f,
                              dx, in, ZRT_F32)))
      return st;
    const float *h = m->act[l];
    for (size_t i = 0; i < (size_t)B * in; i++) dx[i] *= 1.0f - h[i] * h[i];
  }
  return ZRT_OK;
}

/* One micro-batch forward + backward starting at global sample `base`.
 * Returns the micro-batch loss in *loss (a D2H copy). The loss gradient is
 * multiplied by the engine's loss scale. */
static inline zrt_status mlp_micro(zrt_engine *eng, mlp *m, int64_t base, float *loss) {
  zrt_status st;
  mlp_launch k;
  memset(&k, 0, sizeof k);
  k.eng = eng;
  k.m = m;
  k.base = base;
  if ((st = zrt_engine_launch(eng, mlp_k_data, &k, sizeof k))) return st;
  /* forward */
  for (int l = 0; l < MLP_LAYERS; l++) {
    void *w, *b;
    if ((st = zrt_module_fetch(eng, m->mod[l]))) return st;
    if ((st = zrt_param_data(eng, m->w[l], &w)) || (st = zrt_param_data(eng, m->b[l], &b)))
      return st;
    k.l = l;
    k.w = w;
    k.b = b;
    if ((st = zrt_engine_launch(eng, mlp_k_forward, &k, sizeof k))) return st;
    if ((st = zrt_module_release(eng, m->mod[l]))) return st;
  }
  if ((st = zrt_engine_loss_scale(eng, &k.scale))) return st;
  if ((st = zrt_engine_launch(eng, mlp_k_loss, &k, sizeof k))) return st;
  if ((st = zrt_engine_memcpy(eng, loss, m->loss, sizeof *loss, ZRT_COPY_D2H))) return st;
  /* backward: layer l's output gradient alternates between d0 and d1 */
  float *dy = m->d0;
  for (int l = MLP_LAYERS - 1; l >= 0; l--) {
    void *w, *gw, *gb;
    if ((st = zrt_module_fetch(eng, m->mod[l]))) return st;
    if ((st = zrt_param_data(eng, m->w[l], &w))) return st;
    if ((st = zrt_param_grad(eng, m->w[l], &gw)) || (st = zrt_param_grad(eng, m->b[l], &gb)))
      return st;
    k.l = l;
    k.w = w;
    k.gw = gw;
    k.gb = gb;
    k.dy = dy;
    if ((st = zrt_engine_launch(eng, mlp_k_backward, &k, sizeof k))) return st;
    dy = dy == m->d0 ? m->d1 : m->d0;
    if ((st = zrt_module_grads_ready(eng, m->mod[l]))) return st;
    if ((st = zrt_module_release(eng, m->mod[l]))) return st;
  }
  return ZRT_OK;
}

#endif
