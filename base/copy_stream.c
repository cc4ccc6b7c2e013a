/*
 * copy_stream.c — zrt_copy_stream: the AVX-512 or AVX2 body as
 * zrt_isa_best() says, else 16-byte SSE2 non-temporal stores (every x86-64
 * CPU), else memcpy (another architecture: ordinary stores, the same
 * result).
 */
#include "copy_stream.h"

#include <stdint.h>
#include <string.h>

#include "cpu_features.h"

#if defined(__SSE2__)
#include <emmintrin.h>

void zrt_copy_stream_sse2(void *dst, const void *src, size_t bytes) {
  size_t h = (64 - ((uintptr_t)dst & 63)) & 63;
  if (h >= bytes) {
    memcpy(dst, src, bytes);
    return;
  }
  memcpy(dst, src, h);
  char *d = (char *)dst + h;
  const char *p = (const char *)src + h;
  size_t n = bytes - h, i = 0;
  for (; i + 64 <= n; i += 64)
    for (int j = 0; j < 64; j += 16)
      _mm_stream_si128((__m128i *)(d + i + j), _mm_loadu_si128((const __m128i *)(p + i + j)));
  memcpy(d + i, p + i, n - i);
}
#else
void zrt_copy_stream_sse2(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
#endif

void zrt_copy_stream(void *dst, const void *src, size_t bytes) {
#if defined(__SSE2__)
  zrt_isa isa = zrt_isa_best();
  if (isa == ZRT_ISA_AVX512)
    zrt_copy_stream_avx512(dst, src, bytes);
  else if (isa == ZRT_ISA_AVX2)
    zrt_copy_stream_avx2(dst, src, bytes);
  else
    zrt_copy_stream_sse2(dst, src, bytes);
#else
  memcpy(dst, src, bytes);
#endif
}

void zrt_store_fence(void) {
#if defined(__SSE2__)
  _mm_sfence();
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}
