/*
 * rank_probe.c — the rank program of the `zrt launch` tests
 * (tests/cli/test_launch*.sh). Each rank prints one line per fact it sees
 * ("probe rank=R ..."): the launcher's variables, the config values it
 * resolves through zrt_config_from_env (what a real training program
 * would get), its core binding; and it fails on demand (exit status,
 * SIGKILL) or sleeps so the tests can interrupt the launcher.
 *
 * usage: rank_probe [--key K]... [--env NAME]... [--affinity] [--exit-rank R --code C]
 *                   [--kill-rank R] [--hang-rank R] [--sleep S] [--tag WORD]
 * --hang-rank R: every rank joins one all-reduce over the MPI comm, then
 * rank R sleeps while the others start a second one with a 1 s watchdog
 * timeout, fail, and exit 1 (the comm writes $ZRT_RUN_DIR/rank<r>.status).
 * The tag is ignored; tests pgrep for it to find leftover processes.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "comm.h"
#include "zrt.h"

static const char *env_or(const char *name, const char *dflt) {
  const char *s = getenv(name);
  return s ? s : dflt;
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

int main(int argc, char **argv) {
  const char *keys[32], *envs[32];
  int nenvs = 0;
  int nkeys = 0, affinity = 0, exit_rank = -1, code = 0, kill_rank = -1, hang_rank = -1;
  double sleep_for = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--key") && i + 1 < argc && nkeys < 32)
      keys[nkeys++] = argv[++i];
    else if (!strcmp(argv[i], "--env") && i + 1 < argc && nenvs < 32)
      envs[nenvs++] = argv[++i];
    else if (!strcmp(argv[i], "--affinity"))
      affinity = 1;
    else if (!strcmp(argv[i], "--exit-rank") && i + 1 < argc)
      exit_rank = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--code") && i + 1 < argc)
      code = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--kill-rank") && i + 1 < argc)
      kill_rank = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--hang-rank") && i + 1 < argc)
      hang_rank = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--sleep") && i + 1 < argc)
      sleep_for = atof(argv[++i]);
    else if (!strcmp(argv[i], "--tag") && i + 1 < argc)
      i++;
    else {
      fprintf(stderr, "rank_probe: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  const char *rank_s = env_or("RANK", "?");
  int rank = atoi(env_or("RANK", "-1"));
  printf("probe rank=%s local_rank=%s world_size=%s local_world_size=%s\n", rank_s,
         env_or("LOCAL_RANK", "?"), env_or("WORLD_SIZE", "?"), env_or("LOCAL_WORLD_SIZE", "?"));
  if (nkeys) {
    zrt_config *cfg = NULL;
    if (zrt_config_from_env(&cfg) != ZRT_OK) {
      fprintf(stderr, "rank_probe: rank %s: config: %s\n", rank_s, zrt_last_error());
      return 1;
    }
    for (int k = 0; k < nkeys; k++) {
      char val[512];
      if (zrt_config_get(cfg, keys[k], val, sizeof val) != ZRT_OK) {
        fprintf(stderr, "rank_probe: rank %s: %s\n", rank_s, zrt_last_error());
        zrt_config_destroy(cfg);
        return 1;
      }
      printf("probe rank=%s %s=%s\n", rank_s, keys[k], val);
    }
    zrt_config_destroy(cfg);
  }
  for (int k = 0; k < nenvs; k++)
    printf("probe rank=%s %s=%s\n", rank_s, envs[k], env_or(envs[k], "(unset)"));
  if (affinity) {
    cpu_set_t set;
    char list[1024] = "";
    size_t o = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
      for (int c = 0; c < CPU_SETSIZE && o + 16 < sizeof list; c++)
        if (CPU_ISSET(c, &set))
          o += (size_t)snprintf(list + o, sizeof list - o, "%s%d", o ? "," : "", c);
    printf("probe rank=%s cpus=%s ncpus=%d omp_num_threads=%s\n", rank_s, list, CPU_COUNT(&set),
           env_or("OMP_NUM_THREADS", "unset"));
    printf("probe rank=%s omp_wait_policy=%s\n", rank_s, env_or("OMP_WAIT_POLICY", "unset"));
  }
  printf("probe rank=%s ready\n", rank_s);
  fflush(stdout);
  if (rank == exit_rank) {
    sleep_s(0.3);
    return code;
  }
  if (rank == kill_rank) {
    sleep_s(0.3);
    raise(SIGKILL);
  }
  if (hang_rank >= 0) {
    zrt_backend *b = NULL;
    zrt_comm *c = NULL;
    float x = 1.0f;
    if (zrt_backend_create("cpu", 0, 0, &b) != ZRT_OK ||
        zrt_comm_create("mpi", b, 1.0, &c) != ZRT_OK ||
        zrt_comm_all_reduce(c, &x, &x, 1, ZRT_F32, ZRT_RED_SUM, NULL) != ZRT_OK) {
      fprintf(stderr, "rank_probe: rank %s: %s\n", rank_s, zrt_last_error());
      return 1;
    }
    printf("probe rank=%s first all_reduce=%g\n", rank_s, (double)x);
    fflush(stdout);
    if (rank == hang_rank) {
      sleep_s(sleep_for > 0 ? sleep_for : 60);
      return 0;
    }
    if (zrt_comm_all_reduce(c, &x, &x, 1, ZRT_F32, ZRT_RED_SUM, NULL) != ZRT_OK) {
      fprintf(stderr, "rank_probe: rank %s: %s\n", rank_s, zrt_last_error());
      _exit(1); /* a timed-out collective cannot be finalised cleanly */
    }
    zrt_comm_destroy(c);
    zrt_backend_destroy(b);
    return 0;
  }
  if (sleep_for > 0) sleep_s(sleep_for);
  return 0;
}
