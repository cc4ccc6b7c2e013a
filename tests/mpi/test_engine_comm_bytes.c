/*
 * test_engine_comm_bytes.c — the engine's per-step communication volume
 * against ZeRO's theory (run at -n 2 and -n 4).
 *
 * A 3-module model of uneven sizes (padded total Ψ elements) is driven like
 * the GPT example with tied weights: module 0 is the embedding whose weight
 * is also the LM head, module 1 a block, module 2 the final norm. Per
 * micro-batch: forward fetch/release of 0 and 1; the head fetches 2 and 0
 * (and 0 once more, nested: a tied weight used twice inside one fetch) and
 * runs its forward and backward in that fetch; the block's backward
 * fetches 1 again; the embedding's backward only takes its grads (no
 * fetch); then zrt_engine_step. So stage 3 gathers module 0 twice per
 * micro-batch (embedding, then LM head: used twice in one pass, released in
 * between), module 1 twice, module 2 once: g = {2, 2, 1}; the nested fetch
 * gathers nothing. The volume is comm->bytes_moved, which counts what
 * a rank sends by the ring formulas (all-reduce 2(N-1)/N, reduce-scatter
 * and all-gather (N-1)/N of the buffer). Theory per rank per optimizer step,
 * with K micro-batches, c = reduction (communication_data_type) bytes,
 * w = working-dtype bytes, f = (N-1)/N, P_m = module m's padded elements:
 *   stage 0: all-reduce of the grads                  2Ψ·c·f
 *   stage 1: reduce-scatter + all-gather of params     Ψ·c·f + Ψ·w·f
 *   stage 2: reduce-scatter every micro-batch + gather K·Ψ·c·f + Ψ·w·f
 *   stage 3: per micro-batch the gathers + 1 reduce-scatter
 *                                                      K·(Σ g_m·P_m·w + Ψ·c)·f
 * (for K = 1, c = w and a program that gathers every module twice: 2Ψ·w·f
 * at stages 0-2, 3Ψ·w·f at stage 3, the ZeRO paper's numbers) plus the one
 * all-reduce of {sumsq, nonfinite, loss}:
 * 2·3·4·f bytes. Stage 0/1 reduce once per step (DeepSpeed accumulates
 * micro-batches locally there); stage 2/3 reduce every micro-batch.
 * Tolerance: the ring formula truncates to whole bytes per collective, so
 * the measured value lies in [theory - collectives, theory].
 * Stage 3 runs once with stage3_max_reuse_distance 0 (every use after a
 * release gathers: the g above) and once with 1e9 (DeepSpeed's default):
 * from the second step on (the first records the fetch order) every release
 * whose module is fetched again in the step is kept gathered, so each module
 * is gathered once per step: (Ψ·w + K·Ψ·c)·f. The engine's gather and
 * reuse counters must agree, and the final fp32 masters must equal the
 * distance-0 run bitwise (the grads are a function of the weights the
 * program reads, so a stale kept copy would show).
 * The metrics file's comm_bytes (rank 0) must equal rank 0's measured
 * volume of the whole step window exactly (the window runs from the end of
 * the previous boundary, so the first step also carries build's traffic).
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtype.h"
#include "zt_engine.h"
#include "zt_mpi.h"
#include "ztest.h"

#define NMOD 3
#define STEPS 3

/* The stage-3 coordinator's counters (zeros at stages 0-2). */
static zrt_coord_stats coord_stats(const zrt_engine *eng) {
  zrt_coord_stats st;
  zrt_coord_stats_get(zt_probe(eng).coord, &st);
  return st;
}

static const int64_t mod_numel[NMOD][2] = {{1000, 37}, {333, 0}, {2050, 64}};
/* stage-3 gathers per micro-batch of each module under the schedule above */
static const int gathers[NMOD] = {2, 2, 1};

typedef struct run_cfg {
  int stage;
  int accum;
  const char *dtype;     /* "fp32" | "bf16" */
  const char *comm_type; /* communication_data_type or NULL */
  int reuse;             /* stage3_max_reuse_distance: 0 or 1e9 */
} run_cfg;

static int rank_, world_;

/* Adds a deterministic gradient into parameter p's grad buffer: with
 * use_w, 0.5 * the working weights the program reads (the module must be
 * fetched) plus a rank-dependent term. */
static void add_grad(zrt_engine *eng, int p, int use_w) {
  int64_t n = zrt_engine_param_entry(eng, p)->numel;
  size_t ws = zrt_dtype_size(zt_view(eng).dtype);
  unsigned char *hw = malloc((size_t)n * ws), *hg = malloc((size_t)n * ws);
  void *g, *w;
  ZT_OK(zrt_param_grad(eng, p, &g));
  ZT_OK(zrt_engine_memcpy(eng, hg, g, (size_t)n * ws, ZRT_COPY_D2H));
  if (use_w) {
    ZT_OK(zrt_param_data(eng, p, &w));
    ZT_OK(zrt_engine_memcpy(eng, hw, w, (size_t)n * ws, ZRT_COPY_D2H));
  }
  for (int64_t i = 0; i < n; i++) {
    float v =
        zrt_load_f(hg, zt_view(eng).dtype, (size_t)i) + 1e-2f * (float)((i * 7 + rank_) % 13 - 6);
    if (use_w) v += 0.5f * zrt_load_f(hw, zt_view(eng).dtype, (size_t)i);
    zrt_store_f(hg, zt_view(eng).dtype, (size_t)i, v);
  }
  ZT_OK(zrt_engine_memcpy(eng, g, hg, (size_t)n * ws, ZRT_COPY_H2D));
  free(hw);
  free(hg);
}

/* Reads the comm_bytes of every line of a metrics file (rank 0). */
static int read_metrics(const char *path, unsigned long long *out, int max) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[8192];
  int n = 0;
  while (fgets(line, sizeof line, f) && n < max) {
    const char *p = strstr(line, "\"comm_bytes\":");
    if (p) out[n++] = strtoull(p + 13, NULL, 10);
  }
  fclose(f);
  return n;
}

/* Returns the rank's final fp32 master shards, concatenated (malloc). */
static float *run(const run_cfg *rc, int64_t *nmaster) {
  char mpath[256] = "";
  if (rank_ == 0)
    snprintf(mpath, sizeof mpath, "/tmp/zrt_comm_bytes_%d_%d.jsonl", getpid(), rc->stage);
  MPI_Bcast(mpath, sizeof mpath, MPI_CHAR, 0, MPI_COMM_WORLD);
  zrt_config *cfg;
  ZT_OK(zrt_config_create(&cfg));
  /* the model computes on the host: pin the CPU backend (auto picks CUDA on a GPU) */
  ZT_OK(zrt_config_set(cfg, "zrt.backend", zt_host_backend(), "test"));
  char v[64];
  snprintf(v, sizeof v, "%d", rc->stage);
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage", v, "test"));
  snprintf(v, sizeof v, "%d", rc->accum);
  ZT_OK(zrt_config_set(cfg, "gradient_accumulation_steps", v, "test"));
  ZT_OK(zrt_config_set(cfg, "train_micro_batch_size_per_gpu", "1", "test"));
  /* several buckets per module, and no persistent (stays-gathered) module */
  ZT_OK(zrt_config_set(cfg, "zero_optimization.reduce_bucket_size", "512", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage3_param_persistence_threshold", "0", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage3_max_reuse_distance", rc->reuse ? "1e9" : "0",
                       "test"));
  ZT_OK(zrt_config_set(cfg, "zrt.comm", "mpi", "test"));
  if (!strcmp(rc->dtype, "bf16")) ZT_OK(zrt_config_set(cfg, "bf16.enabled", "true", "test"));
  if (rc->comm_type) ZT_OK(zrt_config_set(cfg, "communication_data_type", rc->comm_type, "test"));
  /* the same config on every rank (the metrics gather is collective);
   * only rank 0 writes the file */
  if (rank_ == 0) unlink(mpath);
  ZT_OK(zrt_config_set(cfg, "zrt.metrics_path", mpath, "test"));
  zrt_engine *eng;
  ZT_OK(zrt_engine_create(cfg, &eng));
  int pid[NMOD][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
  for (int m = 0; m < NMOD; m++) {
    char name[32];
    int mid;
    snprintf(name, sizeof name, "block%d", m);
    ZT_OK(zrt_module_add(eng, name, &mid));
    for (int k = 0; k < 2; k++) {
      if (!mod_numel[m][k]) continue;
      snprintf(name, sizeof name, "block%d.%s", m, k ? "bias" : "weight");
      int64_t shape[1] = {mod_numel[m][k]};
      zrt_init init = {ZRT_INIT_NORMAL, 0.02f};
      ZT_OK(zrt_param_add(eng, mid, name, 1, shape, init, k ? ZRT_PARAM_NO_DECAY : 0, &pid[m][k]));
    }
  }
  ZT_OK(zrt_engine_build(eng));
  /* build's own traffic (stage 1/2 gather the initialised params): the
   * metrics count it in the first step's window */
  uint64_t build_bytes = zt_view(eng).comm->bytes_moved;
  int64_t psi = 0;
  for (int m = 0; m < NMOD; m++) psi += zt_module(eng, m).padded;
  double f = (double)(world_ - 1) / world_;
  double w = (double)zrt_dtype_size(zt_view(eng).dtype),
         c = (double)zrt_dtype_size(zt_view(eng).comm_dtype);
  double K = rc->accum, P = (double)psi;
  double theory;
  switch (rc->stage) {
  case 0: theory = 2 * P * c * f; break;
  case 1: theory = P * c * f + P * w * f; break;
  case 2: theory = K * P * c * f + P * w * f; break;
  default: {
    double g = 0;
    for (int m = 0; m < NMOD; m++) g += gathers[m] * (double)zt_module(eng, m).padded;
    theory = K * (g * w + P * c) * f;
    break;
  }
  }
  theory += 2 * 4 * 4 * f; /* {sumsq, nonfinite, loss, stop requests} */
  /* stage 3 with reuse, after the first step: each module gathered once */
  double theory_reuse = (P * w + K * P * c) * f + 2 * 4 * 4 * f;
  int64_t gathers_step = 0;
  for (int m = 0; m < NMOD; m++) gathers_step += (int64_t)K * gathers[m];

  unsigned long long measured[STEPS];
  int worst_bad = 0;
  double worst = 0;
  for (int s = 0; s < STEPS; s++) {
    uint64_t b0 = zt_view(eng).comm->bytes_moved, q0 = zt_view(eng).comm->seq;
    int64_t ga0 = coord_stats(eng).gathers;
    for (int k = 0; k < rc->accum; k++) {
      for (int m = 0; m < 2; m++) { /* forward: embedding, block */
        ZT_OK(zrt_module_fetch(eng, m));
        ZT_OK(zrt_module_release(eng, m));
      }
      /* head: final norm + the tied embedding weight, forward and backward */
      ZT_OK(zrt_module_fetch(eng, 2));
      ZT_OK(zrt_module_fetch(eng, 0));
      ZT_OK(zrt_module_fetch(eng, 0)); /* nested: no gather */
      ZT_OK(zrt_module_release(eng, 0));
      void *w0;
      ZT_OK(zrt_param_data(eng, pid[0][0], &w0)); /* still gathered for the outer fetch */
      for (int m = 2; m >= 0; m -= 2)
        for (int j = 0; j < 2; j++)
          if (pid[m][j] >= 0) add_grad(eng, pid[m][j], 1);
      ZT_OK(zrt_module_grads_ready(eng, 2));
      ZT_OK(zrt_module_release(eng, 0));
      ZT_OK(zrt_module_release(eng, 2));
      /* backward of the block, then the embedding's (grads only) */
      ZT_OK(zrt_module_fetch(eng, 1));
      add_grad(eng, pid[1][0], 1);
      ZT_OK(zrt_module_grads_ready(eng, 1));
      ZT_OK(zrt_module_release(eng, 1));
      add_grad(eng, pid[0][1], 0);
      ZT_OK(zrt_module_grads_ready(eng, 0));
      zrt_step_info si;
      ZT_OK(zrt_engine_step(eng, 1.0f, &si));
      ZT_CHECK(si.boundary == (k == rc->accum - 1) && !si.skipped);
    }
    uint64_t got = zt_view(eng).comm->bytes_moved - b0, ncoll = zt_view(eng).comm->seq - q0;
    measured[s] = got;
    int kept = rc->stage == 3 && rc->reuse && s > 0;
    double th = kept ? theory_reuse : theory;
    double d = th - (double)got;
    if (rc->stage == 3) {
      int64_t ga = coord_stats(eng).gathers - ga0, want = kept ? NMOD : gathers_step;
      if (ga != want) {
        fprintf(stderr, "rank %d step %d: %lld stage-3 gathers, expected %lld\n", rank_, s,
                (long long)ga, (long long)want);
        worst_bad = 1;
      }
    }
    if (fabs(d) > worst) worst = fabs(d);
    if (!(d >= 0 && d <= (double)ncoll)) worst_bad = 1;
    if (rank_ == 0 && s == STEPS - 1)
      printf("np %d stage %d K %d %s comm %s reuse %s: Ψ %lld padded elems, %llu collectives/step, "
             "bytes/step measured %llu theory %.1f (%.4f Ψ·w·f), diff %.1f (tolerance [0, %llu]); "
             "kept copies %lld\n",
             world_, rc->stage, rc->accum, rc->dtype, rc->comm_type ? rc->comm_type : "default",
             rc->reuse ? "1e9" : "0", (long long)psi, (unsigned long long)ncoll,
             (unsigned long long)got, th, (double)got / (P * w * f), d, (unsigned long long)ncoll,
             (long long)coord_stats(eng).reuse_kept);
  }
  if (rc->stage == 3)
    ZT_CHECK(rc->reuse ? coord_stats(eng).reuse_kept > 0 : coord_stats(eng).reuse_kept == 0);
  /* master extents: the shard, or the whole module at stage 0 */
  int64_t tot = 0, off, len;
  for (int m = 0; m < NMOD; m++) {
    zrt_engine_master_extent(eng, m, &off, &len);
    tot += len;
  }
  float *masters = malloc((size_t)tot * sizeof(float));
  tot = 0;
  for (int m = 0; m < NMOD; m++) {
    zrt_engine_master_extent(eng, m, &off, &len);
    ZT_OK(zrt_engine_get_master(eng, m, masters + tot));
    tot += len;
  }
  *nmaster = tot;
  if (worst_bad)
    fprintf(stderr, "rank %d stage %d: bytes/step off theory by %.1f\n", rank_, rc->stage, worst);
  ZT_CHECK(!worst_bad);
  zrt_engine_destroy(eng);
  zrt_config_destroy(cfg);
  if (rank_ == 0) {
    unsigned long long rep[STEPS];
    int n = read_metrics(mpath, rep, STEPS);
    ZT_CHECK(n == STEPS);
    int mism = 0;
    for (int s = 0; s < n && s < STEPS; s++)
      mism += rep[s] != measured[s] + (s == 0 ? build_bytes : 0);
    printf("  metrics comm_bytes per step: %llu %llu %llu (build traffic %llu in the first); "
           "mismatches vs measured: %d (must be 0)\n",
           n > 0 ? rep[0] : 0ull, n > 1 ? rep[1] : 0ull, n > 2 ? rep[2] : 0ull,
           (unsigned long long)build_bytes, mism);
    ZT_CHECK(mism == 0);
    unlink(mpath);
  }
  return masters;
}

int main(int argc, char **argv) {
  ZT_MPI_INIT(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_);
  if (world_ < 2) {
    MPI_Finalize();
    ZT_SKIP("needs at least 2 ranks");
  }
  static const run_cfg runs[] = {
      {0, 1, "fp32", NULL, 0},   {1, 1, "fp32", NULL, 0},   {2, 1, "fp32", NULL, 0},
      {3, 1, "fp32", NULL, 0},   {3, 1, "fp32", NULL, 1},   {0, 2, "bf16", NULL, 0},
      {1, 2, "bf16", NULL, 0},   {2, 2, "bf16", NULL, 0},   {3, 2, "bf16", NULL, 0},
      {3, 2, "bf16", NULL, 1},   {2, 1, "bf16", "fp32", 0}, {3, 2, "bf16", "fp32", 0},
      {3, 2, "bf16", "fp32", 1},
  };
  float *prev = NULL;
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    int64_t n = 0, diff = 0;
    float *m = run(&runs[i], &n);
    if (runs[i].reuse) {
      /* the run before is the same configuration with distance 0 */
      for (int64_t e = 0; e < n; e++) diff += memcmp(&m[e], &prev[e], sizeof(float)) != 0;
      if (rank_ == 0)
        printf("  reuse 1e9 vs 0: %lld of %lld master elements differ (must be 0, bitwise)\n",
               (long long)diff, (long long)n);
      ZT_CHECK(diff == 0);
    }
    free(prev);
    prev = m;
  }
  free(prev);
  ZT_MPI_DONE();
}
