/*
 * param_swap.c — the parameter swapper (param_swap.h): chunked
 * asynchronous shard reads through staging slots in queue order, the
 * write-back of the next generation from the masters, blocking reads for
 * checkpoints.
 */
#include "param_swap.h"

#include <stdlib.h>
#include <string.h>

#include "dtype.h"

typedef struct zrt_pswap_mod {
  int64_t file_off, len; /* 16-bit elements */
  int queued;
  int64_t next, nchunks, left; /* chunks submitted so far / in all / not yet copied */
  void *dst;
} zrt_pswap_mod;

struct zrt_pswap {
  zrt_backend *be;
  zrt_pool *host_pool;
  zrt_dtype dtype;
  zrt_nvme *nvme;
  void *stage_raw;
  float *stage; /* nslots slots of stage_elems fp32 elements, 4096-aligned */
  int64_t stage_elems;
  int nslots;
  int *slot_mod; /* module whose chunk slot s holds (-1: free) */
  /* slot_ev[s]: recorded after the H2D copy out of slot s (CUDA; NULL events
   * on the CPU backend); the host waits on it before slot s is read into or
   * rewritten, so an asynchronous copy never reads a reused slot */
  zrt_event *slot_ev;
  int64_t *slot_chunk; /* which chunk */
  int *q;              /* queued modules, head first */
  int qn;
  int dirty; /* the current generation does not hold round(master) */
  int nmodules;
  zrt_pswap_mod *mods;
  int64_t total; /* 16-bit elements of the file */
  zrt_pswap_source source;
  void *source_arg;
};

zrt_status zrt_pswap_create(zrt_backend *be, zrt_pool *host_pool, const zrt_pswap_opts *o,
                            zrt_pswap **out) {
  *out = NULL;
  zrt_pswap *p = calloc(1, sizeof *p);
  if (!p) return zrt_error(ZRT_ERR_OOM, "param swap: out of host memory");
  zrt_status st = ZRT_OK;
  p->be = be;
  p->host_pool = host_pool;
  p->dtype = o->dtype;
  p->stage_elems = o->stage_elems;
  p->nslots = o->nslots > 0 ? o->nslots : 1;
  p->nmodules = o->nmodules;
  p->source = o->source;
  p->source_arg = o->source_arg;
  p->slot_mod = malloc((size_t)p->nslots * sizeof(int));
  p->slot_chunk = calloc((size_t)p->nslots, sizeof(int64_t));
  p->slot_ev = calloc((size_t)p->nslots, sizeof(zrt_event));
  p->q = malloc((size_t)ZRT_MAX(o->nmodules, 1) * sizeof(int));
  p->mods = calloc((size_t)ZRT_MAX(o->nmodules, 1), sizeof *p->mods);
  if (!p->slot_mod || !p->slot_chunk || !p->slot_ev || !p->q || !p->mods) {
    st = zrt_error(ZRT_ERR_OOM, "param swap: out of host memory");
    goto fail;
  }
  for (int k = 0; k < p->nslots; k++) p->slot_mod[k] = -1;
  for (int k = 0; k < p->nslots; k++)
    ZRT_CHECK_GOTO(zrt_backend_event_create(be, &p->slot_ev[k]), st, fail);
  for (int m = 0; m < o->nmodules; m++) {
    p->mods[m].file_off = o->file_off[m];
    p->mods[m].len = o->len[m];
    p->total = ZRT_MAX(p->total, o->file_off[m] + o->len[m]);
  }
  /* the slots back to back: stage_elems is a multiple of 2048, so every
   * slot starts 4096-aligned */
  ZRT_CHECK_GOTO(zrt_pool_alloc(host_pool,
                                (size_t)p->nslots * (size_t)p->stage_elems * 4 + ZRT_NVME_ALIGN,
                                ZRT_MEM_PARAMS16, &p->stage_raw),
                 st, fail);
  p->stage = (float *)ZRT_ALIGN_UP((uintptr_t)p->stage_raw, (uintptr_t)ZRT_NVME_ALIGN);
  /* total is a multiple of 32 elements: whole floats of 16-bit data */
  ZRT_CHECK_GOTO(zrt_nvme_create_named(o->nvme_path, o->prefix,
                                       (size_t)p->total * zrt_dtype_size(p->dtype) / 4, 1,
                                       p->nslots, &p->nvme),
                 st, fail);
  *out = p;
  return ZRT_OK;
fail:
  zrt_pswap_destroy(p);
  return st;
}

static zrt_status zrt_pswap_slot_idle(zrt_pswap *p, int s);

void zrt_pswap_destroy(zrt_pswap *p) {
  if (!p) return;
  /* a slot's copy to the device may still be in flight (from registered
   * staging the copy is asynchronous): the staging goes after each slot's
   * last copy (found by the twin with ZRT_TWIN_HOST_FN=sync, the blocking
   * shapes, under load: the copy ran after the pool had unregistered the
   * staging) */
  if (p->slot_ev)
    for (int k = 0; k < p->nslots; k++)
      if (zrt_pswap_slot_idle(p, k) != ZRT_OK)
        zrt_log(ZRT_LOG_WARN, "param swap: a copy to the device failed before teardown: %s",
                zrt_last_error());
  zrt_nvme_destroy(p->nvme);
  if (p->stage_raw) zrt_pool_free(p->host_pool, p->stage_raw);
  if (p->slot_ev)
    for (int k = 0; k < p->nslots; k++) zrt_backend_event_destroy(p->be, p->slot_ev[k]);
  free(p->slot_ev);
  free(p->slot_mod);
  free(p->slot_chunk);
  free(p->q);
  free(p->mods);
  free(p);
}

/* The host waits until no copy out of slot s is still in flight. */
static zrt_status zrt_pswap_slot_idle(zrt_pswap *p, int s) {
  return zrt_backend_event_synchronize(p->be, p->slot_ev[s]);
}

zrt_status zrt_pswap_write(zrt_pswap *p) {
  if (p->qn > 0)
    return zrt_error(ZRT_ERR_INTERNAL, "param swap: write-back with %d shard reads queued", p->qn);
  size_t ws = zrt_dtype_size(p->dtype);
  int64_t b = p->stage_elems;
  p->dirty = 1;
  /* the write-back rewrites slot 0 on the host */
  ZRT_CHECK(zrt_pswap_slot_idle(p, 0));
  /* b is a multiple of 2048: every chunk starts a whole 4096-byte block of
   * the 16-bit file, so each is one aligned tile write */
  for (int64_t e0 = 0; e0 < p->total; e0 += b) {
    int64_t n = ZRT_MIN(b, p->total - e0);
    ZRT_CHECK(p->source(p->source_arg, e0, n, p->stage));
    /* in place: 16-bit element i lands at or before float i */
    for (int64_t i = 0; i < n; i++) zrt_store_f(p->stage, p->dtype, (size_t)i, p->stage[i]);
    float *bufs[1] = {p->stage};
    ZRT_CHECK(zrt_nvme_tile_io(p->nvme, 1, (size_t)e0 * ws / 4, (size_t)n * ws / 4, bufs));
  }
  ZRT_CHECK(zrt_nvme_commit(p->nvme));
  p->dirty = 0;
  return ZRT_OK;
}

zrt_status zrt_pswap_read(zrt_pswap *p, int m, void *dst) {
  if (p->dirty) ZRT_CHECK(zrt_pswap_write(p));
  const zrt_pswap_mod *me = &p->mods[m];
  size_t ws = zrt_dtype_size(p->dtype);
  /* len and file_off are multiples of 32 elements: whole floats */
  return zrt_nvme_range(p->nvme, 0, 0, (size_t)me->file_off * ws / 4, (size_t)me->len * ws / 4,
                        dst);
}

/* Chunk k of a module's read: file bytes [*c0, *c0 + *cb) of the current
 * generation (4096-aligned, at most one slot), of which the shard's bytes
 * [*lo, *hi) (offsets from the shard's first byte) are wanted. The chunks
 * tile the shard's 4096-aligned span, so shards that share a block with
 * their neighbours are read whole. */
static void zrt_pswap_chunk(const zrt_pswap *p, const zrt_pswap_mod *me, int64_t k, size_t *c0,
                            size_t *cb, size_t *lo, size_t *hi) {
  size_t ws = zrt_dtype_size(p->dtype), A = ZRT_NVME_ALIGN;
  size_t b0 = (size_t)me->file_off * ws, b1 = b0 + (size_t)me->len * ws;
  size_t a0 = b0 / A * A, a1 = ZRT_ALIGN_UP(b1, A), S = (size_t)p->stage_elems * 4;
  *c0 = a0 + (size_t)k * S;
  *cb = ZRT_MIN(S, a1 - *c0);
  *lo = ZRT_MAX(b0, *c0) - b0;
  *hi = ZRT_MIN(b1, *c0 + *cb) - b0;
}

static int64_t zrt_pswap_nchunks(const zrt_pswap *p, const zrt_pswap_mod *me) {
  size_t ws = zrt_dtype_size(p->dtype), A = ZRT_NVME_ALIGN;
  size_t b0 = (size_t)me->file_off * ws, b1 = b0 + (size_t)me->len * ws;
  size_t span = ZRT_ALIGN_UP(b1, A) - b0 / A * A;
  return (int64_t)ZRT_DIV_UP(span, (size_t)p->stage_elems * 4);
}

/* Submits chunks in queue order while slots are free. */
static zrt_status zrt_pswap_pump(zrt_pswap *p) {
  int slot = 0;
  for (int q = 0; q < p->qn; q++) {
    zrt_pswap_mod *me = &p->mods[p->q[q]];
    while (me->next < me->nchunks) {
      while (slot < p->nslots && p->slot_mod[slot] >= 0) slot++;
      if (slot == p->nslots) return ZRT_OK;
      size_t c0, cb, lo, hi;
      zrt_pswap_chunk(p, me, me->next, &c0, &cb, &lo, &hi);
      ZRT_CHECK(zrt_pswap_slot_idle(p, slot));
      ZRT_CHECK(zrt_nvme_read_submit(p->nvme, 0, c0, cb, p->stage + (size_t)slot * p->stage_elems,
                                     (uint64_t)slot));
      p->slot_mod[slot] = p->q[q];
      p->slot_chunk[slot] = me->next++;
    }
  }
  return ZRT_OK;
}

/* Copies the chunk read into slot s to its module's dst; frees the slot. */
static zrt_status zrt_pswap_land(zrt_pswap *p, int s) {
  zrt_pswap_mod *me = &p->mods[p->slot_mod[s]];
  size_t c0, cb, lo, hi;
  zrt_pswap_chunk(p, me, p->slot_chunk[s], &c0, &cb, &lo, &hi);
  size_t b0 = (size_t)me->file_off * zrt_dtype_size(p->dtype);
  const char *src = (const char *)(p->stage + (size_t)s * p->stage_elems);
  p->slot_mod[s] = -1;
  me->left--;
  ZRT_CHECK(zrt_backend_memcpy(p->be, (char *)me->dst + lo, src + (b0 + lo - c0), hi - lo,
                               ZRT_COPY_H2D, NULL));
  /* the slot is free for the next read only once this copy has read it */
  return zrt_backend_event_record(p->be, p->slot_ev[s], NULL);
}

void zrt_pswap_cancel(zrt_pswap *p) {
  if (!p) return;
  zrt_nvme_read_drain(p->nvme);
  for (int k = 0; k < p->nslots; k++) p->slot_mod[k] = -1;
  for (int q = 0; q < p->qn; q++) {
    zrt_pswap_mod *me = &p->mods[p->q[q]];
    me->queued = 0;
    me->next = me->nchunks = me->left = 0;
    me->dst = NULL;
  }
  p->qn = 0;
}

zrt_status zrt_pswap_submit(zrt_pswap *p, int m, void *dst, int front) {
  if (p->dirty) ZRT_CHECK(zrt_pswap_write(p));
  zrt_pswap_mod *me = &p->mods[m];
  if (me->queued)
    return zrt_error(ZRT_ERR_INTERNAL, "param swap: module %d is already being read", m);
  me->dst = dst;
  me->next = 0;
  me->nchunks = me->left = zrt_pswap_nchunks(p, me);
  me->queued = 1;
  if (front) {
    memmove(p->q + 1, p->q, (size_t)p->qn * sizeof(int));
    p->q[0] = m;
  } else {
    p->q[p->qn] = m;
  }
  p->qn++;
  return zrt_pswap_poll(p, -1);
}

zrt_status zrt_pswap_poll(zrt_pswap *p, int wait_m) {
  if (!p) return ZRT_OK;
  zrt_status st = ZRT_OK;
  for (;;) {
    /* land whatever has completed, refill the freed slots */
    for (;;) {
      uint64_t tag;
      int got = 0;
      ZRT_CHECK_GOTO(zrt_nvme_read_reap(p->nvme, 0, &tag, &got), st, fail);
      if (!got) break;
      ZRT_CHECK_GOTO(zrt_pswap_land(p, (int)tag), st, fail);
    }
    ZRT_CHECK_GOTO(zrt_pswap_pump(p), st, fail);
    if (wait_m < 0 || p->mods[wait_m].left == 0) return ZRT_OK;
    uint64_t tag;
    int got = 0;
    ZRT_CHECK_GOTO(zrt_nvme_read_reap(p->nvme, 1, &tag, &got), st, fail);
    if (!got)
      return zrt_error(ZRT_ERR_INTERNAL, "param swap: waiting for module %d with no read in flight",
                       wait_m);
    ZRT_CHECK_GOTO(zrt_pswap_land(p, (int)tag), st, fail);
  }
fail:
  /* nothing may stay in flight into slots the caller is about to free */
  zrt_nvme_read_drain(p->nvme);
  for (int k = 0; k < p->nslots; k++) p->slot_mod[k] = -1;
  return zrt_error_context(st, "offload_param nvme (shard read of this rank): ");
}

void zrt_pswap_dequeue(zrt_pswap *p, int m) {
  int k = 0;
  for (int q = 0; q < p->qn; q++)
    if (p->q[q] != m) p->q[k++] = p->q[q];
  p->qn = k;
  p->mods[m].queued = 0;
  p->mods[m].dst = NULL;
}

int zrt_pswap_queue_len(const zrt_pswap *p) { return p ? p->qn : 0; }
int zrt_pswap_queue_at(const zrt_pswap *p, int i) { return p->q[i]; }
int zrt_pswap_queued(const zrt_pswap *p, int m) { return p && p->mods[m].queued; }
zrt_nvme *zrt_pswap_nvme(const zrt_pswap *p) { return p ? p->nvme : NULL; }
int zrt_pswap_nslots(const zrt_pswap *p) { return p->nslots; }
