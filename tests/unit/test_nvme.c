/*
 * test_nvme.c — the offload pipe with master / optimizer state swapped to
 * files (liburing, O_DIRECT, two generations per file):
 *   - three AdamW steps (and two Lion steps) through the files equal
 *     zrt_cpu_optim_step on host arrays bitwise (master, m, v read back from
 *     the files, and the 16-bit params);
 *   - missing nvme_path → clear error naming the path and the config key;
 *   - a swap file truncated behind zrt's back → "short read" error;
 *   - a full disk, emulated with RLIMIT_FSIZE (SIGXFSZ ignored) in a forked
 *     child → the step fails with a clear error and the files still hold the
 *     last completed step (no corrupt state);
 *   - tmpfs (/dev/shm) refuses O_DIRECT → a logged fallback to buffered I/O
 *     that still gives the same results;
 *   - a symlink planted at the next swap file's name (predictable: prefix,
 *     pid, a per-process counter) pointing to a victim file → the create
 *     fails naming it, the victim is unchanged; an nvme_path writable by
 *     everyone and not sticky → refused with what to do; sticky → accepted.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dtype.h"
#include "nvme.h"
#include "offload.h"
#include "safe_file.h"
#include "zt_child.h"
#include "ztest.h"

#define N (3 * 4096 + 100)

static zrt_backend *be;
static zrt_hostpool *hpool;
static float m0[N], a0[N], b0[N], g[N];
static uint16_t p16[N], pref[N];

static uint64_t rng = 777;
static float frand(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((int64_t)(rng >> 11) - (1ll << 52)) / (float)(1ll << 52);
}

static zrt_optim_hparams hparams(zrt_optim_type t) {
  zrt_optim_hparams h = {.type = t,
                         .lr = 1e-3f,
                         .beta1 = 0.9f,
                         .beta2 = 0.999f,
                         .eps = 1e-8f,
                         .weight_decay = 0.01f,
                         .bias_correction = 1,
                         .grad_mul = 0.5f};
  return h;
}

static zrt_offload_pipe *make_pipe(const char *dir) {
  zrt_offload_opts o = {.tile_elems = 4096, .nvme = 1, .nvme_path = dir, .buffer_count = 4};
  zrt_offload_pipe *p = NULL;
  ZT_OK(zrt_offload_pipe_create(be, hpool, &o, &p));
  return p;
}

/* steps with the pipe over files vs the reference on host arrays; returns
 * 1 when every array matches bitwise after every step */
static int run_steps(const char *dir, zrt_optim_type t, int steps) {
  int ns = t == ZRT_OPTIM_LION ? 1 : 2;
  for (size_t i = 0; i < N; i++) {
    m0[i] = frand();
    a0[i] = 0;
    b0[i] = 0;
  }
  zrt_offload_pipe *p = make_pipe(dir);
  ZT_OK(zrt_offload_pipe_nvme_register(p, N, ns, m0, NULL, NULL));
  void *gdev = NULL, *pdev = NULL;
  ZT_OK(zrt_backend_alloc(be, N * 4, ZRT_MEM_GRADS, &gdev));
  ZT_OK(zrt_backend_alloc(be, N * 2, ZRT_MEM_PARAMS16, &pdev));
  static float back[N];
  int ok = 1;
  for (int s = 1; s <= steps; s++) {
    zrt_optim_hparams h = hparams(t);
    h.step = s;
    for (size_t i = 0; i < N; i++) g[i] = frand();
    ZT_OK(zrt_backend_memcpy(be, gdev, g, sizeof g, ZRT_COPY_H2D, NULL));
    ZT_OK(zrt_cpu_optim_step(&h, m0, a0, ns == 2 ? b0 : NULL, g, ZRT_F32, pref, ZRT_BF16, N));
    ZT_OK(zrt_offload_pipe_step(p, &h, NULL, NULL, NULL, gdev, ZRT_F32, pdev, ZRT_BF16, N));
    ZT_OK(zrt_backend_memcpy(be, p16, pdev, sizeof p16, ZRT_COPY_D2H, NULL));
    ok &= !memcmp(p16, pref, sizeof p16);
    ZT_OK(zrt_offload_pipe_nvme_read(p, 0, back));
    ok &= !memcmp(back, m0, sizeof back);
    ZT_OK(zrt_offload_pipe_nvme_read(p, 1, back));
    ok &= !memcmp(back, a0, sizeof back);
    if (ns == 2) {
      ZT_OK(zrt_offload_pipe_nvme_read(p, 2, back));
      ok &= !memcmp(back, b0, sizeof back);
    }
  }
  zrt_offload_timing tm;
  zrt_offload_pipe_timing(p, &tm);
  printf("%s: %d steps over files in %s: %s (bitwise); last step %.3g s, hidden %.2f\n",
         t == ZRT_OPTIM_LION ? "lion" : "adamw", steps, dir, ok ? "equal" : "DIFFERENT", tm.total_s,
         tm.hidden_fraction);
  zrt_backend_free(be, gdev);
  zrt_backend_free(be, pdev);
  zrt_offload_pipe_destroy(p);
  return ok;
}

/* exit 0: the step failed with the disk-full error and the files still hold
 * the registered (last committed) state; 1: step succeeded; 2: corrupt. */
static int full_disk_child(void *arg) {
  const char *dir = arg;
  signal(SIGXFSZ, SIG_IGN);
  for (size_t i = 0; i < N; i++) m0[i] = frand();
  zrt_offload_pipe *p = make_pipe(dir);
  ZT_OK(zrt_offload_pipe_nvme_register(p, N, 2, m0, NULL, NULL));
  /* one generation fits, the second does not: like a disk that is full */
  size_t region = (N * 4 + 4095) / 4096 * 4096;
  struct rlimit rl = {region, region};
  setrlimit(RLIMIT_FSIZE, &rl);
  void *gdev = NULL;
  ZT_OK(zrt_backend_alloc(be, N * 4, ZRT_MEM_GRADS, &gdev));
  for (size_t i = 0; i < N; i++) g[i] = 1.0f;
  ZT_OK(zrt_backend_memcpy(be, gdev, g, sizeof g, ZRT_COPY_H2D, NULL));
  zrt_optim_hparams h = hparams(ZRT_OPTIM_ADAMW);
  h.step = 1;
  zrt_status st = zrt_offload_pipe_step(p, &h, NULL, NULL, NULL, gdev, ZRT_F32, NULL, ZRT_BF16, N);
  fprintf(stderr, "MSG: %s\n", st == ZRT_OK ? "(ok)" : zrt_last_error());
  if (st == ZRT_OK) return 1;
  static float back[N];
  ZT_OK(zrt_offload_pipe_nvme_read(p, 0, back));
  int intact = !memcmp(back, m0, sizeof back);
  ZT_OK(zrt_offload_pipe_nvme_read(p, 1, back));
  for (size_t i = 0; i < N; i++) intact &= back[i] == 0.0f;
  zrt_offload_pipe_destroy(p);
  return intact ? 0 : 2;
}

static int tmpfs_child(void *arg) {
  (void)arg;
  char dir[] = "/dev/shm/zrt_nvme_XXXXXX";
  if (!mkdtemp(dir)) return 3;
  int ok = run_steps(dir, ZRT_OPTIM_ADAMW, 2);
  rmdir(dir);
  return ok ? 0 : 1;
}

int main(void) {
  ZT_OK(zrt_backend_create("cpu", 0, 0, &be));
  zrt_hostpool_opts ho = {.numa_node = -1, .pin = 1, .allow_fallback = 1};
  ZT_OK(zrt_hostpool_create(&ho, be, &hpool));
  char dir[] = "/tmp/zrt_nvme_XXXXXX";
  ZT_CHECK(mkdtemp(dir) != NULL);

  ZT_CHECK(run_steps(dir, ZRT_OPTIM_ADAMW, 3));
  ZT_CHECK(run_steps(dir, ZRT_OPTIM_LION, 2));

  /* missing path */
  zrt_offload_pipe *p = make_pipe("/nonexistent/zrt_swap");
  zrt_status st = zrt_offload_pipe_nvme_register(p, N, 2, m0, NULL, NULL);
  printf("missing path: %s\n", zrt_last_error());
  ZT_CHECK(st == ZRT_ERR_CONFIG);
  ZT_CONTAINS(zrt_last_error(), "nvme_path '/nonexistent/zrt_swap' does not exist");
  st = zrt_offload_pipe_step(p, &(zrt_optim_hparams){.type = ZRT_OPTIM_ADAMW}, NULL, NULL, NULL, g,
                             ZRT_F32, NULL, ZRT_BF16, N);
  ZT_CONTAINS(zrt_last_error(), "call zrt_offload_pipe_nvme_register first");
  zrt_offload_pipe_destroy(p);

  /* short read: truncate the master file */
  p = make_pipe(dir);
  ZT_OK(zrt_offload_pipe_nvme_register(p, N, 2, m0, NULL, NULL));
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[1200] = "";
  while (d && (e = readdir(d)))
    if (strstr(e->d_name, "master")) snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
  if (d) closedir(d);
  ZT_CHECK(path[0] && truncate(path, 4096) == 0);
  zrt_optim_hparams h = hparams(ZRT_OPTIM_ADAMW);
  h.step = 1;
  st = zrt_offload_pipe_step(p, &h, NULL, NULL, NULL, g, ZRT_F32, NULL, ZRT_BF16, N);
  printf("truncated file: %s: %s\n", zrt_status_string(st), zrt_last_error());
  ZT_CHECK(st == ZRT_ERR_IO);
  ZT_CONTAINS(zrt_last_error(), "short read");
  ZT_CONTAINS(zrt_last_error(), "master");
  zrt_offload_pipe_destroy(p);

  char buf[8192];
  int rc = zt_in_child(full_disk_child, dir, buf, sizeof buf);
  printf("full disk (RLIMIT_FSIZE): rc %d, %s", rc, buf);
  ZT_CHECK(rc == 0);
  ZT_CONTAINS(buf, "File too large");
  ZT_CONTAINS(buf, "kept intact");

  /* tmpfs gained O_DIRECT in Linux 6.6; only older kernels reach the
   * fallback, so probe first and check the log only where it must appear */
  int probe = open("/dev/shm/zrt_nvme_probe", O_RDWR | O_CREAT | O_DIRECT, 0600);
  int tmpfs_direct = probe >= 0;
  if (probe >= 0) close(probe);
  unlink("/dev/shm/zrt_nvme_probe");
  rc = zt_in_child(tmpfs_child, NULL, buf, sizeof buf);
  printf("tmpfs (O_DIRECT %s here): rc %d, log: %s\n",
         tmpfs_direct ? "supported, fallback not reachable" : "refused", rc, buf);
  ZT_CHECK(rc == 0);
  if (!tmpfs_direct) ZT_CONTAINS(buf, "does not support O_DIRECT");

  /* planted names */
  zrt_nvme *nv = NULL;
  ZT_OK(zrt_nvme_create_named(dir, "plant", 1024, 1, 1, &nv));
  int id = -1;
  char want[64], host[9];
  zrt_safe_host_tag(host);
  snprintf(want, sizeof want, "plant_%d.%s_", (int)getpid(), host);
  d = opendir(dir);
  while (d && (e = readdir(d)))
    if (!strncmp(e->d_name, want, strlen(want))) id = atoi(e->d_name + strlen(want));
  if (d) closedir(d);
  ZT_CHECK(id >= 0);
  zrt_nvme_destroy(nv);
  nv = NULL;
  char victim[] = "/tmp/zrt_nvme_victim_XXXXXX";
  int vfd = mkstemp(victim);
  ZT_CHECK(vfd >= 0 && write(vfd, "precious", 8) == 8);
  close(vfd);
  char link[1200];
  snprintf(link, sizeof link, "%s/plant_%d.%s_%d_master.bin", dir, (int)getpid(), host, id + 1);
  ZT_CHECK(symlink(victim, link) == 0);
  st = zrt_nvme_create_named(dir, "plant", 1024, 1, 1, &nv);
  printf("planted link: %s\n", zrt_last_error());
  ZT_CHECK(st == ZRT_ERR_IO && nv == NULL);
  ZT_CONTAINS(zrt_last_error(), "a file or link of that name exists");
  struct stat vs;
  char vbuf[16] = "";
  vfd = open(victim, O_RDONLY);
  ZT_CHECK(vfd >= 0 && fstat(vfd, &vs) == 0 && vs.st_size == 8 && read(vfd, vbuf, 8) == 8);
  ZT_CHECK(!memcmp(vbuf, "precious", 8));
  close(vfd);
  unlink(link);
  unlink(victim);
  ZT_CHECK(chmod(dir, 0777) == 0);
  st = zrt_nvme_create_named(dir, "plant", 1024, 1, 1, &nv);
  printf("world-writable nvme_path: %s\n", zrt_last_error());
  ZT_CHECK(st == ZRT_ERR_IO && nv == NULL);
  ZT_CONTAINS(zrt_last_error(), "writable by every user and not sticky");
  ZT_CHECK(chmod(dir, 01777) == 0);
  ZT_OK(zrt_nvme_create_named(dir, "plant", 1024, 1, 1, &nv));
  zrt_nvme_destroy(nv);
  ZT_CHECK(chmod(dir, 0700) == 0);

  rmdir(dir);
  zrt_hostpool_destroy(hpool);
  zrt_backend_destroy(be);
  ZT_DONE();
}
