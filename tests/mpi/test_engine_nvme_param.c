/*
 * test_engine_nvme_param.c — zero_optimization.offload_param.device nvme
 * (ZeRO-Infinity parameter offload) at stage 3, at -n 2 and -n 4.
 *
 * Model: the three uneven modules of test_engine_nvme.c (AdamW, weight
 * decay with NO_DECAY pieces, clipping, sub_group_size 1024 so the param
 * file's staging is smaller than the shards and chunks cut modules),
 * gradients a pure function of (rank, step, element). Reference: the same
 * run with offload_param cpu. Checks (tolerance 0, bitwise; max diff
 * printed):
 *  - bf16 AdamW with offload_optimizer nvme and with cpu, fp32 SGD with
 *    momentum (4-byte "16-bit" file): fp32 master, optimizer states and the
 *    working weights gathered from the param file equal the param-cpu run's
 *    after 3 steps;
 *  - the param file is per rank ("zrt_rank<R>_param_*" under nvme_path),
 *    its size on disk is 2 generations of align4096(2 P/N) bytes (memest's
 *    nvme_bytes less the optimizer files' share) and it is removed at
 *    destroy;
 *  - offload_param alone (no offload_optimizer; DeepSpeed supports it): param
 *    nvme equals param cpu as above, and param cpu equals no parameter
 *    offload at all;
 *  - checkpoint: param nvme trains 2 steps, saves, trains 2 more; a new
 *    param-nvme engine loads and trains the same 2 steps: bitwise equal; a
 *    stage-2 engine (no param offload) resumes from it bitwise like one
 *    resumed from the param-cpu checkpoint of the same step; `zrt
 *    consolidate` of both checkpoints gives the same tensors byte for byte
 *    (checkpoint saves read the 16-bit sections from the file);
 *  - asynchronous prefetch reads: stage3_prefetch_bucket_size 1e8 and
 *    stage3_max_reuse_distance 0 (every fetch after the first step reads
 *    the shard again, several reads in flight) with offload_param
 *    buffer_count 1 and 4: bitwise equal to param cpu as above;
 *  - errors: a missing offload_param.nvme_path and an unset one name
 *    zero_optimization.offload_param.nvme_path; the param file truncated
 *    after step 1 (module 0's shard intact, the prefetched ones cut): a
 *    fetch or release of step 2 fails with "short read" naming the file and
 *    an offset in the current generation, on every rank before any further collective, with no read
 *    left in flight and nothing queued.
 */
#define _GNU_SOURCE
#include "engine_nvme_model.h"

static void equivalence(const run_opts *base, const char *what) {
  snap s[2];
  int rank = 0;
  for (int pn = 0; pn < 2; pn++) {
    run_opts o = *base;
    o.op = 1 + pn;
    model m;
    ZT_OK(model_create(&m, &o));
    rank = m.rank;
    for (int step = 1; step <= 3; step++) model_step(&m, step);
    s[pn] = take(&m);
    if (pn) {
      zrt_memest_layout lay;
      memset(&lay, 0, sizeof lay);
      lay.world = m.world;
      lay.stage = 3;
      lay.optim_states = zrt_engine_optim_states(m.eng);
      for (int k = 0; k < NMOD; k++) {
        lay.padded_total += zt_module(m.eng, k).padded;
        lay.max_module_padded = ZRT_MAX(lay.max_module_padded, zt_module(m.eng, k).padded);
      }
      lay.offload_param = lay.offload_param_nvme = 1;
      lay.offload_optimizer = o.oo != 0;
      lay.offload_nvme = o.oo == 2;
      lay.sub_group_size = 1024;
      lay.dtype_bytes = lay.comm_bytes = (int)zrt_dtype_size(zt_view(m.eng).dtype);
      zrt_memest_result r;
      zrt_memest_predict(&lay, &r);
      unsigned long long want =
          r.nvme_bytes - zrt_offload_pipe_nvme_disk_bytes(zt_probe(m.eng).offload);
      int files;
      long long bytes = rank_files(o.dir, m.rank, "param_", &files);
      if (m.rank == 0)
        printf("%s: rank 0 param files %d, %lld bytes on disk, predicted %llu (memest nvme_bytes "
               "%llu in all)\n",
               what, files, bytes, want, (unsigned long long)r.nvme_bytes);
      ZT_CHECK(files == 1);
      ZT_CHECK((unsigned long long)bytes == want);
    }
    zrt_engine_destroy(m.eng);
    if (pn) {
      int files;
      rank_files(o.dir, rank, "param_", &files);
      ZT_CHECK(files == 0);
    }
  }
  compare(what, &s[1], &s[0], rank);
  snap_free(&s[0]);
  snap_free(&s[1]);
}

/* offload_param alone (optimizer, masters and grads on the device): the
 * same 3 steps as without any offload, bitwise */
static void param_alone(const char *dir) {
  snap s[2];
  int rank = 0;
  for (int op = 0; op < 2; op++) {
    run_opts o = {.stage = 3, .oo = 0, .op = op, .dtype = "bf16", .optim = "AdamW", .dir = dir};
    model m;
    ZT_OK(model_create(&m, &o));
    rank = m.rank;
    ZT_CHECK(zt_probe(m.eng).offload == NULL); /* no optimizer pipe */
    for (int step = 1; step <= 3; step++) model_step(&m, step);
    s[op] = take(&m);
    zrt_engine_destroy(m.eng);
  }
  compare("stage 3 bf16 AdamW, no optimizer offload: param cpu vs no param offload", &s[1], &s[0],
          rank);
  snap_free(&s[0]);
  snap_free(&s[1]);
}

static void checkpoint_resume(const char *dir) {
  char ck[2][1200];
  snprintf(ck[0], sizeof ck[0], "%s/ckpt_pcpu", dir);
  snprintf(ck[1], sizeof ck[1], "%s/ckpt_pnvme", dir);
  run_opts o = {.stage = 3, .oo = 2, .op = 2, .dtype = "bf16", .optim = "AdamW", .dir = dir};
  model m;
  ZT_OK(model_create(&m, &o));
  int rank = m.rank;
  for (int step = 1; step <= 2; step++) model_step(&m, step);
  ZT_OK(zrt_engine_save(m.eng, ck[1], NULL));
  for (int step = 3; step <= 4; step++) model_step(&m, step);
  snap full = take(&m);
  zrt_engine_destroy(m.eng);

  ZT_OK(model_create(&m, &o));
  ZT_OK(zrt_engine_load(m.eng, ck[1], NULL));
  for (int step = 3; step <= 4; step++) model_step(&m, step);
  snap res = take(&m);
  zrt_engine_destroy(m.eng);
  compare("checkpoint param nvme: resume vs uninterrupted", &res, &full, rank);
  snap_free(&res);
  snap_free(&full);

  /* the same 2 steps with offload_param cpu, saved beside */
  run_opts c = o;
  c.op = 1;
  ZT_OK(model_create(&m, &c));
  for (int step = 1; step <= 2; step++) model_step(&m, step);
  ZT_OK(zrt_engine_save(m.eng, ck[0], NULL));
  zrt_engine_destroy(m.eng);

  /* resharded into stage 2 (no param offload) from each checkpoint */
  snap s2[2];
  for (int k = 0; k < 2; k++) {
    run_opts p = {.stage = 2, .oo = 1, .dtype = "bf16", .optim = "AdamW", .dir = dir};
    ZT_OK(model_create(&m, &p));
    ZT_OK(zrt_engine_load(m.eng, ck[k], NULL));
    for (int step = 3; step <= 4; step++) model_step(&m, step);
    s2[k] = take(&m);
    zrt_engine_destroy(m.eng);
  }
  compare("checkpoint -> stage 2 resume: from param nvme vs from param cpu", &s2[1], &s2[0], rank);
  snap_free(&s2[0]);
  snap_free(&s2[1]);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0)
    consolidate_same("param-nvme checkpoint vs param-cpu checkpoint", dir, ck[1], ck[0]);
}

/* The param file truncated behind zrt's back while prefetches are on. */
static void truncated(const char *dir, const char *bc) {
  run_opts o = {.stage = 3,
                .oo = 1,
                .op = 2,
                .dtype = "bf16",
                .optim = "AdamW",
                .dir = dir,
                .prefetch = "100000000",
                .reuse = "0",
                .buffer_count = bc};
  model m;
  ZT_OK(model_create(&m, &o));
  model_step(&m, 1); /* records the trace: step 2 prefetches */
  zrt_engine *e = m.eng;
  size_t ws = zrt_dtype_size(zt_view(e).dtype);
  /* module 0's shard lies in the first block of the current generation;
   * the prefetched modules' reads run past the cut */
  ZT_CHECK((size_t)zt_module(e, 0).part * ws <= 4096);
  size_t total = 0; /* the shards back to back */
  for (int k = 0; k < NMOD; k++) total += (size_t)zt_module(e, k).part;
  size_t region = ZRT_ALIGN_UP(total * ws, (size_t)4096);
  size_t cut = (size_t)zrt_nvme_generation(zrt_pswap_nvme(zt_probe(e).pswap)) * region + 4096;
  const char *path = zrt_nvme_path(zrt_pswap_nvme(zt_probe(e).pswap), 0);
  ZT_CHECK(truncate(path, (off_t)cut) == 0);
  zrt_status st = ZRT_OK;
  for (int k = 0; k < NMOD && st == ZRT_OK; k++) {
    st = zrt_module_fetch(e, m.mod[k]);
    if (st == ZRT_OK) st = zrt_module_release(e, m.mod[k]);
  }
  if (m.rank == 0)
    printf("param file truncated (buffer_count %s): status %d: %s\n", bc, (int)st,
           zrt_last_error());
  ZT_CHECK(st == ZRT_ERR_IO);
  ZT_CONTAINS(zrt_last_error(), "short read");
  ZT_CONTAINS(zrt_last_error(), path);
  /* which chunk fails first is the disk's timing: any block of the
   * current generation */
  const char *at = strstr(zrt_last_error(), "short read at offset ");
  ZT_CHECK(at != NULL);
  unsigned long long fo = at ? strtoull(at + 21, NULL, 10) : 1;
  ZT_CHECK(fo % 4096 == 0 && fo >= cut - 4096 && fo < cut - 4096 + region);
  ZT_CHECK(zrt_nvme_reads_in_flight(zrt_pswap_nvme(zt_probe(e).pswap)) == 0);
  ZT_CHECK(zrt_pswap_queue_len(zt_probe(e).pswap) == 0);
  for (int k = 0; k < NMOD; k++) ZT_CHECK(!zrt_pswap_queued(zt_probe(e).pswap, k));
  zrt_engine_destroy(e);
}

static void errors(const char *dir, int rank) {
  char missing[1200];
  snprintf(missing, sizeof missing, "%s/does_not_exist", dir);
  run_opts o = {.stage = 3, .oo = 1, .op = 2, .dtype = "bf16", .optim = "AdamW", .dir = missing};
  model m;
  zrt_status st = model_create(&m, &o);
  if (rank == 0) printf("missing param nvme_path: status %d: %s\n", (int)st, zrt_last_error());
  ZT_CHECK(st == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "zero_optimization.offload_param.nvme_path");
  ZT_CONTAINS(zrt_last_error(), missing);
  ZT_CONTAINS(zrt_last_error(), "No such file or directory");
  zrt_engine_destroy(m.eng);

  o.dir = "";
  st = model_create(&m, &o);
  if (rank == 0) printf("unset param nvme_path: status %d: %s\n", (int)st, zrt_last_error());
  ZT_CHECK(st == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "zero_optimization.offload_param.nvme_path");
  ZT_CONTAINS(zrt_last_error(), "is not set");
  zrt_engine_destroy(m.eng);
}

int main(int argc, char **argv) {
  int provided = 0; /* MULTIPLE: the twin's comm stream calls MPI (docs/comms.md) */
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  char dir[1024] = {0};
  if (rank == 0) {
    const char *base = getenv("ZRT_BUILD_DIR");
    if (!base || access(base, W_OK)) base = getenv("TMPDIR");
    if (!base || access(base, W_OK)) base = "/tmp";
    snprintf(dir, sizeof dir, "%s/zrt_nvmeparam_XXXXXX", base);
    ZT_CHECK(mkdtemp(dir) != NULL);
    printf("nvme_path %s (world %d)\n", dir, world);
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);

  run_opts a = {.stage = 3, .oo = 2, .dtype = "bf16", .optim = "AdamW", .dir = dir};
  equivalence(&a, "stage 3 bf16 AdamW, optimizer nvme: param nvme vs param cpu");
  run_opts b = {.stage = 3, .oo = 1, .dtype = "bf16", .optim = "AdamW", .dir = dir};
  equivalence(&b, "stage 3 bf16 AdamW, optimizer cpu: param nvme vs param cpu");
  run_opts d = {.stage = 3, .oo = 0, .dtype = "bf16", .optim = "AdamW", .dir = dir};
  equivalence(&d, "stage 3 bf16 AdamW, optimizer on the device: param nvme vs param cpu");
  param_alone(dir);
  run_opts c = {.stage = 3, .oo = 2, .dtype = "fp32", .optim = "SGD", .dir = dir};
  equivalence(&c, "stage 3 fp32 SGD momentum, optimizer nvme: param nvme vs param cpu");
  const char *bcs[] = {"1", "4"};
  for (int k = 0; k < 2; k++) {
    run_opts p = {.stage = 3,
                  .oo = 1,
                  .dtype = "bf16",
                  .optim = "AdamW",
                  .dir = dir,
                  .prefetch = "100000000",
                  .reuse = "0",
                  .buffer_count = bcs[k]};
    char what[160];
    snprintf(what, sizeof what,
             "stage 3 bf16 AdamW, prefetch 1e8, reuse 0, param buffer_count %s: param nvme vs "
             "param cpu",
             bcs[k]);
    equivalence(&p, what);
  }
  checkpoint_resume(dir);
  errors(dir, rank);
  truncated(dir, "1");
  truncated(dir, "4");

  nvme_test_cleanup(dir, rank);
  ZT_MPI_DONE();
}
