/*
 * zt_memest.c — zt_memest.h: the memest layout read from a built engine.
 */
#include "zt_memest.h"

#include <string.h>

void zt_memest_layout_of(const zrt_engine *eng, zrt_memest_layout *lay) {
  memset(lay, 0, sizeof *lay);
  lay->world = eng->world;
  lay->stage = eng->stage;
  lay->dtype_bytes = (int)zrt_dtype_size(eng->dtype);
  lay->comm_bytes = (int)zrt_dtype_size(eng->comm_dtype);
  lay->optim_states = zrt_engine_optim_states(eng);
  /* from the config, not the engine's own choice */
  lay->master_bytes = eng->cfg->bf16_master_weights_and_grads ? 2 : 4;
  lay->state_bytes = eng->cfg->bf16_optimizer_states ? 2 : 4;
  for (int m = 0; m < eng->nmodules; m++) {
    lay->padded_total += eng->modules[m].padded;
    lay->max_module_padded = ZRT_MAX(lay->max_module_padded, eng->modules[m].padded);
  }
  lay->reduce_bucket_size = eng->cfg->reduce_bucket_size;
  lay->sub_group_size = eng->cfg->sub_group_size;
}
