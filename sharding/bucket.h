/*
 * bucket.h — the gradient buckets: bucketed reductions of 16-bit module
 * gradients into fp32 accumulators, with two staging slots so packing
 * bucket k+1 overlaps the collective of bucket k, and with overlap_comm the
 * last buckets of a module stay in flight while the program computes the
 * next module's backward. Built from (backend, comm, dtypes, chunk); owns
 * its staging (ZRT_MEM_COMM in the backend's pool) and its requests.
 *
 * A bucket is world * chunk elements of the comm dtype: for reduce-scatter,
 * rank-major pieces of every rank's slice (piece r = grad16[r*part + c0,
 * +n)), so rank r receives the sum of its own piece and accumulates it in
 * fp32 into its shard of the accumulator; for all-reduce (stage 0) a
 * contiguous stretch reduced in place and accumulated into the replicated
 * accumulator. Collectives are issued in the caller's order, identical on
 * every rank.
 *
 * Host accumulators (ZeRO-Offload: the fp32 gradient shard lives in the
 * host pool with the offloaded optimizer): after zrt_buckets_set_host, a
 * reduction with acc_host = 1 lands each reduced bucket in host memory —
 * its collective is waited on the caller's thread (where it was issued),
 * then the bucket's host thread copies the reduced 16-bit piece
 * device-to-host into that slot's pinned staging (its own copy stream on
 * CUDA) and adds it in fp32 into the host accumulator (zrt_cpu_grad_accumulate),
 * while the program goes on with its backward. The thread takes the
 * buckets in the order they were issued, so every element gets its
 * additions in the same order as the device path, and the same bits.
 * Where host functions are stream ops (cuda, the twin) neither thread waits: the
 * copy and the addition are queued on the host stream, and the drain
 * orders the backend's stream after them.
 */
#ifndef ZRT_BUCKET_H
#define ZRT_BUCKET_H

#include "comm.h"

typedef struct zrt_buckets zrt_buckets;

/* chunk: elements per rank per bucket (zrt_layout_bucket_chunk). */
zrt_status zrt_buckets_create(zrt_backend *be, zrt_comm *comm, zrt_dtype dtype,
                              zrt_dtype comm_dtype, int64_t chunk, zrt_buckets **out);
/* Waits for anything in flight (without accumulating) and frees. NULL ok. */
void zrt_buckets_destroy(zrt_buckets *b);
int64_t zrt_buckets_chunk(const zrt_buckets *b);

/* Enables host accumulators: two staging slots of stage_elems elements of
 * the comm dtype (zrt_layout_bucket_host_stage) in `host` (ZRT_MEM_COMM of
 * the host pool; pinned: its pages are pinned already, else the slots are
 * registered with the backend where host functions are stream ops,
 * zrt_hostpool_stage_alloc), a copy stream and the host thread. */
zrt_status zrt_buckets_set_host(zrt_buckets *b, zrt_pool *host, int pinned, int64_t stage_elems);

/* The dtype of the host accumulators of later reductions: ZRT_F32 (the
 * default) or ZRT_BF16 (bf16.bf16_master_weights_and_grads: the gradient
 * partition in bf16; each reduced bucket is added in fp32 and the sum
 * rounded to nearest even, zrt_cpu_grad_accumulate_to). acc then points at
 * elements of that dtype. Device accumulators stay fp32. */
zrt_status zrt_buckets_set_host_acc_dtype(zrt_buckets *b, zrt_dtype dt);

/* Reduces one module's grad16 (padded elements of dtype, world slices of
 * part) into acc: all_reduce = 1 sums the whole buffer into acc[0..padded)
 * on every rank, 0 reduce-scatters this rank's slice into acc[0..part).
 * acc_host: acc is host memory (needs zrt_buckets_set_host), otherwise
 * backend memory. async: the last buckets may still be in flight on return
 * (their staging holds the data; grad16 is free to reuse, acc is not final
 * until zrt_buckets_drain). */
zrt_status zrt_buckets_reduce(zrt_buckets *b, const void *grad16, int64_t padded, int64_t part,
                              float *acc, int acc_host, int all_reduce, int async);
/* Waits for every bucket in flight and accumulates it, oldest first (host
 * accumulators included: acc is final on return; where host functions are
 * stream ops, final for work queued on the backend's stream after the
 * return, and for the host once that stream is synchronized). */
zrt_status zrt_buckets_drain(zrt_buckets *b);

#endif
