/*
 * test_engine_offload_grads.c — ZeRO-Offload's fp32 gradient shard in the
 * host pool (run by ctest at -n 1, 2 and 4). A program of NMOD uneven
 * modules (bf16 and fp16, AdamW, clipping 1.0, 2 micro-batches of
 * accumulation, buckets of 1024 elements so every module reduces in several
 * buckets, overlap_comm on) is trained for STEPS optimizer steps at stages
 * 1-3 with offload_optimizer none, cpu and nvme. Under fp16, step 2 gets
 * non-finite gradients injected into the accumulator (ZRT_INJECT_NONFINITE_GRADS)
 * and step 3 a real fp16 Inf in one rank's 16-bit gradients (it travels
 * through the buckets), so two steps are skipped and the scaler backs off.
 * Checks, per rank:
 *  - with offload, every module's accumulator is a host-pool buffer
 *    (grad_host) and the pools say so exactly: device grads peak = the
 *    16-bit gradients only (2P at stage 1, 2 * largest module at 2/3), host
 *    grads peak = 4 bytes x the master extent (4P/N); both equal memest;
 *  - every step's grad norm, skip flag and loss scale, and every module's
 *    final fp32 master extent, are bitwise those of the run without offload
 *    (the same additions in the same order; host and device accumulate
 *    with the same fp32 kernel on the CPU backend), fp16 skips included;
 *  - a checkpoint written without offload (the accumulator on the device,
 *    the old layout) resumes under offload cpu, and one written under
 *    offload cpu resumes without it, both bitwise equal to the run that
 *    never stopped (the format holds per-rank master/state extents, never
 *    the gradient accumulator);
 *  - under zrt.device_memory_limit with DeepSpeed's default
 *    reduce_bucket_size (5e8), the buckets' device staging is capped at
 *    1/ZRT_LAYOUT_BUCKET_CAP_DIV of the limit, equals memest given the
 *    capacity, and the capped run is bitwise the uncapped one (bucket
 *    boundaries never change an element's additions).
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtype.h"
#include "layout.h"
#include "memest.h"
#include "zt_engine.h"
#include "zt_memest.h"
#include "zt_mpi.h"
#include "zt_train.h"
#include "ztest.h"

#define NMOD 4
#define STEPS 5
#define ACCUM 2

static char tmpdir[1024];

typedef struct outcome {
  float norm[STEPS], scale[STEPS];
  int skipped[STEPS];
  float *master[NMOD];
  int64_t len[NMOD];
} outcome;

static void outcome_free(outcome *o) {
  for (int m = 0; m < NMOD; m++) free(o->master[m]);
}

static const char *limit_bytes; /* zrt.device_memory_limit of make (NULL = none) */

static zrt_engine *make(int stage, int fp16, int oo, int rank) {
  zrt_config *cfg;
  ZT_OK(zrt_config_create(&cfg));
  char v[64];
  snprintf(v, sizeof v, "%d", stage);
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage", v, "test"));
  ZT_OK(zrt_config_set(cfg, fp16 ? "fp16.enabled" : "bf16.enabled", "true", "test"));
  if (fp16) ZT_OK(zrt_config_set(cfg, "fp16.initial_scale_power", "8", "test"));
  ZT_OK(zrt_config_set(cfg, "optimizer.type", "AdamW", "test"));
  ZT_OK(zrt_config_set(cfg, "optimizer.params.lr", "0.01", "test"));
  ZT_OK(zrt_config_set(cfg, "gradient_clipping", "1.0", "test"));
  ZT_OK(zrt_config_set(cfg, "train_micro_batch_size_per_gpu", "1", "test"));
  snprintf(v, sizeof v, "%d", ACCUM);
  ZT_OK(zrt_config_set(cfg, "gradient_accumulation_steps", v, "test"));
  if (limit_bytes)
    ZT_OK(zrt_config_set(cfg, "zrt.device_memory_limit", limit_bytes, "test"));
  else
    ZT_OK(zrt_config_set(cfg, "zero_optimization.reduce_bucket_size", "1024", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.overlap_comm", "true", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage3_param_persistence_threshold", "0", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage3_prefetch_bucket_size", "0", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage3_max_reuse_distance", "0", "test"));
  ZT_OK(zrt_config_set(cfg, "zrt.comm", "mpi", "test"));
  if (oo) {
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_optimizer.device",
                         oo == 2 ? "nvme" : "cpu", "test"));
    if (oo == 2)
      ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_optimizer.nvme_path", tmpdir, "test"));
    ZT_OK(zrt_config_set(cfg, "zrt.pin_memory_fallback", "true", "test"));
    /* pinned: on the twin the pipe runs in stream mode */
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_optimizer.pin_memory", "true", "test"));
  }
  (void)rank;
  zrt_engine *eng = NULL;
  ZT_OK(zrt_engine_create(cfg, &eng));
  zrt_config_destroy(cfg);
  for (int m = 0; m < NMOD; m++) {
    char n[32];
    int mod, par;
    snprintf(n, sizeof n, "m%d", m);
    ZT_OK(zrt_module_add(eng, n, &mod));
    snprintf(n, sizeof n, "m%d.w", m);
    int64_t numel = 3000 + 1237 * m;
    zrt_init init = {.kind = ZRT_INIT_NORMAL, .a = 0.02f};
    ZT_OK(zrt_param_add(eng, mod, n, 1, &numel, init, 0, &par));
    ZT_CHECK(mod == m && par == m);
  }
  ZT_OK(zrt_engine_build(eng));
  return eng;
}

/* Optimizer steps [s0, s1) of the program: per micro-batch, modules in
 * reverse order get deterministic gradients of rank, step, micro and
 * module (fp16: an Inf at step 3 on rank 0, micro 1, module 1). */
static void train(zrt_engine *eng, int fp16, int s0, int s1, int rank, outcome *o) {
  int64_t numel[NMOD];
  int param[NMOD];
  for (int m = 0; m < NMOD; m++) numel[m] = 3000 + 1237 * m, param[m] = m;
  for (int s = s0; s < s1; s++) {
    zrt_step_info si;
    zt_fake_grad_step(eng, fp16 ? ZRT_F16 : ZRT_BF16, NMOD, numel, param, ACCUM, s, rank,
                      fp16 ? 2 : -1, &si);
    ZT_CHECK(si.boundary);
    o->norm[s] = si.grad_norm;
    o->scale[s] = si.loss_scale;
    o->skipped[s] = si.skipped;
  }
}

static void masters(zrt_engine *eng, outcome *o) {
  for (int m = 0; m < NMOD; m++) {
    int64_t off;
    zrt_engine_master_extent(eng, m, &off, &o->len[m]);
    o->master[m] = malloc((size_t)o->len[m] * 4);
    ZT_OK(zrt_engine_get_master(eng, m, o->master[m]));
  }
}

/* The pools hold exactly what the model says, with no fp32 gradient term
 * on the device under offload. */
static void check_pools(zrt_engine *eng, int stage, int oo, int world, int rank) {
  zrt_memest_layout lay;
  zt_memest_layout_of(eng, &lay);
  for (int m = 0; m < NMOD; m++) ZT_CHECK(zt_module(eng, m).grad_host == (oo != 0));
  lay.offload_optimizer = oo != 0;
  lay.offload_nvme = oo == 2;
  zrt_memest_result want;
  zrt_memest_predict(&lay, &want);
  zrt_mem_stats dev, host;
  ZT_OK(zrt_engine_memory(eng, ZRT_MEM_DEVICE, &dev));
  ZT_OK(zrt_engine_memory(eng, ZRT_MEM_HOST_PINNED, &host));
  uint64_t P = (uint64_t)lay.padded_total, B = (uint64_t)lay.max_module_padded;
  uint64_t dev16 = stage == 1 ? 2 * P : 2 * B; /* the 16-bit gradients only */
  if (rank == 0)
    printf("stage %d oo %d N %d grads: device %zu (16-bit only: %llu, memest %llu), host %zu "
           "(4P/N = %llu, memest %llu); comm host %zu memest %llu\n",
           stage, oo, world, dev.peak[ZRT_MEM_GRADS], (unsigned long long)dev16,
           (unsigned long long)want.device[ZRT_MEM_GRADS], host.peak[ZRT_MEM_GRADS],
           (unsigned long long)(4 * P / world), (unsigned long long)want.host[ZRT_MEM_GRADS],
           host.peak[ZRT_MEM_COMM], (unsigned long long)want.host[ZRT_MEM_COMM]);
  if (!oo) return;
  ZT_CHECK(dev.peak[ZRT_MEM_GRADS] == dev16);
  ZT_CHECK(dev.peak[ZRT_MEM_GRADS] == want.device[ZRT_MEM_GRADS]);
  ZT_CHECK(host.peak[ZRT_MEM_GRADS] == 4 * P / (uint64_t)world);
  ZT_CHECK(host.peak[ZRT_MEM_GRADS] == want.host[ZRT_MEM_GRADS]);
  ZT_CHECK(host.peak[ZRT_MEM_COMM] == want.host[ZRT_MEM_COMM]);
  ZT_CHECK(dev.peak[ZRT_MEM_COMM] == want.device[ZRT_MEM_COMM]);
}

static void same(const outcome *a, const outcome *b, const char *what, int rank) {
  int bad = 0;
  for (int s = 0; s < STEPS; s++) {
    if (memcmp(&a->norm[s], &b->norm[s], 4) || a->scale[s] != b->scale[s] ||
        a->skipped[s] != b->skipped[s]) {
      bad++;
      fprintf(stderr, "rank %d %s step %d: norm %.9g/%.9g scale %g/%g skipped %d/%d\n", rank, what,
              s + 1, (double)a->norm[s], (double)b->norm[s], (double)a->scale[s],
              (double)b->scale[s], a->skipped[s], b->skipped[s]);
    }
  }
  for (int m = 0; m < NMOD; m++)
    if (a->len[m] != b->len[m] || memcmp(a->master[m], b->master[m], (size_t)a->len[m] * 4)) {
      bad++;
      fprintf(stderr, "rank %d %s: module %d masters differ\n", rank, what, m);
    }
  ZT_CHECK(bad == 0);
}

/* The bucket cap: a 512 KiB device, the default 5e8-element buckets. */
static void check_cap(int world, int rank) {
  outcome capped = {0}, ref = {0};
  limit_bytes = "524288";
  zrt_engine *eng = make(2, 0, 1, rank);
  train(eng, 0, 0, 2, rank, &capped);
  masters(eng, &capped);
  zrt_memest_layout lay;
  zt_memest_layout_of(eng, &lay);
  lay.offload_optimizer = 1;
  lay.device_capacity = 524288;
  zrt_memest_result want;
  zrt_memest_predict(&lay, &want);
  zrt_mem_stats dev;
  ZT_OK(zrt_engine_memory(eng, ZRT_MEM_DEVICE, &dev));
  int64_t chunk = zrt_buckets_chunk(zt_probe(eng).buckets);
  int64_t free_chunk = zrt_layout_bucket_chunk(zt_view(eng).cfg->reduce_bucket_size, world,
                                               lay.max_module_padded / world);
  if (rank == 0)
    printf("cap: reduce_bucket_size %lld, chunk %lld (uncapped %lld), device comm %zu (memest "
           "%llu, 1/%d of 512 KiB = %d)\n",
           (long long)zt_view(eng).cfg->reduce_bucket_size, (long long)chunk, (long long)free_chunk,
           dev.peak[ZRT_MEM_COMM], (unsigned long long)want.device[ZRT_MEM_COMM],
           ZRT_LAYOUT_BUCKET_CAP_DIV, 524288 / ZRT_LAYOUT_BUCKET_CAP_DIV);
  ZT_CHECK(chunk < free_chunk);
  ZT_CHECK(dev.peak[ZRT_MEM_COMM] == want.device[ZRT_MEM_COMM]);
  ZT_CHECK(dev.peak[ZRT_MEM_COMM] <= 524288 / ZRT_LAYOUT_BUCKET_CAP_DIV);
  zrt_engine_destroy(eng);
  limit_bytes = NULL;
  eng = make(2, 0, 1, rank);
  train(eng, 0, 0, 2, rank, &ref);
  masters(eng, &ref);
  zrt_engine_destroy(eng);
  for (int s = 2; s < STEPS; s++) capped.norm[s] = ref.norm[s]; /* only 2 steps ran */
  same(&ref, &capped, "bf16 stage 2 offload cpu, capped vs small buckets", rank);
  outcome_free(&capped);
  outcome_free(&ref);
}

int main(int argc, char **argv) {
  ZT_MPI_INIT(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (rank == 0) {
    const char *base = getenv("ZRT_BUILD_DIR");
    if (!base || access(base, W_OK)) base = getenv("TMPDIR");
    if (!base || access(base, W_OK)) base = "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/zrt_offgrads_XXXXXX", base);
    ZT_CHECK(mkdtemp(tmpdir) != NULL);
  }
  MPI_Bcast(tmpdir, sizeof tmpdir, MPI_CHAR, 0, MPI_COMM_WORLD);
  for (int fp16 = 0; fp16 <= 1; fp16++) {
    /* fp16: step 2's accumulator gets a NaN (read at engine create) */
    if (fp16) { /* the injection is a test hook: it acts with ZRT_TEST_HOOKS=1 */
      setenv("ZRT_TEST_HOOKS", "1", 1);
      setenv("ZRT_INJECT_NONFINITE_GRADS", "2", 1);
    } else {
      unsetenv("ZRT_TEST_HOOKS");
      unsetenv("ZRT_INJECT_NONFINITE_GRADS");
    }
    for (int stage = 1; stage <= 3; stage++) {
      outcome ref = {0};
      for (int oo = 0; oo <= 2; oo++) {
        outcome o = {0};
        zrt_engine *eng = make(stage, fp16, oo, rank);
        train(eng, fp16, 0, STEPS, rank, &o);
        masters(eng, &o);
        check_pools(eng, stage, oo, world, rank);
        zrt_engine_destroy(eng);
        if (fp16) ZT_CHECK(o.skipped[1] && o.skipped[2] && !o.skipped[0] && !o.skipped[3]);
        if (oo == 0) {
          ref = o;
          continue;
        }
        char what[64];
        snprintf(what, sizeof what, "%s stage %d offload %s vs none", fp16 ? "fp16" : "bf16", stage,
                 oo == 2 ? "nvme" : "cpu");
        same(&ref, &o, what, rank);
        if (rank == 0) printf("%s: bitwise equal over %d steps\n", what, STEPS);
        outcome_free(&o);
      }
      /* resume across the layouts: save after step 3 in one, load in the other */
      for (int from = 0; from <= 1; from++) {
        char dir[1100];
        snprintf(dir, sizeof dir, "%s/ckpt_s%d_f%d_%d", tmpdir, stage, fp16, from);
        outcome o = {0};
        zrt_engine *a = make(stage, fp16, from, rank);
        train(a, fp16, 0, 3, rank, &o);
        ZT_OK(zrt_engine_save(a, dir, NULL));
        zrt_engine_destroy(a);
        zrt_engine *b = make(stage, fp16, !from, rank);
        ZT_OK(zrt_engine_load(b, dir, NULL));
        train(b, fp16, 3, STEPS, rank, &o);
        masters(b, &o);
        zrt_engine_destroy(b);
        char what[96];
        snprintf(what, sizeof what, "%s stage %d checkpoint %s -> %s resumed",
                 fp16 ? "fp16" : "bf16", stage, from ? "offload cpu" : "device grads",
                 from ? "device grads" : "offload cpu");
        same(&ref, &o, what, rank);
        if (rank == 0) printf("%s: bitwise equal to the uninterrupted run\n", what);
        outcome_free(&o);
      }
      outcome_free(&ref);
    }
  }
  unsetenv("ZRT_INJECT_NONFINITE_GRADS");
  unsetenv("ZRT_TEST_HOOKS");
  check_cap(world, rank);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ZT_CHECK(system(cmd) == 0);
  }
  ZT_MPI_DONE();
}
