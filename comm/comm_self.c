/*
 * comm_self.c — the world-size-1 comm: no MPI, every collective is a copy
 * (a reduction over one rank is the identity, so half types need no fp32
 * staging: the values pass through unchanged, bit for bit).
 *
 * Host memory (no backend, or cpu): the copy is a memmove before the
 * collective returns, and every request is complete when handed out.
 *
 * A device backend (comm.c passes one where the comm is not stream-ordered:
 * cuda, and the twin with ZRT_TWIN_HOST_FN=sync): the comm owns a backend
 * stream and runs each copy there as NCCL runs its kernels on its stream,
 * with no host wait. The stream first joins every stream of the backend
 * (zrt_backend_stream_join: the inputs' producers, wherever they ran), then
 * the device-to-device copy, then the request's event is recorded. wait is
 * a host wait on the event (event_synchronize, counted by the backend), test
 * queries it, wait_on makes the caller's stream wait for it (no host wait).
 * A collective that moves nothing (in place, zero bytes, broadcast) queues
 * nothing and its request has no event: wait and test complete it at once
 * (the host wrote host buffers itself; blocking in-place calls on host
 * buffers, the engine's statistics, cost no host wait), and wait_on orders
 * the caller's stream after the work queued so far on every stream (a join
 * then), so a reader on another stream finds the input's producers done, as
 * after a copy. The barrier is a no-op: there is no other rank, and no
 * comm's barrier completes collectives still in flight.
 * Invariants: a request's event is destroyed only when comm.c completes the
 * request (wait or test: a stream's wait on it has captured the record
 * already); the destroy drains the comm's stream before it goes.
 */
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"

typedef struct self_ctx {
  zrt_backend *backend; /* NULL or CPU: host memory */
  zrt_stream stream;    /* a device backend: the copies' stream (owned); else NULL */
} self_ctx;

typedef struct self_req {
  zrt_comm_req base;
  zrt_event ev; /* recorded after the copy; NULL: nothing was queued */
} self_req;

static int on_device(const self_ctx *s) { return s->backend && s->backend->device_id >= 0; }

static void req_free(self_ctx *s, self_req *r) {
  if (r->ev) zrt_backend_event_destroy(s->backend, r->ev);
  free(r);
}

static zrt_status self_wait(void *ctx, zrt_comm_req *req, double timeout_s);

/* dst = src (bytes), as a request (req NULL: complete on return, the iface's
 * blocking form). */
static zrt_status self_copy(self_ctx *s, void *dst, const void *src, size_t bytes,
                            zrt_comm_req **req) {
  zrt_status st = ZRT_OK;
  self_req *r = calloc(1, sizeof *r);
  if (!r) return zrt_error(ZRT_ERR_OOM, "self comm: out of host memory for a request");
  if (bytes && dst != src) {
    if (on_device(s)) {
      /* the copy reads what any stream queued so far wrote: join, no host wait */
      ZRT_CHECK_GOTO(zrt_backend_event_create(s->backend, &r->ev), st, fail);
      ZRT_CHECK_GOTO(zrt_backend_stream_join(s->backend, s->stream), st, fail);
      ZRT_CHECK_GOTO(zrt_backend_memcpy(s->backend, dst, src, bytes, ZRT_COPY_D2D, s->stream), st,
                     fail);
      ZRT_CHECK_GOTO(zrt_backend_event_record(s->backend, r->ev, s->stream), st, fail);
    } else {
      memmove(dst, src, bytes);
    }
  }
  if (!req) return self_wait(s, &r->base, 0);
  *req = &r->base;
  return ZRT_OK;
fail:
  /* a copy queued before a failed record still runs on the stream, which
   * the destroy drains before the buffers' owner could free them */
  req_free(s, r);
  return zrt_error_context(st, "self comm: ");
}

static zrt_status self_all_reduce(void *ctx, const void *send, void *recv, size_t count,
                                  zrt_dtype dt, zrt_redop op, zrt_comm_req **req) {
  (void)op;
  return self_copy(ctx, recv, send, count * zrt_dtype_size(dt), req);
}

static zrt_status self_reduce_scatter(void *ctx, const void *send, void *recv, const size_t *counts,
                                      zrt_dtype dt, zrt_redop op, zrt_comm_req **req) {
  (void)op;
  return self_copy(ctx, recv, send, counts[0] * zrt_dtype_size(dt), req);
}

static zrt_status self_all_gather(void *ctx, const void *send, void *recv, const size_t *counts,
                                  zrt_dtype dt, zrt_comm_req **req) {
  return self_copy(ctx, recv, send, counts[0] * zrt_dtype_size(dt), req);
}

static zrt_status self_broadcast(void *ctx, void *buf, size_t count, zrt_dtype dt, int root,
                                 zrt_comm_req **req) {
  (void)count, (void)dt;
  if (root != 0)
    return zrt_error(ZRT_ERR_INVALID_ARG, "self comm: broadcast root %d, only rank 0 exists", root);
  return self_copy(ctx, buf, buf, 0, req); /* the root's buffer is the result */
}

static zrt_status self_barrier(void *ctx) {
  (void)ctx;
  return ZRT_OK;
}

static zrt_status self_wait(void *ctx, zrt_comm_req *req, double timeout_s) {
  (void)timeout_s; /* one rank: only the device's own work can be behind */
  self_ctx *s = ctx;
  self_req *r = (self_req *)req;
  zrt_status st = r->ev ? zrt_backend_event_synchronize(s->backend, r->ev) : ZRT_OK;
  req_free(s, r);
  return st;
}

static zrt_status self_test(void *ctx, zrt_comm_req *req, int *done) {
  self_ctx *s = ctx;
  self_req *r = (self_req *)req;
  *done = 0;
  zrt_status st = r->ev ? zrt_backend_event_query(s->backend, r->ev, done) : ZRT_OK;
  if (!r->ev) *done = 1;
  if (st != ZRT_OK) *done = 1; /* failed: complete, and gone */
  if (*done) req_free(s, r);
  return st;
}

static zrt_status self_wait_on(void *ctx, zrt_comm_req *req, zrt_stream stream, int *ordered) {
  self_ctx *s = ctx;
  self_req *r = (self_req *)req;
  *ordered = 0;
  if (!on_device(s)) return ZRT_OK; /* complete already: comm.c's wait frees it */
  /* nothing queued (in place): the reader still comes after the input's
   * producers on every stream, as after a copy */
  zrt_status st = r->ev ? zrt_backend_stream_wait_event(s->backend, stream, r->ev)
                        : zrt_backend_stream_join(s->backend, stream);
  if (st != ZRT_OK) {
    req_free(s, r);
    return st;
  }
  *ordered = 1;
  return ZRT_OK;
}

static void self_destroy(void *ctx) {
  self_ctx *s = ctx;
  if (!s) return;
  if (s->stream) zrt_backend_stream_destroy(s->backend, s->stream); /* drains it first */
  free(s);
}

static const zrt_comm_iface self_iface = {
    .name = "self",
    .all_reduce = self_all_reduce,
    .reduce_scatter = self_reduce_scatter,
    .all_gather = self_all_gather,
    .broadcast = self_broadcast,
    .barrier = self_barrier,
    .wait = self_wait,
    .test = self_test,
    .wait_on = self_wait_on,
    .destroy = self_destroy,
};

zrt_status zrt_comm_self_init(zrt_comm *c, zrt_backend *backend) {
  self_ctx *s = calloc(1, sizeof *s);
  if (!s) return zrt_error(ZRT_ERR_OOM, "self comm: out of host memory");
  s->backend = backend;
  if (on_device(s)) {
    zrt_status st = zrt_backend_stream_create(backend, &s->stream);
    if (st != ZRT_OK) {
      free(s);
      return zrt_error_context(st, "self comm: its copy stream: ");
    }
  }
  c->iface = &self_iface;
  c->ctx = s;
  c->rank = 0;
  c->world = 1;
  c->local_rank = 0;
  c->local_world = 1;
  return ZRT_OK;
}
