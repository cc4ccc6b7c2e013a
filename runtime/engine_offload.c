/*
 * engine_offload.c — the engine's side of ZeRO-Offload: creates the
 * NUMA-pinned host pool and the offload pipe at build when
 * zero_optimization.offload_optimizer / offload_param ask for cpu or nvme,
 * marks modules whose optimizer state (master, s1, s2) or stage-3 16-bit
 * shard live there, and runs the offloaded optimizer step of one piece.
 *
 * The choice (eng->offload_opt / offload_par) comes from the config or from
 * stage "auto". NVMe for the optimizer state is accepted but the engine
 * keeps the state in the pinned host pool (logged once): the pipe's NVMe
 * mode swaps ONE registered shard per pipe and steps it with one set of
 * hyper-parameters, while the engine steps per parameter piece (no weight
 * decay on NO_DECAY params) across many modules.
 * The pipe's tile is zrt_memest_offload_tile so its host staging matches
 * the memory model. Invariant: eng->host_pool != NULL exactly when some
 * module is offloaded.
 */
#include <string.h>

#include "engine_internal.h"
#include "memest.h"

zrt_status zrt_engine_offload_setup(zrt_engine *eng) {
  const zrt_cfg *c = eng->cfg;
  int oo = eng->offload_opt != ZRT_OFFLOAD_NONE;
  int op = eng->offload_par != ZRT_OFFLOAD_NONE;
  if (op && eng->stage != 3)
    return zrt_error(ZRT_ERR_CONFIG,
                     "zero_optimization.offload_param needs zero_optimization.stage 3 (stage is "
                     "%d); set stage 3 or remove offload_param",
                     eng->stage);
  if (op && !oo)
    return zrt_error(ZRT_ERR_CONFIG,
                     "zero_optimization.offload_param without offload_optimizer is not supported; "
                     "set zero_optimization.offload_optimizer.device to cpu as well");
  if (op && eng->offload_par == ZRT_OFFLOAD_NVME)
    zrt_log_once("engine.nvme_param", ZRT_LOG_WARN,
                 "offload_param.device nvme: parameter shards are kept in the pinned host pool "
                 "(NVMe swap of parameters is not supported)");
  zrt_hostpool_opts ho = {.numa_node = c->numa_node,
                          .pin = c->offload_optimizer.pin_memory || c->offload_param.pin_memory,
                          .allow_fallback = c->pin_memory_fallback,
                          .capacity = 0};
  ZRT_CHECK(zrt_hostpool_create(&ho, eng->backend, &eng->hostpool));
  eng->host_pool = zrt_hostpool_pool(eng->hostpool);
  int nvme = eng->offload_opt == ZRT_OFFLOAD_NVME;
  zrt_memest_layout lay = {0};
  lay.world = eng->world;
  lay.stage = eng->stage;
  lay.sub_group_size = c->sub_group_size;
  for (int m = 0; m < eng->nmodules; m++)
    lay.max_module_padded = ZRT_MAX(lay.max_module_padded, eng->modules[m].padded);
  zrt_offload_opts oo_opts = {.tile_elems = (size_t)zrt_memest_offload_tile(&lay),
                              .nvme = 0,
                              .nvme_path = c->offload_optimizer.nvme_path,
                              .buffer_count = (int)c->offload_optimizer.buffer_count};
  if (nvme)
    zrt_log_once("engine.nvme", ZRT_LOG_WARN,
                 "offload_optimizer.device nvme: optimizer state is kept in the pinned host pool, "
                 "not on NVMe (the engine steps per parameter piece; the pipe's NVMe mode swaps "
                 "one shard per pipe), nvme_path is not used");
  ZRT_CHECK(zrt_offload_pipe_create(eng->backend, eng->hostpool, &oo_opts, &eng->offload));
  for (int m = 0; m < eng->nmodules; m++) {
    eng->modules[m].optim_host = 1;
    eng->modules[m].shard16_host = op;
  }
  zrt_log(ZRT_LOG_INFO, "offload: optimizer state in host memory (NUMA node %d, %s)%s",
          zrt_hostpool_node(eng->hostpool),
          zrt_hostpool_pinned(eng->hostpool) ? "pinned" : "unpinned",
          op ? ", 16-bit parameter shards too" : "");
  return ZRT_OK;
}

zrt_status zrt_engine_offload_step(zrt_engine *eng, const zrt_optim_hparams *hp, float *master,
                                   float *s1, float *s2, const float *grad, void *param16,
                                   size_t n) {
  return zrt_offload_pipe_step(eng->offload, hp, master, s1, s2, grad, ZRT_F32, param16, eng->dtype,
                               n);
}

void zrt_engine_offload_free(zrt_engine *eng, void *host_ptr) {
  if (host_ptr && eng->host_pool) zrt_pool_free(eng->host_pool, host_ptr);
}

void zrt_engine_offload_teardown(zrt_engine *eng) {
  zrt_offload_pipe_destroy(eng->offload);
  eng->offload = NULL;
  zrt_hostpool_destroy(eng->hostpool);
  eng->hostpool = NULL;
  eng->host_pool = NULL;
}
