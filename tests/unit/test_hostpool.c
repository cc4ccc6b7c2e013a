/*
 * test_hostpool.c — placement and pinning of the NUMA-pinned host pool,
 * checked from the kernel's side:
 *   - move_pages(2) in query mode reports the bound node for pages spread
 *     over an allocation;
 *   - VmLck in /proc/self/status grows by at least the bytes allocated;
 *   - the accounted pool reports the bytes under their categories;
 *   - a NUMA node that does not exist is a clear error (and, with
 *     allow_fallback, a logged fallback);
 *   - RLIMIT_MEMLOCK lowered in a forked child (after dropping
 *     CAP_IPC_LOCK, which would bypass the limit for root) gives the clear
 *     error naming the limit, ulimit -l and zrt.pin_memory_fallback; with
 *     fallback the allocation works unpinned and the fallback is logged;
 *   - through a fake backend whose host_register starts failing after a
 *     number of calls (what cudaHostRegister does when pinned memory runs
 *     out): every extent registered before the fallback is unregistered
 *     exactly once, by its base, and nothing never registered is;
 *   - through a fake backend whose host_register counts bytes: the bytes
 *     registered for a GPT-2 124M offload shard pattern (per module: fp32
 *     master, Adam m and v, fp32 grads; world sizes 1, 2, 4) stay within 5%
 *     of the bytes the pool counts, after building and after a free and
 *     re-allocation cycle (jemalloc's retained growth once pinned 2.4x).
 */
#define _GNU_SOURCE
#include <linux/capability.h>
#include <numa.h>
#include <numaif.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostpool.h"
#include "zt_child.h"
#include "ztest.h"

static long vmlck_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmLck:", 6)) kb = strtol(line + 6, NULL, 10);
  if (f) fclose(f);
  return kb;
}

static void test_placement(void) {
  zrt_hostpool_opts o = {.numa_node = -1, .pin = 1, .allow_fallback = 0, .capacity = 0};
  zrt_hostpool *hp = NULL;
  ZT_OK(zrt_hostpool_create(&o, NULL, &hp));
  int node = zrt_hostpool_node(hp);
  printf("auto node %d, pinned %d\n", node, zrt_hostpool_pinned(hp));
  ZT_CHECK(node >= 0);
  ZT_CHECK(zrt_hostpool_pinned(hp) == 1);
  long before = vmlck_kb();
  size_t bytes = 64u << 20;
  void *p = NULL, *q = NULL;
  ZT_OK(zrt_pool_alloc(zrt_hostpool_pool(hp), bytes, ZRT_MEM_MASTER32, &p));
  ZT_OK(zrt_pool_alloc(zrt_hostpool_pool(hp), 1000, ZRT_MEM_OPTIM_STATE, &q));
  ZT_CHECK(((uintptr_t)p & 63) == 0 && ((uintptr_t)q & 63) == 0);
  long after = vmlck_kb();
  printf("VmLck %ld kB -> %ld kB (grew %ld kB, allocated %zu kB)\n", before, after, after - before,
         bytes >> 10);
  ZT_CHECK(after - before >= (long)(bytes >> 10));

  /* query mode: nodes == NULL, status gets each page's node */
  enum { NP = 64 };
  void *pages[NP];
  int status[NP];
  long pg = sysconf(_SC_PAGESIZE);
  for (int i = 0; i < NP; i++)
    pages[i] = (char *)p + (size_t)i * (bytes / NP) / (size_t)pg * (size_t)pg;
  ZT_CHECK(move_pages(0, NP, pages, NULL, status, 0) == 0);
  int wrong = 0;
  for (int i = 0; i < NP; i++) wrong += status[i] != node;
  printf("move_pages: %d of %d sampled pages off node %d (first status %d)\n", wrong, NP, node,
         status[0]);
  ZT_CHECK(wrong == 0);

  zrt_mem_stats s;
  zrt_pool_stats(zrt_hostpool_pool(hp), &s);
  ZT_CHECK(s.current[ZRT_MEM_MASTER32] == bytes);
  ZT_CHECK(s.current[ZRT_MEM_OPTIM_STATE] == 1000);
  memset(p, 0x5a, bytes); /* the memory is usable */
  zrt_pool_free(zrt_hostpool_pool(hp), p);
  zrt_pool_free(zrt_hostpool_pool(hp), q);
  zrt_pool_stats(zrt_hostpool_pool(hp), &s);
  ZT_CHECK(s.current_total == 0 && s.peak_total >= bytes + 1000);
  zrt_hostpool_destroy(hp);
  long end = vmlck_kb();
  printf("VmLck after destroy %ld kB\n", end);
  ZT_CHECK(end <= before + 64); /* destroy unpins what the arena held */
  zrt_hostpool_destroy(NULL);
}

static void drop_ipc_lock(void) {
  struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct d[2];
  if (syscall(SYS_capget, &h, d) != 0) return;
  d[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  d[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
  syscall(SYS_capset, &h, d);
}

typedef struct {
  int fallback;
  rlim_t limit;
} memlock_arg;

/* exit 0: create + 16 MiB alloc worked pinned; 1: pinned=0 after alloc;
 * 2: create failed; 3: alloc failed. The zrt message goes to stderr. */
static int memlock_child(void *a) {
  memlock_arg *m = a;
  drop_ipc_lock();
  struct rlimit rl = {m->limit, m->limit};
  setrlimit(RLIMIT_MEMLOCK, &rl);
  zrt_hostpool_opts o = {.numa_node = -1, .pin = 1, .allow_fallback = m->fallback};
  zrt_hostpool *hp = NULL;
  if (zrt_hostpool_create(&o, NULL, &hp) != ZRT_OK) {
    fprintf(stderr, "MSG: %s\n", zrt_last_error());
    return 2;
  }
  void *p = NULL;
  zrt_status st = zrt_pool_alloc(zrt_hostpool_pool(hp), 16u << 20, ZRT_MEM_MASTER32, &p);
  if (st != ZRT_OK) {
    fprintf(stderr, "MSG: %s\n", zrt_last_error());
    zrt_hostpool_destroy(hp);
    return 3;
  }
  memset(p, 1, 16u << 20);
  int pinned = zrt_hostpool_pinned(hp);
  zrt_hostpool_destroy(hp);
  return pinned ? 0 : 1;
}

static void test_memlock(void) {
  char buf[8192];
  /* 8 MiB: the arena's metadata fits, the 16 MiB allocation does not */
  memlock_arg a = {.fallback = 0, .limit = 8u << 20};
  int rc = zt_in_child(memlock_child, &a, buf, sizeof buf);
  printf("RLIMIT_MEMLOCK 8 MiB, no fallback: rc %d, stderr: %s", rc, buf);
  ZT_CHECK(rc == 3);
  ZT_CONTAINS(buf, "cannot pin");
  ZT_CONTAINS(buf, "RLIMIT_MEMLOCK is 8.00 MiB");
  ZT_CONTAINS(buf, "ulimit -l");
  ZT_CONTAINS(buf, "zrt.pin_memory_fallback: true");

  a.limit = 0; /* nothing lockable: creation itself fails */
  rc = zt_in_child(memlock_child, &a, buf, sizeof buf);
  printf("RLIMIT_MEMLOCK 0, no fallback: rc %d, stderr: %s", rc, buf);
  ZT_CHECK(rc == 2);
  ZT_CONTAINS(buf, "RLIMIT_MEMLOCK");

  a.fallback = 1;
  a.limit = 8u << 20;
  rc = zt_in_child(memlock_child, &a, buf, sizeof buf);
  printf("RLIMIT_MEMLOCK 8 MiB, fallback: rc %d, stderr: %s", rc, buf);
  ZT_CHECK(rc == 1); /* worked, and says it is unpinned */
  ZT_CONTAINS(buf, "pin_memory_fallback is set");
  ZT_CONTAINS(buf, "unpinned");
}

static int badnode_child(void *a) {
  (void)a;
  zrt_hostpool_opts o = {.numa_node = numa_max_node() + 1, .pin = 1, .allow_fallback = 1};
  zrt_hostpool *hp = NULL;
  if (zrt_hostpool_create(&o, NULL, &hp) != ZRT_OK) return 2;
  void *p = NULL;
  if (zrt_pool_alloc(zrt_hostpool_pool(hp), 1u << 20, ZRT_MEM_MASTER32, &p) != ZRT_OK) return 3;
  int node = zrt_hostpool_node(hp);
  zrt_hostpool_destroy(hp);
  return node == -1 ? 0 : 1;
}

static void test_bad_node(void) {
  if (numa_available() < 0) {
    printf("no NUMA: bad-node test skipped\n");
    return;
  }
  int bad = numa_max_node() + 1;
  zrt_hostpool_opts o = {.numa_node = bad, .pin = 1, .allow_fallback = 0};
  zrt_hostpool *hp = NULL;
  zrt_status st = zrt_hostpool_create(&o, NULL, &hp);
  printf("numa_node %d: %s: %s\n", bad, zrt_status_string(st), zrt_last_error());
  ZT_CHECK(st == ZRT_ERR_CONFIG && hp == NULL);
  char want[64];
  snprintf(want, sizeof want, "NUMA node %d does not exist", bad);
  ZT_CONTAINS(zrt_last_error(), want);
  ZT_CONTAINS(zrt_last_error(), "zrt.pin_memory_fallback: true");
  char buf[4096];
  int rc = zt_in_child(badnode_child, NULL, buf, sizeof buf);
  printf("numa_node %d with fallback: rc %d, stderr: %s", bad, rc, buf);
  ZT_CHECK(rc == 0);
  ZT_CONTAINS(buf, "continuing with unbound pages");
}

/* ---- fake backend: host_register succeeds `budget` times, then fails */
typedef struct fake_pin {
  int budget, calls;
  void *live[4096];
  int nlive, bad_unregister, unregistered;
} fake_pin;

static zrt_status fake_register(void *ctx, void *ptr, size_t bytes) {
  fake_pin *f = ctx;
  (void)bytes;
  if (f->calls++ >= f->budget)
    return zrt_error(ZRT_ERR_CUDA, "fake host_register: out of pinnable memory");
  for (int i = 0; i < f->nlive; i++)
    if (f->live[i] == ptr) return zrt_error(ZRT_ERR_CUDA, "fake: already registered");
  if (f->nlive < 4096) f->live[f->nlive++] = ptr;
  return ZRT_OK;
}

static void fake_unregister(void *ctx, void *ptr) {
  fake_pin *f = ctx;
  for (int i = 0; i < f->nlive; i++)
    if (f->live[i] == ptr) {
      f->live[i] = f->live[--f->nlive];
      f->unregistered++;
      return;
    }
  f->bad_unregister++; /* never registered (or twice) */
}

static void test_register_fallback(void) {
  static zrt_backend_iface iface;
  memset(&iface, 0, sizeof iface);
  iface.name = "fake";
  iface.host_register = fake_register;
  iface.host_unregister = fake_unregister;
  fake_pin f;
  memset(&f, 0, sizeof f);
  f.budget = 3; /* the creation probe, then two arena extents */
  zrt_backend be;
  memset(&be, 0, sizeof be);
  be.iface = &iface;
  be.ctx = &f;
  be.device_id = -1;
  be.numa_node = -1;
  zrt_hostpool_opts o = {.numa_node = -1, .pin = 1, .allow_fallback = 1, .capacity = 0};
  zrt_hostpool *hp = NULL;
  ZT_OK(zrt_hostpool_create(&o, &be, &hp));
  void *p[8] = {0};
  for (int i = 0; i < 8; i++)
    ZT_OK(zrt_pool_alloc(zrt_hostpool_pool(hp), (size_t)8 << 20, ZRT_MEM_OPTIM_STATE, &p[i]));
  size_t reg = zrt_hostpool_registered(hp);
  printf("fake pinning: %d register calls, %d live, pool tracks %zu, pinned %d\n", f.calls, f.nlive,
         reg, zrt_hostpool_pinned(hp));
  ZT_CHECK(f.calls > f.budget);           /* the fallback happened */
  ZT_CHECK(zrt_hostpool_pinned(hp) == 0); /* and is reported */
  ZT_CHECK(reg == (size_t)f.nlive && reg >= 1);
  for (int i = 0; i < 8; i++) zrt_pool_free(zrt_hostpool_pool(hp), p[i]);
  zrt_hostpool_destroy(hp);
  printf("after destroy: %d still registered, %d unregistered, %d bad unregister calls\n", f.nlive,
         f.unregistered, f.bad_unregister);
  ZT_CHECK(f.nlive == 0);          /* extents from before the fallback were unregistered */
  ZT_CHECK(f.bad_unregister == 0); /* nothing unregistered that was not registered */
}

/* ---- fake backend: host_register records the bytes it pins */
typedef struct fake_bytes {
  void *ptr[4096];
  size_t len[4096];
  int n, bad;
  size_t live, peak;
} fake_bytes;

static zrt_status fb_register(void *ctx, void *ptr, size_t bytes) {
  fake_bytes *f = ctx;
  if (f->n == 4096) return zrt_error(ZRT_ERR_CUDA, "fake: too many registrations");
  for (int i = 0; i < f->n; i++) {
    char *a = f->ptr[i], *b = ptr;
    if (b < a + f->len[i] && a < b + bytes) {
      f->bad++; /* cudaHostRegister refuses overlapping ranges */
      return zrt_error(ZRT_ERR_CUDA, "fake: range overlaps a registered one");
    }
  }
  f->ptr[f->n] = ptr;
  f->len[f->n++] = bytes;
  f->live += bytes;
  if (f->live > f->peak) f->peak = f->live;
  return ZRT_OK;
}

static void fb_unregister(void *ctx, void *ptr) {
  fake_bytes *f = ctx;
  for (int i = 0; i < f->n; i++)
    if (f->ptr[i] == ptr) {
      f->live -= f->len[i];
      f->n--;
      f->ptr[i] = f->ptr[f->n];
      f->len[i] = f->len[f->n];
      return;
    }
  f->bad++; /* cudaHostUnregister takes only a registered base */
}

/* GPT-2 124M's modules (the example's layout: embeddings, 12 blocks, ln_f)
 * in elements, each padded to the world size as the engine's layout does. */
static size_t gpt2_module_elems(int m) {
  const size_t C = 768, V = 50257, T = 1024;
  if (m == 0) return (V + T) * C;
  if (m == 13) return 2 * C;
  return 2 * C + C * 3 * C + 3 * C + C * C + C + 2 * C + C * 4 * C + 4 * C + 4 * C * C + C;
}

static void test_register_ratio(void) {
  static zrt_backend_iface iface;
  memset(&iface, 0, sizeof iface);
  iface.name = "fake-bytes";
  iface.host_register = fb_register;
  iface.host_unregister = fb_unregister;
  static const int worlds[] = {1, 2, 4};
  for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++) {
    static fake_bytes f;
    memset(&f, 0, sizeof f);
    zrt_backend be;
    memset(&be, 0, sizeof be);
    be.iface = &iface;
    be.ctx = &f;
    be.device_id = -1;
    be.numa_node = -1;
    zrt_hostpool_opts o = {.numa_node = -1, .pin = 1, .allow_fallback = 0, .capacity = 0};
    zrt_hostpool *hp = NULL;
    ZT_OK(zrt_hostpool_create(&o, &be, &hp));
    zrt_pool *pool = zrt_hostpool_pool(hp);
    enum { NM = 14, NK = 4 };
    void *p[NM][NK] = {{0}};
    static const zrt_mem_category cat[NK] = {ZRT_MEM_MASTER32, ZRT_MEM_OPTIM_STATE,
                                             ZRT_MEM_OPTIM_STATE, ZRT_MEM_GRADS};
    for (int m = 0; m < NM; m++) {
      size_t part = (gpt2_module_elems(m) + (size_t)worlds[w] - 1) / (size_t)worlds[w];
      for (int k = 0; k < NK; k++) ZT_OK(zrt_pool_alloc(pool, part * 4, cat[k], &p[m][k]));
    }
    zrt_mem_stats s;
    zrt_pool_stats(pool, &s);
    double r1 = (double)f.live / (double)s.current_total;
    /* a re-build: the grads go and come back, then the states of one block */
    for (int m = 0; m < NM; m++) zrt_pool_free(pool, p[m][3]);
    for (int m = 0; m < NM; m++) {
      size_t part = (gpt2_module_elems(m) + (size_t)worlds[w] - 1) / (size_t)worlds[w];
      ZT_OK(zrt_pool_alloc(pool, part * 4, cat[3], &p[m][3]));
    }
    for (int k = 0; k < NK; k++) zrt_pool_free(pool, p[5][k]);
    for (int k = 0; k < NK; k++) {
      size_t part = (gpt2_module_elems(5) + (size_t)worlds[w] - 1) / (size_t)worlds[w];
      ZT_OK(zrt_pool_alloc(pool, part * 4, cat[k], &p[5][k]));
    }
    zrt_pool_stats(pool, &s);
    double r2 = (double)f.live / (double)s.current_total;
    double rp = (double)f.peak / (double)s.peak_total;
    char a[32], b[32];
    printf("world %d: pool counts %s, registered %s in %d ranges: ratio %.3f after build, "
           "%.3f after re-allocation, peak %.3f (limit 1.05)\n",
           worlds[w], zrt_format_size(s.current_total, a, sizeof a),
           zrt_format_size(f.live, b, sizeof b), f.n, r1, r2, rp);
    ZT_CHECK(r1 <= 1.05 && r2 <= 1.05 && rp <= 1.05);
    ZT_CHECK(f.bad == 0);
    /* small allocations through the arena, whose registered extents jemalloc
     * now splits and merges: usable, and never a piece unregistered alone */
    enum { NS = 3000 };
    static void *sp[NS];
    size_t sbytes = 0;
    unsigned seed = 12345u;
    for (int round = 0; round < 3; round++)
      for (int i = 0; i < NS; i++) {
        seed = seed * 1103515245u + 12345u;
        if (sp[i] && (seed >> 16) % 2 == 0) continue;
        zrt_pool_free(pool, sp[i]);
        size_t n = 1 + (seed >> 8) % (200u << 10);
        ZT_OK(zrt_pool_alloc(pool, n, ZRT_MEM_OTHER, &sp[i]));
        memset(sp[i], round + 1, n);
        sbytes += n;
      }
    printf("world %d: %zu bytes in small allocations, registered now %s, %d bad calls\n", worlds[w],
           sbytes, zrt_format_size(f.live, b, sizeof b), f.bad);
    ZT_CHECK(f.bad == 0);
    for (int i = 0; i < NS; i++) zrt_pool_free(pool, sp[i]), sp[i] = NULL;
    for (int m = 0; m < NM; m++)
      for (int k = 0; k < NK; k++) zrt_pool_free(pool, p[m][k]);
    zrt_hostpool_destroy(hp);
    printf("world %d: after destroy %zu bytes in %d ranges still registered, %d bad calls\n",
           worlds[w], f.live, f.n, f.bad);
    ZT_CHECK(f.n == 0 && f.live == 0 && f.bad == 0);
  }
}

int main(void) {
  test_register_ratio();
  test_placement();
  test_bad_node();
  test_memlock();
  test_register_fallback(); /* last: its logged fallback is once per process */
  ZT_DONE();
}
