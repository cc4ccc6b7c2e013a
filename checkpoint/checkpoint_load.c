/*
 * checkpoint_load.c — zrt_engine_load and zrt_ckpt_peek (include/zrt.h):
 * the load half of checkpoint.c's protocol (docs/checkpoints.md, "Save and
 * load protocol"). A load checks the model, the optimizer and the dtypes
 * against this engine, stages this rank's new shards from the old rank
 * files (resharding across world sizes and stages), agrees across ranks,
 * and only then installs masters, optimizer states, each part's state
 * (engine_state.h) and the re-derived 16-bit weights.
 *
 * Invariant: nothing in the engine changes until every rank has validated
 * and staged everything it needs (the "commit" after the second
 * agreement); a failure after that says the engine is inconsistent.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_format.h"
#include "checkpoint_internal.h"
#include "engine_state.h"

static void zrt_ckpt_shape_text(char *buf, size_t len, int ndim, const int64_t *shape) {
  size_t at = 0;
  at += (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < ndim && at < len; d++)
    at += (size_t)snprintf(buf + at, len - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (at < len) snprintf(buf + at, len - at, "]");
}

/* The engine's model must be the checkpoint's: same parameters in the same
 * modules and order with the same shapes. Names the first difference. */
static zrt_status zrt_ckpt_check_model(const zrt_engine *eng, const zrt_ckpt_meta *m) {
  int i = 0; /* running param index in module order */
  char a[160], b[160];
  zrt_engine_view v;
  zrt_engine_view_get(eng, &v);
  for (int k = 0; k < v.nmodules || k < m->nmodules; k++) {
    zrt_engine_module_view mv = {0};
    if (k < v.nmodules) zrt_engine_module_view_get(eng, k, &mv);
    int ne = mv.nparams;
    int nc = k < m->nmodules ? m->modules[k].nparams : 0;
    for (int j = 0; j < ne || j < nc; j++, i++) {
      const zrt_param_entry *pe = j < ne ? zrt_engine_param_entry(eng, mv.params[j]) : NULL;
      const zrt_ckpt_param_meta *pc = j < nc ? &m->params[m->modules[k].first_param + j] : NULL;
      if (!pe || !pc)
        return zrt_error(ZRT_ERR_INVALID_ARG,
                         "checkpoint '%s' does not match this model: parameter #%d of module %d "
                         "is '%s' in the %s but missing in the %s",
                         m->step_dir, i, k, pe ? pe->name : pc->name, pe ? "engine" : "checkpoint",
                         pe ? "checkpoint" : "engine");
      if (strcmp(pe->name, pc->name))
        return zrt_error(ZRT_ERR_INVALID_ARG,
                         "checkpoint '%s' does not match this model: parameter #%d is '%s' in the "
                         "checkpoint but '%s' in the engine",
                         m->step_dir, i, pc->name, pe->name);
      int same = pe->ndim == pc->ndim;
      for (int d = 0; same && d < pe->ndim; d++) same = pe->shape[d] == pc->shape[d];
      if (!same) {
        zrt_ckpt_shape_text(a, sizeof a, pc->ndim, pc->shape);
        zrt_ckpt_shape_text(b, sizeof b, pe->ndim, pe->shape);
        return zrt_error(ZRT_ERR_INVALID_ARG,
                         "checkpoint '%s' does not match this model: parameter '%s' has shape %s "
                         "in the checkpoint but %s in the engine",
                         m->step_dir, pe->name, a, b);
      }
    }
  }
  return ZRT_OK;
}

/* Adam and AdamW keep the same two moments with the same meaning; any other
 * change of optimizer would read one optimizer's state as another's (an
 * AdamW exp_avg as SGD's momentum), or drop it silently, so it is refused
 * as DeepSpeed's load of a mismatched optimizer state dict fails. A
 * checkpoint without the field (none is written without it) is not judged. */
static zrt_status zrt_ckpt_check_optimizer(const zrt_engine *eng, const zrt_ckpt_meta *m) {
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(m->root, "optimizer");
  if (!cJSON_IsString(o)) return ZRT_OK;
  zrt_engine_view v;
  zrt_engine_view_get(eng, &v);
  const char *saved = o->valuestring, *mine = zrt_ckpt_optim_name(v.cfg->optimizer_type);
  int adam_a = !strcmp(saved, "adam") || !strcmp(saved, "adamw");
  int adam_b = !strcmp(mine, "adam") || !strcmp(mine, "adamw");
  if (!strcmp(saved, mine) || (adam_a && adam_b)) return ZRT_OK;
  return zrt_error(ZRT_ERR_INVALID_ARG,
                   "checkpoint '%s' was saved with optimizer '%s' but this engine's optimizer is "
                   "'%s': the optimizer state does not carry over between them. Resume with "
                   "optimizer.type '%s', or start the new optimizer from the weights alone: "
                   "'zrt consolidate %s OUT' writes them and zrt_engine_load_safetensors (the "
                   "GPT example's --init OUT) loads them",
                   m->step_dir, saved, mine, saved, m->step_dir);
}

/* The dtype a checkpoint's run kept its masters (key "master_dtype") or
 * optimizer states ("optimizer_state_dtype") in, against this engine's:
 * DeepSpeed's load copies the saved tensors into its own (copy_), so a
 * change of bf16_master_weights_and_grads / bf16_optimizer_states converts;
 * zrt does the same and says so: fp32 -> bf16 rounds to nearest even (the
 * rounding every update applies), bf16 -> fp32 is exact. Checkpoints
 * without the keys were written by fp32-only versions. Rank 0 logs. */
static zrt_status zrt_ckpt_note_dtype(const zrt_engine *eng, const zrt_ckpt_meta *m,
                                      const char *key, zrt_dtype mine, const char *what,
                                      const char *option) {
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(m->root, key);
  if (o &&
      !(cJSON_IsString(o) && (!strcmp(o->valuestring, "fp32") || !strcmp(o->valuestring, "bf16"))))
    return zrt_error(ZRT_ERR_IO, "checkpoint '%s': meta.json's %s is not \"fp32\" or \"bf16\"",
                     m->step_dir, key);
  const char *saved = o ? o->valuestring : "fp32";
  if (!strcmp(saved, zrt_dtype_name(mine))) return ZRT_OK;
  zrt_engine_view v;
  zrt_engine_view_get(eng, &v);
  zrt_log(v.rank == 0 ? ZRT_LOG_INFO : ZRT_LOG_DEBUG,
          "checkpoint '%s': %s saved in %s, this run keeps them in %s (bf16.%s %s): %s",
          m->step_dir, what, saved, zrt_dtype_name(mine), option,
          mine == ZRT_F32 ? "false" : "true",
          mine == ZRT_F32 ? "widened exactly" : "rounded to nearest even, as every step rounds");
  return ZRT_OK;
}

typedef struct zrt_ckpt_staged {
  float *buf[3]; /* master, exp_avg, exp_avg_sq per module (NULL when absent) */
} zrt_ckpt_staged;

#define ZRT_I64_LO (-9007199254740992ll) /* +-2^53: the integers a double holds exactly */
#define ZRT_I64_HI 9007199254740992ll

static double zrt_json_num(const cJSON *o, const char *k, double dflt) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(j) ? j->valuedouble : dflt;
}

/* The parts' states from the meta file, each over its current values (a
 * key an older checkpoint lacks keeps the engine's). The scaler only
 * carries over between runs of the same precision: a fp16 run's scale means
 * nothing to a bf16 run. */
static void zrt_ckpt_state_from_json(zrt_engine *eng, const zrt_ckpt_meta *meta) {
  const cJSON *c = cJSON_GetObjectItemCaseSensitive(meta->root, "counters");
  zrt_engine_counters_state k;
  zrt_engine_counters_get(eng, &k);
  k.global_step = meta->step;
  k.micro_step = zrt_ckpt_json_int(c, "micro_step", 0, ZRT_I64_HI, k.micro_step);
  k.applied_steps = zrt_ckpt_json_int(c, "applied_steps", 0, ZRT_I64_HI, k.applied_steps);
  k.skipped_total = zrt_ckpt_json_int(c, "skipped_total", 0, ZRT_I64_HI, k.skipped_total);
  k.last_grad_norm = (float)zrt_json_num(c, "last_grad_norm", 0);
  zrt_engine_counters_set(eng, &k);

  const cJSON *s = cJSON_GetObjectItemCaseSensitive(meta->root, "loss_scaler");
  zrt_engine_view v;
  zrt_engine_view_get(eng, &v);
  zrt_dtype dtype = v.dtype;
  if (meta->dtype == dtype && s) {
    zrt_scaler_state sc;
    zrt_engine_scaler_get(eng, &sc);
    sc.dynamic = (int)zrt_ckpt_json_int(s, "dynamic", 0, 1, sc.dynamic);
    sc.cur_scale = zrt_json_num(s, "cur_scale", sc.cur_scale);
    sc.min_scale = zrt_json_num(s, "min_scale", sc.min_scale);
    sc.factor = zrt_json_num(s, "factor", sc.factor);
    sc.window = zrt_ckpt_json_int(s, "window", ZRT_I64_LO, ZRT_I64_HI, sc.window);
    sc.delayed_shift =
        zrt_ckpt_json_int(s, "delayed_shift", ZRT_I64_LO, ZRT_I64_HI, sc.delayed_shift);
    sc.cur_hysteresis =
        zrt_ckpt_json_int(s, "cur_hysteresis", ZRT_I64_LO, ZRT_I64_HI, sc.cur_hysteresis);
    sc.consecutive_hysteresis =
        (int)zrt_ckpt_json_int(s, "consecutive_hysteresis", 0, 1, sc.consecutive_hysteresis);
    sc.cur_iter = zrt_ckpt_json_int(s, "cur_iter", ZRT_I64_LO, ZRT_I64_HI, sc.cur_iter);
    sc.last_overflow_iter =
        zrt_ckpt_json_int(s, "last_overflow_iter", ZRT_I64_LO, ZRT_I64_HI, sc.last_overflow_iter);
    zrt_engine_scaler_set(eng, &sc);
  } else if (meta->dtype != dtype) {
    zrt_log(ZRT_LOG_WARN,
            "checkpoint %s was saved in %s, this run uses %s: loss-scaler state "
            "not restored",
            meta->step_dir, zrt_dtype_name(meta->dtype), zrt_dtype_name(dtype));
  }
  const cJSON *sj = cJSON_GetObjectItemCaseSensitive(meta->root, "scheduler");
  if (sj) {
    zrt_sched_state sh = {
        .type = (int)zrt_ckpt_json_int(sj, "type", -1, 1 << 20, -1),
        .last_batch_iteration = zrt_ckpt_json_int(sj, "last_batch_iteration", -1, ZRT_I64_HI, -1),
        .cur_lr = zrt_json_num(sj, "cur_lr", NAN),
    };
    zrt_engine_sched_set(eng, &sh);
  }
}

zrt_status zrt_engine_load(zrt_engine *eng, const char *dir, char **user_json) {
  if (user_json) *user_json = NULL;
  if (!eng || !dir || !dir[0])
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_load: NULL engine or empty directory");
  zrt_engine_view v;
  zrt_engine_view_get(eng, &v);
  if (!v.built)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_load('%s'): call zrt_engine_build first",
                     dir);
  zrt_status st = ZRT_OK;
  zrt_ckpt_meta meta;
  zrt_ckpt_reader rd;
  zrt_pool *pool = NULL;
  zrt_ckpt_staged *stg = NULL;
  char *user = NULL;
  int have_meta = 0, have_reader = 0;
  memset(&rd, 0, sizeof rd);

  /* 1. metadata and model (every rank reads the same files) */
  st = zrt_ckpt_meta_load(dir, &meta);
  have_meta = st == ZRT_OK;
  if (st == ZRT_OK) st = zrt_ckpt_check_model(eng, &meta);
  if (st == ZRT_OK) st = zrt_ckpt_check_optimizer(eng, &meta);
  for (int k = ZRT_CKPT_EXP_AVG; st == ZRT_OK && k <= ZRT_CKPT_EXP_AVG_SQ; k++) {
    if (zrt_ckpt_engine_has(eng, k) && !meta.has_kind[k]) {
      const cJSON *o = cJSON_GetObjectItemCaseSensitive(meta.root, "optimizer");
      st = zrt_error(ZRT_ERR_INVALID_ARG,
                     "checkpoint '%s' has no %s state (saved with optimizer '%s'); this engine's "
                     "optimizer '%s' needs it",
                     meta.step_dir, zrt_ckpt_kind_name(k), cJSON_IsString(o) ? o->valuestring : "?",
                     zrt_ckpt_optim_name(v.cfg->optimizer_type));
    }
  }
  if (st == ZRT_OK)
    st = zrt_ckpt_note_dtype(eng, &meta, "master_dtype", v.master_dtype, "the master weights",
                             "bf16_master_weights_and_grads");
  if (st == ZRT_OK && zrt_engine_optim_states(eng) > 0)
    st = zrt_ckpt_note_dtype(eng, &meta, "optimizer_state_dtype", v.state_dtype,
                             "the optimizer states", "bf16_optimizer_states");
  ZRT_CHECK_GOTO(zrt_ckpt_agree(eng, st, NULL, 0), st, done);

  /* 2. stage this rank's new shards from the old rank files */
  ZRT_CHECK_GOTO(zrt_ckpt_reader_init(&rd, &meta), st, agree2);
  have_reader = 1;
  ZRT_CHECK_GOTO(zrt_ckpt_staging_pool(&pool), st, agree2);
  stg = calloc((size_t)v.nmodules, sizeof *stg);
  if (!stg) {
    st = zrt_error(ZRT_ERR_OOM, "checkpoint load: out of host memory");
    goto agree2;
  }
  for (int m = 0; m < v.nmodules; m++) {
    int64_t foff, len;
    zrt_engine_master_extent(eng, m, &foff, &len);
    for (int k = 0; k < 3; k++) {
      if (!zrt_ckpt_engine_has(eng, k)) continue;
      ZRT_CHECK_GOTO(zrt_pool_alloc(pool, (size_t)len * 4,
                                    k == 0 ? ZRT_MEM_MASTER32 : ZRT_MEM_OPTIM_STATE,
                                    (void **)&stg[m].buf[k]),
                     st, agree2);
      ZRT_CHECK_GOTO(zrt_ckpt_read_range(&rd, m, k, foff, len, stg[m].buf[k]), st, agree2);
    }
  }
  if (user_json) {
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(meta.root, "user");
    user = cJSON_PrintUnformatted(u ? u : cJSON_GetObjectItemCaseSensitive(meta.root, "format"));
    if (!user) st = zrt_error(ZRT_ERR_OOM, "checkpoint load: out of host memory for user JSON");
  }
agree2:
  if (st != ZRT_OK) zrt_error_context(st, "loading checkpoint '%s': ", dir);
  ZRT_CHECK_GOTO(zrt_ckpt_agree(eng, st, NULL, 0), st, done);

  /* 3. commit: everything validated on every rank */
  for (int m = 0; m < v.nmodules; m++) {
    ZRT_CHECK_GOTO(zrt_engine_set_master(eng, m, stg[m].buf[0]), st, commit_failed);
    for (int k = 1; k < 3; k++)
      if (stg[m].buf[k])
        ZRT_CHECK_GOTO(zrt_engine_state_io(eng, m, (zrt_state_array)k, ZRT_IO_WRITE, stg[m].buf[k]),
                       st, commit_failed);
  }
  ZRT_CHECK_GOTO(zrt_backend_synchronize(v.backend, NULL), st, commit_failed);
  zrt_ckpt_state_from_json(eng, &meta);
  /* 16-bit working weights are re-derived from the restored masters, the
   * same conversion the optimizer step applies: bitwise what an
   * uninterrupted run holds. Collective. */
  ZRT_CHECK_GOTO(zrt_engine_refresh_params(eng), st, commit_failed);
  if (user_json) {
    *user_json = user;
    user = NULL;
  }
  if (meta.world != v.world || meta.stage != v.stage)
    zrt_log0(ZRT_LOG_INFO, "checkpoint %s resharded: world %d stage %d -> world %d stage %d",
             meta.step_dir, meta.world, meta.stage, v.world, v.stage);
  goto done;
commit_failed:
  zrt_error_context(st,
                    "loading checkpoint '%s' failed while installing the validated states "
                    "(the engine is now inconsistent; recreate it): ",
                    dir);
done:
  if (stg && pool)
    for (int m = 0; m < v.nmodules; m++)
      for (int k = 0; k < 3; k++) zrt_pool_free(pool, stg[m].buf[k]);
  free(stg);
  zrt_pool_destroy(pool);
  if (have_reader) zrt_ckpt_reader_free(&rd);
  if (have_meta) zrt_ckpt_meta_free(&meta);
  if (user) cJSON_free(user);
  return st;
}

/* ------------------------------------------------------------- peek */

zrt_status zrt_ckpt_peek(const char *dir, int64_t *step, char **user_json) {
  if (user_json) *user_json = NULL;
  if (!dir || !dir[0])
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_ckpt_peek: empty checkpoint directory");
  zrt_ckpt_meta meta;
  ZRT_CHECK(zrt_ckpt_meta_load(dir, &meta));
  zrt_status st = ZRT_OK;
  if (step) *step = meta.step;
  if (user_json) {
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(meta.root, "user");
    char *txt = cJSON_IsObject(u) ? cJSON_PrintUnformatted(u) : NULL;
    /* cJSON allocates with malloc here (no hooks installed); copied anyway
     * so the caller's free() never depends on that. */
    const char *src = txt ? txt : "{}";
    *user_json = malloc(strlen(src) + 1);
    if (*user_json)
      memcpy(*user_json, src, strlen(src) + 1);
    else
      st = zrt_error(ZRT_ERR_OOM, "zrt_ckpt_peek('%s'): out of host memory", dir);
    if (txt) cJSON_free(txt);
  }
  zrt_ckpt_meta_free(&meta);
  return st;
}
