/*
 * test_engine_timing.c — the step breakdown (zrt_engine_step_timing and the
 * metrics' timing fields) attributes time to the right phase (run at -n 2
 * and -n 4).
 *
 * The program plants known delays with nanosleep: D_OTHER before the
 * forward, D_FWD inside it, D_BWD inside the backward, and, on every rank
 * but 0, D_LATE just before zrt_engine_step, which rank 0 must then spend
 * waiting in the boundary's collectives (each step starts at a barrier, and
 * the bound is the last rank's measured lead, D_LATE or more: under load
 * rank 0's own passes can be slowed by more than the margin). A delay is a
 * lower bound on the
 * phase that contains it (sleep never returns early), so each check fails
 * when the time lands in another phase; no upper bound on speed is asserted.
 * Checked exactly: other + forward + backward + boundary == step (one
 * partition of the window, to 1e-9 s), comm_wait <= comm_busy, overlap in
 * [0, 1], the metrics record carrying rank 0's figures. D_HIDE is a sleep
 * right after a grads_ready that issued an asynchronous reduce-scatter
 * (stage 2/3, overlap_comm): that collective is in flight during the sleep,
 * so comm_busy - comm_wait >= D_HIDE. Run with the implicit marks (fetch /
 * grad requests) and with explicit zrt_engine_mark, where an "evaluation"
 * between steps that fetches modules must stay in other_s.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "zt_engine.h"
#include "zt_mpi.h"
#include "ztest.h"

#define NMOD 2
#define STEPS 2
#define D_OTHER 0.040
#define D_FWD 0.060
#define D_BWD 0.020
#define D_LATE 0.080
#define D_HIDE 0.030
#define D_EVAL 0.030
/* scalar reads back and allocations the program adds to the last step */
#define K_READS 3

static int rank_, world_;

static void nap(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static double field(const char *line, const char *key) {
  char k[64];
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *p = strstr(line, k);
  return p ? atof(p + strlen(k)) : -1;
}

static void run(int stage, int explicit_marks) {
  char mpath[256] = "";
  if (rank_ == 0) snprintf(mpath, sizeof mpath, "/tmp/zrt_timing_%d_%d.jsonl", getpid(), stage);
  MPI_Bcast(mpath, sizeof mpath, MPI_CHAR, 0, MPI_COMM_WORLD);
  zrt_config *cfg;
  ZT_OK(zrt_config_create(&cfg));
  /* the model computes on the host: pin the CPU backend (auto picks CUDA on a GPU) */
  ZT_OK(zrt_config_set(cfg, "zrt.backend", zt_host_backend(), "test"));
  char v[16];
  snprintf(v, sizeof v, "%d", stage);
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage", v, "test"));
  ZT_OK(zrt_config_set(cfg, "train_micro_batch_size_per_gpu", "1", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage3_param_persistence_threshold", "0", "test"));
  ZT_OK(zrt_config_set(cfg, "zrt.comm", "mpi", "test"));
  if (rank_ == 0) unlink(mpath);
  ZT_OK(zrt_config_set(cfg, "zrt.metrics_path", mpath, "test"));
  zrt_engine *eng;
  ZT_OK(zrt_engine_create(cfg, &eng));
  int pid[NMOD];
  for (int m = 0; m < NMOD; m++) {
    char name[32];
    int mid;
    snprintf(name, sizeof name, "block%d", m);
    ZT_OK(zrt_module_add(eng, name, &mid));
    snprintf(name, sizeof name, "block%d.weight", m);
    int64_t shape[1] = {4096 + 100 * m};
    zrt_init init = {ZRT_INIT_NORMAL, 0.02f};
    ZT_OK(zrt_param_add(eng, mid, name, 1, shape, init, 0, &pid[m]));
  }
  ZT_OK(zrt_engine_build(eng));
  zrt_step_timing t;
  ZT_OK(zrt_engine_step_timing(eng, &t));
  ZT_CHECK(t.step == 0 && t.step_s == 0);
  int async_reduce = stage >= 2 && zt_view(eng).cfg->overlap_comm;
  /* the backend's counters over each step's window, seen from here: the
   * window opens at build and after each step's metrics */
  uint64_t ctr[STEPS][3];
  double pre_s = 0; /* the last step's: the timing below is of the last window */
  for (int s = 0; s < STEPS; s++) {
    /* the ranks start each step together; each measures how long it takes
     * from here to its boundary (pre_s): the late ranks' lead over rank 0
     * is what rank 0 must wait at the boundary, on a loaded machine too,
     * where its own passes may be slowed as much as D_LATE's margin */
    MPI_Barrier(MPI_COMM_WORLD);
    double t_start = MPI_Wtime();
    zrt_backend *bk = zt_view(eng).backend;
    uint64_t c0[3] = {ZRT_BACKEND_COUNTER(bk, host_waits), ZRT_BACKEND_COUNTER(bk, allocs),
                      ZRT_BACKEND_COUNTER(bk, d2h_reads)};
    if (s == STEPS - 1) {
      /* the program's own: K scalar reads back (blocking copies) and K allocations */
      for (int k = 0; k < K_READS; k++) {
        float *d = NULL, h = 1.5f + (float)k, back = 0;
        ZT_OK(zrt_engine_alloc(eng, sizeof(float), ZRT_MEM_ACTIVATIONS, (void **)&d));
        ZT_OK(zrt_engine_memcpy(eng, d, &h, sizeof h, ZRT_COPY_H2D));
        ZT_OK(zrt_engine_memcpy(eng, &back, d, sizeof back, ZRT_COPY_D2H));
        ZT_CHECK(back == h);
        zrt_engine_free(eng, d);
      }
    }
    if (explicit_marks) {
      /* an evaluation pass between steps: fetches that must not count as forward */
      ZT_OK(zrt_engine_mark(eng, ZRT_PHASE_OTHER));
      for (int m = 0; m < NMOD; m++) {
        ZT_OK(zrt_module_fetch(eng, m));
        ZT_OK(zrt_module_release(eng, m));
      }
      nap(D_EVAL);
    }
    nap(D_OTHER);
    if (explicit_marks) ZT_OK(zrt_engine_mark(eng, ZRT_PHASE_FORWARD));
    for (int m = 0; m < NMOD; m++) {
      ZT_OK(zrt_module_fetch(eng, m));
      if (m == 0) nap(D_FWD);
      ZT_OK(zrt_module_release(eng, m));
    }
    if (explicit_marks) ZT_OK(zrt_engine_mark(eng, ZRT_PHASE_BACKWARD));
    for (int m = NMOD - 1; m >= 0; m--) {
      ZT_OK(zrt_module_fetch(eng, m));
      void *g;
      ZT_OK(zrt_param_grad(eng, pid[m], &g));
      if (m == NMOD - 1) nap(D_BWD);
      ZT_OK(zrt_module_grads_ready(eng, m));
      if (m == NMOD - 1 && async_reduce) nap(D_HIDE);
      ZT_OK(zrt_module_release(eng, m));
    }
    if (rank_ != 0) nap(D_LATE);
    pre_s = MPI_Wtime() - t_start;
    zrt_step_info si;
    ZT_OK(zrt_engine_step(eng, 1.0f, &si));
    ZT_CHECK(si.boundary);
    uint64_t c1[3] = {ZRT_BACKEND_COUNTER(bk, host_waits), ZRT_BACKEND_COUNTER(bk, allocs),
                      ZRT_BACKEND_COUNTER(bk, d2h_reads)};
    for (int k = 0; k < 3; k++) ctr[s][k] = c1[k] - c0[k];
  }
  unsigned long long ctr_max[STEPS][3];
  for (int s = 0; s < STEPS; s++)
    for (int k = 0; k < 3; k++) ctr_max[s][k] = ctr[s][k];
  MPI_Allreduce(MPI_IN_PLACE, ctr_max, STEPS * 3, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  double pre_max = 0;
  MPI_Allreduce(&pre_s, &pre_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  double lead = pre_max - pre_s; /* how much later the last rank reached the boundary */
  ZT_OK(zrt_engine_step_timing(eng, &t));
  double sum = t.other_s + t.forward_s + t.backward_s + t.boundary_s;
  double other_min = D_OTHER + (explicit_marks ? D_EVAL : 0);
  double bwd_min = D_BWD + (async_reduce ? D_HIDE : 0) + (rank_ != 0 ? D_LATE : 0);
  printf("rank %d stage %d %s marks: step %.4f = other %.4f + fwd %.4f + bwd %.4f + boundary "
         "%.4f (sum diff %.2g); fetch %.4f reduce %.4f optim %.4f gather %.4f; comm busy %.4f wait "
         "%.4f overlap %.3f\n",
         rank_, stage, explicit_marks ? "explicit" : "implicit", t.step_s, t.other_s, t.forward_s,
         t.backward_s, t.boundary_s, sum - t.step_s, t.fetch_s, t.reduce_s, t.optimizer_s,
         t.gather_s, t.comm_busy_s, t.comm_wait_s, t.overlap_fraction);
  ZT_CHECK(t.step == STEPS);
  ZT_CHECK(fabs(sum - t.step_s) <= 1e-9);
  ZT_CHECK(t.other_s >= other_min);
  ZT_CHECK(t.forward_s >= D_FWD);
  ZT_CHECK(t.backward_s >= bwd_min);
  ZT_CHECK(t.fetch_s >= 0 && t.reduce_s >= 0 && t.optimizer_s >= 0 && t.gather_s >= 0);
  ZT_CHECK(t.fetch_s + t.reduce_s + t.optimizer_s + t.gather_s <= t.step_s);
  ZT_CHECK(t.comm_wait_s <= t.comm_busy_s + 1e-9);
  ZT_CHECK(t.overlap_fraction >= 0 && t.overlap_fraction <= 1);
  if (rank_ == 0) {
    /* the late ranks reach the boundary's collectives `lead` after rank 0
     * (D_LATE on a quiet machine): rank 0 waits that long inside the
     * boundary, in its collectives (0.9: the barrier's exit is not
     * simultaneous) */
    printf("rank 0: the last rank reached the boundary %.4f s later (D_LATE %.3f)\n", lead, D_LATE);
    ZT_CHECK(t.boundary_s >= lead * 0.9);
    ZT_CHECK(t.comm_wait_s >= lead * 0.9);
    ZT_CHECK(t.reduce_s + t.optimizer_s >= lead * 0.9);
  }
  if (async_reduce) ZT_CHECK(t.comm_busy_s - t.comm_wait_s >= D_HIDE);
  zrt_engine_destroy(eng);
  zrt_config_destroy(cfg);
  if (rank_ == 0) {
    FILE *f = fopen(mpath, "r");
    ZT_CHECK(f != NULL);
    char line[8192], last[8192] = "";
    int n = 0, ctr_bad = 0;
    static const char *ckeys[3] = {"host_waits", "step_allocs", "d2h_reads"};
    double own[3] = {0};
    while (f && fgets(line, sizeof line, f)) {
      snprintf(last, sizeof last, "%s", line);
      /* each step's counters against what the ranks counted around the
       * step call (the largest); the difference is the metrics' own gather
       * (staged through the backend on the twin), the same every step */
      for (int k = 0; k < 3 && n < STEPS; k++) {
        double got = field(line, ckeys[k]), diff = (double)ctr_max[n][k] - got;
        printf("  step %d %s: metrics %.0f, counted here %llu\n", n + 1, ckeys[k], got,
               ctr_max[n][k]);
        if (n == 0) own[k] = diff;
        ctr_bad += got < 0 || diff < 0 || diff != own[k];
      }
      n++;
    }
    ZT_CHECK(ctr_bad == 0);
    /* the program's K reads and allocations land in the last step's window */
    ZT_CHECK(ctr_max[STEPS - 1][1] >= K_READS && ctr_max[STEPS - 1][2] >= K_READS);
    if (f) fclose(f);
    ZT_CHECK(n == STEPS);
    static const char *keys[] = {"other_s",     "forward_s",   "backward_s",      "boundary_s",
                                 "fetch_s",     "reduce_s",    "optimizer_s",     "gather_s",
                                 "comm_busy_s", "comm_wait_s", "overlap_fraction"};
    const double vals[] = {t.other_s,     t.forward_s,   t.backward_s,      t.boundary_s,
                           t.fetch_s,     t.reduce_s,    t.optimizer_s,     t.gather_s,
                           t.comm_busy_s, t.comm_wait_s, t.overlap_fraction};
    int bad = 0;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
      double got = field(last, keys[k]);
      /* printed with %.6g: relative 1e-5 */
      if (!(fabs(got - vals[k]) <= 1e-5 * fabs(vals[k]) + 1e-12)) {
        fprintf(stderr, "metrics %s = %.9g, engine %.9g\n", keys[k], got, vals[k]);
        bad++;
      }
    }
    double st = field(last, "step_time_s");
    if (!(fabs(st - t.step_s) <= 1e-5 * t.step_s)) bad++;
    printf("  metrics record matches rank 0's timing: %d mismatches (must be 0)\n", bad);
    ZT_CHECK(bad == 0);
    unlink(mpath);
  }
}

static void check_errors(void) {
  zrt_config *cfg;
  ZT_OK(zrt_config_create(&cfg));
  /* the model computes on the host: pin the CPU backend (auto picks CUDA on a GPU) */
  ZT_OK(zrt_config_set(cfg, "zrt.backend", zt_host_backend(), "test"));
  ZT_OK(zrt_config_set(cfg, "zrt.comm", "mpi", "test"));
  zrt_engine *eng;
  ZT_OK(zrt_engine_create(cfg, &eng));
  ZT_CHECK(zrt_engine_mark(eng, ZRT_PHASE_FORWARD) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "call zrt_engine_build first");
  int mid, pid;
  ZT_OK(zrt_module_add(eng, "m", &mid));
  int64_t shape[1] = {64};
  zrt_init init = {ZRT_INIT_ZEROS, 0};
  ZT_OK(zrt_param_add(eng, mid, "m.w", 1, shape, init, 0, &pid));
  ZT_OK(zrt_engine_build(eng));
  ZT_CHECK(zrt_engine_mark(eng, (zrt_phase)7) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "phase 7 is not ZRT_PHASE_FORWARD (0)");
  ZT_CHECK(zrt_engine_step_timing(eng, NULL) == ZRT_ERR_INVALID_ARG);
  zrt_engine_destroy(eng);
  zrt_config_destroy(cfg);
}

int main(int argc, char **argv) {
  ZT_MPI_INIT(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_);
  if (world_ < 2) {
    MPI_Finalize();
    ZT_SKIP("needs at least 2 ranks");
  }
  check_errors();
  for (int stage = 0; stage <= 3; stage++) run(stage, 0);
  run(2, 1);
  run(3, 1);
  ZT_MPI_DONE();
}
