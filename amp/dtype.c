/*
 * dtype.c — dtype names and sizes (public API), and the bulk host
 * conversions and 16-bit pairwise reduction with their run-time ISA choice;
 * the scalar conversions themselves are inline in dtype.h.
 *
 * The ISA follows base/cpu_features.c's choice (zrt_isa_best: cpuid once
 * per process, $ZRT_CPU_ISA may force a lesser path): AVX-512 kernels when it
 * says avx512, AVX2 (+F16C) kernels when it says avx2, the scalar reference
 * otherwise (gcc auto-vectorises that loop poorly because of the NaN
 * branches). Every path gives the same bits.
 */
#include "dtype.h"

#include "cpu_features.h"
#include "dtype_kernels.h"

size_t zrt_dtype_size(zrt_dtype dt) { return dt == ZRT_F32 ? 4 : 2; }

const char *zrt_dtype_name(zrt_dtype dt) {
  switch (dt) {
  case ZRT_F16: return "fp16";
  case ZRT_BF16: return "bf16";
  default: return "fp32";
  }
}

/* Cached once per process like the ISA it derives from (a cached cpu
 * parameter, DESIGN.md rule 5): the reduction runs inside MPI's progress
 * loop, once per segment. */
enum { DT_SCALAR, DT_AVX512, DT_AVX512_BF16, DT_AVX2 };
static int zrt_dtype_path_cached = -1; /* atomic: the twin converts on stream workers */

static int zrt_dtype_path(void) {
  int p = __atomic_load_n(&zrt_dtype_path_cached, __ATOMIC_RELAXED);
  if (p >= 0) return p;
  zrt_isa isa = zrt_isa_best();
  p = isa == ZRT_ISA_AVX512 ? (zrt_isa_has_avx512bf16() ? DT_AVX512_BF16 : DT_AVX512)
      : isa == ZRT_ISA_AVX2 ? DT_AVX2
                            : DT_SCALAR;
  __atomic_store_n(&zrt_dtype_path_cached, p, __ATOMIC_RELAXED);
  return p;
}

static void dt_widen(int path, float *dst, const uint16_t *src, zrt_dtype dt, size_t n) {
  if (path == DT_AVX2)
    zrt_dtype_widen_avx2(dst, src, dt, n);
  else
    zrt_dtype_widen_avx512(dst, src, dt, n);
}

static void dt_narrow(int path, uint16_t *dst, const float *src, zrt_dtype dt, size_t n) {
  if (path == DT_AVX2)
    zrt_dtype_narrow_avx2(dst, src, dt, n);
  else
    zrt_dtype_narrow_avx512(dst, src, dt, n, path == DT_AVX512_BF16);
}

void zrt_dtype_convert_scalar(void *dst, zrt_dtype dst_dt, const void *src, zrt_dtype src_dt,
                              size_t n) {
  if (dst_dt == src_dt) {
    memmove(dst, src, n * zrt_dtype_size(dst_dt));
    return;
  }
  /* Front to back: narrowing in place reads element i before any store
   * reaches it. */
  for (size_t i = 0; i < n; i++) zrt_store_f(dst, dst_dt, i, zrt_load_f(src, src_dt, i));
}

void zrt_dtype_convert_host(void *dst, zrt_dtype dst_dt, const void *src, zrt_dtype src_dt,
                            size_t n) {
  int path = dst_dt == src_dt ? 0 : zrt_dtype_path();
  if (path && src_dt != ZRT_F32 && dst_dt == ZRT_F32) {
    dt_widen(path, dst, src, src_dt, n);
  } else if (path && src_dt == ZRT_F32) {
    dt_narrow(path, dst, src, dst_dt, n);
  } else if (path) {
    /* fp16 <-> bf16: through fp32 in cache-sized pieces. */
    float tmp[1024];
    for (size_t i = 0; i < n; i += 1024) {
      size_t k = n - i < 1024 ? n - i : 1024;
      dt_widen(path, tmp, (const uint16_t *)src + i, src_dt, k);
      dt_narrow(path, (uint16_t *)dst + i, tmp, dst_dt, k);
    }
  } else {
    zrt_dtype_convert_scalar(dst, dst_dt, src, src_dt, n);
  }
}

void zrt_half_reduce_scalar(uint16_t *inout, const uint16_t *in, zrt_dtype dt, size_t n,
                            zrt_half_op op) {
  for (size_t i = 0; i < n; i++) {
    float a = zrt_load_f(inout, dt, i), b = zrt_load_f(in, dt, i);
    if (op == ZRT_HALF_SUM) {
      /* a NaN in inout wins, quieted by the narrowing (a + b of two NaNs
       * keeps whichever operand the compiler put first) */
      zrt_store_f(inout, dt, i, a != a ? a : a + b);
    } else if (a == a) { /* a NaN in inout stays */
      int take_b = b != b || (op == ZRT_HALF_MAX ? b > a : b < a);
      if (take_b) inout[i] = in[i];
    }
  }
}

void zrt_half_reduce(uint16_t *inout, const uint16_t *in, zrt_dtype dt, size_t n, zrt_half_op op) {
  int path = zrt_dtype_path();
  if (path == DT_AVX2)
    zrt_half_reduce_avx2(inout, in, dt, n, op);
  else if (path)
    zrt_half_reduce_avx512(inout, in, dt, n, op, path == DT_AVX512_BF16);
  else
    zrt_half_reduce_scalar(inout, in, dt, n, op);
}
