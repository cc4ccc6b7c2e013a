/*
 * zt_data.h — deterministic test data shared by the comm tests
 * (tests/mpi/test_comm_*.c): a 32-bit integer hash to derive values from
 * (rank, index, salt), and a float rounded to what a dtype holds.
 */
#ifndef ZT_DATA_H
#define ZT_DATA_H

#include <stdint.h>

#include "dtype.h"

static inline uint32_t zt_mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

/* v as dt stores it (fp32: v itself). */
static inline float zt_round_to(zrt_dtype dt, float v) {
  uint32_t tmp[1];
  zrt_store_f(tmp, dt, 0, v);
  return zrt_load_f(tmp, dt, 0);
}

#endif
