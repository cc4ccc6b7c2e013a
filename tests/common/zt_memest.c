/*
 * zt_memest.c — zt_memest.h: the memest layout read from a built engine.
 */
#include "zt_memest.h"

#include <string.h>

void zt_memest_layout_of(const zrt_engine *eng, zrt_memest_layout *lay) {
  zrt_engine_view v;
  zrt_engine_view_get(eng, &v);
  memset(lay, 0, sizeof *lay);
  lay->world = v.world;
  lay->stage = v.stage;
  lay->dtype_bytes = (int)zrt_dtype_size(v.dtype);
  lay->comm_bytes = (int)zrt_dtype_size(v.comm_dtype);
  lay->optim_states = zrt_engine_optim_states(eng);
  /* from the config, not the engine's own choice */
  lay->master_bytes = v.cfg->bf16_master_weights_and_grads ? 2 : 4;
  lay->state_bytes = v.cfg->bf16_optimizer_states ? 2 : 4;
  for (int m = 0; m < v.nmodules; m++) {
    zrt_engine_module_view mv;
    zrt_engine_module_view_get(eng, m, &mv);
    lay->padded_total += mv.padded;
    lay->max_module_padded = ZRT_MAX(lay->max_module_padded, mv.padded);
  }
  lay->reduce_bucket_size = v.cfg->reduce_bucket_size;
  lay->sub_group_size = v.cfg->sub_group_size;
}
