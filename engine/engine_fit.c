/*
 * engine_fit.c — the build's decisions from the memory model
 * (engine/memest.h): the layout summary the model reads of a registered
 * engine, stage "auto" (the fastest stage and offload whose predicted
 * device bytes fit 90% of the device), the stage-3 reuse distance fitted to
 * the device, and the model-states hint of an out-of-memory build. Moved
 * whole out of engine.c, which calls them from zrt_engine_build.
 *
 * Invariants: every decision is a pure function of the config, the layout
 * and the device capacity, so every rank reaches the same one without
 * communicating; none allocates.
 */
#include <stdio.h>
#include <string.h>

#include "engine_internal.h"
#include "memest.h"

/* Layout summary for the memory model: total padded elements. */
void zrt_engine_layout_totals(const zrt_engine *eng, zrt_memest_layout *lay) {
  memset(lay, 0, sizeof *lay);
  lay->world = eng->world;
  lay->dtype_bytes = (int)zrt_dtype_size(eng->dtype);
  lay->comm_bytes = (int)zrt_dtype_size(eng->comm_dtype);
  lay->comm_rounds = eng->comm_dtype != eng->dtype && eng->comm_dtype != ZRT_F32;
  lay->optim_states = zrt_engine_optim_states(eng);
  lay->master_bytes = (int)zrt_dtype_size(eng->master_dtype);
  lay->state_bytes = (int)zrt_dtype_size(eng->state_dtype);
  for (int m = 0; m < eng->nmodules; m++) {
    const zrt_module_entry *me = &eng->modules[m];
    lay->padded_total += me->padded;
    lay->max_module_padded = ZRT_MAX(lay->max_module_padded, me->padded);
    if (me->numel <= eng->cfg->stage3_param_persistence_threshold)
      lay->persistent_padded += me->padded;
  }
  lay->reduce_bucket_size = eng->cfg->reduce_bucket_size;
  lay->prefetch_elems = eng->cfg->stage3_prefetch_bucket_size;
  lay->reuse_elems = eng->reuse_distance;
  lay->max_live_elems = eng->cfg->stage3_max_live_parameters;
  lay->sub_group_size = eng->cfg->sub_group_size;
  lay->twin_device_padded = zrt_engine_twin_device_padded(eng);
  lay->stage = eng->stage;
  lay->offload_optimizer = eng->offload_opt != ZRT_OFFLOAD_NONE;
  lay->offload_param = eng->offload_par != ZRT_OFFLOAD_NONE;
  lay->offload_nvme = eng->offload_opt == ZRT_OFFLOAD_NVME;
  lay->offload_param_nvme = eng->offload_par == ZRT_OFFLOAD_NVME;
  lay->param_buffer_size = eng->cfg->offload_param.buffer_size;
  lay->param_buffer_count = eng->cfg->offload_param.buffer_count;
  lay->activation_bytes = eng->activation_bytes;
  lay->actckpt_blocks = eng->ack.n;
  lay->actckpt_bytes = eng->ack.bytes;
  lay->actckpt_cpu = eng->ack.cpu;
  lay->device_capacity = zrt_pool_capacity(eng->backend->pool);
}

/* Stage 3 with a device capacity: the reuse distance becomes the largest
 * value (at most the config's) whose extra gathered elements fit in 90% of
 * the capacity beside everything else the memory model predicts. Pure
 * function of the config and the layout, so every rank gets the same. */
void zrt_engine_fit_reuse(zrt_engine *eng) {
  int64_t want = eng->cfg->stage3_max_reuse_distance;
  size_t cap = zrt_pool_capacity(eng->backend->pool);
  eng->reuse_distance = want;
  if (!eng->policy->shard_params || cap == 0 || want <= 0) return;
  zrt_memest_layout lay;
  eng->reuse_distance = 0;
  zrt_engine_layout_totals(eng, &lay);
  eng->reuse_distance = zrt_memest_fit_reuse(&lay, cap, want); /* the rule estimate-memory uses */
  if (eng->reuse_distance < want) {
    zrt_memest_result r0;
    zrt_memest_predict(&lay, &r0);
    uint64_t room = zrt_memest_plan_bytes(cap);
    uint64_t spare = room > r0.device_total ? room - r0.device_total : 0;
    char b[32];
    zrt_log0(ZRT_LOG_INFO,
             "stage 3: stage3_max_reuse_distance %lld -> %lld elements so that modules kept "
             "gathered for reuse fit the device (%s spare in 90%% of its capacity)",
             (long long)want, (long long)eng->reuse_distance, zrt_format_size(spare, b, sizeof b));
  }
}

/* Stage "auto": the first candidate, fastest first, whose predicted
 * per-rank device bytes (model states + reduction buffers + the
 * activation bytes the program declared with
 * zrt_engine_set_activation_bytes) fit in 90% of the device pool. Offload candidates come after
 * every pure-device stage because they trade PCIe traffic and CPU time for memory. */
zrt_status zrt_engine_choose_stage(zrt_engine *eng) {
  eng->offload_opt = eng->cfg->offload_optimizer.device;
  eng->offload_par = eng->cfg->offload_param.device;
  /* kept-for-reuse copies are a cache sized after the choice (fit_reuse):
   * candidates are judged by what they cannot do without */
  eng->reuse_distance = 0;
  if (eng->stage >= 0) return ZRT_OK;
  size_t cap = zrt_pool_capacity(eng->backend->pool);
  if (cap == 0) {
    /* the fastest stage the config's own offload settings allow
     * (zrt_config_offload_rule) */
    int st0 = eng->offload_par != ZRT_OFFLOAD_NONE   ? 3
              : eng->offload_opt != ZRT_OFFLOAD_NONE ? 1
                                                     : 0;
    zrt_engine_set_stage(eng, st0);
    zrt_log0(ZRT_LOG_INFO, "stage auto: device memory is unlimited, picking stage %d (fastest%s)",
             st0, st0 ? " the offload settings allow" : "");
    return ZRT_OK;
  }
  /* the config's own offload settings are kept; auto only adds offload */
  static const struct {
    int stage, oo, op;
  } cand[] = {{0, 0, 0}, {1, 0, 0}, {2, 0, 0}, {3, 0, 0},
              {1, 1, 0}, {2, 1, 0}, {3, 1, 0}, {3, 1, 1}};
  int user_oo = eng->offload_opt != ZRT_OFFLOAD_NONE,
      user_op = eng->offload_par != ZRT_OFFLOAD_NONE;
  char b1[32], b2[32], b3[32];
  char acts[96];
  if (eng->activation_bytes)
    snprintf(acts, sizeof acts, "activations %s included",
             zrt_format_size(eng->activation_bytes, b3, sizeof b3));
  else
    snprintf(acts, sizeof acts,
             "activations not counted: the program did not declare them with "
             "zrt_engine_set_activation_bytes");
  for (size_t k = 0; k < sizeof cand / sizeof cand[0]; k++) {
    int oo = cand[k].oo || user_oo, op = cand[k].op || user_op;
    if (op && !zrt_stage_policy_of(cand[k].stage)->shard_params) continue;
    if (oo && cand[k].stage == 0) continue; /* offload_optimizer needs stage >= 1 */
    zrt_memest_layout lay;
    zrt_engine_set_stage(eng, cand[k].stage);
    zrt_engine_layout_totals(eng, &lay);
    lay.offload_optimizer = oo;
    lay.offload_param = op;
    zrt_memest_result r;
    zrt_memest_predict(&lay, &r);
    const char *what =
        op ? " + offload optimizer and params to cpu" : (oo ? " + offload optimizer to cpu" : "");
    if (r.device_total <= zrt_memest_plan_bytes(cap)) {
      if (oo && !user_oo) eng->offload_opt = ZRT_OFFLOAD_CPU;
      if (op && !user_op) eng->offload_par = ZRT_OFFLOAD_CPU;
      zrt_log0(ZRT_LOG_INFO,
               "stage auto: picking stage %d%s: predicted %s per rank on the device (host %llu "
               "bytes) fits 90%% of %s; every faster choice did not fit (%s)",
               cand[k].stage, what, zrt_format_size(r.device_total, b1, sizeof b1),
               (unsigned long long)r.host_total, zrt_format_size(cap, b2, sizeof b2), acts);
      return ZRT_OK;
    }
    zrt_log0(ZRT_LOG_INFO, "stage auto: stage %d%s needs %s per rank > 90%% of %s", cand[k].stage,
             what, zrt_format_size(r.device_total, b1, sizeof b1),
             zrt_format_size(cap, b2, sizeof b2));
  }
  zrt_engine_set_stage(eng, 3);
  eng->offload_opt = eng->offload_opt != ZRT_OFFLOAD_NONE ? eng->offload_opt : ZRT_OFFLOAD_CPU;
  eng->offload_par = eng->offload_par != ZRT_OFFLOAD_NONE ? eng->offload_par : ZRT_OFFLOAD_CPU;
  /* the last lever auto holds: the program's checkpoints to pinned host
   * memory (cpu_checkpointing), which only the transfers cost */
  zrt_memest_layout lay;
  zrt_memest_result r;
  if (eng->ack.n > ZRT_ACTCKPT_SLOTS && !eng->ack.cpu) {
    eng->ack.cpu = 1;
    zrt_engine_layout_totals(eng, &lay);
    zrt_memest_predict(&lay, &r);
    if (r.device_total <= zrt_memest_plan_bytes(cap)) {
      zrt_log0(ZRT_LOG_INFO,
               "stage auto: picking stage 3 + offload optimizer and params to cpu + "
               "activation_checkpointing.cpu_checkpointing: predicted %s per rank on the device "
               "fits 90%% of %s; every faster choice did not fit (%s)",
               zrt_format_size(r.device_total, b1, sizeof b1), zrt_format_size(cap, b2, sizeof b2),
               acts);
      return ZRT_OK;
    }
    eng->ack.cpu = 0;
  }
  zrt_engine_layout_totals(eng, &lay);
  zrt_memest_predict(&lay, &r);
  char hint[512];
  zrt_engine_actckpt_hint(eng, r.device[ZRT_MEM_ACTIVATIONS], r.device_total, hint, sizeof hint);
  zrt_log0(ZRT_LOG_WARN,
           "stage auto: nothing fits the device; trying stage 3 with optimizer and parameter "
           "offload to cpu (change: %sadd ranks or device memory)",
           hint);
  return ZRT_OK;
}

/* The model-states hint, when the device ran out (its pool refused an
 * allocation since build began: device_ooms is the count then). Another
 * resource's OOM (a full /dev/shm under the comm's buffers, host memory)
 * keeps its own message, the real cause, unprefixed. */
zrt_status zrt_engine_oom_hint(zrt_engine *eng, zrt_status st, size_t device_ooms) {
  if (st != ZRT_ERR_OOM ||
      (zrt_pool_oom_count(eng->backend->pool) == device_ooms && !eng->plan_refused))
    return st;
  /* already everything zrt offloads: the error says what is left to change */
  if (eng->policy->shard_params && eng->offload_opt != ZRT_OFFLOAD_NONE &&
      eng->offload_par != ZRT_OFFLOAD_NONE)
    return st;
  zrt_memest_layout lay;
  zrt_engine_layout_totals(eng, &lay);
  zrt_memest_result here, s3;
  zrt_memest_predict(&lay, &here);
  lay.stage = 3;
  lay.offload_optimizer = lay.offload_param = 1;
  /* what the engine would keep gathered there: the reuse it would fit */
  lay.reuse_elems =
      zrt_memest_fit_reuse(&lay, lay.device_capacity, eng->cfg->stage3_max_reuse_distance);
  zrt_memest_predict(&lay, &s3);
  char a[32], b[32], c[32], d[32], acts[160] = "", hint[512] = "";
  if (eng->activation_bytes)
    snprintf(acts, sizeof acts, " plus the %s of activations the program declared",
             zrt_format_size(eng->activation_bytes, c, sizeof c));
  if (eng->ack.n)
    snprintf(
        acts + strlen(acts), sizeof acts - strlen(acts), " plus %s of activation checkpoints",
        zrt_format_size(here.device[ZRT_MEM_ACTIVATIONS] - eng->activation_bytes, d, sizeof d));
  /* where the activations are most of even that figure, offload alone
   * cannot be the answer (a refused build plan has said so already) */
  if (!eng->plan_refused)
    zrt_engine_actckpt_hint(eng, s3.device[ZRT_MEM_ACTIVATIONS], s3.device_total, hint,
                            sizeof hint);
  return zrt_error_context(
      ZRT_ERR_OOM,
      "model states%s need %s per rank at stage %d; stage 3 with offload_optimizer and "
      "offload_param on cpu needs about %s (gathered modules follow the fetch order); try %sa "
      "higher zero_optimization.stage, offload, more ranks or a larger zrt.device_memory_limit "
      "(see `zrt estimate-memory`). Details: ",
      acts, zrt_format_size(here.device_total, a, sizeof a), eng->stage,
      zrt_format_size(s3.device_total, b, sizeof b), hint);
}
