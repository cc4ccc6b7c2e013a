/*
 * comm_nccl.c — the NCCL comm for device buffers (built only with CUDA and
 * NCCL: the *_nccl.c suffix). Bootstrap through bootstrap.h; collectives on
 * the comm's own stream, ordered after the backend's streams by events;
 * each request a cudaEvent polled so waits can time out, and waited on by
 * a stream (cudaStreamWaitEvent) for zrt_comm_wait_on; host buffers
 * staged through device scratch and a pinned host bounce (nccl_rules.h:
 * no cudaMemcpyAsync ever touches pageable memory, so issuing never blocks
 * on the collective; results reach the caller's host buffer when its wait
 * or test sees the event), the wait's verdict (done, pending, error,
 * timeout) from zrt_nccl_wait_decide; any failure or timeout aborts the
 * communicator (ncclCommAbort) before memory is freed. The device scratch
 * grows and is kept until the comm is destroyed; pinned bounces are owned
 * by one request at a time and freed at destroy. Invariants: docs/comms.md,
 * "The NCCL comm".
 */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "comm_impl.h"
#include "cuda_check.h"
#include "nccl_rules.h"

/* A pinned host bounce: owned by one request while busy. */
typedef struct nccl_bounce {
  char *p;
  size_t bytes;
  int busy;
  struct nccl_bounce *next;
} nccl_bounce;

typedef struct nccl_ctx {
  zrt_comm *c;
  zrt_bootstrap *boot; /* unique id, host barrier, placement */
  zrt_backend *backend;
  ncclComm_t nc;
  zrt_stream zs;       /* the backend stream this comm owns */
  cudaStream_t stream; /* == zs */
  int rank, nranks;
  int aborted;
  char abort_why[256];
  void *scratch; /* device, ZRT_MEM_COMM */
  size_t scratch_bytes;
  nccl_bounce *bounces; /* every pinned bounce, busy or free */
} nccl_ctx;

typedef struct nccl_req {
  zrt_comm_req base; /* first: converts with zrt_comm_req * */
  nccl_ctx *n;
  cudaEvent_t ev;
  nccl_bounce *bounce; /* held until the request is freed */
  /* host copy-out once ev completed: bounce -> the caller's recv */
  void *out_dst;
  const void *out_src;
  size_t out_bytes;
} nccl_req;

/* CUDA failures translate through backend/cuda_check.h ("NCCL comm: " in
 * what names this comm). */
#define cuda_fail(e, what) zrt_cuda_status((e), "NCCL comm: " what)

static zrt_status nccl_fail(ncclResult_t r, const char *what) {
  return zrt_error(ZRT_ERR_COMM, "NCCL comm: %s failed: %s", what, ncclGetErrorString(r));
}

/* Stops the communicator's kernels (they may spin on a dead peer) and
 * marks the comm unusable; memory is released only after this. */
static void abort_comm(nccl_ctx *n, const char *why) {
  if (n->aborted) return;
  ncclCommAbort(n->nc);
  n->aborted = 1;
  snprintf(n->abort_why, sizeof n->abort_why, "%s", why);
}

/* An issued collective failed: abort, keep the first error's text. */
#define FAIL_ABORT(n, st_expr, st, label)                                                          \
  do {                                                                                             \
    (st) = (st_expr);                                                                              \
    abort_comm((n), zrt_last_error());                                                             \
    goto label;                                                                                    \
  } while (0)

#define CUDA_TRY_GOTO(n, call, what, st, label)                                                    \
  do {                                                                                             \
    cudaError_t cu_e_ = (call);                                                                    \
    if (cu_e_ != cudaSuccess) FAIL_ABORT(n, cuda_fail(cu_e_, what), st, label);                    \
  } while (0)

#define NCCL_TRY_GOTO(n, call, what, st, label)                                                    \
  do {                                                                                             \
    ncclResult_t nc_r_ = (call);                                                                   \
    if (nc_r_ != ncclSuccess) FAIL_ABORT(n, nccl_fail(nc_r_, what), st, label);                    \
  } while (0)

static ncclDataType_t nccl_type(zrt_dtype dt) {
  return dt == ZRT_F32 ? ncclFloat32 : dt == ZRT_F16 ? ncclFloat16 : ncclBfloat16;
}

static ncclRedOp_t nccl_op(zrt_redop op) {
  return op == ZRT_RED_MAX ? ncclMax : op == ZRT_RED_MIN ? ncclMin : ncclSum;
}

static zrt_status check_live(nccl_ctx *n) {
  if (n->aborted)
    return zrt_error(ZRT_ERR_COMM,
                     "NCCL comm: the communicator was aborted (%s); recreate the engine (the job "
                     "must restart)",
                     n->abort_why);
  return ZRT_OK;
}

/* ------------------------------------------------------------ requests */

static zrt_status req_new(nccl_ctx *n, nccl_req **out) {
  nccl_req *r = calloc(1, sizeof *r);
  if (!r) return zrt_error(ZRT_ERR_OOM, "NCCL comm: out of host memory for a request");
  r->n = n;
  cudaError_t e = cudaEventCreateWithFlags(&r->ev, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    free(r);
    return cuda_fail(e, "cudaEventCreate");
  }
  *out = r;
  return ZRT_OK;
}

static void req_free(nccl_req *r) {
  if (!r) return;
  if (r->ev) cudaEventDestroy(r->ev);
  if (r->bounce) r->bounce->busy = 0;
  free(r);
}

/* A free pinned bounce of at least bytes for request r (a new one when
 * every bounce is busy or too small; cudaHostAlloc does not synchronise). */
static zrt_status bounce_take(nccl_ctx *n, nccl_req *r, size_t bytes) {
  for (nccl_bounce *b = n->bounces; b; b = b->next)
    if (!b->busy && b->bytes >= bytes) {
      b->busy = 1;
      r->bounce = b;
      return ZRT_OK;
    }
  nccl_bounce *b = calloc(1, sizeof *b);
  if (!b) return zrt_error(ZRT_ERR_OOM, "NCCL comm: out of host memory for a bounce buffer");
  cudaError_t e = cudaHostAlloc((void **)&b->p, bytes, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    free(b);
    return cuda_fail(e, "cudaHostAlloc (pinned bounce for host buffers)");
  }
  b->bytes = bytes;
  b->busy = 1;
  b->next = n->bounces;
  n->bounces = b;
  r->bounce = b;
  return ZRT_OK;
}

/* The request's event completed: its result reaches the caller's host
 * buffer now (never earlier: the stream wrote the bounce), then r goes. */
static zrt_status req_complete(nccl_req *r) {
  if (r->out_bytes) memcpy(r->out_dst, r->out_src, r->out_bytes);
  req_free(r);
  return ZRT_OK;
}

/* One poll of a request: the event, then NCCL's asynchronous error, judged
 * by zrt_nccl_wait_decide against the time since t0. An error aborts here
 * (returned: zrt_comm_poll stops); done and timeout end the poll with flag
 * set and the verdict in v. */
typedef struct wait_poll {
  nccl_req *r;
  double t0, timeout_s;
  zrt_nccl_wait_verdict v;
} wait_poll;

static zrt_status poll_once(void *arg, int *flag) {
  wait_poll *w = arg;
  nccl_ctx *n = w->r->n;
  cudaError_t e = cudaEventQuery(w->r->ev);
  int ev = e == cudaSuccess         ? ZRT_NCCL_EV_DONE
           : e == cudaErrorNotReady ? ZRT_NCCL_EV_NOT_READY
                                    : ZRT_NCCL_EV_ERROR;
  /* not an error, but the runtime keeps it as this thread's last error:
   * cleared, or the thread's next launch check (cudaGetLastError) fails */
  if (ev == ZRT_NCCL_EV_NOT_READY && cudaPeekAtLastError() == cudaErrorNotReady)
    (void)cudaGetLastError();
  ncclResult_t async_err = ncclSuccess;
  if (ev == ZRT_NCCL_EV_NOT_READY && ncclCommGetAsyncError(n->nc, &async_err) != ncclSuccess)
    async_err = ncclSuccess; /* no verdict from a failed query; the event and the clock decide */
  int failed = async_err != ncclSuccess && async_err != ncclInProgress;
  w->v = zrt_nccl_wait_decide(ev, failed, zrt_now_s() - w->t0, w->timeout_s);
  *flag = w->v != ZRT_NCCL_WAIT_PENDING;
  if (w->v != ZRT_NCCL_WAIT_ABORT_ERROR) return ZRT_OK;
  char what[160];
  snprintf(what, sizeof what, "%s #%llu (asynchronous error)",
           w->r->base.op ? w->r->base.op : "collective", (unsigned long long)w->r->base.seq);
  zrt_status st =
      ev == ZRT_NCCL_EV_ERROR ? cuda_fail(e, "cudaEventQuery") : nccl_fail(async_err, what);
  abort_comm(n, zrt_last_error());
  return st;
}

static zrt_status nccl_wait(void *ctx, zrt_comm_req *req, double timeout_s) {
  nccl_ctx *n = ctx;
  nccl_req *r = (nccl_req *)req;
  zrt_status st = ZRT_OK;
  if (n->aborted) {
    req_free(r);
    return check_live(n);
  }
  wait_poll w = {r, zrt_now_s(), timeout_s, ZRT_NCCL_WAIT_PENDING};
  if (zrt_comm_poll(poll_once, &w, 0, &st) < 0) { /* the verdict keeps the time */
    req_free(r);
    return st;
  }
  if (w.v == ZRT_NCCL_WAIT_ABORT_TIMEOUT) {
    /* The kernel may spin forever waiting for a peer; only an abort frees
     * the device. The request stays valid per comm_impl.h, but every later
     * wait on it reports the abort. */
    char why[160];
    snprintf(why, sizeof why, "%s #%llu did not complete within %gs",
             r->base.op ? r->base.op : "a collective", (unsigned long long)r->base.seq, timeout_s);
    abort_comm(n, why);
    req->timed_out = 1;
    return zrt_error(ZRT_ERR_COMM,
                     "NCCL comm: %s; the communicator was aborted (ncclCommAbort): another rank is "
                     "behind or dead, or raise comm_timeout_s",
                     why);
  }
  return req_complete(r);
}

static zrt_status nccl_test(void *ctx, zrt_comm_req *req, int *done) {
  nccl_ctx *n = ctx;
  nccl_req *r = (nccl_req *)req;
  *done = 0;
  if (n->aborted) {
    *done = 1;
    req_free(r);
    return check_live(n);
  }
  wait_poll w = {r, zrt_now_s(), 0, ZRT_NCCL_WAIT_PENDING}; /* a test never times out */
  int flag = 0;
  zrt_status st = poll_once(&w, &flag);
  if (st == ZRT_OK && w.v == ZRT_NCCL_WAIT_PENDING) return ZRT_OK;
  *done = 1;
  if (st != ZRT_OK) {
    req_free(r);
    return st;
  }
  return req_complete(r);
}

/* Orders stream s after the request's event (cudaStreamWaitEvent through
 * the backend, whose NULL stream is its own): no host wait; the request stays
 * valid, and comm.c completes it later with nccl_test (or nccl_wait at its
 * destroy), which frees the event and the bounce. A request whose result goes
 * to the caller's host buffer (out_bytes: copied out of the pinned bounce by
 * the host once the event fired, req_complete) cannot be ordered on a
 * stream: *ordered = 0, and comm.c waits on it on the host. */
static zrt_status nccl_wait_on(void *ctx, zrt_comm_req *req, zrt_stream s, int *ordered) {
  nccl_ctx *n = ctx;
  nccl_req *r = (nccl_req *)req;
  *ordered = 0;
  if (n->aborted) {
    req_free(r);
    return check_live(n);
  }
  if (r->out_bytes) return ZRT_OK;
  zrt_status st = zrt_backend_stream_wait_event(n->backend, s, (zrt_event)r->ev);
  if (st != ZRT_OK) {
    abort_comm(n, zrt_last_error());
    req_free(r);
    return st;
  }
  *ordered = 1;
  return ZRT_OK;
}

/* Records the completion event after the enqueued work and hands the
 * request out, or waits now for a blocking call of the iface slot. */
static zrt_status issued(nccl_ctx *n, nccl_req *r, zrt_comm_req **req) {
  zrt_status st = ZRT_OK;
  CUDA_TRY_GOTO(n, cudaEventRecord(r->ev, n->stream), "cudaEventRecord", st, fail);
  if (req) {
    *req = &r->base;
    return ZRT_OK;
  }
  return nccl_wait(n, &r->base, n->c ? n->c->timeout_s : 0);
fail:
  req_free(r);
  return st;
}

/* Inputs produced by earlier backend work on any of its streams must be
 * complete before the comm's stream reads them: join, no host wait. */
static zrt_status prepare(nccl_ctx *n, nccl_req **r) {
  ZRT_CHECK(check_live(n));
  ZRT_CHECK(zrt_backend_stream_join(n->backend, n->zs));
  return req_new(n, r);
}

/* The kind of memory p is (nccl_rules.h). */
static zrt_status ptr_kind(nccl_ctx *n, const void *p, zrt_nccl_ptr *out) {
  struct cudaPointerAttributes a;
  memset(&a, 0, sizeof a);
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return cuda_fail(e, "cudaPointerGetAttributes");
  }
  *out = zrt_nccl_ptr_kind((int)a.type, a.device, n->backend->device_id);
  return ZRT_OK;
}

/* Scratch of at least bytes (see the header: grown, never shrunk). */
static zrt_status scratch_get(nccl_ctx *n, size_t bytes, char **out) {
  *out = NULL;
  if (!bytes) return ZRT_OK;
  if (n->scratch_bytes < bytes) {
    void *fresh = NULL;
    ZRT_CHECK(zrt_backend_alloc(n->backend, bytes, ZRT_MEM_COMM, &fresh));
    zrt_backend_free(n->backend, n->scratch); /* ordered after the streams by the pool */
    n->scratch = fresh;
    n->scratch_bytes = bytes;
  }
  *out = n->scratch;
  return ZRT_OK;
}

/* Plans and queues the staging of a collective on the comm's stream: on
 * return *s / *d are what NCCL reads / writes. Host bytes go through r's
 * pinned bounce (nccl_rules.h), so every copy queued here is asynchronous. */
typedef struct staged {
  zrt_nccl_stage plan;
  char *scratch;
  void *user_recv;
  size_t recv_bytes;
} staged;

static zrt_status stage_in(nccl_ctx *n, nccl_req *r, const char *what, const void **s, void **d,
                           ssize_t send_at, size_t send_bytes, size_t recv_bytes, staged *g) {
  zrt_nccl_ptr ks = ZRT_NCCL_PTR_DEVICE, kd = ZRT_NCCL_PTR_DEVICE;
  memset(g, 0, sizeof *g);
  if (send_bytes) ZRT_CHECK(ptr_kind(n, *s, &ks));
  if (recv_bytes) ZRT_CHECK(ptr_kind(n, *d, &kd));
  ZRT_CHECK(zrt_nccl_stage_plan(what, ks, kd, send_at, send_bytes, recv_bytes, &g->plan));
  ZRT_CHECK(scratch_get(n, g->plan.scratch_bytes, &g->scratch));
  if (g->plan.bounce_bytes) ZRT_CHECK(bounce_take(n, r, g->plan.bounce_bytes));
  char *hb = r->bounce ? r->bounce->p : NULL;
  g->user_recv = *d;
  g->recv_bytes = recv_bytes;
  if (g->plan.recv_in) {
    memcpy(hb + g->plan.recv_off, *d, recv_bytes);
    cudaError_t e = cudaMemcpyAsync(g->scratch + g->plan.recv_off, hb + g->plan.recv_off,
                                    recv_bytes, cudaMemcpyHostToDevice, n->stream);
    if (e != cudaSuccess) return cuda_fail(e, "cudaMemcpyAsync (host recv into scratch)");
  }
  if (g->plan.send_in) {
    memcpy(hb + g->plan.send_off, *s, send_bytes);
    cudaError_t e = cudaMemcpyAsync(g->scratch + g->plan.send_off, hb + g->plan.send_off,
                                    send_bytes, cudaMemcpyHostToDevice, n->stream);
    if (e != cudaSuccess) return cuda_fail(e, "cudaMemcpyAsync (host send into scratch)");
  }
  if (g->plan.recv_out) *d = g->scratch + g->plan.recv_off;
  if (g->plan.send_in || g->plan.recv_in) *s = g->scratch + g->plan.send_off;
  return ZRT_OK;
}

/* Queues scratch -> bounce after the collective; the host copy into the
 * caller's buffer waits for the request's event (req_complete). */
static zrt_status stage_out(nccl_ctx *n, nccl_req *r, const staged *g) {
  if (!g->plan.recv_out) return ZRT_OK;
  char *hb = r->bounce->p + g->plan.recv_off;
  cudaError_t e = cudaMemcpyAsync(hb, g->scratch + g->plan.recv_off, g->recv_bytes,
                                  cudaMemcpyDeviceToHost, n->stream);
  if (e != cudaSuccess) return cuda_fail(e, "cudaMemcpyAsync (scratch to the pinned bounce)");
  r->out_dst = g->user_recv;
  r->out_src = hb;
  r->out_bytes = g->recv_bytes;
  return ZRT_OK;
}

/* ---------------------------------------------------------- collectives */

static zrt_status nccl_all_reduce(void *ctx, const void *send, void *recv, size_t count,
                                  zrt_dtype dt, zrt_redop op, zrt_comm_req **req) {
  nccl_ctx *n = ctx;
  zrt_status st = ZRT_OK;
  nccl_req *r = NULL;
  staged g;
  size_t bytes = count * zrt_dtype_size(dt);
  ZRT_CHECK(prepare(n, &r));
  if (count) {
    ZRT_CHECK_GOTO(
        stage_in(n, r, "all_reduce", &send, &recv, send == recv ? 0 : -1, bytes, bytes, &g), st,
        fail_free);
    NCCL_TRY_GOTO(n, ncclAllReduce(send, recv, count, nccl_type(dt), nccl_op(op), n->nc, n->stream),
                  "ncclAllReduce", st, fail);
    ZRT_CHECK_GOTO(stage_out(n, r, &g), st, fail_abort);
  }
  return issued(n, r, req);
fail_abort:
  abort_comm(n, zrt_last_error());
fail:
fail_free:
  req_free(r);
  return st;
}

static zrt_status nccl_reduce_scatter(void *ctx, const void *send, void *recv, const size_t *counts,
                                      zrt_dtype dt, zrt_redop op, zrt_comm_req **req) {
  nccl_ctx *n = ctx;
  zrt_status st = ZRT_OK;
  nccl_req *r = NULL;
  size_t es = zrt_dtype_size(dt);
  zrt_nccl_rs_route rt;
  zrt_nccl_ptr ks = ZRT_NCCL_PTR_DEVICE, kd = ZRT_NCCL_PTR_DEVICE;
  ZRT_CHECK(prepare(n, &r));
  {
    size_t total = 0;
    for (int q = 0; q < n->nranks; q++) total += counts[q];
    if (total) ZRT_CHECK_GOTO(ptr_kind(n, send, &ks), st, fail_free);
    if (counts[n->rank]) ZRT_CHECK_GOTO(ptr_kind(n, recv, &kd), st, fail_free);
  }
  ZRT_CHECK_GOTO(zrt_nccl_rs_route_plan(n->nranks, n->rank, counts, es, ks, kd, &rt), st,
                 fail_free);
  if (!rt.maxc) return issued(n, r, req);
  ncclDataType_t T = nccl_type(dt);
  if (rt.even) {
    staged g;
    ZRT_CHECK_GOTO(
        stage_in(n, r, "reduce_scatter", &send, &recv, -1, rt.total * es, rt.mine * es, &g), st,
        fail_free);
    NCCL_TRY_GOTO(n, ncclReduceScatter(send, recv, rt.maxc, T, nccl_op(op), n->nc, n->stream),
                  "ncclReduceScatter", st, fail);
    ZRT_CHECK_GOTO(stage_out(n, r, &g), st, fail_abort);
    return issued(n, r, req);
  }
  /* Padded input in scratch: segment q at q*maxc (padding zeroed so the
   * kernel reads defined values; they reduce into padding only), then the
   * padded result, then this rank's part out (zrt_nccl_rs_route_plan). Host
   * buffers through the pinned bounce, so every copy is asynchronous. */
  {
    char *sc = NULL, *hb = NULL;
    const char *src = send;
    ZRT_CHECK_GOTO(scratch_get(n, rt.scratch_bytes, &sc), st, fail_free);
    if (rt.bounce_bytes) {
      ZRT_CHECK_GOTO(bounce_take(n, r, rt.bounce_bytes), st, fail_free);
      hb = r->bounce->p;
    }
    if (rt.host_send) {
      memcpy(hb + rt.send_bounce_off, send, rt.total * es);
      src = hb + rt.send_bounce_off;
    }
    CUDA_TRY_GOTO(n, cudaMemsetAsync(sc, 0, rt.pad_in_bytes, n->stream), "cudaMemsetAsync", st,
                  fail);
    for (int q = 0; q < n->nranks; q++)
      if (counts[q])
        CUDA_TRY_GOTO(n,
                      cudaMemcpyAsync(sc + (size_t)q * rt.maxc * es,
                                      src + zrt_nccl_segment_off(counts, q) * es, counts[q] * es,
                                      cudaMemcpyDefault, n->stream),
                      "cudaMemcpyAsync (padding reduce_scatter input)", st, fail);
    NCCL_TRY_GOTO(n,
                  ncclReduceScatter(sc, sc + rt.out_at, rt.maxc, T, nccl_op(op), n->nc, n->stream),
                  "ncclReduceScatter", st, fail);
    if (rt.mine) {
      char *to = rt.host_recv ? hb + rt.recv_bounce_off : (char *)recv;
      CUDA_TRY_GOTO(n,
                    cudaMemcpyAsync(to, sc + rt.out_at, rt.mine * es, cudaMemcpyDefault, n->stream),
                    "cudaMemcpyAsync (reduce_scatter result)", st, fail);
      if (rt.host_recv) {
        r->out_dst = recv;
        r->out_src = to;
        r->out_bytes = rt.mine * es;
      }
    }
  }
  return issued(n, r, req);
fail_abort:
  abort_comm(n, zrt_last_error());
fail:
fail_free:
  req_free(r);
  return st;
}

static zrt_status nccl_all_gather(void *ctx, const void *send, void *recv, const size_t *counts,
                                  zrt_dtype dt, zrt_comm_req **req) {
  nccl_ctx *n = ctx;
  zrt_status st = ZRT_OK;
  nccl_req *r = NULL;
  size_t es = zrt_dtype_size(dt);
  zrt_nccl_ag_route rt;
  zrt_nccl_ag_route_plan(n->nranks, n->rank, counts, es, send, recv, &rt);
  ZRT_CHECK(prepare(n, &r));
  if (!rt.total) return issued(n, r, req);
  ncclDataType_t T = nccl_type(dt);
  size_t mine = rt.mine, my_off = rt.my_off;
  staged g;
  ZRT_CHECK_GOTO(
      stage_in(n, r, "all_gather", &send, &recv, rt.send_at, mine * es, rt.total * es, &g), st,
      fail_free);
  if (rt.even) {
    NCCL_TRY_GOTO(n, ncclAllGather(send, recv, counts[0], T, n->nc, n->stream), "ncclAllGather", st,
                  fail);
  } else {
    char *own = (char *)recv + my_off * es;
    if (mine && (const char *)send != own)
      CUDA_TRY_GOTO(n, cudaMemcpyAsync(own, send, mine * es, cudaMemcpyDeviceToDevice, n->stream),
                    "cudaMemcpyAsync", st, fail);
    NCCL_TRY_GOTO(n, ncclGroupStart(), "ncclGroupStart", st, fail);
    size_t off = 0;
    ncclResult_t gr = ncclSuccess;
    for (int q = 0; q < n->nranks && gr == ncclSuccess; q++) {
      if (q != n->rank) {
        if (mine) gr = ncclSend(send, mine, T, q, n->nc, n->stream);
        if (gr == ncclSuccess && counts[q])
          gr = ncclRecv((char *)recv + off * es, counts[q], T, q, n->nc, n->stream);
      }
      off += counts[q];
    }
    ncclResult_t ge = ncclGroupEnd();
    NCCL_TRY_GOTO(n, gr != ncclSuccess ? gr : ge, "grouped ncclSend/ncclRecv (uneven all_gather)",
                  st, fail);
  }
  ZRT_CHECK_GOTO(stage_out(n, r, &g), st, fail_abort);
  return issued(n, r, req);
fail_abort:
  abort_comm(n, zrt_last_error());
fail:
fail_free:
  req_free(r);
  return st;
}

static zrt_status nccl_broadcast(void *ctx, void *buf, size_t count, zrt_dtype dt, int root,
                                 zrt_comm_req **req) {
  nccl_ctx *n = ctx;
  zrt_status st = ZRT_OK;
  nccl_req *r = NULL;
  size_t bytes = count * zrt_dtype_size(dt);
  ZRT_CHECK(prepare(n, &r));
  if (count) {
    const void *s = buf;
    void *d = buf;
    staged g;
    ZRT_CHECK_GOTO(stage_in(n, r, "broadcast", &s, &d, 0, bytes, bytes, &g), st, fail_free);
    NCCL_TRY_GOTO(n, ncclBroadcast(d, d, count, nccl_type(dt), root, n->nc, n->stream),
                  "ncclBroadcast", st, fail);
    ZRT_CHECK_GOTO(stage_out(n, r, &g), st, fail_abort);
  }
  return issued(n, r, req);
fail_abort:
  abort_comm(n, zrt_last_error());
fail:
fail_free:
  req_free(r);
  return st;
}

static zrt_status nccl_barrier(void *ctx) {
  nccl_ctx *n = ctx;
  ZRT_CHECK(check_live(n));
  return zrt_bootstrap_barrier(n->boot, n->c ? n->c->timeout_s : 0);
}

/* ------------------------------------------------------------ lifecycle */

static void nccl_destroy(void *ctx) {
  nccl_ctx *n = ctx;
  if (!n) return;
  /* the communicator's kernels are finished (destroy) or stopped (abort)
   * before the scratch and the stream go */
  if (n->nc && !n->aborted) ncclCommDestroy(n->nc); /* an abort already released it */
  if (n->zs) cudaStreamSynchronize(n->stream);
  zrt_backend_free(n->backend, n->scratch); /* ZRT_MEM_COMM is 0 again once the comm is gone */
  while (n->bounces) {
    nccl_bounce *b = n->bounces;
    n->bounces = b->next;
    cudaFreeHost(b->p);
    free(b);
  }
  if (n->zs) zrt_backend_stream_destroy(n->backend, n->zs);
  zrt_bootstrap_destroy(n->boot);
  free(n);
}

static const zrt_comm_iface nccl_iface = {
    .name = "nccl",
    .all_reduce = nccl_all_reduce,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .wait = nccl_wait,
    .test = nccl_test,
    .wait_on = nccl_wait_on,
    .destroy = nccl_destroy,
};

zrt_status zrt_comm_nccl_init(zrt_comm *c, zrt_backend *backend) {
  zrt_status st = ZRT_OK;
  if (!backend || backend->device_id < 0)
    return zrt_error(ZRT_ERR_CONFIG, "NCCL comm needs a CUDA backend (device buffers)");
  nccl_ctx *n = calloc(1, sizeof *n);
  if (!n) return zrt_error(ZRT_ERR_OOM, "NCCL comm: out of host memory");
  n->c = c;
  n->backend = backend;
  ZRT_CHECK_GOTO(zrt_bootstrap_mpi_create(&n->boot), st, fail);
  n->rank = n->boot->rank;
  n->nranks = n->boot->world;
  {
    cudaError_t e = cudaSetDevice(backend->device_id);
    if (e != cudaSuccess) {
      st = cuda_fail(e, "cudaSetDevice");
      goto fail;
    }
  }
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (n->rank == 0) {
    ncclResult_t nr = ncclGetUniqueId(&id);
    if (nr != ncclSuccess) {
      st = nccl_fail(nr, "ncclGetUniqueId");
      goto fail;
    }
  }
  ZRT_CHECK_GOTO(zrt_bootstrap_bcast(n->boot, &id, sizeof id, 0), st, fail);
  {
    ncclResult_t nr = ncclCommInitRank(&n->nc, n->nranks, id, n->rank);
    if (nr != ncclSuccess) {
      n->nc = NULL;
      st = nccl_fail(nr, "ncclCommInitRank");
      goto fail;
    }
  }
  ZRT_CHECK_GOTO(zrt_backend_stream_create(backend, &n->zs), st, fail);
  n->stream = (cudaStream_t)n->zs;
  c->iface = &nccl_iface;
  c->ctx = n;
  c->rank = n->rank;
  c->world = n->nranks;
  c->local_rank = n->boot->local_rank;
  c->local_world = n->boot->local_world;
  return ZRT_OK;
fail:
  nccl_destroy(n);
  return st;
}

void zrt_comm_nccl_probe_version(char *buf, size_t n) {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) {
    snprintf(buf, n, "built, version unknown (ncclGetVersion failed)");
    return;
  }
  /* NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9 (X*1000 + Y*100 + Z before) */
  if (v >= 10000)
    snprintf(buf, n, "%d.%d.%d", v / 10000, (v % 10000) / 100, v % 100);
  else
    snprintf(buf, n, "%d.%d.%d", v / 1000, (v % 1000) / 100, v % 100);
}
