/*
 * zt_engine.h — the engine as white-box tests read it, by value: the
 * accessor surface of engine/engine_state.h (the shape, module views,
 * counters, scaler state) and the test-only snapshot of
 * engine/engine_probe.h. Tests include this instead of the engine's
 * private struct (engine_internal.h stays inside engine/; the one
 * exception, tests/unit/test_layout.c, builds engines by hand to test
 * engine_layout.c).
 */
#ifndef ZT_ENGINE_H
#define ZT_ENGINE_H

#include "engine_probe.h"
#include "engine_state.h"

static inline zrt_engine_view zt_view(const zrt_engine *eng) {
  zrt_engine_view v;
  zrt_engine_view_get(eng, &v);
  return v;
}

static inline zrt_engine_module_view zt_module(const zrt_engine *eng, int m) {
  zrt_engine_module_view v;
  zrt_engine_module_view_get(eng, m, &v);
  return v;
}

static inline zrt_engine_counters_state zt_counters(const zrt_engine *eng) {
  zrt_engine_counters_state c;
  zrt_engine_counters_get(eng, &c);
  return c;
}

static inline zrt_scaler_state zt_scaler(const zrt_engine *eng) {
  zrt_scaler_state s;
  zrt_engine_scaler_get(eng, &s);
  return s;
}

static inline zrt_engine_probe zt_probe(const zrt_engine *eng) {
  zrt_engine_probe p;
  zrt_engine_probe_get(eng, &p);
  return p;
}

#endif
