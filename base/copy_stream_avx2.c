/*
 * copy_stream_avx2.c — zrt_copy_stream's AVX2 body (built with the *_avx2.c
 * flags; base/copy_stream.c calls it only when zrt_isa_best() says avx2):
 * 32-byte loads, 32-byte non-temporal stores, two per 64-byte line from
 * dst's first 64-byte boundary, memcpy for the head and the tail.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "copy_stream.h"

void zrt_copy_stream_avx2(void *dst, const void *src, size_t bytes) {
  size_t h = (64 - ((uintptr_t)dst & 63)) & 63;
  if (h >= bytes) {
    memcpy(dst, src, bytes);
    return;
  }
  memcpy(dst, src, h);
  char *d = (char *)dst + h;
  const char *p = (const char *)src + h;
  size_t n = bytes - h, i = 0;
  for (; i + 64 <= n; i += 64) {
    __m256i a = _mm256_loadu_si256((const __m256i *)(p + i));
    __m256i b = _mm256_loadu_si256((const __m256i *)(p + i + 32));
    _mm256_stream_si256((__m256i *)(d + i), a);
    _mm256_stream_si256((__m256i *)(d + i + 32), b);
  }
  memcpy(d + i, p + i, n - i);
}
