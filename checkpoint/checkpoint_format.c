/*
 * checkpoint_format.c — metadata parsing and the validating rank-file reader
 * (checkpoint_format.h). Engine-free: `zrt consolidate` links it without
 * MPI initialisation.
 *
 * Invariants: a zrt_ckpt_meta that zrt_ckpt_meta_load returned OK is
 * self-consistent (params tile each module's [0, numel) in order, every
 * module's padded = part * world >= numel, one rank entry per rank); a
 * rank file is used only after its size, header CRC, table CRC (equal to
 * the one meta.json recorded) and section bounds were checked; data is
 * returned only from chunks whose CRC matched. meta.json is CRC-checked
 * before it is parsed, every number in it is range-checked before it is
 * converted, and every product of its numbers is overflow-checked. No
 * message ever quotes the contents of a file other than meta.json's own
 * fields (`latest` may be a planted link to a secret).
 */
#define _GNU_SOURCE
#include "checkpoint_format.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safe_file.h"

const char *zrt_ckpt_kind_name(int kind) {
  static const char *names[ZRT_CKPT_NKINDS] = {"master", "exp_avg", "exp_avg_sq", "param16"};
  return kind >= 0 && kind < ZRT_CKPT_NKINDS ? names[kind] : "?";
}

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static uint64_t get64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

void zrt_ckpt_header_pack(const zrt_ckpt_header *h, unsigned char out[ZRT_CKPT_HEADER_BYTES]) {
  memset(out, 0, ZRT_CKPT_HEADER_BYTES);
  memcpy(out, ZRT_CKPT_MAGIC, 8);
  put32(out + 8, h->version);
  put32(out + 12, h->rank);
  put32(out + 16, h->world);
  put32(out + 20, h->nsections);
  put64(out + 24, h->chunk_bytes);
  put64(out + 32, h->table_bytes);
  put64(out + 40, h->data_offset);
  put64(out + 48, h->step);
  put32(out + 56, h->table_crc);
  put32(out + 60, zrt_crc32c(0, out, 60));
}

void zrt_ckpt_section_pack(const zrt_ckpt_section *s, unsigned char out[ZRT_CKPT_SECTION_BYTES]) {
  memset(out, 0, ZRT_CKPT_SECTION_BYTES);
  memcpy(out, s->name, strnlen(s->name, 63));
  put32(out + 64, s->module);
  put32(out + 68, s->kind);
  put32(out + 72, s->dtype);
  put32(out + 76, s->nchunks);
  put64(out + 80, s->flat_off);
  put64(out + 88, s->count);
  put64(out + 96, s->file_off);
  /* bytes and crc_index are derived: bytes = count * elem size of dtype,
   * crc_index = running sum of nchunks (see rankfile_open). */
}

/* ------------------------------------------------------------ metadata */

/* "a, b (no meta.json), c" — what a directory holds, for error messages. */
static void zrt_ckpt_list_dir(const char *dir, char *buf, size_t len) {
  buf[0] = '\0';
  DIR *d = opendir(dir);
  if (!d) {
    snprintf(buf, len, "(cannot list: %s)", strerror(errno));
    return;
  }
  size_t used = 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char sub[4600];
    snprintf(sub, sizeof sub, "%s/%s/meta.json", dir, e->d_name);
    char full[4600];
    snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
    const char *note = zrt_ckpt_is_dir(full) && !zrt_ckpt_exists(sub) ? " (no meta.json)" : "";
    if (n == 20) {
      snprintf(buf + used, len - used, ", ...");
      break;
    }
    int k = snprintf(buf + used, len - used, "%s%s%s", n ? ", " : "", e->d_name, note);
    if (k < 0 || (size_t)k >= len - used) break;
    used += (size_t)k;
    n++;
  }
  closedir(d);
  if (!n) snprintf(buf, len, "nothing (empty directory)");
}

/* The longest `latest` zrt writes is "step_" + 19 digits + "\n". */
#define ZRT_CKPT_LATEST_MAX 64

static zrt_status zrt_ckpt_resolve(const char *dir, char *step_dir, size_t len) {
  char path[4600], listing[2048];
  struct stat sb;
  if (stat(dir, &sb) != 0) {
    int e = errno;
    return zrt_error(ZRT_ERR_IO, "no checkpoint at '%s': %s", dir,
                     e == ENOENT  ? "the directory does not exist"
                     : e == ELOOP ? "a loop of symbolic links"
                                  : strerror(e));
  }
  if (!S_ISDIR(sb.st_mode))
    return zrt_error(ZRT_ERR_IO, "no checkpoint at '%s': it is not a directory", dir);
  snprintf(path, sizeof path, "%s/meta.json", dir);
  if (zrt_ckpt_exists(path)) {
    snprintf(step_dir, len, "%s", dir);
    return ZRT_OK;
  }
  snprintf(path, sizeof path, "%s/latest", dir);
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return zrt_error(ZRT_ERR_IO, "cannot open '%s': %s", dir, strerror(errno));
  if (fstatat(dfd, "latest", &sb, AT_SYMLINK_NOFOLLOW) != 0) {
    close(dfd);
    zrt_ckpt_list_dir(dir, listing, sizeof listing);
    return zrt_error(ZRT_ERR_IO,
                     "no checkpoint in '%s': looked for '%s/latest' (a checkpoint root) and "
                     "'%s/meta.json' (a step directory); it holds: %s",
                     dir, dir, dir, listing);
  }
  char *txt = NULL;
  size_t n = 0;
  zrt_status st = ZRT_OK;
  if (S_ISREG(sb.st_mode) && sb.st_size > ZRT_CKPT_LATEST_MAX)
    st = zrt_error(ZRT_ERR_IO,
                   "'%s' should hold one line 'step_<N>' but is %lld bytes long (not written by "
                   "zrt; restore it or load a step directory directly)",
                   path, (long long)sb.st_size);
  else
    st = zrt_ckpt_read_fileat(dfd, dir, "latest", &txt, &n);
  close(dfd);
  if (st != ZRT_OK) return st;
  while (n && (txt[n - 1] == '\n' || txt[n - 1] == ' ' || txt[n - 1] == '\r')) txt[--n] = '\0';
  int ok = n > 5 && n <= 5 + 19 && !strncmp(txt, "step_", 5) && strlen(txt) == n;
  for (size_t i = 5; ok && i < n; i++) ok = txt[i] >= '0' && txt[i] <= '9';
  if (!ok) {
    /* never quote it: a planted `latest` could point at someone's secret */
    free(txt);
    return zrt_error(ZRT_ERR_IO,
                     "'%s' should hold one line 'step_<N>' (N a number) but holds something else "
                     "(%zu bytes; not written by zrt — restore it or load a step directory "
                     "directly)",
                     path, n);
  }
  snprintf(step_dir, len, "%s/%s", dir, txt);
  snprintf(path, sizeof path, "%s/meta.json", step_dir);
  if (!zrt_ckpt_exists(path)) {
    zrt_ckpt_list_dir(dir, listing, sizeof listing);
    st = zrt_error(ZRT_ERR_IO,
                   "'%s/latest' names '%s' but '%s' does not exist (checkpoint deleted "
                   "or moved?); '%s' holds: %s",
                   dir, txt, path, dir, listing);
    free(txt);
    return st;
  }
  free(txt);
  return ZRT_OK;
}

/* An exactly representable integer in int64_t's range (the double is
 * compared before it is converted: a cast of 1e30 is undefined). */
static int zrt_json_i64(const cJSON *obj, const char *key, int64_t *out) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!cJSON_IsNumber(j)) return 0;
  double v = j->valuedouble;
  if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) return 0;
  *out = (int64_t)v;
  return (double)*out == v;
}

zrt_status zrt_ckpt_meta_seal(char **text) {
  size_t n = strlen(*text);
  /* cJSON_Print ends an object with "\n}" */
  if (n < 2 || strcmp(*text + n - 2, "\n}"))
    return zrt_error(ZRT_ERR_INTERNAL, "checkpoint: unexpected metadata text to seal");
  n -= 2;
  uint32_t crc = zrt_crc32c(0, *text, n);
  size_t cap = n + sizeof ZRT_CKPT_META_KEY + 16;
  char *t = realloc(*text, cap);
  if (!t) return zrt_error(ZRT_ERR_OOM, "checkpoint: out of host memory sealing meta.json");
  snprintf(t + n, cap - n, "%s%08x\"\n}\n", ZRT_CKPT_META_KEY, crc);
  *text = t;
  return ZRT_OK;
}

/* A meta.json from before the seal (zrt 0.1): whole (its last non-blank
 * byte closes the object) and without any meta_crc32c member. A sealed
 * file cut short or with its seal edited away is not this. */
static int zrt_ckpt_meta_legacy(const char *text, size_t len) {
  size_t e = len;
  while (e > 0 &&
         (text[e - 1] == '\n' || text[e - 1] == ' ' || text[e - 1] == '\t' || text[e - 1] == '\r'))
    e--;
  if (e == 0 || text[e - 1] != '}') return 0;
  const char *k = "\"meta_crc32c\"";
  size_t kl = strlen(k);
  for (size_t i = 0; i + kl <= len; i++)
    if (!memcmp(text + i, k, kl)) return 0;
  return 1;
}

zrt_status zrt_ckpt_meta_check(const char *text, size_t len, const char *path) {
  const size_t klen = sizeof ZRT_CKPT_META_KEY - 1, tail = klen + 8 + 4;
  if (len < tail || memcmp(text + len - tail, ZRT_CKPT_META_KEY, klen) ||
      memcmp(text + len - 4, "\"\n}\n", 4)) {
    if (zrt_ckpt_meta_legacy(text, len)) {
      zrt_log_once("ckpt.unsealed", ZRT_LOG_WARN,
                   "'%s' has no CRC32C seal: written by a zrt from before meta.json was sealed; "
                   "loading it with every number range-checked (checkpoints saved from now on "
                   "are sealed)",
                   path);
      return ZRT_OK;
    }
    return zrt_error(ZRT_ERR_IO,
                     "'%s' has no CRC32C seal at its end (\"meta_crc32c\" as the last member): "
                     "cut short, edited, or not written by this zrt",
                     path);
  }
  unsigned stored = 0;
  for (size_t i = 0; i < 8; i++) {
    char c = text[len - 12 + i];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0)
      return zrt_error(ZRT_ERR_IO, "'%s': its meta_crc32c is not 8 lowercase hex digits", path);
    stored = stored << 4 | (unsigned)d;
  }
  uint32_t got = zrt_crc32c(0, text, len - tail);
  if (got != stored)
    return zrt_error(ZRT_ERR_IO,
                     "'%s' is corrupted: it fails its CRC32C check (stored 0x%08x, computed "
                     "0x%08x); the checkpoint's metadata cannot be trusted — use another step",
                     path, stored, got);
  return ZRT_OK;
}

zrt_status zrt_ckpt_meta_load(const char *dir, zrt_ckpt_meta *m) {
  memset(m, 0, sizeof *m);
  char step_dir[sizeof m->step_dir], path[4600], *text = NULL;
  size_t len = 0;
  ZRT_CHECK(zrt_ckpt_resolve(dir, step_dir, sizeof step_dir));
  snprintf(path, sizeof path, "%s/meta.json", step_dir);
  /* the step directory may be a link the user named; the files zrt wrote
   * in it are read like `latest`: never through a link */
  int dfd = open(step_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return zrt_error(ZRT_ERR_IO, "cannot open '%s': %s", step_dir, strerror(errno));
  zrt_status rs = zrt_ckpt_read_fileat(dfd, step_dir, "meta.json", &text, &len);
  close(dfd);
  ZRT_CHECK(rs);
  zrt_status st = zrt_ckpt_meta_check(text, len, path);
  if (st == ZRT_OK) st = zrt_ckpt_meta_parse(text, path, step_dir, m);
  free(text);
  return st;
}

zrt_status zrt_ckpt_meta_parse(const char *text, const char *path, const char *step_dir,
                               zrt_ckpt_meta *m) {
  memset(m, 0, sizeof *m);
  zrt_status st = ZRT_OK;
  snprintf(m->step_dir, sizeof m->step_dir, "%s", step_dir);
  m->json_text = strdup(text);
  if (!m->json_text) return zrt_error(ZRT_ERR_OOM, "out of host memory parsing '%s'", path);
  m->root = cJSON_Parse(m->json_text);
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(m->root, "format");
  if (!m->root || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "zrt-checkpoint")) {
    st = zrt_error(ZRT_ERR_IO, "'%s' is not zrt checkpoint metadata (corrupted or foreign file)",
                   path);
    goto fail;
  }
#define META_BAD(what)                                                                             \
  do {                                                                                             \
    st = zrt_error(ZRT_ERR_IO, "'%s': malformed metadata: %s", path, what);                        \
    goto fail;                                                                                     \
  } while (0)
  int64_t v, world, stage;
  if (!zrt_json_i64(m->root, "version", &v) || v != ZRT_CKPT_VERSION)
    META_BAD("unsupported version");
  if (!zrt_json_i64(m->root, "step", &m->step))
    META_BAD("step is missing or not an integer in range");
  if (!zrt_json_i64(m->root, "world_size", &world) || world < 1 || world > 1 << 20)
    META_BAD("bad world_size");
  if (!zrt_json_i64(m->root, "zero_stage", &stage) || stage < 0 || stage > 3)
    META_BAD("bad zero_stage");
  m->world = (int)world;
  m->stage = (int)stage;
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(m->root, "dtype");
  if (!cJSON_IsString(dt)) META_BAD("no dtype");
  if (!strcmp(dt->valuestring, "fp32"))
    m->dtype = ZRT_F32;
  else if (!strcmp(dt->valuestring, "fp16"))
    m->dtype = ZRT_F16;
  else if (!strcmp(dt->valuestring, "bf16"))
    m->dtype = ZRT_BF16;
  else
    META_BAD("unknown dtype");
  const cJSON *states = cJSON_GetObjectItemCaseSensitive(m->root, "states");
  if (!cJSON_IsArray(states)) META_BAD("no states");
  const cJSON *s;
  cJSON_ArrayForEach(s, states) {
    for (int k = 0; k < ZRT_CKPT_NKINDS; k++)
      if (cJSON_IsString(s) && !strcmp(s->valuestring, zrt_ckpt_kind_name(k))) m->has_kind[k] = 1;
  }
  if (!m->has_kind[ZRT_CKPT_MASTER]) META_BAD("states lack master");

  const cJSON *mods = cJSON_GetObjectItemCaseSensitive(m->root, "modules");
  if (!cJSON_IsArray(mods) || cJSON_GetArraySize(mods) < 1) META_BAD("no modules");
  m->nmodules = cJSON_GetArraySize(mods);
  int np = 0;
  const cJSON *mj;
  cJSON_ArrayForEach(mj, mods) np +=
      cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(mj, "params"));
  m->modules = calloc((size_t)m->nmodules, sizeof *m->modules);
  m->params = calloc(np ? (size_t)np : 1, sizeof *m->params);
  m->ranks = calloc((size_t)m->world, sizeof *m->ranks);
  if (!m->modules || !m->params || !m->ranks) {
    st = zrt_error(ZRT_ERR_OOM, "out of host memory parsing '%s'", path);
    goto fail;
  }
  int mi = 0;
  cJSON_ArrayForEach(mj, mods) {
    zrt_ckpt_module_meta *mm = &m->modules[mi];
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(mj, "name");
    if (!cJSON_IsString(nm) || !zrt_json_i64(mj, "numel", &mm->numel) ||
        !zrt_json_i64(mj, "padded", &mm->padded) || !zrt_json_i64(mj, "part", &mm->part))
      META_BAD("bad module entry");
    int64_t prod;
    if (mm->numel < 0 || mm->part < 0 || mm->padded > ZRT_CKPT_MAX_ELEMS ||
        __builtin_mul_overflow(mm->part, world, &prod) || prod != mm->padded ||
        mm->padded < mm->numel)
      META_BAD("bad module entry (numel, padded, part and world_size disagree or overflow)");
    snprintf(mm->name, sizeof mm->name, "%s", nm->valuestring);
    mm->first_param = m->nparams;
    int64_t at = 0;
    const cJSON *pj;
    cJSON_ArrayForEach(pj, cJSON_GetObjectItemCaseSensitive(mj, "params")) {
      zrt_ckpt_param_meta *p = &m->params[m->nparams];
      const cJSON *pn = cJSON_GetObjectItemCaseSensitive(pj, "name");
      const cJSON *sh = cJSON_GetObjectItemCaseSensitive(pj, "shape");
      if (!cJSON_IsString(pn) || !cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > 8 ||
          !zrt_json_i64(pj, "offset", &p->offset) || p->offset < 0)
        META_BAD("bad param entry");
      snprintf(p->name, sizeof p->name, "%s", pn->valuestring);
      p->numel = 1;
      const cJSON *d;
      cJSON_ArrayForEach(d, sh) {
        double v = cJSON_IsNumber(d) ? d->valuedouble : -1;
        if (!(v >= 0 && v <= (double)ZRT_CKPT_MAX_ELEMS) || v != (double)(int64_t)v)
          META_BAD("bad param shape (a dimension is not an integer in range)");
        p->shape[p->ndim++] = (int64_t)v;
        if (__builtin_mul_overflow(p->numel, (int64_t)v, &p->numel) ||
            p->numel > ZRT_CKPT_MAX_ELEMS)
          META_BAD("bad param shape (the product of its dimensions overflows)");
      }
      if (p->offset != at) META_BAD("param offsets do not tile the module");
      if (__builtin_add_overflow(at, p->numel, &at) || at > mm->numel)
        META_BAD("params reach beyond their module's numel");
      p->module = mi;
      m->nparams++;
      mm->nparams++;
    }
    if (at != mm->numel) META_BAD("module numel differs from its params");
    mi++;
  }
  const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(m->root, "ranks");
  if (!cJSON_IsArray(ranks) || cJSON_GetArraySize(ranks) != m->world)
    META_BAD("ranks list does not match world_size");
  int ri = 0;
  const cJSON *rj;
  cJSON_ArrayForEach(rj, ranks) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(rj, "file");
    int64_t bytes, crc;
    if (!cJSON_IsString(f) || strchr(f->valuestring, '/') || !zrt_json_i64(rj, "bytes", &bytes) ||
        !zrt_json_i64(rj, "table_crc32c", &crc) || crc < 0 || crc > 0xffffffffll || bytes < 0)
      META_BAD("bad rank entry");
    snprintf(m->ranks[ri].file, sizeof m->ranks[ri].file, "%s", f->valuestring);
    m->ranks[ri].bytes = (uint64_t)bytes;
    m->ranks[ri].table_crc = (uint32_t)crc;
    ri++;
  }
#undef META_BAD
  return ZRT_OK;
fail:
  zrt_ckpt_meta_free(m);
  return st;
}

void zrt_ckpt_meta_free(zrt_ckpt_meta *m) {
  if (!m) return;
  cJSON_Delete(m->root);
  free(m->json_text);
  free(m->modules);
  free(m->params);
  free(m->ranks);
  memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------ reader */

zrt_status zrt_ckpt_reader_init(zrt_ckpt_reader *r, const zrt_ckpt_meta *meta) {
  memset(r, 0, sizeof *r);
  r->meta = meta;
  r->files = calloc((size_t)meta->world, sizeof *r->files);
  if (!r->files) return zrt_error(ZRT_ERR_OOM, "out of host memory for the checkpoint reader");
  for (int i = 0; i < meta->world; i++) r->files[i].fd = -1;
  return ZRT_OK;
}

static void zrt_ckpt_rankfile_close(zrt_ckpt_rankfile *f) {
  if (f->fd >= 0) close(f->fd);
  free(f->sec);
  free(f->crcs);
  f->fd = -1;
  f->sec = NULL;
  f->crcs = NULL;
}

void zrt_ckpt_reader_free(zrt_ckpt_reader *r) {
  if (!r || !r->files) return;
  for (int i = 0; i < r->meta->world; i++) zrt_ckpt_rankfile_close(&r->files[i]);
  free(r->files);
  free(r->chunk);
  memset(r, 0, sizeof *r);
}

static zrt_status zrt_ckpt_rankfile_open(zrt_ckpt_reader *r, int rank) {
  zrt_ckpt_rankfile *f = &r->files[rank];
  if (f->fd >= 0) return ZRT_OK;
  const zrt_ckpt_meta *m = r->meta;
  const zrt_ckpt_rank_meta *rm = &m->ranks[rank];
  zrt_status st = ZRT_OK;
  unsigned char *table = NULL;
  snprintf(f->path, sizeof f->path, "%s/%s", m->step_dir, rm->file);
  int dfd = open(m->step_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    st = zrt_error(ZRT_ERR_IO, "cannot open '%s': %s", m->step_dir, strerror(errno));
    goto fail;
  }
  /* never through a link, like meta.json and `latest` */
  st = zrt_safe_open_read(dfd, m->step_dir, rm->file, "checkpoint file", &f->fd);
  close(dfd);
  if (st != ZRT_OK) {
    zrt_error_context(st, "rank %d of %d: ", rank, m->world);
    goto fail;
  }
  struct stat sb;
  if (fstat(f->fd, &sb) != 0) {
    st = zrt_error(ZRT_ERR_IO, "cannot stat '%s': %s", f->path, strerror(errno));
    goto fail;
  }
  if ((uint64_t)sb.st_size != rm->bytes) {
    st = zrt_error(ZRT_ERR_IO, "checkpoint file '%s' is %s: %lld bytes, the metadata says %llu",
                   f->path, (uint64_t)sb.st_size < rm->bytes ? "truncated" : "the wrong size",
                   (long long)sb.st_size, (unsigned long long)rm->bytes);
    goto fail;
  }
  unsigned char hb[ZRT_CKPT_HEADER_BYTES];
  if (rm->bytes < sizeof hb) {
    st = zrt_error(ZRT_ERR_IO, "checkpoint file '%s' is truncated: shorter than its header",
                   f->path);
    goto fail;
  }
  ZRT_CHECK_GOTO(zrt_ckpt_pread_exact(f->fd, f->path, hb, sizeof hb, 0), st, fail);
  if (memcmp(hb, ZRT_CKPT_MAGIC, 8) || get32(hb + 60) != zrt_crc32c(0, hb, 60)) {
    st = zrt_error(ZRT_ERR_IO,
                   "checkpoint file '%s' is corrupted: section 'header' fails its "
                   "magic/CRC32C check",
                   f->path);
    goto fail;
  }
  zrt_ckpt_header *h = &f->h;
  h->version = get32(hb + 8);
  h->rank = get32(hb + 12);
  h->world = get32(hb + 16);
  h->nsections = get32(hb + 20);
  h->chunk_bytes = get64(hb + 24);
  h->table_bytes = get64(hb + 32);
  h->data_offset = get64(hb + 40);
  h->step = get64(hb + 48);
  h->table_crc = get32(hb + 56);
  if (h->version != ZRT_CKPT_VERSION || h->rank != (uint32_t)rank ||
      h->world != (uint32_t)m->world || h->step != (uint64_t)m->step || h->chunk_bytes == 0 ||
      h->chunk_bytes > (1u << 30) || h->table_crc != rm->table_crc ||
      h->table_bytes > rm->bytes - sizeof hb || h->data_offset != sizeof hb + h->table_bytes ||
      (uint64_t)h->nsections * ZRT_CKPT_SECTION_BYTES > h->table_bytes) {
    st = zrt_error(ZRT_ERR_IO,
                   "checkpoint file '%s' does not belong to this checkpoint: its header says rank "
                   "%u of %u, step %llu, table CRC 0x%08x; meta.json expects rank %d of %d, step "
                   "%lld, table CRC 0x%08x (a stale or mixed-up file)",
                   f->path, h->rank, h->world, (unsigned long long)h->step, h->table_crc, rank,
                   m->world, (long long)m->step, rm->table_crc);
    goto fail;
  }
  table = malloc(h->table_bytes ? h->table_bytes : 1);
  if (!table) {
    st = zrt_error(ZRT_ERR_OOM, "out of host memory reading the table of '%s'", f->path);
    goto fail;
  }
  ZRT_CHECK_GOTO(zrt_ckpt_pread_exact(f->fd, f->path, table, h->table_bytes, sizeof hb), st, fail);
  uint32_t crc = zrt_crc32c(0, table, h->table_bytes);
  if (crc != h->table_crc) {
    st = zrt_error(ZRT_ERR_IO,
                   "checkpoint file '%s' is corrupted: section 'table' fails its CRC32C check "
                   "(stored 0x%08x, computed 0x%08x)",
                   f->path, h->table_crc, crc);
    goto fail;
  }
  f->sec = calloc(h->nsections ? h->nsections : 1, sizeof *f->sec);
  if (!f->sec) {
    st = zrt_error(ZRT_ERR_OOM, "out of host memory for the sections of '%s'", f->path);
    goto fail;
  }
  uint64_t crc_index = 0, data_at = h->data_offset;
  for (uint32_t i = 0; i < h->nsections; i++) {
    const unsigned char *p = table + (size_t)i * ZRT_CKPT_SECTION_BYTES;
    zrt_ckpt_section *s = &f->sec[i];
    memcpy(s->name, p, 63);
    s->name[63] = '\0';
    s->module = get32(p + 64);
    s->kind = get32(p + 68);
    s->dtype = get32(p + 72);
    s->nchunks = get32(p + 76);
    s->flat_off = get64(p + 80);
    s->count = get64(p + 88);
    s->file_off = get64(p + 96);
    size_t esz = s->dtype <= ZRT_BF16 ? zrt_dtype_size((zrt_dtype)s->dtype) : 0;
    s->bytes = s->count * esz;
    s->crc_index = crc_index;
    crc_index += s->nchunks;
    if (!esz || s->kind >= ZRT_CKPT_NKINDS || s->module >= (uint32_t)m->nmodules ||
        s->file_off != data_at || s->nchunks != (s->bytes + h->chunk_bytes - 1) / h->chunk_bytes ||
        s->flat_off + s->count > (uint64_t)m->modules[s->module].padded) {
      st = zrt_error(ZRT_ERR_IO,
                     "checkpoint file '%s': section '%s' is inconsistent with the "
                     "metadata",
                     f->path, s->name);
      goto fail;
    }
    data_at += s->bytes;
  }
  if (data_at != rm->bytes ||
      (uint64_t)h->nsections * ZRT_CKPT_SECTION_BYTES + crc_index * 4 != h->table_bytes) {
    st = zrt_error(ZRT_ERR_IO, "checkpoint file '%s': sections do not tile the file", f->path);
    goto fail;
  }
  f->ncrcs = crc_index;
  f->crcs = malloc(crc_index ? crc_index * 4 : 1);
  if (!f->crcs) {
    st = zrt_error(ZRT_ERR_OOM, "out of host memory for the CRCs of '%s'", f->path);
    goto fail;
  }
  memcpy(f->crcs, table + (size_t)h->nsections * ZRT_CKPT_SECTION_BYTES, crc_index * 4);
  if (r->chunk_cap < h->chunk_bytes) {
    free(r->chunk);
    r->chunk = malloc(h->chunk_bytes);
    r->chunk_cap = r->chunk ? h->chunk_bytes : 0;
    if (!r->chunk) {
      st = zrt_error(ZRT_ERR_OOM, "out of host memory for the read chunk");
      goto fail;
    }
  }
  free(table);
  return ZRT_OK;
fail:
  free(table);
  zrt_ckpt_rankfile_close(f);
  return st;
}

zrt_status zrt_ckpt_reader_open_all(zrt_ckpt_reader *r) {
  for (int q = 0; q < r->meta->world; q++) ZRT_CHECK(zrt_ckpt_rankfile_open(r, q));
  return ZRT_OK;
}

/* Reads section bytes [a, b) of s into dst, chunk by chunk, verifying each
 * chunk's CRC before any of its bytes are used. */
static zrt_status zrt_ckpt_read_section(zrt_ckpt_reader *r, zrt_ckpt_rankfile *f,
                                        const zrt_ckpt_section *s, uint64_t a, uint64_t b,
                                        unsigned char *dst) {
  uint64_t cb = f->h.chunk_bytes;
  const char *mname = r->meta->modules[s->module].name;
  for (uint64_t c = a / cb; c * cb < b; c++) {
    uint64_t c0 = c * cb, c1 = ZRT_MIN(c0 + cb, s->bytes);
    ZRT_CHECK(zrt_ckpt_pread_exact(f->fd, f->path, r->chunk, c1 - c0, s->file_off + c0));
    uint32_t want = f->crcs[s->crc_index + c], got = zrt_crc32c(0, r->chunk, c1 - c0);
    if (want != got)
      return zrt_error(ZRT_ERR_IO,
                       "checkpoint file '%s' is corrupted: section '%s' (%s of module '%s') chunk "
                       "%llu (bytes %llu..%llu) fails its CRC32C check (stored 0x%08x, computed "
                       "0x%08x)",
                       f->path, s->name, zrt_ckpt_kind_name((int)s->kind), mname,
                       (unsigned long long)c, (unsigned long long)c0, (unsigned long long)c1, want,
                       got);
    uint64_t lo = ZRT_MAX(a, c0), hi = ZRT_MIN(b, c1);
    if (dst) memcpy(dst + (lo - a), r->chunk + (lo - c0), hi - lo);
  }
  return ZRT_OK;
}

zrt_status zrt_ckpt_read_range(zrt_ckpt_reader *r, int module, int kind, int64_t flat_off,
                               int64_t count, void *dst) {
  const zrt_ckpt_meta *m = r->meta;
  const zrt_ckpt_module_meta *mm = &m->modules[module];
  if (!m->has_kind[kind])
    return zrt_error(ZRT_ERR_INVALID_ARG, "checkpoint '%s' holds no %s state", m->step_dir,
                     zrt_ckpt_kind_name(kind));
  size_t esz = kind == ZRT_CKPT_PARAM16 ? zrt_dtype_size(m->dtype) : 4;
  unsigned char *out = dst;
  memset(out, 0, (size_t)count * esz);
  /* Reads cover the old padding too, so that every chunk a rank owns is
   * CRC-checked even where it holds only padding; the values read there are
   * then zeroed (padding is zero by invariant). */
  int64_t end = ZRT_MIN(flat_off + count, mm->padded);
  for (int64_t x = flat_off; x < end;) {
    int q = (int)(x / mm->part);
    int64_t q_end = ZRT_MIN((int64_t)(q + 1) * mm->part, end);
    ZRT_CHECK(zrt_ckpt_rankfile_open(r, q));
    zrt_ckpt_rankfile *f = &r->files[q];
    const zrt_ckpt_section *s = NULL;
    for (uint32_t i = 0; i < f->h.nsections; i++)
      if (f->sec[i].module == (uint32_t)module && f->sec[i].kind == (uint32_t)kind &&
          (int64_t)f->sec[i].flat_off <= x &&
          (int64_t)(f->sec[i].flat_off + f->sec[i].count) >= q_end)
        s = &f->sec[i];
    if (!s)
      return zrt_error(ZRT_ERR_IO,
                       "checkpoint file '%s' lacks the %s of module '%s' elements %lld..%lld",
                       f->path, zrt_ckpt_kind_name(kind), mm->name, (long long)x, (long long)q_end);
    size_t sesz = zrt_dtype_size((zrt_dtype)s->dtype);
    if (sesz != esz)
      return zrt_error(ZRT_ERR_IO, "checkpoint file '%s': section '%s' has the wrong dtype",
                       f->path, s->name);
    ZRT_CHECK(zrt_ckpt_read_section(r, f, s, (uint64_t)(x - (int64_t)s->flat_off) * esz,
                                    (uint64_t)(q_end - (int64_t)s->flat_off) * esz,
                                    out + (size_t)(x - flat_off) * esz));
    x = q_end;
  }
  if (end > mm->numel && mm->numel > flat_off)
    memset(out + (size_t)(mm->numel - flat_off) * esz, 0, (size_t)(end - mm->numel) * esz);
  else if (end > mm->numel && end > flat_off)
    memset(out, 0, (size_t)(end - flat_off) * esz);
  return ZRT_OK;
}

zrt_status zrt_ckpt_reader_verify_all(zrt_ckpt_reader *r) {
  for (int q = 0; q < r->meta->world; q++) {
    ZRT_CHECK(zrt_ckpt_rankfile_open(r, q));
    zrt_ckpt_rankfile *f = &r->files[q];
    for (uint32_t i = 0; i < f->h.nsections; i++)
      ZRT_CHECK(zrt_ckpt_read_section(r, f, &f->sec[i], 0, f->sec[i].bytes, NULL));
  }
  return ZRT_OK;
}
