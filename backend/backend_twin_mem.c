/*
 * backend_twin_mem.c — the twin's device memory: one mapping (the size of
 * device_memory_limit, or of physical memory, reserved without backing)
 * carved first-fit in 256-byte units, the guard that keeps host threads out
 * of it, and the host ranges registered with the backend (the pinned pool).
 *
 * The guard, best first (the choice is logged once):
 * - PKU: the mapping carries a protection key that only stream workers (and
 *   the OpenMP teams they start, which inherit their PKRU) enable; every
 *   other thread runs with access disabled (pkey_alloc with
 *   PKEY_DISABLE_ACCESS; Linux starts every thread with keys 1-15 off).
 *   OpenBLAS's own pool was created at load time without access, so the
 *   twin runs OpenBLAS single-threaded there (results do not depend on its
 *   thread count: it splits M and N, never K).
 * - mprotect (no PKU: most VMs): the memory is a memfd mapped twice. The
 *   program's view (the addresses allocations return) is PROT_NONE except
 *   while at least one launched host function runs (a count under guard_mu:
 *   PROT_READ|WRITE on 0 -> 1, PROT_NONE on 1 -> 0; jitter delays happen
 *   outside the window). Vtable ops (copies, kernels, the optimizer, the
 *   poisoning of new blocks) never open it: they run on the second, always
 *   writable view, their pointer operands translated at the op boundary.
 *   So a host thread's touch faults whenever no host function is running
 *   anywhere in the process; while one runs (the model's forward/backward on
 *   the compute stream) a host touch passes unseen, as do touches made from
 *   inside host functions themselves (which a GPU kernel may make).
 * - none (a second twin in the process: the signal handler serves one):
 *   only the operand checks at op boundaries.
 * A fault in the program's view dies in the SIGSEGV handler with a message
 * naming the address, the pool category of its block and the thread; any
 * other SIGSEGV goes to the handler installed before.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backend_twin.h"

/* Freed blocks at least this large give their pages back. */
#define ZRT_TWIN_RELEASE_BYTES ((size_t)1 << 20)

/* One twin per process holds the signal handler's view of the mapping. */
static _Atomic(twin_ctx *) twin_global;
static struct sigaction twin_old_segv;

static int twin_pkey_set(int key, unsigned rights) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 27))
  return pkey_set(key, rights);
#else
  (void)key;
  (void)rights;
  errno = ENOSYS;
  return -1;
#endif
}

static const char *twin_guard_name(zrt_twin_guard g) {
  switch (g) {
  case ZRT_TWIN_GUARD_PKU: return "PKU guard";
  case ZRT_TWIN_GUARD_MPROTECT: return "mprotect guard: no launched host function was running";
  default: return "no guard";
  }
}

static void twin_segv(int sig, siginfo_t *si, void *uctx) {
  twin_ctx *c = atomic_load(&twin_global);
  unsigned char *a = si ? (unsigned char *)si->si_addr : NULL;
  if (c && a >= c->base && a < c->base + c->size) {
    char name[32] = "?";
    pthread_getname_np(pthread_self(), name, sizeof name);
    void *blk = NULL;
    size_t bytes = 0;
    zrt_mem_category cat = ZRT_MEM_OTHER;
    int found = zrt_pool_find(c->b->pool, a, &blk, &bytes, &cat);
    char msg[640];
    int n =
        snprintf(msg, sizeof msg,
                 "zrt twin: host thread %ld (\"%s\") touched device memory at %p (%s%s, %s): "
                 "device memory is reachable only from a stream (zrt_engine_launch, "
                 "zrt_engine_memcpy); si_code %d%s\n",
                 (long)syscall(SYS_gettid), name, (void *)a,
                 found ? "a block of pool category " : "no live block",
                 found ? zrt_mem_category_name(cat) : "", twin_guard_name(c->guard), si->si_code,
#ifdef SEGV_PKUERR
                 si->si_code == SEGV_PKUERR ? " (SEGV_PKUERR)" : ""
#else
                 ""
#endif
        );
    if (n > 0) {
      ssize_t w = write(2, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1));
      (void)w;
    }
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
    return;
  }
  /* not ours: whatever handled SIGSEGV before, else the default action */
  if (twin_old_segv.sa_flags & SA_SIGINFO && twin_old_segv.sa_sigaction) {
    twin_old_segv.sa_sigaction(sig, si, uctx);
    return;
  }
  if (twin_old_segv.sa_handler != SIG_DFL && twin_old_segv.sa_handler != SIG_IGN &&
      twin_old_segv.sa_handler) {
    twin_old_segv.sa_handler(sig);
    return;
  }
  signal(SIGSEGV, SIG_DFL);
  raise(SIGSEGV);
}

/* Once per process: a second install would save twin_segv itself as the
 * handler before, and a foreign SIGSEGV would then loop. */
static void twin_install_handler(void) {
  static atomic_flag installed = ATOMIC_FLAG_INIT;
  if (atomic_flag_test_and_set(&installed)) return;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = twin_segv;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &twin_old_segv);
}

/* ------------------------------------------------------------ the guard */

void zrt_twin_mem_worker_start(twin_ctx *c) {
  if (c->guard == ZRT_TWIN_GUARD_PKU) twin_pkey_set(c->pkey, 0);
}

void zrt_twin_guard_open(twin_ctx *c) {
  if (c->guard != ZRT_TWIN_GUARD_MPROTECT) return;
  pthread_mutex_lock(&c->guard_mu);
  if (c->open_fns++ == 0 && mprotect(c->base, c->size, PROT_READ | PROT_WRITE) != 0)
    zrt_log(ZRT_LOG_ERROR, "twin: mprotect(RW) of the device view: %s", strerror(errno));
  pthread_mutex_unlock(&c->guard_mu);
}

void zrt_twin_guard_close(twin_ctx *c) {
  if (c->guard != ZRT_TWIN_GUARD_MPROTECT) return;
  pthread_mutex_lock(&c->guard_mu);
  if (--c->open_fns == 0 && mprotect(c->base, c->size, PROT_NONE) != 0)
    zrt_log(ZRT_LOG_ERROR, "twin: mprotect(NONE) of the device view: %s", strerror(errno));
  pthread_mutex_unlock(&c->guard_mu);
}

/* The mprotect guard's two views of one memfd; 0 on success. */
static int twin_map_twice(twin_ctx *c, char *why, size_t why_len) {
  c->memfd = (int)syscall(SYS_memfd_create, "zrt-twin-device", (unsigned)MFD_CLOEXEC);
  if (c->memfd < 0) {
    snprintf(why, why_len, "memfd_create: %s", strerror(errno));
    return -1;
  }
  if (ftruncate(c->memfd, (off_t)c->size) != 0) {
    snprintf(why, why_len, "ftruncate of the memfd: %s", strerror(errno));
    return -1;
  }
  void *v = mmap(NULL, c->size, PROT_NONE, MAP_SHARED | MAP_NORESERVE, c->memfd, 0);
  if (v == MAP_FAILED) {
    snprintf(why, why_len, "mmap of the device view: %s", strerror(errno));
    return -1;
  }
  c->base = v;
  v = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, c->memfd, 0);
  if (v == MAP_FAILED) {
    snprintf(why, why_len, "mmap of the workers' view: %s", strerror(errno));
    return -1;
  }
  c->alias = v;
  return 0;
}

static void twin_unmap(twin_ctx *c) {
  if (c->alias && c->alias != c->base) munmap(c->alias, c->size);
  if (c->base) munmap(c->base, c->size);
  if (c->memfd >= 0) close(c->memfd);
  c->alias = c->base = NULL;
  c->memfd = -1;
}

static zrt_status twin_map_plain(twin_ctx *c) {
  void *m = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (m == MAP_FAILED) {
    char sz[32];
    return zrt_error(ZRT_ERR_OOM, "twin: mmap of the device mapping (%s): %s",
                     zrt_format_size(c->size, sz, sizeof sz), strerror(errno));
  }
  c->base = c->alias = m;
  return ZRT_OK;
}

zrt_status zrt_twin_mem_init(twin_ctx *c, size_t device_memory_limit) {
  /* c->memfd, c->pkey (-1) and c->guard_mu are set up by the caller */
  c->guard = ZRT_TWIN_GUARD_NONE;
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  size_t phys = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : (size_t)1 << 34;
  c->size = ZRT_ALIGN_UP(device_memory_limit ? device_memory_limit + ((size_t)64 << 20) : phys,
                         (size_t)1 << 21);

  twin_ctx *none = NULL;
  if (!atomic_compare_exchange_strong(&twin_global, &none, c)) {
    zrt_log_once("twin.guard", ZRT_LOG_INFO,
                 "twin: another twin in this process holds the guard; host touches of this "
                 "one's device memory are not caught, only pointer kinds at op boundaries");
    ZRT_CHECK(twin_map_plain(c));
  } else {
    int key = pkey_alloc(0, PKEY_DISABLE_ACCESS);
    char why[256] = "";
    if (key >= 0) {
      ZRT_CHECK(twin_map_plain(c));
      if (pkey_mprotect(c->base, c->size, PROT_READ | PROT_WRITE, key) == 0) {
        c->pkey = key;
        c->guard = ZRT_TWIN_GUARD_PKU;
        zrt_backend_cpu_blas_threads(1);
      } else {
        snprintf(why, sizeof why, "pkey_mprotect: %s", strerror(errno));
        pkey_free(key);
        twin_unmap(c);
      }
    }
    if (c->guard == ZRT_TWIN_GUARD_NONE) {
      if (twin_map_twice(c, why + strlen(why), sizeof why - strlen(why)) == 0) {
        c->guard = ZRT_TWIN_GUARD_MPROTECT;
        zrt_log_once("twin.guard", ZRT_LOG_INFO,
                     "twin: %s; device memory is guarded by mprotect instead: host touches are "
                     "caught while no launched host function runs",
                     key >= 0 ? "the protection key could not be applied"
                              : "this CPU or kernel has no protection keys (PKU)");
      } else {
        twin_unmap(c);
        atomic_store(&twin_global, NULL);
        zrt_log_once("twin.guard", ZRT_LOG_WARN,
                     "twin: no guard for device memory (%s); host touches are not caught, only "
                     "pointer kinds at op boundaries",
                     why);
        ZRT_CHECK(twin_map_plain(c));
      }
    }
    if (c->guard != ZRT_TWIN_GUARD_NONE) twin_install_handler();
  }
  c->free_list = malloc(sizeof *c->free_list);
  if (!c->free_list) return zrt_error(ZRT_ERR_OOM, "twin: out of host memory");
  *c->free_list = (twin_block){0, c->size, NULL};
  return ZRT_OK;
}

void zrt_twin_mem_destroy(twin_ctx *c) {
  twin_ctx *me = c;
  atomic_compare_exchange_strong(&twin_global, &me, NULL);
  twin_unmap(c);
  if (c->pkey >= 0) pkey_free(c->pkey);
  while (c->free_list) {
    twin_block *n = c->free_list->next;
    free(c->free_list);
    c->free_list = n;
  }
  pthread_mutex_destroy(&c->guard_mu);
}

/* -------------------------------------------------------- pointer kinds */

int zrt_twin_is_dev(const twin_ctx *c, const void *p) {
  const unsigned char *q = p;
  return (q >= c->base && q < c->base + c->size) || (q >= c->alias && q < c->alias + c->size);
}

size_t zrt_twin_off(const twin_ctx *c, const void *p) {
  return (size_t)((const unsigned char *)zrt_twin_prog(c, p) - c->base);
}

int zrt_twin_is_reg(twin_ctx *c, const void *p, size_t bytes) {
  uintptr_t lo = (uintptr_t)p, hi = lo + bytes;
  int ok = 0;
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->nregs && !ok; i++) ok = lo >= c->regs[i].lo && hi <= c->regs[i].hi;
  pthread_mutex_unlock(&c->mu);
  return ok;
}

zrt_status zrt_twin_operand(twin_ctx *c, const char *op, const char *arg, const void *p,
                            size_t bytes) {
  if (!p || zrt_twin_is_dev(c, p) || zrt_twin_is_reg(c, p, bytes)) return ZRT_OK;
  return zrt_error(ZRT_ERR_INVALID_ARG,
                   "twin %s: %s (%p) is pageable host memory, which a GPU kernel cannot read; "
                   "pass device memory (zrt_engine_alloc) or copy it there first",
                   op, arg, p);
}

/* ------------------------------------------------------------ carving */

zrt_status zrt_twin_carve(twin_ctx *c, size_t bytes, void **out) {
  size_t need = ZRT_ALIGN_UP(bytes ? bytes : 1, (size_t)ZRT_TWIN_ALIGN);
  pthread_mutex_lock(&c->mu);
  twin_block **pp = &c->free_list;
  for (twin_block *f = *pp; f; pp = &f->next, f = *pp) {
    if (f->bytes < need) continue;
    *out = c->base + f->off;
    f->off += need;
    f->bytes -= need;
    if (!f->bytes) {
      *pp = f->next;
      free(f);
    }
    pthread_mutex_unlock(&c->mu);
    return ZRT_OK;
  }
  pthread_mutex_unlock(&c->mu);
  char sz[32], cap[32];
  return zrt_error(ZRT_ERR_OOM,
                   "twin device mapping (%s) has no free range of %s left (fragmented or full)",
                   zrt_format_size(c->size, cap, sizeof cap), zrt_format_size(need, sz, sizeof sz));
}

zrt_status zrt_twin_give_back(twin_ctx *c, size_t off, size_t bytes) {
  bytes = ZRT_ALIGN_UP(bytes ? bytes : 1, (size_t)ZRT_TWIN_ALIGN);
  if (bytes >= ZRT_TWIN_RELEASE_BYTES) {
    /* whole pages inside the block: their content is dead */
    size_t lo = ZRT_ALIGN_UP(off, (size_t)4096), hi = (off + bytes) & ~(size_t)4095;
    if (hi > lo) {
      if (c->memfd >= 0)
        (void)fallocate(c->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)lo,
                        (off_t)(hi - lo));
      else
        madvise(c->base + lo, hi - lo, MADV_DONTNEED);
    }
  }
  twin_block *n = malloc(sizeof *n);
  if (!n) return zrt_error(ZRT_ERR_OOM, "twin: out of host memory for the free list");
  n->off = off;
  n->bytes = bytes;
  pthread_mutex_lock(&c->mu);
  twin_block **pp = &c->free_list, *prev = NULL;
  while (*pp && (*pp)->off < off) {
    prev = *pp;
    pp = &(*pp)->next;
  }
  n->next = *pp;
  *pp = n;
  if (n->next && n->off + n->bytes == n->next->off) {
    twin_block *x = n->next;
    n->bytes += x->bytes;
    n->next = x->next;
    free(x);
  }
  if (prev && prev->off + prev->bytes == n->off) {
    prev->bytes += n->bytes;
    prev->next = n->next;
    free(n);
  }
  pthread_mutex_unlock(&c->mu);
  return ZRT_OK;
}

/* --------------------------------------------------- host registration */

zrt_status zrt_twin_host_register(void *ctx, void *ptr, size_t bytes) {
  twin_ctx *c = ctx;
  uintptr_t lo = (uintptr_t)ptr, hi = lo + bytes;
  if (zrt_twin_is_dev(c, ptr))
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "twin host_register(%p, %zu bytes): that is device memory, not host memory",
                     ptr, bytes);
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->nregs; i++)
    if (lo < c->regs[i].hi && hi > c->regs[i].lo) {
      pthread_mutex_unlock(&c->mu);
      return zrt_error(ZRT_ERR_INVALID_ARG,
                       "twin host_register(%p, %zu bytes): the range overlaps one already "
                       "registered (as cudaHostRegister, registering twice is an error)",
                       ptr, bytes);
    }
  if (c->nregs == ZRT_TWIN_MAX_REGS) {
    pthread_mutex_unlock(&c->mu);
    return zrt_error(ZRT_ERR_UNSUPPORTED, "twin: more than %d registered host ranges",
                     ZRT_TWIN_MAX_REGS);
  }
  c->regs[c->nregs++] = (twin_reg){lo, hi};
  pthread_mutex_unlock(&c->mu);
  return ZRT_OK;
}

void zrt_twin_host_unregister(void *ctx, void *ptr) {
  twin_ctx *c = ctx;
  pthread_mutex_lock(&c->mu);
  int found = 0;
  for (int i = 0; i < c->nregs; i++)
    if (c->regs[i].lo == (uintptr_t)ptr) {
      c->regs[i] = c->regs[--c->nregs];
      found = 1;
      break;
    }
  pthread_mutex_unlock(&c->mu);
  if (!found) zrt_log(ZRT_LOG_WARN, "twin host_unregister(%p): not registered", ptr);
}

int zrt_backend_twin_pku(void) {
  int key = pkey_alloc(0, 0);
  if (key < 0) return 0;
  pkey_free(key);
  return 1;
}
