/*
 * hostpool.c — the NUMA-pinned host pool (see hostpool.h).
 *
 * A private jemalloc arena (mallctl "arenas.create" with our extent hooks)
 * serves every allocation with mallocx(MALLOCX_ARENA | MALLOCX_TCACHE_NONE |
 * MALLOCX_ALIGN(64), or the page for whole pages); an accounted zrt_pool sits in front of it so
 * bytes show up per category. The extent alloc hook is where pages get their properties: mmap,
 * mbind(MPOL_BIND) to the chosen node before first touch, then pin (the backend's host_register —
 * cudaHostRegister — when it has one, else mlock, which also faults the pages in on that node). The
 * dalloc/destroy hooks undo both. mlock/munlock are issued as raw syscalls:
 * AddressSanitizer intercepts the libc wrappers and turns them into no-ops
 * that return 0 ("AddressSanitizer ignores mlock/mlockall/munlock/
 * munlockall"), which left the pool's pages neither locked nor faulted in
 * and RLIMIT_MEMLOCK never enforced in the sanitizer build. Locking our own
 * extents is safe under ASan (its concern is mlockall over the shadow).
 *
 * Bytes pinned = bytes counted. An allocation of ZRT_HP_DIRECT_MIN bytes or
 * more (every model-state shard) bypasses jemalloc: it gets its own mapping
 * of exactly its page-rounded size, bound and pinned like an extent, and
 * unpinned and unmapped at free. Through jemalloc it would be rounded up to
 * a size class (up to 25% more), and with cudaHostRegister its extents had
 * to stay whole (split refused), so every retained-growth attempt left a
 * pinned extent of the growth series behind: 2.3x the requested bytes for
 * GPT-2 124M's offload shards (test_hostpool's register-ratio case checks
 * <= 1.05). Smaller allocations go through the arena.
 *
 * Invariants: a host_register'd range is recorded (base, size, bytes still
 * held by jemalloc) and unregistered by its base exactly once, when all its
 * bytes came back (or at pool destroy). jemalloc may split an extent
 * anywhere and merge two pieces of the same registered range (merges across
 * ranges are refused, so a piece never spans two registrations); it may
 * hand a piece back (dalloc) only as a whole range, else the piece stays
 * retained and reusable. With mlock, extents split/merge freely since
 * munlock/munmap take any page range. Every extent is pinned and bound unless the pool has fallen
 * back (hp->pinned / hp->node say so, and the fallback was logged). Hooks cannot return a message,
 * so a failing hook records it in hp->hook_err and the raw allocator turns it into the zrt error.
 * The arena lives as long as the pool; destroy frees all live allocations (zrt_pool_destroy) and
 * then destroys the arena, which unpins and unmaps the retained extents.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <jemalloc/jemalloc.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hostpool.h"

/* Allocations of at least this many bytes get their own exactly-sized
 * mapping (see the top); below it the arena's size classes and retained
 * growth cost at most a few of its own growth steps. */
#define ZRT_HP_DIRECT_MIN ((size_t)256 << 10)

typedef struct zrt_hp_range {
  char *base;
  size_t size;
  size_t held; /* bytes of it jemalloc (or a direct allocation) still holds */
} zrt_hp_range;

struct zrt_hostpool {
  extent_hooks_t hooks; /* first: jemalloc hands this pointer back to the hooks */
  unsigned arena;
  int arena_ok;
  int node;   /* bound node, -1 = unbound */
  int pin;    /* pinning requested and still in force */
  int pinned; /* 1 = pages are pinned */
  int allow_fallback;
  zrt_backend *be;
  zrt_pool *pool;
  pthread_mutex_t mu;
  char hook_err[512];
  zrt_status hook_st;
  /* Ranges registered with the backend's host_register (under mu): each is
   * unregistered by its base whatever happened after (a later pin fallback
   * does not make the pool forget them). */
  zrt_hp_range *reg;
  size_t nreg, capreg;
};

/* Records a registered range; -1 when the record cannot grow. */
static int zrt_hp_reg_add(zrt_hostpool *hp, void *addr, size_t size) {
  int rc = 0;
  pthread_mutex_lock(&hp->mu);
  if (hp->nreg == hp->capreg) {
    size_t cap = hp->capreg ? 2 * hp->capreg : 64;
    zrt_hp_range *n = realloc(hp->reg, cap * sizeof *n);
    if (n) {
      hp->reg = n;
      hp->capreg = cap;
    }
  }
  if (hp->nreg < hp->capreg)
    hp->reg[hp->nreg++] = (zrt_hp_range){(char *)addr, size, size};
  else
    rc = -1;
  pthread_mutex_unlock(&hp->mu);
  return rc;
}

/* The registered range holding [addr, addr+size), or -1 (under mu). */
static long zrt_hp_reg_find(const zrt_hostpool *hp, const void *addr, size_t size) {
  const char *a = addr;
  for (size_t i = 0; i < hp->nreg; i++)
    if (a >= hp->reg[i].base && a + size <= hp->reg[i].base + hp->reg[i].size) return (long)i;
  return -1;
}

static zrt_hostpool *zrt_hp_of(extent_hooks_t *h) { return (zrt_hostpool *)(void *)h; }

/* The kernel's mlock/munlock, past any interposed wrapper (see the top). */
static int zrt_hp_mlock(const void *addr, size_t len) { return (int)syscall(SYS_mlock, addr, len); }
static int zrt_hp_munlock(const void *addr, size_t len) {
  return (int)syscall(SYS_munlock, addr, len);
}

static const char *zrt_hp_fallback_hint =
    "set zrt.pin_memory_fallback: true to continue with unpinned / unbound memory "
    "(slower host<->device copies)";

/* Text for a failed mlock: the limit, what is locked already, what to do. */
static void zrt_hp_mlock_msg(char *buf, size_t len, size_t bytes, int err) {
  struct rlimit rl;
  char want[32], lim[32];
  getrlimit(RLIMIT_MEMLOCK, &rl);
  zrt_format_size(bytes, want, sizeof want);
  if (rl.rlim_cur == RLIM_INFINITY)
    snprintf(lim, sizeof lim, "unlimited");
  else
    zrt_format_size((uint64_t)rl.rlim_cur, lim, sizeof lim);
  snprintf(buf, len,
           "host pool: cannot pin %s with mlock (%s): RLIMIT_MEMLOCK is %s — raise it "
           "(ulimit -l unlimited, or memlock in /etc/security/limits.conf, LimitMEMLOCK= for "
           "systemd, --ulimit memlock=-1 for docker) or %s",
           want, strerror(err), lim, zrt_hp_fallback_hint);
}

/* Binds and pins one fresh mapping. Returns 0, or -1 with hp->hook_err set
 * (the mapping is then left unpinned/unbound for the caller to unmap). */
static int zrt_hp_prepare(zrt_hostpool *hp, void *addr, size_t size) {
  if (hp->node >= 0) {
    unsigned long mask[16] = {0};
    mask[hp->node / (8 * sizeof(unsigned long))] |= 1ul << (hp->node % (8 * sizeof(unsigned long)));
    if (mbind(addr, size, MPOL_BIND, mask, sizeof mask * 8, MPOL_MF_STRICT) != 0) {
      int err = errno;
      pthread_mutex_lock(&hp->mu);
      if (hp->allow_fallback) {
        zrt_log_once("hostpool_bind_fallback", ZRT_LOG_WARN,
                     "host pool: mbind to NUMA node %d failed (%s); zrt.pin_memory_fallback is "
                     "set, continuing with unbound pages",
                     hp->node, strerror(err));
        hp->node = -1;
      } else {
        snprintf(hp->hook_err, sizeof hp->hook_err,
                 "host pool: cannot bind pages to NUMA node %d (mbind: %s) — pick an existing "
                 "node with numa_node (see numactl -H) or -1 for auto, or %s",
                 hp->node, strerror(err), zrt_hp_fallback_hint);
        hp->hook_st = ZRT_ERR_CONFIG;
        pthread_mutex_unlock(&hp->mu);
        return -1;
      }
      pthread_mutex_unlock(&hp->mu);
    }
  }
  if (!hp->pin) return 0;
  if (hp->be && hp->be->iface->host_register) {
    zrt_status st = hp->be->iface->host_register(hp->be->ctx, addr, size);
    if (st == ZRT_OK && zrt_hp_reg_add(hp, addr, size) == 0) return 0;
    if (st == ZRT_OK) { /* registered but cannot be remembered: undo it */
      hp->be->iface->host_unregister(hp->be->ctx, addr);
      st = zrt_error(ZRT_ERR_OOM, "out of host memory for the host pool's extent records");
    }
    pthread_mutex_lock(&hp->mu);
    if (hp->allow_fallback) {
      zrt_log_once("hostpool_pin_fallback", ZRT_LOG_WARN,
                   "host pool: %s host_register of %zu bytes failed (%s); "
                   "zrt.pin_memory_fallback is set, continuing with pageable memory",
                   hp->be->iface->name, size, zrt_last_error());
      hp->pin = 0;
      hp->pinned = 0;
      pthread_mutex_unlock(&hp->mu);
      return 0;
    }
    snprintf(hp->hook_err, sizeof hp->hook_err, "host pool: %s host_register of %zu bytes: %s — %s",
             hp->be->iface->name, size, zrt_last_error(), zrt_hp_fallback_hint);
    hp->hook_st = st;
    pthread_mutex_unlock(&hp->mu);
    return -1;
  }
  if (zrt_hp_mlock(addr, size) == 0) return 0;
  int err = errno;
  pthread_mutex_lock(&hp->mu);
  if (hp->allow_fallback) {
    char msg[512];
    zrt_hp_mlock_msg(msg, sizeof msg, size, err);
    zrt_log_once("hostpool_pin_fallback", ZRT_LOG_WARN,
                 "%s; zrt.pin_memory_fallback is set: continuing with pageable (unpinned) "
                 "memory from now on",
                 msg);
    hp->pin = 0;
    hp->pinned = 0;
    pthread_mutex_unlock(&hp->mu);
    return 0;
  }
  zrt_hp_mlock_msg(hp->hook_err, sizeof hp->hook_err, size, err);
  /* CONFIG, not OOM: the fix is a limit or a config key, and the pool keeps
   * a non-OOM message as is */
  hp->hook_st = ZRT_ERR_CONFIG;
  pthread_mutex_unlock(&hp->mu);
  return -1;
}

/* Undo pinning of one extent or piece. Pages pinned before a fallback are
 * still locked, so munlock is always attempted (harmless on unlocked pages),
 * and a range registered before a fallback is still unregistered (its record
 * says so, not the pool's current mode). A piece of a registered range
 * stays mapped until the whole range came back, then the range is
 * unregistered by its base and unmapped. */
static void zrt_hp_release(zrt_hostpool *hp, void *addr, size_t size) {
  if (hp->be && hp->be->iface->host_register && hp->be->iface->host_unregister) {
    pthread_mutex_lock(&hp->mu);
    long i = zrt_hp_reg_find(hp, addr, size);
    zrt_hp_range r = {0};
    if (i >= 0) {
      hp->reg[i].held -= size < hp->reg[i].held ? size : hp->reg[i].held;
      r = hp->reg[i];
      if (r.held == 0) hp->reg[i] = hp->reg[--hp->nreg];
    }
    pthread_mutex_unlock(&hp->mu);
    if (i < 0) {
      munmap(addr, size); /* never registered (after a fallback) */
    } else if (r.held == 0) {
      hp->be->iface->host_unregister(hp->be->ctx, r.base);
      munmap(r.base, r.size);
    }
    return;
  }
  zrt_hp_munlock(addr, size);
  munmap(addr, size);
}

/* A fresh mapping of size bytes (page multiple) aligned to alignment,
 * bound and pinned; NULL with hp->hook_err set. */
static void *zrt_hp_map(zrt_hostpool *hp, size_t size, size_t alignment) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (alignment < page) alignment = page;
  size_t span = size + alignment - page;
  char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    pthread_mutex_lock(&hp->mu);
    snprintf(hp->hook_err, sizeof hp->hook_err, "host pool: mmap of %zu bytes failed: %s", span,
             strerror(errno));
    hp->hook_st = ZRT_ERR_OOM;
    pthread_mutex_unlock(&hp->mu);
    return NULL;
  }
  char *addr = (char *)ZRT_ALIGN_UP((uintptr_t)raw, alignment);
  if (addr > raw) munmap(raw, (size_t)(addr - raw));
  if (raw + span > addr + size) munmap(addr + size, (size_t)(raw + span - (addr + size)));
  if (zrt_hp_prepare(hp, addr, size) != 0) {
    munmap(addr, size);
    return NULL;
  }
  return addr;
}

static void *zrt_hp_extent_alloc(extent_hooks_t *h, void *new_addr, size_t size, size_t alignment,
                                 bool *zero, bool *commit, unsigned arena_ind) {
  (void)arena_ind;
  zrt_hostpool *hp = zrt_hp_of(h);
  if (new_addr) return NULL; /* we never extend in place */
  char *addr = zrt_hp_map(hp, size, alignment);
  if (!addr) return NULL;
  *zero = true; /* fresh anonymous pages */
  *commit = true;
  return addr;
}

static bool zrt_hp_extent_dalloc(extent_hooks_t *h, void *addr, size_t size, bool committed,
                                 unsigned arena_ind) {
  (void)committed, (void)arena_ind;
  zrt_hostpool *hp = zrt_hp_of(h);
  if (hp->be && hp->be->iface->host_register) {
    /* a piece of a registered range cannot be unpinned alone: refuse, and
     * jemalloc keeps it retained for reuse (destroy returns it at the end) */
    pthread_mutex_lock(&hp->mu);
    long i = zrt_hp_reg_find(hp, addr, size);
    int piece = i >= 0 && (hp->reg[i].base != (char *)addr || hp->reg[i].held != size);
    pthread_mutex_unlock(&hp->mu);
    if (piece) return true;
  }
  zrt_hp_release(hp, addr, size);
  return false; /* success: jemalloc forgets the extent */
}

static void zrt_hp_extent_destroy(extent_hooks_t *h, void *addr, size_t size, bool committed,
                                  unsigned arena_ind) {
  (void)committed, (void)arena_ind;
  zrt_hp_release(zrt_hp_of(h), addr, size);
}

/* Splits are bookkeeping only (false = done): mlock/munlock and munmap take
 * any page range, and a piece of a registered range is accounted against
 * its range at release. A merge is refused (true) only when the two pieces
 * lie in different registered ranges (or one in none), since one extent
 * must never span two registrations. */
static bool zrt_hp_extent_split(extent_hooks_t *h, void *addr, size_t size, size_t size_a,
                                size_t size_b, bool committed, unsigned arena_ind) {
  (void)h, (void)addr, (void)size, (void)size_a, (void)size_b, (void)committed, (void)arena_ind;
  return false;
}

static bool zrt_hp_extent_merge(extent_hooks_t *h, void *addr_a, size_t size_a, void *addr_b,
                                size_t size_b, bool committed, unsigned arena_ind) {
  (void)committed, (void)arena_ind;
  zrt_hostpool *hp = zrt_hp_of(h);
  if (!(hp->be && hp->be->iface->host_register)) return false;
  pthread_mutex_lock(&hp->mu);
  long ia = zrt_hp_reg_find(hp, addr_a, size_a), ib = zrt_hp_reg_find(hp, addr_b, size_b);
  pthread_mutex_unlock(&hp->mu);
  return ia != ib;
}

static int zrt_hp_direct(size_t bytes) { return bytes >= ZRT_HP_DIRECT_MIN; }

static size_t zrt_hp_page_round(size_t bytes) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return (bytes + page - 1) / page * page;
}

static zrt_status zrt_hp_raw_alloc(void *ctx, size_t bytes, void **out) {
  zrt_hostpool *hp = ctx;
  pthread_mutex_lock(&hp->mu);
  hp->hook_err[0] = 0;
  hp->hook_st = ZRT_OK;
  pthread_mutex_unlock(&hp->mu);
  /* whole pages at a page boundary (jemalloc's cache-oblivious offset
   * would move a large block off it), so staging can be registered by
   * itself (zrt_hostpool_stage_alloc) */
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t align = bytes && bytes % page == 0 ? page : 64;
  void *p = zrt_hp_direct(bytes)
                ? zrt_hp_map(hp, zrt_hp_page_round(bytes), 0)
                : mallocx(bytes ? bytes : 1,
                          MALLOCX_ARENA(hp->arena) | MALLOCX_TCACHE_NONE | MALLOCX_ALIGN(align));
  if (p) {
    *out = p;
    return ZRT_OK;
  }
  pthread_mutex_lock(&hp->mu);
  zrt_status st = hp->hook_st != ZRT_OK ? hp->hook_st : ZRT_ERR_OOM;
  char msg[512];
  snprintf(msg, sizeof msg, "%s", hp->hook_err);
  pthread_mutex_unlock(&hp->mu);
  if (msg[0]) return zrt_error(st, "%s", msg);
  return zrt_error(ZRT_ERR_OOM, "host pool: out of host memory allocating %zu bytes", bytes);
}

/* The pool hands back the bytes it allocated, so the path is known again. */
static void zrt_hp_raw_free(void *ctx, void *ptr, size_t bytes) {
  if (zrt_hp_direct(bytes))
    zrt_hp_release(ctx, ptr, zrt_hp_page_round(bytes));
  else
    dallocx(ptr, MALLOCX_TCACHE_NONE);
}

/* The node of the rank's bound cores when they all sit on one node. */
static int zrt_hp_affinity_node(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  int node = -1;
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, &set)) continue;
    int n = numa_node_of_cpu(c);
    if (n < 0) continue;
    if (node < 0)
      node = n;
    else if (n != node)
      return -1;
  }
  return node;
}

static zrt_status zrt_hp_choose_node(const zrt_hostpool_opts *o, zrt_backend *be, int *node) {
  *node = -1;
  if (numa_available() < 0) {
    if (o->numa_node >= 0 && !o->allow_fallback)
      return zrt_error(ZRT_ERR_CONFIG,
                       "host pool: numa_node %d requested but this kernel/machine has no NUMA "
                       "support — set numa_node: -1 or %s",
                       o->numa_node, zrt_hp_fallback_hint);
    zrt_log_once("hostpool_nonuma", ZRT_LOG_INFO, "host pool: no NUMA support; pages are unbound");
    return ZRT_OK;
  }
  int maxn = numa_max_node();
  if (o->numa_node >= 0) {
    struct bitmask *mems = numa_get_mems_allowed();
    int ok = o->numa_node <= maxn && mems && numa_bitmask_isbitset(mems, (unsigned)o->numa_node);
    if (mems) numa_bitmask_free(mems);
    if (!ok) {
      if (!o->allow_fallback)
        return zrt_error(ZRT_ERR_CONFIG,
                         "host pool: NUMA node %d does not exist or has no memory this process "
                         "may use (nodes 0-%d; see numactl -H) — set numa_node to one of them, "
                         "-1 for auto, or %s",
                         o->numa_node, maxn, zrt_hp_fallback_hint);
      zrt_log_once("hostpool_node_fallback", ZRT_LOG_WARN,
                   "host pool: NUMA node %d does not exist (nodes 0-%d); "
                   "zrt.pin_memory_fallback is set, continuing with unbound pages",
                   o->numa_node, maxn);
      return ZRT_OK;
    }
    *node = o->numa_node;
  } else if (be && be->numa_node >= 0 && be->numa_node <= maxn) {
    *node = be->numa_node;
  } else {
    int n = zrt_hp_affinity_node();
    *node = n >= 0 ? n : 0;
  }
  return ZRT_OK;
}

zrt_status zrt_hostpool_create(const zrt_hostpool_opts *opts, zrt_backend *backend,
                               zrt_hostpool **out) {
  zrt_status st = ZRT_OK;
  if (!opts || !out) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_hostpool_create: NULL argument");
  *out = NULL;
  zrt_hostpool *hp = calloc(1, sizeof *hp);
  if (!hp) return zrt_error(ZRT_ERR_OOM, "zrt_hostpool_create: out of host memory");
  pthread_mutex_init(&hp->mu, NULL);
  hp->hooks.alloc = zrt_hp_extent_alloc;
  hp->hooks.dalloc = zrt_hp_extent_dalloc;
  hp->hooks.destroy = zrt_hp_extent_destroy;
  hp->hooks.split = zrt_hp_extent_split;
  hp->hooks.merge = zrt_hp_extent_merge;
  /* commit/decommit/purge absent: pages stay committed (and pinned) while
   * jemalloc holds them; they go back at dalloc/destroy */
  hp->be = backend;
  hp->pin = opts->pin;
  hp->pinned = opts->pin;
  hp->allow_fallback = opts->allow_fallback;
  ZRT_CHECK_GOTO(zrt_hp_choose_node(opts, backend, &hp->node), st, fail);

  /* Probe one page now so a node or pin problem shows at creation, not at
   * the first optimizer step. */
  {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *probe = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (probe == MAP_FAILED) {
      st = zrt_error(ZRT_ERR_OOM, "host pool: mmap of one page failed: %s", strerror(errno));
      goto fail;
    }
    int rc = zrt_hp_prepare(hp, probe, page);
    if (rc == 0)
      zrt_hp_release(hp, probe, page);
    else
      munmap(probe, page);
    if (rc != 0) {
      st = zrt_error(hp->hook_st, "%s", hp->hook_err);
      goto fail;
    }
  }

  extent_hooks_t *hooks = &hp->hooks;
  size_t sz = sizeof hp->arena;
  int rc = mallctl("arenas.create", &hp->arena, &sz, &hooks, sizeof hooks);
  if (rc != 0) {
    /* the arena's own metadata comes through our hooks too, so a pin
     * failure can surface here */
    if (hp->hook_err[0])
      st = zrt_error(hp->hook_st, "%s", hp->hook_err);
    else
      st =
          zrt_error(ZRT_ERR_INTERNAL, "host pool: jemalloc arenas.create failed: %s", strerror(rc));
    goto fail;
  }
  hp->arena_ok = 1;
  ZRT_CHECK_GOTO(zrt_pool_create(hp->pinned ? "host pinned" : "host", opts->capacity,
                                 zrt_hp_raw_alloc, zrt_hp_raw_free, hp, &hp->pool),
                 st, fail);
  zrt_pool_set_hint(hp->pool, "raise the host memory limit, or offload less (offload_optimizer "
                              "device: nvme keeps master/state on disk)");
  zrt_log(ZRT_LOG_DEBUG, "host pool: jemalloc arena %u, NUMA node %d, %s", hp->arena, hp->node,
          hp->pinned ? (backend && backend->iface->host_register ? "host_register" : "mlock")
                     : "unpinned");
  *out = hp;
  return ZRT_OK;
fail:
  zrt_hostpool_destroy(hp);
  return st;
}

void zrt_hostpool_destroy(zrt_hostpool *hp) {
  if (!hp) return;
  zrt_pool_destroy(hp->pool);
  if (hp->arena_ok) {
    char name[64];
    snprintf(name, sizeof name, "arena.%u.destroy", hp->arena);
    int rc = mallctl(name, NULL, NULL, NULL, 0);
    if (rc != 0)
      zrt_log(ZRT_LOG_WARN, "host pool: jemalloc %s failed (%s); its pages stay mapped", name,
              strerror(rc));
  }
  /* jemalloc keeps an arena's own metadata (its base) mapped past
   * arena.destroy, never through our hooks: unpin it here so no
   * registration outlives the pool (the pages stay mapped, as jemalloc
   * expects). */
  for (size_t i = 0; i < hp->nreg; i++)
    if (hp->be && hp->be->iface->host_unregister)
      hp->be->iface->host_unregister(hp->be->ctx, hp->reg[i].base);
  free(hp->reg);
  pthread_mutex_destroy(&hp->mu);
  free(hp);
}

zrt_status zrt_hostpool_stage_alloc(zrt_pool *pool, zrt_backend *be, int pinned, size_t bytes,
                                    zrt_mem_category cat, void **out, int *registered) {
  if (registered) *registered = 0;
  ZRT_CHECK(zrt_pool_alloc(pool, bytes, cat, out));
  long page = sysconf(_SC_PAGESIZE);
  if (pinned || !be || !be->iface || !be->iface->host_register || page <= 0) return ZRT_OK;
  if ((uintptr_t)*out % (uintptr_t)page || bytes % (size_t)page) {
    zrt_log(ZRT_LOG_DEBUG,
            "host staging of %zu bytes at %p not registered: not whole pages (copies into or "
            "out of it block the host)",
            bytes, *out);
    return ZRT_OK;
  }
  zrt_status st = zrt_backend_host_register(be, *out, bytes);
  if (st != ZRT_OK) {
    zrt_pool_free(pool, *out);
    *out = NULL;
    return st;
  }
  if (registered) *registered = 1;
  return ZRT_OK;
}

void zrt_hostpool_stage_free(zrt_pool *pool, zrt_backend *be, void *p, int registered) {
  if (!p) return;
  if (registered) zrt_backend_host_unregister(be, p);
  zrt_pool_free(pool, p);
}

zrt_pool *zrt_hostpool_pool(zrt_hostpool *hp) { return hp ? hp->pool : NULL; }
int zrt_hostpool_node(const zrt_hostpool *hp) { return hp ? hp->node : -1; }
int zrt_hostpool_pinned(const zrt_hostpool *hp) { return hp ? hp->pinned : 0; }
size_t zrt_hostpool_registered(zrt_hostpool *hp) {
  if (!hp) return 0;
  pthread_mutex_lock(&hp->mu);
  size_t n = hp->nreg;
  pthread_mutex_unlock(&hp->mu);
  return n;
}
