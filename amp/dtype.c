/*
 * dtype.c — dtype names and sizes (public API); the conversions themselves
 * are inline in dtype.h.
 */
#include "amp/dtype.h"

size_t zrt_dtype_size(zrt_dtype dt) { return dt == ZRT_F32 ? 4 : 2; }

const char *zrt_dtype_name(zrt_dtype dt) {
  switch (dt) {
  case ZRT_F16: return "fp16";
  case ZRT_BF16: return "bf16";
  default: return "fp32";
  }
}
