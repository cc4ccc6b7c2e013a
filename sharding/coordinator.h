/*
 * coordinator.h — the stage-3 parameter coordinator (DeepSpeed's
 * PartitionedParameterCoordinator is the model): gathers each module's
 * 16-bit shards into a full copy at fetch (one coalesced all-gather per
 * module), frees it at release, prefetches the modules that follow in the
 * recorded fetch order (the trace), keeps released copies for a reuse
 * within the reuse distance, and bounds what is gathered by max_live.
 * Built from (backend, comm, the modules' layout, options, and the
 * parameter swapper when shards live on NVMe); owns the gathered copies
 * (ZRT_MEM_PARAMS16 in the backend's pool), the trace and its counters.
 *
 * Every rank issues the same gathers in the same order: decisions depend
 * only on the program's (identical) fetch/release sequence, the trace and
 * the options, never on timing. Details and invariants: coordinator.c.
 */
#ifndef ZRT_COORDINATOR_H
#define ZRT_COORDINATOR_H

#include "comm.h"
#include "param_swap.h"

typedef struct zrt_coord zrt_coord;

typedef struct zrt_coord_opts {
  zrt_dtype dtype;           /* working dtype of the shards and copies */
  int64_t prefetch_elems;    /* stage3_prefetch_bucket_size (0 = no prefetch) */
  int64_t max_live_elems;    /* stage3_max_live_parameters */
  int64_t reuse_distance;    /* effective stage3_max_reuse_distance (0 = no reuse) */
  int64_t persist_threshold; /* stage3_param_persistence_threshold */
  int nmodules;
  const int64_t *numel;     /* per module: parameter elements */
  const int64_t *padded;    /* per module: padded flat size (world parts) */
  const char *const *names; /* per module, for the debug log; must outlive the coordinator */
  zrt_pswap *pswap;         /* offload_param nvme: where the shards are read from (or NULL) */
} zrt_coord_opts;

typedef struct zrt_coord_stats {
  int64_t gathers;       /* all-gathers of modules issued (blocking + prefetch) */
  int64_t reuse_kept;    /* releases that kept the copy (reuse distance) */
  int64_t reuse_evicted; /* kept copies freed early to stay within max_live */
  int live_modules;      /* gathered non-persistent modules now */
  int64_t live_elems;    /* their elements */
  int trace_len;
} zrt_coord_stats;

zrt_status zrt_coord_create(zrt_backend *be, zrt_comm *comm, const zrt_coord_opts *o,
                            zrt_coord **out);
/* Waits for the gathers in flight, drops queued reads, frees every copy. */
void zrt_coord_destroy(zrt_coord *c);

/* Where module m's owned shard lives when it is not read from NVMe: a
 * backend pointer, or host memory (host = 1, offload_param cpu). */
void zrt_coord_set_shard(zrt_coord *c, int m, const void *shard16, int host);
/* 1 when module m stays gathered (at or below the persistence threshold). */
int zrt_coord_persistent(const zrt_coord *c, int m);

/* The program's fetch / release of module m (fetches nest). */
zrt_status zrt_coord_fetch(zrt_coord *c, int m);
zrt_status zrt_coord_release(zrt_coord *c, int m);
/* The gathered copy of m while fetched (current weights), else NULL. */
void *zrt_coord_full(const zrt_coord *c, int m);

/* The first optimizer boundary: the trace recorded so far is frozen. */
void zrt_coord_freeze_trace(zrt_coord *c);
/* The prefetch budget and reuse distance from now on (elements; the
 * engine's memory plan lowers them at the first boundary so that the
 * steady state replayed over the recorded trace fits the device). Call
 * between steps, with nothing gathered but persistent or held copies. */
void zrt_coord_set_window(zrt_coord *c, int64_t prefetch_elems, int64_t reuse_distance);
/* After an optimizer step: gathered copies are stale. */
void zrt_coord_invalidate(zrt_coord *c);
/* Waits for all pending gathers; drops the queued shard reads. */
zrt_status zrt_coord_quiesce(zrt_coord *c);
/* Cancels the queued shard reads (waits for those in flight) and frees
 * their copies: before a write-back of the swap file, after a failed read. */
void zrt_coord_drop_reads(zrt_coord *c);

void zrt_coord_stats_get(const zrt_coord *c, zrt_coord_stats *out);

#endif
