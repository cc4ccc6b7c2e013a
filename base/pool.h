/*
 * pool.h — accounted memory pools (DESIGN.md rule 6).
 *
 * A pool sits in front of a raw allocator (a backend's device malloc, the
 * pinned host arena, plain malloc) and tracks current and peak bytes per
 * category. A pool with a capacity refuses an allocation that would exceed it
 * with ZRT_ERR_OOM and a message giving the request, the bytes in use by
 * category, the limit and a hint — exactly like a device that is full, so a
 * CPU run with device_memory_limit behaves like a small GPU.
 *
 * Thread-safe (one mutex). The pool remembers each live pointer's size and
 * category, so zrt_pool_free needs only the pointer.
 */
#ifndef ZRT_POOL_H
#define ZRT_POOL_H

#include "internal.h"

typedef zrt_status (*zrt_pool_raw_alloc_fn)(void *ctx, size_t bytes, void **out);
typedef void (*zrt_pool_raw_free_fn)(void *ctx, void *ptr, size_t bytes);

typedef struct zrt_pool zrt_pool;

/* capacity 0 = unlimited. name appears in OOM messages ("device", "host
 * pinned"). hint is appended to OOM messages (may be NULL). */
zrt_status zrt_pool_create(const char *name, size_t capacity, zrt_pool_raw_alloc_fn alloc,
                           zrt_pool_raw_free_fn free_fn, void *ctx, zrt_pool **out);
void zrt_pool_destroy(zrt_pool *pool); /* frees leftovers, accepts NULL */
void zrt_pool_set_hint(zrt_pool *pool, const char *hint);

/* Allocations are 64-byte aligned when the raw allocator gives that. */
zrt_status zrt_pool_alloc(zrt_pool *pool, size_t bytes, zrt_mem_category cat, void **out);
void zrt_pool_free(zrt_pool *pool, void *ptr); /* NULL ok */
/* Memory that another allocator owns, counted here as if the pool had
 * allocated it (the capacity applies; ZRT_ERR_OOM like zrt_pool_alloc):
 * the comm's collective buffers (zrt_comm_mem_alloc) stay in the backend
 * pool's categories. zrt_pool_free of an adopted pointer only stops
 * counting it (its owner frees it); zrt_pool_destroy leaves it alone.
 * zrt_pool_reserve checks that bytes more would fit, without counting
 * them (before an allocation elsewhere that is costly to undo). */
zrt_status zrt_pool_adopt(zrt_pool *pool, void *ptr, size_t bytes, zrt_mem_category cat);
zrt_status zrt_pool_reserve(zrt_pool *pool, size_t bytes, zrt_mem_category cat);

void zrt_pool_stats(const zrt_pool *pool, zrt_mem_stats *out);
void zrt_pool_reset_peak(zrt_pool *pool);
size_t zrt_pool_capacity(const zrt_pool *pool);
/* The live allocation containing ptr: 1 with its start, size and category,
 * else 0. Takes no lock (diagnostics from a signal handler: a table being
 * changed meanwhile may give a wrong answer, never a crash). */
int zrt_pool_find(const zrt_pool *pool, const void *ptr, void **base, size_t *bytes,
                  zrt_mem_category *cat);
/* How many allocations this pool refused (its capacity, or its allocator):
 * a caller tells its own OOM from another resource's by the change. */
size_t zrt_pool_oom_count(const zrt_pool *pool);

#endif
