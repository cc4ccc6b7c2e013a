/*
 * comm_mpi.c — the Open MPI comm: every collective a non-blocking MPI_I*
 * collective on a duplicate of MPI_COMM_WORLD (or of the sub-communicator
 * the hierarchical comm hands to zrt_comm_mpi_init_on), completed by polling
 * MPI_Test so waits can time out for the watchdog; 16-bit sums in their own
 * type with fp32 adds; device buffers staged through accounted host memory.
 * Invariants (numerics, staging, MPI's life cycle, machine grouping,
 * timed-out requests): docs/comms.md, "The MPI comm".
 */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_impl.h"
#include "dtype.h"
#include "env.h"

static int mpi_live;    /* live MPI comms in this process */
static int mpi_we_init; /* a zrt comm called MPI_Init_thread */

typedef struct mpi_ctx {
  zrt_comm *c; /* the comm this ctx backs: timeout_s for barrier */
  MPI_Comm world, local;
  int rank, nranks;
  uint64_t *hosts; /* per rank: hash of host name + boot id (mpi_local_ranks) */
  int counted;     /* included in mpi_live */
  zrt_backend *backend;
  int on_device;        /* buffers are device pointers: stage via host */
  zrt_pool *host_stage; /* accounted host staging for device buffers */
  int inflight;         /* issued requests not yet freed */
  MPI_Datatype half_t;  /* contiguous 2 bytes: one fp16 or bf16 element */
  MPI_Op half_op[2][3]; /* [bf16?][zrt_half_op] user ops, MPI_OP_NULL until made */
} mpi_ctx;

typedef struct mpi_req {
  zrt_comm_req base; /* first: zrt_comm_req * and mpi_req * convert */
  mpi_ctx *m;
  MPI_Request mr;
  void *stage[2]; /* staging buffers, freed on completion */
  int *ints;      /* counts/displacements MPI reads until completion */
  /* On completion: host staging -> the caller's buffer (device buffers
   * only; src and dst dtypes are always equal here). */
  zrt_comm_fin fin;
} mpi_req;

static zrt_status mpi_fail(int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", rc);
  return zrt_error(ZRT_ERR_COMM, "MPI comm: %s failed: %s", what, msg);
}

#define MPI_TRY(call, what)                                                                        \
  do {                                                                                             \
    int mpi_rc_ = (call);                                                                          \
    if (mpi_rc_ != MPI_SUCCESS) return mpi_fail(mpi_rc_, what);                                    \
  } while (0)

#define MPI_TRY_GOTO(call, what, st, label)                                                        \
  do {                                                                                             \
    int mpi_rc_ = (call);                                                                          \
    if (mpi_rc_ != MPI_SUCCESS) {                                                                  \
      (st) = mpi_fail(mpi_rc_, what);                                                              \
      goto label;                                                                                  \
    }                                                                                              \
  } while (0)

/* ------------------------------------------------------------ staging */

static zrt_status host_raw_alloc(void *ctx, size_t bytes, void **out) {
  (void)ctx;
  if (posix_memalign(out, 64, bytes ? bytes : 64) != 0)
    return zrt_error(ZRT_ERR_OOM, "MPI comm: out of host memory for %zu staging bytes", bytes);
  return ZRT_OK;
}

static void host_raw_free(void *ctx, void *ptr, size_t bytes) {
  (void)ctx, (void)bytes;
  free(ptr);
}

static zrt_status stage_alloc(mpi_ctx *m, size_t bytes, void **out) {
  *out = NULL;
  if (!bytes) return ZRT_OK;
  return zrt_pool_alloc(m->host_stage, bytes, ZRT_MEM_COMM, out);
}

static void stage_free(mpi_ctx *m, void *p) {
  if (p) zrt_pool_free(m->host_stage, p);
}

/* stage (host) <- the caller's device buffer, n elements of dt. The copy
 * runs on the backend's stream after every backend stream's queued work
 * (stream_join: events, so an input produced on an offload or comm stream
 * is complete); the staging is pageable (host_raw_alloc), so the copy has
 * completed when it returns (CUDA and twin alike: no synchronize, which
 * the mutation run found idle). */
static zrt_status load_stage(mpi_ctx *m, void *stage, const void *src, zrt_dtype dt, size_t n) {
  if (!n) return ZRT_OK;
  ZRT_CHECK(zrt_backend_stream_join(m->backend, NULL));
  return zrt_backend_memcpy(m->backend, stage, src, n * zrt_dtype_size(dt), ZRT_COPY_D2H, NULL);
}

/* Completion: the caller's dst <- the request's host result. */
static zrt_status finish_copy(mpi_req *r) {
  return zrt_comm_fin_run(r->m->backend, &r->fin, r->m->on_device ? ZRT_COPY_H2D : ZRT_COPY_H2H);
}

/* ----------------------------------------------------- 16-bit user ops */

/* MPI_User_function shims: len counts half_t elements. The op handle
 * fixes dtype and reduction, so no lookup runs per call. */
#define ZRT_MPI_HALF_OP(name, dt, op)                                                              \
  static void name(void *in, void *inout, int *len, MPI_Datatype *type) {                          \
    (void)type;                                                                                    \
    zrt_half_reduce(inout, in, dt, (size_t)*len, op);                                              \
  }
ZRT_MPI_HALF_OP(half_f16_sum, ZRT_F16, ZRT_HALF_SUM)
ZRT_MPI_HALF_OP(half_f16_max, ZRT_F16, ZRT_HALF_MAX)
ZRT_MPI_HALF_OP(half_f16_min, ZRT_F16, ZRT_HALF_MIN)
ZRT_MPI_HALF_OP(half_bf16_sum, ZRT_BF16, ZRT_HALF_SUM)
ZRT_MPI_HALF_OP(half_bf16_max, ZRT_BF16, ZRT_HALF_MAX)
ZRT_MPI_HALF_OP(half_bf16_min, ZRT_BF16, ZRT_HALF_MIN)

/* c->local_rank / local_world: ranks whose host name + boot id hash alike
 * share a machine; the local rank counts the lower world ranks among them. */
static zrt_status mpi_local_ranks(mpi_ctx *m, zrt_comm *c) {
  /* host name + kernel boot id: two machines that happen to share a name
   * still differ, containers of one machine (same kernel) still match */
  char host[512] = "";
  if (gethostname(host, 255) != 0) snprintf(host, sizeof host, "unknown");
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    size_t n = strlen(host);
    if (!fgets(host + n, (int)(sizeof host - n), f)) host[n] = 0;
    fclose(f);
  }
  /* + Open MPI's daemon ("jobid.vpid" before the ';' of its URI): one per
   * machine in a real job, so nothing changes there; two daemons on one
   * host (tests/cli/test_launch_multinode.sh) are two machines to zrt as
   * they are to Open MPI, which does not use shared memory between them. */
  const char *d = zrt_env("OMPI_MCA_orte_local_daemon_uri");
  if (d) {
    size_t n = strlen(host), k = strcspn(d, ";");
    if (k > sizeof host - n - 2) k = sizeof host - n - 2;
    host[n] = '|';
    memcpy(host + n + 1, d, k);
    host[n + 1 + k] = 0;
  }
  uint64_t h = 1469598103934665603ull; /* FNV-1a 64 */
  for (const char *p = host; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  uint64_t *all = malloc((size_t)m->nranks * sizeof *all);
  if (!all) return zrt_error(ZRT_ERR_OOM, "MPI comm: out of host memory for the host table");
  int rc = MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, m->world);
  if (rc != MPI_SUCCESS) {
    free(all);
    return zrt_error(ZRT_ERR_COMM, "MPI_Allgather(host names) failed (MPI error %d)", rc);
  }
  c->local_rank = 0;
  c->local_world = 0;
  for (int r = 0; r < m->nranks; r++)
    if (all[r] == h) {
      if (r < m->rank) c->local_rank++;
      c->local_world++;
    }
  m->hosts = all; /* kept for the hierarchical comm's machine map */
  return ZRT_OK;
}

static zrt_status half_ops_create(mpi_ctx *m) {
  static MPI_User_function *const fns[2][3] = {
      {half_f16_sum, half_f16_max, half_f16_min},
      {half_bf16_sum, half_bf16_max, half_bf16_min},
  };
  MPI_TRY(MPI_Type_contiguous(2, MPI_BYTE, &m->half_t), "MPI_Type_contiguous(2 bytes)");
  MPI_TRY(MPI_Type_commit(&m->half_t), "MPI_Type_commit");
  for (int d = 0; d < 2; d++)
    for (int o = 0; o < 3; o++)
      MPI_TRY(MPI_Op_create(fns[d][o], 1 /* commutative */, &m->half_op[d][o]), "MPI_Op_create");
  return ZRT_OK;
}

static void half_ops_free(mpi_ctx *m) {
  for (int d = 0; d < 2; d++)
    for (int o = 0; o < 3; o++)
      if (m->half_op[d][o] != MPI_OP_NULL) MPI_Op_free(&m->half_op[d][o]);
  if (m->half_t != MPI_DATATYPE_NULL) MPI_Type_free(&m->half_t);
}

static zrt_half_op half_op_of(zrt_redop op) {
  return op == ZRT_RED_MAX ? ZRT_HALF_MAX : op == ZRT_RED_MIN ? ZRT_HALF_MIN : ZRT_HALF_SUM;
}

/* Element type and op of a reduction in dtype dt. */
static void red_type_op(mpi_ctx *m, zrt_dtype dt, zrt_redop op, MPI_Datatype *t, MPI_Op *o) {
  if (dt == ZRT_F32) {
    *t = MPI_FLOAT;
    *o = op == ZRT_RED_MAX ? MPI_MAX : op == ZRT_RED_MIN ? MPI_MIN : MPI_SUM;
  } else {
    *t = m->half_t;
    *o = m->half_op[dt == ZRT_BF16][half_op_of(op)];
  }
}

/* ------------------------------------------------------------ requests */

static zrt_status req_new(mpi_ctx *m, mpi_req **out) {
  mpi_req *r = calloc(1, sizeof *r);
  if (!r) return zrt_error(ZRT_ERR_OOM, "MPI comm: out of host memory for a request");
  r->m = m;
  r->mr = MPI_REQUEST_NULL;
  m->inflight++;
  *out = r;
  return ZRT_OK;
}

static void req_free(mpi_req *r) {
  if (!r) return;
  stage_free(r->m, r->stage[0]);
  stage_free(r->m, r->stage[1]);
  free(r->ints);
  r->m->inflight--;
  free(r);
}

static zrt_status mpi_req_test(void *arg, int *flag) {
  mpi_req *r = arg;
  MPI_TRY(MPI_Test(&r->mr, flag, MPI_STATUS_IGNORE), "MPI_Test");
  return ZRT_OK;
}

static zrt_status mpi_wait(void *ctx, zrt_comm_req *req, double timeout_s) {
  (void)ctx;
  mpi_req *r = (mpi_req *)req;
  zrt_status st = ZRT_OK;
  int got = zrt_comm_poll(mpi_req_test, r, timeout_s, &st);
  if (got == 0) {
    req->timed_out = 1;
    return zrt_error(ZRT_ERR_COMM, "MPI comm: request did not complete within %gs", timeout_s);
  }
  if (got > 0) st = finish_copy(r);
  req_free(r);
  return st;
}

static zrt_status mpi_test(void *ctx, zrt_comm_req *req, int *done) {
  (void)ctx;
  mpi_req *r = (mpi_req *)req;
  *done = 0;
  zrt_status st = mpi_req_test(r, done);
  if (st == ZRT_OK && !*done) return ZRT_OK;
  if (st == ZRT_OK) st = finish_copy(r);
  *done = 1;
  req_free(r);
  return st;
}

/* Hands the issued request out, or completes it when the caller of the
 * iface slot asked for a blocking call (req == NULL). */
static zrt_status issued(mpi_ctx *m, mpi_req *r, zrt_comm_req **req) {
  if (req) {
    *req = &r->base;
    return ZRT_OK;
  }
  return mpi_wait(m, &r->base, m->c ? m->c->timeout_s : 0);
}

static zrt_status check_int(size_t n, const char *what) {
  if (n > INT_MAX)
    return zrt_error(ZRT_ERR_UNSUPPORTED,
                     "MPI comm: %s of %zu elements exceeds MPI's int count limit (%d); split the "
                     "collective into smaller buckets",
                     what, n, INT_MAX);
  return ZRT_OK;
}

/* Element type for data movement without arithmetic. */
static MPI_Datatype raw_type(zrt_dtype dt) { return dt == ZRT_F32 ? MPI_FLOAT : MPI_UINT16_T; }

/* ---------------------------------------------------------- collectives */

static zrt_status mpi_all_reduce(void *ctx, const void *send, void *recv, size_t count,
                                 zrt_dtype dt, zrt_redop op, zrt_comm_req **req) {
  mpi_ctx *m = ctx;
  zrt_status st = ZRT_OK;
  mpi_req *r = NULL;
  MPI_Datatype T;
  MPI_Op O;
  red_type_op(m, dt, op, &T, &O);
  ZRT_CHECK(check_int(count, "all_reduce"));
  ZRT_CHECK(req_new(m, &r));
  if (!m->on_device) {
    const void *sb = send == recv ? MPI_IN_PLACE : send;
    MPI_TRY_GOTO(MPI_Iallreduce(sb, recv, (int)count, T, O, m->world, &r->mr), "MPI_Iallreduce", st,
                 fail);
  } else {
    ZRT_CHECK_GOTO(stage_alloc(m, count * zrt_dtype_size(dt), &r->stage[0]), st, fail);
    ZRT_CHECK_GOTO(load_stage(m, r->stage[0], send, dt, count), st, fail);
    MPI_TRY_GOTO(MPI_Iallreduce(MPI_IN_PLACE, r->stage[0], (int)count, T, O, m->world, &r->mr),
                 "MPI_Iallreduce", st, fail);
    r->fin = (zrt_comm_fin){r->stage[0], recv, count, dt, dt};
  }
  return issued(m, r, req);
fail:
  req_free(r);
  return st;
}

static zrt_status counts_displs(mpi_ctx *m, const size_t *counts, mpi_req *r, size_t *total) {
  size_t t = 0;
  for (int i = 0; i < m->nranks; i++) t += counts[i];
  ZRT_CHECK(check_int(t, "total"));
  r->ints = malloc(2 * (size_t)m->nranks * sizeof(int));
  if (!r->ints) return zrt_error(ZRT_ERR_OOM, "MPI comm: out of host memory for counts");
  int off = 0;
  for (int i = 0; i < m->nranks; i++) {
    r->ints[i] = (int)counts[i];
    r->ints[m->nranks + i] = off;
    off += (int)counts[i];
  }
  *total = t;
  return ZRT_OK;
}

static zrt_status mpi_reduce_scatter(void *ctx, const void *send, void *recv, const size_t *counts,
                                     zrt_dtype dt, zrt_redop op, zrt_comm_req **req) {
  mpi_ctx *m = ctx;
  zrt_status st = ZRT_OK;
  mpi_req *r = NULL;
  size_t total = 0, mine = counts[m->rank], es = zrt_dtype_size(dt);
  MPI_Datatype T;
  MPI_Op O;
  red_type_op(m, dt, op, &T, &O);
  ZRT_CHECK(req_new(m, &r));
  ZRT_CHECK_GOTO(counts_displs(m, counts, r, &total), st, fail);
  if (!m->on_device) {
    MPI_TRY_GOTO(MPI_Ireduce_scatter(send, recv, r->ints, T, O, m->world, &r->mr),
                 "MPI_Ireduce_scatter", st, fail);
  } else {
    ZRT_CHECK_GOTO(stage_alloc(m, total * es, &r->stage[0]), st, fail);
    ZRT_CHECK_GOTO(stage_alloc(m, mine * es, &r->stage[1]), st, fail);
    ZRT_CHECK_GOTO(load_stage(m, r->stage[0], send, dt, total), st, fail);
    MPI_TRY_GOTO(MPI_Ireduce_scatter(r->stage[0], r->stage[1], r->ints, T, O, m->world, &r->mr),
                 "MPI_Ireduce_scatter", st, fail);
    r->fin = (zrt_comm_fin){r->stage[1], recv, mine, dt, dt};
  }
  return issued(m, r, req);
fail:
  req_free(r);
  return st;
}

static zrt_status mpi_all_gather(void *ctx, const void *send, void *recv, const size_t *counts,
                                 zrt_dtype dt, zrt_comm_req **req) {
  mpi_ctx *m = ctx;
  zrt_status st = ZRT_OK;
  mpi_req *r = NULL;
  size_t total = 0, es = zrt_dtype_size(dt), mine = counts[m->rank];
  MPI_Datatype T = raw_type(dt);
  ZRT_CHECK(req_new(m, &r));
  ZRT_CHECK_GOTO(counts_displs(m, counts, r, &total), st, fail);
  size_t my_off = (size_t)r->ints[m->nranks + m->rank] * es;
  if (!m->on_device) {
    /* In place when the caller's send already sits at this rank's offset. */
    const void *sb = send == (const char *)recv + my_off ? MPI_IN_PLACE : send;
    MPI_TRY_GOTO(
        MPI_Iallgatherv(sb, (int)mine, T, recv, r->ints, r->ints + m->nranks, T, m->world, &r->mr),
        "MPI_Iallgatherv", st, fail);
  } else {
    ZRT_CHECK_GOTO(stage_alloc(m, total * es, &r->stage[0]), st, fail);
    if (mine) ZRT_CHECK_GOTO(load_stage(m, (char *)r->stage[0] + my_off, send, dt, mine), st, fail);
    MPI_TRY_GOTO(MPI_Iallgatherv(MPI_IN_PLACE, 0, T, r->stage[0], r->ints, r->ints + m->nranks, T,
                                 m->world, &r->mr),
                 "MPI_Iallgatherv", st, fail);
    r->fin = (zrt_comm_fin){r->stage[0], recv, total, dt, dt};
  }
  return issued(m, r, req);
fail:
  req_free(r);
  return st;
}

static zrt_status mpi_broadcast(void *ctx, void *buf, size_t count, zrt_dtype dt, int root,
                                zrt_comm_req **req) {
  mpi_ctx *m = ctx;
  zrt_status st = ZRT_OK;
  mpi_req *r = NULL;
  size_t es = zrt_dtype_size(dt);
  MPI_Datatype T = raw_type(dt);
  ZRT_CHECK(check_int(count, "broadcast"));
  ZRT_CHECK(req_new(m, &r));
  if (!m->on_device) {
    MPI_TRY_GOTO(MPI_Ibcast(buf, (int)count, T, root, m->world, &r->mr), "MPI_Ibcast", st, fail);
  } else {
    ZRT_CHECK_GOTO(stage_alloc(m, count * es, &r->stage[0]), st, fail);
    /* the root stages like every other input: after all queued work (an
     * input written on another stream was sent stale before:
     * mpi.test_comm_staged) */
    if (m->rank == root) ZRT_CHECK_GOTO(load_stage(m, r->stage[0], buf, dt, count), st, fail);
    MPI_TRY_GOTO(MPI_Ibcast(r->stage[0], (int)count, T, root, m->world, &r->mr), "MPI_Ibcast", st,
                 fail);
    if (m->rank != root) {
      r->fin = (zrt_comm_fin){r->stage[0], buf, count, dt, dt};
    }
  }
  return issued(m, r, req);
fail:
  req_free(r);
  return st;
}

static zrt_status mpi_barrier(void *ctx) {
  mpi_ctx *m = ctx;
  mpi_req *r = NULL;
  zrt_status st = ZRT_OK;
  ZRT_CHECK(req_new(m, &r));
  MPI_TRY_GOTO(MPI_Ibarrier(m->world, &r->mr), "MPI_Ibarrier", st, fail);
  /* On timeout the request stays in flight (counted in m->inflight). */
  return mpi_wait(m, &r->base, m->c ? m->c->timeout_s : 0);
fail:
  req_free(r);
  return st;
}

/* ------------------------------------------------------------ lifecycle */

static void mpi_destroy(void *ctx) {
  mpi_ctx *m = ctx;
  if (!m) return;
  if (m->inflight > 0) {
    /* Freeing the communicators or finalising with collectives in flight
     * can block forever; the process is going down after a comm failure. */
    zrt_log(ZRT_LOG_WARN,
            "MPI comm: %d collective(s) still in flight at destroy; not finalising MPI",
            m->inflight);
    return;
  }
  half_ops_free(m);
  free(m->hosts);
  if (m->local != MPI_COMM_NULL) MPI_Comm_free(&m->local);
  if (m->world != MPI_COMM_NULL) MPI_Comm_free(&m->world);
  zrt_pool_destroy(m->host_stage);
  if (m->counted && --mpi_live == 0 && mpi_we_init) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
  }
  free(m);
}

static const zrt_comm_iface mpi_iface = {
    .name = "mpi",
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .all_gather = mpi_all_gather,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .wait = mpi_wait,
    .test = mpi_test,
    .destroy = mpi_destroy,
};

zrt_status zrt_comm_mpi_init(zrt_comm *c, zrt_backend *backend) {
  return zrt_comm_mpi_init_on(c, backend, NULL);
}

zrt_status zrt_comm_mpi_init_on(zrt_comm *c, zrt_backend *backend, const void *parent) {
  zrt_status st = ZRT_OK;
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (fin)
    return zrt_error(ZRT_ERR_COMM,
                     "MPI comm: MPI was already finalised in this process (an earlier comm was "
                     "destroyed); MPI can start only once — keep one comm for the process");
  mpi_ctx *m = calloc(1, sizeof *m);
  if (!m) return zrt_error(ZRT_ERR_OOM, "MPI comm: out of host memory");
  m->c = c;
  m->world = m->local = MPI_COMM_NULL;
  m->half_t = MPI_DATATYPE_NULL;
  for (int d = 0; d < 2; d++)
    for (int o = 0; o < 3; o++) m->half_op[d][o] = MPI_OP_NULL;
  m->backend = backend;
  m->on_device = backend && backend->device_id >= 0;
  if (!inited) {
    int provided = 0;
    /* Multiple: a stream-ordered comm (comm.h; the twin) issues its
     * collectives from its comm stream's worker while the program's thread
     * may call MPI too; elsewhere one thread at a time calls it. */
    MPI_TRY_GOTO(MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread", st,
                 fail);
    mpi_we_init = 1;
    if (provided < MPI_THREAD_MULTIPLE)
      zrt_log(ZRT_LOG_DEBUG, "MPI comm: MPI provides thread level %s < MPI_THREAD_MULTIPLE",
              zrt_comm_mpi_thread_name(provided));
  }
  m->counted = 1;
  mpi_live++;
  MPI_TRY_GOTO(MPI_Comm_dup(parent ? *(const MPI_Comm *)parent : MPI_COMM_WORLD, &m->world),
               "MPI_Comm_dup", st, fail);
  /* Errors come back as codes so they become zrt statuses with MPI's text,
   * instead of MPI aborting the job. */
  MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN);
  MPI_TRY_GOTO(MPI_Comm_rank(m->world, &m->rank), "MPI_Comm_rank", st, fail);
  MPI_TRY_GOTO(MPI_Comm_size(m->world, &m->nranks), "MPI_Comm_size", st, fail);
  ZRT_CHECK_GOTO(mpi_local_ranks(m, c), st, fail);
  ZRT_CHECK_GOTO(half_ops_create(m), st, fail);
  ZRT_CHECK_GOTO(
      zrt_pool_create("comm host staging", 0, host_raw_alloc, host_raw_free, NULL, &m->host_stage),
      st, fail);
  c->iface = &mpi_iface;
  c->ctx = m;
  c->rank = m->rank;
  c->world = m->nranks;
  return ZRT_OK;
fail:
  mpi_destroy(m);
  return st;
}

const uint64_t *zrt_comm_mpi_hosts(void *ctx) { return ((mpi_ctx *)ctx)->hosts; }

int zrt_comm_mpi_thread_level(int *multiple) {
  int inited = 0, level = -1;
  MPI_Initialized(&inited);
  if (inited && MPI_Query_thread(&level) != MPI_SUCCESS) level = -1;
  if (multiple) *multiple = inited && level == MPI_THREAD_MULTIPLE;
  return level;
}

const char *zrt_comm_mpi_thread_name(int level) {
  return level == MPI_THREAD_SINGLE       ? "MPI_THREAD_SINGLE"
         : level == MPI_THREAD_FUNNELED   ? "MPI_THREAD_FUNNELED"
         : level == MPI_THREAD_SERIALIZED ? "MPI_THREAD_SERIALIZED"
         : level == MPI_THREAD_MULTIPLE   ? "MPI_THREAD_MULTIPLE"
                                          : "not initialised";
}

/* The hierarchical comm's cross-level exchange (comm_impl.h): one
 * MPI_Ialltoallv of raw elements, completed by this comm's wait / test. */
zrt_status zrt_comm_mpi_alltoallv(void *ctx, const void *send, const size_t *scounts, void *recv,
                                  const size_t *rcounts, zrt_dtype dt, zrt_comm_req **req) {
  mpi_ctx *m = ctx;
  zrt_status st = ZRT_OK;
  mpi_req *r = NULL;
  if (m->on_device)
    return zrt_error(ZRT_ERR_INTERNAL, "MPI comm: alltoallv serves host buffers only");
  size_t ts = 0, tr = 0;
  for (int i = 0; i < m->nranks; i++) ts += scounts[i], tr += rcounts[i];
  ZRT_CHECK(check_int(ts > tr ? ts : tr, "alltoallv"));
  ZRT_CHECK(req_new(m, &r));
  r->ints = malloc(4 * (size_t)m->nranks * sizeof(int));
  if (!r->ints) {
    st = zrt_error(ZRT_ERR_OOM, "MPI comm: out of host memory for counts");
    goto fail;
  }
  int *sc = r->ints, *sd = sc + m->nranks, *rc = sd + m->nranks, *rd = rc + m->nranks, so = 0,
      ro = 0;
  for (int i = 0; i < m->nranks; i++) {
    sc[i] = (int)scounts[i], sd[i] = so, so += sc[i];
    rc[i] = (int)rcounts[i], rd[i] = ro, ro += rc[i];
  }
  MPI_TRY_GOTO(
      MPI_Ialltoallv(send, sc, sd, raw_type(dt), recv, rc, rd, raw_type(dt), m->world, &r->mr),
      "MPI_Ialltoallv", st, fail);
  *req = &r->base;
  return ZRT_OK;
fail:
  req_free(r);
  return st;
}

/* Bootstrap helper for the NCCL comm (comm_impl.h). */
zrt_status zrt_comm_mpi_allgather_bytes(void *ctx, const void *mine, void *all, size_t bytes) {
  mpi_ctx *m = ctx;
  ZRT_CHECK(check_int(bytes, "bootstrap all-gather"));
  MPI_TRY(MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, m->world),
          "MPI_Allgather");
  return ZRT_OK;
}

zrt_status zrt_comm_mpi_bcast_bytes(void *ctx, void *buf, size_t bytes, int root) {
  mpi_ctx *m = ctx;
  ZRT_CHECK(check_int(bytes, "bootstrap broadcast"));
  MPI_TRY(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, m->world), "MPI_Bcast");
  return ZRT_OK;
}
