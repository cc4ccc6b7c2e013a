/*
 * bench_mainjob.c — `zrt-perf mainjob`: the README's main job (`zrt launch
 * --config_file examples/configs/zero3_offload.yaml train_gpt2 --model tiny`:
 * 2 ranks, ZeRO-3, optimizer and parameters offloaded) as a user starts it,
 * timed per step, to show whether a default launch is stable.
 *
 * Three ways alternate round by round, so both see the same background load:
 *   plan  — what `zrt launch` does by default (the thread plan: each rank
 *           runs its share of the cores);
 *   wide  — every rank's OpenMP team as wide as the machine
 *           (OMP_NUM_THREADS = online cores), what an unset OMP_NUM_THREADS
 *           meant before the plan;
 *   plan_mpi — the plan with the Open MPI comm (ZRT_COMM=mpi) instead of
 *           the shared-memory one: the comm's share of the difference.
 * Figures: per-step tokens/s of train_gpt2's progress lines (the first step
 * of each run dropped: warm-up), pooled over the rounds: median, 10th / 90th
 * percentile, and p10 / median (the stability figure: 1 = every step as fast
 * as the median). Nothing here asserts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_train_util.h"
#include "perf.h"

/* plan (the default: thread plan + shm comm), wide (OpenMP teams as wide as
 * the machine), plan_mpi (thread plan, ZRT_COMM=mpi) */
#define ZRT_MJ_WAYS 3

/* Runs one launch; appends its per-step tok/s (first dropped) to v. */
static int zrt_mj_run(const char *cmd, double *v, int *n, int cap) {
  FILE *f = popen(cmd, "r");
  if (!f) return -1;
  char line[512];
  int seen = 0;
  while (fgets(line, sizeof line, f)) {
    const char *t = strstr(line, " tok/s ");
    if (strncmp(line, "step ", 5) || !t) continue;
    if (seen++ == 0) continue; /* warm-up */
    if (*n < cap) v[(*n)++] = atof(t + 7);
  }
  int rc = pclose(f);
  return rc == 0 && seen > 1 ? 0 : -1;
}

static int zrt_mj_bench(const zrt_perf_args *a, cJSON *result) {
  const char *s = zrt_perf_opt(a, "steps");
  int steps = s ? atoi(s) : (a->quick ? 40 : 100);
  s = zrt_perf_opt(a, "rounds");
  int rounds = s ? atoi(s) : (a->quick ? 3 : 5);
  const char *cfg = zrt_perf_opt(a, "config_file");
  /* the README's config beside the programs: BIN/../share/zrt/configs in
   * a build tree (copied by the build) and in an installed prefix */
  char cfgbuf[1024];
  snprintf(cfgbuf, sizeof cfgbuf, "%s/../share/zrt/configs/zero3_offload.yaml", zrt_pt_bindir());
  if (!cfg) cfg = cfgbuf;
  struct stat sb;
  if (steps < 2 || rounds < 1 || stat(cfg, &sb) != 0) {
    zrt_perf_note("zrt-perf mainjob: needs --steps >= 2, --rounds >= 1 and a readable launch "
                  "config (--config_file, default %s): got steps %d, rounds %d, config %s",
                  cfgbuf, steps, rounds, cfg);
    return 1;
  }
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  const char *bin = zrt_pt_bindir();
  static const char *const way[ZRT_MJ_WAYS] = {"plan", "wide", "plan_mpi"};
  double *v[ZRT_MJ_WAYS];
  int n[ZRT_MJ_WAYS] = {0}, cap = rounds * steps, oom = 0;
  for (int w = 0; w < ZRT_MJ_WAYS; w++) oom |= !(v[w] = malloc(sizeof(double) * (size_t)cap));
  if (oom) {
    for (int w = 0; w < ZRT_MJ_WAYS; w++) free(v[w]);
    return 1;
  }
  char cmd[ZRT_MJ_WAYS][3000];
  for (int w = 0; w < ZRT_MJ_WAYS; w++) {
    char env[96] = "env -u OMP_NUM_THREADS";
    if (w == 1) snprintf(env, sizeof env, "env OMP_NUM_THREADS=%ld", cpus);
    if (w == 2) snprintf(env, sizeof env, "env -u OMP_NUM_THREADS ZRT_COMM=mpi");
    snprintf(cmd[w], sizeof cmd[w],
             "%s OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 %s/zrt launch "
             "--config_file %s %s/train_gpt2 --model tiny --steps %d 2>/dev/null",
             env, bin, cfg, bin, steps);
  }
  cJSON *rr = cJSON_AddArrayToObject(result, "per_round");
  int rc = 0;
  for (int r = 0; r < rounds && !rc; r++)
    for (int w = 0; w < ZRT_MJ_WAYS; w++) {
      int before = n[w];
      double load = zrt_perf_loadavg();
      zrt_perf_note("  mainjob round %d/%d %s: %s", r + 1, rounds, way[w], cmd[w]);
      if (zrt_mj_run(cmd[w], v[w], &n[w], cap) != 0) {
        zrt_perf_note("zrt-perf mainjob: the run failed: %s", cmd[w]);
        rc = 1;
        break;
      }
      cJSON *o = cJSON_CreateObject();
      cJSON_AddNumberToObject(o, "round", r + 1);
      cJSON_AddStringToObject(o, "way", way[w]);
      cJSON_AddNumberToObject(o, "loadavg_1min", load);
      cJSON_AddNumberToObject(o, "median_tok_s",
                              zrt_perf_quantile(v[w] + before, n[w] - before, 0.5));
      cJSON_AddItemToArray(rr, o);
    }
  if (!rc) {
    for (int w = 0; w < ZRT_MJ_WAYS; w++) {
      char key[32];
      snprintf(key, sizeof key, "command_%s", way[w]);
      cJSON_AddStringToObject(result, key, cmd[w]);
    }
    cJSON_AddNumberToObject(result, "steps", steps);
    cJSON_AddNumberToObject(result, "rounds", rounds);
    double med[ZRT_MJ_WAYS], p10[ZRT_MJ_WAYS];
    for (int w = 0; w < ZRT_MJ_WAYS; w++) {
      char key[32];
      snprintf(key, sizeof key, "tok_s_%s", way[w]);
      med[w] = zrt_perf_spread(result, key, v[w], n[w]);
      p10[w] = zrt_perf_quantile(v[w], n[w], 0.1);
      snprintf(key, sizeof key, "stability_%s", way[w]);
      cJSON_AddNumberToObject(result, key, med[w] > 0 ? p10[w] / med[w] : 0);
    }
    /* per-step tokens/s over step index, both ways: the swings show */
    cJSON *p =
        zrt_perf_plot(result, "mainjob_steps", "main job: tokens/s per step (all rounds, in order)",
                      "step (pooled)", "tokens/s", 0);
    for (int w = 0; w < ZRT_MJ_WAYS; w++) {
      double *x = malloc(sizeof(double) * (size_t)n[w]);
      if (!x) continue;
      for (int i = 0; i < n[w]; i++) x[i] = i + 1;
      zrt_perf_series(p,
                      w == 0   ? "zrt launch default (thread plan, shm comm)"
                      : w == 1 ? "wide OpenMP teams (OMP_NUM_THREADS = cores)"
                               : "thread plan, Open MPI comm (ZRT_COMM=mpi)",
                      x, v[w], n[w]);
      free(x);
    }
    char sum[768];
    snprintf(sum, sizeof sum,
             "main job, %d rounds x %d steps, alternated: default (plan, shm) median %.0f tok/s, "
             "p10 %.0f (p10/median %.2f); wide teams median %.0f, p10 %.0f (%.2f); plan with "
             "the MPI comm median %.0f, p10 %.0f (%.2f); default / wide %.2fx, shm / mpi %.2fx",
             rounds, steps, med[0], p10[0], med[0] > 0 ? p10[0] / med[0] : 0, med[1], p10[1],
             med[1] > 0 ? p10[1] / med[1] : 0, med[2], p10[2], med[2] > 0 ? p10[2] / med[2] : 0,
             med[1] > 0 ? med[0] / med[1] : 0, med[2] > 0 ? med[0] / med[2] : 0);
    cJSON_AddStringToObject(result, "summary", sum);
  }
  for (int w = 0; w < ZRT_MJ_WAYS; w++) free(v[w]);
  return rc;
}

ZRT_PERF_BENCH(mainjob,
               "the README's main job per-step tokens/s: default thread plan vs wide OpenMP "
               "teams, alternated rounds (--steps --rounds --config_file)",
               zrt_mj_bench)
