/*
 * test_engine_hostmem.c — the program's host memory for asynchronous copies
 * (zrt_engine_host_alloc / zrt_engine_host_free), one rank, comm self, on
 * the cpu and the twin backends in turn:
 *  - misuse: NULL engine or output, 0 bytes, a bad category, a call before
 *    build, an allocation the host refuses (1 EiB; SIZE_MAX, which cannot be
 *    rounded to pages) and frees of what host_alloc did not give (a stack
 *    address, a zrt_engine_alloc block, a block freed already): each fails
 *    with its status and a message naming the call and what to do, and
 *    changes nothing; a free of NULL is ZRT_OK;
 *  - accounting: page-aligned blocks of whole pages, counted (rounded) under
 *    their category in zrt_engine_memory(ZRT_MEM_HOST_PINNED), current back
 *    to 0 after the frees, the peak kept;
 *  - registration (twin): a kernel operand may be registered host memory,
 *    not pageable memory (the twin's rule), so a convert reading the block
 *    is accepted while it lives and refused once it was freed;
 *  - copies: an H2D from the block is no host wait on the twin, and the copy
 *    reads the block when it runs: behind a 50 ms host function the host's
 *    rewrite right after zrt_engine_memcpy (the contract's "too early")
 *    kills the process with the twin's copy guard message (in a child), and
 *    with ZRT_TWIN_COPY_GUARD=0 is what arrives, while after a host wait (a
 *    D2H into pageable memory) the rewrite no longer reaches the copy; a
 *    pageable source is captured at the call; on cpu every copy is done on
 *    return. A D2H into the block is no host wait on the twin and its bytes
 *    are there after zrt_engine_synchronize;
 *  - free and destroy with a copy from the block still queued: both wait for
 *    it (the twin dies when a queued copy's registered source is
 *    unregistered under it);
 *  - the shared pool: with offload_optimizer cpu the blocks come from the
 *    offload's host pool, pinned (its extents registered) or not (the block
 *    registered by itself), and are counted with the offloaded state.
 */
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "zt_child.h"
#include "zt_engine.h"
#include "ztest.h"

#define NTOK 1000 /* ints: under one page */

#define EXPECT(call, code, text)                                                                   \
  do {                                                                                             \
    ZT_CHECK((call) == (code));                                                                    \
    ZT_CONTAINS(zrt_last_error(), text);                                                           \
  } while (0)

static size_t page(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* offload: NULL, "pinned" or "pageable" (offload_optimizer cpu, stage 2) */
static zrt_engine *engine(const char *backend, const char *offload, int build) {
  zrt_config *cfg;
  ZT_OK(zrt_config_create(&cfg));
  ZT_OK(zrt_config_set(cfg, "zrt.backend", backend, "test"));
  ZT_OK(zrt_config_set(cfg, "zrt.pin_memory_fallback", "true", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.reduce_bucket_size", "1000", "test"));
  if (offload) {
    ZT_OK(zrt_config_set(cfg, "zero_optimization.stage", "2", "test"));
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_optimizer.device", "cpu", "test"));
    ZT_OK(zrt_config_set(cfg, "zero_optimization.offload_optimizer.pin_memory",
                         strcmp(offload, "pinned") ? "false" : "true", "test"));
  }
  zrt_engine *eng;
  ZT_OK(zrt_engine_create(cfg, &eng));
  zrt_config_destroy(cfg);
  int mid, pid;
  ZT_OK(zrt_module_add(eng, "m", &mid));
  int64_t shape[1] = {64};
  zrt_init init = {ZRT_INIT_ZEROS, 0};
  ZT_OK(zrt_param_add(eng, mid, "m.w", 1, shape, init, 0, &pid));
  if (build) ZT_OK(zrt_engine_build(eng));
  return eng;
}

static zrt_mem_stats host_stats(zrt_engine *eng) {
  zrt_mem_stats s;
  ZT_OK(zrt_engine_memory(eng, ZRT_MEM_HOST_PINNED, &s));
  return s;
}

static uint64_t host_waits(zrt_engine *eng) {
  return ZRT_BACKEND_COUNTER(zt_view(eng).backend, host_waits);
}

/* Keeps the engine's stream busy for the given milliseconds. */
static zrt_status sleep_fn(void *args) {
  int ms;
  memcpy(&ms, args, sizeof ms);
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  return ZRT_OK;
}

static void busy(zrt_engine *eng, int ms) {
  ZT_OK(zrt_engine_launch(eng, sleep_fn, &ms, sizeof ms));
}

static void misuse(const char *backend) {
  void *p = (void *)1;
  EXPECT(zrt_engine_host_alloc(NULL, 64, ZRT_MEM_OTHER, &p), ZRT_ERR_INVALID_ARG,
         "zrt_engine_host_alloc: NULL engine");
  ZT_CHECK(p == NULL);
  EXPECT(zrt_engine_host_free(NULL, &p), ZRT_ERR_INVALID_ARG, "zrt_engine_host_free: NULL engine");

  zrt_engine *eng = engine(backend, NULL, 0);
  p = (void *)1;
  EXPECT(zrt_engine_host_alloc(eng, 64, ZRT_MEM_OTHER, &p), ZRT_ERR_INVALID_ARG,
         "zrt_engine_host_alloc: call it after zrt_engine_build");
  ZT_CHECK(p == NULL);
  ZT_OK(zrt_engine_build(eng));
  EXPECT(zrt_engine_host_alloc(eng, 64, ZRT_MEM_OTHER, NULL), ZRT_ERR_INVALID_ARG,
         "zrt_engine_host_alloc: NULL output pointer (ptr)");
  EXPECT(zrt_engine_host_alloc(eng, 0, ZRT_MEM_OTHER, &p), ZRT_ERR_INVALID_ARG,
         "zrt_engine_host_alloc: 0 bytes requested");
  EXPECT(zrt_engine_host_alloc(eng, 64, ZRT_MEM_NCAT, &p), ZRT_ERR_INVALID_ARG,
         "category 7 is not a zrt_mem_category");
  EXPECT(zrt_engine_host_alloc(eng, 64, (zrt_mem_category)-1, &p), ZRT_ERR_INVALID_ARG,
         "category -1 is not a zrt_mem_category");
  EXPECT(zrt_engine_host_alloc(eng, SIZE_MAX, ZRT_MEM_OTHER, &p), ZRT_ERR_OOM,
         "do not fit the address space once rounded up to whole pages; ask for fewer bytes");
  p = (void *)1;
  ZT_CHECK(zrt_engine_host_alloc(eng, (size_t)1 << 60, ZRT_MEM_OTHER, &p) == ZRT_ERR_OOM);
  ZT_CONTAINS(zrt_last_error(), "zrt_engine_host_alloc: cannot allocate 1152921504606846976 "
                                "bytes of host memory for other");
  ZT_CONTAINS(zrt_last_error(), "ask for fewer bytes or free host memory");
  ZT_CONTAINS(zrt_last_error(), "host memory exhausted"); /* the pool's account */
  printf("%s: 1 EiB: %s\n", backend, zrt_last_error());
  ZT_CHECK(p == NULL);
  ZT_CHECK(host_stats(eng).current_total == 0); /* nothing counted */

  /* frees of what host_alloc did not give: errors, nothing freed */
  void *mine;
  ZT_OK(zrt_engine_host_alloc(eng, 64, ZRT_MEM_OTHER, &mine));
  int local = 0;
  EXPECT(zrt_engine_host_free(eng, &local), ZRT_ERR_INVALID_ARG,
         "not a block zrt_engine_host_alloc gave this engine (or it was freed already); nothing "
         "was freed");
  void *dev;
  ZT_OK(zrt_engine_alloc(eng, 256, ZRT_MEM_ACTIVATIONS, &dev));
  EXPECT(zrt_engine_host_free(eng, dev), ZRT_ERR_INVALID_ARG,
         "zrt_engine_free for zrt_engine_alloc");
  zrt_engine_free(eng, dev);
  EXPECT(zrt_engine_host_free(eng, (char *)mine + 8), ZRT_ERR_INVALID_ARG, "not a block");
  ZT_CHECK(host_stats(eng).current[ZRT_MEM_OTHER] == page()); /* still held */
  ZT_OK(zrt_engine_host_free(eng, NULL));
  ZT_OK(zrt_engine_host_free(eng, mine));
  EXPECT(zrt_engine_host_free(eng, mine), ZRT_ERR_INVALID_ARG, "or it was freed already");
  ZT_CHECK(host_stats(eng).current_total == 0);
  zrt_engine_destroy(eng);
}

/* A kernel (convert) may read the block: 1 when the backend accepts it as an
 * operand. The twin accepts only device memory and registered host memory;
 * the cpu everything. */
static int kernel_reads(zrt_engine *eng, const void *host, size_t bytes) {
  zrt_backend *b = zt_view(eng).backend;
  void *dev;
  ZT_OK(zrt_engine_alloc(eng, bytes, ZRT_MEM_ACTIVATIONS, &dev));
  zrt_status st = zrt_backend_convert(b, dev, ZRT_F32, host, ZRT_F32, bytes / 4, NULL);
  if (st != ZRT_OK) ZT_CONTAINS(zrt_last_error(), "pageable host memory");
  ZT_OK(zrt_engine_synchronize(eng));
  zrt_engine_free(eng, dev);
  return st == ZRT_OK;
}

static void accounting(const char *backend, const char *offload) {
  int twin = !strcmp(backend, "twin");
  zrt_engine *eng = engine(backend, offload, 1);
  zrt_mem_stats s0 = host_stats(eng);
  ZT_CHECK(offload ? s0.current_total > 0 : s0.current_total == 0);
  size_t pg = page();
  void *a, *b;
  ZT_OK(zrt_engine_host_alloc(eng, 100, ZRT_MEM_ACTIVATIONS, &a));
  ZT_OK(zrt_engine_host_alloc(eng, 3 * pg, ZRT_MEM_OTHER, &b));
  ZT_CHECK((uintptr_t)a % pg == 0 && (uintptr_t)b % pg == 0);
  memset(a, 1, pg); /* all of its page is the program's */
  memset(b, 2, 3 * pg);
  zrt_mem_stats s = host_stats(eng);
  ZT_CHECK(s.current[ZRT_MEM_ACTIVATIONS] == s0.current[ZRT_MEM_ACTIVATIONS] + pg);
  ZT_CHECK(s.current[ZRT_MEM_OTHER] == s0.current[ZRT_MEM_OTHER] + 3 * pg);
  ZT_CHECK(s.current_total == s0.current_total + 4 * pg);
  ZT_CHECK(s.peak_total >= s.current_total);
  printf("%s%s%s: host pool %zu bytes before, %zu with the blocks (page %zu)\n", backend,
         offload ? " offload " : "", offload ? offload : "", s0.current_total, s.current_total, pg);
  /* registered with the twin (a kernel may read it); the pinned offload
   * pool's pages are registered through its extents */
  if (twin) {
    ZT_CHECK(kernel_reads(eng, a, pg));
    ZT_CHECK(kernel_reads(eng, b, 3 * pg));
  }
  ZT_OK(zrt_engine_host_free(eng, b));
  if (twin && !(offload && !strcmp(offload, "pinned")))
    ZT_CHECK(!kernel_reads(eng, b, 3 * pg)); /* unregistered with its free */
  ZT_OK(zrt_engine_host_free(eng, a));
  s = host_stats(eng);
  ZT_CHECK(s.current_total == s0.current_total);
  ZT_CHECK(s.current[ZRT_MEM_OTHER] == s0.current[ZRT_MEM_OTHER]);
  ZT_CHECK(s.peak_total >= s0.current_total + 4 * pg);
  zrt_engine_destroy(eng);
}

/* H2D from a block behind a busy stream, then the host rewrites it at once:
 * too early. Returns 1 when the device got the rewrite (the copy ran late,
 * reading the block then), 0 for the original; on the twin with its copy
 * guard on (ZRT_TWIN_COPY_GUARD unset) the process dies instead. */
static int too_early(const char *backend) {
  int twin = !strcmp(backend, "twin");
  zrt_engine *eng = engine(backend, NULL, 1);
  size_t bytes = NTOK * sizeof(int);
  int *h, *d, back[NTOK];
  ZT_OK(zrt_engine_host_alloc(eng, bytes, ZRT_MEM_OTHER, (void **)&h));
  ZT_OK(zrt_engine_alloc(eng, bytes, ZRT_MEM_ACTIVATIONS, (void **)&d));
  for (int i = 0; i < NTOK; i++) h[i] = i;
  ZT_OK(zrt_engine_synchronize(eng));
  if (twin) busy(eng, 50);
  uint64_t hw = host_waits(eng);
  ZT_OK(zrt_engine_memcpy(eng, d, h, bytes, ZRT_COPY_H2D));
  if (twin) ZT_CHECK(host_waits(eng) == hw); /* no host wait */
  for (int i = 0; i < NTOK; i++) h[i] = -i - 1;
  ZT_OK(zrt_engine_memcpy(eng, back, d, bytes, ZRT_COPY_D2H)); /* pageable: a host wait */
  if (twin) ZT_CHECK(host_waits(eng) == hw + 1);
  int rewrite = 1, original = 1;
  for (int i = 0; i < NTOK; i++) {
    rewrite &= back[i] == -i - 1;
    original &= back[i] == i;
  }
  printf("%s: H2D from the block, rewritten right after the call: the device got the %s\n", backend,
         rewrite    ? "rewrite (the copy ran late)"
         : original ? "original"
                    : "a mix");
  ZT_CHECK(rewrite || original);
  zrt_engine_destroy(eng);
  return rewrite;
}

static int too_early_child(void *arg) {
  (void)arg;
  too_early("twin");
  return 3; /* lived */
}

static void copies(const char *backend) {
  int twin = !strcmp(backend, "twin");
  /* too early: on cpu the copy was done on return; on the twin the copy
   * guard catches the rewrite (in a child: it aborts), and without it the
   * copy reads the rewrite */
  if (!twin) {
    ZT_CHECK(too_early(backend) == 0);
  } else {
    char out[8192];
    int rc = zt_in_child(too_early_child, NULL, out, sizeof out);
    printf("twin, copy guard on: rc %d (100: killed)\n%s", rc, out);
    ZT_CHECK(rc == 100);
    ZT_CONTAINS(out, "reads 4000 bytes of registered host memory at ");
    ZT_CONTAINS(out, "changed after the copy was queued and before it ran");
    setenv("ZRT_TWIN_COPY_GUARD", "0", 1);
    ZT_CHECK(too_early(backend) == 1);
    unsetenv("ZRT_TWIN_COPY_GUARD");
  }

  zrt_engine *eng = engine(backend, NULL, 1);
  size_t bytes = NTOK * sizeof(int);
  int *h, *d, back[NTOK];
  uint64_t hw;
  ZT_OK(zrt_engine_host_alloc(eng, bytes, ZRT_MEM_OTHER, (void **)&h));
  ZT_OK(zrt_engine_alloc(eng, bytes, ZRT_MEM_ACTIVATIONS, (void **)&d));

  /* the contract: rewrite only after a host wait that covers the copy */
  for (int i = 0; i < NTOK; i++) h[i] = 7 * i;
  if (twin) busy(eng, 50);
  ZT_OK(zrt_engine_memcpy(eng, d, h, bytes, ZRT_COPY_H2D));
  ZT_OK(zrt_engine_memcpy(eng, back, d, bytes, ZRT_COPY_D2H)); /* the host wait */
  for (int i = 0; i < NTOK; i++) h[i] = -1;
  ZT_OK(zrt_engine_memcpy(eng, back, d, bytes, ZRT_COPY_D2H));
  int ok = 1;
  for (int i = 0; i < NTOK; i++) ok &= back[i] == 7 * i;
  ZT_CHECK(ok);

  /* a pageable source is taken at the call: a rewrite after it is safe */
  int *pageable = malloc(bytes);
  for (int i = 0; i < NTOK; i++) pageable[i] = 3 * i;
  if (twin) busy(eng, 50);
  hw = host_waits(eng);
  ZT_OK(zrt_engine_memcpy(eng, d, pageable, bytes, ZRT_COPY_H2D));
  if (twin) ZT_CHECK(host_waits(eng) == hw); /* no host wait on the twin either */
  for (int i = 0; i < NTOK; i++) pageable[i] = -1;
  ZT_OK(zrt_engine_memcpy(eng, back, d, bytes, ZRT_COPY_D2H));
  ok = 1;
  for (int i = 0; i < NTOK; i++) ok &= back[i] == 3 * i;
  ZT_CHECK(ok);
  free(pageable);

  /* D2H into the block: queued (no host wait on the twin), there after a
   * synchronize; before it, the old bytes (the copy guard's poison waits for
   * the launched function ahead of the copy, which may read the block) */
  for (int i = 0; i < NTOK; i++) h[i] = -2;
  if (twin) busy(eng, 50);
  hw = host_waits(eng);
  ZT_OK(zrt_engine_memcpy(eng, h, d, bytes, ZRT_COPY_D2H));
  if (twin) {
    ZT_CHECK(host_waits(eng) == hw);
    ZT_CHECK(__atomic_load_n(&h[NTOK - 1], __ATOMIC_ACQUIRE) == -2); /* not yet */
  }
  ZT_OK(zrt_engine_synchronize(eng));
  ok = 1;
  for (int i = 0; i < NTOK; i++) ok &= h[i] == 3 * i;
  ZT_CHECK(ok);

  /* a free with a copy from the block still queued waits for it (on the
   * twin, unregistering under the copy would abort the process) */
  if (twin) busy(eng, 50);
  ZT_OK(zrt_engine_memcpy(eng, d, h, bytes, ZRT_COPY_H2D));
  ZT_OK(zrt_engine_host_free(eng, h));
  ZT_CHECK(host_stats(eng).current_total == 0);
  /* (before the next allocation, which may get the same pages registered
   * again while a copy that did not wait is still queued) */
  ZT_OK(zrt_engine_synchronize(eng));

  /* and so does destroy, for the blocks the program still holds */
  ZT_OK(zrt_engine_host_alloc(eng, bytes, ZRT_MEM_OTHER, (void **)&h));
  for (int i = 0; i < NTOK; i++) h[i] = i;
  if (twin) busy(eng, 50);
  ZT_OK(zrt_engine_memcpy(eng, d, h, bytes, ZRT_COPY_H2D));
  zrt_engine_free(eng, d); /* stream-ordered: after the copy */
  zrt_engine_destroy(eng);
}

int main(void) {
  const char *backends[] = {"cpu", "twin"};
  for (int k = 0; k < 2; k++) {
    misuse(backends[k]);
    accounting(backends[k], NULL);
    accounting(backends[k], "pinned");
    accounting(backends[k], "pageable");
    copies(backends[k]);
  }
  ZT_DONE();
}
