/*
 * test_checkpoint_hostile.c — saving into a checkpoint directory where
 * another user planted names (docs/security.md): nothing outside the named
 * directory is written or removed, and a failed save leaves no file behind.
 * Cases, each checked on the bytes of a "victim" directory and file that
 * stand for what the planted names point at:
 *   - step_<N> planted as a symlink to the victim directory: the save fails
 *     naming the link; the victim directory is unchanged (its files
 *     ranking.csv, rank_notes.txt, db.tmp.1 that a clean-up matching "rank*"
 *     or "*.tmp.*" would delete, too);
 *   - the same user files inside a real step_<N>, and symlinks planted at
 *     the rank file names and at meta.json pointing to the victim file: the
 *     save succeeds, replaces the links, the user files and the victim file
 *     are unchanged;
 *   - step_<N> owned by another user: refused;
 *   - the checkpoint directory writable by everyone and not sticky:
 *     refused; the same directory sticky: saved;
 *   - one rank fails to write (a directory planted at its file name, as a
 *     full disk would fail it): every rank's finished file is removed, no
 *     temporary remains, `latest` still names the previous step;
 *   - every rank file written, then meta.json fails (RLIMIT_FSIZE on rank
 *     0): the rank files are removed as well, `latest` unchanged.
 * Runs as root in CI: "another user" is uid 65534 (nobody), set with
 * lchown.
 */
#include <fcntl.h>
#include <mpi.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_io.h"
#include "test_checkpoint_model.h"
#include "zt_engine.h"
#include "ztest.h"

#define OTHER_UID 65534

/* Names, sizes and contents of every file under dir, as one CRC. */
static uint32_t tree_crc(const char *dir) {
  char cmd[900];
  snprintf(cmd, sizeof cmd,
           "cd %s && find . -type f | sort | xargs -r cat | cksum; find . | sort; "
           "find . -type l -printf '%%p -> %%l\\n' | sort",
           dir);
  FILE *p = popen(cmd, "r");
  char buf[8192];
  size_t n = fread(buf, 1, sizeof buf, p);
  pclose(p);
  return zrt_crc32c(0, buf, n);
}

static void sh(const char *cmd) {
  int rc = system(cmd);
  if (rc != 0) {
    fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
    ZT_CHECK(0);
  }
}

static int count_matching(const char *dir, const char *pattern) {
  char cmd[900];
  snprintf(cmd, sizeof cmd, "ls -A %s 2>/dev/null | grep -c -- '%s'", dir, pattern);
  FILE *p = popen(cmd, "r");
  int n = 0;
  if (fscanf(p, "%d", &n) != 1) n = -1;
  pclose(p);
  return n;
}

int main(int argc, char **argv) {
  int provided = 0; /* MULTIPLE: the twin's comm stream calls MPI (docs/comms.md) */
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ckm a;
  float l[8];
  ZT_OK(ckm_create(&a, 1, "bf16", 0));
  float pid = a.rank == 0 ? (float)getpid() : 0.0f;
  ZT_OK(zrt_engine_all_reduce_sum(a.eng, &pid, 1));
  char base[300], root[400], victim[400], vfile[500], cmd[2000], p[700];
  snprintf(base, sizeof base, "/tmp/zrt_ckpt_hostile_%ld", (long)pid);
  snprintf(root, sizeof root, "%s/ckpt", base);
  snprintf(victim, sizeof victim, "%s/victim", base);
  snprintf(vfile, sizeof vfile, "%s/victim_file", base);
  if (a.rank == 0) {
    snprintf(cmd, sizeof cmd,
             "rm -rf %s && mkdir -p %s %s && cd %s && echo 'id,score' > ranking.csv && "
             "echo notes > rank_notes.txt && echo db > db.tmp.1 && "
             "printf 'precious data' > %s && chmod 600 %s",
             base, root, victim, victim, vfile, vfile);
    sh(cmd);
  }
  zrt_engine_barrier(a.eng);
  uint32_t vdir0 = tree_crc(victim);
  char *vtxt0 = NULL;
  size_t vlen0 = 0;
  ZT_OK(zrt_ckpt_read_file(vfile, &vtxt0, &vlen0));

  /* 1. step_2 planted as a symlink to the victim directory */
  ZT_OK(ckm_train(&a, 0, 2, l));
  if (a.rank == 0) {
    snprintf(cmd, sizeof cmd, "ln -s %s %s/step_2", victim, root);
    sh(cmd);
  }
  zrt_engine_barrier(a.eng);
  zrt_status st = zrt_engine_save(a.eng, root, NULL);
  printf("rank %d, planted step link: %s\n", a.rank, zrt_last_error());
  ZT_CHECK(st == ZRT_ERR_IO);
  ZT_CONTAINS(zrt_last_error(), "step_2' is a symbolic link");
  ZT_CHECK(tree_crc(victim) == vdir0);
  zrt_engine_barrier(a.eng);

  /* 2. a real step_2 holding user files and links at zrt's names */
  if (a.rank == 0) {
    snprintf(cmd, sizeof cmd,
             "rm %s/step_2 && mkdir %s/step_2 && cp %s/* %s/step_2/ && cd %s/step_2 && "
             "for r in $(seq 0 %d); do ln -s %s rank$r.bin; done && ln -s %s meta.json && "
             "ln -s %s rank0.bin.tmp.%ld",
             root, root, victim, root, root, a.world - 1, vfile, vfile, vfile, (long)pid);
    sh(cmd);
  }
  zrt_engine_barrier(a.eng);
  ZT_OK(zrt_engine_save(a.eng, root, "{\"case\":2}"));
  ZT_CHECK(tree_crc(victim) == vdir0);
  char *vtxt = NULL;
  size_t vlen = 0;
  ZT_OK(zrt_ckpt_read_file(vfile, &vtxt, &vlen));
  ZT_CHECK(vlen == vlen0 && !memcmp(vtxt, vtxt0, vlen0));
  free(vtxt);
  snprintf(p, sizeof p, "%s/step_2", root);
  ZT_CHECK(count_matching(p, "^ranking.csv$") == 1);
  ZT_CHECK(count_matching(p, "^rank_notes.txt$") == 1);
  ZT_CHECK(count_matching(p, "^db.tmp.1$") == 1);
  struct stat sb;
  snprintf(p, sizeof p, "%s/step_2/rank0.bin", root);
  ZT_CHECK(lstat(p, &sb) == 0 && S_ISREG(sb.st_mode));
  int64_t step = -1;
  ZT_OK(zrt_checkpoint_peek(root, &step, NULL));
  ZT_CHECK(step == 2);
  zrt_engine_barrier(a.eng);

  /* 3. step_4 made by another user (only root can make one here) */
  ZT_OK(ckm_train(&a, 2, 4, l));
  if (geteuid() != 0) {
    if (a.rank == 0) printf("not root: the case of a step directory of another user is skipped\n");
  } else {
    if (a.rank == 0) {
      snprintf(cmd, sizeof cmd, "mkdir %s/step_4 && chown %d %s/step_4", root, OTHER_UID, root);
      sh(cmd);
    }
    zrt_engine_barrier(a.eng);
    st = zrt_engine_save(a.eng, root, NULL);
    printf("rank %d, foreign step dir: %s\n", a.rank, zrt_last_error());
    ZT_CHECK(st == ZRT_ERR_IO);
    ZT_CONTAINS(zrt_last_error(), "belongs to uid 65534");
    zrt_engine_barrier(a.eng);
    if (a.rank == 0) {
      snprintf(cmd, sizeof cmd, "rmdir %s/step_4", root);
      sh(cmd);
    }
  }

  /* 4. world-writable, not sticky; then sticky */
  if (a.rank == 0) {
    snprintf(cmd, sizeof cmd, "chmod 0777 %s", root);
    sh(cmd);
  }
  zrt_engine_barrier(a.eng);
  st = zrt_engine_save(a.eng, root, NULL);
  printf("rank %d, world-writable root: %s\n", a.rank, zrt_last_error());
  ZT_CHECK(st == ZRT_ERR_IO);
  ZT_CONTAINS(zrt_last_error(), "writable by every user and not sticky (mode 0777)");
  ZT_CONTAINS(zrt_last_error(), "chmod +t");
  zrt_engine_barrier(a.eng);
  if (a.rank == 0) {
    snprintf(cmd, sizeof cmd, "chmod 1777 %s", root);
    sh(cmd);
  }
  zrt_engine_barrier(a.eng);
  ZT_OK(zrt_engine_save(a.eng, root, NULL));
  ZT_OK(zrt_checkpoint_peek(root, &step, NULL));
  ZT_CHECK(step == 4);
  zrt_engine_barrier(a.eng);

  /* 5. the last rank cannot write its file: the others' files go too */
  ZT_OK(ckm_train(&a, 4, 6, l));
  if (a.rank == 0) {
    snprintf(cmd, sizeof cmd, "chmod 0755 %s && mkdir -p %s/step_6/rank%d.bin", root, root,
             a.world - 1);
    sh(cmd);
  }
  zrt_engine_barrier(a.eng);
  st = zrt_engine_save(a.eng, root, NULL);
  printf("rank %d, one rank fails: %s\n", a.rank, zrt_last_error());
  ZT_CHECK(st == ZRT_ERR_IO);
  char needle[64];
  snprintf(needle, sizeof needle, "rank %d", a.world - 1);
  ZT_CONTAINS(zrt_last_error(), needle);
  zrt_engine_barrier(a.eng);
  snprintf(p, sizeof p, "%s/step_6", root);
  ZT_CHECK(count_matching(p, "^rank[0-9]*\\.bin$") == 1); /* only the planted directory */
  ZT_CHECK(count_matching(p, "\\.tmp\\.") == 0);
  ZT_CHECK(count_matching(p, "^meta.json$") == 0);
  ZT_OK(zrt_checkpoint_peek(root, &step, NULL));
  ZT_CHECK(step == 4);
  ZT_CHECK(tree_crc(victim) == vdir0);

  /* 6. every rank file written, then meta.json fails (a full disk on rank
   * 0, emulated with RLIMIT_FSIZE 64 bytes short of step_4's meta.json,
   * far above a rank file): the rank files go too, latest still names
   * step_4 */
  ZT_OK(ckm_train(&a, 6, 8, l));
  zrt_engine_barrier(a.eng);
  struct rlimit lim0;
  getrlimit(RLIMIT_FSIZE, &lim0);
  if (a.rank == 0) {
    struct stat rs, ms;
    snprintf(p, sizeof p, "%s/step_4/rank0.bin", root);
    ZT_CHECK(stat(p, &rs) == 0);
    snprintf(p, sizeof p, "%s/step_4/meta.json", root);
    ZT_CHECK(stat(p, &ms) == 0 && ms.st_size > rs.st_size);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {(rlim_t)(ms.st_size - 64), lim0.rlim_max};
    ZT_CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  }
  st = zrt_engine_save(a.eng, root, NULL);
  if (a.rank == 0) ZT_CHECK(setrlimit(RLIMIT_FSIZE, &lim0) == 0);
  printf("rank %d, meta.json fails: %s\n", a.rank, zrt_last_error());
  ZT_CHECK(st == ZRT_ERR_IO);
  ZT_CONTAINS(zrt_last_error(), "meta.json");
  zrt_engine_barrier(a.eng);
  snprintf(p, sizeof p, "%s/step_8", root);
  ZT_CHECK(count_matching(p, "^rank") == 0);
  ZT_CHECK(count_matching(p, "meta.json") == 0);
  ZT_OK(zrt_checkpoint_peek(root, &step, NULL));
  ZT_CHECK(step == 4);

  zrt_engine_barrier(a.eng);
  if (a.rank == 0) {
    snprintf(cmd, sizeof cmd, "rm -rf %s", base);
    if (system(cmd) != 0) fprintf(stderr, "warning: cannot remove %s\n", base);
  }
  free(vtxt0);
  zrt_engine_destroy(a.eng);
  MPI_Finalize();
  ZT_DONE();
}
