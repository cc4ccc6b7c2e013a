/*
 * layout.h — the pure layout rules of flat module buffers, shared by the
 * engine and the memory model (engine/memest.c) so the two cannot drift:
 * padding, each rank's partition, the master extent a stage keeps, and the
 * bucket chunk of the gradient reductions. Pure arithmetic, no state.
 *
 * A module's parameters sit back to back in one flat buffer of numel
 * elements, padded with zeros to `padded`, the smallest multiple of
 * world * ZRT_LAYOUT_ALIGN_ELEMS (at least one unit), so every rank owns an
 * equal slice [r*part, (r+1)*part) with part = padded / world, starting
 * 64-byte aligned for any dtype.
 */
#ifndef ZRT_LAYOUT_H
#define ZRT_LAYOUT_H

#include <stdint.h>

#include "stage_policy.h"

/* Partition granularity in elements per rank: 32 elements = 64 bytes of a
 * 16-bit dtype (128 of fp32), so every shard starts cache-line aligned. */
#define ZRT_LAYOUT_ALIGN_ELEMS 32

/* An element range [off, off + len) of a flat buffer. */
typedef struct zrt_extent {
  int64_t off, len;
} zrt_extent;

/* Padded flat size of numel elements for world ranks. */
int64_t zrt_layout_padded(int64_t numel, int world);

/* Rank rank's owned slice of a module of `part` elements per rank. */
zrt_extent zrt_layout_shard(int64_t part, int rank);

/* The extent of a module's fp32 master (and optimizer state and gradient
 * accumulator) that rank keeps under policy: the whole padded buffer when
 * the optimizer is not sharded, its owned slice otherwise. */
zrt_extent zrt_layout_master_extent(const zrt_stage_policy *pol, int64_t padded, int64_t part,
                                    int rank);

/* Elements per rank in one reduction bucket: reduce_bucket_size / world,
 * rounded down to the alignment unit (at least one unit), and no more than
 * the largest module's part (max_part, at least one unit). */
int64_t zrt_layout_bucket_chunk(int64_t reduce_bucket_size, int world, int64_t max_part);

/* The buckets' device staging (two slots of (world + 1) * chunk elements
 * of the comm dtype) may take at most 1 / ZRT_LAYOUT_BUCKET_CAP_DIV of a
 * device's capacity: DeepSpeed's default reduce_bucket_size (5e8 elements)
 * is 2 GB of bf16 per slot, more than a small device holds, and what is
 * in flight only buys overlap, so it yields to model states and
 * activations. 16 keeps it under the 10% headroom the engine leaves
 * unplanned (stage auto and the reuse fitting plan in 90% of the device). */
#define ZRT_LAYOUT_BUCKET_CAP_DIV 16

/* zrt_layout_bucket_chunk lowered, when capacity (bytes; 0 = unlimited)
 * is set, so that 2 * (world + 1) * chunk * comm_bytes <= capacity /
 * ZRT_LAYOUT_BUCKET_CAP_DIV (rounded down to the alignment unit, at least
 * one unit). The engine logs once when this lowers the chunk. */
int64_t zrt_layout_bucket_chunk_capped(int64_t reduce_bucket_size, int world, int64_t max_part,
                                       int comm_bytes, uint64_t capacity);

/* 1 when the fp32 gradient accumulator (the master extent's gradients) of a
 * module lives in the host pool: when that module's optimizer is offloaded
 * (cpu or nvme; with Twin-Flow only the modules past the split) the reduced
 * buckets land in host memory, where the CPU optimizer reads them
 * (DeepSpeed's ZeRO-Offload), so the device keeps no fp32 gradient shard
 * for it. */
int zrt_layout_grad_acc_host(int offload_optimizer);

/* Elements of the comm dtype in each of the two host staging slots of the
 * buckets when the accumulator is on the host: one reduced bucket, i.e.
 * world * chunk for an all-reduce (stage 0), chunk for a reduce-scatter. */
int64_t zrt_layout_bucket_host_stage(const zrt_stage_policy *pol, int64_t chunk, int world);
/* Bytes each such slot takes: `elems` of `elem_bytes` rounded up to whole
 * ZRT_LAYOUT_HOST_PAGE pages, so the buckets can register it with the
 * backend where the host pool is not pinned (zrt_hostpool_stage_alloc);
 * the memory model counts the same. */
#define ZRT_LAYOUT_HOST_PAGE 4096
uint64_t zrt_layout_host_stage_bytes(int64_t elems, uint64_t elem_bytes);

/* DeepSpeed's Twin-Flow placement (offload_optimizer.ratio, stage 3;
 * stage3.py _create_fp16_sub_groups and _create_fp32_partitions). The n
 * units (zrt: modules in registration order, elems(arg, i) = the unit's
 * elements per rank) form sub-groups by accumulation: a sub-group closes
 * after the unit that brings its elements to >= sub_group_size, or at the
 * last unit (so sub_group_size 0 makes every unit a sub-group and one at
 * least the total makes one sub-group). With G sub-groups, sub-group g is
 * stepped on the CPU iff g >= int((1 - ratio) * G), the product in double
 * and truncated as Python's int() does. Returns the first unit on the CPU
 * (n when none: ratio 0); *groups = G and *first_cpu_group (either may be
 * NULL). Pure: every rank gets the same split. */
int zrt_layout_twin_split(int n, int64_t (*elems)(const void *arg, int i), const void *arg,
                          int64_t sub_group_size, double ratio, int *groups, int *first_cpu_group);

#endif
