/*
 * safetensors_set.h — a set of safetensors files read as one model, the way
 * Hugging Face's from_pretrained finds them: a single file, a sharded
 * checkpoint's model.safetensors.index.json (its weight_map names the
 * shards), or a directory holding either (model.safetensors first, as HF).
 *
 * Names resolve exactly or with the "transformer." prefix a task head
 * (GPT2LMHeadModel) puts before its base model's names, so zrt's base names
 * find both layouts. Every shard is opened and validated (safetensors.h) at
 * open; a tensor appears in one shard only.
 */
#ifndef ZRT_SAFETENSORS_SET_H
#define ZRT_SAFETENSORS_SET_H

#include "safetensors.h"

typedef struct zrt_st_set zrt_st_set;

/* path: FILE.safetensors, an index .json, or a directory. Errors name what
 * was looked for and which shard failed. */
zrt_status zrt_st_set_open(const char *path, zrt_st_set **out);
void zrt_st_set_close(zrt_st_set *s); /* accepts NULL */
/* Finds `name` (or "transformer." + name); NULL when absent. *file gets
 * the shard holding it. */
const zrt_st_tensor *zrt_st_set_find(const zrt_st_set *s, const char *name,
                                     const zrt_st_file **file);
/* The shards, in the order they were opened (every tensor is in one). */
int zrt_st_set_nfiles(const zrt_st_set *s);
const zrt_st_file *zrt_st_set_file(const zrt_st_set *s, int i);
/* Reads tensor t (of shard f) elements [e0, e0 + n) converted to fp32;
 * F32, F16 and BF16 only. */
zrt_status zrt_st_set_read_f32(const zrt_st_file *f, const zrt_st_tensor *t, int64_t e0, int64_t n,
                               float *dst, void *scratch);

#endif
