/*
 * engine_layout.c — the engine's modules laid out by the pure rules of
 * sharding/layout.h (offsets, padded, part), the extents and parameter
 * pieces of a rank, partitioned init (init values are computed from
 * (seed, name hash, element index) only, so any slice can be produced
 * alone), and stage 3's shard arena: on the host, every module's 16-bit
 * shard in the comm's shared memory, so that the coordinator's all-gathers
 * run zero-copy (comm/comm_shm_zc.c reads each peer's send in place).
 */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "rng.h"

/* Bytes of module me's shard slice in the arena (64-byte aligned). */
static size_t zrt_shard_slice(const zrt_module_entry *me, size_t ws) {
  return ZRT_ALIGN_UP((size_t)me->part * ws, (size_t)64);
}

static int zrt_shard_in_arena(const zrt_engine *eng, const zrt_module_entry *me) {
  return eng->policy->shard_params && !me->shard16_nvme;
}

zrt_status zrt_engine_shard_arena_create(zrt_engine *eng) {
  eng->shard_arena = NULL;
  eng->shard_arena_used = 0;
  /* host memory the comm can share: its buffers would be the pools' own */
  if (!eng->policy->shard_params || eng->backend->device_id >= 0 || !eng->comm ||
      !eng->comm->iface->mem_alloc)
    return ZRT_OK;
  size_t ws = zrt_dtype_size(eng->dtype), total = 0, in_host = 0, in_dev = 0;
  for (int m = 0; m < eng->nmodules; m++) {
    const zrt_module_entry *me = &eng->modules[m];
    if (!zrt_shard_in_arena(eng, me)) continue;
    total += zrt_shard_slice(me, ws);
    *(me->shard16_host ? &in_host : &in_dev) += (size_t)me->part * ws;
  }
  if (!total) return ZRT_OK;
  /* the capacity first, agreed over the ranks (zrt_comm_buf_alloc's rule) */
  zrt_status st = in_host ? zrt_pool_reserve(eng->host_pool, in_host, ZRT_MEM_PARAMS16) : ZRT_OK;
  if (st == ZRT_OK && in_dev) st = zrt_pool_reserve(eng->backend->pool, in_dev, ZRT_MEM_PARAMS16);
  ZRT_CHECK(zrt_comm_agree(eng->comm, st, "stage 3 shards in the comm's memory"));
  void *p = NULL;
  ZRT_CHECK(zrt_comm_mem_alloc(eng->comm, total, &p));
  eng->shard_arena = p;
  return ZRT_OK;
}

zrt_status zrt_engine_alloc_shard16(zrt_engine *eng, int m) {
  zrt_module_entry *me = &eng->modules[m];
  size_t ws = zrt_dtype_size(eng->dtype), bytes = (size_t)me->part * ws;
  zrt_pool *pool = me->shard16_host ? eng->host_pool : eng->backend->pool;
  if (!eng->shard_arena || !zrt_shard_in_arena(eng, me)) {
    if (me->shard16_host) return zrt_pool_alloc(pool, bytes, ZRT_MEM_PARAMS16, &me->shard16);
    return zrt_backend_alloc(eng->backend, bytes, ZRT_MEM_PARAMS16, &me->shard16);
  }
  void *p = eng->shard_arena + eng->shard_arena_used;
  /* adopted: freeing it through its pool only stops counting it */
  ZRT_CHECK(zrt_pool_adopt(pool, p, bytes, ZRT_MEM_PARAMS16));
  eng->shard_arena_used += zrt_shard_slice(me, ws);
  me->shard16 = p;
  return ZRT_OK;
}

void zrt_engine_shard_arena_free(zrt_engine *eng) {
  if (eng->shard_arena) zrt_comm_mem_free(eng->comm, eng->shard_arena);
  eng->shard_arena = NULL;
  eng->shard_arena_used = 0;
}

void zrt_engine_layout(zrt_engine *eng) {
  for (int m = 0; m < eng->nmodules; m++) {
    zrt_module_entry *me = &eng->modules[m];
    int64_t off = 0;
    for (int i = 0; i < me->nparams; i++) {
      zrt_param_entry *p = &eng->params[me->params[i]];
      p->offset = off;
      off += p->numel;
    }
    me->numel = off;
    me->padded = zrt_layout_padded(off, eng->world);
    me->part = me->padded / eng->world;
  }
}

zrt_status zrt_engine_shard_range(const zrt_engine *eng, int module, int rank, int64_t *off,
                                  int64_t *len) {
  if (!eng || module < 0 || module >= eng->nmodules || rank < 0 || rank >= eng->world)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_engine_shard_range: module %d / rank %d out of range", module, rank);
  zrt_extent e = zrt_layout_shard(eng->modules[module].part, rank);
  *off = e.off;
  *len = e.len;
  return ZRT_OK;
}

void zrt_engine_master_extent(const zrt_engine *eng, int module, int64_t *flat_off, int64_t *len) {
  const zrt_module_entry *me = &eng->modules[module];
  zrt_extent e = zrt_layout_master_extent(eng->policy, me->padded, me->part, eng->rank);
  *flat_off = e.off;
  *len = e.len;
}

zrt_status zrt_engine_each_piece(zrt_engine *eng, int m,
                                 zrt_status (*fn)(zrt_engine *, const zrt_engine_piece *, void *),
                                 void *arg) {
  zrt_module_entry *me = &eng->modules[m];
  size_t ws = zrt_dtype_size(eng->dtype);
  int64_t off, len;
  zrt_engine_master_extent(eng, m, &off, &len);
  /* stage 3 keeps only the owned shard, indexed below as if it were the
   * full buffer; with offload_param nvme there is none (w16 NULL: the
   * weights are rewritten from the masters) */
  int sh = eng->policy->shard_params;
  char *base = sh ? (char *)me->shard16 : (char *)me->full16;
  int64_t base_at = sh ? off : 0; /* flat element at base[0] */
  for (int i = 0; i < me->nparams; i++) {
    const zrt_param_entry *p = &eng->params[me->params[i]];
    int64_t lo = ZRT_MAX(p->offset, off), hi = ZRT_MIN(p->offset + p->numel, off + len);
    if (lo >= hi) continue;
    zrt_engine_piece pc = {.module = m,
                           .param = p,
                           .k = (size_t)(lo - off),
                           .n = (size_t)(hi - lo),
                           .w16 = base ? base + (size_t)(lo - base_at) * ws : NULL};
    ZRT_CHECK(fn(eng, &pc, arg));
  }
  return ZRT_OK;
}

int zrt_engine_param_at(const zrt_engine *eng, int module, int64_t elem) {
  const zrt_module_entry *me = &eng->modules[module];
  for (int i = 0; i < me->nparams; i++) {
    const zrt_param_entry *p = &eng->params[me->params[i]];
    if (elem >= p->offset && elem < p->offset + p->numel) return me->params[i];
  }
  return -1;
}

static float zrt_shard_init_one(const zrt_engine *eng, const zrt_param_entry *p, int64_t index) {
  switch (p->init.kind) {
  case ZRT_INIT_ZEROS: return 0.0f;
  case ZRT_INIT_ONES: return 1.0f;
  case ZRT_INIT_CONST: return p->init.a;
  case ZRT_INIT_NORMAL:
    return (float)(p->init.a * zrt_rng_normal(eng->cfg->seed, p->name_hash, (uint64_t)index));
  case ZRT_INIT_UNIFORM:
    return (float)(p->init.a *
                   (2.0 * zrt_rng_uniform(eng->cfg->seed, p->name_hash, (uint64_t)index) - 1.0));
  }
  return 0.0f;
}

float zrt_engine_param_init_value(const zrt_engine *eng, int param, int64_t index) {
  return zrt_shard_init_one(eng, &eng->params[param], index);
}

void zrt_engine_init_values(const zrt_engine *eng, int module, int64_t flat_off, int64_t len,
                            float *dst) {
  const zrt_module_entry *me = &eng->modules[module];
  memset(dst, 0, (size_t)len * sizeof(float));
  for (int i = 0; i < me->nparams; i++) {
    const zrt_param_entry *p = &eng->params[me->params[i]];
    int64_t lo = ZRT_MAX(p->offset, flat_off);
    int64_t hi = ZRT_MIN(p->offset + p->numel, flat_off + len);
    for (int64_t e = lo; e < hi; e++) dst[e - flat_off] = zrt_shard_init_one(eng, p, e - p->offset);
  }
}
