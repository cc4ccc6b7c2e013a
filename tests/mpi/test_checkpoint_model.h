/*
 * ckpt_model.h — the tiny model the checkpoint tests train (header-only,
 * static functions; used by tests/mpi/test_checkpoint*.c).
 *
 * Three modules with odd sizes (so padding and uneven parameter/shard
 * boundaries are exercised); the loss of rank r at step s is
 * 0.5 * mean((w - t(r, s, i))^2) over all elements, gradient w - t, where
 * the target t is a pure function of (rank, step, element) — a data-parallel
 * "dataset" whose position is the step counter. Everything goes through
 * the public API (fetch / param_data / param_grad / grads_ready / step).
 */
#ifndef ZRT_TEST_CKPT_MODEL_H
#define ZRT_TEST_CKPT_MODEL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "zrt.h"
#include "ztest.h"

#define CKM_NMOD 3
#define CKM_NPARAM 5
static const struct {
  int module;
  const char *name;
  int ndim;
  int64_t shape[2];
} ckm_params[CKM_NPARAM] = {
    {0, "emb.weight", 2, {37, 5}},  {1, "blk.w", 2, {13, 7}},    {1, "blk.b", 1, {7, 0}},
    {2, "head.weight", 2, {3, 11}}, {2, "head.bias", 1, {3, 0}},
};
static const char *ckm_modules[CKM_NMOD] = {"emb", "blk", "head"};

typedef struct ckm {
  zrt_engine *eng;
  int mod[CKM_NMOD], pid[CKM_NPARAM];
  int rank, world;
  zrt_dtype dt;
} ckm;

/* Creates and builds the engine; `shape_tweak` (test of model mismatch)
 * changes blk.w's second dim when nonzero. */
static zrt_status ckm_create(ckm *m, int stage, const char *dtype, int shape_tweak) {
  memset(m, 0, sizeof *m);
  zrt_config *cfg;
  zrt_status st = zrt_config_create(&cfg);
  if (st) return st;
  char sbuf[8];
  snprintf(sbuf, sizeof sbuf, "%d", stage);
  const char *kv[][2] = {
      {"zero_optimization.stage", sbuf},
      {"train_micro_batch_size_per_gpu", "1"},
      {"gradient_accumulation_steps", "2"},
      {"optimizer.type", "AdamW"},
      {"optimizer.params.lr", "0.01"},
      {"optimizer.params.weight_decay", "0.01"},
      {"gradient_clipping", "1.0"},
      {"scheduler.type", "WarmupLR"},
      {"scheduler.params.warmup_num_steps", "4"},
      {"scheduler.params.warmup_max_lr", "0.01"},
      {"fp16.enabled", !strcmp(dtype, "fp16") ? "true" : "false"},
      {"bf16.enabled", !strcmp(dtype, "bf16") ? "true" : "false"},
      {"zrt.backend", zt_host_backend()}, /* cpu, or the twin under ZRT_BACKEND=twin */
      /* twin_equal.sh runs cpu and twin with one comm (ZRT_COMM) */
      {"zrt.comm", getenv("ZRT_COMM") ? getenv("ZRT_COMM") : "auto"},
      {"zrt.seed", "1234"}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0] && !st; i++)
    st = zrt_config_set(cfg, kv[i][0], kv[i][1], "program");
  if (!st) st = zrt_engine_create(cfg, &m->eng);
  zrt_config_destroy(cfg);
  if (st) return st;
  zrt_engine_info info;
  zrt_engine_get_info(m->eng, &info);
  m->rank = info.rank;
  m->world = info.world_size;
  m->dt = info.dtype;
  for (int k = 0; k < CKM_NMOD && !st; k++) st = zrt_module_add(m->eng, ckm_modules[k], &m->mod[k]);
  for (int i = 0; i < CKM_NPARAM && !st; i++) {
    int64_t shape[2] = {ckm_params[i].shape[0], ckm_params[i].shape[1]};
    if (shape_tweak && i == 1) shape[1] += 1;
    zrt_init init = {ckm_params[i].ndim == 2 ? ZRT_INIT_NORMAL : ZRT_INIT_ZEROS, 0.5f};
    st = zrt_param_add(m->eng, m->mod[ckm_params[i].module], ckm_params[i].name, ckm_params[i].ndim,
                       shape, init, ckm_params[i].ndim == 1 ? 1u : 0u, &m->pid[i]);
  }
  if (!st) st = zrt_engine_build(m->eng);
  return st;
}

static float ckm_target(int rank, int64_t micro, int param, int64_t i) {
  return (float)sin(0.37 * (double)i + 1.3 * param + 0.71 * (double)micro + 2.1 * rank);
}

/* One micro-batch at data position `micro` (the global micro-step index). */
static zrt_status ckm_micro(ckm *m, int64_t micro, zrt_step_info *info) {
  double loss = 0;
  int64_t total = 0;
  zrt_status st = ZRT_OK;
  size_t es = zrt_dtype_size(m->dt);
  for (int k = 0; k < CKM_NMOD && !st; k++) {
    st = zrt_module_fetch(m->eng, m->mod[k]);
    for (int i = 0; i < CKM_NPARAM && !st; i++) {
      if (ckm_params[i].module != k) continue;
      int64_t n;
      void *w, *g;
      zrt_param_numel(m->eng, m->pid[i], &n);
      if ((st = zrt_param_data(m->eng, m->pid[i], &w))) break;
      if ((st = zrt_param_grad(m->eng, m->pid[i], &g))) break;
      void *hw = malloc((size_t)n * es), *hg = malloc((size_t)n * es);
      zrt_engine_memcpy(m->eng, hw, w, (size_t)n * es, ZRT_COPY_D2H);
      zrt_engine_memcpy(m->eng, hg, g, (size_t)n * es, ZRT_COPY_D2H);
      float scale;
      zrt_engine_loss_scale(m->eng, &scale);
      for (int64_t e = 0; e < n; e++) {
        float d = zrt_load_f(hw, m->dt, (size_t)e) - ckm_target(m->rank, micro, i, e);
        loss += 0.5 * (double)d * d;
        float gv = zrt_load_f(hg, m->dt, (size_t)e) + d * scale / 100.0f;
        zrt_store_f(hg, m->dt, (size_t)e, gv);
      }
      total += n;
      zrt_engine_memcpy(m->eng, g, hg, (size_t)n * es, ZRT_COPY_H2D);
      free(hw);
      free(hg);
    }
    if (!st) st = zrt_module_grads_ready(m->eng, m->mod[k]);
    if (!st) st = zrt_module_release(m->eng, m->mod[k]);
  }
  if (st) return st;
  (void)total;
  return zrt_engine_step(m->eng, (float)(loss / 100.0), info);
}

/* Trains optimizer steps [from, to) (two micro-batches each); losses[s]
 * receives step s's loss. */
static zrt_status ckm_train(ckm *m, int from, int to, float *losses) {
  for (int s = from; s < to; s++) {
    zrt_step_info info;
    for (int mb = 0; mb < 2; mb++) {
      zrt_status st = ckm_micro(m, 2 * (int64_t)s + mb, &info);
      if (st) return st;
    }
    if (!info.boundary) {
      fprintf(stderr, "step %d: the second micro-batch was not a boundary\n", s);
      return ZRT_ERR_INTERNAL;
    }
    losses[s] = info.loss;
  }
  return ZRT_OK;
}

#endif
