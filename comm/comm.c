/*
 * comm.c — the comm registry and the dispatch wrappers every caller uses
 * (zrt_comm_*): argument checks, sequence numbers, bytes-moved accounting and
 * the hang watchdog (comm/comm.h describes the message and the status
 * file format that `zrt launch` parses).
 *
 * Invariants: comms are allocated only here (struct comm_full puts the
 * watchdog's private state behind the public zrt_comm). Every collective,
 * blocking or not, is issued asynchronously to the implementation and
 * completed through zrt_comm_wait / zrt_comm_test, so the watchdog covers
 * blocking calls too. c->seq counts issued collectives (the first is #1);
 * "last completed" is the completed collective with the highest sequence
 * number (asynchronous ones may complete out of order). A comm is used from
 * one thread at a time, as MPI and NCCL communicators are.
 *
 * Stream-ordered comms (comm.h): the wrappers turn each collective into a
 * comm_sreq and a host function on c->stream that issues and completes it
 * there; only that stream's worker calls the implementation. A comm_sreq is
 * shared by two threads: the host thread fills it before the enqueue and
 * reads the worker's fields (st, msg) only after `done` (an atomic the
 * worker sets last) or after a host wait on its event; the worker never reads
 * base (which the host tags after the enqueue). Requests stay on the comm's
 * `pending` list until the caller released them and the worker is done, and
 * are counted as completed (busy_s, last_op) when they leave it; the destroy
 * drains the stream first.
 *
 * Comms with the iface's wait_on (self on a device, nccl): zrt_comm_wait_on
 * makes the caller's stream wait for the request's event and keeps the
 * request on the comm's `ordered` list; the next issue, wait, test or
 * barrier tests each one without waiting and counts the done ones as completed (as a wait
 * would: busy_s until then, last_op), and the destroy waits for the rest
 * (their events and bounces are the implementation's until then) before the
 * implementation goes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "comm_impl.h"
#include "dtype.h"
#include "env.h"
#include "nccl_rules.h"

struct comm_sreq;

typedef struct comm_full {
  zrt_comm pub;      /* first: zrt_comm * and comm_full * convert */
  uint64_t last_seq; /* sequence number of last_op (0 = none yet) */
  size_t stuck;      /* blocking collectives abandoned after a timeout */
  size_t *even;      /* world entries: the counts of the _even wrappers, read during the call */
  /* stream-ordered: the backend whose stream pub.stream is, and the
   * requests not yet retired (host thread only) */
  zrt_backend *sbe;
  struct comm_sreq *pending;
  /* requests ordered with the iface's wait_on, not yet found complete
   * (host thread; linked through next_ordered, newest first) */
  zrt_comm_req *ordered;
} comm_full;

static comm_full *full_of(zrt_comm *c) { return (comm_full *)c; }

/* One collective's arguments, whichever the kind (the wrappers fill it; a
 * stream-ordered comm keeps it, counts copied, until its worker runs it). */
typedef enum comm_kind {
  COMM_ALL_REDUCE,
  COMM_REDUCE_SCATTER,
  COMM_ALL_GATHER,
  COMM_BROADCAST,
  COMM_BARRIER
} comm_kind;

typedef struct comm_call {
  comm_kind kind;
  const void *send;
  void *recv; /* broadcast: the buffer */
  size_t count;
  const size_t *counts; /* reduce_scatter / all_gather: world entries */
  zrt_dtype dt;
  zrt_redop op;
  int root;
} comm_call;

/* Issues k on the implementation (asynchronously: *r); barrier completes
 * in the call (*r stays NULL). */
static zrt_status comm_call_issue(zrt_comm *c, const comm_call *k, zrt_comm_req **r) {
  *r = NULL;
  switch (k->kind) {
  case COMM_ALL_REDUCE:
    return c->iface->all_reduce(c->ctx, k->send, k->recv, k->count, k->dt, k->op, r);
  case COMM_REDUCE_SCATTER:
    return c->iface->reduce_scatter(c->ctx, k->send, k->recv, k->counts, k->dt, k->op, r);
  case COMM_ALL_GATHER: return c->iface->all_gather(c->ctx, k->send, k->recv, k->counts, k->dt, r);
  case COMM_BROADCAST: return c->iface->broadcast(c->ctx, k->recv, k->count, k->dt, k->root, r);
  case COMM_BARRIER: return c->iface->barrier(c->ctx);
  }
  return zrt_error(ZRT_ERR_INTERNAL, "comm: collective kind %d", (int)k->kind);
}

/* A stream-ordered collective (the file's opening paragraph). */
typedef struct comm_sreq {
  zrt_comm_req base; /* first; tagged by the host after the enqueue, never read by the worker */
  comm_full *f;
  comm_call k;
  size_t *counts; /* the copy k.counts points to, or NULL */
  /* the host's view at the enqueue, for the worker's watchdog report */
  uint64_t seq, last_seq;
  const char *op;
  size_t bytes, last_bytes;
  char last_op[64];
  zrt_event ev; /* recorded on the comm stream after the host function */
  /* written by the worker before `done` */
  zrt_status st;
  char msg[1024];
  atomic_int done;
  int released; /* host: the caller waited, or ordered a stream after it */
  struct comm_sreq *next;
} comm_sreq;

/* ------------------------------------------------------------- polling */

int zrt_comm_poll(zrt_status (*done)(void *arg, int *flag), void *arg, double timeout_s,
                  zrt_status *st) {
  double t0 = zrt_now_s();
  /* Spin briefly first: most collectives in a training step finish within
   * microseconds of the first test, and a sleep would add its latency to
   * every one. Then back off to at most 1 ms so a long wait costs no CPU. */
  long sleep_ns = 20000;
  for (unsigned it = 0;; it++) {
    int flag = 0;
    zrt_status s = done(arg, &flag);
    if (s != ZRT_OK) {
      *st = s;
      return -1;
    }
    if (flag) return 1;
    if (timeout_s > 0 && zrt_now_s() - t0 >= timeout_s) return 0;
    if (it >= 2000) {
      struct timespec ts = {0, sleep_ns};
      nanosleep(&ts, NULL);
      if (sleep_ns < 1000000) sleep_ns *= 2;
    }
  }
}

/* ---------------------------------------------------- staged epilogue */

zrt_status zrt_comm_fin_run(zrt_backend *be, const zrt_comm_fin *f, zrt_copy_kind kind) {
  if (!f->n || !f->dst) return ZRT_OK;
  size_t bytes = f->n * zrt_dtype_size(f->dst_dt);
  if (kind != ZRT_COPY_H2D && kind != ZRT_COPY_H2H)
    return zrt_error(ZRT_ERR_INTERNAL, "zrt_comm_fin_run: copy kind %d is not H2D or H2H",
                     (int)kind);
  if (f->src_dt != f->dst_dt) {
    /* In place in the staging buffer: only a narrowing fits there. */
    if (zrt_dtype_size(f->dst_dt) > zrt_dtype_size(f->src_dt))
      return zrt_error(ZRT_ERR_INTERNAL,
                       "zrt_comm_fin_run: cannot widen %s staging to %s in place on the host",
                       zrt_dtype_name(f->src_dt), zrt_dtype_name(f->dst_dt));
    zrt_dtype_convert_host(f->src, f->dst_dt, f->src, f->src_dt, f->n);
  }
  if (kind == ZRT_COPY_H2D) {
    ZRT_CHECK(zrt_backend_memcpy(be, f->dst, f->src, bytes, ZRT_COPY_H2D, NULL));
    return zrt_backend_synchronize(be, NULL);
  }
  if (f->dst != f->src) memcpy(f->dst, f->src, bytes);
  return ZRT_OK;
}

/* ------------------------------------------------------------ registry */

/* Whether s is a whole decimal number (*v: its value). */
static int whole_number(const char *s, long *v) {
  char *end;
  errno = 0;
  *v = strtol(s, &end, 10);
  return !errno && end != s && !*end;
}

/* Whether Open MPI's launcher says every rank is on this machine (unset:
 * assumed, as a launcher that does not say is a local one). */
static int local_world_is(int world) {
  const char *s = zrt_env("OMPI_COMM_WORLD_LOCAL_SIZE");
  long v;
  return !s || !*s || (whole_number(s, &v) && v == world);
}

/* A launcher's rank count: unset or empty is 1; anything but a whole
 * number in 1..2^24 is an error (read as 1 it would start a job of single
 * ranks that each train alone). */
static zrt_status env_ranks(const char *name, int *out) {
  const char *s = zrt_env(name);
  *out = 1;
  if (!s || !*s) return ZRT_OK;
  long v;
  if (!whole_number(s, &v) || v < 1 || v > 1 << 24)
    return zrt_error(
        ZRT_ERR_CONFIG,
        "%s=\"%s\": expected the job's rank count, a whole number from 1 to %d; "
        "it is set by the launcher (zrt launch, mpirun, torchrun, srun): unset it to run "
        "one rank, or start the job with its launcher",
        name, s, 1 << 24);
  *out = (int)v;
  return ZRT_OK;
}

zrt_status zrt_comm_env_world(int *world) {
  static const char *names[] = {"OMPI_COMM_WORLD_SIZE", "WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
                                "SLURM_STEP_NUM_TASKS"};
  *world = 1;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    int v = 1;
    ZRT_CHECK(env_ranks(names[i], &v));
    if (v > *world) *world = v;
  }
  return ZRT_OK;
}

#ifdef ZRT_HAVE_NCCL
/* Bytes of one rank's GPU key ("<host>:<boot id>/<PCI bus id>"). */
#define ZRT_GPU_KEY 192

/* Whether two ranks share a GPU, by PCI bus id (nccl_rules.h), over an MPI
 * comm the caller gets back in *boot and destroys only after the comm it
 * creates (destroying the last MPI comm would finalize MPI). *shared = 1
 * with `why` naming the ranks and the GPU. */
static zrt_status nccl_gpu_check(zrt_backend *backend, zrt_bootstrap **bootp, int *shared,
                                 char *why, size_t why_n) {
  zrt_status st = ZRT_OK;
  char *all = NULL;
  *shared = 0;
  if (!*bootp) ZRT_CHECK(zrt_bootstrap_mpi_create(bootp));
  zrt_bootstrap *boot = *bootp;
  char key[ZRT_GPU_KEY];
  memset(key, 0, sizeof key);
  ZRT_CHECK(zrt_backend_cuda_gpu_key(backend->device_id, key, sizeof key));
  all = calloc((size_t)boot->world, ZRT_GPU_KEY);
  if (!all) return zrt_error(ZRT_ERR_OOM, "comm: out of host memory for the GPU table");
  ZRT_CHECK_GOTO(zrt_bootstrap_allgather(boot, key, all, ZRT_GPU_KEY), st, done);
  int a = -1, b = -1;
  if (zrt_nccl_shared_gpu(all, boot->world, ZRT_GPU_KEY, &a, &b)) {
    const char *bus = strrchr(all + (size_t)a * ZRT_GPU_KEY, '/');
    *shared = 1;
    snprintf(why, why_n, "ranks %d and %d share GPU %s", a, b, bus ? bus + 1 : "?");
  }
done:
  free(all);
  return st;
}
#endif

zrt_status zrt_comm_create(const char *want, zrt_backend *backend, double timeout_s,
                           zrt_comm **out) {
  zrt_status st = ZRT_OK;
  if (!out) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_comm_create: out is NULL");
  *out = NULL;
  if (!want || !*want) want = "auto";
  const char *pick = want;
  char why[400] = "";
  int env_world = 1;
  ZRT_CHECK(zrt_comm_env_world(&env_world));

  /* the GPU check's bootstrap, destroyed after the new comm exists */
  zrt_bootstrap *boot = NULL;
  if (!strcmp(want, "auto")) {
    int dev = backend && backend->device_id >= 0;
    if (env_world <= 1) {
      pick = "self";
      snprintf(why, sizeof why, "world size 1");
    } else if (dev && strcmp(backend->iface->name, "cuda")) {
      /* the twin: device buffers as on a GPU, no NCCL: MPI on the comm
       * stream (stream-ordered) */
      pick = "mpi";
      snprintf(why, sizeof why,
               "%s backend (device buffers, no NCCL): stream-ordered on the comm stream",
               backend->iface->name);
    } else if (dev) {
#ifdef ZRT_HAVE_NCCL
      /* NCCL refuses two ranks on one GPU ("Duplicate GPU"); such runs
       * (tests, small boxes) go through MPI with host staging instead.
       * Compared by PCI bus id: right under per-rank CUDA_VISIBLE_DEVICES. */
      int shared = 0;
      ZRT_CHECK_GOTO(nccl_gpu_check(backend, &boot, &shared, why, sizeof why), st, fail_boot);
      if (shared) {
        pick = "mpi";
        strncat(why, "; NCCL needs one GPU per rank", sizeof why - strlen(why) - 1);
      } else {
        pick = "nccl";
        snprintf(why, sizeof why, "CUDA backend, one GPU per rank");
      }
#else
      pick = "mpi";
      snprintf(why, sizeof why, "CUDA backend but NCCL not built: device buffers staged via host");
#endif
    } else if (local_world_is(env_world)) {
      pick = "shm";
      snprintf(why, sizeof why, "CPU backend, all %d ranks on this machine", env_world);
    } else {
      /* the hier comm decides from the all-gathered machine map (the same
       * on every rank) whether the two levels serve, else it stays mpi */
      pick = "hier";
    }
  } else if (strcmp(want, "self") && strcmp(want, "mpi") && strcmp(want, "shm") &&
             strcmp(want, "hier") && strcmp(want, "nccl")) {
    return zrt_error(ZRT_ERR_CONFIG,
                     "comm \"%s\" is unknown; expected one of auto, self, mpi, shm, hier, nccl",
                     want);
  }

  if (!strcmp(pick, "self") && env_world > 1)
    return zrt_error(ZRT_ERR_CONFIG,
                     "comm \"self\" requested but the launcher started %d ranks; use comm "
                     "\"auto\" or \"mpi\" (or run a single process)",
                     env_world);
  if (!strcmp(pick, "nccl")) {
#ifndef ZRT_HAVE_NCCL
    return zrt_error(ZRT_ERR_UNSUPPORTED,
                     "comm \"nccl\" requested but this build has no NCCL (configure with "
                     "-DZRT_CUDA=ON and NCCL installed), or use comm \"mpi\"");
#else
    if (!backend || backend->device_id < 0)
      return zrt_error(ZRT_ERR_CONFIG,
                       "comm \"nccl\" needs the cuda backend (buffers on a GPU); the backend "
                       "is %s — use comm \"mpi\" or \"auto\"",
                       backend ? backend->iface->name : "none");
    if (!strcmp(want, "nccl") && env_world > 1) {
      int shared = 0;
      ZRT_CHECK_GOTO(nccl_gpu_check(backend, &boot, &shared, why, sizeof why), st, fail_boot);
      if (shared) {
        st = zrt_error(ZRT_ERR_CONFIG,
                       "comm \"nccl\" requested but %s: NCCL needs one GPU per rank (it would "
                       "fail with \"Duplicate GPU\"); use comm \"auto\" or \"mpi\" (host staging), "
                       "or start one rank per GPU",
                       why);
        goto fail_boot;
      }
    }
#endif
  }

  comm_full *f = calloc(1, sizeof *f);
  if (!f) {
    st = zrt_error(ZRT_ERR_OOM, "zrt_comm_create: out of host memory");
    goto fail_boot;
  }
  zrt_comm *c = &f->pub;
  c->timeout_s = timeout_s;
  /* Stream-ordered (comm.h): the implementation runs inside a host
   * function, where the device buffers are reachable in place, so it is
   * made as for host memory (no staging, no backend calls of its own).
   * Not nccl (its kernels are on its stream already), and not the self comm
   * where the engine's statistics run on the host (the twin's cuda mode):
   * it keeps its device path there (comm_self.c: copies on a stream of its
   * own, an event per request), the one CUDA runs at world size 1. Only
   * where the statistics are stream ops (the twin's default mode) does it
   * ride the comm stream, which orders their record's fill before the
   * all-reduce (engine_step.c). */
  int streamed = backend && backend->device_id >= 0 && zrt_backend_host_fn_device(backend) &&
                 strcmp(pick, "nccl") != 0 &&
                 (strcmp(pick, "self") != 0 || zrt_backend_host_fn_kernels(backend));
  zrt_backend *ibe = streamed ? NULL : backend;
  if (!strcmp(pick, "self")) {
    ZRT_CHECK_GOTO(zrt_comm_self_init(c, ibe), st, fail);
  } else if (!strcmp(pick, "mpi")) {
    ZRT_CHECK_GOTO(zrt_comm_mpi_init(c, ibe), st, fail);
  } else if (!strcmp(pick, "shm")) {
    char no[256];
    st = zrt_comm_shm_init(c, ibe, no, sizeof no);
    if (st != ZRT_OK) {
      if (c->iface) c->iface->destroy(c->ctx);
      goto fail;
    }
    if (no[0]) {
      /* c is the MPI comm: say why, loudly when shm was asked for */
      pick = "mpi";
      snprintf(why, sizeof why, "shared memory not used: %s", no);
      if (strcmp(want, "auto")) zrt_log(ZRT_LOG_WARN, "comm: shm requested but %s; using mpi", no);
    }
  } else if (!strcmp(pick, "hier")) {
    char how[256];
    st = zrt_comm_hier_init(c, ibe, strcmp(want, "auto") != 0, how, sizeof how);
    if (st != ZRT_OK) {
      if (c->iface) c->iface->destroy(c->ctx);
      goto fail;
    }
    if (strcmp(c->iface->name, "hier")) {
      pick = "mpi";
      snprintf(why, sizeof why, "CPU backend, world size %d on several machines; hier not used: %s",
               env_world, how);
      if (strcmp(want, "auto"))
        zrt_log(ZRT_LOG_WARN, "comm: hier requested but %s; using mpi (every rank alike)", how);
    } else {
      snprintf(why, sizeof why, "CPU backend, %s", how);
    }
  } else {
#ifdef ZRT_HAVE_NCCL
    ZRT_CHECK_GOTO(zrt_comm_nccl_init(c, backend), st, fail);
#endif
  }
  f->even = calloc((size_t)c->world, sizeof(size_t));
  if (!f->even) {
    if (c->iface && c->iface->destroy) c->iface->destroy(c->ctx);
    st = zrt_error(ZRT_ERR_OOM, "zrt_comm_create: out of host memory");
    goto fail;
  }
  if (streamed) {
    int multiple = 0;
    int level = strcmp(c->iface->name, "self") ? zrt_comm_mpi_thread_level(&multiple) : 0;
    if (strcmp(c->iface->name, "self") && !multiple) {
      st = zrt_error(ZRT_ERR_COMM,
                     "comm \"%s\" on the %s backend runs its collectives on the comm stream's "
                     "thread (stream-ordered, docs/comms.md), so MPI must run at "
                     "MPI_THREAD_MULTIPLE; this process initialised it at %s (MPI_Init gives "
                     "MPI_THREAD_SINGLE): call MPI_Init_thread(&argc, &argv, "
                     "MPI_THREAD_MULTIPLE, &provided) in the program, or leave MPI to zrt (it "
                     "asks for MPI_THREAD_MULTIPLE)",
                     c->iface->name, backend->iface->name, zrt_comm_mpi_thread_name(level));
    } else {
      st = zrt_backend_stream_create(backend, &c->stream);
    }
    if (st != ZRT_OK) {
      c->stream = NULL;
      c->iface->destroy(c->ctx);
      free(f->even);
      goto fail;
    }
    f->sbe = backend;
  }
  if (zrt_log_get_rank() < 0 && c->world > 1) zrt_log_set_rank(c->rank);
  if (!strcmp(want, "auto") || !strcmp(want, "hier"))
    zrt_log_once("comm", ZRT_LOG_INFO, "comm: %s (%s); rank %d of %d, local %d of %d", pick, why,
                 c->rank, c->world, c->local_rank, c->local_world);
  else
    zrt_log_once("comm", ZRT_LOG_INFO, "comm: %s (requested); rank %d of %d, local %d of %d", pick,
                 c->rank, c->world, c->local_rank, c->local_world);
  *out = c;
  zrt_bootstrap_destroy(boot);
  return ZRT_OK;
fail:
  free(f);
  zrt_bootstrap_destroy(boot);
  return zrt_error_context(st, "creating comm \"%s\": ", pick);
fail_boot:
  zrt_bootstrap_destroy(boot);
  return st;
}

static void stream_retire(zrt_comm *c, int all);
static zrt_status ordered_retire(zrt_comm *c, int all);

void zrt_comm_destroy(zrt_comm *c) {
  if (!c) return;
  /* requests ordered with wait_on: the host waits for them (their events
   * live until then) before the implementation goes */
  (void)ordered_retire(c, 1);
  if (c->stream) {
    /* the worker finishes what was queued (the destroy waits for it; a
     * failed collective's error was the caller's to see) before the
     * requests and the implementation go */
    zrt_backend_stream_destroy(full_of(c)->sbe, c->stream);
    stream_retire(c, 1);
    c->stream = NULL;
  }
  if (full_of(c)->stuck)
    zrt_log(ZRT_LOG_WARN, "comm destroyed with %zu timed-out collective(s) still in flight",
            full_of(c)->stuck);
  if (c->iface && c->iface->destroy) c->iface->destroy(c->ctx);
  free(full_of(c)->even);
  free(full_of(c));
}

void zrt_comm_nccl_version(char *buf, size_t n) {
#ifdef ZRT_HAVE_NCCL
  zrt_comm_nccl_probe_version(buf, n);
#else
  snprintf(buf, n, "not built");
#endif
}

/* ------------------------------------------------------------ watchdog */

static void mark_completed(zrt_comm *c, uint64_t seq, const char *op, size_t bytes) {
  comm_full *f = full_of(c);
  c->completed++;
  if (seq > f->last_seq) {
    f->last_seq = seq;
    snprintf(c->last_op, sizeof c->last_op, "%s", op);
    c->last_bytes = bytes;
  }
}

/* One line of JSON, written to a temporary and renamed so the launcher
 * never reads a half-written file. Failure to write is logged, not
 * returned: the timeout is the error the caller must see. */
/* The last completed collective as a report names it: the comm's own
 * (host thread), or the snapshot a stream-ordered request took at its
 * enqueue (its worker must not read the comm's, which the host updates). */
typedef struct comm_last {
  uint64_t seq;
  const char *op;
  size_t bytes;
} comm_last;

static comm_last last_of(zrt_comm *c) {
  return (comm_last){full_of(c)->last_seq, c->last_op, c->last_bytes};
}

static void write_status(zrt_comm *c, comm_last last, uint64_t wait_seq, const char *wait_op) {
  const char *dir = zrt_env("ZRT_RUN_DIR");
  if (!dir || !*dir) return;
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/rank%d.status", dir, c->rank);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  unlink(tmp); /* a stale one; the new one is created, never followed */
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  FILE *fp = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!fp) {
    if (fd >= 0) close(fd);
    zrt_log(ZRT_LOG_WARN, "watchdog: cannot write %s: %s", tmp, strerror(errno));
    return;
  }
  fprintf(fp,
          "{\"rank\":%d,\"last_completed_seq\":%llu,\"last_op\":\"%s\",\"last_bytes\":%zu,"
          "\"waiting_seq\":%llu,\"waiting_op\":\"%s\"}\n",
          c->rank, (unsigned long long)last.seq, last.op, last.bytes, (unsigned long long)wait_seq,
          wait_op);
  int bad = ferror(fp);
  if (fclose(fp) != 0 || bad || rename(tmp, path) != 0) {
    zrt_log(ZRT_LOG_WARN, "watchdog: cannot write %s: %s", path, strerror(errno));
    remove(tmp);
  }
}

/* The timeout report: status file first (the launcher may already be
 * looking), then the message the caller propagates. */
static zrt_status watchdog_report(zrt_comm *c, comm_last lc, uint64_t seq, const char *op,
                                  size_t bytes) {
  write_status(c, lc, seq, op);
  char last[128];
  if (lc.seq)
    snprintf(last, sizeof last, "#%llu %s (%zu bytes)", (unsigned long long)lc.seq, lc.op,
             lc.bytes);
  else
    snprintf(last, sizeof last, "none");
  return zrt_error(ZRT_ERR_COMM,
                   "collective #%llu %s (%zu bytes) did not complete within %gs; last completed: "
                   "%s. Rank %d of %d waited; another rank is behind or dead (see "
                   "$ZRT_RUN_DIR/rank*.status), or raise comm_timeout_s if a step is "
                   "legitimately that slow",
                   (unsigned long long)seq, op, bytes, c->timeout_s, last, c->rank, c->world);
}

static zrt_status watchdog_fail(zrt_comm *c, uint64_t seq, const char *op, size_t bytes) {
  return watchdog_report(c, last_of(c), seq, op, bytes);
}

/* ------------------------------------------------- stream-ordered comms */

/* The comm stream's worker: issue and complete the collective there. A
 * failure (the watchdog's timeout included) is the host function's, so the
 * comm stream's error becomes sticky and every stream ordered after it, and
 * the next wait, report it. */
static zrt_status stream_run(void *arg) {
  comm_sreq *r;
  memcpy(&r, arg, sizeof r);
  zrt_comm *c = &r->f->pub;
  zrt_comm_req *ir = NULL;
  double t0 = zrt_now_s();
  zrt_status st = comm_call_issue(c, &r->k, &ir);
  if (st == ZRT_OK && ir) {
    ir->timed_out = 0;
    st = c->iface->wait(c->ctx, ir, c->timeout_s);
    /* a timed-out request stays in flight (MPI cannot cancel it): the comm
     * stream is dead from here on, as a hung NCCL kernel's stream would be */
    if (st != ZRT_OK && ir->timed_out) full_of(c)->stuck = 1;
  }
  if (st != ZRT_OK && c->timeout_s > 0 && zrt_now_s() - t0 >= c->timeout_s &&
      (!ir || ir->timed_out))
    st = watchdog_report(c, (comm_last){r->last_seq, r->last_op, r->last_bytes}, r->seq, r->op,
                         r->bytes);
  if (st != ZRT_OK) snprintf(r->msg, sizeof r->msg, "%s", zrt_last_error());
  r->st = st;
  atomic_store_explicit(&r->done, 1, memory_order_release);
  return st;
}

/* Frees the requests the caller released whose worker is done (all: every
 * one; only after the stream drained), counting the successful ones as
 * completed. Host thread. */
static void stream_retire(zrt_comm *c, int all) {
  comm_full *f = full_of(c);
  comm_sreq **pp = &f->pending;
  while (*pp) {
    comm_sreq *r = *pp;
    int done = atomic_load_explicit(&r->done, memory_order_acquire);
    if (!all && !(done && r->released)) {
      pp = &r->next;
      continue;
    }
    if (done && r->st == ZRT_OK && r->released) {
      /* busy until the host saw it complete (comm.h), as a wait would */
      c->busy_s += zrt_now_s() - r->base.t_issue;
      mark_completed(c, r->base.seq, r->base.op, r->base.bytes);
    }
    *pp = r->next;
    zrt_backend_event_destroy(f->sbe, r->ev);
    free(r->counts);
    free(r);
  }
}

/* Queues k on the comm stream after the work queued so far on every stream
 * (no host wait) and records the request's event after it. */
static zrt_status stream_issue(zrt_comm *c, const comm_call *k, const char *op, size_t bytes,
                               zrt_comm_req **out) {
  comm_full *f = full_of(c);
  zrt_status st = ZRT_OK;
  stream_retire(c, 0);
  comm_sreq *r = calloc(1, sizeof *r);
  if (!r) return zrt_error(ZRT_ERR_OOM, "comm: out of host memory for a request");
  r->f = f;
  r->k = *k;
  if (k->counts) {
    r->counts = malloc((size_t)c->world * sizeof(size_t));
    if (!r->counts) {
      free(r);
      return zrt_error(ZRT_ERR_OOM, "comm: out of host memory for a request's counts");
    }
    memcpy(r->counts, k->counts, (size_t)c->world * sizeof(size_t));
    r->k.counts = r->counts;
  }
  r->seq = c->seq + 1; /* what finish_issue gives it */
  r->op = op;
  r->bytes = bytes;
  r->last_seq = f->last_seq;
  snprintf(r->last_op, sizeof r->last_op, "%s", c->last_op);
  r->last_bytes = c->last_bytes;
  atomic_init(&r->done, 0);
  ZRT_CHECK_GOTO(zrt_backend_event_create(f->sbe, &r->ev), st, fail);
  ZRT_CHECK_GOTO(zrt_backend_stream_join(f->sbe, c->stream), st, fail);
  ZRT_CHECK_GOTO(zrt_backend_launch_host_named(f->sbe, stream_run, &r, sizeof r, c->stream, op), st,
                 fail);
  /* queued: r belongs to the pending list from here on */
  r->next = f->pending;
  f->pending = r;
  st = zrt_backend_event_record(f->sbe, r->ev, c->stream);
  if (st != ZRT_OK) {
    r->released = 1;
    return st;
  }
  *out = &r->base;
  return ZRT_OK;
fail:
  zrt_backend_event_destroy(f->sbe, r->ev);
  free(r->counts);
  free(r);
  return st;
}

/* The host waits for a stream-ordered request (counted by the backend as a
 * host wait) and releases it. */
static zrt_status stream_wait_host(zrt_comm *c, comm_sreq *r) {
  double t0 = zrt_now_s();
  zrt_status st = zrt_backend_event_synchronize(full_of(c)->sbe, r->ev);
  c->wait_s += zrt_now_s() - t0;
  int done = atomic_load_explicit(&r->done, memory_order_acquire);
  if (st == ZRT_OK && (!done || r->st != ZRT_OK))
    st = done ? zrt_error(r->st, "%s", r->msg)
              : zrt_error(ZRT_ERR_INTERNAL, "comm: collective #%llu %s not run by its stream",
                          (unsigned long long)r->base.seq, r->base.op);
  r->released = 1;
  stream_retire(c, 0);
  return st;
}

static zrt_status wait_req(zrt_comm *c, zrt_comm_req *req, int blocking) {
  if (c->stream) return stream_wait_host(c, (comm_sreq *)req);
  /* the watchdog's "last completed" counts what wait_on ordered and is done
   * (a failure there has broken the comm: this wait reports it) */
  if (full_of(c)->ordered) (void)ordered_retire(c, 0);
  uint64_t seq = req->seq;
  const char *op = req->op;
  size_t bytes = req->bytes;
  double t_issue = req->t_issue, t0 = zrt_now_s();
  req->timed_out = 0;
  zrt_status st = c->iface->wait(c->ctx, req, c->timeout_s);
  double t1 = zrt_now_s();
  c->wait_s += t1 - t0;
  if (st == ZRT_OK) {
    c->busy_s += t1 - t_issue;
    mark_completed(c, seq, op, bytes);
    return ZRT_OK;
  }
  /* Any failure but a timeout freed req: it is read only when the wait
   * ran its whole time (an implementation checks its deadline before
   * anything that could fail, so that is a timeout). */
  if (!(c->timeout_s > 0 && t1 - t0 >= c->timeout_s) || !req->timed_out)
    return st; /* the implementation freed req and set the message */
  if (blocking) full_of(c)->stuck++;
  return watchdog_fail(c, seq, op, bytes);
}

/* ---------------------------------------- requests ordered with wait_on */

/* Completes the requests ordered with the iface's wait_on that are done
 * now (the iface's test: no wait), each counted as completed as a wait
 * would count it (busy_s from issue until the host found it done); all:
 * the host waits for every one (the destroy; one that times out stays in
 * flight, counted as stuck, as a blocking collective abandoned after a
 * timeout is). Returns the first failure (that request is gone, as after a
 * failed wait). Host thread. */
static zrt_status ordered_retire(zrt_comm *c, int all) {
  comm_full *f = full_of(c);
  zrt_status first = ZRT_OK;
  zrt_comm_req **pp = &f->ordered;
  while (*pp) {
    zrt_comm_req *r = *pp, *next = r->next_ordered;
    uint64_t seq = r->seq;
    const char *op = r->op;
    size_t bytes = r->bytes;
    double t_issue = r->t_issue, t0 = zrt_now_s();
    int done = 0;
    zrt_status st;
    if (all) {
      r->timed_out = 0;
      st = c->iface->wait(c->ctx, r, c->timeout_s);
      done = 1;
      /* read only after a wait that ran its whole time (wait_req's rule) */
      if (st != ZRT_OK && c->timeout_s > 0 && zrt_now_s() - t0 >= c->timeout_s && r->timed_out)
        f->stuck++;
    } else {
      st = c->iface->test(c->ctx, r, &done);
    }
    if (st == ZRT_OK && done) {
      c->busy_s += zrt_now_s() - t_issue;
      mark_completed(c, seq, op, bytes);
    }
    if (st != ZRT_OK && first == ZRT_OK) first = st;
    if (done || st != ZRT_OK)
      *pp = next;
    else
      pp = &r->next_ordered;
  }
  return first;
}

/* -------------------------------------------------------- dispatch */

static zrt_status check_comm(zrt_comm *c, const char *fn) {
  if (!c || !c->iface) return zrt_error(ZRT_ERR_INVALID_ARG, "%s: comm is NULL", fn);
  return ZRT_OK;
}

static zrt_status check_dt(zrt_dtype dt, const char *fn) {
  if (dt != ZRT_F32 && dt != ZRT_F16 && dt != ZRT_BF16)
    return zrt_error(ZRT_ERR_INVALID_ARG, "%s: dtype %d is not fp32, fp16 or bf16", fn, (int)dt);
  return ZRT_OK;
}

static zrt_status check_op(zrt_redop op, const char *fn) {
  if (op != ZRT_RED_SUM && op != ZRT_RED_MAX && op != ZRT_RED_MIN)
    return zrt_error(ZRT_ERR_INVALID_ARG, "%s: reduction op %d is not SUM, MAX or MIN", fn,
                     (int)op);
  return ZRT_OK;
}

/* Tags the request the implementation issued (t0: just before the issue
 * call, whose own time — staging conversions included — the caller spent
 * blocked), then completes it now when the caller asked for a blocking
 * call. */
static zrt_status finish_issue(zrt_comm *c, zrt_comm_req *r, const char *op, size_t bytes,
                               uint64_t moved, double t0, zrt_comm_req **req);

/* Issues k: on the calling thread, or queued on the comm stream when the
 * comm is stream-ordered; then tags and (req NULL) completes it. */
static zrt_status issue(zrt_comm *c, const comm_call *k, const char *op, size_t bytes,
                        uint64_t moved, zrt_comm_req **req) {
  zrt_comm_req *r = NULL;
  double t0 = zrt_now_s();
  if (c->stream) {
    ZRT_CHECK(stream_issue(c, k, op, bytes, &r));
  } else {
    /* a failure found among the ordered requests fails this call before
     * it issues anything (the comm is broken: an aborted nccl, a failed
     * comm stream) */
    if (full_of(c)->ordered) ZRT_CHECK(ordered_retire(c, 0));
    ZRT_CHECK(comm_call_issue(c, k, &r));
  }
  return finish_issue(c, r, op, bytes, moved, t0, req);
}

static zrt_status finish_issue(zrt_comm *c, zrt_comm_req *r, const char *op, size_t bytes,
                               uint64_t moved, double t0, zrt_comm_req **req) {
  r->seq = ++c->seq;
  r->op = op;
  r->bytes = bytes;
  r->timed_out = 0;
  r->t_issue = t0;
  c->wait_s += zrt_now_s() - t0;
  c->bytes_moved += moved;
  if (req) {
    *req = r;
    return ZRT_OK;
  }
  return wait_req(c, r, 1);
}

/* Ring algorithm volumes (what nccl-tests calls bus bytes), in the caller's
 * dtype: what this rank sends, independent of how the implementation stages. */
static uint64_t ring_share(uint64_t bytes, int world, int factor) {
  if (world <= 1) return 0;
  return (uint64_t)factor * bytes * (uint64_t)(world - 1) / (uint64_t)world;
}

zrt_status zrt_comm_all_reduce(zrt_comm *c, const void *send, void *recv, size_t count,
                               zrt_dtype dt, zrt_redop op, zrt_comm_req **req) {
  static const char *fn = "zrt_comm_all_reduce";
  if (req) *req = NULL;
  ZRT_CHECK(check_comm(c, fn));
  ZRT_CHECK(check_dt(dt, fn));
  ZRT_CHECK(check_op(op, fn));
  if (count && (!send || !recv))
    return zrt_error(ZRT_ERR_INVALID_ARG, "%s: NULL %s buffer for %zu elements", fn,
                     send ? "recv" : "send", count);
  comm_call k = {
      .kind = COMM_ALL_REDUCE, .send = send, .recv = recv, .count = count, .dt = dt, .op = op};
  size_t bytes = count * zrt_dtype_size(dt);
  return issue(c, &k, "all_reduce", bytes, ring_share(bytes, c->world, 2), req);
}

static zrt_status check_counts(zrt_comm *c, const size_t *counts, const char *fn, size_t *total) {
  if (!counts)
    return zrt_error(ZRT_ERR_INVALID_ARG, "%s: counts is NULL (need world=%d entries)", fn,
                     c->world);
  size_t t = 0;
  for (int i = 0; i < c->world; i++) {
    if (counts[i] > SIZE_MAX / 4 - t)
      return zrt_error(ZRT_ERR_INVALID_ARG, "%s: counts[%d]=%zu overflows the total", fn, i,
                       counts[i]);
    t += counts[i];
  }
  *total = t;
  return ZRT_OK;
}

zrt_status zrt_comm_reduce_scatter(zrt_comm *c, const void *send, void *recv, const size_t *counts,
                                   zrt_dtype dt, zrt_redop op, zrt_comm_req **req) {
  static const char *fn = "zrt_comm_reduce_scatter";
  if (req) *req = NULL;
  ZRT_CHECK(check_comm(c, fn));
  ZRT_CHECK(check_dt(dt, fn));
  ZRT_CHECK(check_op(op, fn));
  size_t total = 0;
  ZRT_CHECK(check_counts(c, counts, fn, &total));
  if ((total && !send) || (counts[c->rank] && !recv))
    return zrt_error(ZRT_ERR_INVALID_ARG, "%s: NULL %s buffer (total %zu, this rank's %zu)", fn,
                     send || !total ? "recv" : "send", total, counts[c->rank]);
  comm_call k = {.kind = COMM_REDUCE_SCATTER,
                 .send = send,
                 .recv = recv,
                 .counts = counts,
                 .dt = dt,
                 .op = op};
  size_t bytes = total * zrt_dtype_size(dt);
  return issue(c, &k, "reduce_scatter", bytes, ring_share(bytes, c->world, 1), req);
}

zrt_status zrt_comm_all_gather(zrt_comm *c, const void *send, void *recv, const size_t *counts,
                               zrt_dtype dt, zrt_comm_req **req) {
  static const char *fn = "zrt_comm_all_gather";
  if (req) *req = NULL;
  ZRT_CHECK(check_comm(c, fn));
  ZRT_CHECK(check_dt(dt, fn));
  size_t total = 0;
  ZRT_CHECK(check_counts(c, counts, fn, &total));
  if ((counts[c->rank] && !send) || (total && !recv))
    return zrt_error(ZRT_ERR_INVALID_ARG, "%s: NULL %s buffer (total %zu, this rank's %zu)", fn,
                     !recv && total ? "recv" : "send", total, counts[c->rank]);
  comm_call k = {.kind = COMM_ALL_GATHER, .send = send, .recv = recv, .counts = counts, .dt = dt};
  size_t bytes = total * zrt_dtype_size(dt);
  return issue(c, &k, "all_gather", bytes, ring_share(bytes, c->world, 1), req);
}

static const size_t *even_counts(zrt_comm *c, size_t count) {
  size_t *e = full_of(c)->even;
  for (int r = 0; r < c->world; r++) e[r] = count;
  return e;
}

zrt_status zrt_comm_reduce_scatter_even(zrt_comm *c, const void *send, void *recv, size_t count,
                                        zrt_dtype dt, zrt_redop op, zrt_comm_req **req) {
  if (req) *req = NULL;
  ZRT_CHECK(check_comm(c, "zrt_comm_reduce_scatter_even"));
  return zrt_comm_reduce_scatter(c, send, recv, even_counts(c, count), dt, op, req);
}

zrt_status zrt_comm_all_gather_even(zrt_comm *c, const void *send, void *recv, size_t count,
                                    zrt_dtype dt, zrt_comm_req **req) {
  if (req) *req = NULL;
  ZRT_CHECK(check_comm(c, "zrt_comm_all_gather_even"));
  return zrt_comm_all_gather(c, send, recv, even_counts(c, count), dt, req);
}

zrt_status zrt_comm_broadcast(zrt_comm *c, void *buf, size_t count, zrt_dtype dt, int root,
                              zrt_comm_req **req) {
  static const char *fn = "zrt_comm_broadcast";
  if (req) *req = NULL;
  ZRT_CHECK(check_comm(c, fn));
  ZRT_CHECK(check_dt(dt, fn));
  if (root < 0 || root >= c->world)
    return zrt_error(ZRT_ERR_INVALID_ARG, "%s: root %d is not a rank (world size %d)", fn, root,
                     c->world);
  if (count && !buf)
    return zrt_error(ZRT_ERR_INVALID_ARG, "%s: NULL buffer for %zu elements", fn, count);
  comm_call k = {.kind = COMM_BROADCAST, .recv = buf, .count = count, .dt = dt, .root = root};
  size_t bytes = count * zrt_dtype_size(dt);
  /* Pipelined ring broadcast: every rank but the last forwards the whole
   * buffer once; counted per rank as bytes (N-1)/N on average. */
  return issue(c, &k, "broadcast", bytes, ring_share(bytes, c->world, 1), req);
}

zrt_status zrt_comm_barrier(zrt_comm *c) {
  ZRT_CHECK(check_comm(c, "zrt_comm_barrier"));
  if (c->stream) {
    /* in turn with the queued collectives, the host waiting for it */
    comm_call k = {.kind = COMM_BARRIER};
    return issue(c, &k, "barrier", 0, 0, NULL);
  }
  if (full_of(c)->ordered) (void)ordered_retire(c, 0); /* as in wait_req */
  /* The iface's barrier is blocking and bounded by c->timeout_s itself
   * (implementations read it through the comm they were initialised on);
   * a COMM failure that took the whole timeout is the watchdog's case. */
  uint64_t seq = ++c->seq;
  double t0 = zrt_now_s();
  zrt_status st = c->iface->barrier(c->ctx);
  double dt = zrt_now_s() - t0;
  c->wait_s += dt;
  if (st == ZRT_OK) {
    c->busy_s += dt;
    mark_completed(c, seq, "barrier", 0);
    return ZRT_OK;
  }
  if (st == ZRT_ERR_COMM && c->timeout_s > 0 && zrt_now_s() - t0 >= c->timeout_s)
    return watchdog_fail(c, seq, "barrier", 0);
  return st;
}

zrt_status zrt_comm_wait(zrt_comm *c, zrt_comm_req *req) {
  if (!req) return ZRT_OK;
  ZRT_CHECK(check_comm(c, "zrt_comm_wait"));
  return wait_req(c, req, 0);
}

zrt_status zrt_comm_test(zrt_comm *c, zrt_comm_req *req, int *done) {
  ZRT_CHECK(check_comm(c, "zrt_comm_test"));
  if (!done) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_comm_test: done is NULL");
  *done = 0;
  if (!req) {
    *done = 1;
    return ZRT_OK;
  }
  if (c->stream) {
    comm_sreq *r = (comm_sreq *)req;
    if (!atomic_load_explicit(&r->done, memory_order_acquire)) return ZRT_OK;
    /* done: the worker wrote its result (the data reach other streams
     * through zrt_comm_wait_on; the host may read them now) */
    *done = 1;
    zrt_status st = r->st == ZRT_OK ? ZRT_OK : zrt_error(r->st, "%s", r->msg);
    r->released = 1;
    stream_retire(c, 0);
    return st;
  }
  if (full_of(c)->ordered) (void)ordered_retire(c, 0); /* as in wait_req */
  uint64_t seq = req->seq;
  const char *op = req->op;
  size_t bytes = req->bytes;
  double t_issue = req->t_issue, t0 = zrt_now_s();
  ZRT_CHECK(c->iface->test(c->ctx, req, done));
  double t1 = zrt_now_s();
  c->wait_s += t1 - t0;
  if (*done) {
    c->busy_s += t1 - t_issue;
    mark_completed(c, seq, op, bytes);
  }
  return ZRT_OK;
}

zrt_status zrt_comm_wait_on(zrt_comm *c, zrt_comm_req *req, zrt_stream s) {
  if (!req) return ZRT_OK;
  ZRT_CHECK(check_comm(c, "zrt_comm_wait_on"));
  if (!c->stream) {
    if (!c->iface->wait_on) return zrt_comm_wait(c, req);
    int ordered = 0;
    double t0 = zrt_now_s();
    zrt_status st = c->iface->wait_on(c->ctx, req, s, &ordered);
    c->wait_s += zrt_now_s() - t0;
    if (st != ZRT_OK) return st; /* req is gone, as after a failed wait */
    if (!ordered) return zrt_comm_wait(c, req);
    /* the comm's until a later call finds it done (counted completed then) */
    req->next_ordered = full_of(c)->ordered;
    full_of(c)->ordered = req;
    return ordered_retire(c, 0);
  }
  comm_sreq *r = (comm_sreq *)req;
  double t0 = zrt_now_s();
  zrt_status st = zrt_backend_stream_wait_event(full_of(c)->sbe, s, r->ev);
  c->wait_s += zrt_now_s() - t0;
  r->released = 1; /* counted as completed when its worker is done */
  stream_retire(c, 0);
  return st;
}

zrt_status zrt_comm_mem_alloc(zrt_comm *c, size_t bytes, void **out) {
  if (!out) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_comm_mem_alloc: out is NULL");
  *out = NULL;
  ZRT_CHECK(check_comm(c, "zrt_comm_mem_alloc"));
  if (c->iface->mem_alloc) return c->iface->mem_alloc(c->ctx, bytes, out);
  if (!bytes) return ZRT_OK;
  int rc = posix_memalign(out, 64, bytes);
  if (rc) {
    *out = NULL;
    return zrt_error(ZRT_ERR_OOM, "zrt_comm_mem_alloc: %zu bytes of host memory: %s", bytes,
                     strerror(rc));
  }
  return ZRT_OK;
}

void zrt_comm_mem_free(zrt_comm *c, void *p) {
  if (!p) return;
  if (c && c->iface && c->iface->mem_free)
    c->iface->mem_free(c->ctx, p);
  else
    free(p);
}

/* The comm's own buffers where it has an allocator and the buffers are
 * host memory; the backend's otherwise (the same test at free). */
static int own_bufs(const zrt_comm *c, const zrt_backend *be) {
  return c && c->iface && c->iface->mem_alloc && be && be->device_id < 0;
}

zrt_status zrt_comm_agree(zrt_comm *c, zrt_status local, const char *what) {
  char msg[512] = "";
  if (local != ZRT_OK) snprintf(msg, sizeof msg, "%s", zrt_last_error());
  /* the lowest failing rank, or world when none failed */
  float v = local == ZRT_OK ? (float)c->world : (float)c->rank;
  zrt_status st = zrt_comm_all_reduce(c, &v, &v, 1, ZRT_F32, ZRT_RED_MIN, NULL);
  if (local != ZRT_OK) return zrt_error(local, "%s", msg); /* its own message, intact */
  if (st != ZRT_OK) return st;
  if ((int)v < c->world)
    return zrt_error(ZRT_ERR_OOM,
                     "%s: rank %d could not reserve its share (its message says why and what to "
                     "do); every rank stops here instead of waiting for it",
                     what, (int)v);
  return ZRT_OK;
}

zrt_status zrt_comm_buf_alloc(zrt_comm *c, zrt_backend *be, size_t bytes, zrt_mem_category cat,
                              void **out) {
  if (!out || !be) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_comm_buf_alloc: NULL argument");
  *out = NULL;
  if (!own_bufs(c, be)) return zrt_backend_alloc(be, bytes, cat, out);
  /* the capacity first, agreed over the ranks: a refusal after the
   * collective allocation would leave the others holding theirs, and one
   * rank refusing alone would leave them waiting in it */
  ZRT_CHECK(zrt_comm_agree(c, zrt_pool_reserve(be->pool, bytes, cat), "zrt_comm_buf_alloc"));
  ZRT_CHECK(zrt_comm_mem_alloc(c, bytes ? bytes : 1, out));
  zrt_status st = zrt_pool_adopt(be->pool, *out, bytes, cat);
  if (st != ZRT_OK) {
    zrt_comm_mem_free(c, *out);
    *out = NULL;
  }
  return st;
}

void zrt_comm_buf_free(zrt_comm *c, zrt_backend *be, void *p) {
  if (!p || !be) return;
  zrt_backend_free(be, p); /* adopted: only stops counting it */
  if (own_bufs(c, be)) zrt_comm_mem_free(c, p);
}
