/*
 * checkpoint_internal.h — what checkpoint.c (save, directories, lock) and
 * checkpoint_load.c (load, peek) share: the ranks' agreement on a status,
 * the host staging pool, which state sections this engine keeps, the
 * optimizer's name in the meta file, and the exact JSON integer reader.
 * Private to checkpoint/.
 */
#ifndef ZRT_CHECKPOINT_INTERNAL_H
#define ZRT_CHECKPOINT_INTERNAL_H

#include <stdint.h>

#include "engine_state.h"
#include "pool.h"
#include <cjson/cJSON.h>

/* Every rank passes its local status; returns OK only when all succeeded,
 * else the first failing rank's status with its message (prefixed "rank q:"
 * on the other ranks). extra[0..nextra) are summed across ranks. Collective. */
zrt_status zrt_ckpt_agree(zrt_engine *eng, zrt_status st, float *extra, int nextra);
/* A pool over plain host memory for staging shards (save: one module at a
 * time; load: the rank's whole states). */
zrt_status zrt_ckpt_staging_pool(zrt_pool **out);
/* 1 when this engine keeps the state of kind (ZRT_CKPT_MASTER, _EXP_AVG,
 * _EXP_AVG_SQ, _PARAM16: checkpoint_format.h). */
int zrt_ckpt_engine_has(const zrt_engine *eng, int kind);
/* The optimizer's name as meta.json's "optimizer" holds it. */
const char *zrt_ckpt_optim_name(zrt_optim_type t);
/* An integer field of a JSON object, exactly representable and in
 * [lo, hi]; dflt otherwise (never a cast of an out-of-range double). */
int64_t zrt_ckpt_json_int(const cJSON *o, const char *k, int64_t lo, int64_t hi, int64_t dflt);

#endif
