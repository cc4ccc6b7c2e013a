/*
 * config.h — the resolved, typed config and the schema table behind it
 * (DESIGN.md rule 7).
 *
 * One table (config_schema.c) lists every key: dotted path, type, default,
 * range or enum values, the field of zrt_cfg it fills, the environment
 * variable (zrt section) and the doc line. The YAML loader (libyaml), the
 * DeepSpeed JSON loader (cJSON), the launch-YAML loader, env overrides, CLI
 * overrides, validation, `zrt config` questions, `zrt config explain` and
 * docs/config-reference.md are all driven from it.
 *
 * Every value remembers its source (default, FILE:line, environment, flag,
 * program, derived).
 */
#ifndef ZRT_CONFIG_H
#define ZRT_CONFIG_H

#include <stdio.h>

#include "zrt.h"

#define ZRT_CFG_STR 512

/* Optimizer kinds (optimizer.type); their hyper-parameters are optim.h's. */
typedef enum zrt_optim_type {
  ZRT_OPTIM_ADAM = 0,
  ZRT_OPTIM_ADAMW,
  ZRT_OPTIM_SGD,
  ZRT_OPTIM_LION
} zrt_optim_type;

typedef enum zrt_offload_device {
  ZRT_OFFLOAD_NONE = 0,
  ZRT_OFFLOAD_CPU,
  ZRT_OFFLOAD_NVME
} zrt_offload_device;

typedef enum zrt_sched_type {
  ZRT_SCHED_NONE = 0,
  ZRT_SCHED_WARMUP_LR,
  ZRT_SCHED_WARMUP_DECAY_LR,
  ZRT_SCHED_WARMUP_COSINE_LR
} zrt_sched_type;

typedef struct zrt_offload_cfg {
  zrt_offload_device device;
  char nvme_path[ZRT_CFG_STR];
  int pin_memory;
  int64_t buffer_count;
  int64_t buffer_size; /* offload_param only */
  int64_t max_in_cpu;  /* offload_param only */
  double ratio;        /* offload_optimizer only: Twin-Flow share offloaded (stage 3) */
} zrt_offload_cfg;

/* The resolved config. Sizes in bytes or elements as DeepSpeed defines
 * them. Values "auto" resolve in zrt_config_resolve; until then integer
 * fields hold -1 for auto / unset. */
typedef struct zrt_cfg {
  /* batch triple: train = micro * accum * world */
  int64_t train_batch_size;
  int64_t train_micro_batch_size_per_gpu;
  int64_t gradient_accumulation_steps;
  double gradient_clipping; /* 0 = off */
  int64_t steps_per_print;
  int wall_clock_breakdown;
  /* DeepSpeed monitor sections (engine/monitor.h) */
  int tb_enabled, csv_enabled;
  char tb_output_path[ZRT_CFG_STR], tb_job_name[ZRT_CFG_STR];
  char csv_output_path[ZRT_CFG_STR], csv_job_name[ZRT_CFG_STR];
  int communication_data_type; /* -1 = working dtype, else zrt_dtype */

  /* fp16 */
  int fp16_enabled;
  double fp16_loss_scale; /* 0 = dynamic */
  int64_t fp16_initial_scale_power;
  int64_t fp16_loss_scale_window;
  int64_t fp16_hysteresis;
  int fp16_consecutive_hysteresis;
  double fp16_min_loss_scale;

  /* bf16 */
  int bf16_enabled;
  int bf16_check_grad_overflow;
  int bf16_master_weights_and_grads; /* master weights + gradient partitions in bf16 */
  int bf16_optimizer_states;         /* optimizer moments in bf16 (needs the one above) */

  /* zero_optimization */
  int zero_stage; /* 0..3; -1 = auto */
  int contiguous_gradients;
  int overlap_comm;
  int reduce_scatter;
  int64_t reduce_bucket_size;    /* elements */
  int64_t allgather_bucket_size; /* elements */
  int64_t stage3_prefetch_bucket_size;
  int64_t stage3_param_persistence_threshold;
  int64_t stage3_max_live_parameters;
  int64_t stage3_max_reuse_distance;
  int64_t sub_group_size;
  zrt_offload_cfg offload_optimizer;
  zrt_offload_cfg offload_param;

  /* activation_checkpointing (ZeRO-R; engine/engine_actckpt.c) */
  int actckpt_partition, actckpt_cpu, actckpt_contiguous, actckpt_sync, actckpt_profile;
  int64_t actckpt_number; /* -1 = null: every offered block */

  /* optimizer */
  zrt_optim_type optimizer_type;
  double lr, beta1, beta2, eps, weight_decay, momentum;
  int bias_correction;
  int adam_w_mode; /* DeepSpeed's Adam flag; set true explicitly -> AdamW */

  /* scheduler */
  zrt_sched_type scheduler_type;
  double warmup_min_lr, warmup_max_lr;
  int64_t warmup_num_steps;
  int warmup_type_log; /* 1 = "log" (DeepSpeed default), 0 = "linear" */
  int64_t total_num_steps;
  double cos_min_ratio, warmup_min_ratio;

  /* zrt section (each also ZRT_<KEY> in the environment) */
  uint64_t device_memory_limit; /* 0 = device's own */
  uint64_t seed;
  char metrics_path[ZRT_CFG_STR];
  double comm_timeout_s;
  char backend[32]; /* auto|cpu|cuda */
  char comm[32];    /* auto|self|mpi|shm|hier|nccl */
  int numa_node;    /* -1 = auto */
  int bind_cores_to_rank;
  int blas_threads;             /* zrt.blas_threads: 0 = OpenBLAS's default */
  int adaptive_threads;         /* zrt.adaptive_threads: the team follows measured step times */
  int pin_memory_fallback;      /* allow unpinned host memory when pinning fails (logged) */
  int stop_on_nonfinite;        /* a NaN loss or applied non-finite grads stop the run */
  int activation_checkpointing; /* checkpoint the blocks a program offers */

  /* launch (launch YAML / zrt launch flags) */
  int64_t num_processes;
  int64_t num_machines;
  int64_t machine_rank;
  char main_process_ip[256];
  int64_t main_process_port;
  char hostfile[ZRT_CFG_STR];
  char mixed_precision[16]; /* no|fp16|bf16 */
  int use_cpu;
  char compute_environment[32]; /* LOCAL_MACHINE (accelerate) */
  char distributed_type[32];    /* DEEPSPEED|MULTI_GPU|MULTI_CPU|NO */
} zrt_cfg;

/* Where a value came from. */
typedef enum zrt_cfg_source_kind {
  ZRT_SRC_DEFAULT = 0,
  ZRT_SRC_FILE,
  ZRT_SRC_ENV,
  ZRT_SRC_FLAG,
  ZRT_SRC_PROGRAM,
  ZRT_SRC_DERIVED
} zrt_cfg_source_kind;

typedef struct zrt_cfg_source {
  zrt_cfg_source_kind kind;
  char where[ZRT_CFG_STR]; /* "cfg.yaml:12", "ZRT_SEED", "--zero_stage", "" */
} zrt_cfg_source;

/* Typed view of a config handle (valid until the config changes). */
const zrt_cfg *zrt_config_values(const zrt_config *cfg);
/* Working dtype implied by fp16/bf16 enabled flags. */
zrt_dtype zrt_config_dtype(const zrt_config *cfg);

/* Schema iteration, for explain / docs / questionnaire / launcher export. */
size_t zrt_config_schema_count(void);
/* Key path of schema entry i, its current text value and source. */
zrt_status zrt_config_entry(const zrt_config *cfg, size_t i, const char **key_path, char *value,
                            size_t value_len, zrt_cfg_source *src);
/* Writes the resolved config as DeepSpeed-style JSON (nested objects) that
 * zrt_config_load_file reads back to the same values. Sources are kept in a
 * "_zrt_sources" object so ranks can still explain where values came from. */
zrt_status zrt_config_write_json(const zrt_config *cfg, const char *path);
/* Markdown reference of every key (docs/config-reference.md). */
zrt_status zrt_config_write_reference(FILE *out);

/* ------------------------------------------------------------------
 * Additions (config engineer): schema description, handle utilities,
 * warnings, writers. Stable for tools/cmd_config.c and tools/cmd_launch.c.
 * ------------------------------------------------------------------ */

/* Precedence (docs/config.md): each value carries the priority of its
 * source and a later write only replaces it at equal or higher priority:
 *   default < deepspeed_config_file beneath a launch YAML < file
 *           < program < environment (ZRT_*) < flag
 * zrt_config_set's origin picks the source: "--name" -> flag (where =
 * origin), "ZRT_*" -> env, "program" / NULL / anything else -> program
 * (where = origin). "derived" values (zrt_config_resolve) never block a
 * later write. */

/* Type of a schema key's value. */
typedef enum zrt_cfg_type {
  ZRT_CFGT_BOOL = 0, /* true|false */
  ZRT_CFGT_INT,      /* integer; "5e8" accepted when integral */
  ZRT_CFGT_FLOAT,    /* real number */
  ZRT_CFGT_SIZE,     /* bytes: 4096, 24MiB, 1.5GB (zrt_parse_size) */
  ZRT_CFGT_STRING,   /* free text (paths, addresses) */
  ZRT_CFGT_ENUM,     /* one of `choices` ("a|b|c") */
  ZRT_CFGT_PAIR      /* two reals [a, b] (optimizer betas) */
} zrt_cfg_type;

/* Flags of a schema key. */
#define ZRT_CFGK_AUTO 1u   /* accepts "auto" (resolved in zrt_config_resolve) */
#define ZRT_CFGK_LAUNCH 2u /* a launch-YAML key (zrt launch reads it) */
#define ZRT_CFGK_ZRT 4u    /* zrt section key; settable by env var `env` */
#define ZRT_CFGK_NOCASE 8u /* enum matched case-insensitively */

/* One row of the schema table (static storage, never freed). */
typedef struct zrt_cfg_key {
  const char *path; /* dotted key path, "zero_optimization.offload_param.device" */
  zrt_cfg_type type;
  unsigned flags;      /* ZRT_CFGK_* */
  const char *def;     /* default as text ("auto" for auto, "" for empty) */
  const char *choices; /* ENUM: "fp32|fp16|bf16|null"; else NULL */
  double min, max;     /* INT/FLOAT/SIZE range, inclusive (min > max: none) */
  const char *env;     /* "ZRT_SEED" for zrt keys, else NULL */
  const char *doc;     /* one line for docs / explain / questionnaire */
} zrt_cfg_key;

/* Schema row i (< zrt_config_schema_count()), NULL when out of range. */
const zrt_cfg_key *zrt_config_schema_key(size_t i);
/* Index of a key path in the schema, or -1. Accepts the full path only
 * ("bfloat16.enabled" is normalised to "bf16.enabled"). */
long zrt_config_schema_find(const char *key_path);

/* Deep copy of a config (values, sources, warnings). */
zrt_status zrt_config_copy(const zrt_config *cfg, zrt_config **out);

/* Source of one key (NULL-safe: ZRT_ERR_CONFIG with a did-you-mean when the
 * key is unknown). */
zrt_status zrt_config_source(const zrt_config *cfg, const char *key_path, zrt_cfg_source *src);
/* Short word of a source kind: "default", "file", "env", "flag", "program",
 * "derived". */
const char *zrt_config_source_kind_name(zrt_cfg_source_kind k);
/* The offload rules that depend on the ZeRO stage, one function for the
 * config's validation (the load, `zrt config check`) and the engine's
 * build (which knows the stage "auto" resolved to): stage -1 (auto, not
 * yet resolved) skips the stage-dependent ones. Returns 0 when allowed,
 * else writes the refusal and the fix into msg (no location) and returns
 * which key it is about: ZRT_OFFLOAD_RULE_*. */
enum {
  ZRT_OFFLOAD_RULE_OK = 0,
  ZRT_OFFLOAD_RULE_PARAM_STAGE, /* zero_optimization.offload_param.device */
  ZRT_OFFLOAD_RULE_OPTIM_STAGE, /* zero_optimization.offload_optimizer.device */
  ZRT_OFFLOAD_RULE_RATIO_NVME,  /* zero_optimization.offload_optimizer.ratio */
  ZRT_OFFLOAD_RULE_RATIO_PARAM  /* zero_optimization.offload_optimizer.ratio */
};
int zrt_config_offload_rule(int stage, zrt_offload_device optim, zrt_offload_device param,
                            double ratio, char *msg, size_t len);

/* The rules of bf16.bf16_master_weights_and_grads and
 * bf16.bf16_optimizer_states, one function for the config's validation and
 * the engine's build (which passes the stage and optimizer offload that
 * stage "auto" resolved to; stage -1 skips the stage-dependent rules).
 * DeepSpeed's own (runtime/config.py, base_optimizer.py): ZeRO stage 1-3,
 * optimizer states in bf16 only with bf16 masters, fp32 states only with
 * ZeRO-Offload and its CPU Adam; zrt's further limits: bf16 training, the
 * CPU optimizer (offload_optimizer device cpu, all of it: no Twin-Flow
 * ratio), Adam/AdamW. Returns 0 when allowed, else writes the refusal and
 * the fix into msg (no location) and returns which key it is about:
 * ZRT_BF16M_RULE_*. */
enum {
  ZRT_BF16M_RULE_OK = 0,
  ZRT_BF16M_RULE_STATES, /* bf16.bf16_optimizer_states */
  ZRT_BF16M_RULE_MASTER  /* bf16.bf16_master_weights_and_grads */
};
int zrt_config_bf16_master_rule(const zrt_cfg *v, int stage, zrt_offload_device optim, char *msg,
                                size_t len);

/* Whether a key currently holds an unresolved "auto". */
int zrt_config_is_auto(const zrt_config *cfg, const char *key_path);

/* Warnings collected while loading (keys accepted but not acted on, e.g.
 * "ds.json:5:3: activation_checkpointing: accepted but not used by zrt").
 * Each load also logs one WARN line naming them all. */
size_t zrt_config_warning_count(const zrt_config *cfg);
const char *zrt_config_warning(const zrt_config *cfg, size_t i);

/* Writes the keys whose source is not "default" (or every key when `all`)
 * as nested YAML that zrt_config_load_file reads back (questionnaire
 * output). Launch keys stay at top level, DeepSpeed keys nest by section,
 * zrt keys under `zrt:`. */
zrt_status zrt_config_write_yaml(const zrt_config *cfg, const char *path, int all);

/* Key-path aliases zrt_config_set also accepts, for command-line flags:
 * accelerate's deepspeed_config short names ("zero_stage",
 * "offload_optimizer_device", ... also as "deepspeed_config.zero_stage"),
 * "bfloat16.*" for "bf16.*", and zrt keys without the "zrt." prefix
 * ("seed", "device_memory_limit"). Returns the full path or NULL. */
const char *zrt_config_canonical_key(const char *key_path);

/* zrt_config_resolve before the program has run (`zrt launch`, `zrt config
 * check`): an "auto" the program may still fill is not an error; each one
 * becomes a warning line "KEY is "auto": resolved at run time by the
 * program, else X". */
zrt_status zrt_config_resolve_pending(zrt_config *cfg, int world_size);

/* zrt_config_load_file on text in memory (stdin, fuzzing): `name` is used
 * in messages, `dir` resolves a relative deepspeed_config_file (NULL: the
 * current directory). Same all-or-nothing and error rules. */
zrt_status zrt_config_load_buffer(zrt_config *cfg, const char *text, size_t len, const char *name,
                                  const char *dir);

/* Edit-distance suggestion among known keys for an unknown path, "" when
 * none is close; the text is "did you mean 'x'?" ready to print. */
const char *zrt_config_suggest(const char *key_path, char *buf, size_t len);

#endif
