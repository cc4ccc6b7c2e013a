/*
 * config_compat.c — DeepSpeed's spellings and features, key by key against
 * its config models (deepspeed/runtime/zero/config.py, offload_config.py,
 * precision_config.py, runtime/config.py): the field names its pydantic
 * models accept beside the aliases zrt's schema uses (populate_by_name),
 * the deprecated keys DeepSpeed still maps to a setting (cpu_offload), and
 * the features zrt does not have, each with what to use instead.
 *
 * Invariants: an alias always maps to a schema row; a feature listed here
 * is an error only when the file turns it on (present, and not
 * `enabled: false` / `false`), so a config that names a feature only to
 * switch it off still loads, with the one "accepted, not used" warning.
 */
#include <string.h>
#include <strings.h>

#include "config_impl.h"

/* pydantic field name -> the alias zrt's schema row carries */
static const char *const aliases[][2] = {
    {"zero_optimization.prefetch_bucket_size", "zero_optimization.stage3_prefetch_bucket_size"},
    {"zero_optimization.param_persistence_threshold",
     "zero_optimization.stage3_param_persistence_threshold"},
    {"zero_optimization.max_live_parameters", "zero_optimization.stage3_max_live_parameters"},
    {"zero_optimization.max_reuse_distance", "zero_optimization.stage3_max_reuse_distance"},
    /* accelerate's launch YAML: mpirun_config.mpirun_hostfile is the hostfile */
    {"mpirun_config.mpirun_hostfile", "hostfile"},
    {NULL, NULL}};

const char *zrt_config_alias(const char *path) {
  for (size_t i = 0; aliases[i][0]; i++)
    if (!strcmp(aliases[i][0], path)) return aliases[i][1];
  return NULL;
}

/* Deprecated DeepSpeed booleans that still set something (zero/config.py's
 * new_param_fn): true -> `to` = `value`; false changes nothing. */
static const char *const deprecated[][3] = {
    {"zero_optimization.cpu_offload", "zero_optimization.offload_optimizer.device", "cpu"},
    {"zero_optimization.cpu_offload_param", "zero_optimization.offload_param.device", "cpu"},
    {NULL, NULL, NULL}};

int zrt_config_deprecated(const char *path, const char **to, const char **value) {
  for (size_t i = 0; deprecated[i][0]; i++)
    if (!strcmp(deprecated[i][0], path)) {
      *to = deprecated[i][1];
      *value = deprecated[i][2];
      return 1;
    }
  return 0;
}

/* DeepSpeed features zrt does not have: key path, what to do instead. */
static const char *const unsupported[][2] = {
    {"tensor_parallel", "zrt shards with ZeRO only; use zero_optimization.stage 3 to spread the "
                        "parameters over the ranks"},
    {"pipeline", "zrt has no pipeline stages; use zero_optimization.stage 3 (parameters sharded "
                 "over all ranks) instead of pipeline parallelism"},
    {"moe", "zrt has no mixture-of-experts layers; remove the section"},
    {"sparse_attention", "attention is the program's own in zrt; remove the section"},
    {"compression_training", "zrt does not compress or quantize during training; remove the "
                             "section"},
    {"data_efficiency", "data sampling and routing are the program's in zrt; remove the section"},
    {"curriculum_learning", "data sampling is the program's in zrt; remove the section"},
    {"hybrid_engine", "zrt trains only (no inference engine); remove the section"},
    {"quantize_training", "zrt does not quantize during training (MoQ); remove the section"},
    {"progressive_layer_drop", "the program's model decides which layers run in zrt; remove "
                               "the section"},
    {"torch_autocast", "zrt's working dtype comes from \"bf16\" / \"fp16\" {\"enabled\": true}; "
                       "remove the section"},
    {"amp", "NVIDIA apex AMP is not used by zrt; use \"fp16\": {\"enabled\": true} or "
            "\"bf16\": {\"enabled\": true}"},
    {"sequence_parallel_size", "zrt has no sequence parallelism; remove the key"},
    {"zero_optimization.zenflow", "use zero_optimization.offload_optimizer (device cpu) for the "
                                  "CPU optimizer step"},
    {"zero_optimization.zero_quantized_weights", "zrt gathers parameters in the working dtype; "
                                                 "set it false or remove it"},
    {"zero_optimization.zero_quantized_nontrainable_weights", "set it false or remove it"},
    {"zero_optimization.zero_quantized_gradients", "zrt reduces gradients in "
                                                   "communication_data_type; set it false or "
                                                   "remove it"},
    {"zero_optimization.zero_hpz_partition_size", "zrt has no hierarchical partitioning "
                                                  "(ZeRO++ hpZ); use 1 or remove it"},
    {"zero_optimization.mics_shard_size", "zrt shards over all ranks (no MiCS groups); use -1 "
                                          "or remove it"},
    {"zero_optimization.offload_optimizer.super_offload", "set it false; offload_optimizer "
                                                          "device cpu is zrt's CPU offload"},
    {"fp16.fp16_master_weights_and_grads", "zrt keeps fp32 master weights and gradients; set it "
                                           "false or remove it"},
    {NULL, NULL}};

/* The node turns the feature on: a mapping without `enabled: false`, a
 * true / non-zero scalar (for the two counts, a value other than their
 * off value). */
static int turns_on(const char *path, const zrt_dnode *n) {
  if (n->is_null) return 0;
  if (n->kind == ZRT_DN_MAP) {
    for (size_t i = 0; i < n->nkids; i++) {
      const zrt_dnode *k = n->kids[i];
      if (!strcmp(k->key, "enabled") && k->kind == ZRT_DN_SCALAR &&
          (!strcasecmp(k->text, "false") || !strcmp(k->text, "0")))
        return 0;
    }
    return 1;
  }
  if (n->kind != ZRT_DN_SCALAR) return 1;
  const char *t = n->text;
  if (strstr(path, "zero_hpz_partition_size")) return strcmp(t, "1") && strcmp(t, "0");
  if (strstr(path, "mics_shard_size")) return strcmp(t, "-1") && strcmp(t, "0");
  if (!strcmp(path, "sequence_parallel_size")) return strcmp(t, "1");
  return strcasecmp(t, "false") && strcmp(t, "0") && strcasecmp(t, "none");
}

int zrt_config_unsupported(const char *path, const zrt_dnode *n, const char **instead) {
  for (size_t i = 0; unsupported[i][0]; i++)
    if (!strcmp(unsupported[i][0], path)) {
      *instead = unsupported[i][1];
      return turns_on(path, n) ? 1 : -1;
    }
  return 0;
}
