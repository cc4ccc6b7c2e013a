/*
 * safetensors.c — safetensors writer and validating reader (safetensors.h).
 *
 * The header is built and parsed with cJSON. Invariants: a zrt_st_file's
 * tensors are sorted by offset and tile [data_start, file_size) exactly;
 * a writer's `expected` equals the sum of its tensors' byte sizes and
 * finish refuses to commit unless exactly that many bytes were appended.
 */
#define _GNU_SOURCE
#include "safetensors.h"
#include "safe_file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference implementation refuses headers above 100 MB. */
#define ZRT_ST_MAX_HEADER (100ull * 1000 * 1000)

static const struct {
  const char *name;
  size_t size;
} zrt_st_dtypes[ZRT_ST_NDTYPES] = {
    [ZRT_ST_F64] = {"F64", 8},   [ZRT_ST_F32] = {"F32", 4}, [ZRT_ST_F16] = {"F16", 2},
    [ZRT_ST_BF16] = {"BF16", 2}, [ZRT_ST_I64] = {"I64", 8}, [ZRT_ST_I32] = {"I32", 4},
    [ZRT_ST_I16] = {"I16", 2},   [ZRT_ST_I8] = {"I8", 1},   [ZRT_ST_U8] = {"U8", 1},
    [ZRT_ST_BOOL] = {"BOOL", 1},
};

const char *zrt_st_dtype_name(zrt_st_dtype dt) {
  return (unsigned)dt < ZRT_ST_NDTYPES ? zrt_st_dtypes[dt].name : "?";
}
size_t zrt_st_dtype_size(zrt_st_dtype dt) {
  return (unsigned)dt < ZRT_ST_NDTYPES ? zrt_st_dtypes[dt].size : 0;
}
int zrt_st_dtype_parse(const char *name) {
  for (int i = 0; i < ZRT_ST_NDTYPES; i++)
    if (!strcmp(name, zrt_st_dtypes[i].name)) return i;
  return -1;
}

int64_t zrt_st_numel(const zrt_st_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
  return n;
}

/* ------------------------------------------------------------ writer */

struct zrt_st_writer {
  zrt_ckpt_writer w;
  uint64_t expected, written;
};

static uint64_t zrt_st_bytes_of(const zrt_st_tensor *t) {
  return (uint64_t)zrt_st_numel(t) * zrt_st_dtype_size(t->dtype);
}

zrt_status zrt_st_writer_begin(const char *path, const zrt_st_tensor *tensors, size_t n,
                               const char *const *meta_kv, zrt_st_writer **out) {
  *out = NULL;
  zrt_status st = ZRT_OK;
  char *text = NULL;
  cJSON *root = cJSON_CreateObject();
  zrt_st_writer *w = calloc(1, sizeof *w);
  if (!root || !w) {
    st = zrt_error(ZRT_ERR_OOM, "out of host memory building the header of '%s'", path);
    goto fail;
  }
  w->w.fd = w->w.dfd = -1;
  if (meta_kv && meta_kv[0]) {
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    for (size_t i = 0; meta_kv[i] && meta_kv[i + 1]; i += 2)
      cJSON_AddStringToObject(meta, meta_kv[i], meta_kv[i + 1]);
  }
  uint64_t off = 0;
  for (size_t i = 0; i < n; i++) {
    const zrt_st_tensor *t = &tensors[i];
    if ((unsigned)t->dtype >= ZRT_ST_NDTYPES || t->ndim < 0 || t->ndim > ZRT_ST_MAX_DIMS) {
      st = zrt_error(ZRT_ERR_INVALID_ARG, "safetensors tensor '%s': bad dtype or rank", t->name);
      goto fail;
    }
    if (!t->name[0] || !strcmp(t->name, "__metadata__") ||
        cJSON_GetObjectItemCaseSensitive(root, t->name)) {
      st = zrt_error(ZRT_ERR_INVALID_ARG,
                     "safetensors tensor name '%s' is empty, reserved or a "
                     "duplicate",
                     t->name);
      goto fail;
    }
    cJSON *e = cJSON_AddObjectToObject(root, t->name);
    cJSON_AddStringToObject(e, "dtype", zrt_st_dtype_name(t->dtype));
    cJSON *shape = cJSON_AddArrayToObject(e, "shape");
    for (int d = 0; d < t->ndim; d++)
      cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
    uint64_t nb = zrt_st_bytes_of(t);
    cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + nb)));
    off += nb;
  }
  text = cJSON_PrintUnformatted(root);
  if (!text) {
    st = zrt_error(ZRT_ERR_OOM, "out of host memory printing the header of '%s'", path);
    goto fail;
  }
  size_t hlen = strlen(text);
  size_t padded = ZRT_ALIGN_UP(hlen, 8);
  ZRT_CHECK_GOTO(zrt_ckpt_writer_open(&w->w, path), st, fail);
  unsigned char le[8];
  for (int b = 0; b < 8; b++) le[b] = (unsigned char)((uint64_t)padded >> (8 * b));
  ZRT_CHECK_GOTO(zrt_ckpt_writer_write(&w->w, le, 8), st, fail);
  ZRT_CHECK_GOTO(zrt_ckpt_writer_write(&w->w, text, hlen), st, fail);
  static const char spaces[8] = "        ";
  ZRT_CHECK_GOTO(zrt_ckpt_writer_write(&w->w, spaces, padded - hlen), st, fail);
  w->expected = off;
  cJSON_free(text);
  cJSON_Delete(root);
  *out = w;
  return ZRT_OK;
fail:
  if (text) cJSON_free(text);
  cJSON_Delete(root);
  if (w) zrt_ckpt_writer_abort(&w->w);
  free(w);
  return st;
}

zrt_status zrt_st_writer_append(zrt_st_writer *w, const void *data, size_t nbytes) {
  if (w->written + nbytes > w->expected)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "safetensors '%s': appending %zu bytes exceeds the declared %llu bytes",
                     w->w.path, nbytes, (unsigned long long)w->expected);
  ZRT_CHECK(zrt_ckpt_writer_write(&w->w, data, nbytes));
  w->written += nbytes;
  return ZRT_OK;
}

zrt_status zrt_st_writer_finish(zrt_st_writer *w) {
  zrt_status st;
  if (w->written != w->expected) {
    st = zrt_error(ZRT_ERR_INVALID_ARG, "safetensors '%s': %llu of %llu data bytes written",
                   w->w.path, (unsigned long long)w->written, (unsigned long long)w->expected);
    zrt_ckpt_writer_abort(&w->w);
  } else {
    st = zrt_ckpt_writer_commit(&w->w);
  }
  free(w);
  return st;
}

void zrt_st_writer_abort(zrt_st_writer *w) {
  if (!w) return;
  zrt_ckpt_writer_abort(&w->w);
  free(w);
}

zrt_status zrt_st_write(const char *path, const zrt_st_tensor *tensors, const void *const *data,
                        size_t n, const char *const *meta_kv) {
  zrt_st_writer *w;
  ZRT_CHECK(zrt_st_writer_begin(path, tensors, n, meta_kv, &w));
  for (size_t i = 0; i < n; i++) {
    zrt_status st = zrt_st_writer_append(w, data[i], (size_t)zrt_st_bytes_of(&tensors[i]));
    if (st != ZRT_OK) {
      zrt_st_writer_abort(w);
      return st;
    }
  }
  return zrt_st_writer_finish(w);
}

/* ------------------------------------------------------------ reader */

struct zrt_st_file {
  int fd;
  char path[4096];
  uint64_t file_size, data_start;
  zrt_st_tensor *t;
  size_t n;
  char **meta; /* key, value pairs */
  size_t nmeta;
};

static int zrt_st_cmp_name(const void *a, const void *b) {
  return strcmp((*(const zrt_st_tensor *const *)a)->name, (*(const zrt_st_tensor *const *)b)->name);
}

static int zrt_st_cmp_offset(const void *a, const void *b) {
  const zrt_st_tensor *x = a, *y = b;
  return x->offset < y->offset ? -1 : x->offset > y->offset ? 1 : 0;
}

/* A JSON number that is a non-negative integer representable exactly. */
static int zrt_st_uint(const cJSON *j, uint64_t *out) {
  if (!cJSON_IsNumber(j)) return 0;
  double v = j->valuedouble;
  if (!(v >= 0) || v > 9007199254740992.0 || v != (double)(uint64_t)v) return 0;
  *out = (uint64_t)v;
  return 1;
}

zrt_status zrt_st_open(const char *path, zrt_st_file **out) {
  *out = NULL;
  zrt_status st = ZRT_OK;
  char *htext = NULL;
  cJSON *root = NULL;
  zrt_st_file *f = calloc(1, sizeof *f);
  if (!f) return zrt_error(ZRT_ERR_OOM, "out of host memory opening '%s'", path);
  f->fd = -1;
  snprintf(f->path, sizeof f->path, "%s", path);
  ZRT_CHECK_GOTO(zrt_safe_open_read(-1, NULL, path, "safetensors file", &f->fd), st, fail);
  struct stat sb;
  if (fstat(f->fd, &sb) != 0) {
    st = zrt_error(ZRT_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
    goto fail;
  }
  f->file_size = (uint64_t)sb.st_size;
  unsigned char le[8];
  if (f->file_size < 8) {
    st = zrt_error(ZRT_ERR_IO,
                   "'%s' is not a safetensors file: %llu bytes, shorter than the "
                   "8-byte header length",
                   path, (unsigned long long)f->file_size);
    goto fail;
  }
  ZRT_CHECK_GOTO(zrt_ckpt_pread_exact(f->fd, path, le, 8, 0), st, fail);
  uint64_t hlen = 0;
  for (int b = 0; b < 8; b++) hlen |= (uint64_t)le[b] << (8 * b);
  if (hlen > ZRT_ST_MAX_HEADER || hlen > f->file_size - 8) {
    st = zrt_error(ZRT_ERR_IO,
                   "'%s': header length %llu does not fit the file (%llu bytes) — truncated or "
                   "not a safetensors file",
                   path, (unsigned long long)hlen, (unsigned long long)f->file_size);
    goto fail;
  }
  htext = malloc(hlen + 1);
  if (!htext) {
    st = zrt_error(ZRT_ERR_OOM, "out of host memory reading the header of '%s'", path);
    goto fail;
  }
  ZRT_CHECK_GOTO(zrt_ckpt_pread_exact(f->fd, path, htext, hlen, 8), st, fail);
  htext[hlen] = '\0';
  f->data_start = 8 + hlen;
  root = cJSON_Parse(htext);
  if (!root || !cJSON_IsObject(root)) {
    st = zrt_error(ZRT_ERR_IO, "'%s': the header is not a JSON object (corrupted?)", path);
    goto fail;
  }
  size_t cap = (size_t)cJSON_GetArraySize(root);
  f->t = calloc(cap ? cap : 1, sizeof *f->t);
  if (!f->t) {
    st = zrt_error(ZRT_ERR_OOM, "out of host memory for the tensor table of '%s'", path);
    goto fail;
  }
  uint64_t data_len = f->file_size - f->data_start;
  for (cJSON *e = root->child; e; e = e->next) {
    if (!strcmp(e->string, "__metadata__")) {
      if (f->meta) { /* a second one would overrun the first's table */
        st = zrt_error(ZRT_ERR_IO, "'%s': the header has __metadata__ twice", path);
        goto fail;
      }
      if (!cJSON_IsObject(e)) {
        st = zrt_error(ZRT_ERR_IO, "'%s': __metadata__ is not an object", path);
        goto fail;
      }
      size_t nm = (size_t)cJSON_GetArraySize(e);
      f->meta = calloc(2 * nm + 1, sizeof *f->meta);
      if (!f->meta) {
        st = zrt_error(ZRT_ERR_OOM, "out of host memory for the metadata of '%s'", path);
        goto fail;
      }
      for (cJSON *kv = e->child; kv; kv = kv->next) {
        if (!cJSON_IsString(kv)) {
          st = zrt_error(ZRT_ERR_IO, "'%s': __metadata__ value '%s' is not a string", path,
                         kv->string);
          goto fail;
        }
        f->meta[2 * f->nmeta] = strdup(kv->string);
        f->meta[2 * f->nmeta + 1] = strdup(kv->valuestring);
        f->nmeta++;
      }
      continue;
    }
    zrt_st_tensor *t = &f->t[f->n];
    if (strlen(e->string) >= sizeof t->name) {
      st = zrt_error(ZRT_ERR_IO, "'%s': tensor name longer than %zu bytes", path,
                     sizeof t->name - 1);
      goto fail;
    }
    snprintf(t->name, sizeof t->name, "%s", e->string);
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    int dt = cJSON_IsString(jd) ? zrt_st_dtype_parse(jd->valuestring) : -1;
    if (dt < 0) {
      st = zrt_error(ZRT_ERR_IO, "'%s': tensor '%s' has a missing or unknown dtype", path, t->name);
      goto fail;
    }
    t->dtype = (zrt_st_dtype)dt;
    if (!cJSON_IsArray(js) || cJSON_GetArraySize(js) > ZRT_ST_MAX_DIMS) {
      st = zrt_error(ZRT_ERR_IO, "'%s': tensor '%s' has a missing shape or more than %d dims", path,
                     t->name, ZRT_ST_MAX_DIMS);
      goto fail;
    }
    uint64_t numel = 1;
    for (cJSON *d = js->child; d; d = d->next) {
      uint64_t v;
      if (!zrt_st_uint(d, &v) || (v && numel > UINT64_MAX / 16 / v)) {
        st = zrt_error(ZRT_ERR_IO, "'%s': tensor '%s' has a bad dimension", path, t->name);
        goto fail;
      }
      t->shape[t->ndim++] = (int64_t)v;
      numel *= v;
    }
    uint64_t b0, b1;
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 ||
        !zrt_st_uint(cJSON_GetArrayItem(jo, 0), &b0) ||
        !zrt_st_uint(cJSON_GetArrayItem(jo, 1), &b1) || b1 < b0) {
      st = zrt_error(ZRT_ERR_IO, "'%s': tensor '%s' has bad data_offsets", path, t->name);
      goto fail;
    }
    t->nbytes = b1 - b0;
    if (t->nbytes != numel * zrt_st_dtype_size(t->dtype)) {
      st = zrt_error(
          ZRT_ERR_IO, "'%s': tensor '%s' spans %llu bytes but %s x %llu elements need %llu", path,
          t->name, (unsigned long long)t->nbytes, zrt_st_dtype_name(t->dtype),
          (unsigned long long)numel, (unsigned long long)(numel * zrt_st_dtype_size(t->dtype)));
      goto fail;
    }
    if (b1 > data_len) {
      st = zrt_error(ZRT_ERR_IO,
                     "'%s' is truncated: tensor '%s' ends at data byte %llu but the data section "
                     "has %llu bytes",
                     path, t->name, (unsigned long long)b1, (unsigned long long)data_len);
      goto fail;
    }
    t->offset = f->data_start + b0;
    f->n++;
  }
  qsort(f->t, f->n, sizeof *f->t, zrt_st_cmp_offset);
  uint64_t at = f->data_start;
  for (size_t i = 0; i < f->n; i++) {
    if (f->t[i].offset != at) {
      st = zrt_error(ZRT_ERR_IO,
                     "'%s': tensor '%s' starts at data byte %llu, expected %llu (gap "
                     "or overlap)",
                     path, f->t[i].name, (unsigned long long)(f->t[i].offset - f->data_start),
                     (unsigned long long)(at - f->data_start));
      goto fail;
    }
    at += f->t[i].nbytes;
  }
  if (at != f->file_size) {
    st = zrt_error(ZRT_ERR_IO, "'%s': %llu trailing bytes after the last tensor", path,
                   (unsigned long long)(f->file_size - at));
    goto fail;
  }
  /* a name twice would make lookups by name see only one of them */
  const zrt_st_tensor **byname = malloc((f->n ? f->n : 1) * sizeof *byname);
  if (!byname) {
    st = zrt_error(ZRT_ERR_OOM, "out of host memory checking the tensor names of '%s'", path);
    goto fail;
  }
  for (size_t i = 0; i < f->n; i++) byname[i] = &f->t[i];
  qsort(byname, f->n, sizeof *byname, zrt_st_cmp_name);
  for (size_t i = 1; i < f->n; i++)
    if (!strcmp(byname[i - 1]->name, byname[i]->name)) {
      st = zrt_error(ZRT_ERR_IO, "'%s': the header names tensor '%s' twice", path, byname[i]->name);
      free(byname);
      goto fail;
    }
  free(byname);
  free(htext);
  cJSON_Delete(root);
  *out = f;
  return ZRT_OK;
fail:
  free(htext);
  cJSON_Delete(root);
  zrt_st_close(f);
  return st;
}

void zrt_st_close(zrt_st_file *f) {
  if (!f) return;
  if (f->fd >= 0) close(f->fd);
  for (size_t i = 0; i < 2 * f->nmeta; i++) free(f->meta[i]);
  free(f->meta);
  free(f->t);
  free(f);
}

size_t zrt_st_count(const zrt_st_file *f) { return f->n; }
const zrt_st_tensor *zrt_st_get(const zrt_st_file *f, size_t i) {
  return i < f->n ? &f->t[i] : NULL;
}
const zrt_st_tensor *zrt_st_find(const zrt_st_file *f, const char *name) {
  for (size_t i = 0; i < f->n; i++)
    if (!strcmp(f->t[i].name, name)) return &f->t[i];
  return NULL;
}
const char *zrt_st_meta(const zrt_st_file *f, const char *key) {
  for (size_t i = 0; i < f->nmeta; i++)
    if (f->meta[2 * i] && !strcmp(f->meta[2 * i], key)) return f->meta[2 * i + 1];
  return NULL;
}
const char *zrt_st_path(const zrt_st_file *f) { return f->path; }

zrt_status zrt_st_read(const zrt_st_file *f, const zrt_st_tensor *t, uint64_t byte_off, void *dst,
                       size_t n) {
  if (byte_off > t->nbytes || n > t->nbytes - byte_off)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "'%s': read of %zu bytes at %llu is outside tensor '%s' (%llu bytes)", f->path,
                     n, (unsigned long long)byte_off, t->name, (unsigned long long)t->nbytes);
  return zrt_ckpt_pread_exact(f->fd, f->path, dst, n, t->offset + byte_off);
}
