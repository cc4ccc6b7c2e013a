/*
 * test_engine_memory.c — measured per-rank pool peaks vs the memory model
 * (engine/memest.c) and vs the ZeRO paper's formulas, at stages 0-3 and
 * with optimizer / parameter offload to cpu, and with optimizer offload to
 * nvme (host keeps only the pipe's staging: its host peaks must equal the
 * model exactly, and the swap files' bytes equal memest's nvme_bytes), and
 * at stage 3 with parameter offload to nvme under optimizer offload to nvme
 * and to cpu (host params16 = the param file's staging buffer, exactly;
 * param file bytes added to nvme_bytes), and with parameter offload to cpu
 * and to nvme alone (no optimizer offload: the optimizer state, masters and
 * gradients on the device, only the 16-bit shard or its staging on the
 * host), and at stage 3 with Twin-Flow
 * (offload_optimizer.ratio 0, 0.5 and 1, sub_group_size 0: the device and
 * host peaks of every model-state category equal memest exactly), and with
 * bf16.bf16_master_weights_and_grads (and bf16_optimizer_states) at stages
 * 1-3 under offload_optimizer cpu: the host master, gradient-partition and
 * optimizer-state peaks are 2 (or 4) bytes per element of the extent and
 * equal memest exactly (run at -n 1, 2 and 4).
 *
 * Program: NMOD modules of uneven sizes (padding exercised), bf16, AdamW,
 * trained for 2 optimizer steps with the usual fetch / release / grad /
 * grads_ready pattern (prefetch off, persistence 0, stage3_max_reuse_distance
 * 0, so stage 3 gathers one module at a time; one more stage-3 run keeps the
 * default reuse distance 1e9, which keeps every module gathered from its
 * forward release to its backward fetch). Checks, per rank:
 *  - every model-state category's device peak (params16, grads, master32,
 *    optim_state) and host peak equals memest's prediction within 5%;
 *  - the device model-state total matches the ZeRO formulas for 16-bit Adam
 *    with zrt's documented extras within 5%, Ψ = padded elements, N = world,
 *    B = largest module:
 *      stage 0: 20Ψ (16Ψ + 2Ψ 16-bit grads + 4Ψ... see docs/memory.md: 2+2+4+12)
 *      stage 1: 4Ψ + 12Ψ/N + 4Ψ/N   (fp32 accumulation shard)
 *      (with N = 1 no fp32 accumulator at stages 0/1: 16Ψ);
 *      stage 2: 2Ψ + 14Ψ/N + 2Ψ/N + 2B (fp32 shard instead of 16-bit, one
 *               module's 16-bit grads in flight)
 *      stage 3: 16Ψ/N + 2Ψ/N + 2B + 2B (one gathered module + its grads),
 *               with reuse 16Ψ/N + 2Ψ/N + 2Ψ + 2B (every module gathered);
 *  - totals fall strictly with the stage when N > 1;
 *  - at stage 3 on the shm comm the shards sit in the comm's memory and
 *    every parameter gather runs zero-copy (zrt_comm.zero_copy).
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memest.h"
#include "zt_engine.h"
#include "zt_memest.h"
#include "zt_mpi.h"
#include "ztest.h"

#define NMOD 6

static const char *cat_name[4] = {"params16", "grads", "master32", "optim_state"};

static char nvme_dir[1024]; /* swap directory of the oo = 2 / op = 2 (nvme) runs */
/* offload_optimizer.ratio of the Twin-Flow runs (with sub_group_size 0: one
 * sub-group per module), NULL otherwise */
static const char *twin_ratio;
/* bf16.bf16_master_weights_and_grads (1), and bf16_optimizer_states (2) */
static int bf16_mode;

static double rel(double got, double want) {
  return want == 0 ? fabs(got) : fabs(got - want) / want;
}

/* one configuration (oo / op: 0 none, 1 cpu, 2 nvme); returns the
 * measured device model-state total */
/* The comm of run(): mpi, or "auto" (shm on one machine) for the runs
 * that check the stage-3 shard arena. */
static const char *test_comm = "mpi";

static double run(int stage, int oo, int op, int reuse, int world, int rank) {
  zrt_config *cfg;
  ZT_OK(zrt_config_create(&cfg));
  /* the model computes on the host: pin the CPU backend (auto picks CUDA on a GPU) */
  ZT_OK(zrt_config_set(cfg, "zrt.backend", zt_host_backend(), "test"));
  char v[64];
  snprintf(v, sizeof v, "%d", stage);
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage", v, "test"));
  ZT_OK(zrt_config_set(cfg, "bf16.enabled", "true", "test"));
  ZT_OK(zrt_config_set(cfg, "optimizer.type", "AdamW", "test"));
  ZT_OK(zrt_config_set(cfg, "train_micro_batch_size_per_gpu", "1", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.reduce_bucket_size", "4096", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage3_param_persistence_threshold", "0", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage3_prefetch_bucket_size", "0", "test"));
  if (!reuse)
    ZT_OK(zrt_config_set(cfg, "zero_optimization.stage3_max_reuse_distance", "0", "test"));
  ZT_OK(zrt_config_set(cfg, "zrt.comm", test_comm, "test"));
  if (oo) {
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_optimizer.device",
                         oo == 2 ? "nvme" : "cpu", "test"));
    if (oo == 2)
      ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_optimizer.nvme_path", nvme_dir, "test"));
    ZT_OK(zrt_config_set(cfg, "zrt.pin_memory_fallback", "true", "test"));
  }
  if (op)
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_param.device", op == 2 ? "nvme" : "cpu",
                         "test"));
  if (op == 2)
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_param.nvme_path", nvme_dir, "test"));
  if (bf16_mode >= 1)
    ZT_OK(zrt_config_set(cfg, "bf16.bf16_master_weights_and_grads", "true", "test"));
  if (bf16_mode >= 2) ZT_OK(zrt_config_set(cfg, "bf16.bf16_optimizer_states", "true", "test"));
  if (twin_ratio) {
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_optimizer.ratio", twin_ratio, "test"));
    ZT_OK(zrt_config_set(cfg, "zero_optimization.sub_group_size", "0", "test"));
  }
  zrt_engine *eng;
  ZT_OK(zrt_engine_create(cfg, &eng));
  int mod[NMOD], par[NMOD];
  int64_t numel[NMOD];
  for (int m = 0; m < NMOD; m++) {
    char n[32];
    snprintf(n, sizeof n, "m%d", m);
    ZT_OK(zrt_module_add(eng, n, &mod[m]));
    snprintf(n, sizeof n, "m%d.w", m);
    numel[m] = 20000 + 3001 * m; /* uneven: every module pads differently */
    zrt_init init = {.kind = ZRT_INIT_NORMAL, .a = 0.02f};
    ZT_OK(zrt_param_add(eng, mod[m], n, 1, &numel[m], init, 0, &par[m]));
  }
  ZT_OK(zrt_engine_build(eng));
  uint64_t zc0 = zt_view(eng).comm->zero_copy;
  float *g = malloc(sizeof(float) * 40000);
  uint16_t *g16 = malloc(2 * 40000);
  for (int i = 0; i < 40000; i++) {
    g[i] = 1e-3f * (float)((i * 7 + rank) % 13 - 6);
    float f = g[i];
    uint32_t b;
    memcpy(&b, &f, 4);
    g16[i] = (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
  }
  for (int s = 0; s < 2; s++) {
    for (int m = 0; m < NMOD; m++) {
      void *p;
      ZT_OK(zrt_module_fetch(eng, mod[m]));
      ZT_OK(zrt_param_data(eng, par[m], &p));
      ZT_OK(zrt_module_release(eng, mod[m]));
    }
    for (int m = NMOD - 1; m >= 0; m--) {
      void *p;
      ZT_OK(zrt_module_fetch(eng, mod[m]));
      ZT_OK(zrt_param_grad(eng, par[m], &p));
      ZT_OK(zrt_engine_memcpy(eng, p, g16, (size_t)numel[m] * 2, ZRT_COPY_H2D));
      ZT_OK(zrt_module_grads_ready(eng, mod[m]));
      ZT_OK(zrt_module_release(eng, mod[m]));
    }
    zrt_step_info si;
    ZT_OK(zrt_engine_step(eng, 1.0f, &si));
    ZT_CHECK(si.boundary && !si.skipped);
  }
  /* stage 3 on the shm comm: the 16-bit shards live in the comm's memory
   * (engine_layout.c's arena), so every parameter gather runs zero-copy
   * (NVMe-swapped shards stay out of it; ZRT_COMM_SHM_ZC=0: none) */
  if (stage == 3 && world > 1 && !strcmp(zt_view(eng).comm_name, "shm") && op != 2) {
    const char *zc = getenv("ZRT_COMM_SHM_ZC");
    zrt_coord_stats cs;
    zrt_coord_stats_get(zt_probe(eng).coord, &cs);
    int on = !(zc && !strcmp(zc, "0"));
    ZT_CHECK(on == (zt_probe(eng).shard_arena != NULL));
    if (on) ZT_CHECK(zt_view(eng).comm->zero_copy - zc0 >= (uint64_t)cs.gathers && cs.gathers > 0);
    if (rank == 0)
      printf("stage 3 %s: %lld gathers, %llu zero-copy collectives\n",
             op ? "offload_param cpu" : "no param offload", (long long)cs.gathers,
             (unsigned long long)(zt_view(eng).comm->zero_copy - zc0));
  }
  /* the layout the model needs, read from the built engine */
  zrt_memest_layout lay;
  zt_memest_layout_of(eng, &lay);
  lay.max_live_elems = zt_view(eng).cfg->stage3_max_live_parameters;
  lay.reuse_elems = zt_view(eng).cfg->stage3_max_reuse_distance;
  /* Twin-Flow ratio 0 keeps every module on the device: no optimizer offload */
  lay.offload_optimizer = oo != 0 && zt_probe(eng).offload_opt != ZRT_OFFLOAD_NONE;
  lay.twin_device_padded = zrt_engine_twin_device_padded(eng);
  lay.offload_nvme = oo == 2;
  lay.offload_param = op != 0;
  lay.offload_param_nvme = op == 2;
  lay.param_buffer_size = zt_view(eng).cfg->offload_param.buffer_size;
  lay.param_buffer_count = zt_view(eng).cfg->offload_param.buffer_count;
  zrt_memest_result want;
  zrt_memest_predict(&lay, &want);
  zrt_mem_stats dev, host;
  ZT_OK(zrt_engine_memory(eng, 0, &dev));
  ZT_OK(zrt_engine_memory(eng, 1, &host));
  double worst = 0, total = 0;
  for (int c = 0; c < 4; c++) {
    double e1 = rel((double)dev.peak[c], (double)want.device[c]);
    double e2 = rel((double)host.peak[c], (double)want.host[c]);
    worst = fmax(worst, fmax(e1, e2));
    total += (double)dev.peak[c];
    if (rank == 0)
      printf("stage %d oo %d op %d reuse %d ratio %s N %d %-11s device measured %9zu predicted "
             "%9llu | host measured %9zu predicted %9llu\n",
             stage, oo, op, reuse, twin_ratio ? twin_ratio : "-", world, cat_name[c], dev.peak[c],
             (unsigned long long)want.device[c], host.peak[c], (unsigned long long)want.host[c]);
    ZT_CHECK(e1 <= 0.05);
    ZT_CHECK(e2 <= 0.05);
    if (oo == 2) ZT_CHECK(host.peak[c] == want.host[c]); /* staging only: exact */
    if (twin_ratio) /* the split of master, states and fp32 grads: exact */
      ZT_CHECK(dev.peak[c] == want.device[c] && host.peak[c] == want.host[c]);
  }
  if (bf16_mode) {
    /* bf16 masters and gradient partitions (2 bytes per element of the
     * rank's extent), bf16 or fp32 moments: exact, in the host pool */
    uint64_t ext = (uint64_t)(stage ? lay.padded_total / world : lay.padded_total);
    uint64_t sb = bf16_mode == 2 ? 2 : 4;
    if (rank == 0)
      printf("stage %d op %d N %d bf16 master%s: host master32 %zu (2 x %llu), grads %zu, "
             "optim_state %zu (%llu x 2 x %llu)\n",
             stage, op, world, bf16_mode == 2 ? " + states" : "", host.peak[ZRT_MEM_MASTER32],
             (unsigned long long)ext, host.peak[ZRT_MEM_GRADS], host.peak[ZRT_MEM_OPTIM_STATE],
             (unsigned long long)sb, (unsigned long long)ext);
    ZT_CHECK(host.peak[ZRT_MEM_MASTER32] == 2 * ext);
    ZT_CHECK(host.peak[ZRT_MEM_GRADS] == 2 * ext);
    ZT_CHECK(host.peak[ZRT_MEM_OPTIM_STATE] == 2 * sb * ext);
    for (int c = 0; c < 4; c++)
      ZT_CHECK(host.peak[c] == want.host[c] && dev.peak[c] == want.device[c]);
  }
  if (op == 2) {
    /* the param file's staging buffer only: exact */
    if (rank == 0)
      printf("stage %d oo %d param nvme N %d host params16 measured %zu predicted %llu\n", stage,
             oo, world, host.peak[ZRT_MEM_PARAMS16],
             (unsigned long long)want.host[ZRT_MEM_PARAMS16]);
    ZT_CHECK(host.peak[ZRT_MEM_PARAMS16] == want.host[ZRT_MEM_PARAMS16]);
  }
  if (oo == 2 || op == 2) {
    size_t disk =
        zrt_offload_pipe_nvme_disk_bytes(zt_probe(eng).offload) +
        (zt_probe(eng).pswap ? zrt_nvme_disk_bytes(zrt_pswap_nvme(zt_probe(eng).pswap)) : 0);
    if (rank == 0)
      printf("stage %d oo %d op %d nvme N %d swap files %zu bytes, predicted %llu\n", stage, oo, op,
             world, disk, (unsigned long long)want.nvme_bytes);
    ZT_CHECK(disk == want.nvme_bytes);
    ZT_CHECK(host.peak[ZRT_MEM_COMM] == want.host[ZRT_MEM_COMM]);
  }
  if (oo) {
    double e = rel((double)host.peak[ZRT_MEM_COMM], (double)want.host[ZRT_MEM_COMM]);
    if (rank == 0)
      printf("stage %d oo %d op %d N %d host comm measured %zu predicted %llu\n", stage, oo, op,
             world, host.peak[ZRT_MEM_COMM], (unsigned long long)want.host[ZRT_MEM_COMM]);
    ZT_CHECK(e <= 0.05);
  }
  if (!oo) {
    double P = (double)lay.padded_total, N = world, B = (double)lay.max_module_padded, z;
    /* the fp32 accumulator of stages 0/1; none with one rank (the step
     * reads the 16-bit gradients: zrt_engine_grad_direct) */
    double acc = world == 1 ? 0 : 4 * P / (stage == 0 ? 1 : N);
    if (stage == 0)
      z = 2 * P + 2 * P + acc + 12 * P;
    else if (stage == 1)
      z = 4 * P + 12 * P / N + acc;
    else if (stage == 2)
      z = 2 * P + 14 * P / N + 2 * P / N + 2 * B;
    else
      z = 16 * P / N + 2 * P / N + (reuse ? 2 * P : 2 * B) + 2 * B - (op ? 2 * P / N : 0);
    double e = rel(total, z);
    if (rank == 0)
      printf("stage %d N %d model states measured %.0f, ZeRO formula + extras %.0f (rel %.4f)\n",
             stage, world, total, z, e);
    ZT_CHECK(e <= 0.05);
  }
  if (rank == 0) printf("  worst category rel diff %.5f (tolerance 0.05)\n", worst);
  free(g);
  free(g16);
  zrt_engine_destroy(eng);
  zrt_config_destroy(cfg);
  return total;
}

int main(int argc, char **argv) {
  ZT_MPI_INIT(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  double tot[4];
  for (int s = 0; s <= 3; s++) tot[s] = run(s, 0, 0, 0, world, rank);
  if (world > 1)
    for (int s = 1; s <= 3; s++) ZT_CHECK(tot[s] < tot[s - 1]);
  for (int s = 1; s <= 3; s++) run(s, 1, 0, 0, world, rank);
  run(3, 1, 1, 0, world, rank);
  run(3, 0, 0, 1, world, rank);
  run(3, 1, 1, 1, world, rank);
  /* Twin-Flow at stage 3: every module on the device, half, all on the host */
  static const char *const ratios[] = {"0", "0.5", "1"};
  for (int k = 0; k < 3; k++) {
    twin_ratio = ratios[k];
    run(3, 1, 0, 0, world, rank);
  }
  twin_ratio = NULL;
  /* bf16 master weights and gradient partitions, then bf16 moments too */
  for (bf16_mode = 1; bf16_mode <= 2; bf16_mode++) {
    for (int s = 1; s <= 3; s++) run(s, 1, 0, 0, world, rank);
    run(3, 1, 1, 0, world, rank);
  }
  bf16_mode = 0;
  /* stage 3 on the shm comm, without and with parameter offload: the same
   * pools, every gather zero-copy */
  test_comm = "auto";
  run(3, 0, 0, 0, world, rank);
  run(3, 1, 1, 0, world, rank);
  test_comm = "mpi";
  if (rank == 0) {
    const char *base = getenv("ZRT_BUILD_DIR");
    if (!base || access(base, W_OK)) base = getenv("TMPDIR");
    if (!base || access(base, W_OK)) base = "/tmp";
    snprintf(nvme_dir, sizeof nvme_dir, "%s/zrt_memtest_XXXXXX", base);
    ZT_CHECK(mkdtemp(nvme_dir) != NULL);
  }
  MPI_Bcast(nvme_dir, sizeof nvme_dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  for (int s = 1; s <= 3; s++) run(s, 2, 0, 0, world, rank);
  run(3, 2, 1, 0, world, rank);
  run(3, 2, 2, 0, world, rank);
  run(3, 1, 2, 0, world, rank);
  /* offload_param alone (optimizer, masters and grads on the device) */
  run(3, 0, 1, 0, world, rank);
  run(3, 0, 2, 0, world, rank);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) ZT_CHECK(rmdir(nvme_dir) == 0); /* the engines removed their files */
  ZT_MPI_DONE();
}
