/*
 * test_checkpoint_errors.c — every bad checkpoint gives a clear error on
 * every rank, leaves the engine unchanged (its master is bitwise what it
 * was) and leaves the files on disk unchanged (CRC32C of every file before
 * and after). Cases: missing directory, directory without a checkpoint,
 * `latest` naming a deleted step, a model whose parameter shape differs,
 * a corrupted byte in a rank file, a truncated rank file, a bad user JSON.
 */
#include <mpi.h>
#include <unistd.h>

#include "checkpoint_io.h"
#include "test_checkpoint_model.h"
#include "zt_engine.h"
#include "ztest.h"

static float *master_of(ckm *m, int64_t *n) {
  int64_t total = 0;
  for (int k = 0; k < zt_view(m->eng).nmodules; k++) {
    int64_t off, len;
    zrt_engine_master_extent(m->eng, k, &off, &len);
    total += len;
  }
  float *buf = malloc((size_t)total * 4), *at = buf;
  for (int k = 0; k < zt_view(m->eng).nmodules; k++) {
    int64_t off, len;
    zrt_engine_master_extent(m->eng, k, &off, &len);
    ZT_OK(zrt_engine_get_master(m->eng, k, at));
    at += len;
  }
  *n = total;
  return buf;
}

/* CRC of the names, sizes and contents of the checkpoint's files. */
static uint32_t tree_crc(const char *dir) {
  char cmd[700];
  snprintf(cmd, sizeof cmd, "cd %s && find . -type f | sort | xargs cat | cksum; find . | sort",
           dir);
  FILE *p = popen(cmd, "r");
  char buf[4096];
  size_t n = fread(buf, 1, sizeof buf, p);
  pclose(p);
  return zrt_crc32c(0, buf, n);
}

static void expect_fail(ckm *m, const float *m0, int64_t n0, const char *dir, const char *what,
                        const char *needle1, const char *needle2) {
  uint32_t before = tree_crc(dir);
  char *user = (char *)"untouched";
  zrt_status st = zrt_engine_load(m->eng, dir, &user);
  ZT_CHECK(st != ZRT_OK);
  ZT_CHECK(user == NULL);
  printf("rank %d, %s: %s: %s\n", m->rank, what, zrt_status_string(st), zrt_last_error());
  ZT_CONTAINS(zrt_last_error(), needle1);
  if (needle2) ZT_CONTAINS(zrt_last_error(), needle2);
  int64_t n1;
  float *m1 = master_of(m, &n1);
  ZT_CHECK(n1 == n0);
  char label[200];
  snprintf(label, sizeof label, "%s: master unchanged", what);
  ZT_CLOSE_ARRAY(label, m1, m0, n0, 0.0);
  free(m1);
  ZT_CHECK(zt_counters(m->eng).global_step == 1);
  ZT_CHECK(tree_crc(dir) == before);
}

int main(int argc, char **argv) {
  int provided = 0; /* MULTIPLE: the twin's comm stream calls MPI (docs/comms.md) */
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ckm a, e, bad;
  float l[3];
  ZT_OK(ckm_create(&a, 1, "bf16", 0));
  float pid = a.rank == 0 ? (float)getpid() : 0.0f;
  ZT_OK(zrt_engine_all_reduce_sum(a.eng, &pid, 1));
  char dir[300], sub[400], cmd[1200];
  snprintf(dir, sizeof dir, "/tmp/zrt_ckpt_err_%ld", (long)pid);
  ZT_OK(ckm_train(&a, 0, 2, l));
  ZT_CHECK(zrt_engine_save(a.eng, dir, "[1,2]") == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "user_json must be a JSON object");
  ZT_CHECK(!zrt_ckpt_exists(dir)); /* nothing written */
  zrt_engine_barrier(a.eng);       /* before anyone saves for real */
  ZT_OK(zrt_engine_save(a.eng, dir, "{\"data_pos\":4}"));
  zrt_engine_destroy(a.eng);

  /* the engine errors must leave alone: trained one step, different state */
  ZT_OK(ckm_create(&e, 1, "bf16", 0));
  ZT_OK(ckm_train(&e, 0, 1, l));
  int64_t n0;
  float *m0 = master_of(&e, &n0);

  snprintf(sub, sizeof sub, "%s/nonexistent", dir);
  char *user = NULL;
  ZT_CHECK(zrt_engine_load(e.eng, sub, &user) == ZRT_ERR_IO);
  ZT_CONTAINS(zrt_last_error(), "the directory does not exist");
  ZT_CONTAINS(zrt_last_error(), sub);

  snprintf(sub, sizeof sub, "%s/empty", dir);
  if (e.rank == 0) ZT_OK(zrt_ckpt_mkdirs(sub));
  zrt_engine_barrier(e.eng);
  expect_fail(&e, m0, n0, sub, "empty directory", "looked for", "/latest");

  /* model mismatch: blk.w is [13, 8] in this engine */
  ZT_OK(ckm_create(&bad, 1, "bf16", 1));
  zrt_status st = zrt_engine_load(bad.eng, dir, NULL);
  ZT_CHECK(st == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "parameter 'blk.w' has shape [13, 7] in the checkpoint but [13, 8] "
                                "in the engine");
  zrt_engine_destroy(bad.eng);

  /* corrupted: one byte near the end of the last rank's file */
  char cdir[400];
  snprintf(cdir, sizeof cdir, "%s/corrupt", dir);
  if (e.rank == 0) {
    snprintf(cmd, sizeof cmd,
             "cp -r %s/step_2 %s && f=%s/rank%d.bin && s=$(stat -c %%s $f) && "
             "printf Z | dd of=$f bs=1 seek=$((s-3)) conv=notrunc 2>/dev/null",
             dir, cdir, cdir, e.world - 1);
    ZT_CHECK(system(cmd) == 0);
  }
  zrt_engine_barrier(e.eng);
  char fname[64];
  snprintf(fname, sizeof fname, "rank%d.bin' is corrupted", e.world - 1);
  expect_fail(&e, m0, n0, cdir, "corrupted rank file", fname,
              "section 'exp_avg_sq.2' (exp_avg_sq of module 'head')");

  /* truncated */
  char tdir[400];
  snprintf(tdir, sizeof tdir, "%s/trunc", dir);
  if (e.rank == 0) {
    snprintf(cmd, sizeof cmd, "cp -r %s/step_2 %s && f=%s/rank0.bin && truncate -s -10 $f", dir,
             tdir, tdir);
    ZT_CHECK(system(cmd) == 0);
  }
  zrt_engine_barrier(e.eng);
  expect_fail(&e, m0, n0, tdir, "truncated rank file", "rank0.bin' is truncated",
              "the metadata says");

  /* latest naming a deleted step */
  char ldir[400];
  snprintf(ldir, sizeof ldir, "%s/dangling", dir);
  if (e.rank == 0) {
    ZT_OK(zrt_ckpt_mkdirs(ldir));
    snprintf(sub, sizeof sub, "%s/latest", ldir);
    ZT_OK(zrt_ckpt_write_file_atomic(sub, "step_9\n", 7));
  }
  zrt_engine_barrier(e.eng);
  expect_fail(&e, m0, n0, ldir, "dangling latest", "names 'step_9' but", "step_9/meta.json");

  /* and the good checkpoint still loads into the same engine */
  ZT_OK(zrt_engine_load(e.eng, dir, &user));
  ZT_CHECK(user && !strcmp(user, "{\"data_pos\":4}"));
  free(user);
  ZT_CHECK(zt_counters(e.eng).global_step == 2);

  zrt_engine_barrier(e.eng);
  if (e.rank == 0) {
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: cannot remove %s\n", dir);
  }
  free(m0);
  zrt_engine_destroy(e.eng);
  MPI_Finalize();
  ZT_DONE();
}
