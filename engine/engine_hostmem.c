/*
 * engine_hostmem.c — the program's host memory for asynchronous copies
 * (zrt_engine_host_alloc / zrt_engine_host_free in zrt.h): whole pages from
 * the engine's host pool (the offload's or the checkpoints' pool when build
 * made one, else one made here on first use, NUMA-placed as theirs but with
 * its pages left unpinned), each block registered with the backend through
 * zrt_hostpool_stage_alloc unless the pool's pages are pinned already, so a
 * copy between it and backend memory is stream-ordered and never a host wait
 * (cuda: cudaMemcpyAsync from page-locked memory; twin: the asynchronous copy
 * of registered memory; cpu: nothing to register, its copies are synchronous).
 *
 * Invariants: every live block is in eng->hbufs (pointer, accounted bytes,
 * whether stage_alloc registered it) and in the host pool under its category;
 * only pointers found there are freed, so a free of anything else (an
 * offload shard of the same pool included) changes nothing. A block is
 * unregistered and returned only after the backend finished the work queued
 * so far (a copy may still read or write it); zrt_engine_destroy returns
 * the blocks the program still holds before the host pool goes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_internal.h"

/* 1 when copies to and from host memory can be asynchronous on this backend
 * (it registers host memory: cuda, twin); the cpu backend's are synchronous. */
static int zrt_hostmem_async(const zrt_engine *eng) {
  return eng->backend->iface->host_register != NULL;
}

/* The engine's host pool, made here when build made none. */
static zrt_status zrt_hostmem_pool(zrt_engine *eng) {
  if (eng->host_pool) return ZRT_OK;
  zrt_hostpool_opts ho = {.numa_node = eng->cfg->numa_node,
                          .pin = 0, /* the blocks are registered one by one */
                          .allow_fallback = eng->cfg->pin_memory_fallback,
                          .capacity = 0};
  ZRT_CHECK(zrt_hostpool_create(&ho, eng->backend, &eng->hostpool));
  eng->host_pool = zrt_hostpool_pool(eng->hostpool);
  zrt_log(ZRT_LOG_DEBUG, "host memory for the program: a host pool on NUMA node %d, blocks %s",
          zrt_hostpool_node(eng->hostpool),
          zrt_hostmem_async(eng) ? "registered with the backend" : "plain (cpu backend)");
  return ZRT_OK;
}

static long zrt_hostmem_find(const zrt_engine *eng, const void *ptr) {
  for (int i = 0; i < eng->nhbufs; i++)
    if (eng->hbufs[i].ptr == ptr) return i;
  return -1;
}

zrt_status zrt_engine_host_alloc(zrt_engine *eng, size_t bytes, zrt_mem_category cat, void **ptr) {
  if (ptr) *ptr = NULL;
  if (!eng || !ptr)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_host_alloc: NULL %s",
                     eng ? "output pointer (ptr)" : "engine");
  if (bytes == 0)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_engine_host_alloc: 0 bytes requested; ask for the bytes the transfers "
                     "need (> 0)");
  if ((int)cat < 0 || cat >= ZRT_MEM_NCAT)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_engine_host_alloc: category %d is not a zrt_mem_category (0 to %d)",
                     (int)cat, ZRT_MEM_NCAT - 1);
  if (!eng->built)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_engine_host_alloc: call it after zrt_engine_build (build sets up the "
                     "engine's host pool, which this memory shares)");
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char sz[32];
  if (bytes > SIZE_MAX - page)
    return zrt_error(ZRT_ERR_OOM,
                     "zrt_engine_host_alloc: %zu bytes (%s) do not fit the address space once "
                     "rounded up to whole pages; ask for fewer bytes",
                     bytes, zrt_format_size(bytes, sz, sizeof sz));
  size_t whole = (bytes + page - 1) / page * page;
  if (eng->nhbufs == eng->caphbufs) {
    int cap = eng->caphbufs ? 2 * eng->caphbufs : 8;
    zrt_engine_hostbuf *n = realloc(eng->hbufs, (size_t)cap * sizeof *n);
    if (!n)
      return zrt_error(ZRT_ERR_OOM, "zrt_engine_host_alloc: out of host memory for its table");
    eng->hbufs = n;
    eng->caphbufs = cap;
  }
  zrt_status st = zrt_hostmem_pool(eng);
  void *p = NULL;
  int reg = 0;
  if (st == ZRT_OK)
    st = zrt_hostpool_stage_alloc(eng->host_pool, eng->backend, zrt_hostpool_pinned(eng->hostpool),
                                  whole, cat, &p, &reg);
  if (st != ZRT_OK) {
    char why[1024];
    snprintf(why, sizeof why, "%s", zrt_last_error());
    return zrt_error(st,
                     "zrt_engine_host_alloc: cannot allocate %zu bytes of host memory for %s (%s "
                     "in whole pages); ask for fewer bytes or free host memory. %s",
                     bytes, zrt_mem_category_name(cat), zrt_format_size(whole, sz, sizeof sz), why);
  }
  eng->hbufs[eng->nhbufs++] = (zrt_engine_hostbuf){p, whole, reg};
  *ptr = p;
  return ZRT_OK;
}

/* Returns block i (queued work already waited for) and drops it from the table. */
static void zrt_hostmem_release(zrt_engine *eng, long i) {
  zrt_engine_hostbuf b = eng->hbufs[i];
  eng->hbufs[i] = eng->hbufs[--eng->nhbufs];
  zrt_hostpool_stage_free(eng->host_pool, eng->backend, b.ptr, b.registered);
}

zrt_status zrt_engine_host_free(zrt_engine *eng, void *ptr) {
  if (!eng) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_host_free: NULL engine");
  if (!ptr) return ZRT_OK;
  long i = zrt_hostmem_find(eng, ptr);
  if (i < 0)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_engine_host_free(%p): not a block zrt_engine_host_alloc gave this engine "
                     "(or it was freed already); nothing was freed — free other memory with "
                     "the call that allocated it (zrt_engine_free for zrt_engine_alloc)",
                     ptr);
  /* a queued copy may still read or write it (cuda: a DMA from pages the
   * host is about to hand back; the twin dies on it) */
  if (zrt_hostmem_async(eng)) ZRT_CHECK(zrt_backend_synchronize(eng->backend, NULL));
  zrt_hostmem_release(eng, i);
  return ZRT_OK;
}

void zrt_engine_host_free_all(zrt_engine *eng) {
  if (eng->nhbufs && zrt_hostmem_async(eng) &&
      zrt_backend_synchronize(eng->backend, NULL) != ZRT_OK)
    zrt_log(ZRT_LOG_WARN, "host memory of the program: queued work failed before teardown: %s",
            zrt_last_error());
  while (eng->nhbufs) zrt_hostmem_release(eng, eng->nhbufs - 1);
  free(eng->hbufs);
  eng->hbufs = NULL;
  eng->caphbufs = 0;
}
