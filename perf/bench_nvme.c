/*
 * bench_nvme.c — `zrt-perf nvme [--elements N] [--dir PATH]`: bandwidth of
 * the NVMe-swapped AdamW step (offload pipe, master + m + v read from and
 * written to swap files each step with liburing + O_DIRECT) against the
 * disk's own sequential bandwidth measured in the same run (dd-like: 1 MiB
 * O_DIRECT pwrite of a file the size of one generation, fsync, then pread).
 *
 * swap_bytes_per_s counts 2 x 12 B per element (fp32 master, m, v read and
 * written) over the whole step; disk_bytes_per_s is the mean of the
 * sequential write and read rates. The step also includes the fsync that
 * makes the new generation durable.
 *
 * Engine level ("engine" in the JSON): train_gpt2 (the training benches'
 * model options, default --model tiny) at stage 2 on --ranks ranks with
 * offload_optimizer cpu and then nvme (nvme_path = --dir), in the same run:
 * median engine step_time_s (the boundary: reductions, optimizer, gather)
 * and wall step time of each, and their ratio. Skipped with --engine 0.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_train_util.h"
#include "offload/offload.h"
#include "perf.h"

/* train_gpt2 with the optimizer offloaded to cpu, then to nvme under dir. */
static void zrt_bench_nvme_engine(const zrt_perf_args *a, const char *dir, cJSON *r) {
  zrt_pt_model pm;
  zrt_pt_model_from_args(a, &pm);
  zrt_pt_opts po;
  zrt_pt_opts_default(a, &po);
  po.stage = 2;
  po.offload = ZRT_PT_OFFLOAD_OPT;
  const zrt_pt_run *cpu = zrt_pt_train(&pm, &po);
  zrt_pt_model pn = pm;
  size_t used = strlen(pn.extra);
  snprintf(pn.extra + used, sizeof pn.extra - used,
           " --set zero_optimization.offload_optimizer.device=nvme"
           " --set zero_optimization.offload_optimizer.nvme_path=%s",
           dir);
  const zrt_pt_run *nv = zrt_pt_train(&pn, &po);
  cJSON *e = cJSON_AddObjectToObject(r, "engine");
  cJSON_AddItemToObject(e, "cpu", zrt_pt_run_json(cpu));
  cJSON_AddItemToObject(e, "nvme", zrt_pt_run_json(nv));
  if (!cpu->ok || !nv->ok) {
    zrt_perf_note("nvme engine: a run failed: %s", !cpu->ok ? cpu->error : nv->error);
    return;
  }
  double ratio = cpu->engine_step_s > 0 ? nv->engine_step_s / cpu->engine_step_s : 0;
  cJSON_AddNumberToObject(e, "engine_step_s_cpu", cpu->engine_step_s);
  cJSON_AddNumberToObject(e, "engine_step_s_nvme", nv->engine_step_s);
  cJSON_AddNumberToObject(e, "wall_step_s_cpu", cpu->wall_step_s);
  cJSON_AddNumberToObject(e, "wall_step_s_nvme", nv->wall_step_s);
  cJSON_AddNumberToObject(e, "engine_step_ratio_nvme_over_cpu", ratio);
  zrt_perf_note("nvme engine: train_gpt2 %s stage 2 x %d ranks, optimizer offload: engine step "
                "%.4f s (cpu) vs %.4f s (nvme under %s), ratio %.2f; wall step %.4f s vs %.4f s",
                pm.model, po.ranks, cpu->engine_step_s, nv->engine_step_s, dir, ratio,
                cpu->wall_step_s, nv->wall_step_s);
}

static double zrt_bench_disk(const char *dir, size_t bytes, double *wr, double *rd) {
  char path[1024];
  snprintf(path, sizeof path, "%s/zrt_perf_dd_%d.bin", dir, (int)getpid());
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  int direct = fd >= 0;
  if (fd < 0) fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  *wr = *rd = 0;
  if (fd < 0) return 0;
  size_t blk = 1u << 20;
  void *buf = NULL;
  if (posix_memalign(&buf, 4096, blk)) {
    close(fd);
    return 0;
  }
  memset(buf, 0x3c, blk);
  double t0 = zrt_now_s();
  for (size_t o = 0; o < bytes; o += blk)
    if (pwrite(fd, buf, blk, (off_t)o) != (ssize_t)blk) break;
  fsync(fd);
  double t1 = zrt_now_s();
  for (size_t o = 0; o < bytes; o += blk)
    if (pread(fd, buf, blk, (off_t)o) != (ssize_t)blk) break;
  double t2 = zrt_now_s();
  *wr = (double)bytes / (t1 - t0);
  *rd = (double)bytes / (t2 - t1);
  free(buf);
  close(fd);
  unlink(path);
  return direct;
}

static int zrt_bench_nvme(const zrt_perf_args *a, cJSON *r) {
  const char *dir = zrt_perf_opt(a, "dir");
  if (!dir) dir = "/tmp";
  uint64_t n = a->quick ? (4u << 20) : (16u << 20);
  const char *el = zrt_perf_opt(a, "elements");
  if (el && (!zrt_parse_size(el, &n) || n == 0)) {
    zrt_perf_note("nvme: --elements wants a count (got %s)", el);
    return 1;
  }
  double wr, rd;
  int direct = (int)zrt_bench_disk(dir, (size_t)n * 4, &wr, &rd);
  zrt_backend *be = NULL;
  zrt_hostpool *hp = NULL;
  zrt_offload_pipe *p = NULL;
  void *gdev = NULL, *pdev = NULL;
  float *m = malloc(n * 4);
  int rc = 1;
  zrt_hostpool_opts ho = {.numa_node = -1, .pin = 1, .allow_fallback = 1};
  zrt_offload_opts oo = {.tile_elems = 1u << 20, .nvme = 1, .nvme_path = dir, .buffer_count = 8};
  if (!m || zrt_backend_create("cpu", 0, 0, &be) || zrt_hostpool_create(&ho, be, &hp) ||
      zrt_offload_pipe_create(be, hp, &oo, &p) ||
      zrt_backend_alloc(be, n * 2, ZRT_MEM_GRADS, &gdev) ||
      zrt_backend_alloc(be, n * 2, ZRT_MEM_PARAMS16, &pdev)) {
    zrt_perf_note("nvme: %s", zrt_last_error());
    goto done;
  }
  for (size_t i = 0; i < n; i++) m[i] = 0.001f * (float)(i % 1000);
  memset(gdev, 0x3c, n * 2); /* CPU backend: device memory is host memory */
  if (zrt_offload_pipe_nvme_register(p, n, 2, m, NULL, NULL)) {
    zrt_perf_note("nvme: %s", zrt_last_error());
    goto done;
  }
  zrt_optim_hparams h = {.type = ZRT_OPTIM_ADAMW,
                         .lr = 1e-3f,
                         .beta1 = 0.9f,
                         .beta2 = 0.999f,
                         .eps = 1e-8f,
                         .bias_correction = 1,
                         .grad_mul = 1.0f};
  double best = 1e30;
  zrt_offload_timing tm = {0}, bt = {0};
  for (int s = 1; s <= 3; s++) {
    h.step = s;
    if (zrt_offload_pipe_step(p, &h, NULL, NULL, NULL, gdev, ZRT_BF16, pdev, ZRT_BF16, n)) {
      zrt_perf_note("nvme: %s", zrt_last_error());
      goto done;
    }
    zrt_offload_pipe_timing(p, &tm);
    if (tm.total_s < best) best = tm.total_s, bt = tm;
  }
  double swap = 24.0 * (double)n / best, disk = 0.5 * (wr + rd);
  cJSON_AddStringToObject(r, "dir", dir);
  cJSON_AddBoolToObject(r, "o_direct", direct);
  cJSON_AddNumberToObject(r, "elements", (double)n);
  cJSON_AddNumberToObject(r, "step_seconds", best);
  cJSON_AddNumberToObject(r, "hidden_fraction", bt.hidden_fraction);
  cJSON_AddNumberToObject(r, "swap_bytes_per_s", swap);
  cJSON_AddNumberToObject(r, "disk_write_bytes_per_s", wr);
  cJSON_AddNumberToObject(r, "disk_read_bytes_per_s", rd);
  cJSON_AddNumberToObject(r, "disk_bytes_per_s", disk);
  cJSON_AddNumberToObject(r, "swap_fraction_of_disk", swap / disk);
  char sum[512];
  snprintf(sum, sizeof sum,
           "NVMe-swapped AdamW step over %.0f elements in %s: %.2f GB/s of swap traffic "
           "(24 B/element), disk sequential write %.2f GB/s / read %.2f GB/s in the same run "
           "(%.0f%% of their mean); copies hidden %.0f%%.",
           (double)n, dir, swap / 1e9, wr / 1e9, rd / 1e9, 100 * swap / disk,
           100 * bt.hidden_fraction);
  cJSON_AddStringToObject(r, "summary", sum);
  zrt_perf_note("%s", sum);
  double x[3] = {1, 2, 3}, y[3] = {wr / 1e9, rd / 1e9, swap / 1e9};
  cJSON *pl =
      zrt_perf_plot(r, "nvme_bandwidth", "NVMe swap: 1 = disk write, 2 = disk read, 3 = swap step",
                    "measurement", "GB/s", 0);
  zrt_perf_series(pl, "GB/s", x, y, 3);
  const char *eng = zrt_perf_opt(a, "engine");
  if (!eng || strcmp(eng, "0")) zrt_bench_nvme_engine(a, dir, r);
  rc = 0;
done:
  zrt_offload_pipe_destroy(p);
  if (be) {
    zrt_backend_free(be, gdev);
    zrt_backend_free(be, pdev);
  }
  zrt_hostpool_destroy(hp);
  zrt_backend_destroy(be);
  free(m);
  return rc;
}

ZRT_PERF_BENCH(nvme,
               "NVMe swap bandwidth of the offloaded AdamW step vs the disk's sequential "
               "O_DIRECT bandwidth [--elements N] [--dir PATH]; engine step time with "
               "offload_optimizer nvme vs cpu (train_gpt2, stage 2) [--engine 0 skips it]",
               zrt_bench_nvme)
