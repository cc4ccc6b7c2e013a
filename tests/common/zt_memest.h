/*
 * zt_memest.h — the memory model's layout of a built engine, for the tests
 * that compare the pools with engine/memest (tests/mpi/test_engine_*.c):
 * world, stage, the working and comm dtype sizes, the optimizer's state
 * count, the padded totals of the registered modules, and the config's
 * bucket and sub-group sizes. Offload flags, stage-3 windows, capacity,
 * activations and Twin-Flow are the caller's: each test states the
 * configuration it predicts for.
 */
#ifndef ZT_MEMEST_H
#define ZT_MEMEST_H

#include "engine_probe.h"
#include "engine_state.h"
#include "memest.h"

void zt_memest_layout_of(const zrt_engine *eng, zrt_memest_layout *lay);

#endif
