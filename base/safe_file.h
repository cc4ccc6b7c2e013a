/*
 * safe_file.h — how zrt opens the files and directories it writes and the
 * files it reads, so that a name planted by another user (a symlink, a
 * FIFO, a directory) can neither redirect a write nor block a read
 * (docs/security.md).
 *
 * Writing: every file is created new (O_CREAT|O_EXCL|O_NOFOLLOW) relative
 * to a directory descriptor; a temporary gets an unpredictable name. The
 * directory itself is opened O_DIRECTORY|O_NOFOLLOW: a directory zrt made
 * (step_<N>) must be a real directory owned by this user; a directory the
 * user named may be a symlink only when the link belongs to this user or
 * to root (the kernel's protected_symlinks rule). Either is refused when
 * others may write to it and it is not sticky (chmod +t), because then
 * anyone could swap the names zrt creates there.
 *
 * Reading: files are opened O_NONBLOCK (a FIFO never blocks the open) and
 * must be regular files; the error names what the path is instead (a
 * directory, a FIFO, a symlink loop, missing).
 *
 * Every function sets zrt_error with the path and what to do.
 */
#ifndef ZRT_SAFE_FILE_H
#define ZRT_SAFE_FILE_H

#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "internal.h"

typedef enum zrt_dir_policy {
  ZRT_DIR_NAMED = 0, /* a directory the user named (checkpoint root, nvme_path, output dir) */
  ZRT_DIR_OWN = 1,   /* a directory zrt created itself: never a symlink, owned by this user */
} zrt_dir_policy;

/* Opens directory `path` for *at() calls (O_RDONLY|O_DIRECTORY|O_CLOEXEC)
 * under `policy`; `what` names it in messages ("checkpoint directory").
 * *dfd is -1 on failure. */
zrt_status zrt_safe_dir_open(const char *path, zrt_dir_policy policy, const char *what, int *dfd);
/* The same for entry `name` of an open directory (parent_path for messages). */
zrt_status zrt_safe_dir_openat(int parent, const char *parent_path, const char *name,
                               zrt_dir_policy policy, const char *what, int *dfd);
/* Checks an open directory: refuses one writable by others unless sticky. */
zrt_status zrt_safe_dir_check(int dfd, const char *path, const char *what);

/* Creates file `name` in dfd: O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC | flags
 * (an access mode and e.g. O_DIRECT), mode. An existing name of any kind
 * is an error naming it. */
zrt_status zrt_safe_create(int dfd, const char *dir, const char *name, int flags, mode_t mode,
                           int *fd);
/* Creates a fresh temporary "<base>.tmp.<pid>.<random>" in dfd the same way;
 * its name goes to name[len]. */
zrt_status zrt_safe_create_tmp(int dfd, const char *dir, const char *base, int flags, mode_t mode,
                               char *name, size_t len, int *fd);
/* 1 when `name` is one of zrt's temporaries of `base` ("<base>.tmp.<...>"). */
int zrt_safe_is_tmp_of(const char *name, const char *base);

/* Opens an existing regular file for reading without blocking on a FIFO
 * (O_RDONLY|O_NONBLOCK|O_NOCTTY|O_CLOEXEC, then O_NONBLOCK cleared).
 * `what` names the file in messages ("config file", "checkpoint file").
 * With dfd >= 0, `name` is opened relative to it and never through a
 * symlink (dir is then only for messages). */
zrt_status zrt_safe_open_read(int dfd, const char *dir, const char *name, const char *what,
                              int *fd);

/* The same for a path named as given (dfd AT_FDCWD: a symlink the user
 * named is followed), as a stdio stream: NULL with zrt_error set. */
FILE *zrt_safe_fopen_read(const char *path, const char *what);
/* Leftovers of killed processes (a rank's /dev/shm segment or NVMe swap
 * file, a killed save's temporary). Removable only when it is certain
 * that nobody uses the name any more: */
#define ZRT_STALE_AGE_S 60 /* unmodified this long: past any handshake or save */
/* 1 when entry `name` of directory dfd, created by process `pid` of this
 * machine (the caller parses it from the name), is such a leftover: `pid`
 * no longer exists (kill(pid, 0) fails with ESRCH: a live process, one
 * that reused the pid, or another user's process keeps the name), the
 * entry is a regular file (never a link), owned by this user, and
 * unmodified for ZRT_STALE_AGE_S seconds. *sb (may be NULL) gets its
 * lstat. zrt_safe_sweep removes such entries. */
int zrt_safe_is_stale(int dfd, const char *name, long pid, struct stat *sb);
/* Removes, relative to dfd, every entry whose name `pid_of` parses as a
 * leftover of process pid (it returns the pid, 0 for a name that is not the
 * caller's) and zrt_safe_is_stale judges dead; `removed` (may be NULL) is
 * told each removed name with its pid and size, to name it in a warning.
 * The directory is listed through a duplicate of dfd. Returns how many were
 * removed. */
int zrt_safe_sweep(int dfd, long (*pid_of)(const char *name, void *arg),
                   void (*removed)(const char *name, long pid, long long bytes, void *arg),
                   void *arg);
/* A short tag of this machine (a hash of its host name, 8 hex digits + NUL
 * in tag[9]): a name whose pid must be judged on the machine that made it
 * (a swap file on a shared disk) carries it. */
void zrt_safe_host_tag(char tag[9]);

#endif
