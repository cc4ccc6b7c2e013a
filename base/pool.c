/*
 * pool.c — accounted pools (see pool.h).
 *
 * Live allocations are kept in an open-addressing hash table keyed by
 * pointer (device pointers cannot carry a header). Invariant: cur[c] is the
 * sum of the sizes of live allocations of category c, and cur_total <=
 * capacity whenever capacity > 0.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

typedef struct zrt_pool_entry {
  void *ptr; /* NULL = empty, ZRT_POOL_TOMB = deleted */
  size_t bytes;
  int cat;
  int adopted; /* zrt_pool_adopt: counted here, owned (and freed) elsewhere */
} zrt_pool_entry;

#define ZRT_POOL_TOMB ((void *)1)

struct zrt_pool {
  char name[64];
  char hint[256];
  size_t capacity;
  zrt_pool_raw_alloc_fn alloc;
  zrt_pool_raw_free_fn free_fn;
  void *ctx;
  pthread_mutex_t mu;
  size_t cur[ZRT_MEM_NCAT], peak[ZRT_MEM_NCAT];
  size_t cur_total, peak_total;
  size_t ooms; /* refused allocations (zrt_pool_oom_count) */
  zrt_pool_entry *tab;
  size_t tab_cap, tab_used; /* used counts live + tombstones */
};

const char *zrt_mem_category_name(zrt_mem_category c) {
  static const char *names[ZRT_MEM_NCAT] = {"params16",    "grads", "master32", "optim_state",
                                            "activations", "comm",  "other"};
  return (c >= 0 && c < ZRT_MEM_NCAT) ? names[c] : "invalid";
}

static size_t zrt_pool_hash(const void *p, size_t cap) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return (size_t)(x & (cap - 1));
}

static zrt_status zrt_pool_grow(zrt_pool *pool) {
  size_t ncap = pool->tab_cap ? pool->tab_cap * 2 : 256;
  zrt_pool_entry *nt = calloc(ncap, sizeof *nt);
  if (!nt) return zrt_error(ZRT_ERR_OOM, "pool %s: cannot grow its bookkeeping table", pool->name);
  size_t live = 0;
  for (size_t i = 0; i < pool->tab_cap; i++) {
    zrt_pool_entry e = pool->tab[i];
    if (!e.ptr || e.ptr == ZRT_POOL_TOMB) continue;
    size_t h = zrt_pool_hash(e.ptr, ncap);
    while (nt[h].ptr) h = (h + 1) & (ncap - 1);
    nt[h] = e;
    live++;
  }
  free(pool->tab);
  pool->tab = nt;
  pool->tab_cap = ncap;
  pool->tab_used = live;
  return ZRT_OK;
}

zrt_status zrt_pool_create(const char *name, size_t capacity, zrt_pool_raw_alloc_fn alloc,
                           zrt_pool_raw_free_fn free_fn, void *ctx, zrt_pool **out) {
  if (!alloc || !free_fn || !out) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_pool_create: NULL");
  zrt_pool *p = calloc(1, sizeof *p);
  if (!p) return zrt_error(ZRT_ERR_OOM, "zrt_pool_create: out of host memory");
  snprintf(p->name, sizeof p->name, "%s", name ? name : "pool");
  p->capacity = capacity;
  p->alloc = alloc;
  p->free_fn = free_fn;
  p->ctx = ctx;
  pthread_mutex_init(&p->mu, NULL);
  zrt_status st = zrt_pool_grow(p);
  if (st != ZRT_OK) {
    free(p);
    return st;
  }
  *out = p;
  return ZRT_OK;
}

void zrt_pool_destroy(zrt_pool *pool) {
  if (!pool) return;
  for (size_t i = 0; i < pool->tab_cap; i++) {
    zrt_pool_entry e = pool->tab[i];
    if (e.ptr && e.ptr != ZRT_POOL_TOMB && !e.adopted) pool->free_fn(pool->ctx, e.ptr, e.bytes);
  }
  free(pool->tab);
  pthread_mutex_destroy(&pool->mu);
  free(pool);
}

size_t zrt_pool_oom_count(const zrt_pool *pool) {
  return pool ? __atomic_load_n(&pool->ooms, __ATOMIC_RELAXED) : 0;
}

void zrt_pool_set_hint(zrt_pool *pool, const char *hint) {
  if (pool) snprintf(pool->hint, sizeof pool->hint, "%s", hint ? hint : "");
}

static zrt_status zrt_pool_oom(zrt_pool *pool, size_t bytes, zrt_mem_category cat,
                               const char *why) {
  char msg[2048], a[32], b[32];
  __atomic_fetch_add(&pool->ooms, 1, __ATOMIC_RELAXED);
  int off =
      snprintf(msg, sizeof msg, "%s memory exhausted: cannot allocate %s for %s (%s); in use %s",
               pool->name, zrt_format_size(bytes, a, sizeof a), zrt_mem_category_name(cat), why,
               zrt_format_size(pool->cur_total, b, sizeof b));
  if (pool->capacity) {
    off += snprintf(msg + off, sizeof msg - off, " of limit %s",
                    zrt_format_size(pool->capacity, a, sizeof a));
  }
  off += snprintf(msg + off, sizeof msg - off, " [");
  for (int c = 0; c < ZRT_MEM_NCAT && off < (int)sizeof msg; c++) {
    off += snprintf(msg + off, sizeof msg - off, "%s%s %s", c ? ", " : "",
                    zrt_mem_category_name((zrt_mem_category)c),
                    zrt_format_size(pool->cur[c], a, sizeof a));
  }
  if (off < (int)sizeof msg) off += snprintf(msg + off, sizeof msg - off, "]");
  if (pool->hint[0] && off < (int)sizeof msg)
    snprintf(msg + off, sizeof msg - off, ". %s", pool->hint);
  return zrt_error(ZRT_ERR_OOM, "%s", msg);
}

/* Room for bytes more of cat (the capacity; the table). Mutex held. */
static zrt_status zrt_pool_room(zrt_pool *pool, size_t bytes, zrt_mem_category cat) {
  if (pool->capacity && (bytes > pool->capacity || pool->cur_total > pool->capacity - bytes))
    return zrt_pool_oom(pool, bytes, cat, "over the capacity");
  if ((pool->tab_used + 1) * 2 > pool->tab_cap) ZRT_CHECK(zrt_pool_grow(pool));
  return ZRT_OK;
}

/* Records p and counts it. Mutex held, room made. */
static void zrt_pool_insert(zrt_pool *pool, void *p, size_t bytes, zrt_mem_category cat,
                            int adopted) {
  size_t h = zrt_pool_hash(p, pool->tab_cap);
  while (pool->tab[h].ptr && pool->tab[h].ptr != ZRT_POOL_TOMB) h = (h + 1) & (pool->tab_cap - 1);
  if (!pool->tab[h].ptr) pool->tab_used++;
  pool->tab[h] = (zrt_pool_entry){p, bytes, (int)cat, adopted};
  pool->cur[cat] += bytes;
  pool->cur_total += bytes;
  if (pool->cur[cat] > pool->peak[cat]) pool->peak[cat] = pool->cur[cat];
  if (pool->cur_total > pool->peak_total) pool->peak_total = pool->cur_total;
}

zrt_status zrt_pool_alloc(zrt_pool *pool, size_t bytes, zrt_mem_category cat, void **out) {
  if (!pool || !out || cat < 0 || cat >= ZRT_MEM_NCAT)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_pool_alloc: bad arguments");
  *out = NULL;
  if (bytes == 0) bytes = 1;
  pthread_mutex_lock(&pool->mu);
  zrt_status st = ZRT_OK;
  ZRT_CHECK_GOTO(zrt_pool_room(pool, bytes, cat), st, out);
  void *p = NULL;
  st = pool->alloc(pool->ctx, bytes, &p);
  if (st != ZRT_OK || !p) {
    if (st == ZRT_OK) st = ZRT_ERR_OOM;
    if (st == ZRT_ERR_OOM) st = zrt_pool_oom(pool, bytes, cat, "the allocator refused");
    goto out;
  }
  zrt_pool_insert(pool, p, bytes, (zrt_mem_category)cat, 0);
  *out = p;
out:
  pthread_mutex_unlock(&pool->mu);
  return st;
}

zrt_status zrt_pool_reserve(zrt_pool *pool, size_t bytes, zrt_mem_category cat) {
  if (!pool || cat < 0 || cat >= ZRT_MEM_NCAT)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_pool_reserve: bad arguments");
  pthread_mutex_lock(&pool->mu);
  zrt_status st = zrt_pool_room(pool, bytes ? bytes : 1, cat);
  pthread_mutex_unlock(&pool->mu);
  return st;
}

zrt_status zrt_pool_adopt(zrt_pool *pool, void *ptr, size_t bytes, zrt_mem_category cat) {
  if (!pool || !ptr || cat < 0 || cat >= ZRT_MEM_NCAT)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_pool_adopt: bad arguments");
  if (bytes == 0) bytes = 1;
  pthread_mutex_lock(&pool->mu);
  zrt_status st = zrt_pool_room(pool, bytes, cat);
  if (st == ZRT_OK) zrt_pool_insert(pool, ptr, bytes, cat, 1);
  pthread_mutex_unlock(&pool->mu);
  return st;
}

void zrt_pool_free(zrt_pool *pool, void *ptr) {
  if (!pool || !ptr) return;
  pthread_mutex_lock(&pool->mu);
  size_t h = zrt_pool_hash(ptr, pool->tab_cap);
  while (pool->tab[h].ptr) {
    if (pool->tab[h].ptr == ptr) {
      zrt_pool_entry e = pool->tab[h];
      pool->tab[h].ptr = ZRT_POOL_TOMB;
      pool->cur[e.cat] -= e.bytes;
      pool->cur_total -= e.bytes;
      pthread_mutex_unlock(&pool->mu);
      if (!e.adopted) pool->free_fn(pool->ctx, ptr, e.bytes);
      return;
    }
    h = (h + 1) & (pool->tab_cap - 1);
  }
  pthread_mutex_unlock(&pool->mu);
  zrt_log(ZRT_LOG_ERROR, "pool %s: free of a pointer it does not own (%p) ignored", pool->name,
          ptr);
}

void zrt_pool_stats(const zrt_pool *pool, zrt_mem_stats *out) {
  memset(out, 0, sizeof *out);
  if (!pool) return;
  zrt_pool *p = (zrt_pool *)pool;
  pthread_mutex_lock(&p->mu);
  memcpy(out->current, p->cur, sizeof out->current);
  memcpy(out->peak, p->peak, sizeof out->peak);
  out->current_total = p->cur_total;
  out->peak_total = p->peak_total;
  out->capacity = p->capacity;
  pthread_mutex_unlock(&p->mu);
}

void zrt_pool_reset_peak(zrt_pool *pool) {
  if (!pool) return;
  pthread_mutex_lock(&pool->mu);
  memcpy(pool->peak, pool->cur, sizeof pool->peak);
  pool->peak_total = pool->cur_total;
  pthread_mutex_unlock(&pool->mu);
}

size_t zrt_pool_capacity(const zrt_pool *pool) { return pool ? pool->capacity : 0; }

int zrt_pool_find(const zrt_pool *pool, const void *ptr, void **base, size_t *bytes,
                  zrt_mem_category *cat) {
  if (!pool || !pool->tab) return 0;
  const unsigned char *q = ptr;
  for (size_t i = 0; i < pool->tab_cap; i++) {
    zrt_pool_entry e = pool->tab[i];
    if (!e.ptr || e.ptr == ZRT_POOL_TOMB) continue;
    const unsigned char *p = e.ptr;
    if (q >= p && q < p + e.bytes) {
      *base = e.ptr;
      *bytes = e.bytes;
      *cat = (zrt_mem_category)e.cat;
      return 1;
    }
  }
  return 0;
}
