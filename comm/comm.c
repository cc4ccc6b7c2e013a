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
 */
#include <errno.h>
#include <fcntl.h>
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

typedef struct comm_full {
  zrt_comm pub;      /* first: zrt_comm * and comm_full * convert */
  uint64_t last_seq; /* sequence number of last_op (0 = none yet) */
  size_t stuck;      /* blocking collectives abandoned after a timeout */
  size_t *even;      /* world entries: the counts of the _even wrappers, read during the call */
} comm_full;

static comm_full *full_of(zrt_comm *c) { return (comm_full *)c; }

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
  if (kind == ZRT_COPY_D2D) {
    if (f->src_dt != f->dst_dt)
      ZRT_CHECK(zrt_backend_convert(be, f->dst, f->dst_dt, f->src, f->src_dt, f->n, NULL));
    else
      ZRT_CHECK(zrt_backend_memcpy(be, f->dst, f->src, bytes, ZRT_COPY_D2D, NULL));
    return zrt_backend_synchronize(be, NULL);
  }
  if (kind != ZRT_COPY_H2D && kind != ZRT_COPY_H2H)
    return zrt_error(ZRT_ERR_INTERNAL, "zrt_comm_fin_run: copy kind %d is not D2D, H2D or H2H",
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

static int env_int(const char *name, int dflt) {
  const char *s = zrt_env(name);
  if (!s || !*s) return dflt;
  char *end;
  long v = strtol(s, &end, 10);
  return (*end || v < 0 || v > 1 << 24) ? dflt : (int)v;
}

int zrt_comm_env_world(void) {
  static const char *names[] = {"OMPI_COMM_WORLD_SIZE", "WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
                                "SLURM_STEP_NUM_TASKS"};
  int w = 1;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    int v = env_int(names[i], 1);
    if (v > w) w = v;
  }
  return w;
}

static int env_world_size(void) { return zrt_comm_env_world(); }

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
  int env_world = env_world_size();

  /* the GPU check's bootstrap, destroyed after the new comm exists */
  zrt_bootstrap *boot = NULL;
  if (!strcmp(want, "auto")) {
    int dev = backend && backend->device_id >= 0;
    if (env_world <= 1) {
      pick = "self";
      snprintf(why, sizeof why, "world size 1");
    } else if (dev && strcmp(backend->iface->name, "cuda")) {
      /* the twin: device buffers as on a GPU, no NCCL: staged via host */
      pick = "mpi";
      snprintf(why, sizeof why, "%s backend (device buffers, no NCCL): staged via host",
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
    } else if (env_int("OMPI_COMM_WORLD_LOCAL_SIZE", env_world) == env_world) {
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
  if (!strcmp(pick, "self")) {
    ZRT_CHECK_GOTO(zrt_comm_self_init(c, backend), st, fail);
  } else if (!strcmp(pick, "mpi")) {
    ZRT_CHECK_GOTO(zrt_comm_mpi_init(c, backend), st, fail);
  } else if (!strcmp(pick, "shm")) {
    char no[256];
    st = zrt_comm_shm_init(c, backend, no, sizeof no);
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
    st = zrt_comm_hier_init(c, backend, strcmp(want, "auto") != 0, how, sizeof how);
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

void zrt_comm_destroy(zrt_comm *c) {
  if (!c) return;
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
static void write_status(zrt_comm *c, uint64_t wait_seq, const char *wait_op) {
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
          c->rank, (unsigned long long)full_of(c)->last_seq, c->last_op, c->last_bytes,
          (unsigned long long)wait_seq, wait_op);
  int bad = ferror(fp);
  if (fclose(fp) != 0 || bad || rename(tmp, path) != 0) {
    zrt_log(ZRT_LOG_WARN, "watchdog: cannot write %s: %s", path, strerror(errno));
    remove(tmp);
  }
}

/* The timeout report: status file first (the launcher may already be
 * looking), then the message the caller propagates. */
static zrt_status watchdog_fail(zrt_comm *c, uint64_t seq, const char *op, size_t bytes) {
  write_status(c, seq, op);
  char last[128];
  if (full_of(c)->last_seq)
    snprintf(last, sizeof last, "#%llu %s (%zu bytes)", (unsigned long long)full_of(c)->last_seq,
             c->last_op, c->last_bytes);
  else
    snprintf(last, sizeof last, "none");
  return zrt_error(ZRT_ERR_COMM,
                   "collective #%llu %s (%zu bytes) did not complete within %gs; last completed: "
                   "%s. Rank %d of %d waited; another rank is behind or dead (see "
                   "$ZRT_RUN_DIR/rank*.status), or raise comm_timeout_s if a step is "
                   "legitimately that slow",
                   (unsigned long long)seq, op, bytes, c->timeout_s, last, c->rank, c->world);
}

static zrt_status wait_req(zrt_comm *c, zrt_comm_req *req, int blocking) {
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
  zrt_comm_req *r = NULL;
  double t0 = zrt_now_s();
  ZRT_CHECK(c->iface->all_reduce(c->ctx, send, recv, count, dt, op, &r));
  size_t bytes = count * zrt_dtype_size(dt);
  return finish_issue(c, r, "all_reduce", bytes, ring_share(bytes, c->world, 2), t0, req);
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
  zrt_comm_req *r = NULL;
  double t0 = zrt_now_s();
  ZRT_CHECK(c->iface->reduce_scatter(c->ctx, send, recv, counts, dt, op, &r));
  size_t bytes = total * zrt_dtype_size(dt);
  return finish_issue(c, r, "reduce_scatter", bytes, ring_share(bytes, c->world, 1), t0, req);
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
  zrt_comm_req *r = NULL;
  double t0 = zrt_now_s();
  ZRT_CHECK(c->iface->all_gather(c->ctx, send, recv, counts, dt, &r));
  size_t bytes = total * zrt_dtype_size(dt);
  return finish_issue(c, r, "all_gather", bytes, ring_share(bytes, c->world, 1), t0, req);
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
  zrt_comm_req *r = NULL;
  double t0 = zrt_now_s();
  ZRT_CHECK(c->iface->broadcast(c->ctx, buf, count, dt, root, &r));
  size_t bytes = count * zrt_dtype_size(dt);
  /* Pipelined ring broadcast: every rank but the last forwards the whole
   * buffer once; counted per rank as bytes (N-1)/N on average. */
  return finish_issue(c, r, "broadcast", bytes, ring_share(bytes, c->world, 1), t0, req);
}

zrt_status zrt_comm_barrier(zrt_comm *c) {
  ZRT_CHECK(check_comm(c, "zrt_comm_barrier"));
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
