/*
 * test_engine_api.c — misuse of the engine calls that must come before or
 * after zrt_engine_build (one rank, comm self): each fails with
 * ZRT_ERR_INVALID_ARG and a message saying what to do, and changes nothing.
 */
#include <string.h>

#include "zt_engine.h"
#include "ztest.h"

int main(void) {
  zrt_config *cfg;
  ZT_OK(zrt_config_create(&cfg));
  /* the model computes on the host: pin the CPU backend (auto picks CUDA on a GPU) */
  ZT_OK(zrt_config_set(cfg, "zrt.backend", zt_host_backend(), "test"));
  ZT_CHECK(zrt_engine_set_activation_bytes(NULL, 1) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "zrt_engine_set_activation_bytes: NULL engine");
  zrt_engine *eng;
  ZT_OK(zrt_engine_create(cfg, &eng));
  int mid, pid;
  ZT_OK(zrt_module_add(eng, "m", &mid));
  int64_t shape[1] = {64};
  zrt_init init = {ZRT_INIT_ZEROS, 0};
  ZT_OK(zrt_param_add(eng, mid, "m.w", 1, shape, init, 0, &pid));
  ZT_OK(zrt_engine_set_activation_bytes(eng, 4096));
  ZT_OK(zrt_engine_build(eng));
  ZT_CHECK(zt_probe(eng).activation_bytes == 4096);
  ZT_CHECK(zrt_engine_set_activation_bytes(eng, 1) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "call it before zrt_engine_build");
  ZT_CHECK(zt_probe(eng).activation_bytes == 4096);
  zrt_engine_destroy(eng);
  zrt_config_destroy(cfg);
  ZT_DONE();
}
