/*
 * layout.c — the pure layout rules (layout.h): padding, partitions,
 * master extents and the bucket chunk. Used by the engine at build and by
 * the memory model, which must predict the engine's allocations exactly.
 */
#include "layout.h"

#define ZRT_LAYOUT_MAX(a, b) ((a) > (b) ? (a) : (b))

int64_t zrt_layout_padded(int64_t numel, int world) {
  int64_t unit = (int64_t)world * ZRT_LAYOUT_ALIGN_ELEMS;
  if (numel < 1) numel = 1;
  return (numel + unit - 1) / unit * unit;
}

zrt_extent zrt_layout_shard(int64_t part, int rank) {
  zrt_extent e = {(int64_t)rank * part, part};
  return e;
}

zrt_extent zrt_layout_master_extent(const zrt_stage_policy *pol, int64_t padded, int64_t part,
                                    int rank) {
  if (!pol->shard_optimizer) {
    zrt_extent e = {0, padded};
    return e;
  }
  return zrt_layout_shard(part, rank);
}

int64_t zrt_layout_bucket_chunk(int64_t reduce_bucket_size, int world, int64_t max_part) {
  int64_t maxpart = ZRT_LAYOUT_MAX((int64_t)ZRT_LAYOUT_ALIGN_ELEMS, max_part);
  int64_t chunk = reduce_bucket_size / world;
  chunk = chunk / ZRT_LAYOUT_ALIGN_ELEMS * ZRT_LAYOUT_ALIGN_ELEMS;
  if (chunk < ZRT_LAYOUT_ALIGN_ELEMS) chunk = ZRT_LAYOUT_ALIGN_ELEMS;
  return chunk > maxpart ? maxpart : chunk; /* no bucket larger than the largest module */
}

int zrt_layout_grad_acc_host(int offload_optimizer) { return offload_optimizer != 0; }

int zrt_layout_twin_split(int n, int64_t (*elems)(const void *arg, int i), const void *arg,
                          int64_t sub_group_size, double ratio, int *groups, int *first_cpu_group) {
  int G = 0;
  int64_t acc = 0;
  for (int i = 0; i < n; i++) {
    acc += elems(arg, i);
    if (acc >= sub_group_size || i == n - 1) {
      G++;
      acc = 0;
    }
  }
  /* DeepSpeed: int((1 - self.partial_offload) * sub_group_count) */
  double dev = (1.0 - ratio) * (double)G;
  int first = dev <= 0 ? 0 : dev >= (double)G ? G : (int)dev;
  if (groups) *groups = G;
  if (first_cpu_group) *first_cpu_group = first;
  int g = 0;
  acc = 0;
  for (int i = 0; i < n; i++) {
    if (g >= first) return i;
    acc += elems(arg, i);
    if (acc >= sub_group_size || i == n - 1) {
      g++;
      acc = 0;
    }
  }
  return n;
}

int64_t zrt_layout_bucket_host_stage(const zrt_stage_policy *pol, int64_t chunk, int world) {
  return pol->reduce_all_reduce ? chunk * (int64_t)world : chunk;
}

uint64_t zrt_layout_host_stage_bytes(int64_t elems, uint64_t elem_bytes) {
  uint64_t b = (uint64_t)elems * elem_bytes;
  return (b + ZRT_LAYOUT_HOST_PAGE - 1) / ZRT_LAYOUT_HOST_PAGE * ZRT_LAYOUT_HOST_PAGE;
}

int64_t zrt_layout_bucket_chunk_capped(int64_t reduce_bucket_size, int world, int64_t max_part,
                                       int comm_bytes, uint64_t capacity) {
  int64_t chunk = zrt_layout_bucket_chunk(reduce_bucket_size, world, max_part);
  if (!capacity || comm_bytes < 1) return chunk;
  uint64_t per_elem = 2 * ((uint64_t)world + 1) * (uint64_t)comm_bytes;
  uint64_t fit = capacity / ZRT_LAYOUT_BUCKET_CAP_DIV / per_elem;
  int64_t cap = (int64_t)(fit / ZRT_LAYOUT_ALIGN_ELEMS * ZRT_LAYOUT_ALIGN_ELEMS);
  if (cap < ZRT_LAYOUT_ALIGN_ELEMS) cap = ZRT_LAYOUT_ALIGN_ELEMS;
  return chunk > cap ? cap : chunk;
}
