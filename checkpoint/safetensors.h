/*
 * safetensors.h — a writer and a validating header reader for the
 * Hugging Face safetensors format, shared by `zrt consolidate`, checkpoint
 * tests and (offered) zrt_engine_load_safetensors.
 *
 * Format: u64 little-endian N, then N bytes of JSON header
 *   {"__metadata__": {"k": "v", ...},
 *    "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...}
 * then the data section; offsets are relative to its start. The writer pads
 * the header with spaces to a multiple of 8 (so every tensor of the data
 * section starts 8-byte aligned when sizes are) and lays tensors out in
 * the order given, back to back. The reader enforces what the reference
 * implementation enforces: a header that fits the file, known dtypes,
 * byte sizes equal to numel * dtype size, and tensors that tile the data
 * section exactly with no gap or overlap.
 *
 * Writes are atomic (checkpoint_io.h): the file appears complete or not at
 * all. Reading is by byte range (pread), so a rank can read just its shard
 * of a tensor.
 */
#ifndef ZRT_SAFETENSORS_H
#define ZRT_SAFETENSORS_H

#include "checkpoint_io.h"

#define ZRT_ST_MAX_DIMS 8

/* Safetensors dtype names and element sizes. */
typedef enum zrt_st_dtype {
  ZRT_ST_F64 = 0,
  ZRT_ST_F32,
  ZRT_ST_F16,
  ZRT_ST_BF16,
  ZRT_ST_I64,
  ZRT_ST_I32,
  ZRT_ST_I16,
  ZRT_ST_I8,
  ZRT_ST_U8,
  ZRT_ST_BOOL,
  ZRT_ST_NDTYPES
} zrt_st_dtype;

const char *zrt_st_dtype_name(zrt_st_dtype dt); /* "F32", ... */
size_t zrt_st_dtype_size(zrt_st_dtype dt);
/* -1 when the name is unknown. */
int zrt_st_dtype_parse(const char *name);

typedef struct zrt_st_tensor {
  char name[256];
  zrt_st_dtype dtype;
  int ndim;
  int64_t shape[ZRT_ST_MAX_DIMS];
  uint64_t offset; /* absolute byte offset in the file (reader) */
  uint64_t nbytes;
} zrt_st_tensor;

/* Element count of a tensor (1 for a scalar). */
int64_t zrt_st_numel(const zrt_st_tensor *t);

/* ------------------------------------------------------------ writer */

typedef struct zrt_st_writer zrt_st_writer;

/* Starts a file with the given tensor descriptors (offset ignored; nbytes
 * is derived from dtype and shape) and string metadata pairs (meta_kv:
 * key, value, key, value, ..., NULL; may be NULL). Tensor data must then be
 * appended in descriptor order, exactly the declared byte counts in total. */
zrt_status zrt_st_writer_begin(const char *path, const zrt_st_tensor *tensors, size_t n,
                               const char *const *meta_kv, zrt_st_writer **out);
zrt_status zrt_st_writer_append(zrt_st_writer *w, const void *data, size_t nbytes);
/* Checks the byte count and commits (fsync, rename, dir fsync); frees w. */
zrt_status zrt_st_writer_finish(zrt_st_writer *w);
/* Drops the temporary file; frees w. Accepts NULL. */
void zrt_st_writer_abort(zrt_st_writer *w);

/* One-shot: data[i] holds tensor i. */
zrt_status zrt_st_write(const char *path, const zrt_st_tensor *tensors, const void *const *data,
                        size_t n, const char *const *meta_kv);

/* ------------------------------------------------------------ reader */

typedef struct zrt_st_file zrt_st_file;

/* Opens and validates the header; errors name the file and the tensor. */
zrt_status zrt_st_open(const char *path, zrt_st_file **out);
void zrt_st_close(zrt_st_file *f); /* accepts NULL */
size_t zrt_st_count(const zrt_st_file *f);
/* Tensors in data-offset order. */
const zrt_st_tensor *zrt_st_get(const zrt_st_file *f, size_t i);
/* NULL when absent. */
const zrt_st_tensor *zrt_st_find(const zrt_st_file *f, const char *name);
/* __metadata__ value, NULL when absent. */
const char *zrt_st_meta(const zrt_st_file *f, const char *key);
/* Reads n bytes starting byte_off bytes into tensor t. */
zrt_status zrt_st_read(const zrt_st_file *f, const zrt_st_tensor *t, uint64_t byte_off, void *dst,
                       size_t n);
const char *zrt_st_path(const zrt_st_file *f);

#endif
