/*
 * engine_nvme_model.h — the model and helpers the NVMe offload engine tests
 * share (test_engine_nvme.c: optimizer state on NVMe; test_engine_nvme_param.c:
 * stage-3 parameters on NVMe): three modules of uneven sizes with
 * NO_DECAY pieces, gradients a pure function of (rank, step, element), a
 * snapshot of masters / optimizer states / working weights compared
 * bitwise, the per-rank swap files on disk, and `zrt consolidate` of two
 * checkpoints compared byte for byte. Header-only (static functions): each
 * test is its own program.
 */
#ifndef ZRT_TEST_ENGINE_NVME_MODEL_H
#define ZRT_TEST_ENGINE_NVME_MODEL_H

#include <dirent.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtype.h"
#include "memest.h"
#include "safetensors.h"
#include "zt_engine.h"
#include "zt_mpi.h"
#include "ztest.h"

#define NMOD 3
#define NPAR 7
static const struct {
  int module;
  const char *name;
  int64_t numel;
  unsigned flags;
} params[NPAR] = {
    {0, "emb.weight", 3001, 0},
    {0, "emb.norm", 77, ZRT_PARAM_NO_DECAY},
    {1, "blk.w", 5003, 0},
    {1, "blk.b", 131, ZRT_PARAM_NO_DECAY},
    {1, "blk.w2", 2047, 0},
    {2, "head.w", 1500, 0},
    {2, "head.b", 5, ZRT_PARAM_NO_DECAY},
};

typedef struct run_opts {
  int stage;
  int oo, op;        /* offload_optimizer / offload_param: 0 none, 1 cpu, 2 nvme */
  const char *dtype; /* "bf16" or "fp32" */
  const char *optim; /* "AdamW" or "SGD" */
  const char *dir;   /* nvme_path of both */
  /* optional (NULL: the config's default): stage3_prefetch_bucket_size,
   * stage3_max_reuse_distance, offload_param.buffer_count */
  const char *prefetch, *reuse, *buffer_count;
} run_opts;

typedef struct model {
  zrt_engine *eng;
  int mod[NMOD], pid[NPAR];
  int rank, world;
} model;

static zrt_status model_create(model *m, const run_opts *o) {
  memset(m, 0, sizeof *m);
  zrt_config *cfg;
  ZT_OK(zrt_config_create(&cfg));
  char sb[8];
  snprintf(sb, sizeof sb, "%d", o->stage);
  const char *kv[][2] = {{"zero_optimization.stage", sb},
                         {"train_micro_batch_size_per_gpu", "1"},
                         {"optimizer.type", o->optim},
                         {"optimizer.params.lr", "0.01"},
                         {"optimizer.params.weight_decay", "0.1"},
                         {"optimizer.params.momentum", "0.9"},
                         {"gradient_clipping", "1.0"},
                         {"bf16.enabled", strcmp(o->dtype, "bf16") ? "false" : "true"},
                         {"zero_optimization.reduce_bucket_size", "2048"},
                         {"zero_optimization.sub_group_size", "1024"},
                         {"zero_optimization.stage3_param_persistence_threshold", "0"},
                         {"zrt.comm", "mpi"},
                         {"zrt.backend", zt_host_backend()}, /* the model computes on the host */
                         {"zrt.pin_memory_fallback", "true"},
                         /* pinned: on the twin the pipe runs in stream mode */
                         {"zero_optimization.offload_optimizer.pin_memory", "true"},
                         {"zrt.seed", "99"},
                         {"zero_optimization.offload_optimizer.device", o->oo == 2   ? "nvme"
                                                                        : o->oo == 1 ? "cpu"
                                                                                     : "none"}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    ZT_OK(zrt_config_set(cfg, kv[i][0], kv[i][1], "test"));
  if (o->oo == 2)
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_optimizer.nvme_path", o->dir, "test"));
  if (o->op)
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_param.device", o->op == 2 ? "nvme" : "cpu",
                         "test"));
  if (o->op == 2)
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_param.nvme_path", o->dir, "test"));
  if (o->prefetch)
    ZT_OK(
        zrt_config_set(cfg, "zero_optimization.stage3_prefetch_bucket_size", o->prefetch, "test"));
  if (o->reuse)
    ZT_OK(zrt_config_set(cfg, "zero_optimization.stage3_max_reuse_distance", o->reuse, "test"));
  if (o->buffer_count)
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_param.buffer_count", o->buffer_count,
                         "test"));
  zrt_status st = zrt_engine_create(cfg, &m->eng);
  zrt_config_destroy(cfg);
  if (st) return st;
  zrt_engine_info info;
  ZT_OK(zrt_engine_get_info(m->eng, &info));
  m->rank = info.rank;
  m->world = info.world_size;
  for (int k = 0; k < NMOD; k++) {
    char n[16];
    snprintf(n, sizeof n, "m%d", k);
    ZT_OK(zrt_module_add(m->eng, n, &m->mod[k]));
  }
  for (int i = 0; i < NPAR; i++) {
    zrt_init init = {.kind = ZRT_INIT_NORMAL, .a = 0.05f};
    ZT_OK(zrt_param_add(m->eng, m->mod[params[i].module], params[i].name, 1, &params[i].numel, init,
                        params[i].flags, &m->pid[i]));
  }
  return zrt_engine_build(m->eng);
}

/* One optimizer step; gradients depend on (rank, step, element) only. */
static void model_step(model *m, int step) {
  zrt_engine *e = m->eng;
  zrt_engine_info info;
  ZT_OK(zrt_engine_get_info(e, &info));
  size_t ws = zrt_dtype_size(info.dtype);
  void *g = malloc(6000 * 4);
  for (int k = 0; k < NMOD; k++) {
    ZT_OK(zrt_module_fetch(e, m->mod[k]));
    ZT_OK(zrt_module_release(e, m->mod[k]));
  }
  for (int k = NMOD - 1; k >= 0; k--) {
    ZT_OK(zrt_module_fetch(e, m->mod[k]));
    for (int i = 0; i < NPAR; i++) {
      if (params[i].module != k) continue;
      void *p;
      ZT_OK(zrt_param_grad(e, m->pid[i], &p));
      for (int64_t j = 0; j < params[i].numel; j++)
        zrt_store_f(
            g, info.dtype, (size_t)j,
            0.02f * sinf(0.37f * (float)j + 1.3f * (float)m->rank + 0.7f * (float)step + (float)i));
      ZT_OK(zrt_engine_memcpy(e, p, g, (size_t)params[i].numel * ws, ZRT_COPY_H2D));
    }
    ZT_OK(zrt_module_grads_ready(e, m->mod[k]));
    ZT_OK(zrt_module_release(e, m->mod[k]));
  }
  zrt_step_info si;
  ZT_OK(zrt_engine_step(e, 1.0f, &si));
  ZT_CHECK(si.boundary && !si.skipped);
  free(g);
}

/* Everything the optimizer owns on this rank, flattened: master, states
 * (per module, master extent) and the module's 16-bit weights (fetched). */
typedef struct snap {
  float *v;
  size_t n;
  void *w16;
  size_t w16_bytes;
} snap;

static snap take(model *m) {
  zrt_engine *e = m->eng;
  snap s = {0};
  int ns = zrt_engine_optim_states(e);
  size_t cap = 0, wcap = 0, ws = zrt_dtype_size(zt_view(e).dtype);
  for (int k = 0; k < NMOD; k++) {
    int64_t off, len;
    zrt_engine_master_extent(e, k, &off, &len);
    cap += (size_t)len * (size_t)(1 + ns);
    wcap += (size_t)zt_module(e, k).numel * ws;
  }
  s.v = malloc(cap * 4);
  s.w16 = malloc(wcap);
  for (int k = 0; k < NMOD; k++) {
    int64_t off, len;
    zrt_engine_master_extent(e, k, &off, &len);
    for (int a = 0; a <= ns; a++) {
      ZT_OK(zrt_engine_state_io(e, k, (zrt_state_array)a, ZRT_IO_READ, s.v + s.n));
      s.n += (size_t)len;
    }
    void *p;
    ZT_OK(zrt_module_fetch(e, m->mod[k]));
    ZT_OK(zrt_param_data(e, m->pid[k == 0 ? 0 : k == 1 ? 2 : 5], &p));
    size_t b = (size_t)zt_module(e, k).numel * ws;
    ZT_OK(zrt_engine_memcpy(e, (char *)s.w16 + s.w16_bytes, p, b, ZRT_COPY_D2H));
    s.w16_bytes += b;
    ZT_OK(zrt_module_release(e, m->mod[k]));
  }
  return s;
}

static void compare(const char *what, const snap *a, const snap *b, int rank) {
  ZT_CHECK(a->n == b->n && a->w16_bytes == b->w16_bytes);
  double maxd = 0;
  size_t bad = 0;
  for (size_t i = 0; i < a->n && i < b->n; i++)
    if (memcmp(&a->v[i], &b->v[i], 4)) {
      bad++;
      double d = fabs((double)a->v[i] - b->v[i]);
      maxd = isnan(d) ? INFINITY : fmax(maxd, d);
    }
  int wsame = a->w16_bytes == b->w16_bytes && !memcmp(a->w16, b->w16, a->w16_bytes);
  if (rank == 0 || bad || !wsame)
    printf("rank %d %s: %zu fp32 master/state values, %zu differ, max diff %.3g; 16-bit weights "
           "%s (tolerance 0, bitwise)\n",
           rank, what, a->n, bad, maxd, wsame ? "equal" : "DIFFER");
  ZT_CHECK(bad == 0 && wsame);
}

static void snap_free(snap *s) {
  free(s->v);
  free(s->w16);
}

/* bytes of this rank's swap files named zrt_rank<R>_<kind>* under dir (kind "" = all of
 * them, "param_" = the parameter file; 0 when there are none) */
static long long rank_files(const char *dir, int rank, const char *kind, int *count) {
  char pre[32];
  snprintf(pre, sizeof pre, "zrt_rank%d_%s", rank, kind);
  DIR *d = opendir(dir);
  long long bytes = 0;
  *count = 0;
  struct dirent *de;
  while (d && (de = readdir(d))) {
    if (strncmp(de->d_name, pre, strlen(pre))) continue;
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    struct stat sb;
    if (stat(p, &sb) == 0) bytes += (long long)sb.st_size;
    (*count)++;
  }
  if (d) closedir(d);
  return bytes;
}

/* rank 0: consolidates both checkpoints with the zrt command and compares
 * every tensor's bytes */
static void consolidate_same(const char *what, const char *dir, const char *ck_nvme,
                             const char *ck_cpu) {
  const char *bd = getenv("ZRT_BUILD_DIR");
  char zrt[1200], cmd[4000], out[2][1200];
  snprintf(zrt, sizeof zrt, "%s/bin/zrt", bd ? bd : ".");
  if (access(zrt, X_OK)) {
    printf("consolidate: %s not built, skipped\n", zrt);
    return;
  }
  const char *ck[2] = {ck_nvme, ck_cpu};
  for (int i = 0; i < 2; i++) {
    snprintf(out[i], sizeof out[i], "%s/cons%d.safetensors", dir, i);
    snprintf(cmd, sizeof cmd, "'%s' consolidate '%s' '%s' >/dev/null", zrt, ck[i], out[i]);
    ZT_CHECK(system(cmd) == 0);
  }
  zrt_st_file *f[2] = {NULL, NULL};
  ZT_OK(zrt_st_open(out[0], &f[0]));
  ZT_OK(zrt_st_open(out[1], &f[1]));
  if (!f[0] || !f[1]) return;
  size_t n = zrt_st_count(f[0]), differ = 0;
  ZT_CHECK(n == NPAR && zrt_st_count(f[1]) == n);
  for (size_t i = 0; i < n; i++) {
    const zrt_st_tensor *a = zrt_st_get(f[0], i), *b = zrt_st_find(f[1], a->name);
    ZT_CHECK(b != NULL);
    if (!b) continue;
    size_t bytes = (size_t)zrt_st_numel(a) * zrt_st_dtype_size(a->dtype);
    ZT_CHECK(bytes == (size_t)zrt_st_numel(b) * zrt_st_dtype_size(b->dtype));
    char *x = malloc(bytes), *y = malloc(bytes);
    ZT_OK(zrt_st_read(f[0], a, 0, x, bytes));
    ZT_OK(zrt_st_read(f[1], b, 0, y, bytes));
    if (memcmp(x, y, bytes)) differ++;
    free(x);
    free(y);
  }
  printf("zrt consolidate: %s: %zu tensors, %zu differ (bitwise)\n", what, n, differ);
  ZT_CHECK(differ == 0);
  zrt_st_close(f[0]);
  zrt_st_close(f[1]);
}

/* Every rank done, rank 0 removes the swap directory (the test then ends
 * with ZT_MPI_DONE). */
static void nvme_test_cleanup(const char *dir, int rank) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ZT_CHECK(system(cmd) == 0);
  }
}

#endif
