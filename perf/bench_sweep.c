/*
 * bench_sweep.c — `zrt-perf sweep`: ZeRO stages 0-3 x offload (none,
 * optimizer on CPU, optimizer + params on CPU) for one GPT model on N ranks
 * (train_gpt2 under mpiexec): tokens/s and peak device / pinned-host memory
 * side by side, as a table (summary) and two plots.
 *
 * Baseline in the same run: stage 0 without offload; every cell reports
 * tokens/s and device peak relative to it. Parameter offload exists only at
 * stage 3 (as in DeepSpeed), so the other stages' cells say so instead of
 * running; nor does stage 0 offload anything (the config refuses it). A
 * configuration the runtime refuses is reported with its error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_train_util.h"

static int zrt_bench_sweep(const zrt_perf_args *a, cJSON *r) {
  zrt_pt_model m;
  zrt_pt_opts base;
  zrt_pt_model_from_args(a, &m);
  zrt_pt_opts_default(a, &base);
  base.overlap = 1;
  zrt_pt_model_json(&m, r);
  cJSON_AddNumberToObject(r, "ranks", base.ranks);
  cJSON_AddNumberToObject(r, "omp_threads_per_rank", base.threads);
  cJSON *cells = cJSON_AddArrayToObject(r, "cells");
  const zrt_pt_run *runs[4][3] = {{0}};
  for (int off = 0; off < 3; off++)
    for (int s = 0; s < 4; s++) {
      if ((off == ZRT_PT_OFFLOAD_OPT_PARAM && s != 3) || (off && s == 0)) continue;
      zrt_pt_opts o = base;
      o.stage = s;
      o.offload = off;
      zrt_perf_note("sweep: stage %d offload %s", s, zrt_pt_offload_name(off));
      runs[s][off] = zrt_pt_train(&m, &o);
    }
  const zrt_pt_run *b = runs[0][0];
  double base_tps = b && b->ok ? b->wall_tok_s : 0;
  double base_mem = b && b->ok ? zrt_pt_metric(b, "device_peak_bytes") : 0;
  char md[8192];
  size_t n = 0;
  n += (size_t)snprintf(md + n, sizeof md - n,
                        "%d ranks, model %s, %s, %d steps (first dropped). Baseline: stage 0, no "
                        "offload (%.0f tokens/s).\n\n"
                        "| stage | offload | tokens/s | vs baseline | device peak MiB | vs "
                        "baseline | pinned host peak MiB |\n|---|---|---|---|---|---|---|\n",
                        base.ranks, m.model, m.dtype, m.steps, base_tps);
  double tps[3][4], mem[3][4];
  int cnt[3] = {0};
  for (int off = 0; off < 3; off++)
    for (int s = 0; s < 4; s++) {
      cJSON *c = cJSON_CreateObject();
      cJSON_AddNumberToObject(c, "stage", s);
      cJSON_AddStringToObject(c, "offload", zrt_pt_offload_name(off));
      const zrt_pt_run *run = runs[s][off];
      if (!run) {
        cJSON_AddStringToObject(c, "skipped",
                                s == 0 ? "offload needs ZeRO stage 1, 2 or 3"
                                       : "parameter offload exists only at stage 3");
        cJSON_AddItemToArray(cells, c);
        continue;
      }
      cJSON_AddItemToObject(c, "run", zrt_pt_run_json(run));
      if (!run->ok) {
        cJSON_AddItemToArray(cells, c);
        n += (size_t)snprintf(md + n, n < sizeof md ? sizeof md - n : 0,
                              "| %d | %s | failed | | | | |\n", s, zrt_pt_offload_name(off));
        continue;
      }
      double dev = zrt_pt_metric(run, "device_peak_bytes");
      double host = zrt_pt_metric(run, "host_pinned_peak_bytes");
      double rt = base_tps > 0 ? run->wall_tok_s / base_tps : 0;
      double rm = base_mem > 0 ? dev / base_mem : 0;
      cJSON_AddNumberToObject(c, "tokens_per_s", run->wall_tok_s);
      cJSON_AddNumberToObject(c, "tokens_per_s_vs_baseline", rt);
      cJSON_AddNumberToObject(c, "device_peak_bytes", dev);
      cJSON_AddNumberToObject(c, "device_peak_vs_baseline", rm);
      cJSON_AddNumberToObject(c, "host_pinned_peak_bytes", host);
      cJSON_AddItemToArray(cells, c);
      n += (size_t)snprintf(md + n, n < sizeof md ? sizeof md - n : 0,
                            "| %d | %s | %.0f | %.2f | %.2f | %.2f | %.2f |\n", s,
                            zrt_pt_offload_name(off), run->wall_tok_s, rt, dev / 1048576.0, rm,
                            host / 1048576.0);
      tps[off][cnt[off]] = run->wall_tok_s;
      mem[off][cnt[off]] = dev / 1048576.0;
      cnt[off]++;
    }
  cJSON *pt = zrt_perf_plot(r, "sweep_tokens_per_s", "tokens/s by ZeRO stage and offload",
                            "ZeRO stage", "tokens/s (wall, all ranks)", 0);
  cJSON *pm = zrt_perf_plot(r, "sweep_device_peak", "peak device memory per rank", "ZeRO stage",
                            "device peak (MiB)", 0);
  for (int off = 0; off < 3; off++) {
    double x[4];
    int k = 0;
    for (int s = 0; s < 4; s++)
      if (runs[s][off] && runs[s][off]->ok) x[k++] = s;
    if (!k) continue;
    zrt_perf_series(pt, zrt_pt_offload_name(off), x, tps[off], k);
    zrt_perf_series(pm, zrt_pt_offload_name(off), x, mem[off], k);
  }
  cJSON_AddStringToObject(r, "summary", md);
  return 0;
}

ZRT_PERF_BENCH(sweep, "ZeRO stage 0-3 x offload: GPT tokens/s and peak memory (train_gpt2)",
               zrt_bench_sweep)
