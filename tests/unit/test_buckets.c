/*
 * test_buckets.c — the gradient buckets (sharding/bucket.h) in one process
 * over the self comm: a module's 16-bit gradients reduced in several
 * buckets (reduce-scatter and all-reduce modes, sync and async with a
 * drain) accumulate into the fp32 accumulator exactly as the host reference
 * (acc += convert(grad16) through the comm dtype), across two micro-batches;
 * the staging is accounted as ZRT_MEM_COMM (2 slots x (world + 1) x chunk
 * elements of the comm dtype) and returned at destroy. With host
 * accumulators (zrt_buckets_set_host, ZeRO-Offload's host gradient shard)
 * the same reductions land in a host-pool accumulator with the same bits,
 * the host staging is 2 x zrt_layout_bucket_host_stage elements of the
 * comm dtype in the host pool's ZRT_MEM_COMM, a host reduction without
 * set_host is refused, and destroy returns the host staging too.
 */
#include <stdlib.h>

#include "pool.h"

#include "bucket.h"
#include "dtype.h"
#include "layout.h"
#include "ztest.h"

/* v rounded through dtype cdt, as the bucket's staging holds it */
static float via(float v, zrt_dtype cdt) {
  float tmp = 0;
  zrt_store_f(&tmp, cdt, 0, v);
  return zrt_load_f(&tmp, cdt, 0);
}

static zrt_status host_alloc(void *ctx, size_t bytes, void **out) {
  (void)ctx;
  *out = malloc(bytes ? bytes : 1);
  return *out ? ZRT_OK : ZRT_ERR_OOM;
}
static void host_free(void *ctx, void *p, size_t bytes) {
  (void)ctx;
  (void)bytes;
  free(p);
}

static void run(zrt_dtype dt, zrt_dtype cdt, int all_reduce, int async, int host) {
  zrt_backend *be = NULL;
  zrt_comm *comm = NULL;
  ZT_OK(zrt_backend_create("cpu", 0, 0, &be));
  ZT_OK(zrt_comm_create("self", be, 0, &comm));
  int64_t numel = 1000, padded = zrt_layout_padded(numel, 1), part = padded;
  int64_t chunk = zrt_layout_bucket_chunk(96, 1, part); /* several buckets */
  ZT_CHECK(chunk == 96 && padded == 1024);
  zrt_buckets *b = NULL;
  ZT_OK(zrt_buckets_create(be, comm, dt, cdt, chunk, &b));
  zrt_mem_stats ms;
  zrt_pool_stats(be->pool, &ms);
  size_t cs = zrt_dtype_size(cdt), ws = zrt_dtype_size(dt);
  ZT_CHECK(ms.current[ZRT_MEM_COMM] == 2 * (1 + 1) * (size_t)chunk * cs);
  zrt_pool *hp = NULL;
  ZT_OK(zrt_pool_create("host", 0, host_alloc, host_free, NULL, &hp));

  void *g = NULL;
  float *acc = NULL;
  ZT_OK(zrt_backend_alloc(be, (size_t)padded * ws, ZRT_MEM_GRADS, &g));
  if (host) {
    ZT_CHECK(zrt_buckets_reduce(b, g, padded, part, (float *)g, 1, all_reduce, async) ==
             ZRT_ERR_INVALID_ARG); /* no host staging yet */
    const zrt_stage_policy *pol = zrt_stage_policy_of(all_reduce ? 0 : 2);
    int64_t hs = zrt_layout_bucket_host_stage(pol, chunk, 1);
    ZT_OK(zrt_buckets_set_host(b, hp, 0, hs));
    zrt_pool_stats(hp, &ms);
    ZT_CHECK(ms.current[ZRT_MEM_COMM] == 2 * zrt_layout_host_stage_bytes(hs, cs));
    ZT_OK(zrt_pool_alloc(hp, (size_t)padded * 4, ZRT_MEM_GRADS, (void **)&acc));
  } else {
    ZT_OK(zrt_backend_alloc(be, (size_t)padded * 4, ZRT_MEM_GRADS, (void **)&acc));
  }
  float *ref = calloc((size_t)padded, sizeof(float));
  for (int64_t i = 0; i < padded; i++) acc[i] = 0;
  for (int micro = 0; micro < 2; micro++) {
    for (int64_t i = 0; i < padded; i++) {
      float v = i < numel ? (float)((i * 7 + micro * 13) % 101) / 37.0f - 1.3f : 0.0f;
      zrt_store_f(g, dt, (size_t)i, v);
      ref[i] += via(zrt_load_f(g, dt, (size_t)i), cdt);
    }
    ZT_OK(zrt_buckets_reduce(b, g, padded, part, acc, host, all_reduce, async));
    /* the gradients may be overwritten as soon as reduce returns */
    for (int64_t i = 0; i < padded; i++) zrt_store_f(g, dt, (size_t)i, 1e6f);
    if (async) ZT_OK(zrt_buckets_drain(b));
  }
  char what[96];
  snprintf(what, sizeof what, "%s via %s %s %s into a %s accumulator", zrt_dtype_name(dt),
           zrt_dtype_name(cdt), all_reduce ? "all-reduce" : "reduce-scatter",
           async ? "async" : "sync", host ? "host" : "device");
  ZT_CLOSE_ARRAY(what, acc, ref, padded, 0.0);
  zrt_buckets_destroy(b);
  zrt_buckets_destroy(NULL);
  zrt_pool_stats(be->pool, &ms);
  ZT_CHECK(ms.current[ZRT_MEM_COMM] == 0);
  zrt_backend_free(be, g);
  if (host) {
    zrt_pool_free(hp, acc);
    zrt_pool_stats(hp, &ms);
    ZT_CHECK(ms.current[ZRT_MEM_COMM] == 0 && ms.current[ZRT_MEM_GRADS] == 0);
  } else {
    zrt_backend_free(be, acc);
  }
  zrt_pool_destroy(hp);
  free(ref);
  zrt_comm_destroy(comm);
  zrt_backend_destroy(be);
}

int main(void) {
  for (int host = 0; host < 2; host++)
    for (int ar = 0; ar < 2; ar++)
      for (int as = 0; as < 2; as++) {
        run(ZRT_BF16, ZRT_BF16, ar, as, host);
        run(ZRT_BF16, ZRT_F32, ar, as, host);
        run(ZRT_F16, ZRT_F16, ar, as, host);
        run(ZRT_F32, ZRT_F32, ar, as, host);
      }
  zrt_buckets *b = NULL;
  ZT_CHECK(zrt_buckets_create(NULL, NULL, ZRT_BF16, ZRT_BF16, 32, &b) == ZRT_ERR_INVALID_ARG);
  ZT_CHECK(b == NULL);
  ZT_DONE();
}
