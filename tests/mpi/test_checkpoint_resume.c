/*
 * test_checkpoint_resume.c — save/load must continue the exact trajectory.
 *
 * Default mode (ctest, -n 2 and -n 4), for stages 0..3 in bf16 and stage 2
 * in fp16 (dynamic loss scaler): train 6 optimizer steps straight (A) vs 3
 * steps + save + destroy + new engine + load + 3 steps (B). Every loss of B
 * equals A's bitwise (tolerance 0) and the final fp32 master shards are
 * bitwise equal; the user JSON comes back. Then a same-world reshard: the
 * stage-1 checkpoint loads into a stage-3 engine with a bitwise-equal
 * master.
 *
 * Modes for tests/cli/test_checkpoint_reshard.sh (cross-world):
 *   save DIR STAGE   train 3 steps, save, and dump every rank's raw master
 *                    shard to DIR/ref/m<k>.r<rank>.f32 (independent of the
 *                    checkpoint format)
 *   load DIR STAGE OLDWORLD  load into an engine of this world/stage and
 *                    compare its master shard with the raw dumps, bitwise
 *   loop DIR STAGE STEPS  resume from DIR if it holds a checkpoint, train to
 *                    STEPS saving after every step (the kill -9 test)
 */
#include <mpi.h>
#include <unistd.h>

#include "checkpoint_io.h"
#include "test_checkpoint_model.h"
#include "zt_bits.h"
#include "zt_engine.h"
#include "ztest.h"

static char base[512];

static void shared_dir(ckm *m, const char *tag, char *out, size_t len) {
  float pid = m->rank == 0 ? (float)getpid() : 0.0f;
  ZT_OK(zrt_engine_all_reduce_sum(m->eng, &pid, 1));
  snprintf(out, len, "/tmp/zrt_ckpt_%s_%ld", tag, (long)pid);
}

/* This rank's master, all modules back to back (malloc'd). */
static float *master_of(ckm *m, int64_t *n) {
  zrt_engine *e = m->eng;
  int64_t total = 0;
  for (int k = 0; k < zt_view(e).nmodules; k++) {
    int64_t off, len;
    zrt_engine_master_extent(e, k, &off, &len);
    total += len;
  }
  float *buf = malloc((size_t)total * 4), *at = buf;
  for (int k = 0; k < zt_view(e).nmodules; k++) {
    int64_t off, len;
    zrt_engine_master_extent(e, k, &off, &len);
    ZT_OK(zrt_engine_get_master(e, k, at));
    at += len;
  }
  *n = total;
  return buf;
}

static void run_resume(int stage, const char *dtype) {
  ckm a, b;
  float la[6], lb[6];
  ZT_OK(ckm_create(&a, stage, dtype, 0));
  ZT_OK(ckm_train(&a, 0, 6, la));
  int64_t na;
  float *ma = master_of(&a, &na);
  char dir[600];
  shared_dir(&a, "resume", dir, sizeof dir);
  zrt_engine_destroy(a.eng);

  ZT_OK(ckm_create(&b, stage, dtype, 0));
  ZT_OK(ckm_train(&b, 0, 3, lb));
  ZT_OK(zrt_engine_save(b.eng, dir, "{\"data_pos\":6,\"note\":\"resume\"}"));
  zrt_engine_destroy(b.eng);

  ZT_OK(ckm_create(&b, stage, dtype, 0));
  char *user = NULL;
  ZT_OK(zrt_engine_load(b.eng, dir, &user));
  ZT_CHECK(user && strstr(user, "\"data_pos\":6"));
  free(user);
  ZT_CHECK(zt_counters(b.eng).global_step == 3);
  ZT_OK(ckm_train(&b, 3, 6, lb));
  int64_t nb;
  float *mb = master_of(&b, &nb);
  char what[128];
  snprintf(what, sizeof what, "stage %d %s rank %d: losses after resume vs straight", stage, dtype,
           b.rank);
  ZT_CLOSE_ARRAY(what, lb + 3, la + 3, 3, 0.0);
  for (int s = 3; s < 6; s++) ZT_CHECK(!memcmp(&la[s], &lb[s], 4)); /* bitwise, -0 vs 0 too */
  ZT_CHECK(na == nb);
  snprintf(what, sizeof what, "stage %d %s rank %d: final master after resume vs straight", stage,
           dtype, b.rank);
  ZT_CLOSE_ARRAY(what, mb, ma, na, 0.0);
  ZT_CHECK(!memcmp(ma, mb, (size_t)na * 4));
  /* the losses' and final masters' bits, for the cpu-vs-twin comparison
   * (tests/twin/twin_equal.sh) */
  uint64_t h = 1469598103934665603ull;
  for (int64_t e = 0; e < nb * 4; e++) h = (h ^ ((const unsigned char *)mb)[e]) * 1099511628211ull;
  for (int s = 0; s < 6; s++) {
    uint32_t ua, ub;
    memcpy(&ua, &la[s], 4);
    memcpy(&ub, &lb[s], 4);
    zt_bits("bits stage %d %s rank %d step %d loss %08x resumed %08x", stage, dtype, b.rank, s,
            (unsigned)ua, (unsigned)ub);
  }
  zt_bits("bits stage %d %s rank %d master fnv1a %016llx", stage, dtype, b.rank,
          (unsigned long long)h);

  /* same-world reshard to stage 3: the restored master is the saved one */
  if (stage == 1) {
    ckm c, d;
    float lc[3];
    ZT_OK(ckm_create(&c, 1, dtype, 0));
    ZT_OK(ckm_train(&c, 0, 3, lc));
    int64_t n1;
    float *m1 = master_of(&c, &n1);
    zrt_engine_destroy(c.eng);
    ZT_OK(ckm_create(&d, 3, dtype, 0));
    ZT_OK(zrt_engine_load(d.eng, dir, NULL)); /* dir holds step_3 of the stage-1 run B */
    int64_t n3;
    float *m3 = master_of(&d, &n3);
    ZT_CHECK(n1 == n3); /* stages 1 and 3 own the same slices */
    ZT_CLOSE_ARRAY("stage 1 -> stage 3 reshard: master", m3, m1, ZRT_MIN(n1, n3), 0.0);
    free(m1);
    free(m3);
    zrt_engine_destroy(d.eng);
  }
  zrt_engine_barrier(b.eng);
  if (b.rank == 0) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: cannot remove %s\n", dir);
  }
  zrt_engine_destroy(b.eng);
  free(ma);
  free(mb);
}

static void mode_save(const char *dir, int stage) {
  ckm m;
  float l[3];
  ZT_OK(ckm_create(&m, stage, "bf16", 0));
  ZT_OK(ckm_train(&m, 0, 3, l));
  ZT_OK(zrt_engine_save(m.eng, dir, "{\"data_pos\":6}"));
  char ref[700];
  snprintf(ref, sizeof ref, "%s/ref", dir);
  if (m.rank == 0) ZT_OK(zrt_ckpt_mkdirs(ref));
  zrt_engine_barrier(m.eng);
  for (int k = 0; k < zt_view(m.eng).nmodules; k++) {
    zrt_engine_module_view me_ = zt_module(m.eng, k), *me = &me_;
    int64_t off, len;
    zrt_engine_master_extent(m.eng, k, &off, &len);
    float *buf = malloc((size_t)len * 4);
    ZT_OK(zrt_engine_get_master(m.eng, k, buf));
    char p[800];
    snprintf(p, sizeof p, "%s/m%d.r%d.f32", ref, k, m.rank);
    /* this rank's owned slice, whatever the stage */
    ZT_OK(zrt_ckpt_write_file_atomic(p, buf + (m.rank * me->part - off), (size_t)me->part * 4));
    free(buf);
  }
  printf("saved %s at world %d stage %d\n", dir, m.world, stage);
  zrt_engine_destroy(m.eng);
}

static void mode_load(const char *dir, int stage, int old_world) {
  ckm m;
  ZT_OK(ckm_create(&m, stage, "bf16", 0));
  char *user = NULL;
  ZT_OK(zrt_engine_load(m.eng, dir, &user));
  ZT_CHECK(user && strstr(user, "\"data_pos\":6"));
  free(user);
  ZT_CHECK(zt_counters(m.eng).global_step == 3);
  for (int k = 0; k < zt_view(m.eng).nmodules; k++) {
    zrt_engine_module_view me_ = zt_module(m.eng, k), *me = &me_;
    /* the full saved module from the raw dumps of the old ranks */
    float *full = calloc((size_t)me->numel + 1, 4);
    int64_t at = 0;
    for (int r = 0; r < old_world; r++) {
      char p[800];
      snprintf(p, sizeof p, "%s/ref/m%d.r%d.f32", dir, k, r);
      char *raw;
      size_t len;
      ZT_OK(zrt_ckpt_read_file(p, &raw, &len));
      size_t take = (size_t)ZRT_MIN((int64_t)(len / 4), me->numel - at);
      if (at < me->numel) memcpy(full + at, raw, take * 4);
      at += (int64_t)(len / 4);
      free(raw);
    }
    int64_t off, len;
    zrt_engine_master_extent(m.eng, k, &off, &len);
    float *mine = malloc((size_t)len * 4), *want = calloc((size_t)len, 4);
    ZT_OK(zrt_engine_get_master(m.eng, k, mine));
    for (int64_t i = 0; i < len; i++)
      if (off + i < me->numel) want[i] = full[off + i];
    char what[200];
    snprintf(what, sizeof what, "reshard world %d -> %d stage %d rank %d module %d master",
             old_world, m.world, stage, m.rank, k);
    ZT_CLOSE_ARRAY(what, mine, want, len, 0.0);
    ZT_CHECK(!memcmp(mine, want, (size_t)len * 4));
    free(full);
    free(mine);
    free(want);
  }
  /* the resharded engine trains on */
  float l[6];
  ZT_OK(ckm_train(&m, 3, 5, l));
  ZT_CHECK(isfinite(l[4]));
  zrt_engine_destroy(m.eng);
}

/* Kill test driver: resumes from DIR when it holds a checkpoint, then
 * trains to `steps` optimizer steps saving after every one. */
static void mode_loop(const char *dir, int stage, int steps) {
  ckm m;
  float l[64];
  ZT_OK(ckm_create(&m, stage, "bf16", 0));
  char latest[700];
  snprintf(latest, sizeof latest, "%s/latest", dir);
  if (zrt_ckpt_exists(latest)) {
    char *user = NULL;
    ZT_OK(zrt_engine_load(m.eng, dir, &user));
    ZT_CHECK(user && strstr(user, "data_pos"));
    free(user);
  }
  for (int s = (int)zt_counters(m.eng).global_step; s < steps && s < 64; s++) {
    ZT_OK(ckm_train(&m, s, s + 1, l));
    char user[64];
    snprintf(user, sizeof user, "{\"data_pos\":%d}", 2 * (s + 1));
    ZT_OK(zrt_engine_save(m.eng, dir, user));
  }
  zrt_engine_destroy(m.eng);
}

int main(int argc, char **argv) {
  /* one write per line: mpiexec forwards each rank's output in the chunks it
   * reads, so block-buffered lines of two ranks could interleave mid-line
   * and a "bits" line compared by tests/twin/twin_equal.sh would be lost */
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* The test owns MPI so that engines can be destroyed and recreated. */
  int provided = 0; /* MULTIPLE: the twin's comm stream calls MPI (docs/comms.md) */
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  snprintf(base, sizeof base, "/tmp");
  if (argc >= 4 && !strcmp(argv[1], "save")) {
    mode_save(argv[2], atoi(argv[3]));
    MPI_Finalize();
    ZT_DONE();
  }
  if (argc >= 5 && !strcmp(argv[1], "loop")) {
    mode_loop(argv[2], atoi(argv[3]), atoi(argv[4]));
    MPI_Finalize();
    ZT_DONE();
  }
  if (argc >= 5 && !strcmp(argv[1], "load")) {
    mode_load(argv[2], atoi(argv[3]), atoi(argv[4]));
    MPI_Finalize();
    ZT_DONE();
  }
  for (int stage = 0; stage <= 3; stage++) run_resume(stage, "bf16");
  run_resume(2, "fp16");
  MPI_Finalize();
  ZT_DONE();
}
