/*
 * copy_stream_avx512.c — zrt_copy_stream's AVX-512 body (built with the
 * *_avx512.c flags; base/copy_stream.c calls it only on an AVX-512 CPU):
 * 64-byte loads, 64-byte non-temporal stores from dst's first 64-byte
 * boundary, memcpy for the head and the tail.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "copy_stream.h"

void zrt_copy_stream_avx512(void *dst, const void *src, size_t bytes) {
  size_t h = (64 - ((uintptr_t)dst & 63)) & 63;
  if (h >= bytes) {
    memcpy(dst, src, bytes);
    return;
  }
  memcpy(dst, src, h);
  char *d = (char *)dst + h;
  const char *p = (const char *)src + h;
  size_t n = bytes - h, i = 0;
  for (; i + 64 <= n; i += 64) _mm512_stream_si512((void *)(d + i), _mm512_loadu_si512(p + i));
  memcpy(d + i, p + i, n - i);
}
