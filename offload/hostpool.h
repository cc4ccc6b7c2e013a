/*
 * hostpool.h — the NUMA-pinned host pool for offloaded shards.
 *
 * A jemalloc arena whose extent hooks take pages bound to one NUMA node
 * (mbind) and pinned (mlock on the CPU backend, the backend's host_register —
 * cudaHostRegister — on CUDA). Every allocation is accounted in an ordinary
 * zrt_pool (zrt_hostpool_pool) under its category, so host bytes show up in
 * metrics as host_pinned_peak_bytes.
 *
 * Node choice: the config's numa_node when >= 0, else the GPU's node (from
 * sysfs, backend->numa_node) when there is a GPU, else the node of the
 * rank's bound cores, else node 0. When pinning or binding fails, creation
 * fails with a clear error unless allow_fallback (config
 * zrt.pin_memory_fallback), in which case the fallback is logged once.
 */
#ifndef ZRT_HOSTPOOL_H
#define ZRT_HOSTPOOL_H

#include "backend.h"

typedef struct zrt_hostpool zrt_hostpool;

typedef struct zrt_hostpool_opts {
  int numa_node;      /* -1 = auto */
  int pin;            /* 1 = lock / register pages */
  int allow_fallback; /* 1 = log and continue unpinned / unbound on failure */
  size_t capacity;    /* 0 = unlimited */
} zrt_hostpool_opts;

/* backend may be NULL (then mlock is used to pin). */
zrt_status zrt_hostpool_create(const zrt_hostpool_opts *opts, zrt_backend *backend,
                               zrt_hostpool **out);
void zrt_hostpool_destroy(zrt_hostpool *hp);
/* The accounted pool to allocate from (zrt_pool_alloc / zrt_pool_free). */
zrt_pool *zrt_hostpool_pool(zrt_hostpool *hp);
int zrt_hostpool_node(const zrt_hostpool *hp);   /* node pages are bound to, -1 = unbound */
int zrt_hostpool_pinned(const zrt_hostpool *hp); /* 1 when pages are pinned */
/* Host staging for asynchronous copies, from pool (any pool of host
 * memory): where its pages are not pinned already (pinned 0) and the
 * backend registers host memory (cuda, twin), the block is registered, so a
 * copy into or out of it is asynchronous as from pinned memory and a
 * stream-ordered user (the offload pipe, the buckets' host additions) need
 * not wait for it on the host. Only whole pages are registered: a block the
 * pool did not place at a page boundary, or bytes not a multiple of the
 * page size, stays pageable. *registered (may be NULL) says which. The
 * accounted bytes are exactly `bytes`. */
zrt_status zrt_hostpool_stage_alloc(zrt_pool *pool, zrt_backend *be, int pinned, size_t bytes,
                                    zrt_mem_category cat, void **out, int *registered);
/* Unregisters (when it was registered) and frees a stage_alloc block; NULL ok. */
void zrt_hostpool_stage_free(zrt_pool *pool, zrt_backend *be, void *p, int registered);
/* Extents currently registered through the backend's host_register (each
 * is unregistered when jemalloc returns it, even after a pin fallback). */
size_t zrt_hostpool_registered(zrt_hostpool *hp);

#endif
