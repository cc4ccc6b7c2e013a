/*
 * launch_threads.h — the thread plan of `zrt launch` (tools/launch_threads.c):
 * how many OpenMP threads each rank on a machine runs when the user said
 * nothing, so ranks sharing a machine do not each start a team as wide as
 * the machine (idle OpenMP threads spin at barriers and take the core of the
 * other rank; every collective then waits for the slowest rank).
 *
 * One pure function decides (cli_thread_plan_make); the rank wrapper applies
 * it, the launcher warns from it and `zrt env` prints it, so the three can
 * never disagree.
 */
#ifndef ZRT_LAUNCH_THREADS_H
#define ZRT_LAUNCH_THREADS_H

#include <stddef.h>

typedef enum cli_thread_source {
  CLI_THREADS_SHARE = 0, /* cores / local ranks (the default) */
  CLI_THREADS_USER,      /* OMP_NUM_THREADS set by the user: kept */
  CLI_THREADS_BOUND      /* --bind_cores_to_rank: the rank's core group */
} cli_thread_source;

typedef struct cli_thread_plan {
  int cores;       /* CPUs the machine's ranks share (the launcher's affinity) */
  int local_ranks; /* ranks on this machine */
  int local_rank;  /* the rank the plan is for */
  int threads;     /* OpenMP threads of that rank (OMP_NUM_THREADS) */
  int helpers;     /* other busy threads per rank: the offload pipe's copy thread */
  cli_thread_source source;
  int oversubscribed; /* local_ranks x threads > cores: compute threads share cores */
  int helpers_share;  /* local_ranks x (threads + helpers) > cores: the copy threads
                       * run on cores the OpenMP teams also use */
} cli_thread_plan;

/* The plan for local rank `local_rank` of `local_ranks` on a machine with
 * `cores` usable CPUs. user_threads > 0: the user's OMP_NUM_THREADS, kept.
 * bind != 0: the rank gets its group of cli_split_cores (the same count).
 * Otherwise the cores are split as cli_split_cores splits them (the first
 * ranks get the remainder), at least 1 thread per rank. helpers (>= 0) are
 * counted, not subtracted: the copy thread is busy only while the offloaded
 * optimizer streams tiles, and taking an OpenMP thread away for it would
 * slow every forward and backward. */
void cli_thread_plan_make(int cores, int local_ranks, int local_rank, int helpers, int user_threads,
                          int bind, cli_thread_plan *out);

/* One line: "rank 0 of 2 local ranks: 1 OpenMP thread (cores / local
 * ranks: 2 cores) + 1 copy thread (offload pipe)". Returns buf. */
const char *cli_thread_plan_text(const cli_thread_plan *p, char *buf, size_t len);

/* OMP_NUM_THREADS as a positive integer (its first list element), 0 when
 * unset, empty or not a number. */
int cli_thread_env_user(void);

/* Busy non-OpenMP threads per rank for a resolved config: 1 when the
 * optimizer or the parameters are offloaded (the offload pipe's copy
 * thread), else 0. Exported to the ranks as ZRT_LAUNCH_HELPERS. */
struct zrt_cfg;
int cli_thread_helpers(const struct zrt_cfg *v);

/* The launcher's hook: exports ZRT_LAUNCH_HELPERS for the rank wrappers and
 * warns on stderr when the plan of this machine (its affinity, local_ranks
 * ranks) oversubscribes the cores. */
void cli_thread_plan_announce(const struct zrt_cfg *v, int local_ranks, int bind);

/* The rank wrapper's hook (not bound): sets OMP_NUM_THREADS to the plan's
 * share when the user set none (ZRT_LAUNCH_OMP_USER records which: "1" the
 * user's, "0" the plan's), and returns the plan in *out. */
void cli_thread_plan_apply(int local_rank, int local_ranks, cli_thread_plan *out);

/* One line describing the wait policy in force and who chose it (zrt launch
 * leaves libgomp's default: zrt.adaptive_threads handles a taken core). */
const char *cli_wait_policy_text(char *buf, size_t len);

#endif
