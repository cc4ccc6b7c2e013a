/*
 * checkpoint.c — zrt_engine_save, zrt_engine_save_claim and zrt_ckpt_remove
 * (include/zrt.h) on the format of checkpoint_format.h: a crash-safe save
 * (new files under new names, meta.json last, `latest` flipped
 * atomically), the checkpoint directory's lock and the names zrt owns in
 * it, and what checkpoint_load.c shares (checkpoint_internal.h). The load
 * that checks every byte it uses and reshards across world sizes and
 * stages is checkpoint_load.c. The protocol step by step:
 * docs/checkpoints.md, "Save and load protocol (checkpoint.c)". The engine
 * is read and its state taken only through engine/engine_state.h.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_format.h"
#include "checkpoint_internal.h"
#include "engine_state.h"
#include "safe_file.h"

#define ZRT_CKPT_MSG 1024

/* ---------------------------------------------------------- agreement */

/* Every rank passes its local status; returns OK only when all succeeded,
 * else the first failing rank's status with its message (prefixed "rank q:"
 * on the other ranks). extra[0..nextra) are summed across ranks. */
zrt_status zrt_ckpt_agree(zrt_engine *eng, zrt_status st, float *extra, int nextra) {
  zrt_engine_view v;
  zrt_engine_view_get(eng, &v);
  int w = v.world;
  float *buf = calloc((size_t)(w + nextra + ZRT_CKPT_MSG), sizeof(float));
  if (!buf) return zrt_error(ZRT_ERR_OOM, "checkpoint: out of host memory for an agreement");
  buf[v.rank] = (float)st;
  for (int i = 0; i < nextra; i++) buf[w + i] = extra[i];
  zrt_status cs = zrt_engine_all_reduce_sum(eng, buf, (size_t)(w + nextra));
  if (cs != ZRT_OK) {
    free(buf);
    return zrt_error_context(cs, "checkpoint: agreement collective failed: ");
  }
  for (int i = 0; i < nextra; i++) extra[i] = buf[w + i];
  int q = -1;
  for (int r = 0; r < w && q < 0; r++)
    if (buf[r] != 0) q = r;
  if (q < 0) {
    free(buf);
    return ZRT_OK;
  }
  zrt_status qst = (zrt_status)(int)buf[q];
  float *msg = buf + w + nextra;
  if (v.rank == q) {
    const char *e = zrt_last_error();
    for (size_t i = 0; i < ZRT_CKPT_MSG - 1 && e[i]; i++) msg[i] = (float)(unsigned char)e[i];
  }
  cs = zrt_engine_all_reduce_sum(eng, msg, ZRT_CKPT_MSG);
  if (v.rank != q) {
    char text[ZRT_CKPT_MSG];
    for (size_t i = 0; i < ZRT_CKPT_MSG; i++) text[i] = (char)(int)msg[i];
    text[ZRT_CKPT_MSG - 1] = '\0';
    if (cs != ZRT_OK) snprintf(text, sizeof text, "(message lost: the collective failed)");
    zrt_error(qst, "rank %d: %s", q, text);
  }
  free(buf);
  return qst;
}

/* ------------------------------------------------------ staging memory */

static zrt_status zrt_ckpt_raw_alloc(void *ctx, size_t bytes, void **out) {
  (void)ctx;
  *out = aligned_alloc(64, ZRT_ALIGN_UP(bytes ? bytes : 1, 64));
  return *out ? ZRT_OK : zrt_error(ZRT_ERR_OOM, "checkpoint staging: out of host memory");
}
static void zrt_ckpt_raw_free(void *ctx, void *ptr, size_t bytes) {
  (void)ctx;
  (void)bytes;
  free(ptr);
}

zrt_status zrt_ckpt_staging_pool(zrt_pool **out) {
  ZRT_CHECK(
      zrt_pool_create("checkpoint staging", 0, zrt_ckpt_raw_alloc, zrt_ckpt_raw_free, NULL, out));
  zrt_pool_set_hint(*out, "checkpoints stage one module's shard at a time (save) or the whole "
                          "rank's states (load) in host memory");
  return ZRT_OK;
}

/* Copies a module's buffer of `kind` (its full master extent, or part for
 * param16) into host memory dst. */
static zrt_status zrt_ckpt_fetch_state(zrt_engine *eng, int module, int kind, void *dst,
                                       int64_t len) {
  if (kind == ZRT_CKPT_MASTER) return zrt_engine_get_master(eng, module, dst);
  if (kind == ZRT_CKPT_PARAM16) return zrt_engine_shard16_read(eng, module, dst);
  (void)len;
  return zrt_engine_state_io(eng, module, kind == ZRT_CKPT_EXP_AVG ? ZRT_STATE_S1 : ZRT_STATE_S2,
                             ZRT_IO_READ, dst);
}

int zrt_ckpt_engine_has(const zrt_engine *eng, int kind) {
  switch (kind) {
  case ZRT_CKPT_MASTER: return 1;
  case ZRT_CKPT_EXP_AVG: return zrt_engine_optim_states(eng) >= 1;
  case ZRT_CKPT_EXP_AVG_SQ: return zrt_engine_optim_states(eng) >= 2;
  default: return zrt_engine_has_shard16(eng);
  }
}

/* ------------------------------------------------------------- save */

const char *zrt_ckpt_optim_name(zrt_optim_type t) {
  switch (t) {
  case ZRT_OPTIM_ADAM: return "adam";
  case ZRT_OPTIM_ADAMW: return "adamw";
  case ZRT_OPTIM_SGD: return "sgd";
  case ZRT_OPTIM_LION: return "lion";
  }
  return "?";
}

static zrt_status zrt_ckpt_write_rank(zrt_engine *eng, int step_fd, const char *step_dir,
                                      const char *name, int64_t step) {
  zrt_status st = ZRT_OK;
  zrt_pool *pool = NULL;
  void *stage = NULL;
  zrt_ckpt_section *sec = NULL;
  zrt_ckpt_writer w = {.fd = -1, .dfd = -1};
  uint32_t *crcs = NULL;
  unsigned char *table = NULL;
  zrt_engine_view v;
  zrt_engine_view_get(eng, &v);
  int nk = 0, kinds[ZRT_CKPT_NKINDS];
  for (int k = 0; k < ZRT_CKPT_NKINDS; k++)
    if (zrt_ckpt_engine_has(eng, k)) kinds[nk++] = k;
  int nsec = v.nmodules * nk;
  uint64_t cb = ZRT_CKPT_CHUNK_BYTES, nchunks = 0;
  int64_t maxlen = 0;
  sec = calloc((size_t)nsec, sizeof *sec);
  if (!sec) return zrt_error(ZRT_ERR_OOM, "checkpoint: out of host memory");
  uint64_t off = 0;
  for (int m = 0; m < v.nmodules; m++) {
    int64_t foff, len;
    zrt_engine_module_view mv;
    zrt_engine_module_view_get(eng, m, &mv);
    zrt_engine_master_extent(eng, m, &foff, &len);
    maxlen = ZRT_MAX(maxlen, len);
    for (int i = 0; i < nk; i++) {
      zrt_ckpt_section *s = &sec[m * nk + i];
      zrt_dtype dt = kinds[i] == ZRT_CKPT_PARAM16 ? v.dtype : ZRT_F32;
      snprintf(s->name, sizeof s->name, "%s.%d", zrt_ckpt_kind_name(kinds[i]), m);
      s->module = (uint32_t)m;
      s->kind = (uint32_t)kinds[i];
      s->dtype = (uint32_t)dt;
      s->flat_off = (uint64_t)((int64_t)v.rank * mv.part);
      s->count = (uint64_t)mv.part;
      s->bytes = s->count * zrt_dtype_size(dt);
      s->nchunks = (uint32_t)((s->bytes + cb - 1) / cb);
      s->crc_index = nchunks;
      s->file_off = off; /* relative until the table size is known */
      nchunks += s->nchunks;
      off += s->bytes;
    }
  }
  uint64_t table_bytes = (uint64_t)nsec * ZRT_CKPT_SECTION_BYTES + nchunks * 4;
  uint64_t data_offset = ZRT_CKPT_HEADER_BYTES + table_bytes;
  crcs = calloc(nchunks ? nchunks : 1, 4);
  table = calloc(data_offset, 1);
  if (!crcs || !table) {
    st = zrt_error(ZRT_ERR_OOM, "checkpoint: out of host memory for the section table");
    goto done;
  }
  ZRT_CHECK_GOTO(zrt_ckpt_staging_pool(&pool), st, done);
  ZRT_CHECK_GOTO(zrt_pool_alloc(pool, (size_t)maxlen * 4, ZRT_MEM_OTHER, &stage), st, done);
  ZRT_CHECK_GOTO(zrt_ckpt_writer_openat(&w, step_fd, step_dir, name), st, done);
  ZRT_CHECK_GOTO(zrt_ckpt_writer_write(&w, table, data_offset), st, done); /* placeholder */
  for (int m = 0; m < v.nmodules; m++) {
    int64_t foff, len;
    zrt_engine_master_extent(eng, m, &foff, &len);
    for (int i = 0; i < nk; i++) {
      zrt_ckpt_section *s = &sec[m * nk + i];
      s->file_off += data_offset;
      ZRT_CHECK_GOTO(zrt_ckpt_fetch_state(eng, m, (int)s->kind, stage, len), st, done);
      ZRT_CHECK_GOTO(zrt_backend_synchronize(v.backend, NULL), st, done);
      /* param16 is exactly the rank's part; the fp32 kinds start at foff */
      size_t esz = zrt_dtype_size((zrt_dtype)s->dtype);
      const unsigned char *src = (const unsigned char *)stage;
      if (s->kind != ZRT_CKPT_PARAM16) src += ((int64_t)s->flat_off - foff) * (int64_t)esz;
      for (uint32_t c = 0; c < s->nchunks; c++) {
        uint64_t c0 = c * cb, c1 = ZRT_MIN(c0 + cb, s->bytes);
        crcs[s->crc_index + c] = zrt_crc32c(0, src + c0, c1 - c0);
        ZRT_CHECK_GOTO(zrt_ckpt_writer_write(&w, src + c0, c1 - c0), st, done);
      }
    }
  }
  for (int i = 0; i < nsec; i++)
    zrt_ckpt_section_pack(&sec[i],
                          table + ZRT_CKPT_HEADER_BYTES + (size_t)i * ZRT_CKPT_SECTION_BYTES);
  memcpy(table + ZRT_CKPT_HEADER_BYTES + (size_t)nsec * ZRT_CKPT_SECTION_BYTES, crcs, nchunks * 4);
  zrt_ckpt_header h = {.version = ZRT_CKPT_VERSION,
                       .rank = (uint32_t)v.rank,
                       .world = (uint32_t)v.world,
                       .nsections = (uint32_t)nsec,
                       .chunk_bytes = cb,
                       .table_bytes = table_bytes,
                       .data_offset = data_offset,
                       .step = (uint64_t)step};
  h.table_crc = zrt_crc32c(0, table + ZRT_CKPT_HEADER_BYTES, table_bytes);
  zrt_ckpt_header_pack(&h, table);
  ZRT_CHECK_GOTO(zrt_ckpt_writer_pwrite(&w, table, data_offset, 0), st, done);
  ZRT_CHECK_GOTO(zrt_ckpt_writer_commit(&w), st, done);
done:
  zrt_ckpt_writer_abort(&w);
  if (pool) zrt_pool_free(pool, stage);
  zrt_pool_destroy(pool);
  free(sec);
  free(crcs);
  free(table);
  return st;
}

static void zrt_ckpt_rank_file_name(char *buf, size_t len, int rank, int gen) {
  if (gen == 0)
    snprintf(buf, len, "rank%d.bin", rank);
  else
    snprintf(buf, len, "rank%d.g%d.bin", rank, gen);
}

/* The names zrt gives files in a step directory: meta.json, rank<R>.bin,
 * rank<R>.g<G>.bin, and the temporaries of these (and of config.json, which
 * older versions staged there). Nothing else is ever removed. */
static int zrt_ckpt_own_name(const char *n) {
  const char *p = n;
  if (!strncmp(p, "rank", 4) && p[4] >= '0' && p[4] <= '9') {
    p += 4;
    while (*p >= '0' && *p <= '9') p++;
    if (!strncmp(p, ".g", 2) && p[2] >= '0' && p[2] <= '9') {
      p += 2;
      while (*p >= '0' && *p <= '9') p++;
    }
    if (strncmp(p, ".bin", 4)) return 0;
    p += 4;
  } else if (!strncmp(p, "meta.json", 9)) {
    p += 9;
  } else if (!strncmp(p, "config.json.tmp.", 16)) {
    return 1;
  } else {
    return 0;
  }
  return *p == '\0' || !strncmp(p, ".tmp.", 5);
}

/* Reads DIR/latest through the open root (never a link, a FIFO...) into
 * name[len] without its newline; "" when there is no `latest`. */
static zrt_status zrt_ckpt_latest_name(int root_fd, const char *dir, char *name, size_t len) {
  struct stat sb;
  name[0] = '\0';
  if (fstatat(root_fd, "latest", &sb, AT_SYMLINK_NOFOLLOW) != 0) return ZRT_OK;
  char *txt = NULL;
  ZRT_CHECK(zrt_ckpt_read_fileat(root_fd, dir, "latest", &txt, NULL));
  size_t n = strlen(txt);
  while (n && (txt[n - 1] == '\n' || txt[n - 1] == ' ' || txt[n - 1] == '\r')) txt[--n] = '\0';
  snprintf(name, len, "%s", txt);
  free(txt);
  return ZRT_OK;
}

zrt_status zrt_ckpt_remove(const char *dir, int64_t step, int *kept) {
  if (kept) *kept = 0;
  if (!dir || !dir[0] || step < 0)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_ckpt_remove: empty directory or negative step");
  char step_name[64], latest[ZRT_CKPT_MSG], step_dir[4400], left[256] = "";
  snprintf(step_name, sizeof step_name, "step_%lld", (long long)step);
  snprintf(step_dir, sizeof step_dir, "%s/%s", dir, step_name);
  int root_fd = -1, step_fd = -1, nleft = 0;
  zrt_status st = ZRT_OK;
  DIR *d = NULL;
  ZRT_CHECK(zrt_safe_dir_open(dir, ZRT_DIR_NAMED, "checkpoint directory", &root_fd));
  /* a `latest` that cannot be read stops the removal: it might name this step */
  ZRT_CHECK_GOTO(zrt_ckpt_latest_name(root_fd, dir, latest, sizeof latest), st, done);
  if (!strcmp(latest, step_name)) {
    st = zrt_error(ZRT_ERR_INVALID_ARG,
                   "'%s' is the checkpoint '%s/latest' names; zrt never removes it (save a "
                   "newer step first)",
                   step_dir, dir);
    goto done;
  }
  ZRT_CHECK_GOTO(zrt_safe_dir_openat(root_fd, dir, step_name, ZRT_DIR_OWN,
                                     "checkpoint step directory", &step_fd),
                 st, done);
  int cfd = fcntl(step_fd, F_DUPFD_CLOEXEC, 0);
  d = cfd >= 0 ? fdopendir(cfd) : NULL;
  if (!d) {
    if (cfd >= 0) close(cfd);
    st = zrt_error(ZRT_ERR_IO, "cannot list '%s': %s", step_dir, strerror(errno));
    goto done;
  }
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    struct stat lb;
    int own = zrt_ckpt_own_name(e->d_name) &&
              fstatat(step_fd, e->d_name, &lb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(lb.st_mode) &&
              lb.st_uid == geteuid();
    if (own && unlinkat(step_fd, e->d_name, 0) == 0) continue;
    if (own && errno == ENOENT) continue;
    if (nleft++ < 3) {
      size_t at = strlen(left);
      snprintf(left + at, sizeof left - at, "%s'%s'", at ? ", " : "", e->d_name);
    }
  }
  if (fsync(step_fd) != 0 && errno != EINVAL)
    st = zrt_error(ZRT_ERR_IO, "fsync of directory '%s' failed: %s", step_dir, strerror(errno));
  if (st == ZRT_OK && nleft == 0) {
    if (unlinkat(root_fd, step_name, AT_REMOVEDIR) != 0 && errno != ENOENT)
      st = zrt_error(ZRT_ERR_IO, "cannot remove the emptied directory '%s': %s", step_dir,
                     strerror(errno));
    else if (fsync(root_fd) != 0 && errno != EINVAL)
      st = zrt_error(ZRT_ERR_IO, "fsync of directory '%s' failed: %s", dir, strerror(errno));
  }
  if (st == ZRT_OK && nleft > 0)
    zrt_log(ZRT_LOG_WARN,
            "checkpoint %s: removed zrt's files; the directory stays, it holds %d entr%s zrt "
            "did not write (%s%s)",
            step_dir, nleft, nleft == 1 ? "y" : "ies", left, nleft > 3 ? ", ..." : "");
  if (kept) *kept = nleft;
done:
  if (d) closedir(d);
  if (step_fd >= 0) close(step_fd);
  if (root_fd >= 0) close(root_fd);
  return st;
}

/* The writer's pid of `latest`'s temporary "latest.tmp.<pid>.<hex>"
 * (safe_file.h), 0 for any other name. */
static long zrt_ckpt_latest_tmp_pid(const char *name, void *arg) {
  (void)arg;
  if (!zrt_safe_is_tmp_of(name, "latest")) return 0;
  const char *t = name + strlen("latest.tmp.");
  char *end;
  long pid = strtol(t, &end, 10);
  if (end == t || *end != '.' || !end[1]) return 0;
  for (const char *h = end + 1; *h; h++)
    if (!((*h >= '0' && *h <= '9') || (*h >= 'a' && *h <= 'f'))) return 0;
  return pid;
}

/* Names each temporary a killed save left, as zrt_safe_sweep removes it. */
static void zrt_ckpt_swept(const char *name, long pid, long long bytes, void *arg) {
  zrt_log(ZRT_LOG_WARN,
          "checkpoint: removed %s/%s (%lld bytes): a temporary of a save by process %ld, "
          "which was killed before it finished",
          (const char *)arg, name, bytes, pid);
}

#define ZRT_CKPT_LOCK "zrt.lock"

/* Rank 0: takes (or already holds) the flock on DIR/zrt.lock, so a second
 * job saving into the same directory stops before it removes the first's
 * temporaries, naming the process that holds it; then sweeps the killed
 * saves' temporaries (nobody else saves there now). Another engine of the
 * same process shares the lock. */
static zrt_status zrt_ckpt_lock(zrt_engine *eng, const char *dir, int root_fd) {
  zrt_engine_ckpt_lock *lk = zrt_engine_ckpt_lock_slot(eng);
  struct stat rs, ls;
  if (fstat(root_fd, &rs) != 0)
    return zrt_error(ZRT_ERR_IO, "cannot stat checkpoint directory '%s': %s", dir, strerror(errno));
  if (lk->fd >= 0 && lk->dev == (unsigned long long)rs.st_dev &&
      lk->ino == (unsigned long long)rs.st_ino)
    return ZRT_OK;
  int fd =
      openat(root_fd, ZRT_CKPT_LOCK, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0)
    return zrt_error(ZRT_ERR_IO, "cannot open the lock '%s/%s': %s", dir, ZRT_CKPT_LOCK,
                     errno == ELOOP ? "it is a symbolic link (zrt makes a regular file there; "
                                      "remove the link)"
                                    : strerror(errno));
  if (fstat(fd, &ls) != 0 || !S_ISREG(ls.st_mode) || ls.st_uid != geteuid()) {
    close(fd);
    return zrt_error(ZRT_ERR_IO,
                     "the lock '%s/%s' is not a regular file of this user; remove it (zrt makes "
                     "it itself)",
                     dir, ZRT_CKPT_LOCK);
  }
  char host[256] = "?";
  if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "?");
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    char txt[320] = "", who[300] = "";
    ssize_t n = pread(fd, txt, sizeof txt - 1, 0);
    close(fd);
    txt[n > 0 ? n : 0] = '\0';
    long pid = 0;
    if (sscanf(txt, "pid %ld host %255s", &pid, who) == 2 && pid == (long)getpid() &&
        !strcmp(who, host))
      return ZRT_OK; /* an engine of this process holds it */
    if (e != EWOULDBLOCK)
      return zrt_error(ZRT_ERR_IO, "cannot lock '%s/%s': %s", dir, ZRT_CKPT_LOCK, strerror(e));
    if (pid <= 0) snprintf(who, sizeof who, "?");
    return zrt_error(ZRT_ERR_IO,
                     "checkpoint directory '%s' is in use by another job: process %ld on host %s "
                     "holds its lock %s/%s. Two jobs saving into one directory would remove each "
                     "other's files; save into another directory, or end that job first",
                     dir, pid, who, dir, ZRT_CKPT_LOCK);
  }
  char txt[320];
  int n = snprintf(txt, sizeof txt, "pid %ld host %s\n", (long)getpid(), host);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, txt, (size_t)n, 0) != n) {
    zrt_status st = zrt_error(ZRT_ERR_IO, "cannot write the lock '%s/%s': %s", dir, ZRT_CKPT_LOCK,
                              strerror(errno));
    close(fd);
    return st;
  }
  if (lk->fd >= 0) close(lk->fd);
  lk->fd = fd;
  lk->dev = (unsigned long long)rs.st_dev;
  lk->ino = (unsigned long long)rs.st_ino;
  zrt_safe_sweep(root_fd, zrt_ckpt_latest_tmp_pid, zrt_ckpt_swept, (void *)dir);
  return ZRT_OK;
}

zrt_status zrt_engine_save_claim(zrt_engine *eng, const char *dir) {
  if (!eng || !dir || !dir[0])
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_save_claim: NULL engine or empty directory");
  zrt_status st = ZRT_OK;
  int root_fd = -1;
  zrt_engine_view v;
  zrt_engine_view_get(eng, &v);
  if (v.rank == 0) {
    st = zrt_ckpt_mkdirs(dir);
    if (st == ZRT_OK) st = zrt_safe_dir_open(dir, ZRT_DIR_NAMED, "checkpoint directory", &root_fd);
    if (st == ZRT_OK) st = zrt_ckpt_lock(eng, dir, root_fd);
    if (root_fd >= 0) close(root_fd);
  }
  return zrt_ckpt_agree(eng, st, NULL, 0);
}

/* Opens DIR (creating it and step_<N> when `create`) and DIR/step_<N>, as
 * safe_file.h requires. */
static zrt_status zrt_ckpt_open_dirs(const char *dir, const char *step_name, int create,
                                     int *root_fd, int *step_fd) {
  *root_fd = *step_fd = -1;
  if (create) ZRT_CHECK(zrt_ckpt_mkdirs(dir));
  ZRT_CHECK(zrt_safe_dir_open(dir, ZRT_DIR_NAMED, "checkpoint directory", root_fd));
  zrt_status st = ZRT_OK;
  if (create && mkdirat(*root_fd, step_name, 0755) != 0 && errno != EEXIST)
    st = zrt_error(ZRT_ERR_IO, "cannot create directory '%s/%s': %s", dir, step_name,
                   strerror(errno));
  if (st == ZRT_OK)
    st = zrt_safe_dir_openat(*root_fd, dir, step_name, ZRT_DIR_OWN, "checkpoint step directory",
                             step_fd);
  if (st != ZRT_OK) {
    close(*root_fd);
    *root_fd = -1;
  }
  return st;
}

/* An integer field of a JSON object, exactly representable and in
 * [lo, hi]; dflt otherwise (never a cast of an out-of-range double). */
int64_t zrt_ckpt_json_int(const cJSON *o, const char *k, int64_t lo, int64_t hi, int64_t dflt) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
  if (!cJSON_IsNumber(j)) return dflt;
  double v = j->valuedouble;
  if (!(v >= (double)lo && v <= (double)hi) || v != (double)(int64_t)v) return dflt;
  return (int64_t)v;
}

/* Rank 0, before any rank writes: creates the step directory and picks the
 * generation (see the protocol at the top). */
static zrt_status zrt_ckpt_prepare(const char *dir, int root_fd, const char *step_name,
                                   const char *step_dir, int step_fd, int *gen) {
  *gen = 0;
  struct stat sb;
  if (fstatat(step_fd, "meta.json", &sb, AT_SYMLINK_NOFOLLOW) != 0) return ZRT_OK;
  /* A `latest` that cannot be read (a link, a FIFO) stops the save: taking
   * it for "not this step" would remove the live step's meta.json. */
  char latest[ZRT_CKPT_MSG];
  ZRT_CHECK(zrt_ckpt_latest_name(root_fd, dir, latest, sizeof latest));
  int live = !strcmp(latest, step_name);
  if (!live) {
    /* A killed save's metadata that nothing references: drop it before the
     * rank files it describes are overwritten. */
    if (unlinkat(step_fd, "meta.json", 0) != 0)
      return zrt_error(ZRT_ERR_IO, "cannot remove stale '%s/meta.json' before saving: %s", step_dir,
                       strerror(errno));
    if (fsync(step_fd) != 0 && errno != EINVAL)
      return zrt_error(ZRT_ERR_IO, "fsync of directory '%s' failed: %s", step_dir, strerror(errno));
    return ZRT_OK;
  }
  char *meta = NULL;
  ZRT_CHECK(zrt_ckpt_read_fileat(step_fd, step_dir, "meta.json", &meta, NULL));
  cJSON *root = cJSON_Parse(meta);
  free(meta);
  /* generations stay far below INT_MAX: one per save of the same step */
  *gen = (int)zrt_ckpt_json_int(root, "generation", 0, 1 << 30, 0) + 1;
  cJSON_Delete(root);
  return ZRT_OK;
}

/* The resolved config as JSON, through the config writer into an anonymous
 * memory file (never a file on disk beside the checkpoint). */
static cJSON *zrt_ckpt_config_json(zrt_engine *eng) {
  int mfd = memfd_create("zrt-config-json", MFD_CLOEXEC);
  if (mfd < 0) {
    zrt_error(ZRT_ERR_IO, "memfd_create failed: %s", strerror(errno));
    return NULL;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", mfd);
  cJSON *j = NULL;
  char *txt = NULL;
  struct stat sb;
  zrt_engine_view v;
  zrt_engine_view_get(eng, &v);
  if (zrt_config_write_json(v.config, path) == ZRT_OK && fstat(mfd, &sb) == 0 &&
      (txt = malloc((size_t)sb.st_size + 1)) != NULL &&
      zrt_ckpt_pread_exact(mfd, "config JSON", txt, (size_t)sb.st_size, 0) == ZRT_OK) {
    txt[sb.st_size] = '\0';
    j = cJSON_Parse(txt);
  }
  free(txt);
  close(mfd);
  return j;
}

/* Each part's state (engine_state.h) as the meta file's objects; the keys
 * and their order are the checkpoint format (checkpoint_format.h's version),
 * read back by zrt_ckpt_state_from_json. */
static void zrt_ckpt_counters_to_json(const zrt_engine *eng, cJSON *ctr) {
  zrt_engine_counters_state c;
  zrt_engine_counters_get(eng, &c);
  cJSON_AddNumberToObject(ctr, "global_step", (double)c.global_step);
  cJSON_AddNumberToObject(ctr, "micro_step", (double)c.micro_step);
  cJSON_AddNumberToObject(ctr, "applied_steps", (double)c.applied_steps);
  cJSON_AddNumberToObject(ctr, "skipped_total", (double)c.skipped_total);
  cJSON_AddNumberToObject(ctr, "last_grad_norm", (double)c.last_grad_norm);
}

static void zrt_ckpt_scaler_to_json(const zrt_engine *eng, cJSON *js) {
  zrt_scaler_state sc;
  zrt_engine_scaler_get(eng, &sc);
  cJSON_AddNumberToObject(js, "dynamic", sc.dynamic);
  cJSON_AddNumberToObject(js, "cur_scale", sc.cur_scale);
  cJSON_AddNumberToObject(js, "min_scale", sc.min_scale);
  cJSON_AddNumberToObject(js, "factor", sc.factor);
  cJSON_AddNumberToObject(js, "window", (double)sc.window);
  cJSON_AddNumberToObject(js, "delayed_shift", (double)sc.delayed_shift);
  cJSON_AddNumberToObject(js, "cur_hysteresis", (double)sc.cur_hysteresis);
  cJSON_AddNumberToObject(js, "consecutive_hysteresis", sc.consecutive_hysteresis);
  cJSON_AddNumberToObject(js, "cur_iter", (double)sc.cur_iter);
  cJSON_AddNumberToObject(js, "last_overflow_iter", (double)sc.last_overflow_iter);
}

static void zrt_ckpt_sched_to_json(const zrt_engine *eng, cJSON *jsch) {
  zrt_sched_state sh;
  zrt_engine_sched_get(eng, &sh);
  cJSON_AddNumberToObject(jsch, "type", sh.type);
  cJSON_AddNumberToObject(jsch, "last_batch_iteration", (double)sh.last_batch_iteration);
  cJSON_AddNumberToObject(jsch, "cur_lr", sh.cur_lr);
}

static zrt_status zrt_ckpt_write_meta(zrt_engine *eng, const char *dir, int root_fd,
                                      const char *step_dir, int step_fd, const char *step_name,
                                      int gen, cJSON *user, int *meta_done) {
  zrt_status st = ZRT_OK;
  char path[4600];
  char *text = NULL;
  zrt_engine_view v;
  zrt_engine_view_get(eng, &v);
  zrt_engine_counters_state ctr;
  zrt_engine_counters_get(eng, &ctr);
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "format", "zrt-checkpoint");
  cJSON_AddNumberToObject(root, "version", ZRT_CKPT_VERSION);
  cJSON_AddStringToObject(root, "zrt_version", ZRT_VERSION_STRING);
  cJSON_AddNumberToObject(root, "step", (double)ctr.global_step);
  cJSON_AddNumberToObject(root, "generation", gen);
  cJSON_AddNumberToObject(root, "world_size", v.world);
  cJSON_AddNumberToObject(root, "zero_stage", v.stage);
  cJSON_AddStringToObject(root, "dtype", zrt_dtype_name(v.dtype));
  cJSON_AddStringToObject(root, "optimizer", zrt_ckpt_optim_name(v.cfg->optimizer_type));
  /* the dtype the run kept them in (bf16.bf16_master_weights_and_grads /
   * bf16_optimizer_states); the sections hold fp32, bf16 values exactly */
  cJSON_AddStringToObject(root, "master_dtype", zrt_dtype_name(v.master_dtype));
  cJSON_AddStringToObject(root, "optimizer_state_dtype", zrt_dtype_name(v.state_dtype));
  cJSON *states = cJSON_AddArrayToObject(root, "states");
  for (int k = 0; k < ZRT_CKPT_NKINDS; k++)
    if (zrt_ckpt_engine_has(eng, k))
      cJSON_AddItemToArray(states, cJSON_CreateString(zrt_ckpt_kind_name(k)));
  cJSON_AddNumberToObject(root, "chunk_bytes", ZRT_CKPT_CHUNK_BYTES);

  zrt_ckpt_counters_to_json(eng, cJSON_AddObjectToObject(root, "counters"));
  zrt_ckpt_scaler_to_json(eng, cJSON_AddObjectToObject(root, "loss_scaler"));
  zrt_ckpt_sched_to_json(eng, cJSON_AddObjectToObject(root, "scheduler"));

  cJSON *mods = cJSON_AddArrayToObject(root, "modules");
  for (int m = 0; m < v.nmodules; m++) {
    zrt_engine_module_view me;
    zrt_engine_module_view_get(eng, m, &me);
    cJSON *jm = cJSON_CreateObject();
    cJSON_AddStringToObject(jm, "name", me.name);
    cJSON_AddNumberToObject(jm, "numel", (double)me.numel);
    cJSON_AddNumberToObject(jm, "padded", (double)me.padded);
    cJSON_AddNumberToObject(jm, "part", (double)me.part);
    cJSON *ps = cJSON_AddArrayToObject(jm, "params");
    for (int i = 0; i < me.nparams; i++) {
      const zrt_param_entry *p = zrt_engine_param_entry(eng, me.params[i]);
      cJSON *jp = cJSON_CreateObject();
      cJSON_AddStringToObject(jp, "name", p->name);
      cJSON *sh = cJSON_AddArrayToObject(jp, "shape");
      for (int d = 0; d < p->ndim; d++)
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)p->shape[d]));
      cJSON_AddNumberToObject(jp, "offset", (double)p->offset);
      cJSON_AddItemToArray(ps, jp);
    }
    cJSON_AddItemToArray(mods, jm);
  }

  /* every rank file: its size and table CRC, checked here once more */
  cJSON *ranks = cJSON_AddArrayToObject(root, "ranks");
  for (int r = 0; r < v.world; r++) {
    char name[64];
    zrt_ckpt_rank_file_name(name, sizeof name, r, gen);
    snprintf(path, sizeof path, "%s/%s", step_dir, name);
    char *raw = NULL;
    size_t len = 0;
    ZRT_CHECK_GOTO(zrt_ckpt_read_fileat(step_fd, step_dir, name, &raw, &len), st, done);
    int ok = len >= ZRT_CKPT_HEADER_BYTES && !memcmp(raw, ZRT_CKPT_MAGIC, 8);
    uint32_t hcrc = 0, tcrc = 0;
    if (ok) {
      memcpy(&tcrc, raw + 56, 4);
      memcpy(&hcrc, raw + 60, 4);
      ok = hcrc == zrt_crc32c(0, raw, 60);
    }
    free(raw);
    if (!ok) {
      st = zrt_error(ZRT_ERR_IO, "rank %d's checkpoint file '%s' has a bad header after writing", r,
                     path);
      goto done;
    }
    cJSON *jr = cJSON_CreateObject();
    cJSON_AddStringToObject(jr, "file", name);
    cJSON_AddNumberToObject(jr, "bytes", (double)len);
    cJSON_AddNumberToObject(jr, "table_crc32c", (double)tcrc);
    cJSON_AddItemToArray(ranks, jr);
  }

  cJSON *cfg = zrt_ckpt_config_json(eng);
  if (!cfg) {
    st = zrt_error_context(ZRT_ERR_IO, "checkpoint: cannot serialise the resolved config: ");
    goto done;
  }
  cJSON_AddItemToObject(root, "config", cfg);
  cJSON_AddItemToObject(root, "user", user ? cJSON_Duplicate(user, 1) : cJSON_CreateObject());

  text = cJSON_Print(root);
  if (!text) {
    st = zrt_error(ZRT_ERR_OOM, "checkpoint: out of host memory printing meta.json");
    goto done;
  }
  ZRT_CHECK_GOTO(zrt_ckpt_meta_seal(&text), st, done);
  ZRT_CHECK_GOTO(zrt_ckpt_write_fileat(step_fd, step_dir, "meta.json", text, strlen(text)), st,
                 done);
  *meta_done = 1; /* from here the rank files are referenced */
  char latest_txt[300];
  snprintf(latest_txt, sizeof latest_txt, "%s\n", step_name);
  ZRT_CHECK_GOTO(zrt_ckpt_write_fileat(root_fd, dir, "latest", latest_txt, strlen(latest_txt)), st,
                 done);

  /* Files no metadata references any more: other generations, temporaries
   * of killed saves, rank files of a larger world. Failure to remove them
   * costs disk space only. */
  int cfd = fcntl(step_fd, F_DUPFD_CLOEXEC, 0);
  DIR *d = cfd >= 0 ? fdopendir(cfd) : NULL;
  if (!d && cfd >= 0) close(cfd);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!zrt_ckpt_own_name(e->d_name) || !strcmp(e->d_name, "meta.json")) continue;
      int keep = 0;
      for (int r = 0; r < v.world && !keep; r++) {
        char name[64];
        zrt_ckpt_rank_file_name(name, sizeof name, r, gen);
        keep = !strcmp(name, e->d_name);
      }
      struct stat lb;
      if (keep || fstatat(step_fd, e->d_name, &lb, AT_SYMLINK_NOFOLLOW) != 0 ||
          !S_ISREG(lb.st_mode) || lb.st_uid != geteuid())
        continue;
      unlinkat(step_fd, e->d_name, 0);
    }
    closedir(d);
  }
done:
  free(text);
  cJSON_Delete(root);
  return st;
}

zrt_status zrt_engine_save(zrt_engine *eng, const char *dir, const char *user_json) {
  if (!eng || !dir || !dir[0])
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_save: NULL engine or empty directory");
  zrt_engine_view v;
  zrt_engine_view_get(eng, &v);
  if (!v.built)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_save('%s'): call zrt_engine_build first",
                     dir);
  zrt_engine_counters_state ctr;
  zrt_engine_counters_get(eng, &ctr);
  zrt_status st = ZRT_OK;
  cJSON *user = NULL;
  char step_name[64], step_dir[4400];
  snprintf(step_name, sizeof step_name, "step_%lld", (long long)ctr.global_step);
  snprintf(step_dir, sizeof step_dir, "%s/%s", dir, step_name);
  int64_t accum = v.cfg->gradient_accumulation_steps;
  if (user_json) {
    user = cJSON_Parse(user_json);
    if (!user || !cJSON_IsObject(user))
      st = zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_engine_save('%s'): user_json must be a JSON object, got '%.80s'", dir,
                     user_json);
  }
  if (st == ZRT_OK && accum > 0 && ctr.micro_step % accum != 0)
    st = zrt_error(ZRT_ERR_INVALID_ARG,
                   "zrt_engine_save('%s'): called in the middle of gradient accumulation "
                   "(micro-step %lld of %lld); save after the step that completes it",
                   dir, (long long)(ctr.micro_step % accum), (long long)accum);
  int gen = 0, root_fd = -1, step_fd = -1;
  if (st == ZRT_OK && v.rank == 0) {
    st = zrt_ckpt_open_dirs(dir, step_name, 1, &root_fd, &step_fd);
    if (st == ZRT_OK) st = zrt_ckpt_lock(eng, dir, root_fd);
    if (st == ZRT_OK) st = zrt_ckpt_prepare(dir, root_fd, step_name, step_dir, step_fd, &gen);
  }
  float g = (float)gen;
  ZRT_CHECK_GOTO(zrt_ckpt_agree(eng, st, &g, 1), st, done);
  gen = (int)g;
  if (v.rank != 0) st = zrt_ckpt_open_dirs(dir, step_name, 0, &root_fd, &step_fd);

  char name[64];
  zrt_ckpt_rank_file_name(name, sizeof name, v.rank, gen);
  if (st == ZRT_OK) st = zrt_ckpt_write_rank(eng, step_fd, step_dir, name, ctr.global_step);
  zrt_status mine = st;
  if (st != ZRT_OK) zrt_error_context(st, "rank %d saving '%s': ", v.rank, step_dir);
  /* every rank file is durable once this returns OK */
  st = zrt_ckpt_agree(eng, st, NULL, 0);
  if (st != ZRT_OK) {
    /* Another rank failed (a full disk): this rank's finished file has a
     * name of the new generation that no metadata references. */
    if (mine == ZRT_OK && step_fd >= 0) {
      unlinkat(step_fd, name, 0);
      fsync(step_fd);
    }
    goto done;
  }

  int meta_done = 0;
  if (v.rank == 0)
    st =
        zrt_ckpt_write_meta(eng, dir, root_fd, step_dir, step_fd, step_name, gen, user, &meta_done);
  float md = (float)meta_done;
  st = zrt_ckpt_agree(eng, st, &md, 1);
  if (st != ZRT_OK) {
    /* meta.json was not written (a full disk): no metadata references this
     * generation's rank files, so every rank removes its own. Once it is
     * written they are a checkpoint (of the step `latest` may name) and
     * stay. */
    if (md == 0.0f && step_fd >= 0) {
      unlinkat(step_fd, name, 0);
      fsync(step_fd);
    }
    goto done;
  }
  zrt_log0(ZRT_LOG_INFO, "checkpoint saved: %s", step_dir);
done:
  if (root_fd >= 0) close(root_fd);
  if (step_fd >= 0) close(step_fd);
  cJSON_Delete(user);
  return st;
}
