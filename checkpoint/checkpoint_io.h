/*
 * checkpoint_io.h — the durable-file layer under checkpoints and
 * safetensors: CRC32C, atomic whole-file replacement, a streaming atomic
 * writer, directory fsync, mkdir -p and bounds-checked reads.
 *
 * Durability protocol (what "atomic" means everywhere in zrt): data goes to
 * a new "<path>.tmp.<pid>.<random>" (created O_EXCL|O_NOFOLLOW relative to
 * the directory's descriptor: safe_file.h), is fsync'ed, renamed over <path>, and the directory
 * is fsync'ed. A crash (kill -9, power loss on a journaling FS) at any
 * moment leaves either the old <path> or the new one, never a mix; a stale
 * *.tmp.* file may remain and is harmless (nothing reads it).
 *
 * Every function sets zrt_error with the path and strerror on failure.
 */
#ifndef ZRT_CHECKPOINT_IO_H
#define ZRT_CHECKPOINT_IO_H

#include <stdio.h>

#include "internal.h"

/* CRC32C (Castagnoli, reflected, poly 0x82F63B78), as iSCSI/ext4 use it.
 * Chainable: crc = zrt_crc32c(crc, more, n) continues a running CRC;
 * start with 0. zrt_crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t zrt_crc32c(uint32_t crc, const void *data, size_t n);

/* mkdir -p (mode 0755). Existing directories are fine. */
zrt_status zrt_ckpt_mkdirs(const char *path);
/* Atomically replaces path with bytes [data, data+n). */
zrt_status zrt_ckpt_write_file_atomic(const char *path, const void *data, size_t n);
/* The same for name in the open directory dfd (dir for messages). */
zrt_status zrt_ckpt_write_fileat(int dfd, const char *dir, const char *name, const void *data,
                                 size_t n);
/* Reads a whole regular file into a malloc'd, NUL-terminated buffer (a
 * FIFO, directory or device is an error naming it, never a hang). */
zrt_status zrt_ckpt_read_file(const char *path, char **out, size_t *len);
/* The same for name in the open directory dfd, never through a symlink
 * (dir is for messages); dfd < 0 reads name as a path. */
zrt_status zrt_ckpt_read_fileat(int dfd, const char *dir, const char *name, char **out,
                                size_t *len);
/* 1 when path exists (any type), 0 otherwise. */
int zrt_ckpt_exists(const char *path);
/* 1 when path is a directory. */
int zrt_ckpt_is_dir(const char *path);
/* Reads exactly n bytes at offset; a short file is ZRT_ERR_IO naming the
 * path, the offset and how many bytes the file has ("truncated"). */
zrt_status zrt_ckpt_pread_exact(int fd, const char *path, void *buf, size_t n, uint64_t off);

/* Streaming atomic writer: open → write* → commit (fsync, rename, dir
 * fsync) or abort (unlink the temporary). It keeps a running CRC32C of
 * everything written since open. */
typedef struct zrt_ckpt_writer {
  int fd, dfd;     /* the temporary; its directory */
  char path[4096]; /* dir/name, for messages */
  char dir[4096];
  char name[256];
  char tmpname[300]; /* the temporary's name in dir ("" once renamed) */
  char tmp[4400];    /* dir/tmpname, for messages */
  uint64_t bytes;
  uint32_t crc;
} zrt_ckpt_writer;

/* The directory of path is opened as a user-named one (safe_file.h). */
zrt_status zrt_ckpt_writer_open(zrt_ckpt_writer *w, const char *path);
/* Creates name in the open directory dfd (dir for messages); dfd stays the
 * caller's. */
zrt_status zrt_ckpt_writer_openat(zrt_ckpt_writer *w, int dfd, const char *dir, const char *name);
zrt_status zrt_ckpt_writer_write(zrt_ckpt_writer *w, const void *data, size_t n);
/* Writes at an absolute offset without touching the running CRC (used to
 * patch a header reserved at the start). */
zrt_status zrt_ckpt_writer_pwrite(zrt_ckpt_writer *w, const void *data, size_t n, uint64_t off);
zrt_status zrt_ckpt_writer_commit(zrt_ckpt_writer *w);
void zrt_ckpt_writer_abort(zrt_ckpt_writer *w); /* safe after commit / on a closed writer */

/* Test hook: when ZRT_CKPT_SLOW_US is set (with ZRT_TEST_HOOKS=1), every
 * streaming write sleeps that many microseconds, so a kill -9 test can land
 * inside a save. Read once. */
void zrt_ckpt_maybe_slow(void);

#endif
