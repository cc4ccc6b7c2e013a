/*
 * checkpoint_io.c — CRC32C and the durable-file helpers (checkpoint_io.h).
 *
 * CRC32C is the table-driven slicing-by-8 form of the reflected Castagnoli
 * polynomial; the tables are built once at load time — the only
 * process-wide state here besides the cached ZRT_CKPT_SLOW_US value.
 * Invariant of the writer: w->fd >= 0 exactly while a temporary file is
 * open and owned by the writer, w->dfd >= 0 while it holds its directory
 * (the temporary is created there with O_EXCL|O_NOFOLLOW under an
 * unpredictable name, safe_file.h); commit and abort both leave both -1.
 */
#define _GNU_SOURCE
#include "checkpoint_io.h"

#include "env.h"
#include "safe_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint32_t zrt_crc_tab[8][256];

/* Built before main (a constructor) so that concurrent first calls never
 * race, without a pthread_once on every call. */
__attribute__((constructor)) static void zrt_crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    zrt_crc_tab[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++)
      zrt_crc_tab[t][i] =
          (zrt_crc_tab[t - 1][i] >> 8) ^ zrt_crc_tab[0][zrt_crc_tab[t - 1][i] & 0xff];
}

uint32_t zrt_crc32c(uint32_t crc, const void *data, size_t n) {
  const unsigned char *p = data;
  uint32_t c = ~crc;
  while (n && ((uintptr_t)p & 7)) {
    c = (c >> 8) ^ zrt_crc_tab[0][(c ^ *p++) & 0xff];
    n--;
  }
  while (n >= 8) {
    uint32_t lo, hi;
    memcpy(&lo, p, 4);
    memcpy(&hi, p + 4, 4);
    lo ^= c; /* little-endian hosts only (x86-64, aarch64) */
    c = zrt_crc_tab[7][lo & 0xff] ^ zrt_crc_tab[6][(lo >> 8) & 0xff] ^
        zrt_crc_tab[5][(lo >> 16) & 0xff] ^ zrt_crc_tab[4][lo >> 24] ^ zrt_crc_tab[3][hi & 0xff] ^
        zrt_crc_tab[2][(hi >> 8) & 0xff] ^ zrt_crc_tab[1][(hi >> 16) & 0xff] ^
        zrt_crc_tab[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ zrt_crc_tab[0][(c ^ *p++) & 0xff];
  return ~c;
}

int zrt_ckpt_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

int zrt_ckpt_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

zrt_status zrt_ckpt_mkdirs(const char *path) {
  char buf[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof buf)
    return zrt_error(ZRT_ERR_INVALID_ARG, "bad directory path '%s'", path);
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char c = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
      return zrt_error(ZRT_ERR_IO, "cannot create directory '%s': %s", buf, strerror(errno));
    buf[i] = c;
  }
  if (!zrt_ckpt_is_dir(path))
    return zrt_error(ZRT_ERR_IO, "'%s' exists and is not a directory", path);
  return ZRT_OK;
}

static void zrt_dirname(const char *path, char *out, size_t len) {
  const char *slash = strrchr(path, '/');
  if (!slash) {
    snprintf(out, len, ".");
  } else if (slash == path) {
    snprintf(out, len, "/");
  } else {
    snprintf(out, len, "%.*s", (int)(slash - path), path);
  }
}

void zrt_ckpt_maybe_slow(void) {
  static int cached = -1; /* cached env param (DESIGN.md rule 5) */
  if (cached < 0) {
    const char *s = zrt_env("ZRT_CKPT_SLOW_US");
    cached = s ? atoi(s) : 0;
    if (cached < 0) cached = 0;
  }
  if (cached > 0) usleep((useconds_t)cached);
}

/* Takes ownership of dfd (closed on failure). */
static zrt_status zrt_ckpt_writer_start(zrt_ckpt_writer *w, int dfd, const char *dir,
                                        const char *name) {
  w->dfd = dfd;
  int k = snprintf(w->path, sizeof w->path, "%s/%s", dir, name);
  if (k < 0 || (size_t)k >= sizeof w->path || strlen(name) >= sizeof w->name) {
    close(dfd);
    w->dfd = -1;
    return zrt_error(ZRT_ERR_INVALID_ARG, "path too long: '%s/%s'", dir, name);
  }
  snprintf(w->name, sizeof w->name, "%s", name);
  snprintf(w->dir, sizeof w->dir, "%s", dir);
  zrt_status st =
      zrt_safe_create_tmp(dfd, dir, name, O_WRONLY, 0644, w->tmpname, sizeof w->tmpname, &w->fd);
  if (st != ZRT_OK) {
    close(dfd);
    w->dfd = -1;
    w->fd = -1;
    return st;
  }
  snprintf(w->tmp, sizeof w->tmp, "%s/%s", dir, w->tmpname);
  return ZRT_OK;
}

zrt_status zrt_ckpt_writer_open(zrt_ckpt_writer *w, const char *path) {
  memset(w, 0, sizeof *w);
  w->fd = w->dfd = -1;
  if (strlen(path) >= sizeof w->path)
    return zrt_error(ZRT_ERR_INVALID_ARG, "path too long: '%s'", path);
  char dir[4096];
  zrt_dirname(path, dir, sizeof dir);
  const char *slash = strrchr(path, '/');
  const char *name = slash ? slash + 1 : path;
  if (!name[0]) return zrt_error(ZRT_ERR_INVALID_ARG, "'%s' names a directory, not a file", path);
  int dfd;
  ZRT_CHECK(zrt_safe_dir_open(dir, ZRT_DIR_NAMED, "output directory", &dfd));
  return zrt_ckpt_writer_start(w, dfd, dir, name);
}

zrt_status zrt_ckpt_writer_openat(zrt_ckpt_writer *w, int dfd, const char *dir, const char *name) {
  memset(w, 0, sizeof *w);
  w->fd = w->dfd = -1;
  int own = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
  if (own < 0)
    return zrt_error(ZRT_ERR_IO, "cannot duplicate the descriptor of '%s': %s", dir,
                     strerror(errno));
  return zrt_ckpt_writer_start(w, own, dir, name);
}

static zrt_status zrt_write_all(int fd, const char *what, const void *data, size_t n, int64_t off) {
  const char *p = data;
  while (n) {
    size_t chunk = n > (1u << 30) ? (1u << 30) : n;
    ssize_t k = off >= 0 ? pwrite(fd, p, chunk, off) : write(fd, p, chunk);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      return zrt_error(ZRT_ERR_IO, "write to '%s' failed: %s", what,
                       k < 0 ? strerror(errno) : "no progress (disk full?)");
    p += k;
    n -= (size_t)k;
    if (off >= 0) off += k;
  }
  return ZRT_OK;
}

zrt_status zrt_ckpt_writer_write(zrt_ckpt_writer *w, const void *data, size_t n) {
  if (w->fd < 0) return zrt_error(ZRT_ERR_INTERNAL, "checkpoint writer is not open");
  zrt_ckpt_maybe_slow();
  ZRT_CHECK(zrt_write_all(w->fd, w->tmp, data, n, -1));
  w->crc = zrt_crc32c(w->crc, data, n);
  w->bytes += n;
  return ZRT_OK;
}

zrt_status zrt_ckpt_writer_pwrite(zrt_ckpt_writer *w, const void *data, size_t n, uint64_t off) {
  if (w->fd < 0) return zrt_error(ZRT_ERR_INTERNAL, "checkpoint writer is not open");
  return zrt_write_all(w->fd, w->tmp, data, n, (int64_t)off);
}

zrt_status zrt_ckpt_writer_commit(zrt_ckpt_writer *w) {
  if (w->fd < 0) return zrt_error(ZRT_ERR_INTERNAL, "checkpoint writer is not open");
  zrt_ckpt_maybe_slow();
  if (fsync(w->fd) != 0) {
    zrt_status st = zrt_error(ZRT_ERR_IO, "fsync of '%s' failed: %s", w->tmp, strerror(errno));
    zrt_ckpt_writer_abort(w);
    return st;
  }
  if (close(w->fd) != 0) {
    w->fd = -1;
    zrt_status st = zrt_error(ZRT_ERR_IO, "close of '%s' failed: %s", w->tmp, strerror(errno));
    zrt_ckpt_writer_abort(w);
    return st;
  }
  w->fd = -1;
  /* renameat replaces a planted symlink at the final name, never its target */
  if (renameat(w->dfd, w->tmpname, w->dfd, w->name) != 0) {
    zrt_status st =
        zrt_error(ZRT_ERR_IO, "cannot rename '%s' to '%s': %s", w->tmp, w->path, strerror(errno));
    zrt_ckpt_writer_abort(w);
    return st;
  }
  w->tmpname[0] = '\0';
  int rc = fsync(w->dfd);
  int err = errno;
  close(w->dfd);
  w->dfd = -1;
  /* Some filesystems refuse fsync on directories (EINVAL). */
  if (rc != 0 && err != EINVAL)
    return zrt_error(ZRT_ERR_IO, "fsync of directory '%s' failed: %s", w->dir, strerror(err));
  return ZRT_OK;
}

void zrt_ckpt_writer_abort(zrt_ckpt_writer *w) {
  if (w->fd >= 0) close(w->fd);
  w->fd = -1;
  if (w->dfd >= 0) {
    if (w->tmpname[0]) unlinkat(w->dfd, w->tmpname, 0);
    close(w->dfd);
  }
  w->dfd = -1;
  w->tmpname[0] = '\0';
}

zrt_status zrt_ckpt_write_file_atomic(const char *path, const void *data, size_t n) {
  zrt_ckpt_writer w;
  ZRT_CHECK(zrt_ckpt_writer_open(&w, path));
  zrt_status st = zrt_ckpt_writer_write(&w, data, n);
  if (st != ZRT_OK) {
    zrt_ckpt_writer_abort(&w);
    return st;
  }
  return zrt_ckpt_writer_commit(&w);
}

zrt_status zrt_ckpt_write_fileat(int dfd, const char *dir, const char *name, const void *data,
                                 size_t n) {
  zrt_ckpt_writer w;
  ZRT_CHECK(zrt_ckpt_writer_openat(&w, dfd, dir, name));
  zrt_status st = zrt_ckpt_writer_write(&w, data, n);
  if (st != ZRT_OK) {
    zrt_ckpt_writer_abort(&w);
    return st;
  }
  return zrt_ckpt_writer_commit(&w);
}

zrt_status zrt_ckpt_read_file(const char *path, char **out, size_t *len) {
  return zrt_ckpt_read_fileat(-1, NULL, path, out, len);
}

zrt_status zrt_ckpt_read_fileat(int dfd, const char *dir, const char *name, char **out,
                                size_t *len) {
  *out = NULL;
  if (len) *len = 0;
  int fd;
  char path[4400];
  if (dfd >= 0)
    snprintf(path, sizeof path, "%s/%s", dir, name);
  else
    snprintf(path, sizeof path, "%s", name);
  ZRT_CHECK(zrt_safe_open_read(dfd, dir, name, "file", &fd));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return zrt_error(ZRT_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
  }
  size_t n = (size_t)st.st_size;
  char *buf = malloc(n + 1);
  if (!buf) {
    close(fd);
    return zrt_error(ZRT_ERR_OOM, "cannot allocate %zu bytes to read '%s'", n + 1, path);
  }
  zrt_status s = zrt_ckpt_pread_exact(fd, path, buf, n, 0);
  close(fd);
  if (s != ZRT_OK) {
    free(buf);
    return s;
  }
  buf[n] = '\0';
  *out = buf;
  if (len) *len = n;
  return ZRT_OK;
}

zrt_status zrt_ckpt_pread_exact(int fd, const char *path, void *buf, size_t n, uint64_t off) {
  char *p = buf;
  uint64_t at = off;
  while (n) {
    size_t chunk = n > (1u << 30) ? (1u << 30) : n;
    ssize_t k = pread(fd, p, chunk, (off_t)at);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0)
      return zrt_error(ZRT_ERR_IO, "read of '%s' at offset %llu failed: %s", path,
                       (unsigned long long)at, strerror(errno));
    if (k == 0) {
      struct stat st;
      long long size = fstat(fd, &st) == 0 ? (long long)st.st_size : -1;
      return zrt_error(ZRT_ERR_IO,
                       "'%s' is truncated: needed %zu more bytes at offset %llu but the file has "
                       "%lld bytes",
                       path, n, (unsigned long long)at, size);
    }
    p += k;
    at += (uint64_t)k;
    n -= (size_t)k;
  }
  return ZRT_OK;
}
