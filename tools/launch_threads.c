/*
 * launch_threads.c — the thread plan of `zrt launch` (see launch_threads.h).
 *
 * Without a plan every rank's OpenMP team is as wide as the machine: on a
 * 2-core machine two ranks run four compute threads, the idle ones spin at
 * OpenMP barriers on the core the other rank needs, and every collective
 * waits for whichever rank lost its core last (the README's main job swung
 * between ~700 and ~31,000 tokens/s per step that way). The plan gives each
 * local rank its share of the cores, keeps a user's OMP_NUM_THREADS, and
 * with --bind_cores_to_rank uses the same split the binding uses
 * (cli_split_cores), so the counts agree with the cores a rank is bound to.
 */
#define _GNU_SOURCE
#include "launch_threads.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "env.h"
#include "internal.h"
#include "launch_util.h"

void cli_thread_plan_make(int cores, int local_ranks, int local_rank, int helpers, int user_threads,
                          int bind, cli_thread_plan *out) {
  memset(out, 0, sizeof *out);
  if (cores < 1) cores = 1;
  if (local_ranks < 1) local_ranks = 1;
  if (local_rank < 0 || local_rank >= local_ranks) local_rank = 0;
  if (helpers < 0) helpers = 0;
  out->cores = cores;
  out->local_ranks = local_ranks;
  out->local_rank = local_rank;
  out->helpers = helpers;
  /* the same split as the binding: the first cores % ranks ranks get one more */
  int share = cores / local_ranks + (local_rank < cores % local_ranks ? 1 : 0);
  if (share < 1) share = 1;
  if (user_threads > 0) {
    out->threads = user_threads;
    out->source = CLI_THREADS_USER;
  } else {
    out->threads = share;
    out->source = bind ? CLI_THREADS_BOUND : CLI_THREADS_SHARE;
  }
  /* the widest rank decides: with a user setting every rank runs it, with
   * a share the first ranks hold the remainder, which sums to the cores */
  long compute = out->source == CLI_THREADS_USER
                     ? (long)local_ranks * out->threads
                     : (cores >= local_ranks ? (long)cores : (long)local_ranks);
  out->oversubscribed = compute > cores;
  out->helpers_share = compute + (long)local_ranks * helpers > cores;
}

const char *cli_thread_plan_text(const cli_thread_plan *p, char *buf, size_t len) {
  static const char *const src[] = {"cores / local ranks", "OMP_NUM_THREADS set by the user",
                                    "bound core group"};
  char helpers[96] = "";
  if (p->helpers > 0)
    snprintf(helpers, sizeof helpers, " + %d copy thread%s (offload pipe%s)", p->helpers,
             p->helpers == 1 ? "" : "s", p->helpers_share ? ", shares a core" : "");
  snprintf(buf, len, "rank %d of %d local rank%s: %d OpenMP thread%s (%s: %d core%s)%s%s",
           p->local_rank, p->local_ranks, p->local_ranks == 1 ? "" : "s", p->threads,
           p->threads == 1 ? "" : "s", src[p->source], p->cores, p->cores == 1 ? "" : "s", helpers,
           p->oversubscribed ? "; OVERSUBSCRIBED" : "");
  return buf;
}

int cli_thread_env_user(void) {
  const char *s = zrt_env("OMP_NUM_THREADS");
  if (!s || !*s) return 0;
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || v < 1 || (*end && *end != ',')) return 0;
  return v > 1 << 20 ? 1 << 20 : (int)v;
}

int cli_thread_helpers(const struct zrt_cfg *v) {
  return v->offload_optimizer.device != ZRT_OFFLOAD_NONE ||
                 v->offload_param.device != ZRT_OFFLOAD_NONE
             ? 1
             : 0;
}

static int cli_thread_cores(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

void cli_thread_plan_announce(const struct zrt_cfg *v, int local_ranks, int bind) {
  int helpers = cli_thread_helpers(v);
  char hb[16];
  snprintf(hb, sizeof hb, "%d", helpers);
  setenv("ZRT_LAUNCH_HELPERS", hb, 1);
  cli_thread_plan p;
  cli_thread_plan_make(cli_thread_cores(), local_ranks, 0, helpers, cli_thread_env_user(), bind,
                       &p);
  int fair = p.cores / p.local_ranks > 0 ? p.cores / p.local_ranks : 1;
  if (p.oversubscribed && p.source == CLI_THREADS_USER)
    fprintf(stderr,
            "zrt launch: warning: %d ranks x %d OpenMP threads (OMP_NUM_THREADS) is more than "
            "the %d cores of this machine: idle threads will spin on cores other ranks need and "
            "every collective waits for the slowest rank; unset OMP_NUM_THREADS (zrt launch "
            "then gives each rank %d) or set it to at most %d\n",
            p.local_ranks, p.threads, p.cores, fair, fair);
  else if (p.oversubscribed)
    fprintf(stderr,
            "zrt launch: warning: %d ranks on the %d cores of this machine: ranks share cores "
            "(1 OpenMP thread each) and every collective waits for the slowest; use at most %d "
            "processes per machine\n",
            p.local_ranks, p.cores, p.cores);
}

void cli_thread_plan_apply(int local_rank, int local_ranks, cli_thread_plan *out) {
  const char *h = zrt_env("ZRT_LAUNCH_HELPERS");
  int helpers = h && *h ? atoi(h) : 0;
  cli_thread_plan_make(cli_thread_cores(), local_ranks, local_rank, helpers, cli_thread_env_user(),
                       0, out);
  /* zrt env, run as the rank program, tells the user's setting from ours */
  setenv("ZRT_LAUNCH_OMP_USER", out->source == CLI_THREADS_USER ? "1" : "0", 1);
  if (out->source == CLI_THREADS_SHARE) {
    char b[16];
    snprintf(b, sizeof b, "%d", out->threads);
    setenv("OMP_NUM_THREADS", b, 1);
  }
}

const char *cli_wait_policy_text(char *buf, size_t len) {
  const char *w = zrt_env("OMP_WAIT_POLICY"), *sc = zrt_env("GOMP_SPINCOUNT");
  const char *ad = zrt_env_config("ZRT_ADAPTIVE_THREADS");
  char team[160];
  snprintf(team, sizeof team, "zrt.adaptive_threads %s", ad && *ad ? ad : "true (the default)");
  if ((w && *w) || (sc && *sc))
    snprintf(buf, len, "OpenMP wait policy: OMP_WAIT_POLICY=%s GOMP_SPINCOUNT=%s (the user's); %s",
             w && *w ? w : "unset", sc && *sc ? sc : "unset", team);
  else
    snprintf(buf, len,
             "OpenMP wait policy: libgomp's default (idle threads spin, then sleep: the fastest "
             "on free cores; passive halves a 2-thread rank's speed there); a core taken by "
             "another process is handled by %s: the engine drops a thread while it is taken",
             team);
  return buf;
}
