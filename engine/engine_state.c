/*
 * engine_state.c — the accessors of engine_state.h: the engine's shape and
 * descriptors as the layers above it read them, the run state for
 * checkpoints (the counters, and the scaler's and scheduler's states
 * through their own accessors), the 16-bit shard a checkpoint saves, and
 * the checkpoint lock's slot. Invariant: a get followed by a set of the
 * same values leaves the engine as it was (what a resume relies on to be
 * bitwise); nothing here changes the engine's behaviour.
 */
#include "engine_state.h"

#include "engine_internal.h"

void zrt_engine_counters_get(const zrt_engine *eng, zrt_engine_counters_state *out) {
  *out = (zrt_engine_counters_state){.global_step = eng->global_step,
                                     .micro_step = eng->micro_step,
                                     .applied_steps = eng->applied_steps,
                                     .skipped_total = eng->skipped_total,
                                     .last_grad_norm = eng->last_grad_norm};
}

void zrt_engine_counters_set(zrt_engine *eng, const zrt_engine_counters_state *in) {
  eng->global_step = in->global_step;
  eng->micro_step = in->micro_step;
  eng->applied_steps = in->applied_steps;
  eng->skipped_total = in->skipped_total;
  eng->last_grad_norm = in->last_grad_norm;
}

void zrt_engine_scaler_get(const zrt_engine *eng, zrt_scaler_state *out) {
  zrt_scaler_state_get(&eng->scaler, out);
}

void zrt_engine_scaler_set(zrt_engine *eng, const zrt_scaler_state *in) {
  zrt_scaler_state_set(&eng->scaler, in);
}

void zrt_engine_sched_get(const zrt_engine *eng, zrt_sched_state *out) {
  zrt_sched_state_get(&eng->sched, out);
}

void zrt_engine_sched_set(zrt_engine *eng, const zrt_sched_state *in) {
  zrt_sched_state_set(&eng->sched, in);
}

void zrt_engine_view_get(const zrt_engine *eng, zrt_engine_view *out) {
  *out = (zrt_engine_view){.rank = eng->rank,
                           .world = eng->world,
                           .stage = eng->stage,
                           .built = eng->built,
                           .dtype = eng->dtype,
                           .comm_dtype = eng->comm_dtype,
                           .master_dtype = eng->master_dtype,
                           .state_dtype = eng->state_dtype,
                           .nmodules = eng->nmodules,
                           .nparams = eng->nparams,
                           .cfg = eng->cfg,
                           .config = eng->config,
                           .backend = eng->backend,
                           .comm = eng->comm,
                           .comm_name = eng->comm_name};
}

void zrt_engine_module_view_get(const zrt_engine *eng, int m, zrt_engine_module_view *out) {
  const zrt_module_entry *me = &eng->modules[m];
  *out = (zrt_engine_module_view){.name = me->name,
                                  .numel = me->numel,
                                  .padded = me->padded,
                                  .part = me->part,
                                  .nparams = me->nparams,
                                  .params = me->params,
                                  .optim_host = me->optim_host,
                                  .grad_host = me->grad_host};
}

const zrt_param_entry *zrt_engine_param_entry(const zrt_engine *eng, int p) {
  return &eng->params[p];
}

zrt_engine_ckpt_lock *zrt_engine_ckpt_lock_slot(zrt_engine *eng) { return &eng->ckpt_lock; }

int zrt_engine_has_shard16(const zrt_engine *eng) {
  if (!eng->policy->shard_params || eng->nmodules == 0) return 0;
  const zrt_module_entry *me = &eng->modules[0];
  return me->shard16 != NULL || me->shard16_nvme;
}

zrt_status zrt_engine_shard16_read(zrt_engine *eng, int module, void *dst) {
  const zrt_module_entry *me = &eng->modules[module];
  if (me->shard16_nvme) return zrt_engine_param_nvme_read(eng, module, dst);
  return zrt_backend_memcpy(eng->backend, dst, me->shard16,
                            (size_t)me->part * zrt_dtype_size(eng->dtype),
                            me->shard16_host ? ZRT_COPY_H2H : ZRT_COPY_D2H, NULL);
}
