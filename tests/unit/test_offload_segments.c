/*
 * test_offload_segments.c — the offload pipe's segmented NVMe step
 * (zrt_offload_pipe_nvme_step_segments), the engine's ZeRO-Infinity path.
 *
 * Reference: the cpu offload path the engine uses without NVMe, i.e. one
 * zrt_offload_pipe_step per segment on host arrays (tile 2048), with the
 * segment's own hyper-parameters. The NVMe pipe (tile 1024, so segments
 * are cut by tiles at offsets that are not multiples of 8) steps a file
 * set holding the segments at uneven offsets with gaps between them, and
 * half of the segments get weight_decay 0 (NO_DECAY). After 3 steps, for
 * every optimizer x grad dtype x param dtype: master, states and 16-bit
 * params equal the reference bitwise (tolerance 0), and every gap element
 * still holds its initial value. The whole check runs once per ISA path
 * this CPU has (child processes with $ZRT_CPU_ISA set, since the ISA is
 * chosen once per process). (The ISA contract allows the vector body and
 * the tail to differ by 2 ulp; the pipe keeps the per-segment body/tail
 * split so equality holds under that contract. Today's kernels measure 0
 * ulp, so a wrong split would not show here; a wrong hyper-parameter,
 * offset, tile or gap handling would.)
 * Last, in the best-ISA child: a disk that fills up during a step (emulated
 * with RLIMIT_FSIZE) fails the step with the disk-full message and the
 * files still hold the previous step, bitwise.
 * The swap directory is a mkdtemp under $ZRT_BUILD_DIR (a real disk, so
 * O_DIRECT is used) or $TMPDIR / /tmp; buffered fallback is fine too.
 * ZRT_TEST_BACKEND=twin runs the steps on the twin (ctest's
 * unit.test_offload_segments.twin_sync, with ZRT_TWIN_HOST_FN=sync and
 * jitter: the blocking copy thread's device copies of the segments'
 * gradients and parameters, each on its stream, which the engine's NVMe
 * runs never make with device gradients).
 */
#define _GNU_SOURCE
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dtype.h"
#include "offload.h"
#include "ztest.h"

extern char **environ;

#define NSEG 9

static uint64_t rng = 777;
static float frand(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((int64_t)(rng >> 11) - (1ll << 52)) / (float)(1ll << 52);
}

typedef struct seg_case {
  size_t off[NSEG], n[NSEG], total;
  int nodecay[NSEG];
} seg_case;

static void make_layout(seg_case *c) {
  /* odd sizes, gaps of 0..40, offsets not multiples of 8 */
  static const size_t sizes[NSEG] = {1500, 3, 2047, 131, 5003, 8, 999, 1024, 77};
  size_t at = 13;
  for (int i = 0; i < NSEG; i++) {
    c->off[i] = at;
    c->n[i] = sizes[i];
    c->nodecay[i] = i % 2;
    at += sizes[i] + (size_t)((i * 17) % 41);
  }
  c->total = at + 5;
}

static int one_case(zrt_backend *be, zrt_hostpool *hp, const char *dir, zrt_optim_hparams base,
                    zrt_dtype gdt, zrt_dtype pdt, double *maxdiff, int disk_full) {
  seg_case c;
  make_layout(&c);
  size_t gsz = zrt_dtype_size(gdt), psz = zrt_dtype_size(pdt), T = c.total;
  int nst = (base.type == ZRT_OPTIM_ADAM || base.type == ZRT_OPTIM_ADAMW) ? 2
            : (base.type == ZRT_OPTIM_SGD && base.momentum == 0.0f)       ? 0
                                                                          : 1;
  zrt_offload_opts ho = {.tile_elems = 2048};
  zrt_offload_opts no = {.tile_elems = 1024, .nvme = 1, .nvme_path = dir, .buffer_count = 3};
  zrt_offload_pipe *hpipe = NULL, *npipe = NULL;
  ZT_OK(zrt_offload_pipe_create(be, hp, &ho, &hpipe));
  ZT_OK(zrt_offload_pipe_create(be, hp, &no, &npipe));
  ZT_OK(zrt_offload_pipe_nvme_open(npipe, T, nst));
  float *m = malloc(T * 4), *s1 = calloc(T, 4), *s2 = calloc(T, 4), *init = malloc(T * 4);
  float *back = malloc(T * 4);
  void *gdev = NULL, *pdev_h = NULL, *pdev_n = NULL;
  ZT_OK(zrt_backend_alloc(be, T * gsz, ZRT_MEM_GRADS, &gdev));
  ZT_OK(zrt_backend_alloc(be, T * psz, ZRT_MEM_PARAMS16, &pdev_h));
  ZT_OK(zrt_backend_alloc(be, T * psz, ZRT_MEM_PARAMS16, &pdev_n));
  for (size_t i = 0; i < T; i++) m[i] = init[i] = frand();
  ZT_OK(zrt_offload_pipe_nvme_range(npipe, 0, 1, 0, T, m));
  zrt_optim_hparams nd = base;
  nd.weight_decay = 0;
  zrt_offload_segment segs[NSEG];
  void *gh = malloc(T * gsz);
  int fails = 0;
  for (int step = 1; step <= 3; step++) {
    base.step = nd.step = step;
    for (size_t i = 0; i < T; i++) zrt_store_f(gh, gdt, i, 3.0f * frand());
    ZT_OK(zrt_backend_memcpy(be, gdev, gh, T * gsz, ZRT_COPY_H2D, NULL));
    for (int i = 0; i < NSEG; i++) {
      const zrt_optim_hparams *h = c.nodecay[i] ? &nd : &base;
      size_t o = c.off[i];
      ZT_OK(zrt_offload_pipe_step(hpipe, h, m + o, nst >= 1 ? s1 + o : NULL,
                                  nst >= 2 ? s2 + o : NULL, (char *)gdev + o * gsz, gdt,
                                  (char *)pdev_h + o * psz, pdt, c.n[i]));
      segs[i] = (zrt_offload_segment){.file_off = o,
                                      .n = c.n[i],
                                      .grad_dev = (char *)gdev + o * gsz,
                                      .param16_dev = (char *)pdev_n + o * psz,
                                      .hp = c.nodecay[i] ? &nd : NULL};
    }
    if (disk_full && step == 3) {
      /* after two steps generation 0 is current and step 3 writes
       * generation 1 (offsets >= one region): a file size limit below that
       * fails every write of the step like a full disk */
      struct rlimit rl = {.rlim_cur = 1024, .rlim_max = RLIM_INFINITY};
      signal(SIGXFSZ, SIG_IGN);
      ZT_OK(zrt_offload_pipe_nvme_range(npipe, 0, 0, 0, T, init)); /* state after step 2 */
      setrlimit(RLIMIT_FSIZE, &rl);
      zrt_status st = zrt_offload_pipe_nvme_step_segments(npipe, &base, segs, NSEG, gdt, pdt);
      rl.rlim_cur = RLIM_INFINITY;
      setrlimit(RLIMIT_FSIZE, &rl);
      printf("disk full during a segmented step: status %d, %s\n", (int)st, zrt_last_error());
      ZT_CHECK(st == ZRT_ERR_IO);
      ZT_CONTAINS(zrt_last_error(), "last completed step is kept intact");
      ZT_OK(zrt_offload_pipe_nvme_range(npipe, 0, 0, 0, T, back));
      int same = !memcmp(back, init, T * 4);
      printf("after the failed step the files hold step 2 bitwise: %s\n", same ? "yes" : "NO");
      ZT_CHECK(same);
      goto done;
    }
    ZT_OK(zrt_offload_pipe_nvme_step_segments(npipe, &base, segs, NSEG, gdt, pdt));
  }
  {
    void *ph = malloc(T * psz), *pn = malloc(T * psz);
    ZT_OK(zrt_backend_memcpy(be, ph, pdev_h, T * psz, ZRT_COPY_D2H, NULL));
    ZT_OK(zrt_backend_memcpy(be, pn, pdev_n, T * psz, ZRT_COPY_D2H, NULL));
    for (int a = 0; a <= nst; a++) {
      const float *want = a == 0 ? m : a == 1 ? s1 : s2;
      ZT_OK(zrt_offload_pipe_nvme_range(npipe, a, 0, 0, T, back));
      size_t k = 0;
      for (size_t i = 0; i < T; i++) {
        int inseg = k < NSEG && i >= c.off[k] && i < c.off[k] + c.n[k];
        if (k < NSEG && i + 1 == c.off[k] + c.n[k]) k++;
        /* gaps: master keeps its initial value, states stay zero */
        float w = inseg ? want[i] : (a == 0 ? init[i] : 0.0f);
        if (memcmp(&w, &back[i], 4)) {
          double d = fabs((double)w - back[i]);
          *maxdiff = isnan(d) ? INFINITY : fmax(*maxdiff, d);
          fails++;
        }
      }
    }
    for (int i = 0; i < NSEG; i++)
      if (memcmp((char *)ph + c.off[i] * psz, (char *)pn + c.off[i] * psz, c.n[i] * psz)) fails++;
    free(ph);
    free(pn);
  }
  if (fails) {
    fprintf(stderr,
            "FAIL segmented nvme step != per-segment pipe steps: type %d grad %s param %s: "
            "%d mismatches\n",
            (int)base.type, zrt_dtype_name(gdt), zrt_dtype_name(pdt), fails);
    zt_failures++;
  }
done:
  zrt_backend_free(be, gdev);
  zrt_backend_free(be, pdev_h);
  zrt_backend_free(be, pdev_n);
  free(m);
  free(s1);
  free(s2);
  free(init);
  free(back);
  free(gh);
  zrt_offload_pipe_destroy(hpipe);
  zrt_offload_pipe_destroy(npipe);
  return fails;
}

static int child(const char *dir) {
  zrt_backend *be = NULL;
  const char *bname = getenv("ZRT_TEST_BACKEND");
  ZT_OK(zrt_backend_create(bname && *bname ? bname : "cpu", 0, 0, &be));
  zrt_hostpool_opts ho = {.numa_node = -1, .pin = 1, .allow_fallback = 1};
  zrt_hostpool *hp = NULL;
  ZT_OK(zrt_hostpool_create(&ho, be, &hp));
  zrt_optim_hparams base = {.lr = 1e-2f,
                            .beta1 = 0.9f,
                            .beta2 = 0.999f,
                            .eps = 1e-8f,
                            .weight_decay = 0.1f,
                            .momentum = 0.9f,
                            .bias_correction = 1,
                            .grad_mul = 0.5f};
  double maxdiff = 0;
  int cases = 0;
  for (int t = 0; t < 5; t++) {
    zrt_optim_hparams h = base;
    h.type = t < 4 ? (zrt_optim_type)t : ZRT_OPTIM_SGD;
    if (t == 4) h.momentum = 0.0f;
    for (int g = 0; g < 3; g++)
      for (int p = 0; p < 3; p++) {
        one_case(be, hp, dir, h, (zrt_dtype)g, (zrt_dtype)p, &maxdiff, 0);
        cases++;
      }
  }
  const char *isa = getenv("ZRT_CPU_ISA");
  printf("ISA %s: %d cases, max |segmented nvme - per-segment pipe| %.3g (tolerance 0, bitwise)\n",
         isa ? isa : "?", cases, maxdiff);
  if (getenv("ZT_DISK_FULL")) {
    zrt_optim_hparams h = base;
    h.type = ZRT_OPTIM_ADAMW;
    one_case(be, hp, dir, h, ZRT_F32, ZRT_BF16, &maxdiff, 1);
  }
  zrt_mem_stats ms;
  zrt_pool_stats(zrt_hostpool_pool(hp), &ms);
  ZT_CHECK(ms.current_total == 0);
  zrt_hostpool_destroy(hp);
  zrt_backend_destroy(be);
  ZT_DONE();
}

int main(int argc, char **argv) {
  (void)argc;
  if (getenv("ZT_SEG_CHILD")) return child(getenv("ZT_SEG_CHILD"));
  const char *base = getenv("ZRT_BUILD_DIR");
  if (!base || access(base, W_OK)) base = getenv("TMPDIR");
  if (!base || access(base, W_OK)) base = "/tmp";
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/zrt_segtest_XXXXXX", base);
  ZT_CHECK(mkdtemp(dir) != NULL);
  printf("swap directory %s\n", dir);

  /* errors in this process (no ISA involved) */
  {
    zrt_backend *be = NULL;
    ZT_OK(zrt_backend_create("cpu", 0, 0, &be));
    zrt_hostpool_opts ho = {.numa_node = -1, .pin = 1, .allow_fallback = 1};
    zrt_hostpool *hp = NULL;
    ZT_OK(zrt_hostpool_create(&ho, be, &hp));
    zrt_offload_opts no = {.tile_elems = 1024, .nvme = 1, .nvme_path = dir};
    zrt_offload_pipe *p = NULL;
    ZT_OK(zrt_offload_pipe_create(be, hp, &no, &p));
    zrt_optim_hparams h = {.type = ZRT_OPTIM_ADAMW, .lr = 1e-3f};
    zrt_status st = zrt_offload_pipe_nvme_step_segments(p, &h, NULL, 0, ZRT_F32, ZRT_BF16);
    ZT_CHECK(st == ZRT_ERR_INVALID_ARG);
    ZT_CONTAINS(zrt_last_error(), "zrt_offload_pipe_nvme_open first");
    ZT_OK(zrt_offload_pipe_nvme_open(p, 4096, 1));
    float g[8] = {0};
    zrt_offload_segment s[2] = {{.file_off = 100, .n = 8, .grad_dev = g},
                                {.file_off = 104, .n = 8, .grad_dev = g}};
    zrt_optim_hparams sgd = {.type = ZRT_OPTIM_SGD, .lr = 1e-3f, .momentum = 0.9f};
    st = zrt_offload_pipe_nvme_step_segments(p, &sgd, s, 2, ZRT_F32, ZRT_BF16);
    ZT_CHECK(st == ZRT_ERR_INVALID_ARG);
    ZT_CONTAINS(zrt_last_error(), "overlaps the previous one");
    s[1].file_off = 200;
    st = zrt_offload_pipe_nvme_step_segments(p, &h, s, 2, ZRT_F32, ZRT_BF16);
    ZT_CHECK(st == ZRT_ERR_INVALID_ARG);
    ZT_CONTAINS(zrt_last_error(), "needs 2 state array(s) but the NVMe file set has 1");
    printf("disk bytes of a 4096-element, 2-array file set: %zu (want %d)\n",
           zrt_offload_pipe_nvme_disk_bytes(p), 2 * 2 * 4096 * 4);
    ZT_CHECK(zrt_offload_pipe_nvme_disk_bytes(p) == 2 * 2 * 4096 * 4);
    zrt_offload_pipe_destroy(p);
    zrt_hostpool_destroy(hp);
    zrt_backend_destroy(be);
  }

  static const char *isas[3] = {"scalar", "avx2", "avx512"};
  int best = (int)zrt_isa_best();
  for (int i = 0; i < 3; i++) {
    if (!zrt_isa_supported((zrt_isa)i)) {
      printf("ISA %s: not on this CPU, skipped\n", isas[i]);
      continue;
    }
    setenv("ZRT_CPU_ISA", isas[i], 1);
    setenv("ZT_SEG_CHILD", dir, 1);
    if (i == best)
      setenv("ZT_DISK_FULL", "1", 1);
    else
      unsetenv("ZT_DISK_FULL");
    pid_t pid;
    char *args[] = {argv[0], NULL};
    int rc = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ);
    ZT_CHECK(rc == 0);
    int ws = 0;
    if (rc == 0) waitpid(pid, &ws, 0);
    printf("ISA %s child: %s %d\n", isas[i], WIFEXITED(ws) ? "exit" : "signal",
           WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws));
    ZT_CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  }
  unsetenv("ZT_SEG_CHILD");
  ZT_CHECK(rmdir(dir) == 0); /* every swap file was removed by its pipe */
  ZT_DONE();
}
