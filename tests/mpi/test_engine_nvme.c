/*
 * test_engine_nvme.c — zero_optimization.offload_optimizer.device nvme
 * (ZeRO-Infinity) in the engine, at -n 2 and -n 4.
 *
 * Model: three modules of uneven sizes, weights with weight decay and
 * biases / norms flagged ZRT_PARAM_NO_DECAY (AdamW, weight_decay 0.1, so a
 * wrong hyper-parameter split shows in the first step), gradients a pure
 * function of (rank, step, element) through the public API, gradient
 * clipping, sub_group_size 1024 so the swap file set is stepped in many
 * tiles that cut parameters at odd offsets. Reference: the same run with
 * offload_optimizer cpu. Checks (tolerance 0, bitwise; max diff printed):
 *  - stages 1, 2, 3 (bf16 AdamW), stage 3 + offload_param cpu, stage 2 fp32
 *    SGD with momentum (one state): fp32 master, optimizer states and the
 *    16-bit working weights equal the cpu-offload run's after 3 steps;
 *  - the swap files are per rank ("zrt_rank<R>_*" under nvme_path), their
 *    size on disk is memest's nvme_bytes, and they are removed at destroy;
 *    the swap byte counters of the metrics (nvme_read_bytes /
 *    nvme_write_bytes) add up to nvme_bytes each way over two steps;
 *  - checkpoint: nvme stage 2 trains 2 steps, saves, trains 2 more; a new
 *    nvme engine at stage 2 and one at stage 3 (resharding) load it and
 *    train the same 2 steps: masters equal the uninterrupted run bitwise
 *    (stage 2) / the cpu-offload stage-3 resume bitwise (stage 3); `zrt
 *    consolidate` of the nvme checkpoint and of the same step saved by a
 *    cpu-offload run gives the same tensors, byte for byte;
 *  - errors: nvme_path missing names zero_optimization.offload_optimizer.
 *    nvme_path and the path; a file instead of a directory likewise.
 * Swap directory: mkdtemp under $ZRT_BUILD_DIR (real disk, O_DIRECT) or
 * $TMPDIR / /tmp (tmpfs: logged buffered fallback), shared by the ranks.
 */
#define _GNU_SOURCE
#include "engine_nvme_model.h"

static void equivalence(const run_opts *base, const char *what) {
  snap s[2];
  int rank = 0;
  for (int nv = 0; nv < 2; nv++) {
    run_opts o = *base;
    o.oo = nv ? 2 : 1;
    model m;
    ZT_OK(model_create(&m, &o));
    rank = m.rank;
    uint64_t rd1 = 0, wr1 = 0;
    for (int step = 1; step <= 3; step++) {
      model_step(&m, step);
      if (step == 1) rd1 = zt_probe(m.eng).nvme_rd0, wr1 = zt_probe(m.eng).nvme_wr0;
    }
    uint64_t rd23 = zt_probe(m.eng).nvme_rd0 - rd1, wr23 = zt_probe(m.eng).nvme_wr0 - wr1;
    s[nv] = take(&m);
    if (nv) {
      /* the file set on disk: per-rank names, size = memest's prediction */
      zrt_memest_layout lay;
      memset(&lay, 0, sizeof lay);
      lay.world = m.world;
      lay.stage = o.stage;
      lay.optim_states = zrt_engine_optim_states(m.eng);
      for (int k = 0; k < NMOD; k++) {
        lay.padded_total += zt_module(m.eng, k).padded;
        lay.max_module_padded = ZRT_MAX(lay.max_module_padded, zt_module(m.eng, k).padded);
      }
      lay.offload_optimizer = lay.offload_nvme = 1;
      lay.sub_group_size = 1024;
      lay.dtype_bytes = lay.comm_bytes = 2;
      zrt_memest_result r;
      zrt_memest_predict(&lay, &r);
      int files;
      long long bytes = rank_files(o.dir, m.rank, "", &files);
      if (m.rank == 0)
        printf("%s: rank 0 swap files %d, %lld bytes on disk, memest nvme_bytes %llu\n", what,
               files, bytes, (unsigned long long)r.nvme_bytes);
      ZT_CHECK(files == 1 + lay.optim_states);
      ZT_CHECK((unsigned long long)bytes == r.nvme_bytes);
      /* the metrics' swap bytes: each step reads one generation of every
       * file and writes the other, so steps 2-3 moved nvme_bytes each way */
      if (m.rank == 0)
        printf("%s: rank 0 swap bytes over steps 2-3: read %llu, written %llu\n", what,
               (unsigned long long)rd23, (unsigned long long)wr23);
      ZT_CHECK(rd23 == r.nvme_bytes && wr23 == r.nvme_bytes);
    }
    zrt_engine_destroy(m.eng);
    if (nv) {
      int files;
      rank_files(o.dir, rank, "", &files);
      ZT_CHECK(files == 0);
    }
  }
  compare(what, &s[1], &s[0], rank);
  snap_free(&s[0]);
  snap_free(&s[1]);
}

/* rank 0: consolidates both checkpoints with the zrt command and compares
 * every tensor's bytes */

static void checkpoint_resume(const char *dir, const char *ckdir) {
  run_opts o = {.stage = 2, .oo = 2, .dtype = "bf16", .optim = "AdamW", .dir = dir};
  model m;
  ZT_OK(model_create(&m, &o));
  int rank = m.rank;
  for (int step = 1; step <= 2; step++) model_step(&m, step);
  ZT_OK(zrt_engine_save(m.eng, ckdir, NULL));
  for (int step = 3; step <= 4; step++) model_step(&m, step);
  snap full = take(&m);
  zrt_engine_destroy(m.eng);

  /* same stage, nvme: bitwise the uninterrupted run */
  ZT_OK(model_create(&m, &o));
  ZT_OK(zrt_engine_load(m.eng, ckdir, NULL));
  for (int step = 3; step <= 4; step++) model_step(&m, step);
  snap res = take(&m);
  zrt_engine_destroy(m.eng);
  compare("checkpoint stage 2 nvme: resume vs uninterrupted", &res, &full, rank);
  snap_free(&res);
  snap_free(&full);

  /* resharded into stage 3: nvme vs cpu offload from the same checkpoint */
  snap s3[2];
  for (int nv = 0; nv < 2; nv++) {
    run_opts p = o;
    p.stage = 3;
    p.oo = nv ? 2 : 1;
    ZT_OK(model_create(&m, &p));
    ZT_OK(zrt_engine_load(m.eng, ckdir, NULL));
    for (int step = 3; step <= 4; step++) model_step(&m, step);
    s3[nv] = take(&m);
    zrt_engine_destroy(m.eng);
  }
  compare("checkpoint stage 2 -> stage 3 resume: nvme vs cpu offload", &s3[1], &s3[0], rank);
  snap_free(&s3[0]);
  snap_free(&s3[1]);

  /* the same 2 steps with cpu offload, saved beside: consolidate equal */
  char ck_cpu[1200];
  snprintf(ck_cpu, sizeof ck_cpu, "%s/ckpt_cpu", dir);
  run_opts c = o;
  c.oo = 1;
  ZT_OK(model_create(&m, &c));
  for (int step = 1; step <= 2; step++) model_step(&m, step);
  ZT_OK(zrt_engine_save(m.eng, ck_cpu, NULL));
  zrt_engine_destroy(m.eng);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) consolidate_same("nvme checkpoint vs cpu-offload checkpoint", dir, ckdir, ck_cpu);
}

static void errors(const char *dir, int rank) {
  char missing[1200];
  snprintf(missing, sizeof missing, "%s/does_not_exist", dir);
  run_opts o = {.stage = 2, .oo = 2, .dtype = "bf16", .optim = "AdamW", .dir = missing};
  model m;
  zrt_status st = model_create(&m, &o);
  if (rank == 0) printf("missing nvme_path: status %d: %s\n", (int)st, zrt_last_error());
  ZT_CHECK(st == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "zero_optimization.offload_optimizer.nvme_path");
  ZT_CONTAINS(zrt_last_error(), missing);
  ZT_CONTAINS(zrt_last_error(), "No such file or directory");
  zrt_engine_destroy(m.eng);

  char file[1200];
  snprintf(file, sizeof file, "%s/plainfile_%d", dir, rank);
  FILE *f = fopen(file, "w");
  ZT_CHECK(f != NULL);
  if (f) fclose(f);
  o.dir = file;
  st = model_create(&m, &o);
  if (rank == 0) printf("nvme_path is a file: status %d: %s\n", (int)st, zrt_last_error());
  ZT_CHECK(st == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "zero_optimization.offload_optimizer.nvme_path");
  ZT_CONTAINS(zrt_last_error(), "is not a directory");
  zrt_engine_destroy(m.eng);
  unlink(file);
}

int main(int argc, char **argv) {
  int provided = 0; /* MULTIPLE: the twin's comm stream calls MPI (docs/comms.md) */
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  char dir[1024] = {0}, ckdir[1100];
  if (rank == 0) {
    const char *base = getenv("ZRT_BUILD_DIR");
    if (!base || access(base, W_OK)) base = getenv("TMPDIR");
    if (!base || access(base, W_OK)) base = "/tmp";
    snprintf(dir, sizeof dir, "%s/zrt_nvmetest_XXXXXX", base);
    ZT_CHECK(mkdtemp(dir) != NULL);
    printf("nvme_path %s (world %d)\n", dir, world);
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  snprintf(ckdir, sizeof ckdir, "%s/ckpt", dir);

  for (int stage = 1; stage <= 3; stage++) {
    run_opts o = {.stage = stage, .dtype = "bf16", .optim = "AdamW", .dir = dir};
    char what[64];
    snprintf(what, sizeof what, "stage %d bf16 AdamW: nvme vs cpu offload", stage);
    equivalence(&o, what);
  }
  run_opts o3 = {.stage = 3, .op = 1, .dtype = "bf16", .optim = "AdamW", .dir = dir};
  equivalence(&o3, "stage 3 + offload_param cpu bf16 AdamW: nvme vs cpu offload");
  run_opts sgd = {.stage = 2, .dtype = "fp32", .optim = "SGD", .dir = dir};
  equivalence(&sgd, "stage 2 fp32 SGD momentum: nvme vs cpu offload");
  checkpoint_resume(dir, ckdir);
  errors(dir, rank);

  nvme_test_cleanup(dir, rank);
  ZT_MPI_DONE();
}
