/*
 * bench_memory.c — `zrt-perf memory`: per-rank peak device memory by
 * category (params16, grads, master32, optim_state, activations, comm) that
 * the engine's metrics report for train_gpt2 at ZeRO stages 0-3, against the
 * prediction of the memory model `zrt estimate-memory` prints
 * (engine/memest.h), for the same model, world size, dtype and config.
 *
 * The baseline is the prediction: every category reports measured,
 * predicted and measured / predicted. The config values the model needs
 * (bucket size, persistence threshold, sub-group size, optimizer, comm dtype)
 * are read from a zrt_config built with the same --set overrides the runs
 * get, so prediction and run see one config.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench_train_util.h"
#include "memest.h"
#include "model_layouts.h"

static int64_t zrt_bench_cfg_i64(zrt_config *c, const char *key, int64_t dflt) {
  char buf[64];
  if (zrt_config_get(c, key, buf, sizeof buf) != ZRT_OK) return dflt;
  return (int64_t)strtod(buf, NULL);
}

/* Prediction for one stage; returns 0 when the preset is unknown. */
static int zrt_bench_predict(const zrt_pt_model *m, int ranks, int stage, zrt_memest_result *out,
                             cJSON *why) {
  const zrt_model_gpt *p = zrt_model_gpt_find(m->model);
  if (!p) return 0;
  zrt_model_gpt g = *p;
  if (m->n_layer) g.layers = m->n_layer;
  if (m->n_head) g.heads = m->n_head;
  if (m->n_embd) g.d_model = m->n_embd;
  int64_t T = m->seq_len ? m->seq_len : g.default_seq;
  if (T > g.max_seq) g.max_seq = T;
  zrt_config *cfg = NULL;
  if (zrt_config_create(&cfg) != ZRT_OK) return 0;
  char buf[512];
  snprintf(buf, sizeof buf, "%s", m->extra);
  for (char *save = NULL, *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
    char *eq = strchr(t, '=');
    if (!eq || !strcmp(t, "--set")) continue;
    *eq = 0;
    zrt_config_set(cfg, t, eq + 1, "zrt-perf");
  }
  zrt_memest_layout lay;
  memset(&lay, 0, sizeof lay);
  zrt_model_program prog;
  if (zrt_model_gpt_program(&g, 1, &prog) != 0) {
    zrt_config_destroy(cfg);
    return 0;
  }
  zrt_memest_program_layout(
      &prog.p, ranks,
      zrt_bench_cfg_i64(cfg, "zero_optimization.stage3_param_persistence_threshold", 100000), &lay);
  int64_t params = zrt_model_params(&prog.p);
  zrt_model_program_free(&prog);
  int w = !strcmp(m->dtype, "fp32") ? 4 : 2;
  lay.stage = stage;
  lay.dtype_bytes = w;
  char cdt[32] = "";
  zrt_config_get(cfg, "communication_data_type", cdt, sizeof cdt);
  lay.comm_bytes = !strcmp(cdt, "fp32")                             ? 4
                   : (!strcmp(cdt, "fp16") || !strcmp(cdt, "bf16")) ? 2
                                                                    : w;
  char opt[32] = "Adam";
  zrt_config_get(cfg, "optimizer.type", opt, sizeof opt);
  lay.optim_states = (!strcasecmp(opt, "SGD") || !strcasecmp(opt, "Lion")) ? 1 : 2;
  lay.reduce_bucket_size =
      zrt_bench_cfg_i64(cfg, "zero_optimization.reduce_bucket_size", 500000000);
  lay.sub_group_size = zrt_bench_cfg_i64(cfg, "zero_optimization.sub_group_size", 1000000000);
  lay.activation_bytes = zrt_model_gpt_activations(
      &g, m->batch, T, w, 0, zrt_bench_cfg_i64(cfg, "gradient_accumulation_steps", 1), 0);
  zrt_memest_predict(&lay, out);
  cJSON_AddNumberToObject(why, "params", (double)params);
  cJSON_AddNumberToObject(why, "padded_total", (double)lay.padded_total);
  cJSON_AddNumberToObject(why, "comm_dtype_bytes", lay.comm_bytes);
  cJSON_AddNumberToObject(why, "optim_states", lay.optim_states);
  cJSON_AddNumberToObject(why, "reduce_bucket_size", (double)lay.reduce_bucket_size);
  zrt_config_destroy(cfg);
  return 1;
}

static int zrt_bench_memory(const zrt_perf_args *a, cJSON *r) {
  zrt_pt_model m;
  zrt_pt_opts base;
  zrt_pt_model_from_args(a, &m);
  zrt_pt_opts_default(a, &base);
  base.overlap = 1;
  zrt_pt_model_json(&m, r);
  cJSON_AddNumberToObject(r, "ranks", base.ranks);
  cJSON_AddStringToObject(r, "prediction_source",
                          "engine/memest.h (the model `zrt estimate-memory` prints), linked in");
  static const zrt_mem_category cats[] = {ZRT_MEM_PARAMS16,    ZRT_MEM_GRADS,
                                          ZRT_MEM_MASTER32,    ZRT_MEM_OPTIM_STATE,
                                          ZRT_MEM_ACTIVATIONS, ZRT_MEM_COMM};
  enum { NC = sizeof cats / sizeof cats[0] };
  cJSON *stages = cJSON_AddArrayToObject(r, "stages");
  char md[8192];
  size_t n = (size_t)snprintf(md, sizeof md,
                              "measured / predicted peak device bytes per rank, %d ranks, model "
                              "%s, %s (engine metrics vs engine/memest)\n\n| stage |",
                              base.ranks, m.model, m.dtype);
  for (int k = 0; k < NC; k++)
    n += (size_t)snprintf(md + n, sizeof md - n, " %s |", zrt_mem_category_name(cats[k]));
  n += (size_t)snprintf(md + n, sizeof md - n, " total |\n|---|");
  for (int k = 0; k <= NC; k++) n += (size_t)snprintf(md + n, sizeof md - n, "---|");
  n += (size_t)snprintf(md + n, sizeof md - n, "\n");
  double xs[4], ratio[NC + 1][4];
  int np = 0;
  for (int s = 0; s < 4; s++) {
    zrt_pt_opts o = base;
    o.stage = s;
    zrt_perf_note("memory: stage %d", s);
    const zrt_pt_run *run = zrt_pt_train(&m, &o);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddItemToArray(stages, e);
    cJSON_AddNumberToObject(e, "stage", s);
    cJSON_AddItemToObject(e, "run", zrt_pt_run_json(run));
    zrt_memest_result pred;
    cJSON *why = cJSON_AddObjectToObject(e, "prediction_inputs");
    if (!zrt_bench_predict(&m, base.ranks, s, &pred, why)) {
      cJSON_AddStringToObject(e, "error", "no memory-model preset for this --model");
      continue;
    }
    if (!run->ok) continue;
    cJSON *cj = cJSON_AddObjectToObject(e, "categories");
    n += (size_t)snprintf(md + n, n < sizeof md ? sizeof md - n : 0, "| %d |", s);
    double mt = 0, pt = 0;
    for (int k = 0; k < NC; k++) {
      const char *name = zrt_mem_category_name(cats[k]);
      double meas = zrt_pt_metric(run, name), p = (double)pred.device[cats[k]];
      cJSON *c = cJSON_AddObjectToObject(cj, name);
      cJSON_AddNumberToObject(c, "measured_bytes", meas);
      cJSON_AddNumberToObject(c, "predicted_bytes", p);
      double rt = p > 0 ? meas / p : (meas == 0 ? 1 : -1);
      if (p > 0 || meas == 0) cJSON_AddNumberToObject(c, "measured_over_predicted", rt);
      ratio[k][np] = rt;
      mt += meas > 0 ? meas : 0;
      pt += p;
      if (p > 0)
        n += (size_t)snprintf(md + n, n < sizeof md ? sizeof md - n : 0, " %.3f |", rt);
      else
        n += (size_t)snprintf(md + n, n < sizeof md ? sizeof md - n : 0, " %s |",
                              meas == 0 ? "0=0" : "pred 0");
    }
    double dev = zrt_pt_metric(run, "device_peak_bytes");
    cJSON_AddNumberToObject(e, "device_peak_bytes", dev);
    cJSON_AddNumberToObject(e, "predicted_device_total_bytes", (double)pred.device_total);
    cJSON_AddNumberToObject(e, "device_peak_over_predicted_total",
                            pred.device_total ? dev / (double)pred.device_total : -1);
    ratio[NC][np] = pred.device_total ? dev / (double)pred.device_total : 0;
    (void)mt;
    (void)pt;
    n += (size_t)snprintf(md + n, n < sizeof md ? sizeof md - n : 0, " %.3f |\n", ratio[NC][np]);
    xs[np++] = s;
  }
  cJSON *pl = zrt_perf_plot(r, "memory_measured_over_predicted",
                            "peak device bytes per rank: measured / predicted", "ZeRO stage",
                            "measured / predicted", 0);
  for (int k = 0; k <= NC && np; k++)
    zrt_perf_series(pl, k < NC ? zrt_mem_category_name(cats[k]) : "device total", xs, ratio[k], np);
  cJSON_AddStringToObject(r, "summary", md);
  return 0;
}

ZRT_PERF_BENCH(memory, "peak device memory by category vs the estimate-memory model, stage 0-3",
               zrt_bench_memory)
