/*
 * coordinator.c — the stage-3 coordinator (coordinator.h): executes the
 * stage-3 policy (coord_policy.h: trace, eviction, prefetch, reuse) with
 * gathered copies and all-gathers, and reads shards through the parameter
 * swapper in queue (= trace) order. The rules (persistence, prefetch
 * budget, reuse distance, nested fetches, NVMe read queue) are in
 * docs/engine.md, "Stage 3"; this file decides none of them but the order
 * of reads and gathers. Invariants: the policy's counters follow every
 * allocation, free and gather here (its `copy` is full16 != NULL, its
 * `valid` is fetched || gather_req || queued); a module is fetched (full16
 * holds the current weights) when valid with no gather_req and not
 * queued; a module with gather_req has full16 and is not yet fetched; a
 * queued module has full16, no gather_req and is not in use; every rank
 * issues the same gathers in the same order (decisions depend only on the
 * program's calls, the trace and the options, never on timing).
 */
#include <stdlib.h>
#include <string.h>

#include "coord_policy.h"
#include "coordinator.h"

typedef struct zrt_coord_mod {
  int64_t padded, part;
  void *full16;             /* the gathered copy (NULL when none) */
  int par_pos;              /* nvme: trace position its queued read was issued for (-1: blocking) */
  zrt_comm_req *gather_req; /* pending prefetch all-gather into full16 */
  const void *shard16;      /* the owned shard (NULL with nvme) */
  int shard_host;           /* shard16 is host memory (offload_param cpu) */
} zrt_coord_mod;

struct zrt_coord {
  zrt_backend *be;
  zrt_comm *comm;
  zrt_pswap *pswap;
  zrt_coord_opts o;
  size_t ws;
  zrt_coord_mod *mods;
  zrt_cpol pol; /* the decisions and their counters */
  int64_t reuse_kept, reuse_evicted, gathers;
};

zrt_status zrt_coord_create(zrt_backend *be, zrt_comm *comm, const zrt_coord_opts *o,
                            zrt_coord **out) {
  *out = NULL;
  zrt_coord *c = calloc(1, sizeof *c);
  if (!c) return zrt_error(ZRT_ERR_OOM, "stage 3 coordinator: out of host memory");
  c->mods = calloc((size_t)ZRT_MAX(o->nmodules, 1), sizeof *c->mods);
  zrt_cpol_settings ps = {.prefetch_elems = o->prefetch_elems,
                          .max_live_elems = o->max_live_elems,
                          .reuse_distance = o->reuse_distance,
                          .persist_threshold = o->persist_threshold};
  if (!c->mods || zrt_cpol_init(&c->pol, &ps, o->nmodules, o->numel, o->padded) != 0) {
    zrt_cpol_fini(&c->pol);
    free(c->mods);
    free(c);
    return zrt_error(ZRT_ERR_OOM, "stage 3 coordinator: out of host memory");
  }
  c->be = be;
  c->comm = comm;
  c->pswap = o->pswap;
  c->o = *o;
  c->ws = zrt_dtype_size(o->dtype);
  for (int m = 0; m < o->nmodules; m++) {
    zrt_coord_mod *me = &c->mods[m];
    me->padded = o->padded[m];
    me->part = o->padded[m] / comm->world;
    me->par_pos = -1;
  }
  *out = c;
  return ZRT_OK;
}

void zrt_coord_set_shard(zrt_coord *c, int m, const void *shard16, int host) {
  c->mods[m].shard16 = shard16;
  c->mods[m].shard_host = host;
}

int zrt_coord_persistent(const zrt_coord *c, int m) { return c->pol.mods[m].persistent; }

/* full16 holds the current weights: no gather or read still to come. */
static int zrt_coord_fetched(const zrt_coord *c, int m) {
  return c->pol.mods[m].valid && !c->mods[m].gather_req && !zrt_pswap_queued(c->pswap, m);
}

void *zrt_coord_full(const zrt_coord *c, int m) {
  return zrt_coord_fetched(c, m) ? c->mods[m].full16 : NULL;
}

void zrt_coord_freeze_trace(zrt_coord *c) {
  if (c) zrt_cpol_freeze(&c->pol);
}

void zrt_coord_set_window(zrt_coord *c, int64_t prefetch_elems, int64_t reuse_distance) {
  /* the policy holds the settings it decides by (c->o keeps the build's) */
  if (c) zrt_cpol_set_window(&c->pol, prefetch_elems, reuse_distance);
}

void zrt_coord_stats_get(const zrt_coord *c, zrt_coord_stats *out) {
  memset(out, 0, sizeof *out);
  if (!c) return;
  out->gathers = c->gathers;
  out->reuse_kept = c->reuse_kept;
  out->reuse_evicted = c->reuse_evicted;
  out->live_modules = c->pol.live_modules;
  out->live_elems = c->pol.live_elems;
  out->trace_len = c->pol.ntrace;
}

static void zrt_coord_free_copy(zrt_coord *c, int m) {
  zrt_coord_mod *me = &c->mods[m];
  /* The engine's stream waited for the copy's gather before any use
   * (zrt_coord_wait), so it is ordered after every user but the NVMe
   * reads, which have their own events: without those the copy goes back
   * on that stream alone, not after every stream's work (the
   * reduce-scatters in flight) */
  if (c->pswap)
    zrt_backend_free(c->be, me->full16);
  else
    zrt_backend_free_on(c->be, me->full16, NULL);
  me->full16 = NULL;
  zrt_cpol_on_free(&c->pol, m);
}

/* m's copy, after the retained copies the policy evicts for it. */
static zrt_status zrt_coord_alloc(zrt_coord *c, int m, int async) {
  zrt_coord_mod *me = &c->mods[m];
  if (me->full16) return ZRT_OK;
  for (int v; (v = zrt_cpol_evict_for(&c->pol, m, !async)) >= 0;) {
    zrt_log(ZRT_LOG_DEBUG, "stage 3: evict retained '%s' to stay within max_live", c->o.names[v]);
    zrt_coord_free_copy(c, v);
    c->reuse_evicted++;
  }
  ZRT_CHECK(zrt_backend_alloc(c->be, (size_t)me->padded * c->ws, ZRT_MEM_PARAMS16, &me->full16));
  zrt_cpol_on_alloc(&c->pol, m);
  return ZRT_OK;
}

/* This rank's slot of module m's gathered copy. */
static void *zrt_coord_own(const zrt_coord *c, const zrt_coord_mod *me) {
  return (char *)me->full16 + (size_t)c->comm->rank * (size_t)me->part * c->ws;
}

/* The all-gather of m into full16 (asynchronous: gather_req). own_ready:
 * the shard is already in this rank's slot (read from nvme). */
static zrt_status zrt_coord_launch_gather(zrt_coord *c, int m, int async, int own_ready) {
  zrt_coord_mod *me = &c->mods[m];
  zrt_log(ZRT_LOG_DEBUG, "stage 3: gather '%s' (%lld elements, %s, trace position %d)",
          c->o.names[m], (long long)me->padded, async ? "prefetch" : "blocking", c->pol.trace_pos);
  c->gathers++;
  const void *src = me->shard16;
  zrt_status st;
  if (own_ready) {
    src = zrt_coord_own(c, me);
  } else if (me->shard_host && c->be->device_id >= 0) {
    /* offloaded shard: stage it into this rank's slot of full16 first (a
     * host backend gathers from the shard itself: the same memory kind,
     * and on the host the engine keeps shards in the comm's shared memory,
     * so the gather reads them in place) */
    void *own = zrt_coord_own(c, me);
    st = zrt_backend_memcpy(c->be, own, me->shard16, (size_t)me->part * c->ws, ZRT_COPY_H2D, NULL);
    if (st != ZRT_OK) return st;
    src = own;
  }
  zrt_comm_req *req = NULL;
  st = zrt_comm_all_gather_even(c->comm, src, me->full16, (size_t)me->part, c->o.dtype, &req);
  if (st != ZRT_OK) return st;
  if (async) {
    me->gather_req = req;
    return ZRT_OK;
  }
  /* blocking for the program: its next kernels on the engine's stream run
   * after the gather (no host wait on a stream-ordered comm) */
  return zrt_comm_wait_on(c->comm, req, NULL);
}

/* The gather of m; its copy is current (or will be, async) unless it failed. */
static zrt_status zrt_coord_launch(zrt_coord *c, int m, int async, int own_ready) {
  zrt_status st = zrt_coord_launch_gather(c, m, async, own_ready);
  zrt_cpol_set_valid(&c->pol, m, st == ZRT_OK);
  return st;
}

void zrt_coord_drop_reads(zrt_coord *c) {
  int n = c ? zrt_pswap_queue_len(c->pswap) : 0;
  if (n == 0) return;
  int *q = malloc((size_t)n * sizeof(int));
  for (int k = 0; q && k < n; k++) q[k] = zrt_pswap_queue_at(c->pswap, k);
  zrt_pswap_cancel(c->pswap);
  for (int k = 0; q && k < n; k++) {
    zrt_cpol_set_valid(&c->pol, q[k], 0);
    if (c->mods[q[k]].full16 && !c->pol.mods[q[k]].persistent) zrt_coord_free_copy(c, q[k]);
  }
  free(q);
}

/* A failed read: nothing queued survives (zrt_coord_drop_reads). */
static zrt_status zrt_coord_poll(zrt_coord *c, int wait_m) {
  zrt_status st = zrt_pswap_poll(c->pswap, wait_m);
  if (st != ZRT_OK) zrt_coord_drop_reads(c);
  return st;
}

/* Reads (nvme) then gathers m; async = 1 for a prefetch, which with nvme
 * only queues the read (zrt_coord_launch_due starts the gather). */
static zrt_status zrt_coord_start_gather(zrt_coord *c, int m, int async) {
  zrt_coord_mod *me = &c->mods[m];
  ZRT_CHECK(zrt_coord_alloc(c, m, async));
  if (!c->pswap) return zrt_coord_launch(c, m, async, 0);
  zrt_status st = zrt_pswap_submit(c->pswap, m, zrt_coord_own(c, me), !async);
  if (st != ZRT_OK) {
    zrt_coord_drop_reads(c);
    if (me->full16 && !c->pol.mods[m].persistent) zrt_coord_free_copy(c, m);
    return st;
  }
  if (async) {
    zrt_cpol_set_valid(&c->pol, m, 1); /* the queued read and its gather will give it */
    me->par_pos = -1;                  /* set by the prefetch loop */
    return ZRT_OK;
  }
  ZRT_CHECK(zrt_coord_poll(c, m));
  zrt_pswap_dequeue(c->pswap, m);
  return zrt_coord_launch(c, m, 0, 1);
}

/* Starts, in queue order, the gathers of the queued modules due now: those
 * prefetched for trace positions up to upto, and every one queued before
 * module m (when m is queued itself). Waits for their reads. */
static zrt_status zrt_coord_launch_due(zrt_coord *c, int upto, int m) {
  while (zrt_pswap_queue_len(c->pswap) > 0) {
    int h = zrt_pswap_queue_at(c->pswap, 0);
    zrt_coord_mod *he = &c->mods[h];
    if (!(zrt_pswap_queued(c->pswap, m) || (he->par_pos >= 0 && he->par_pos <= upto))) break;
    ZRT_CHECK(zrt_coord_poll(c, h));
    zrt_pswap_dequeue(c->pswap, h);
    ZRT_CHECK(zrt_coord_launch(c, h, 1, 1));
  }
  return ZRT_OK;
}

static zrt_status zrt_coord_wait(zrt_coord *c, int m) {
  zrt_coord_mod *me = &c->mods[m];
  if (!me->gather_req) return ZRT_OK;
  zrt_comm_req *req = me->gather_req;
  me->gather_req = NULL;
  zrt_status st = zrt_comm_wait_on(c->comm, req, NULL);
  if (st != ZRT_OK) zrt_cpol_set_valid(&c->pol, m, 0);
  return st;
}

/* The policy's prefetch after a fetch at trace position pos. */
static void zrt_coord_prefetch(zrt_coord *c, int pos) {
  zrt_cpol_cursor cur = zrt_cpol_prefetch_begin(&c->pol, pos);
  for (int i; (i = zrt_cpol_prefetch_next(&c->pol, &cur)) >= 0;) {
    int m = c->pol.trace[i];
    if (zrt_coord_start_gather(c, m, 1) != ZRT_OK) break; /* blocking fetch retries */
    c->mods[m].par_pos = i;
  }
}

zrt_status zrt_coord_fetch(zrt_coord *c, int m) {
  int pos = -1;
  if (zrt_cpol_fetch(&c->pol, m, &pos) != 0)
    return zrt_error(ZRT_ERR_OOM, "fetch trace: out of host memory");
  if (c->pswap) ZRT_CHECK(zrt_coord_launch_due(c, pos < 0 ? -1 : pos + 1, m));
  ZRT_CHECK(zrt_coord_wait(c, m));
  if (!zrt_coord_fetched(c, m)) ZRT_CHECK(zrt_coord_start_gather(c, m, 0));
  zrt_cpol_on_use(&c->pol, m);
  zrt_coord_prefetch(c, pos);
  return ZRT_OK;
}

zrt_status zrt_coord_release(zrt_coord *c, int m) {
  zrt_coord_mod *me = &c->mods[m];
  int outermost = zrt_cpol_on_release(&c->pol, m);
  /* keep the reads flowing while the caller computes */
  if (zrt_pswap_queue_len(c->pswap) > 0) ZRT_CHECK(zrt_coord_poll(c, -1));
  if (!outermost) return ZRT_OK;
  ZRT_CHECK(zrt_coord_wait(c, m));
  /* a copy whose read is still queued (released without a fetch) is not
   * current: it is freed, not kept */
  if (!zrt_coord_fetched(c, m)) zrt_cpol_set_valid(&c->pol, m, 0);
  if (!me->full16) return ZRT_OK;
  int64_t between = 0;
  if (zrt_cpol_keep(&c->pol, m, &between)) {
    zrt_cpol_on_keep(&c->pol, m);
    c->reuse_kept++;
    zrt_log(ZRT_LOG_DEBUG, "stage 3: keep '%s' gathered (reused after %lld elements)",
            c->o.names[m], (long long)between);
    return ZRT_OK;
  }
  zrt_coord_free_copy(c, m);
  return ZRT_OK;
}

zrt_status zrt_coord_quiesce(zrt_coord *c) {
  if (!c) return ZRT_OK;
  zrt_coord_drop_reads(c);
  zrt_status st = ZRT_OK;
  for (int m = 0; m < c->o.nmodules; m++) {
    zrt_status s2 = zrt_coord_wait(c, m);
    if (st == ZRT_OK) st = s2;
  }
  return st;
}

void zrt_coord_invalidate(zrt_coord *c) {
  zrt_coord_drop_reads(c);
  /* stale copies nobody holds (retained, or prefetched and never used):
   * freed now rather than re-gathered into at their next fetch */
  for (int m = 0; m < c->o.nmodules; m++)
    if (zrt_cpol_stale(&c->pol, m) && !c->mods[m].gather_req) zrt_coord_free_copy(c, m);
  zrt_cpol_on_boundary(&c->pol);
  /* a gather still in flight (no quiesce before) is waited for at its fetch */
  for (int m = 0; m < c->o.nmodules; m++)
    if (c->mods[m].gather_req) zrt_cpol_set_valid(&c->pol, m, 1);
}

void zrt_coord_destroy(zrt_coord *c) {
  if (!c) return;
  zrt_coord_quiesce(c);
  for (int m = 0; m < c->o.nmodules; m++) zrt_backend_free(c->be, c->mods[m].full16);
  free(c->mods);
  zrt_cpol_fini(&c->pol);
  free(c);
}
