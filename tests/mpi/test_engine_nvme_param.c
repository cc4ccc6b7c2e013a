/*
 * test_engine_nvme_param.c — zero_optimization.offload_param.device nvme
 * (ZeRO-Infinity parameter offload) at stage 3, at -n 2 and -n 4.
 *
 * Model: the three uneven modules of test_engine_nvme.c (AdamW, weight
 * decay with NO_DECAY pieces, clipping, sub_group_size 1024 so the param
 * file's staging is smaller than the shards and chunks cut modules),
 * gradients a pure function of (rank, step, element). Reference: the same
 * run with offload_param cpu. Checks (tolerance 0, bitwise; max diff
 * printed):
 *  - bf16 AdamW with offload_optimizer nvme and with cpu, fp32 SGD with
 *    momentum (4-byte "16-bit" file): fp32 master, optimizer states and the
 *    working weights gathered from the param file equal the param-cpu run's
 *    after 3 steps;
 *  - the param file is per rank ("zrt_rank<R>_param_*" under nvme_path),
 *    its size on disk is 2 generations of align4096(2 P/N) bytes (memest's
 *    nvme_bytes less the optimizer files' share) and it is removed at
 *    destroy;
 *  - checkpoint: param nvme trains 2 steps, saves, trains 2 more; a new
 *    param-nvme engine loads and trains the same 2 steps: bitwise equal; a
 *    stage-2 engine (no param offload) resumes from it bitwise like one
 *    resumed from the param-cpu checkpoint of the same step; `zrt
 *    consolidate` of both checkpoints gives the same tensors byte for byte
 *    (checkpoint saves read the 16-bit sections from the file);
 *  - errors: a missing offload_param.nvme_path and an unset one name
 *    zero_optimization.offload_param.nvme_path.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amp/dtype.h"
#include "runtime/engine_internal.h"
#include "runtime/memest.h"
#include "runtime/safetensors.h"
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
  int oo, op;        /* offload_optimizer / offload_param: 1 cpu, 2 nvme */
  const char *dtype; /* "bf16" or "fp32" */
  const char *optim; /* "AdamW" or "SGD" */
  const char *dir;   /* nvme_path of both */
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
  const char *kv[][2] = {
      {"zero_optimization.stage", sb},
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
      {"zrt.pin_memory_fallback", "true"},
      {"zrt.seed", "99"},
      {"zero_optimization.offload_optimizer.device", o->oo == 2 ? "nvme" : "cpu"}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    ZT_OK(zrt_config_set(cfg, kv[i][0], kv[i][1], "test"));
  if (o->oo == 2)
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_optimizer.nvme_path", o->dir, "test"));
  if (o->op)
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_param.device", o->op == 2 ? "nvme" : "cpu",
                         "test"));
  if (o->op == 2)
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_param.nvme_path", o->dir, "test"));
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
  size_t cap = 0, wcap = 0, ws = zrt_dtype_size(e->dtype);
  for (int k = 0; k < NMOD; k++) {
    int64_t off, len;
    zrt_engine_master_extent(e, k, &off, &len);
    cap += (size_t)len * (size_t)(1 + ns);
    wcap += (size_t)e->modules[k].numel * ws;
  }
  s.v = malloc(cap * 4);
  s.w16 = malloc(wcap);
  for (int k = 0; k < NMOD; k++) {
    int64_t off, len;
    zrt_engine_master_extent(e, k, &off, &len);
    for (int a = 0; a <= ns; a++) {
      ZT_OK(zrt_engine_state_io(e, k, a, 0, s.v + s.n));
      s.n += (size_t)len;
    }
    void *p;
    ZT_OK(zrt_module_fetch(e, m->mod[k]));
    ZT_OK(zrt_param_data(e, m->pid[k == 0 ? 0 : k == 1 ? 2 : 5], &p));
    size_t b = (size_t)e->modules[k].numel * ws;
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

/* bytes of this rank's param swap files under dir (0 when there are none) */
static long long rank_files(const char *dir, int rank, int *count) {
  char pre[32];
  snprintf(pre, sizeof pre, "zrt_rank%d_param_", rank);
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
static void consolidate_same(const char *dir, const char *ck_nvme, const char *ck_cpu) {
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
  printf("zrt consolidate: param-nvme checkpoint vs param-cpu checkpoint: %zu tensors, %zu differ "
         "(bitwise)\n",
         n, differ);
  ZT_CHECK(differ == 0);
  zrt_st_close(f[0]);
  zrt_st_close(f[1]);
}

static void equivalence(const run_opts *base, const char *what) {
  snap s[2];
  int rank = 0;
  for (int pn = 0; pn < 2; pn++) {
    run_opts o = *base;
    o.op = 1 + pn;
    model m;
    ZT_OK(model_create(&m, &o));
    rank = m.rank;
    for (int step = 1; step <= 3; step++) model_step(&m, step);
    s[pn] = take(&m);
    if (pn) {
      zrt_memest_layout lay;
      memset(&lay, 0, sizeof lay);
      lay.world = m.world;
      lay.stage = 3;
      lay.optim_states = zrt_engine_optim_states(m.eng);
      for (int k = 0; k < NMOD; k++) {
        lay.padded_total += m.eng->modules[k].padded;
        lay.max_module_padded = ZRT_MAX(lay.max_module_padded, m.eng->modules[k].padded);
      }
      lay.offload_optimizer = lay.offload_param = lay.offload_param_nvme = 1;
      lay.offload_nvme = o.oo == 2;
      lay.sub_group_size = 1024;
      lay.dtype_bytes = lay.comm_bytes = (int)zrt_dtype_size(m.eng->dtype);
      zrt_memest_result r;
      zrt_memest_predict(&lay, &r);
      unsigned long long want = r.nvme_bytes - zrt_offload_pipe_nvme_disk_bytes(m.eng->offload);
      int files;
      long long bytes = rank_files(o.dir, m.rank, &files);
      if (m.rank == 0)
        printf("%s: rank 0 param files %d, %lld bytes on disk, predicted %llu (memest nvme_bytes "
               "%llu in all)\n",
               what, files, bytes, want, (unsigned long long)r.nvme_bytes);
      ZT_CHECK(files == 1);
      ZT_CHECK((unsigned long long)bytes == want);
    }
    zrt_engine_destroy(m.eng);
    if (pn) {
      int files;
      rank_files(o.dir, rank, &files);
      ZT_CHECK(files == 0);
    }
  }
  compare(what, &s[1], &s[0], rank);
  snap_free(&s[0]);
  snap_free(&s[1]);
}

static void checkpoint_resume(const char *dir) {
  char ck[2][1200];
  snprintf(ck[0], sizeof ck[0], "%s/ckpt_pcpu", dir);
  snprintf(ck[1], sizeof ck[1], "%s/ckpt_pnvme", dir);
  run_opts o = {.stage = 3, .oo = 2, .op = 2, .dtype = "bf16", .optim = "AdamW", .dir = dir};
  model m;
  ZT_OK(model_create(&m, &o));
  int rank = m.rank;
  for (int step = 1; step <= 2; step++) model_step(&m, step);
  ZT_OK(zrt_engine_save(m.eng, ck[1], NULL));
  for (int step = 3; step <= 4; step++) model_step(&m, step);
  snap full = take(&m);
  zrt_engine_destroy(m.eng);

  ZT_OK(model_create(&m, &o));
  ZT_OK(zrt_engine_load(m.eng, ck[1], NULL));
  for (int step = 3; step <= 4; step++) model_step(&m, step);
  snap res = take(&m);
  zrt_engine_destroy(m.eng);
  compare("checkpoint param nvme: resume vs uninterrupted", &res, &full, rank);
  snap_free(&res);
  snap_free(&full);

  /* the same 2 steps with offload_param cpu, saved beside */
  run_opts c = o;
  c.op = 1;
  ZT_OK(model_create(&m, &c));
  for (int step = 1; step <= 2; step++) model_step(&m, step);
  ZT_OK(zrt_engine_save(m.eng, ck[0], NULL));
  zrt_engine_destroy(m.eng);

  /* resharded into stage 2 (no param offload) from each checkpoint */
  snap s2[2];
  for (int k = 0; k < 2; k++) {
    run_opts p = {.stage = 2, .oo = 1, .dtype = "bf16", .optim = "AdamW", .dir = dir};
    ZT_OK(model_create(&m, &p));
    ZT_OK(zrt_engine_load(m.eng, ck[k], NULL));
    for (int step = 3; step <= 4; step++) model_step(&m, step);
    s2[k] = take(&m);
    zrt_engine_destroy(m.eng);
  }
  compare("checkpoint -> stage 2 resume: from param nvme vs from param cpu", &s2[1], &s2[0], rank);
  snap_free(&s2[0]);
  snap_free(&s2[1]);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) consolidate_same(dir, ck[1], ck[0]);
}

static void errors(const char *dir, int rank) {
  char missing[1200];
  snprintf(missing, sizeof missing, "%s/does_not_exist", dir);
  run_opts o = {.stage = 3, .oo = 1, .op = 2, .dtype = "bf16", .optim = "AdamW", .dir = missing};
  model m;
  zrt_status st = model_create(&m, &o);
  if (rank == 0) printf("missing param nvme_path: status %d: %s\n", (int)st, zrt_last_error());
  ZT_CHECK(st == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "zero_optimization.offload_param.nvme_path");
  ZT_CONTAINS(zrt_last_error(), missing);
  ZT_CONTAINS(zrt_last_error(), "No such file or directory");
  zrt_engine_destroy(m.eng);

  o.dir = "";
  st = model_create(&m, &o);
  if (rank == 0) printf("unset param nvme_path: status %d: %s\n", (int)st, zrt_last_error());
  ZT_CHECK(st == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "zero_optimization.offload_param.nvme_path");
  ZT_CONTAINS(zrt_last_error(), "is not set");
  zrt_engine_destroy(m.eng);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  char dir[1024] = {0};
  if (rank == 0) {
    const char *base = getenv("ZRT_BUILD_DIR");
    if (!base || access(base, W_OK)) base = getenv("TMPDIR");
    if (!base || access(base, W_OK)) base = "/tmp";
    snprintf(dir, sizeof dir, "%s/zrt_nvmeparam_XXXXXX", base);
    ZT_CHECK(mkdtemp(dir) != NULL);
    printf("nvme_path %s (world %d)\n", dir, world);
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);

  run_opts a = {.stage = 3, .oo = 2, .dtype = "bf16", .optim = "AdamW", .dir = dir};
  equivalence(&a, "stage 3 bf16 AdamW, optimizer nvme: param nvme vs param cpu");
  run_opts b = {.stage = 3, .oo = 1, .dtype = "bf16", .optim = "AdamW", .dir = dir};
  equivalence(&b, "stage 3 bf16 AdamW, optimizer cpu: param nvme vs param cpu");
  run_opts c = {.stage = 3, .oo = 2, .dtype = "fp32", .optim = "SGD", .dir = dir};
  equivalence(&c, "stage 3 fp32 SGD momentum, optimizer nvme: param nvme vs param cpu");
  checkpoint_resume(dir);
  errors(dir, rank);

  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ZT_CHECK(system(cmd) == 0);
  }
  int fails = zt_failures, all = 0;
  MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  zt_failures = all;
  ZT_DONE();
}
