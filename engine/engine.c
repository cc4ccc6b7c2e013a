/*
 * engine.c — the engine's life cycle and the per-module API: create (config
 * copy + resolve, backend, comm), module/param registration, build (layout,
 * stage choice, allocation, partitioned init), fetch / release /
 * grads_ready, param data / grad access, memory and
 * compute helpers. The build's memory-model decisions (stage "auto", the
 * reuse fit, the OOM hint) live in engine_fit.c, the optimizer step in
 * engine_step.c, the step
 * breakdown in engine_timing.c (fetch and grads_ready add their time and
 * the implicit phase marks here), the sharding machinery in sharding/.
 *
 * Invariants: after build every buffer listed in engine_internal.h's table
 * exists for the chosen stage and every rank holds the same layout; the
 * config is never changed after create except by resolve; a failed build
 * leaves the engine destroyable (every pointer NULL or owned).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "dtype.h"
#include "engine_internal.h"
#include "env.h"
#include "memest.h"
#include "monitor.h"
#include "rng.h"

/* ------------------------------------------------------------- create */

/* The stage and the policy that is read instead of it (sharding/stage_policy.h). */
void zrt_engine_set_stage(zrt_engine *eng, int stage) {
  eng->stage = stage;
  eng->policy = zrt_stage_policy_of(stage);
}

static zrt_status zrt_engine_parse_inject(zrt_engine *eng) {
  const char *v = zrt_env("ZRT_INJECT_NONFINITE_GRADS");
  if (!v || !*v) return ZRT_OK;
  const char *p = v;
  while (*p) {
    char *end;
    long long k = strtoll(p, &end, 10);
    if (end == p || k < 1)
      return zrt_error(ZRT_ERR_CONFIG,
                       "ZRT_INJECT_NONFINITE_GRADS='%s': expected comma-separated 1-based "
                       "optimizer step numbers, e.g. 2,5,6",
                       v);
    int64_t *n = realloc(eng->inject_steps, (size_t)(eng->ninject + 1) * sizeof(int64_t));
    if (!n) return zrt_error(ZRT_ERR_OOM, "out of host memory");
    eng->inject_steps = n;
    eng->inject_steps[eng->ninject++] = k;
    p = end;
    if (*p == ',')
      p++;
    else if (*p)
      return zrt_error(ZRT_ERR_CONFIG, "ZRT_INJECT_NONFINITE_GRADS='%s': unexpected '%c'", v, *p);
  }
  zrt_log(ZRT_LOG_WARN, "fault injection: non-finite grads on rank %d at steps %s", eng->world - 1,
          v);
  return ZRT_OK;
}

/* Test hooks: only with ZRT_TEST_HOOKS=1 (base/env.h), so a stray
 * variable cannot change a training run; a hook variable without the
 * switch is an error, never silently ignored. */
static zrt_status zrt_engine_parse_test_hooks(zrt_engine *eng) {
  eng->test_grad_factor = 1.0f;
  ZRT_CHECK(zrt_env_check());
  if (!zrt_env_hooks_on()) return ZRT_OK;
  const char *gf = zrt_env("ZRT_TEST_GRAD_FACTOR");
  eng->test_master_sums = 1;
  if (gf && *gf) {
    char *end;
    double f = strtod(gf, &end);
    if (end == gf || *end || !(f > 0) || !isfinite(f))
      return zrt_error(ZRT_ERR_CONFIG,
                       "ZRT_TEST_GRAD_FACTOR='%s': expected a positive number (the factor the "
                       "gradients' unscale is multiplied by, e.g. 2)",
                       gf);
    eng->test_grad_factor = (float)f;
  }
  zrt_log(ZRT_LOG_WARN,
          "test hooks on (ZRT_TEST_HOOKS=1): metrics carry master_sum / master_sqsum; gradients "
          "unscaled x%g (ZRT_TEST_GRAD_FACTOR)",
          (double)eng->test_grad_factor);
  return ZRT_OK;
}

zrt_status zrt_engine_placement(zrt_bootstrap **boot, int *local_rank, int *local_world) {
  *boot = NULL;
  *local_rank = 0;
  *local_world = 1;
  int world = 1;
  ZRT_CHECK(zrt_comm_env_world(&world));
  if (world > 1) {
    ZRT_CHECK(zrt_bootstrap_mpi_create(boot));
    *local_rank = (*boot)->local_rank;
    *local_world = (*boot)->local_world;
  }
  zrt_log(ZRT_LOG_DEBUG, "placement: local rank %d of %d (%s)", *local_rank, *local_world,
          world > 1 ? "from MPI" : "single process");
  return ZRT_OK;
}

zrt_status zrt_engine_create(const zrt_config *cfg, zrt_engine **out) {
  zrt_status st = ZRT_OK;
  zrt_bootstrap *boot = NULL;
  int local_rank = 0, local_world = 1;
  if (!cfg || !out) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_create: NULL argument");
  *out = NULL;
  zrt_engine *eng = calloc(1, sizeof *eng);
  if (!eng) return zrt_error(ZRT_ERR_OOM, "zrt_engine_create: out of host memory");
  eng->ckpt_lock.fd = -1;
  ZRT_CHECK_GOTO(zrt_config_copy(cfg, &eng->config), st, fail);
  const zrt_cfg *c = zrt_config_values(eng->config);
  ZRT_CHECK_GOTO(zrt_engine_placement(&boot, &local_rank, &local_world), st, fail);
  ZRT_CHECK_GOTO(zrt_backend_create_placed(c->backend, (size_t)c->device_memory_limit, local_rank,
                                           local_world, &eng->backend),
                 st, fail);
  if (c->blas_threads > 0 && !strcmp(eng->backend->iface->name, "cpu"))
    zrt_backend_cpu_blas_threads((int)c->blas_threads);
  ZRT_CHECK_GOTO(zrt_engine_team_open(eng), st, fail);
  ZRT_CHECK_GOTO(zrt_comm_create(c->comm, eng->backend, c->comm_timeout_s, &eng->comm), st, fail);
  zrt_bootstrap_destroy(boot); /* the comm keeps MPI up now */
  boot = NULL;
  eng->rank = eng->comm->rank;
  eng->world = eng->comm->world;
  zrt_log_set_rank(eng->rank);
  ZRT_CHECK_GOTO(zrt_config_resolve(eng->config, eng->world), st, fail);
  eng->cfg = c = zrt_config_values(eng->config);
  eng->dtype = zrt_config_dtype(eng->config);
  eng->master_dtype = eng->cfg->bf16_master_weights_and_grads ? ZRT_BF16 : ZRT_F32;
  eng->state_dtype = eng->cfg->bf16_optimizer_states ? ZRT_BF16 : ZRT_F32;
  eng->comm_dtype =
      c->communication_data_type >= 0 ? (zrt_dtype)c->communication_data_type : eng->dtype;
  zrt_engine_set_stage(eng, c->zero_stage);
  snprintf(eng->backend_name, sizeof eng->backend_name, "%s", eng->backend->iface->name);
  snprintf(eng->comm_name, sizeof eng->comm_name, "%s", eng->comm->iface->name);
  zrt_log_once("engine.choice", ZRT_LOG_INFO, "backend %s (%s), comm %s, world %d, dtype %s",
               eng->backend_name, eng->backend->description, eng->comm_name, eng->world,
               zrt_dtype_name(eng->dtype));
  if (c->fp16_enabled) {
    if (c->fp16_loss_scale > 0)
      zrt_scaler_init_static(&eng->scaler, c->fp16_loss_scale);
    else
      zrt_scaler_init_dynamic(&eng->scaler, c->fp16_initial_scale_power, c->fp16_loss_scale_window,
                              c->fp16_hysteresis, c->fp16_consecutive_hysteresis,
                              c->fp16_min_loss_scale);
  } else {
    zrt_scaler_init_static(&eng->scaler, 1.0);
  }
  zrt_sched_init(&eng->sched, c);
  ZRT_CHECK_GOTO(zrt_engine_parse_test_hooks(eng), st, fail);
  ZRT_CHECK_GOTO(zrt_engine_parse_inject(eng), st, fail);
  if (eng->rank == 0 && c->metrics_path[0]) {
    eng->metrics = fopen(c->metrics_path, "w");
    if (!eng->metrics) {
      st = zrt_error(ZRT_ERR_IO, "cannot open metrics file '%s' (zrt.metrics_path): %s",
                     c->metrics_path, strerror(errno));
      goto fail;
    }
  }
  if (eng->rank == 0) {
    zrt_monitor_opts mo = {c->tb_enabled,  c->tb_output_path,  c->tb_job_name,
                           c->csv_enabled, c->csv_output_path, c->csv_job_name};
    ZRT_CHECK_GOTO(zrt_monitor_create(&mo, &eng->monitor), st, fail);
  }
  *out = eng;
  return ZRT_OK;
fail:
  zrt_engine_destroy(eng);
  zrt_bootstrap_destroy(boot); /* after the comm (destroyed above): the last MPI user */
  return st;
}

static void zrt_engine_free_buffers(zrt_engine *eng) {
  zrt_engine_actckpt_free(eng);
  zrt_coord_destroy(eng->coord); /* waits for its gathers, frees its copies */
  eng->coord = NULL;
  zrt_buckets_destroy(eng->buckets);
  eng->buckets = NULL;
  for (int m = 0; m < eng->nmodules; m++) {
    zrt_module_entry *me = &eng->modules[m];
    zrt_backend_free(eng->backend, me->full16);
    zrt_backend_free(eng->backend, me->grad16);
    if (me->grad_host)
      zrt_engine_offload_free(eng, me->grad_acc);
    else
      zrt_backend_free(eng->backend, me->grad_acc);
    if (me->shard16_host)
      zrt_engine_offload_free(eng, me->shard16);
    else
      zrt_backend_free(eng->backend, me->shard16);
    if (me->optim_host) {
      zrt_engine_offload_free(eng, me->master);
      zrt_engine_offload_free(eng, me->s1);
      zrt_engine_offload_free(eng, me->s2);
    } else {
      zrt_backend_free(eng->backend, me->master);
      zrt_backend_free(eng->backend, me->s1);
      zrt_backend_free(eng->backend, me->s2);
    }
    me->full16 = me->grad16 = me->shard16 = NULL;
    me->grad_acc = me->master = me->s1 = me->s2 = NULL;
  }
  zrt_engine_shard_arena_free(eng);
}

void zrt_engine_destroy(zrt_engine *eng) {
  if (!eng) return;
  if (eng->backend) zrt_engine_free_buffers(eng);
  for (int m = 0; m < eng->nmodules; m++) free(eng->modules[m].params);
  free(eng->modules);
  free(eng->params);
  free(eng->coord_names);
  free(eng->inject_steps);
  zrt_engine_plan_free(eng);
  if (eng->metrics) fclose(eng->metrics);
  if (eng->ckpt_lock.fd >= 0) close(eng->ckpt_lock.fd); /* releases the flock */
  zrt_monitor_destroy(eng->monitor);
  if (eng->backend) zrt_engine_host_free_all(eng); /* before the host pool goes */
  zrt_engine_offload_teardown(eng);
  zrt_comm_destroy(eng->comm);
  zrt_backend_destroy(eng->backend);
  zrt_config_destroy(eng->config);
  free(eng);
}

zrt_status zrt_engine_get_info(const zrt_engine *eng, zrt_engine_info *out) {
  if (!eng || !out) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_get_info: NULL argument");
  out->rank = eng->rank;
  out->world_size = eng->world;
  out->local_rank = eng->comm->local_rank;
  out->local_world_size = eng->comm->local_world;
  out->backend = eng->backend_name;
  out->comm = eng->comm_name;
  out->dtype = eng->dtype;
  out->zero_stage = eng->stage;
  out->micro_batch = eng->cfg->train_micro_batch_size_per_gpu;
  out->grad_accum = eng->cfg->gradient_accumulation_steps;
  out->train_batch = eng->cfg->train_batch_size;
  out->seed = eng->cfg->seed;
  return ZRT_OK;
}

zrt_status zrt_engine_set_tokens_per_micro(zrt_engine *eng, int64_t tokens) {
  if (!eng || tokens < 0)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_set_tokens_per_micro: bad argument");
  eng->tokens_per_micro = tokens;
  return ZRT_OK;
}

/* ------------------------------------------------------- registration */

zrt_status zrt_module_add(zrt_engine *eng, const char *name, int *module_id) {
  if (!eng || !name || !module_id)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_module_add: NULL argument");
  if (eng->built)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_module_add('%s'): the engine is already built; register every module "
                     "before zrt_engine_build",
                     name);
  if (strlen(name) >= ZRT_ENGINE_NAME_MAX)
    return zrt_error(ZRT_ERR_INVALID_ARG, "module name '%.40s...' longer than %d characters", name,
                     ZRT_ENGINE_NAME_MAX - 1);
  if (eng->nmodules == eng->cap_modules) {
    int nc = eng->cap_modules ? eng->cap_modules * 2 : 16;
    zrt_module_entry *n = realloc(eng->modules, (size_t)nc * sizeof *n);
    if (!n) return zrt_error(ZRT_ERR_OOM, "out of host memory");
    eng->modules = n;
    eng->cap_modules = nc;
  }
  zrt_module_entry *me = &eng->modules[eng->nmodules];
  memset(me, 0, sizeof *me);
  snprintf(me->name, sizeof me->name, "%s", name);
  *module_id = eng->nmodules++;
  return ZRT_OK;
}

zrt_status zrt_param_add(zrt_engine *eng, int module_id, const char *name, int ndim,
                         const int64_t *shape, zrt_init init, unsigned flags, int *param_id) {
  if (!eng || !name || !param_id || (ndim > 0 && !shape))
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_param_add: NULL argument");
  if (eng->built)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_param_add('%s'): the engine is already built; register every parameter "
                     "before zrt_engine_build",
                     name);
  if (module_id < 0 || module_id >= eng->nmodules)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_param_add('%s'): module id %d is not registered",
                     name, module_id);
  if (ndim < 0 || ndim > ZRT_ENGINE_MAX_NDIM)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_param_add('%s'): ndim %d outside 0..%d", name, ndim,
                     ZRT_ENGINE_MAX_NDIM);
  if (strlen(name) >= ZRT_ENGINE_NAME_MAX)
    return zrt_error(ZRT_ERR_INVALID_ARG, "parameter name '%.40s...' longer than %d characters",
                     name, ZRT_ENGINE_NAME_MAX - 1);
  for (int i = 0; i < eng->nparams; i++)
    if (!strcmp(eng->params[i].name, name))
      return zrt_error(ZRT_ERR_INVALID_ARG,
                       "zrt_param_add: parameter name '%s' is already registered (names must be "
                       "unique)",
                       name);
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] <= 0)
      return zrt_error(ZRT_ERR_INVALID_ARG,
                       "zrt_param_add('%s'): dimension %d is %lld (must be > 0)", name, d,
                       (long long)shape[d]);
    numel *= shape[d];
  }
  if (eng->nparams == eng->cap_params) {
    int nc = eng->cap_params ? eng->cap_params * 2 : 64;
    zrt_param_entry *n = realloc(eng->params, (size_t)nc * sizeof *n);
    if (!n) return zrt_error(ZRT_ERR_OOM, "out of host memory");
    eng->params = n;
    eng->cap_params = nc;
  }
  zrt_module_entry *me = &eng->modules[module_id];
  if (me->nparams == me->cap_params) {
    int nc = me->cap_params ? me->cap_params * 2 : 8;
    int *n = realloc(me->params, (size_t)nc * sizeof(int));
    if (!n) return zrt_error(ZRT_ERR_OOM, "out of host memory");
    me->params = n;
    me->cap_params = nc;
  }
  zrt_param_entry *p = &eng->params[eng->nparams];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->name_hash = zrt_rng_name_hash(name);
  p->module = module_id;
  p->ndim = ndim;
  for (int d = 0; d < ndim; d++) p->shape[d] = shape[d];
  p->numel = numel;
  p->init = init;
  p->flags = flags;
  me->params[me->nparams++] = eng->nparams;
  *param_id = eng->nparams++;
  return ZRT_OK;
}

/* ------------------------------------------------------------- build */

zrt_status zrt_engine_set_activation_bytes(zrt_engine *eng, uint64_t bytes) {
  if (!eng) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_set_activation_bytes: NULL engine");
  if (eng->built)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_engine_set_activation_bytes: call it before zrt_engine_build (the "
                     "stage and the allocation are chosen at build)");
  eng->activation_bytes = bytes;
  return ZRT_OK;
}

/* Model-state allocation in the device pool, or the host pool when offloaded. */
static zrt_status zrt_engine_alloc_state(zrt_engine *eng, int host, size_t bytes,
                                         zrt_mem_category cat, int zero, void **out) {
  if (host) {
    ZRT_CHECK(zrt_pool_alloc(eng->host_pool, bytes, cat, out));
    if (zero) memset(*out, 0, bytes);
    return ZRT_OK;
  }
  ZRT_CHECK(zrt_backend_alloc(eng->backend, bytes, cat, out));
  if (zero) ZRT_CHECK(zrt_backend_memset(eng->backend, *out, 0, bytes, NULL));
  return ZRT_OK;
}

static zrt_status zrt_engine_alloc_module(zrt_engine *eng, int m, float *tmp, size_t tmp_elems) {
  zrt_module_entry *me = &eng->modules[m];
  zrt_backend *be = eng->backend;
  size_t ws = zrt_dtype_size(eng->dtype);
  int64_t foff, len;
  zrt_engine_master_extent(eng, m, &foff, &len);
  int nstates = zrt_engine_optim_states(eng);
  int oh = me->optim_host;

  /* master and optimizer states, fp32 or bf16 (NVMe: in the files, zeroed at setup) */
  size_t mb = zrt_dtype_size(eng->master_dtype), sb = zrt_dtype_size(eng->state_dtype);
  if (!me->optim_nvme) {
    ZRT_CHECK(zrt_engine_alloc_state(eng, oh, (size_t)len * mb, ZRT_MEM_MASTER32, 0,
                                     (void **)&me->master));
    if (nstates >= 1)
      ZRT_CHECK(zrt_engine_alloc_state(eng, oh, (size_t)len * sb, ZRT_MEM_OPTIM_STATE, 1,
                                       (void **)&me->s1));
    if (nstates >= 2)
      ZRT_CHECK(zrt_engine_alloc_state(eng, oh, (size_t)len * sb, ZRT_MEM_OPTIM_STATE, 1,
                                       (void **)&me->s2));
  }
  me->grad_host = zrt_layout_grad_acc_host(me->optim_host || me->optim_nvme);
  /* none where the step reads grad16 itself (memest.c counts the same) */
  if (!zrt_engine_grad_direct(eng, me))
    ZRT_CHECK(zrt_engine_alloc_state(eng, me->grad_host, (size_t)len * mb, ZRT_MEM_GRADS, 1,
                                     (void **)&me->grad_acc));

  /* working weights */
  void *w16 = NULL; /* where this rank's extent of 16-bit weights goes */
  if (eng->policy->shard_params && me->shard16_nvme) {
    /* written from the masters by zrt_engine_offload_built */
  } else if (eng->policy->shard_params) {
    ZRT_CHECK(zrt_engine_alloc_shard16(eng, m));
    zrt_coord_set_shard(eng->coord, m, me->shard16, me->shard16_host);
    w16 = me->shard16;
  } else {
    ZRT_CHECK(zrt_backend_alloc(be, (size_t)me->padded * ws, ZRT_MEM_PARAMS16, &me->full16));
    w16 = (char *)me->full16 + (size_t)foff * ws;
    me->fetched = 1;
  }
  if (eng->policy->reduce_at_boundary)
    ZRT_CHECK(
        zrt_engine_alloc_state(eng, 0, (size_t)me->padded * ws, ZRT_MEM_GRADS, 1, &me->grad16));

  /* partitioned init: host tile -> master -> working copy */
  for (int64_t t0 = 0; t0 < len; t0 += (int64_t)tmp_elems) {
    int64_t n = ZRT_MIN((int64_t)tmp_elems, len - t0);
    zrt_engine_init_values(eng, m, foff + t0, n, tmp);
    void *dst16 = (char *)w16 + (size_t)t0 * ws;
    if (me->optim_nvme) {
      ZRT_CHECK(zrt_offload_pipe_nvme_range(eng->offload, 0, 1, (size_t)(me->nvme_off + t0),
                                            (size_t)n, tmp));
    } else if (oh) {
      /* bf16 masters: rounded to nearest even, as the working copy below */
      zrt_dtype_convert_host(zrt_engine_at(me->master, (size_t)t0, eng->master_dtype),
                             eng->master_dtype, tmp, ZRT_F32, (size_t)n);
    } else {
      ZRT_CHECK(zrt_backend_memcpy(be, me->master + t0, tmp, (size_t)n * 4, ZRT_COPY_H2D, NULL));
    }
    if (!w16) continue;
    /* host conversion in place (16-bit element i lands at or before float i) */
    for (int64_t i = 0; i < n; i++) zrt_store_f(tmp, eng->dtype, (size_t)i, tmp[i]);
    if (eng->policy->shard_params && me->shard16_host)
      memcpy(dst16, tmp, (size_t)n * ws);
    else
      ZRT_CHECK(zrt_backend_memcpy(be, dst16, tmp, (size_t)n * ws, ZRT_COPY_H2D, NULL));
  }
  if (eng->policy->gather_after_step) ZRT_CHECK(zrt_engine_gather_module(eng, m));
  return ZRT_OK;
}

zrt_status zrt_engine_gather_module(zrt_engine *eng, int m) {
  zrt_module_entry *me = &eng->modules[m];
  size_t ws = zrt_dtype_size(eng->dtype);
  zrt_comm_req *req = NULL;
  ZRT_CHECK(zrt_comm_all_gather_even(eng->comm,
                                     (char *)me->full16 + (size_t)eng->rank * me->part * ws,
                                     me->full16, (size_t)me->part, eng->dtype, &req));
  /* the engine's stream (the program's next forward) waits for it */
  return zrt_comm_wait_on(eng->comm, req, NULL);
}

/* The stage-3 coordinator over the built layout (after the offload set-up,
 * whose parameter swapper it reads through). */
static zrt_status zrt_engine_coord_create(zrt_engine *eng) {
  int n = ZRT_MAX(eng->nmodules, 1);
  int64_t *numel = malloc((size_t)n * 2 * sizeof(int64_t));
  const char **names = malloc((size_t)n * sizeof(char *));
  zrt_status st = ZRT_OK;
  if (!numel || !names) {
    st = zrt_error(ZRT_ERR_OOM, "zrt_engine_build: out of host memory");
    goto done;
  }
  int64_t *padded = numel + n;
  for (int m = 0; m < eng->nmodules; m++) {
    numel[m] = eng->modules[m].numel;
    padded[m] = eng->modules[m].padded;
  }
  eng->coord_names = names;
  names = NULL;
  for (int m = 0; m < eng->nmodules; m++) eng->coord_names[m] = eng->modules[m].name;
  zrt_coord_opts o = {.dtype = eng->dtype,
                      .prefetch_elems = eng->prefetch_elems,
                      .max_live_elems = eng->cfg->stage3_max_live_parameters,
                      .reuse_distance = eng->reuse_distance,
                      .persist_threshold = eng->cfg->stage3_param_persistence_threshold,
                      .nmodules = eng->nmodules,
                      .numel = numel,
                      .padded = padded,
                      .names = eng->coord_names,
                      .pswap = eng->pswap};
  st = zrt_coord_create(eng->backend, eng->comm, &o, &eng->coord);
done:
  free(numel);
  free(names);
  return st;
}

zrt_status zrt_engine_build(zrt_engine *eng) {
  zrt_status st = ZRT_OK;
  float *tmp = NULL;
  if (!eng) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_build: NULL engine");
  if (eng->built) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_build: already built");
  if (eng->nparams == 0)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_engine_build: no parameters registered (zrt_module_add + zrt_param_add "
                     "first)");
  size_t device_ooms = zrt_pool_oom_count(eng->backend->pool);
  zrt_engine_layout(eng);
  ZRT_CHECK(zrt_engine_choose_stage(eng));
  {
    /* config/'s rule, the one `zrt config check` applies, at the resolved
     * stage and optimizer offload */
    char why[600];
    if (zrt_config_bf16_master_rule(eng->cfg, eng->stage, (zrt_offload_device)eng->offload_opt, why,
                                    sizeof why))
      return zrt_error(ZRT_ERR_CONFIG, "%s (zero_optimization.stage %d as resolved)", why,
                       eng->stage);
  }
  /* the stage is final: ZeRO's DynamicLossScaler (stages 1-3) raises at the
   * minimum scale, stage 0's FP16_Optimizer keeps the floor (DeepSpeed) */
  eng->scaler.raise_at_min = eng->policy->shard_optimizer;
  zrt_engine_fit_reuse(eng);
  eng->prefetch_elems = eng->cfg->stage3_prefetch_bucket_size;
  {
    zrt_memest_layout lay;
    zrt_engine_layout_totals(eng, &lay);
    ZRT_CHECK_GOTO(zrt_engine_plan_check_build(eng, &lay), st, done);
  }
  ZRT_CHECK_GOTO(zrt_engine_offload_setup(eng), st, done); /* no-op without offload */
  ZRT_CHECK_GOTO(zrt_engine_actckpt_build(eng), st, done); /* no-op without a declaration */
  {
    int64_t maxpart = 0;
    for (int m = 0; m < eng->nmodules; m++) maxpart = ZRT_MAX(maxpart, eng->modules[m].part);
    int64_t want = zrt_layout_bucket_chunk(eng->cfg->reduce_bucket_size, eng->world, maxpart);
    size_t cap = zrt_pool_capacity(eng->backend->pool);
    size_t cb = zrt_dtype_size(eng->comm_dtype);
    int64_t chunk = zrt_layout_bucket_chunk_capped(eng->cfg->reduce_bucket_size, eng->world,
                                                   maxpart, (int)cb, cap);
    if (chunk < want) {
      char b1[32], b2[32], b3[32];
      uint64_t slots = 2 * ((uint64_t)eng->world + 1) * cb;
      zrt_log0(ZRT_LOG_INFO,
               "gradient buckets: zero_optimization.reduce_bucket_size %lld would stage %s on the "
               "device; capped at %lld elements per rank (%s, 1/%d of the %s device) so model "
               "states and activations keep the rest",
               (long long)eng->cfg->reduce_bucket_size,
               zrt_format_size(slots * (uint64_t)want, b1, sizeof b1), (long long)chunk,
               zrt_format_size(slots * (uint64_t)chunk, b2, sizeof b2), ZRT_LAYOUT_BUCKET_CAP_DIV,
               zrt_format_size(cap, b3, sizeof b3));
    }
    ZRT_CHECK_GOTO(zrt_buckets_create(eng->backend, eng->comm, eng->dtype, eng->comm_dtype, chunk,
                                      &eng->buckets),
                   st, done);
    if (zrt_layout_grad_acc_host(eng->offload_opt != ZRT_OFFLOAD_NONE))
      ZRT_CHECK_GOTO(
          zrt_buckets_set_host(eng->buckets, eng->host_pool, zrt_hostpool_pinned(eng->hostpool),
                               zrt_layout_bucket_host_stage(eng->policy, chunk, eng->world)),
          st, done);
    if (eng->master_dtype != ZRT_F32) /* the bf16 gradient partitions (host, by the rule) */
      ZRT_CHECK_GOTO(zrt_buckets_set_host_acc_dtype(eng->buckets, eng->master_dtype), st, done);
  }
  if (eng->policy->shard_params) ZRT_CHECK_GOTO(zrt_engine_coord_create(eng), st, done);
  size_t tmp_elems = 1 << 20;
  tmp = malloc(tmp_elems * sizeof(float)); /* transient init staging, not model state */
  if (!tmp) {
    st = zrt_error(ZRT_ERR_OOM, "zrt_engine_build: out of host memory for init staging");
    goto done;
  }
  ZRT_CHECK_GOTO(zrt_engine_shard_arena_create(eng), st, done);
  for (int m = 0; m < eng->nmodules; m++)
    ZRT_CHECK_GOTO(zrt_engine_alloc_module(eng, m, tmp, tmp_elems), st, done);
  ZRT_CHECK_GOTO(zrt_engine_offload_built(eng), st, done);
  eng->built = 1;
  zrt_engine_timing_open(eng, zrt_now_s());
  {
    zrt_memest_layout lay;
    zrt_engine_layout_totals(eng, &lay);
    char b[32];
    size_t cap = zrt_pool_capacity(eng->backend->pool);
    zrt_log0(ZRT_LOG_INFO,
             "built: %d modules, %d params, %lld padded elements, stage %d, device capacity %s",
             eng->nmodules, eng->nparams, (long long)lay.padded_total, eng->stage,
             cap ? zrt_format_size(cap, b, sizeof b) : "unlimited");
  }
done:
  free(tmp);
  if (st != ZRT_OK) {
    st = zrt_engine_oom_hint(eng, st, device_ooms);
    zrt_engine_free_buffers(eng);
  }
  return st;
}

/* ------------------------------------------------------ module calls */

static zrt_status zrt_engine_check_module(const zrt_engine *eng, int m, const char *fn) {
  if (!eng) return zrt_error(ZRT_ERR_INVALID_ARG, "%s: NULL engine", fn);
  if (!eng->built) return zrt_error(ZRT_ERR_INVALID_ARG, "%s: call zrt_engine_build first", fn);
  if (m < 0 || m >= eng->nmodules)
    return zrt_error(ZRT_ERR_INVALID_ARG, "%s: module id %d is not registered (0..%d)", fn, m,
                     eng->nmodules - 1);
  return ZRT_OK;
}

zrt_status zrt_module_fetch(zrt_engine *eng, int module_id) {
  ZRT_CHECK(zrt_engine_check_module(eng, module_id, "zrt_module_fetch"));
  zrt_engine_phase_infer(eng, ZRT_PHASE_FORWARD);
  if (!eng->policy->shard_params) {
    eng->modules[module_id].in_use++;
    return ZRT_OK;
  }
  zrt_engine_plan_record(eng, ZRT_SIM_FETCH, module_id);
  double t0 = zrt_now_s();
  zrt_status st = zrt_coord_fetch(eng->coord, module_id);
  eng->ph.fetch_s += zrt_now_s() - t0;
  return st;
}

zrt_status zrt_module_release(zrt_engine *eng, int module_id) {
  ZRT_CHECK(zrt_engine_check_module(eng, module_id, "zrt_module_release"));
  if (!eng->policy->shard_params) {
    if (eng->modules[module_id].in_use > 0) eng->modules[module_id].in_use--;
    return ZRT_OK;
  }
  zrt_engine_plan_record(eng, ZRT_SIM_RELEASE, module_id);
  return zrt_coord_release(eng->coord, module_id);
}

static zrt_status zrt_engine_ensure_grad16(zrt_engine *eng, int m) {
  zrt_module_entry *me = &eng->modules[m];
  if (me->grad16) return ZRT_OK;
  size_t bytes = (size_t)me->padded * zrt_dtype_size(eng->dtype);
  ZRT_CHECK(zrt_backend_alloc(eng->backend, bytes, ZRT_MEM_GRADS, &me->grad16));
  ZRT_CHECK(zrt_backend_memset(eng->backend, me->grad16, 0, bytes, NULL));
  me->grads_pending = 1;
  if (eng->policy->shard_params) zrt_engine_plan_record(eng, ZRT_SIM_GRAD, m);
  return ZRT_OK;
}

zrt_status zrt_engine_reduce_pending(zrt_engine *eng, int m, int async) {
  zrt_module_entry *me = &eng->modules[m];
  ZRT_CHECK(zrt_engine_ensure_grad16(eng, m));
  ZRT_CHECK(zrt_buckets_reduce(eng->buckets, me->grad16, me->padded, me->part, me->grad_acc,
                               me->grad_host, eng->policy->reduce_all_reduce, async));
  /* only the engine's stream used it (the program's backward, the buckets'
   * conversions): the free waits for that stream alone, so the next
   * module's backward does not wait for this module's reduce-scatter */
  zrt_backend_free_on(eng->backend, me->grad16, NULL);
  if (eng->policy->shard_params) zrt_engine_plan_record(eng, ZRT_SIM_GRAD_DONE, m);
  me->grad16 = NULL;
  me->grads_pending = 0;
  me->grads_reduced = 1;
  return ZRT_OK;
}

zrt_status zrt_module_grads_ready(zrt_engine *eng, int module_id) {
  ZRT_CHECK(zrt_engine_check_module(eng, module_id, "zrt_module_grads_ready"));
  zrt_engine_phase_infer(eng, ZRT_PHASE_BACKWARD);
  if (eng->policy->reduce_at_boundary) return ZRT_OK; /* reduced at the accumulation boundary */
  zrt_module_entry *me = &eng->modules[module_id];
  if (me->grads_reduced)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_module_grads_ready('%s'): called twice in one micro-batch", me->name);
  double t0 = zrt_now_s();
  zrt_status st = zrt_engine_reduce_pending(eng, module_id, eng->cfg->overlap_comm);
  eng->ph.reduce_s += zrt_now_s() - t0;
  return st;
}

static zrt_status zrt_engine_check_param(const zrt_engine *eng, int p, const char *fn) {
  if (!eng) return zrt_error(ZRT_ERR_INVALID_ARG, "%s: NULL engine", fn);
  if (p < 0 || p >= eng->nparams)
    return zrt_error(ZRT_ERR_INVALID_ARG, "%s: parameter id %d is not registered", fn, p);
  if (!eng->built) return zrt_error(ZRT_ERR_INVALID_ARG, "%s: call zrt_engine_build first", fn);
  return ZRT_OK;
}

zrt_status zrt_param_data(zrt_engine *eng, int param_id, void **ptr) {
  ZRT_CHECK(zrt_engine_check_param(eng, param_id, "zrt_param_data"));
  const zrt_param_entry *p = &eng->params[param_id];
  zrt_module_entry *me = &eng->modules[p->module];
  void *full = eng->policy->shard_params ? zrt_coord_full(eng->coord, p->module)
                                         : (me->fetched ? me->full16 : NULL);
  if (!full)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_param_data('%s'): module '%s' is not fetched; call zrt_module_fetch "
                     "before using its weights (stage 3)",
                     p->name, me->name);
  *ptr = (char *)full + (size_t)p->offset * zrt_dtype_size(eng->dtype);
  return ZRT_OK;
}

zrt_status zrt_param_grad(zrt_engine *eng, int param_id, void **ptr) {
  ZRT_CHECK(zrt_engine_check_param(eng, param_id, "zrt_param_grad"));
  zrt_engine_phase_infer(eng, ZRT_PHASE_BACKWARD);
  const zrt_param_entry *p = &eng->params[param_id];
  zrt_module_entry *me = &eng->modules[p->module];
  if (me->grads_reduced)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_param_grad('%s'): module '%s' already declared its grads ready in this "
                     "micro-batch",
                     p->name, me->name);
  ZRT_CHECK(zrt_engine_ensure_grad16(eng, p->module));
  *ptr = (char *)me->grad16 + (size_t)p->offset * zrt_dtype_size(eng->dtype);
  return ZRT_OK;
}

zrt_status zrt_param_numel(const zrt_engine *eng, int param_id, int64_t *numel) {
  if (!eng || !numel || param_id < 0 || param_id >= eng->nparams)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_param_numel: bad parameter id %d", param_id);
  *numel = eng->params[param_id].numel;
  return ZRT_OK;
}

float zrt_engine_backward_scale(const zrt_engine *eng) {
  const zrt_cfg *c = eng->cfg;
  if (!c->fp16_enabled) return zrt_scaler_scale(&eng->scaler);
  return (float)(eng->scaler.cur_scale / (double)zrt_engine_accum_steps(eng));
}

zrt_status zrt_engine_loss_scale(const zrt_engine *eng, float *scale) {
  if (!eng || !scale) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_loss_scale: NULL argument");
  *scale = zrt_engine_backward_scale(eng);
  return ZRT_OK;
}

/* ------------------------------------------------- master access */

zrt_status zrt_engine_get_master(zrt_engine *eng, int module, float *dst) {
  return zrt_engine_state_io(eng, module, ZRT_STATE_MASTER, ZRT_IO_READ, dst);
}

zrt_status zrt_engine_set_master(zrt_engine *eng, int module, const float *src) {
  /* state_io only reads src when writing */
  return zrt_engine_state_io(eng, module, ZRT_STATE_MASTER, ZRT_IO_WRITE, (float *)src);
}

/* dst (device memory of the backend) <- the working dtype of len fp32
 * masters at master. Masters in the host pool (offload_optimizer cpu) are
 * not device memory: a CUDA kernel cannot read them (pageable: an illegal
 * address), so they are converted on the host into a pageable staging
 * buffer and copied over. The staging is freed at once, without a host
 * wait: a copy from pageable memory has consumed its source when it returns
 * (the rule the build's init tiles rely on too; docs/engine.md, "Mutation
 * run"), and the device write is ordered on the engine stream as the
 * device-masters path's convert is. */
static zrt_status zrt_engine_refresh_convert(zrt_engine *eng, const zrt_module_entry *me, void *dst,
                                             const float *master, int64_t len) {
  if (!me->optim_host || eng->backend->device_id < 0)
    return zrt_backend_convert(eng->backend, dst, eng->dtype, master, eng->master_dtype,
                               (size_t)len, NULL);
  size_t bytes = (size_t)len * zrt_dtype_size(eng->dtype);
  void *stage = malloc(bytes ? bytes : 1);
  if (!stage)
    return zrt_error(ZRT_ERR_OOM, "refreshing parameters: out of host memory for %zu staging bytes",
                     bytes);
  zrt_dtype_convert_host(stage, eng->dtype, master, eng->master_dtype, (size_t)len);
  zrt_status st = zrt_backend_memcpy(eng->backend, dst, stage, bytes, ZRT_COPY_H2D, NULL);
  free(stage);
  return st;
}

zrt_status zrt_engine_refresh_params(zrt_engine *eng) {
  size_t ws = zrt_dtype_size(eng->dtype);
  for (int m = 0; m < eng->nmodules; m++) {
    zrt_module_entry *me = &eng->modules[m];
    int64_t off, len;
    zrt_engine_master_extent(eng, m, &off, &len);
    if (me->shard16_nvme) {
      continue; /* the whole param file is rewritten below */
    } else if (me->optim_nvme) {
      ZRT_CHECK(zrt_engine_nvme_refresh_module(eng, m));
      if (eng->policy->gather_after_step) ZRT_CHECK(zrt_engine_gather_module(eng, m));
    } else if (eng->policy->shard_params) {
      if (me->shard16_host && !me->optim_host) {
        /* offload_param alone: host shard from the device masters */
        ZRT_CHECK(zrt_engine_host16_from_master(eng, me->master, me->shard16, len));
      } else if (me->shard16_host) {
        /* host shard: convert on the host (host pool memory) */
        for (int64_t i = 0; i < len; i++)
          zrt_store_f(me->shard16, eng->dtype, (size_t)i,
                      zrt_load_f(me->master, eng->master_dtype, (size_t)i));
      } else {
        ZRT_CHECK(zrt_engine_refresh_convert(eng, me, me->shard16, me->master, len));
      }
    } else {
      ZRT_CHECK(zrt_engine_refresh_convert(eng, me, (char *)me->full16 + (size_t)off * ws,
                                           me->master, len));
      if (eng->policy->gather_after_step) ZRT_CHECK(zrt_engine_gather_module(eng, m));
    }
  }
  if (eng->pswap) ZRT_CHECK(zrt_engine_param_nvme_write(eng));
  if (eng->policy->shard_params) {
    ZRT_CHECK(zrt_coord_quiesce(eng->coord));
    zrt_coord_invalidate(eng->coord);
  }
  return ZRT_OK;
}

/* ----------------------------------------------- memory and compute */

zrt_status zrt_engine_memory(const zrt_engine *eng, zrt_mem_where where, zrt_mem_stats *out) {
  if (!eng || !out) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_memory: NULL argument");
  if (where == ZRT_MEM_DEVICE) {
    zrt_pool_stats(eng->backend->pool, out);
    return ZRT_OK;
  }
  if (where == ZRT_MEM_HOST_PINNED) {
    if (eng->host_pool)
      zrt_pool_stats(eng->host_pool, out);
    else
      memset(out, 0, sizeof *out);
    return ZRT_OK;
  }
  return zrt_error(ZRT_ERR_INVALID_ARG,
                   "zrt_engine_memory: where=%d (ZRT_MEM_DEVICE or ZRT_MEM_HOST_PINNED)",
                   (int)where);
}

zrt_status zrt_engine_alloc(zrt_engine *eng, size_t bytes, zrt_mem_category cat, void **ptr) {
  if (!eng || !ptr || (int)cat < 0 || cat >= ZRT_MEM_NCAT)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_alloc: bad argument");
  return zrt_backend_alloc(eng->backend, bytes, cat, ptr);
}

void zrt_engine_free(zrt_engine *eng, void *ptr) {
  if (eng) zrt_backend_free(eng->backend, ptr);
}

zrt_status zrt_engine_memcpy(zrt_engine *eng, void *dst, const void *src, size_t bytes,
                             zrt_copy_kind kind) {
  if (!eng) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_memcpy: NULL engine");
  return zrt_backend_memcpy(eng->backend, dst, src, bytes, kind, NULL);
}

zrt_status zrt_engine_gemm(zrt_engine *eng, int trans_a, int trans_b, int64_t m, int64_t n,
                           int64_t k, float alpha, const void *a, int64_t lda, const void *b,
                           int64_t ldb, zrt_dtype ab, float beta, void *c, int64_t ldc,
                           zrt_dtype c_dtype) {
  if (!eng) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_gemm: NULL engine");
  return zrt_backend_gemm(eng->backend, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, ab, beta,
                          c, ldc, c_dtype, NULL);
}

void *zrt_engine_stream(const zrt_engine *eng) {
  return eng && eng->backend ? eng->backend->native_stream : NULL;
}

zrt_status zrt_engine_synchronize(zrt_engine *eng) {
  if (!eng) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_synchronize: NULL engine");
  return zrt_backend_synchronize(eng->backend, NULL);
}

zrt_status zrt_engine_launch(zrt_engine *eng, zrt_host_fn fn, const void *args, size_t bytes) {
  if (!eng) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_launch: NULL engine");
  return zrt_backend_launch_host(eng->backend, fn, args, bytes, NULL);
}

zrt_status zrt_engine_all_reduce_sum(zrt_engine *eng, float *host_vals, size_t n) {
  if (!eng || (!host_vals && n))
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_all_reduce_sum: NULL argument");
  return zrt_comm_all_reduce(eng->comm, host_vals, host_vals, n, ZRT_F32, ZRT_RED_SUM, NULL);
}

zrt_status zrt_engine_barrier(zrt_engine *eng) {
  if (!eng) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_barrier: NULL engine");
  return zrt_comm_barrier(eng->comm);
}
