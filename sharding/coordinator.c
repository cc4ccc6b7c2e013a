/*
 * coordinator.c — the stage-3 coordinator (coordinator.h): gather at
 * fetch, free or keep at release, prefetch by the recorded trace, evict to
 * stay within max_live, read shards through the parameter swapper in queue
 * (= trace) order. The rules (persistence, prefetch budget, reuse distance,
 * nested fetches, NVMe read queue) are in docs/engine.md, "Stage 3".
 * Invariants: `fetched` means full16 holds the current weights; a module
 * with gather_req has full16 allocated and is not yet fetched; a queued
 * module has full16, no gather_req, is not fetched and not in use; a
 * retained module is fetched, not in use and not persistent; every rank
 * issues the same gathers in the same order (decisions depend only on the
 * program's calls, the trace and the options, never on timing).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator.h"

typedef struct zrt_coord_mod {
  int64_t numel, padded, part;
  int persistent;           /* numel <= persist_threshold: stays gathered */
  void *full16;             /* the gathered copy (NULL when none) */
  int fetched;              /* full16 holds current values */
  int in_use;               /* fetches not yet released (fetches nest) */
  int retained;             /* released but kept gathered for a reuse */
  int trace_at;             /* trace position of its latest fetch (-1: none yet) */
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
  int *trace;
  int ntrace, cap_trace;
  int trace_done; /* 1 after the first boundary: the trace is frozen */
  int trace_pos;  /* position of the last fetch in the trace */
  int live_modules;
  int64_t live_elems; /* gathered non-persistent elements */
  int64_t reuse_kept, reuse_evicted, gathers;
};

zrt_status zrt_coord_create(zrt_backend *be, zrt_comm *comm, const zrt_coord_opts *o,
                            zrt_coord **out) {
  *out = NULL;
  zrt_coord *c = calloc(1, sizeof *c);
  if (!c) return zrt_error(ZRT_ERR_OOM, "stage 3 coordinator: out of host memory");
  c->mods = calloc((size_t)ZRT_MAX(o->nmodules, 1), sizeof *c->mods);
  if (!c->mods) {
    free(c);
    return zrt_error(ZRT_ERR_OOM, "stage 3 coordinator: out of host memory");
  }
  c->be = be;
  c->comm = comm;
  c->pswap = o->pswap;
  c->o = *o;
  c->ws = zrt_dtype_size(o->dtype);
  c->trace_pos = -1;
  for (int m = 0; m < o->nmodules; m++) {
    zrt_coord_mod *me = &c->mods[m];
    me->numel = o->numel[m];
    me->padded = o->padded[m];
    me->part = o->padded[m] / comm->world;
    me->persistent = me->numel <= o->persist_threshold;
    me->trace_at = -1;
    me->par_pos = -1;
  }
  *out = c;
  return ZRT_OK;
}

void zrt_coord_set_shard(zrt_coord *c, int m, const void *shard16, int host) {
  c->mods[m].shard16 = shard16;
  c->mods[m].shard_host = host;
}

int zrt_coord_persistent(const zrt_coord *c, int m) { return c->mods[m].persistent; }

void *zrt_coord_full(const zrt_coord *c, int m) {
  const zrt_coord_mod *me = &c->mods[m];
  return me->fetched ? me->full16 : NULL;
}

void zrt_coord_freeze_trace(zrt_coord *c) {
  if (c && !c->trace_done && c->ntrace > 0) c->trace_done = 1;
}

void zrt_coord_set_window(zrt_coord *c, int64_t prefetch_elems, int64_t reuse_distance) {
  if (!c) return;
  c->o.prefetch_elems = prefetch_elems;
  c->o.reuse_distance = reuse_distance;
}

void zrt_coord_stats_get(const zrt_coord *c, zrt_coord_stats *out) {
  memset(out, 0, sizeof *out);
  if (!c) return;
  out->gathers = c->gathers;
  out->reuse_kept = c->reuse_kept;
  out->reuse_evicted = c->reuse_evicted;
  out->live_modules = c->live_modules;
  out->live_elems = c->live_elems;
  out->trace_len = c->ntrace;
}

/* Trace position of module m's next fetch after position `from` within
 * this step's trace, or INT_MAX. *between: non-persistent elements fetched
 * strictly in between (counted up to `limit`, then the search stops). */
static int zrt_coord_next_use(const zrt_coord *c, int m, int from, int64_t limit,
                              int64_t *between) {
  int64_t d = 0;
  for (int i = from + 1; i < c->ntrace; i++) {
    int t = c->trace[i];
    if (t == m) {
      if (between) *between = d;
      return i;
    }
    if (!c->mods[t].persistent) d += c->mods[t].padded;
    if (d >= limit) break;
  }
  if (between) *between = d;
  return INT_MAX;
}

static void zrt_coord_free_copy(zrt_coord *c, zrt_coord_mod *me) {
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
  c->live_modules--;
  c->live_elems -= me->padded;
  me->fetched = 0;
  me->retained = 0;
}

/* Frees retained copies, farthest next use first, until `need` more
 * elements fit in max_live or none is left. */
static void zrt_coord_evict(zrt_coord *c, int64_t need) {
  while (c->live_elems + need > c->o.max_live_elems) {
    int victim = -1, far = -1;
    for (int k = 0; k < c->o.nmodules; k++) {
      if (!c->mods[k].retained) continue;
      int at = zrt_coord_next_use(c, k, c->trace_pos, INT64_MAX, NULL);
      if (at > far) {
        far = at;
        victim = k;
      }
    }
    if (victim < 0) return;
    zrt_log(ZRT_LOG_DEBUG, "stage 3: evict retained '%s' to stay within max_live",
            c->o.names[victim]);
    zrt_coord_free_copy(c, &c->mods[victim]);
    c->reuse_evicted++;
  }
}

static zrt_status zrt_coord_alloc(zrt_coord *c, int m, int async) {
  zrt_coord_mod *me = &c->mods[m];
  if (!me->full16) {
    if (!me->persistent && !async) zrt_coord_evict(c, me->padded);
    ZRT_CHECK(zrt_backend_alloc(c->be, (size_t)me->padded * c->ws, ZRT_MEM_PARAMS16, &me->full16));
    if (!me->persistent) {
      c->live_modules++;
      c->live_elems += me->padded;
    }
  }
  return ZRT_OK;
}

/* This rank's slot of module m's gathered copy. */
static void *zrt_coord_own(const zrt_coord *c, const zrt_coord_mod *me) {
  return (char *)me->full16 + (size_t)c->comm->rank * (size_t)me->part * c->ws;
}

/* The all-gather of m into full16 (asynchronous: gather_req). own_ready:
 * the shard is already in this rank's slot (read from nvme). */
static zrt_status zrt_coord_launch(zrt_coord *c, int m, int async, int own_ready) {
  zrt_coord_mod *me = &c->mods[m];
  zrt_log(ZRT_LOG_DEBUG, "stage 3: gather '%s' (%lld elements, %s, trace position %d)",
          c->o.names[m], (long long)me->padded, async ? "prefetch" : "blocking", c->trace_pos);
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
  st = zrt_comm_wait_on(c->comm, req, NULL);
  if (st == ZRT_OK) me->fetched = 1;
  return st;
}

void zrt_coord_drop_reads(zrt_coord *c) {
  int n = c ? zrt_pswap_queue_len(c->pswap) : 0;
  if (n == 0) return;
  int *q = malloc((size_t)n * sizeof(int));
  for (int k = 0; q && k < n; k++) q[k] = zrt_pswap_queue_at(c->pswap, k);
  zrt_pswap_cancel(c->pswap);
  for (int k = 0; q && k < n; k++) {
    zrt_coord_mod *me = &c->mods[q[k]];
    if (me->full16 && !me->persistent) zrt_coord_free_copy(c, me);
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
    if (me->full16 && !me->persistent) zrt_coord_free_copy(c, me);
    return st;
  }
  if (async) {
    me->par_pos = -1; /* set by the prefetch loop */
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
  if (st == ZRT_OK) me->fetched = 1;
  return st;
}

/* Position of this fetch of m in the frozen trace: m at or after the
 * expected position (the trace repeats every step), or -1. */
static int zrt_coord_locate(zrt_coord *c, int m) {
  for (int k = 0; k < c->ntrace; k++) {
    int i = (c->trace_pos + 1 + k) % c->ntrace;
    if (c->trace[i] == m) return i;
  }
  return -1;
}

static void zrt_coord_prefetch(zrt_coord *c, int pos) {
  if (pos < 0 || c->o.prefetch_elems <= 0) return;
  int64_t budget = c->o.prefetch_elems;
  for (int k = 1; k < c->ntrace && budget > 0; k++) {
    int i = pos + k;
    if (i >= c->ntrace) break; /* do not prefetch across the optimizer step */
    zrt_coord_mod *nx = &c->mods[c->trace[i]];
    if (nx->fetched || nx->gather_req || zrt_pswap_queued(c->pswap, c->trace[i])) continue;
    if (nx->numel > budget) break;
    if (c->live_elems + nx->padded > c->o.max_live_elems) break;
    if (zrt_coord_start_gather(c, c->trace[i], 1) != ZRT_OK) break; /* blocking fetch retries */
    nx->par_pos = i;
    budget -= nx->numel;
  }
}

zrt_status zrt_coord_fetch(zrt_coord *c, int m) {
  zrt_coord_mod *me = &c->mods[m];
  int pos = -1;
  if (!c->trace_done) {
    if (c->ntrace == c->cap_trace) {
      int nc = c->cap_trace ? c->cap_trace * 2 : 16;
      int *t = realloc(c->trace, (size_t)nc * sizeof(int));
      if (!t) return zrt_error(ZRT_ERR_OOM, "fetch trace: out of host memory");
      c->trace = t;
      c->cap_trace = nc;
    }
    c->trace[c->ntrace++] = m;
  } else if (c->ntrace > 0) {
    pos = zrt_coord_locate(c, m);
    if (pos >= 0) c->trace_pos = pos;
  }
  me->trace_at = pos;
  if (c->pswap) ZRT_CHECK(zrt_coord_launch_due(c, pos < 0 ? -1 : pos + 1, m));
  ZRT_CHECK(zrt_coord_wait(c, m));
  if (!me->fetched) ZRT_CHECK(zrt_coord_start_gather(c, m, 0));
  me->retained = 0;
  me->in_use++;
  zrt_coord_prefetch(c, pos);
  return ZRT_OK;
}

zrt_status zrt_coord_release(zrt_coord *c, int m) {
  zrt_coord_mod *me = &c->mods[m];
  if (me->in_use > 0) me->in_use--;
  /* keep the reads flowing while the caller computes */
  if (zrt_pswap_queue_len(c->pswap) > 0) ZRT_CHECK(zrt_coord_poll(c, -1));
  /* a nested use (a tied module fetched again inside its own fetch) keeps
   * the gathered copy until the outermost release */
  if (me->persistent || me->in_use > 0) return ZRT_OK;
  ZRT_CHECK(zrt_coord_wait(c, m));
  if (!me->full16) {
    me->fetched = 0;
    return ZRT_OK;
  }
  int64_t reuse = c->o.reuse_distance, between = 0;
  if (me->fetched && reuse > 0 && me->trace_at >= 0 && c->live_elems <= c->o.max_live_elems &&
      zrt_coord_next_use(c, m, me->trace_at, reuse, &between) != INT_MAX && between < reuse) {
    me->retained = 1;
    c->reuse_kept++;
    zrt_log(ZRT_LOG_DEBUG, "stage 3: keep '%s' gathered (reused after %lld elements)",
            c->o.names[m], (long long)between);
    return ZRT_OK;
  }
  zrt_coord_free_copy(c, me);
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
  for (int m = 0; m < c->o.nmodules; m++) {
    zrt_coord_mod *me = &c->mods[m];
    /* stale copies nobody holds (retained, or prefetched and never used):
     * freed now rather than re-gathered into at their next fetch */
    if (me->full16 && !me->persistent && me->in_use == 0 && !me->gather_req)
      zrt_coord_free_copy(c, me);
    me->fetched = 0;
  }
  c->trace_pos = -1;
}

void zrt_coord_destroy(zrt_coord *c) {
  if (!c) return;
  zrt_coord_quiesce(c);
  for (int m = 0; m < c->o.nmodules; m++) zrt_backend_free(c->be, c->mods[m].full16);
  free(c->mods);
  free(c->trace);
  free(c);
}
