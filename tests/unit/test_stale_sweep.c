/*
 * test_stale_sweep.c — the leftovers of a killed rank are removed at the
 * next start, and nothing else (safe_file.h zrt_safe_is_stale, the NVMe
 * swap sweep of offload/nvme.c; the /dev/shm sweep shares the rule and is
 * tested in test_comm_zero_copy):
 *   - swap files "zrt_rank<R>_<pid>.<host>_<id>_<array>.bin" of a dead pid,
 *     unmodified for two minutes: removed, each named in a warning;
 *   - kept: the same names one second old (a save or a start in progress),
 *     of a live pid (this process's parent: a pid reused or in use), of
 *     another machine's tag (a shared disk: the pid means nothing here), a
 *     symlink of that form (its target untouched), a user's file.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nvme.h"
#include "safe_file.h"
#include "zt_child.h"
#include "ztest.h"

static char dir[64];

static void plant(const char *name, int age_s) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
  ZT_CHECK(fd >= 0 && write(fd, "swapdata", 8) == 8);
  close(fd);
  struct timespec t[2] = {{.tv_sec = time(NULL) - age_s}, {.tv_sec = time(NULL) - age_s}};
  ZT_CHECK(utimensat(AT_FDCWD, p, t, AT_SYMLINK_NOFOLLOW) == 0);
}

static int present(const char *name) {
  char p[512];
  struct stat sb;
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return lstat(p, &sb) == 0;
}

static int create_child(void *arg) {
  (void)arg;
  zrt_nvme *nv = NULL;
  if (zrt_nvme_create_named(dir, "zrt_rank0", 1024, 1, 1, &nv) != ZRT_OK) return 1;
  zrt_nvme_destroy(nv);
  return 0;
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/zrt_stale_sweep_%d", (int)getpid());
  ZT_CHECK(mkdir(dir, 0700) == 0);
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, NULL, 0);
  char host[9], a[256], b[256], c[256], young[256], live[256], other[256], link[256], tgt[300];
  zrt_safe_host_tag(host);
  snprintf(a, sizeof a, "zrt_rank0_%d.%s_0_master.bin", (int)dead, host);
  snprintf(b, sizeof b, "zrt_rank0_%d.%s_0_state1.bin", (int)dead, host);
  snprintf(c, sizeof c, "zrt_rank1_param_%d.%s_3_master.bin", (int)dead, host);
  snprintf(young, sizeof young, "zrt_rank2_%d.%s_0_master.bin", (int)dead, host);
  snprintf(live, sizeof live, "zrt_rank0_%d.%s_0_master.bin", (int)getppid(), host);
  snprintf(other, sizeof other, "zrt_rank0_%d.%08x_0_master.bin", (int)dead,
           (unsigned)strtoul(host, NULL, 16) ^ 1u);
  snprintf(link, sizeof link, "zrt_rank3_%d.%s_0_master.bin", (int)dead, host);
  plant(a, 120);
  plant(b, 120);
  plant(c, 120);
  plant(young, 1);
  plant(live, 120);
  plant(other, 120);
  plant("zrt_notes.bin", 120);
  snprintf(tgt, sizeof tgt, "%s/precious", dir);
  plant("precious", 120);
  char lp[512];
  snprintf(lp, sizeof lp, "%s/%s", dir, link);
  ZT_CHECK(symlink(tgt, lp) == 0);
  struct timespec t[2] = {{.tv_sec = time(NULL) - 120}, {.tv_sec = time(NULL) - 120}};
  ZT_CHECK(utimensat(AT_FDCWD, lp, t, AT_SYMLINK_NOFOLLOW) == 0);

  char log[8192];
  int rc = zt_in_child(create_child, NULL, log, sizeof log);
  printf("sweep at create (rc %d):\n%s\n", rc, log);
  ZT_CHECK(rc == 0);
  ZT_CHECK(!present(a) && !present(b) && !present(c));
  char want[600];
  snprintf(want, sizeof want, "nvme swap: removed %s/%s (8 bytes): left by process %d", dir, a,
           (int)dead);
  ZT_CONTAINS(log, want);
  ZT_CONTAINS(log, c);
  ZT_CHECK(present(young) && present(live) && present(other) && present(link) &&
           present("precious") && present("zrt_notes.bin"));
  printf("kept: young, live pid %d, other machine, symlink, user file\n", (int)getppid());

  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ZT_CHECK(system(cmd) == 0);
  ZT_DONE();
}
