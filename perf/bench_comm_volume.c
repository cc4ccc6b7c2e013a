/*
 * bench_comm_volume.c — `zrt-perf comm_volume`: bytes a rank sends per
 * optimizer step (the engine's metrics comm_bytes, rank 0, counted by the
 * comm at issue with the ring formulas of comm/comm.h) against the ZeRO
 * theory, and the wall step time with overlap_comm on vs off, for stages
 * 0-3 of train_gpt2 on N ranks.
 *
 * Theory per rank, Ψ = padded parameter elements (the engine's build log),
 * w = working-dtype bytes, n = ranks: stages 0-2 move 2Ψw(n-1)/n (stage 0
 * all-reduce; stage 1/2 reduce-scatter + all-gather), stage 3 moves
 * 3Ψw(n-1)/n (all-gather in forward and in backward, reduce-scatter). The
 * step's own agreement all-reduce (3 floats) is added. Stage 3 runs with
 * stage3_param_persistence_threshold=0 so that every module is gathered as
 * the 3Ψ formula assumes (the tiny model's modules are all below the default
 * threshold and would otherwise stay resident) and
 * stage3_max_reuse_distance=0 (the default 1e9 keeps every module gathered
 * from its forward to its backward: 2Ψ, see docs/engine.md). train_gpt2 gathers every
 * module twice per pass except ln_f (forward and backward in one fetch:
 * once), so stage 3 measures 3Ψ minus ln_f's 2·C elements. The baseline of
 * the time comparison is the overlap-on run of the same stage in this run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_train_util.h"

static int zrt_bench_comm_volume(const zrt_perf_args *a, cJSON *r) {
  zrt_pt_model m;
  zrt_pt_opts base;
  zrt_pt_model_from_args(a, &m);
  zrt_pt_opts_default(a, &base);
  zrt_pt_model_json(&m, r);
  int n = base.ranks;
  double w = !strcmp(m.dtype, "fp32") ? 4 : 2;
  cJSON_AddNumberToObject(r, "ranks", n);
  cJSON_AddStringToObject(
      r, "theory",
      "per rank: stages 0-2 2*psi*w*(n-1)/n, stage 3 3*psi*w*(n-1)/n, plus "
      "2*(n-1)/n*16 B for the step's {sumsq, overflow, loss, stop} all-reduce; psi = "
      "padded elements, w = working dtype bytes");
  cJSON *rows = cJSON_AddArrayToObject(r, "stages");
  char md[8192];
  size_t k =
      (size_t)snprintf(md, sizeof md,
                       "%d ranks, model %s, %s. comm_bytes = engine metrics (rank 0, per "
                       "step); theory as in docs/perf.md.\n\n| stage | measured B | theory B "
                       "| measured/theory | step s overlap on | step s overlap off | off/on "
                       "|\n|---|---|---|---|---|---|---|\n",
                       n, m.model, m.dtype);
  double xs[4], meas[4], theo[4], ton[4], toff[4];
  int np = 0;
  for (int s = 0; s < 4; s++) {
    const zrt_pt_run *run[2];
    zrt_pt_model ms = m;
    if (s == 3) {
      size_t used = strlen(ms.extra);
      snprintf(ms.extra + used, sizeof ms.extra - used,
               " --set zero_optimization.stage3_param_persistence_threshold=0"
               " --set zero_optimization.stage3_max_reuse_distance=0");
    }
    for (int ov = 1; ov >= 0; ov--) {
      zrt_pt_opts o = base;
      o.stage = s;
      o.overlap = ov;
      zrt_perf_note("comm_volume: stage %d overlap_comm %s", s, ov ? "on" : "off");
      run[ov] = zrt_pt_train(&ms, &o);
    }
    cJSON *e = cJSON_CreateObject();
    cJSON_AddItemToArray(rows, e);
    cJSON_AddNumberToObject(e, "stage", s);
    cJSON_AddItemToObject(e, "overlap_on", zrt_pt_run_json(run[1]));
    cJSON_AddItemToObject(e, "overlap_off", zrt_pt_run_json(run[0]));
    if (!run[1]->ok || !run[0]->ok) {
      k += (size_t)snprintf(md + k, k < sizeof md ? sizeof md - k : 0,
                            "| %d | failed | | | | | |\n", s);
      continue;
    }
    double psi = run[1]->padded_elements > 0 ? run[1]->padded_elements : run[1]->params;
    double f = (double)(n - 1) / n;
    double th = n > 1 ? (s == 3 ? 3 : 2) * psi * w * f + 2 * f * 16 : 0;
    double ratio = th > 0 ? run[1]->comm_bytes / th : 0;
    double off_on = run[1]->wall_step_s > 0 ? run[0]->wall_step_s / run[1]->wall_step_s : 0;
    cJSON_AddNumberToObject(e, "psi_elements", psi);
    cJSON_AddNumberToObject(e, "comm_bytes_measured", run[1]->comm_bytes);
    cJSON_AddNumberToObject(e, "comm_bytes_measured_overlap_off", run[0]->comm_bytes);
    cJSON_AddNumberToObject(e, "comm_bytes_theory", th);
    cJSON_AddNumberToObject(e, "measured_over_theory", ratio);
    cJSON_AddNumberToObject(e, "step_s_overlap_on", run[1]->wall_step_s);
    cJSON_AddNumberToObject(e, "step_s_overlap_off", run[0]->wall_step_s);
    cJSON_AddNumberToObject(e, "step_time_off_over_on", off_on);
    k += (size_t)snprintf(md + k, k < sizeof md ? sizeof md - k : 0,
                          "| %d | %.0f | %.0f | %.3f | %.4f | %.4f | %.3f |\n", s,
                          run[1]->comm_bytes, th, ratio, run[1]->wall_step_s, run[0]->wall_step_s,
                          off_on);
    xs[np] = s;
    meas[np] = run[1]->comm_bytes;
    theo[np] = th;
    ton[np] = run[1]->wall_step_s;
    toff[np] = run[0]->wall_step_s;
    np++;
  }
  cJSON *pb = zrt_perf_plot(r, "comm_volume_bytes", "bytes sent per rank per step", "ZeRO stage",
                            "bytes", 0);
  zrt_perf_series(pb, "measured (metrics comm_bytes)", xs, meas, np);
  zrt_perf_series(pb, "theory", xs, theo, np);
  cJSON *pt = zrt_perf_plot(r, "comm_volume_overlap", "wall step time, overlap_comm on vs off",
                            "ZeRO stage", "seconds per step", 0);
  zrt_perf_series(pt, "overlap_comm on", xs, ton, np);
  zrt_perf_series(pt, "overlap_comm off", xs, toff, np);
  cJSON_AddStringToObject(r, "summary", md);
  return 0;
}

ZRT_PERF_BENCH(comm_volume, "bytes per step vs ZeRO theory (2Ψ / 3Ψ) and overlap_comm on/off",
               zrt_bench_comm_volume)
