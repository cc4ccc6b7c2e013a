/*
 * bucket.c — the gradient buckets (bucket.h). Invariant: a slot is
 * `active` from the issue of its collective until its data has been
 * accumulated into its destination (device accumulators) or handed to the
 * host thread (host accumulators); the source gradients are never read
 * after zrt_buckets_reduce returns.
 *
 * Host thread: a FIFO of handed-over slots. For each it copies the slot's
 * reduced piece device-to-host into the slot's host staging (clearing the
 * slot's `copying` frees its device staging for the next collective) and adds it into
 * the host accumulator. One thread, FIFO: a slot's host staging is reused
 * only by a later job of the same slot, which starts after this one ended.
 *
 * Where host functions are stream ops (cuda, the twin: b->async) the thread
 * waits for nothing: it queues the copy on the host stream, records the
 * slot's `copied` event and queues the addition as a host function behind
 * it; the next bucket packed into that slot's device staging waits for
 * `copied` on the backend's stream, and zrt_buckets_drain orders the
 * backend's stream after the host stream (`hdone`), so whatever reads the
 * host accumulators in stream order (the statistics pass, the offload
 * pipe) reads them complete. The host stream is FIFO, so a slot's host
 * staging is still reused only after its previous addition ran.
 */
#include "bucket.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu_optim.h"
#include "hostpool.h"
#include "layout.h"

typedef struct zrt_bucket_slot {
  zrt_comm_req *req; /* NULL when idle or complete */
  void *send;        /* staging, comm dtype, world * chunk elements */
  void *recv;        /* staging, comm dtype, chunk elements */
  void *dst;         /* accumulation target: fp32, or hacc_dtype for host accumulators */
  size_t n;          /* elements to accumulate into dst */
  int all_reduce;    /* send is reduced in place, n elements */
  int active;        /* issued and not yet accumulated into dst / handed over */
  int host;          /* dst is host memory: the host thread accumulates it */
  int copying;       /* handed to the host thread, device staging not yet copied */
  void *hstage;      /* host staging of the comm dtype (host accumulators) */
  int hreg;          /* hstage registered by the buckets (an unpinned host pool) */
  zrt_event copied;  /* async: recorded on the host stream after the slot's copy */
} zrt_bucket_slot;

struct zrt_buckets {
  zrt_backend *be;
  zrt_comm *comm;
  zrt_dtype dtype, comm_dtype;
  zrt_dtype hacc_dtype; /* host accumulators' dtype (fp32, or bf16 gradient partitions) */
  int64_t chunk;
  zrt_bucket_slot slots[2];
  int next; /* the slot the next bucket takes */

  /* host accumulators (zrt_buckets_set_host) */
  zrt_pool *hpool;
  int64_t hstage_elems;
  zrt_stream hstream;
  int async;       /* host functions are stream ops: no host wait per bucket */
  zrt_event hdone; /* async: the host stream's work up to the last drain */
  pthread_t thr;
  int thr_ok, quit;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* handed-over buckets, oldest first (a ring): a slot is at most twice in
   * it (one job accumulating, the next copying), so 4 entries suffice */
  struct zrt_bucket_job {
    zrt_bucket_slot *slot;
    const void *src; /* the slot's device staging */
    void *dst;
    size_t n;
  } queue[4];
  int qhead, qlen;
  zrt_status hst; /* first host-side failure, reported once */
  char herr[1024];
};

/* The addition of one copied bucket into its host accumulator, as a host
 * function on the host stream (async mode). */
typedef struct zrt_bucket_add {
  void *dst;
  zrt_dtype dst_dt;
  const void *src;
  zrt_dtype src_dt;
  size_t n;
} zrt_bucket_add;

static zrt_status zrt_buckets_add_fn(void *arg) {
  const zrt_bucket_add *a = arg;
  zrt_cpu_grad_accumulate_to(a->dst, a->dst_dt, a->src, a->src_dt, a->n);
  return ZRT_OK;
}

static void *zrt_buckets_thread(void *arg) {
  zrt_buckets *b = arg;
  size_t cs = zrt_dtype_size(b->comm_dtype);
  pthread_mutex_lock(&b->mu);
  for (;;) {
    while (!b->qlen && !b->quit) pthread_cond_wait(&b->cv, &b->mu);
    if (!b->qlen) break; /* quit with nothing queued */
    struct zrt_bucket_job j = b->queue[b->qhead];
    void *hstage = j.slot->hstage;
    pthread_mutex_unlock(&b->mu);
    zrt_status st = zrt_backend_memcpy(b->be, hstage, j.src, j.n * cs, ZRT_COPY_D2H, b->hstream);
    if (b->async) {
      /* the next bucket in this slot waits for `copied` on the stream; the
       * addition runs behind the copy on the host stream */
      if (st == ZRT_OK) st = zrt_backend_event_record(b->be, j.slot->copied, b->hstream);
      zrt_bucket_add add = {j.dst, b->hacc_dtype, hstage, b->comm_dtype, j.n};
      if (st == ZRT_OK)
        st = zrt_backend_enqueue_host_named(b->be, zrt_buckets_add_fn, &add, sizeof add, b->hstream,
                                            "gradient bucket to host accumulator");
    } else if (st == ZRT_OK) {
      st = zrt_backend_synchronize(b->be, b->hstream);
    }
    pthread_mutex_lock(&b->mu);
    j.slot->copying = 0; /* the device staging may take the next collective */
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    if (st == ZRT_OK && !b->async)
      zrt_cpu_grad_accumulate_to(j.dst, b->hacc_dtype, hstage, b->comm_dtype, j.n);
    pthread_mutex_lock(&b->mu);
    if (st != ZRT_OK && b->hst == ZRT_OK) {
      b->hst = st;
      snprintf(b->herr, sizeof b->herr, "%s", zrt_last_error());
    }
    b->qhead = (b->qhead + 1) % 4;
    b->qlen--;
    pthread_cond_broadcast(&b->cv);
  }
  pthread_mutex_unlock(&b->mu);
  return NULL;
}

/* The host thread's first failure, once (called with b->mu held; unlocks). */
static zrt_status zrt_buckets_host_status_unlock(zrt_buckets *b) {
  zrt_status st = b->hst;
  char msg[sizeof b->herr];
  if (st != ZRT_OK) {
    b->hst = ZRT_OK;
    snprintf(msg, sizeof msg, "%s", b->herr);
  }
  pthread_mutex_unlock(&b->mu);
  if (st == ZRT_OK) return ZRT_OK;
  return zrt_error(st, "gradient buckets, host accumulation: %s", msg);
}

/* Waits until slot s's device staging is free (copied to the host). */
static zrt_status zrt_buckets_wait_copied(zrt_buckets *b, zrt_bucket_slot *s) {
  if (!b->thr_ok) return ZRT_OK;
  pthread_mutex_lock(&b->mu);
  while (s->copying) pthread_cond_wait(&b->cv, &b->mu);
  return zrt_buckets_host_status_unlock(b);
}

/* Waits until the host thread has accumulated everything handed over
 * (async: queued it; the backend's stream then waits for the host stream). */
static zrt_status zrt_buckets_wait_host(zrt_buckets *b) {
  if (!b->thr_ok) return ZRT_OK;
  pthread_mutex_lock(&b->mu);
  while (b->qlen) pthread_cond_wait(&b->cv, &b->mu);
  ZRT_CHECK(zrt_buckets_host_status_unlock(b));
  if (!b->async) return ZRT_OK;
  ZRT_CHECK(zrt_backend_event_record(b->be, b->hdone, b->hstream));
  return zrt_backend_stream_wait_event(b->be, NULL, b->hdone);
}

zrt_status zrt_buckets_create(zrt_backend *be, zrt_comm *comm, zrt_dtype dtype,
                              zrt_dtype comm_dtype, int64_t chunk, zrt_buckets **out) {
  *out = NULL;
  if (!be || !comm || chunk < 1)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_buckets_create: NULL backend/comm or chunk %lld",
                     (long long)chunk);
  zrt_buckets *b = calloc(1, sizeof *b);
  if (!b) return zrt_error(ZRT_ERR_OOM, "gradient buckets: out of host memory");
  b->be = be;
  b->comm = comm;
  b->dtype = dtype;
  b->comm_dtype = comm_dtype;
  b->hacc_dtype = ZRT_F32;
  b->chunk = chunk;
  size_t cs = zrt_dtype_size(comm_dtype);
  zrt_status st = ZRT_OK;
  for (int i = 0; i < 2 && st == ZRT_OK; i++) {
    zrt_bucket_slot *s = &b->slots[i];
    /* the comm's buffers (shared memory on the shm comm: its collectives
     * read them in place), counted in the backend pool */
    st = zrt_comm_buf_alloc(comm, be, (size_t)chunk * (size_t)comm->world * cs, ZRT_MEM_COMM,
                            &s->send);
    if (st == ZRT_OK) st = zrt_comm_buf_alloc(comm, be, (size_t)chunk * cs, ZRT_MEM_COMM, &s->recv);
  }
  if (st != ZRT_OK) {
    zrt_buckets_destroy(b);
    return st;
  }
  *out = b;
  return ZRT_OK;
}

void zrt_buckets_destroy(zrt_buckets *b) {
  if (!b) return;
  for (int i = 0; i < 2; i++) {
    zrt_bucket_slot *s = &b->slots[i];
    if (s->active && s->req) zrt_comm_wait(b->comm, s->req);
  }
  if (b->thr_ok) {
    pthread_mutex_lock(&b->mu);
    b->quit = 1; /* the thread finishes what it was handed, then leaves */
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->thr, NULL);
  }
  /* async: copies and additions queued on the host stream may still read
   * the staging; the stream's destroy waits for them (backend.h) before
   * anything they touch goes (the additions cannot fail) */
  if (b->hstream) zrt_backend_stream_destroy(b->be, b->hstream);
  for (int i = 0; i < 2; i++) {
    zrt_bucket_slot *s = &b->slots[i];
    zrt_comm_buf_free(b->comm, b->be, s->send);
    zrt_comm_buf_free(b->comm, b->be, s->recv);
    if (b->hpool) zrt_hostpool_stage_free(b->hpool, b->be, s->hstage, s->hreg);
    zrt_backend_event_destroy(b->be, s->copied);
  }
  zrt_backend_event_destroy(b->be, b->hdone);
  if (b->thr_ok) {
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
  }
  free(b);
}

int64_t zrt_buckets_chunk(const zrt_buckets *b) { return b->chunk; }

zrt_status zrt_buckets_set_host(zrt_buckets *b, zrt_pool *host, int pinned, int64_t stage_elems) {
  if (!b || !host || stage_elems < b->chunk)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_buckets_set_host: need buckets, a host pool and at least one chunk "
                     "(%lld) of staging (got %lld)",
                     b ? (long long)b->chunk : 0LL, (long long)stage_elems);
  if (b->hpool)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_buckets_set_host: host staging already set");
  b->hpool = host;
  b->hstage_elems = stage_elems;
  size_t bytes = (size_t)zrt_layout_host_stage_bytes(stage_elems, zrt_dtype_size(b->comm_dtype));
  b->async = zrt_backend_host_fn_async(b->be);
  /* async: the staging registered where the pool is not pinned, so the copy
   * into it is queued too and the host thread waits for nothing */
  for (int i = 0; i < 2; i++)
    ZRT_CHECK(zrt_hostpool_stage_alloc(host, b->be, pinned || !b->async, bytes, ZRT_MEM_COMM,
                                       &b->slots[i].hstage, &b->slots[i].hreg));
  ZRT_CHECK(zrt_backend_stream_create(b->be, &b->hstream));
  if (b->async) {
    ZRT_CHECK(zrt_backend_event_create(b->be, &b->hdone));
    for (int i = 0; i < 2; i++) ZRT_CHECK(zrt_backend_event_create(b->be, &b->slots[i].copied));
  }
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, NULL);
  if (pthread_create(&b->thr, NULL, zrt_buckets_thread, b) != 0) {
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    return zrt_error(ZRT_ERR_INTERNAL, "gradient buckets: cannot start the host thread");
  }
  b->thr_ok = 1;
  return ZRT_OK;
}

zrt_status zrt_buckets_set_host_acc_dtype(zrt_buckets *b, zrt_dtype dt) {
  if (!b || (dt != ZRT_F32 && dt != ZRT_BF16))
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_buckets_set_host_acc_dtype: need buckets and fp32 or bf16 (got %d)",
                     (int)dt);
  b->hacc_dtype = dt;
  return ZRT_OK;
}

static zrt_status zrt_buckets_finish(zrt_buckets *b, zrt_bucket_slot *s) {
  if (!s->active) return ZRT_OK;
  zrt_comm_req *req = s->req;
  s->req = NULL;
  s->active = 0;
  /* the stream that reads the reduced bucket waits for it (a stream wait
   * on a stream-ordered comm; the host waits elsewhere) */
  ZRT_CHECK(zrt_comm_wait_on(b->comm, req, s->host ? b->hstream : NULL));
  if (s->host) {
    pthread_mutex_lock(&b->mu);
    s->copying = 1;
    b->queue[(b->qhead + b->qlen++) % 4] = (struct zrt_bucket_job){
        .slot = s, .src = s->all_reduce ? s->send : s->recv, .dst = s->dst, .n = s->n};
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return ZRT_OK;
  }
  return zrt_backend_accumulate(b->be, s->dst, s->all_reduce ? s->send : s->recv, b->comm_dtype,
                                1.0f, s->n, NULL);
}

zrt_status zrt_buckets_drain(zrt_buckets *b) {
  /* oldest first: the slot that would be reused next */
  for (int i = 0; i < 2; i++) ZRT_CHECK(zrt_buckets_finish(b, &b->slots[(b->next + i) & 1]));
  return zrt_buckets_wait_host(b);
}

/* The next slot, once its previous bucket has been accumulated (device) or
 * copied to the host (host accumulators). */
static zrt_status zrt_buckets_take(zrt_buckets *b, zrt_bucket_slot **out) {
  zrt_bucket_slot *s = &b->slots[b->next];
  b->next ^= 1;
  ZRT_CHECK(zrt_buckets_finish(b, s));
  ZRT_CHECK(zrt_buckets_wait_copied(b, s));
  /* async: the copy out of this staging was queued, not done; the packing
   * on the backend's stream waits for it (an event never recorded: no wait) */
  if (b->async) ZRT_CHECK(zrt_backend_stream_wait_event(b->be, NULL, s->copied));
  *out = s;
  return ZRT_OK;
}

zrt_status zrt_buckets_reduce(zrt_buckets *b, const void *grad16, int64_t padded, int64_t part,
                              float *acc, int acc_host, int all_reduce, int async) {
  if (acc_host &&
      (!b->thr_ok || (all_reduce ? b->chunk * b->comm->world : b->chunk) > b->hstage_elems))
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_buckets_reduce: a host accumulator needs zrt_buckets_set_host with "
                     "staging for one %s bucket",
                     all_reduce ? "all-reduce" : "reduce-scatter");
  size_t ws = zrt_dtype_size(b->dtype), cs = zrt_dtype_size(b->comm_dtype);
  size_t as = acc_host ? zrt_dtype_size(b->hacc_dtype) : 4; /* accumulator element bytes */
  const char *g = grad16;
  int world = b->comm->world;
  zrt_bucket_slot *s;
  if (all_reduce) {
    int64_t step = b->chunk * world;
    for (int64_t c0 = 0; c0 < padded; c0 += step) {
      int64_t n = ZRT_MIN(step, padded - c0);
      ZRT_CHECK(zrt_buckets_take(b, &s));
      ZRT_CHECK(zrt_backend_convert(b->be, s->send, b->comm_dtype, g + (size_t)c0 * ws, b->dtype,
                                    (size_t)n, NULL));
      s->dst = (char *)acc + (size_t)c0 * as;
      s->n = (size_t)n;
      s->all_reduce = 1;
      s->host = acc_host;
      s->active = 1;
      ZRT_CHECK(zrt_comm_all_reduce(b->comm, s->send, s->send, (size_t)n, b->comm_dtype,
                                    ZRT_RED_SUM, &s->req));
    }
  } else {
    for (int64_t c0 = 0; c0 < part; c0 += b->chunk) {
      int64_t n = ZRT_MIN(b->chunk, part - c0);
      ZRT_CHECK(zrt_buckets_take(b, &s));
      for (int r = 0; r < world; r++)
        ZRT_CHECK(zrt_backend_convert(b->be, (char *)s->send + (size_t)r * n * cs, b->comm_dtype,
                                      g + ((size_t)r * part + c0) * ws, b->dtype, (size_t)n, NULL));
      s->dst = (char *)acc + (size_t)c0 * as;
      s->n = (size_t)n;
      s->all_reduce = 0;
      s->host = acc_host;
      s->active = 1;
      ZRT_CHECK(zrt_comm_reduce_scatter_even(b->comm, s->send, s->recv, (size_t)n, b->comm_dtype,
                                             ZRT_RED_SUM, &s->req));
    }
  }
  if (!async) ZRT_CHECK(zrt_buckets_drain(b));
  return ZRT_OK;
}
