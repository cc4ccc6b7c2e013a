/*
 * config_resolve.c — cross-key validation and resolution: the checks that
 * span several keys (each error names every key's source), "auto" filled
 * from the program or derived, and the batch triple train_batch_size =
 * micro * accumulation * world size.
 *
 * Invariants: resolution works on a copy and commits only when no error was
 * found; derived values carry the lowest priority so any later load or set
 * replaces them.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_impl.h"

/* ------------------------------------------------------------ validation */

static const zrt_cfg_source *src_of(const zrt_config *cfg, const char *path) {
  return &cfg->src[zrt_config_schema_find(path)];
}

/* "file:line: " for a key set in a file, "FLAG: " otherwise, "" for defaults */
static const char *at(const zrt_config *cfg, const char *path, char *buf, size_t len) {
  const zrt_cfg_source *s = src_of(cfg, path);
  if (s->kind == ZRT_SRC_DEFAULT || !s->where[0])
    buf[0] = 0;
  else
    snprintf(buf, len, "%s: ", s->where);
  return buf;
}

static const char *from(const zrt_config *cfg, const char *path, char *buf, size_t len) {
  const zrt_cfg_source *s = src_of(cfg, path);
  if (s->kind == ZRT_SRC_DEFAULT)
    snprintf(buf, len, "default");
  else
    snprintf(buf, len, "%s %s", zrt_config_source_kind_name(s->kind), s->where);
  return buf;
}

int zrt_config_offload_rule(int stage, zrt_offload_device optim, zrt_offload_device param,
                            double ratio, char *msg, size_t len) {
  const char *dev[] = {"none", "cpu", "nvme"};
  if (param != ZRT_OFFLOAD_NONE && stage >= 0 && stage != 3) {
    snprintf(msg, len,
             "zero_optimization.offload_param needs zero_optimization.stage 3 (stage is %d); set "
             "stage 3 or remove offload_param",
             stage);
    return ZRT_OFFLOAD_RULE_PARAM_STAGE;
  }
  if (optim != ZRT_OFFLOAD_NONE && stage == 0) {
    snprintf(msg, len,
             "zero_optimization.offload_optimizer needs zero_optimization.stage 1, 2 or 3 (stage "
             "is 0); set a stage or remove offload_optimizer");
    return ZRT_OFFLOAD_RULE_OPTIM_STAGE;
  }
  /* Twin-Flow (ratio < 1) splits the optimizer only at stage 3; below it
   * the ratio is ignored (the engine warns) */
  if (optim == ZRT_OFFLOAD_NONE || ratio >= 1.0 || stage != 3) return ZRT_OFFLOAD_RULE_OK;
  if (optim == ZRT_OFFLOAD_NVME) {
    snprintf(msg, len,
             "zero_optimization.offload_optimizer.ratio %g with offload_optimizer.device nvme is "
             "not supported: Twin-Flow splits the optimizer between the device and host memory, "
             "while nvme keeps every module's state in one swap-file set (DeepSpeed places only "
             "in-memory sub-groups by ratio); set offload_optimizer.device cpu to split, or ratio "
             "1 to keep nvme",
             ratio);
    return ZRT_OFFLOAD_RULE_RATIO_NVME;
  }
  if (param != ZRT_OFFLOAD_NONE) {
    snprintf(msg, len,
             "zero_optimization.offload_optimizer.ratio %g with offload_param.device %s is not "
             "supported: the device-side optimizer steps write the 16-bit shard, which "
             "offload_param keeps in host memory or NVMe; set offload_optimizer.ratio 1 or remove "
             "offload_param",
             ratio, dev[param]);
    return ZRT_OFFLOAD_RULE_RATIO_PARAM;
  }
  return ZRT_OFFLOAD_RULE_OK;
}

int zrt_config_bf16_master_rule(const zrt_cfg *v, int stage, zrt_offload_device optim, char *msg,
                                size_t len) {
  static const char *const opt[] = {"Adam", "AdamW", "SGD", "Lion"};
  const char *key = "bf16.bf16_master_weights_and_grads";
  if (v->bf16_optimizer_states && !v->bf16_master_weights_and_grads) {
    snprintf(msg, len,
             "bf16.bf16_optimizer_states needs bf16.bf16_master_weights_and_grads true (as in "
             "DeepSpeed: bf16 optimizer states belong to bf16 master weights); set both true, or "
             "remove bf16_optimizer_states");
    return ZRT_BF16M_RULE_STATES;
  }
  if (!v->bf16_master_weights_and_grads) return ZRT_BF16M_RULE_OK;
  if (!v->bf16_enabled) {
    snprintf(msg, len,
             "%s keeps the master weights of bf16 training in bf16, but bf16.enabled is false; "
             "set bf16.enabled true, or remove %s (fp16 and fp32 runs keep fp32 masters)",
             key, key);
    return ZRT_BF16M_RULE_MASTER;
  }
  if (stage == 0) {
    snprintf(msg, len,
             "%s needs zero_optimization.stage 1, 2 or 3 (stage is 0), as in DeepSpeed; set a "
             "stage or remove %s",
             key, key);
    return ZRT_BF16M_RULE_MASTER;
  }
  int t = (int)v->optimizer_type;
  if (t != ZRT_OPTIM_ADAM && t != ZRT_OPTIM_ADAMW) {
    snprintf(msg, len,
             "%s runs on the CPU Adam (DeepSpeedCPUAdam in DeepSpeed), but optimizer.type is %s; "
             "use Adam or AdamW, or remove %s",
             key, t >= 0 && t <= 3 ? opt[t] : "?", key);
    return ZRT_BF16M_RULE_MASTER;
  }
  if (optim == ZRT_OFFLOAD_NONE && !v->bf16_optimizer_states) {
    snprintf(msg, len,
             "%s with fp32 optimizer states needs zero_optimization.offload_optimizer.device cpu "
             "(DeepSpeed: \"Master weights feature requires ZeRO Offload with DeepSpeedCPUAdam\"); "
             "add offload_optimizer {\"device\": \"cpu\"}, or set bf16.bf16_optimizer_states "
             "true as well",
             key);
    return ZRT_BF16M_RULE_MASTER;
  }
  if (optim == ZRT_OFFLOAD_NONE) {
    snprintf(msg, len,
             "%s with bf16.bf16_optimizer_states runs in zrt on the CPU optimizer only (the "
             "device optimizers keep fp32 masters; DeepSpeed would also step them on the GPU): "
             "add zero_optimization.offload_optimizer {\"device\": \"cpu\"}",
             key);
    return ZRT_BF16M_RULE_MASTER;
  }
  if (optim == ZRT_OFFLOAD_NVME) {
    snprintf(msg, len,
             "%s with zero_optimization.offload_optimizer.device nvme is not supported by zrt "
             "(its swap files hold fp32 arrays); use offload_optimizer.device cpu, or remove %s",
             key, key);
    return ZRT_BF16M_RULE_MASTER;
  }
  if (stage == 3 && v->offload_optimizer.ratio < 1.0) {
    snprintf(msg, len,
             "%s with zero_optimization.offload_optimizer.ratio %g (Twin-Flow) is not supported "
             "by zrt: the sub-groups stepped on the device would keep fp32 masters; set ratio 1, "
             "or remove %s",
             key, v->offload_optimizer.ratio, key);
    return ZRT_BF16M_RULE_MASTER;
  }
  return ZRT_BF16M_RULE_OK;
}

void zrt_config_validate(const zrt_config *cfg, zrt_cfg_errs *errs) {
  const zrt_cfg *v = &cfg->v;
  char a[600], b[600];
  if (v->fp16_enabled && v->bf16_enabled)
    zrt_cfg_errs_add(errs,
                     "%sfp16.enabled and bf16.enabled are both true (bf16.enabled from %s); "
                     "enable at most one",
                     at(cfg, "fp16.enabled", a, sizeof a), from(cfg, "bf16.enabled", b, sizeof b));
  int64_t t = v->train_batch_size, m = v->train_micro_batch_size_per_gpu,
          g = v->gradient_accumulation_steps;
  if (t > 0 && m > 0 && g > 0 && t % (m * g) != 0)
    zrt_cfg_errs_add(errs,
                     "%strain_batch_size %lld, train_micro_batch_size_per_gpu %lld and "
                     "gradient_accumulation_steps %lld are inconsistent: train_batch_size must be "
                     "micro * accumulation * world size, and %lld is not a multiple of %lld",
                     at(cfg, "train_batch_size", a, sizeof a), (long long)t, (long long)m,
                     (long long)g, (long long)t, (long long)(m * g));
  char rule[600];
  int which = zrt_config_offload_rule((int)v->zero_stage, v->offload_optimizer.device,
                                      v->offload_param.device, v->offload_optimizer.ratio, rule,
                                      sizeof rule);
  if (which) {
    const char *key =
        which == ZRT_OFFLOAD_RULE_PARAM_STAGE   ? "zero_optimization.offload_param.device"
        : which == ZRT_OFFLOAD_RULE_OPTIM_STAGE ? "zero_optimization.offload_optimizer.device"
                                                : "zero_optimization.offload_optimizer.ratio";
    zrt_cfg_errs_add(errs, "%s%s (zero_optimization.stage from %s)", at(cfg, key, a, sizeof a),
                     rule, from(cfg, "zero_optimization.stage", b, sizeof b));
  }
  {
    /* bf16.enabled "auto" (accelerate's mixed_precision decides later):
     * judged as on here, the engine's build judges the resolved value */
    zrt_cfg vb = *v;
    if (zrt_config_is_auto(cfg, "bf16.enabled")) vb.bf16_enabled = 1;
    which = zrt_config_bf16_master_rule(&vb, (int)v->zero_stage, v->offload_optimizer.device, rule,
                                        sizeof rule);
  }
  if (which)
    zrt_cfg_errs_add(errs, "%s%s",
                     at(cfg,
                        which == ZRT_BF16M_RULE_STATES ? "bf16.bf16_optimizer_states"
                                                       : "bf16.bf16_master_weights_and_grads",
                        a, sizeof a),
                     rule);
  if (v->offload_optimizer.device == ZRT_OFFLOAD_NVME && !v->offload_optimizer.nvme_path[0])
    zrt_cfg_errs_add(errs,
                     "%szero_optimization.offload_optimizer.device is nvme but "
                     "zero_optimization.offload_optimizer.nvme_path is not set; give the swap "
                     "directory",
                     at(cfg, "zero_optimization.offload_optimizer.device", a, sizeof a));
  if (v->offload_param.device == ZRT_OFFLOAD_NVME && !v->offload_param.nvme_path[0])
    zrt_cfg_errs_add(errs,
                     "%szero_optimization.offload_param.device is nvme but "
                     "zero_optimization.offload_param.nvme_path is not set; give the swap "
                     "directory",
                     at(cfg, "zero_optimization.offload_param.device", a, sizeof a));
  if (v->machine_rank >= v->num_machines)
    zrt_cfg_errs_add(errs, "%smachine_rank %lld must be below num_machines %lld",
                     at(cfg, "machine_rank", a, sizeof a), (long long)v->machine_rank,
                     (long long)v->num_machines);
  if (v->num_processes < v->num_machines)
    zrt_cfg_errs_add(errs,
                     "%snum_processes %lld is the total over all machines and must be at least "
                     "num_machines %lld",
                     at(cfg, "num_processes", a, sizeof a), (long long)v->num_processes,
                     (long long)v->num_machines);
}

/* -------------------------------------------------------------- resolve */

static void derive(zrt_config *cfg, const char *path, const char *text, const char *why) {
  size_t i = (size_t)zrt_config_schema_find(path);
  zrt_cfg_errs errs = {0};
  zrt_cfg_source src = {.kind = ZRT_SRC_DERIVED};
  snprintf(src.where, sizeof src.where, "%s", why);
  /* derived values never outrank what a later load or set brings */
  cfg->prio[i] = ZRT_PRIO_DEFAULT;
  zrt_config_set_row(cfg, i, text, 0, 0, ZRT_PRIO_DEFAULT, &src, NULL, &errs);
  zrt_cfg_errs_free(&errs);
}

static int given(const zrt_config *cfg, const char *path, int64_t v) {
  size_t i = (size_t)zrt_config_schema_find(path);
  return v > 0 && !cfg->isauto[i] && cfg->src[i].kind != ZRT_SRC_DERIVED;
}

static void unresolved(const zrt_config *cfg, const char *path, zrt_cfg_errs *errs) {
  char a[600];
  zrt_cfg_errs_add(errs,
                   "%s%s is \"auto\" and the program did not set it: give a value in the file, "
                   "with --set %s=VALUE, or from the program with zrt_config_set(cfg, \"%s\", "
                   "value, \"program\")",
                   at(cfg, path, a, sizeof a), path, path, path);
}

/* A value left to the program (pending resolve): one note line. */
static void left_to_program(zrt_cfg_errs *notes, const char *path, const char *otherwise) {
  zrt_cfg_errs_add(notes, "%s is \"auto\": resolved at run time by the program, else %s", path,
                   otherwise);
}

static zrt_status resolve(zrt_config *cfg, int world_size, int pending);

zrt_status zrt_config_resolve(zrt_config *cfg, int world_size) {
  return resolve(cfg, world_size, 0);
}

zrt_status zrt_config_resolve_pending(zrt_config *cfg, int world_size) {
  return resolve(cfg, world_size, 1);
}

static zrt_status resolve(zrt_config *cfg, int world_size, int pending) {
  if (!cfg) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_config_resolve: cfg is NULL");
  if (world_size < 1)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_config_resolve: world size %d must be >= 1",
                     world_size);
  zrt_config *c;
  ZRT_CHECK(zrt_config_copy(cfg, &c));
  zrt_cfg_errs errs = {0}, notes = {0};
  zrt_cfg *v = &c->v;
  const int64_t W = world_size;
  char buf[64], why[128], a[600];

  /* batch triple: train = micro * accum * world (DeepSpeed's rule) */
  int gt = given(c, "train_batch_size", v->train_batch_size);
  int gm = given(c, "train_micro_batch_size_per_gpu", v->train_micro_batch_size_per_gpu);
  int ga = given(c, "gradient_accumulation_steps", v->gradient_accumulation_steps);
  int64_t t = v->train_batch_size, m = v->train_micro_batch_size_per_gpu,
          g = v->gradient_accumulation_steps;
  snprintf(why, sizeof why, "train = micro * accum * world (world %d)", world_size);
  if (gt && gm && ga) {
    if (t != m * g * W) {
      char fm[600], fg[600], ft[600];
      zrt_cfg_errs_add(&errs,
                       "%sbatch sizes are inconsistent: train_batch_size %lld (%s) != "
                       "train_micro_batch_size_per_gpu %lld (%s) * gradient_accumulation_steps "
                       "%lld (%s) * world size %lld (= %lld); change one, or set one of them to "
                       "\"auto\"",
                       at(c, "train_batch_size", a, sizeof a), (long long)t,
                       from(c, "train_batch_size", ft, sizeof ft), (long long)m,
                       from(c, "train_micro_batch_size_per_gpu", fm, sizeof fm), (long long)g,
                       from(c, "gradient_accumulation_steps", fg, sizeof fg), (long long)W,
                       (long long)(m * g * W));
    }
  } else if (gt && gm) {
    if (t % (m * W))
      zrt_cfg_errs_add(&errs,
                       "%strain_batch_size %lld is not divisible by "
                       "train_micro_batch_size_per_gpu %lld * world size %lld, so "
                       "gradient_accumulation_steps cannot be inferred",
                       at(c, "train_batch_size", a, sizeof a), (long long)t, (long long)m,
                       (long long)W);
    else {
      snprintf(buf, sizeof buf, "%lld", (long long)(t / (m * W)));
      derive(c, "gradient_accumulation_steps", buf, why);
    }
  } else if (gt && ga) {
    if (t % (g * W))
      zrt_cfg_errs_add(&errs,
                       "%strain_batch_size %lld is not divisible by gradient_accumulation_steps "
                       "%lld * world size %lld, so train_micro_batch_size_per_gpu cannot be "
                       "inferred",
                       at(c, "train_batch_size", a, sizeof a), (long long)t, (long long)g,
                       (long long)W);
    else {
      snprintf(buf, sizeof buf, "%lld", (long long)(t / (g * W)));
      derive(c, "train_micro_batch_size_per_gpu", buf, why);
    }
  } else if (gm && ga) {
    snprintf(buf, sizeof buf, "%lld", (long long)(m * g * W));
    derive(c, "train_batch_size", buf, why);
  } else if (gt) {
    if (t % W)
      zrt_cfg_errs_add(&errs,
                       "%strain_batch_size %lld is not divisible by the world size %lld "
                       "(gradient_accumulation_steps 1)",
                       at(c, "train_batch_size", a, sizeof a), (long long)t, (long long)W);
    else {
      derive(c, "gradient_accumulation_steps", "1", "DeepSpeed default with train_batch_size");
      snprintf(buf, sizeof buf, "%lld", (long long)(t / W));
      derive(c, "train_micro_batch_size_per_gpu", buf, why);
    }
  } else if (ga && !pending) {
    /* DeepSpeed (_set_batch_related_parameters): accumulation alone says
     * nothing about the batch */
    zrt_cfg_errs_add(&errs,
                     "%sgradient_accumulation_steps %lld is given but neither train_batch_size nor "
                     "train_micro_batch_size_per_gpu: give one of them (DeepSpeed needs one too)",
                     at(c, "gradient_accumulation_steps", a, sizeof a), (long long)g);
  } else if (ga) {
    left_to_program(&notes, "train_micro_batch_size_per_gpu",
                    "an error on the rank (only gradient_accumulation_steps is given)");
  } else if (gm) {
    if (!ga) derive(c, "gradient_accumulation_steps", "1", "nothing set it: 1");
    snprintf(buf, sizeof buf, "%lld",
             (long long)(v->train_micro_batch_size_per_gpu * v->gradient_accumulation_steps * W));
    derive(c, "train_batch_size", buf, why);
  } else {
    const char *names[] = {"train_batch_size", "train_micro_batch_size_per_gpu",
                           "gradient_accumulation_steps"};
    int anyauto = 0;
    for (int j = 0; j < 3; j++) anyauto |= c->isauto[zrt_config_schema_find(names[j])];
    if (anyauto && pending)
      left_to_program(&notes, "train_micro_batch_size_per_gpu",
                      "an error on the rank (a program sets it with zrt_config_set, e.g. from "
                      "its batch-size option)");
    else if (anyauto)
      zrt_cfg_errs_add(&errs,
                       "%sbatch size is \"auto\" and nothing resolved it: none of "
                       "train_batch_size, train_micro_batch_size_per_gpu, "
                       "gradient_accumulation_steps has a value; set "
                       "train_micro_batch_size_per_gpu in the file, with --set, or from the "
                       "program (zrt_config_set(cfg, \"train_micro_batch_size_per_gpu\", \"8\", "
                       "\"program\"))",
                       at(c, "train_batch_size", a, sizeof a));
    else {
      derive(c, "train_micro_batch_size_per_gpu", "1", "nothing set it: 1");
      derive(c, "gradient_accumulation_steps", "1", "nothing set it: 1");
      snprintf(buf, sizeof buf, "%lld", (long long)W);
      derive(c, "train_batch_size", buf, why);
    }
  }

  /* precision: auto follows mixed_precision */
  int mp_on[2];
  zrt_config_mp_blocks(v->mixed_precision, mp_on);
  for (int k = 0; k < 2; k++)
    if (c->isauto[zrt_config_schema_find(zrt_cfg_mp_keys[k])])
      derive(c, zrt_cfg_mp_keys[k], mp_on[k] ? "true" : "false", "auto: mixed_precision");

  /* buckets: without the model's hidden size, auto means DeepSpeed's default */
  static const char *const bucket_keys[] = {"zero_optimization.reduce_bucket_size",
                                            "zero_optimization.stage3_prefetch_bucket_size",
                                            "zero_optimization.stage3_param_persistence_threshold"};
  for (size_t j = 0; j < 3; j++) {
    long i = zrt_config_schema_find(bucket_keys[j]);
    if (c->isauto[i]) derive(c, bucket_keys[j], zrt_cfg_rows[i].k.def, "auto: DeepSpeed default");
  }
  /* DeepSpeed turns overlap_comm on for stage 3 unless the user said so */
  long oc = zrt_config_schema_find("zero_optimization.overlap_comm");
  if (v->zero_stage == 3 && c->src[oc].kind == ZRT_SRC_DEFAULT)
    derive(c, "zero_optimization.overlap_comm", "true", "DeepSpeed default for stage 3");
  /* DeepSpeed: type Adam runs AdamW (decoupled weight decay) unless
   * adam_w_mode is false (ADAM_W_MODE_DEFAULT = True in runtime/config.py;
   * engine.py: effective_adam_w_mode = name == AdamW or adam_w_mode). A
   * re-resolve after adam_w_mode became false undoes our own derivation. */
  long ot = zrt_config_schema_find("optimizer.type");
  if (v->optimizer_type == ZRT_OPTIM_ADAM && v->adam_w_mode)
    derive(c, "optimizer.type", "AdamW", "Adam with adam_w_mode true (DeepSpeed's default)");
  else if (v->optimizer_type == ZRT_OPTIM_ADAMW && !v->adam_w_mode &&
           c->src[ot].kind == ZRT_SRC_DERIVED)
    derive(c, "optimizer.type", "Adam", "Adam with adam_w_mode false");

  /* scheduler: warmup_max_lr auto = lr, warmup_min_lr auto = 0 (HF's fill) */
  if (c->isauto[zrt_config_schema_find("scheduler.params.warmup_min_lr")])
    derive(c, "scheduler.params.warmup_min_lr", "0", "auto: 0");
  long lr = zrt_config_schema_find("optimizer.params.lr");
  if (c->isauto[zrt_config_schema_find("scheduler.params.warmup_max_lr")] && !c->isauto[lr]) {
    zrt_config_fmt_double(v->lr, buf, sizeof buf);
    derive(c, "scheduler.params.warmup_max_lr", buf, "auto: optimizer.params.lr");
  }
  if ((v->scheduler_type == ZRT_SCHED_WARMUP_DECAY_LR ||
       v->scheduler_type == ZRT_SCHED_WARMUP_COSINE_LR) &&
      v->total_num_steps < 0 &&
      !c->isauto[zrt_config_schema_find("scheduler.params.total_num_steps")])
    zrt_cfg_errs_add(&errs,
                     "%sscheduler.params.total_num_steps is required by scheduler.type %s; set "
                     "the run's number of optimizer steps",
                     at(c, "scheduler.type", a, sizeof a),
                     v->scheduler_type == ZRT_SCHED_WARMUP_DECAY_LR ? "WarmupDecayLR"
                                                                    : "WarmupCosineLR");
  if (v->scheduler_type == ZRT_SCHED_WARMUP_COSINE_LR && v->warmup_num_steps >= 0 &&
      v->total_num_steps > 0 && v->warmup_num_steps > v->total_num_steps)
    zrt_cfg_errs_add(&errs, "%sscheduler.params.warmup_num_steps %lld exceeds total_num_steps %lld",
                     at(c, "scheduler.params.warmup_num_steps", a, sizeof a),
                     (long long)v->warmup_num_steps, (long long)v->total_num_steps);

  /* every other auto that is still auto cannot be resolved here */
  for (size_t i = 0; i < zrt_cfg_nrows; i++) {
    const char *p = zrt_cfg_rows[i].k.path;
    /* the stage stays auto for the engine; the batch triple was reported above */
    if (!c->isauto[i] || !strcmp(p, "zero_optimization.stage") || !strcmp(p, "train_batch_size") ||
        !strcmp(p, "train_micro_batch_size_per_gpu") || !strcmp(p, "gradient_accumulation_steps"))
      continue;
    /* scheduler params matter only with a scheduler */
    if (!strncmp(p, "scheduler.", 10) && v->scheduler_type == ZRT_SCHED_NONE) continue;
    if (!strcmp(p, "scheduler.params.total_num_steps") && v->scheduler_type == ZRT_SCHED_WARMUP_LR)
      continue;
    /* DeepSpeed's config models drop an "auto" nobody filled and take their
     * default; only a key without one is an error */
    const char *def = zrt_cfg_rows[i].k.def;
    if (!def || !strcmp(def, "auto")) {
      if (pending)
        left_to_program(&notes, p,
                        "an error on the rank (a program sets it with zrt_config_set, e.g. "
                        "from its step count)");
      else
        unresolved(c, p, &errs);
      continue;
    }
    char otherwise[160];
    snprintf(otherwise, sizeof otherwise, "DeepSpeed's default %s", def);
    if (pending) left_to_program(&notes, p, otherwise);
    derive(c, p, def,
           pending ? "auto: left to the program, else DeepSpeed's default"
                   : "auto: DeepSpeed's default (the program did not set it)");
  }
  zrt_config_validate(c, &errs);
  if (errs.n) {
    zrt_status st = zrt_error(ZRT_ERR_CONFIG, "%s", errs.buf);
    zrt_cfg_errs_free(&errs);
    zrt_cfg_errs_free(&notes);
    zrt_config_destroy(c);
    return st;
  }
  zrt_config_commit_values(cfg, c);
  for (char *line = notes.buf, *nl; line && *line; line = nl ? nl + 1 : NULL) {
    nl = strchr(line, '\n');
    if (nl) *nl = 0;
    zrt_config_add_warning(cfg, line);
  }
  zrt_cfg_errs_free(&notes);
  return ZRT_OK;
}

/* -------------------------------------------------------------- writers */
