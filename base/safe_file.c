/*
 * safe_file.c — symlink-, FIFO- and race-safe opening of what zrt writes and
 * reads (safe_file.h). The only state is none: every call works on the
 * descriptors it is given. Messages say what the path turned out to be and
 * what the user can do about it.
 */
#define _GNU_SOURCE
#include "safe_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void zrt_safe_join(char *buf, size_t len, const char *dir, const char *name) {
  if (dir && dir[0])
    snprintf(buf, len, "%s/%s", dir, name);
  else
    snprintf(buf, len, "%s", name);
}

zrt_status zrt_safe_dir_check(int dfd, const char *path, const char *what) {
  struct stat sb;
  if (fstat(dfd, &sb) != 0)
    return zrt_error(ZRT_ERR_IO, "cannot stat %s '%s': %s", what, path, strerror(errno));
  if (!S_ISDIR(sb.st_mode)) return zrt_error(ZRT_ERR_IO, "%s '%s' is not a directory", what, path);
  if ((sb.st_mode & S_IWOTH) && !(sb.st_mode & S_ISVTX))
    return zrt_error(ZRT_ERR_IO,
                     "%s '%s' is writable by every user and not sticky (mode %04o): anyone could "
                     "replace the files zrt writes there; use a directory of your own, or make "
                     "it sticky with 'chmod +t' (as /tmp is)",
                     what, path, (unsigned)(sb.st_mode & 07777));
  return ZRT_OK;
}

/* After an O_NOFOLLOW open of a symlink failed: whose link is it? */
static zrt_status zrt_safe_dir_link(int parent, const char *shown, const char *name,
                                    zrt_dir_policy policy, const char *what, int *dfd) {
  struct stat lb;
  if (fstatat(parent, name, &lb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISLNK(lb.st_mode))
    return zrt_error(ZRT_ERR_IO, "cannot open %s '%s': %s", what, shown, strerror(ELOOP));
  if (policy == ZRT_DIR_OWN)
    return zrt_error(ZRT_ERR_IO,
                     "%s '%s' is a symbolic link; zrt creates this directory itself and never "
                     "writes through a link there — remove the link (or save elsewhere)",
                     what, shown);
  if (lb.st_uid != geteuid() && lb.st_uid != 0)
    return zrt_error(ZRT_ERR_IO,
                     "%s '%s' is a symbolic link owned by uid %u, not by you or root; zrt does "
                     "not follow it — name the target directory itself",
                     what, shown, (unsigned)lb.st_uid);
  *dfd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (*dfd < 0)
    return zrt_error(ZRT_ERR_IO, "cannot open %s '%s' (a symbolic link): %s", what, shown,
                     errno == ENOTDIR ? "its target is not a directory" : strerror(errno));
  return ZRT_OK;
}

zrt_status zrt_safe_dir_openat(int parent, const char *parent_path, const char *name,
                               zrt_dir_policy policy, const char *what, int *dfd) {
  char shown[4400];
  zrt_safe_join(shown, sizeof shown, parent == AT_FDCWD ? NULL : parent_path, name);
  *dfd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  zrt_status st = ZRT_OK;
  if (*dfd < 0) {
    int e = errno;
    if (e == ELOOP || e == ENOTDIR) {
      struct stat lb;
      if (fstatat(parent, name, &lb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lb.st_mode)) {
        st = zrt_safe_dir_link(parent, shown, name, policy, what, dfd);
        if (st != ZRT_OK) return st;
      } else if (e == ENOTDIR) {
        return zrt_error(ZRT_ERR_IO, "%s '%s' exists and is not a directory", what, shown);
      }
    }
    if (*dfd < 0)
      return zrt_error(ZRT_ERR_IO, "cannot open %s '%s': %s", what, shown,
                       e == ENOENT ? "it does not exist" : strerror(e));
  }
  if (policy == ZRT_DIR_OWN) {
    struct stat sb;
    if (fstat(*dfd, &sb) == 0 && sb.st_uid != geteuid()) {
      st = zrt_error(ZRT_ERR_IO,
                     "%s '%s' belongs to uid %u, not to this user (uid %u): another user made it "
                     "before zrt did; remove it or save elsewhere",
                     what, shown, (unsigned)sb.st_uid, (unsigned)geteuid());
      close(*dfd);
      *dfd = -1;
      return st;
    }
  }
  st = zrt_safe_dir_check(*dfd, shown, what);
  if (st != ZRT_OK) {
    close(*dfd);
    *dfd = -1;
  }
  return st;
}

zrt_status zrt_safe_dir_open(const char *path, zrt_dir_policy policy, const char *what, int *dfd) {
  *dfd = -1;
  if (!path || !path[0]) return zrt_error(ZRT_ERR_INVALID_ARG, "empty %s path", what);
  /* strip trailing slashes: "dir/" would make O_NOFOLLOW follow a link */
  char buf[4096];
  size_t n = strlen(path);
  if (n >= sizeof buf) return zrt_error(ZRT_ERR_INVALID_ARG, "%s path too long", what);
  memcpy(buf, path, n + 1);
  while (n > 1 && buf[n - 1] == '/') buf[--n] = '\0';
  return zrt_safe_dir_openat(AT_FDCWD, NULL, buf, policy, what, dfd);
}

zrt_status zrt_safe_create(int dfd, const char *dir, const char *name, int flags, mode_t mode,
                           int *fd) {
  *fd = openat(dfd, name, O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | flags, mode);
  if (*fd >= 0) return ZRT_OK;
  int e = errno;
  char shown[4400];
  zrt_safe_join(shown, sizeof shown, dir, name);
  if (e == EEXIST) {
    struct stat lb;
    int islink = fstatat(dfd, name, &lb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lb.st_mode);
    return zrt_error(ZRT_ERR_IO,
                     "cannot create '%s': %s already exists there; zrt only creates new files "
                     "and never writes through an existing name — remove it",
                     shown, islink ? "a symbolic link" : "a file of that name");
  }
  return zrt_error(ZRT_ERR_IO, "cannot create '%s': %s", shown, strerror(e));
}

zrt_status zrt_safe_create_tmp(int dfd, const char *dir, const char *base, int flags, mode_t mode,
                               char *name, size_t len, int *fd) {
  for (int attempt = 0; attempt < 16; attempt++) {
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
      r = (uint32_t)(uintptr_t)&r ^ (uint32_t)attempt * 2654435761u;
    int k = snprintf(name, len, "%s.tmp.%ld.%08x", base, (long)getpid(), r);
    if (k < 0 || (size_t)k >= len)
      return zrt_error(ZRT_ERR_INVALID_ARG, "file name too long: '%s'", base);
    *fd = openat(dfd, name, O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | flags, mode);
    if (*fd >= 0) return ZRT_OK;
    if (errno != EEXIST) break;
  }
  return zrt_safe_create(dfd, dir, name, flags, mode, fd); /* says why */
}

int zrt_safe_is_tmp_of(const char *name, const char *base) {
  size_t n = strlen(base);
  return !strncmp(name, base, n) && !strncmp(name + n, ".tmp.", 5);
}

int zrt_safe_is_stale(int dfd, const char *name, long pid, struct stat *sb) {
  struct stat st;
  if (pid <= 0 || pid > INT_MAX || kill((pid_t)pid, 0) == 0 || errno != ESRCH) return 0;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
      st.st_uid != geteuid() || time(NULL) - st.st_mtime < ZRT_STALE_AGE_S)
    return 0;
  if (sb) *sb = st;
  return 1;
}

int zrt_safe_sweep(int dfd, long (*pid_of)(const char *name, void *arg),
                   void (*removed)(const char *name, long pid, long long bytes, void *arg),
                   void *arg) {
  int cfd = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
  DIR *d = cfd >= 0 ? fdopendir(cfd) : NULL;
  if (!d) {
    if (cfd >= 0) close(cfd);
    return 0;
  }
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    long pid = pid_of(e->d_name, arg);
    struct stat sb;
    if (pid <= 0 || !zrt_safe_is_stale(dfd, e->d_name, pid, &sb)) continue;
    if (unlinkat(dfd, e->d_name, 0) != 0) continue;
    n++;
    if (removed) removed(e->d_name, pid, (long long)sb.st_size, arg);
  }
  closedir(d);
  return n;
}

void zrt_safe_host_tag(char tag[9]) {
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const char *p = host; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
  snprintf(tag, 9, "%08x", h);
}

zrt_status zrt_safe_open_read(int dfd, const char *dir, const char *name, const char *what,
                              int *fd) {
  char shown[4400];
  zrt_safe_join(shown, sizeof shown, dfd >= 0 ? dir : NULL, name);
  int flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (dfd >= 0 ? O_NOFOLLOW : 0);
  *fd = openat(dfd >= 0 ? dfd : AT_FDCWD, name, flags);
  if (*fd < 0) {
    int e = errno;
    struct stat lb;
    if (dfd >= 0 && e == ELOOP && fstatat(dfd, name, &lb, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISLNK(lb.st_mode))
      return zrt_error(ZRT_ERR_IO,
                       "%s '%s' is a symbolic link; zrt wrote a regular file there and does not "
                       "follow links in its own directories — restore the file",
                       what, shown);
    if (e == ELOOP)
      return zrt_error(ZRT_ERR_IO, "%s '%s' cannot be opened: a loop of symbolic links", what,
                       shown);
    return zrt_error(ZRT_ERR_IO, "%s '%s' cannot be opened: %s", what, shown,
                     e == ENOENT ? "it does not exist" : strerror(e));
  }
  struct stat sb;
  if (fstat(*fd, &sb) != 0) {
    int e = errno;
    close(*fd);
    *fd = -1;
    return zrt_error(ZRT_ERR_IO, "cannot stat %s '%s': %s", what, shown, strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    const char *kind = S_ISDIR(sb.st_mode)    ? "a directory"
                       : S_ISFIFO(sb.st_mode) ? "a FIFO (named pipe)"
                       : S_ISSOCK(sb.st_mode) ? "a socket"
                       : S_ISCHR(sb.st_mode)  ? "a character device"
                       : S_ISBLK(sb.st_mode)  ? "a block device"
                                              : "not a regular file";
    close(*fd);
    *fd = -1;
    return zrt_error(ZRT_ERR_IO,
                     "%s '%s' is %s, not a regular file (zrt reads only regular files; put the "
                     "file itself at that path)",
                     what, shown, kind);
  }
  int fl = fcntl(*fd, F_GETFL);
  if (fl >= 0) fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK);
  return ZRT_OK;
}

FILE *zrt_safe_fopen_read(const char *path, const char *what) {
  int fd = -1;
  if (!path || !path[0]) {
    zrt_error(ZRT_ERR_INVALID_ARG, "empty %s path", what);
    return NULL;
  }
  if (zrt_safe_open_read(-1, NULL, path, what, &fd) != ZRT_OK) return NULL;
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    int e = errno;
    close(fd);
    zrt_error(ZRT_ERR_IO, "cannot read %s '%s': %s", what, path, strerror(e));
  }
  return f;
}

zrt_status zrt_file_open_read(const char *path, const char *what, int *fd) {
  if (!fd) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_file_open_read: NULL fd");
  *fd = -1;
  if (!what) what = "file";
  if (!path || !path[0]) return zrt_error(ZRT_ERR_INVALID_ARG, "empty %s path", what);
  return zrt_safe_open_read(-1, NULL, path, what, fd);
}
