/*
 * copy_stream.h — a host memory copy whose stores stream past the caches
 * (non-temporal), for copies whose destination is not read again soon:
 * the shm comm's large receive buffers, and the copy bandwidth that
 * `zrt-perf` compares against (glibc's memcpy keeps ordinary stores up to
 * its non-temporal threshold, which a VM's host-sized L3 puts above 64 MiB,
 * so its write-allocate reads cost it a third of the bandwidth).
 */
#ifndef ZRT_COPY_STREAM_H
#define ZRT_COPY_STREAM_H

#include <stddef.h>

/* dst <- src (no overlap): the 64-byte aligned middle of dst with
 * non-temporal stores (AVX-512 or AVX2 as zrt_isa_best() says, else SSE2),
 * head and tail ordinarily. Call zrt_store_fence() before another thread
 * or process may read dst. */
void zrt_copy_stream(void *dst, const void *src, size_t bytes);

/* Orders the non-temporal stores before it (sfence) ahead of every later
 * store: what makes them visible to another core. */
void zrt_store_fence(void);

/* The AVX-512 body (copy_stream_avx512.c); call only on an AVX-512 CPU. */
void zrt_copy_stream_avx512(void *dst, const void *src, size_t bytes);
/* The AVX2 body (copy_stream_avx2.c); call only on an AVX2 CPU. */
void zrt_copy_stream_avx2(void *dst, const void *src, size_t bytes);
/* The SSE2 body (any x86-64; copy_stream.c); memcpy elsewhere. */
void zrt_copy_stream_sse2(void *dst, const void *src, size_t bytes);

#endif
