/*
 * safetensors_set.c — Hugging Face weight directories and sharded
 * checkpoints as one tensor namespace (safetensors_set.h), and the public
 * zrt_weights_compare.
 *
 * Invariant: a set holds between one and ZRT_ST_SET_MAX shards, every one
 * validated by zrt_st_open; lookups scan the shards in index order.
 */
#define _GNU_SOURCE
#include "safetensors_set.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint_io.h"
#include "dtype.h"
#include "internal.h"
#include "safe_file.h"

/* HF shards of a 5 GB limit: 1 TB models stay far below this. */
#define ZRT_ST_SET_MAX 1024
#define ZRT_ST_SET_PREFIX "transformer."

struct zrt_st_set {
  int n;
  zrt_st_file *f[ZRT_ST_SET_MAX];
};

static int is_dir(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}
/* Any kind of entry: what it is (a FIFO, a directory) is the opener's
 * message (safe_file.h), never "missing". */
static int exists(const char *p) {
  struct stat sb;
  return lstat(p, &sb) == 0;
}
static int ends_with(const char *s, const char *t) {
  size_t a = strlen(s), b = strlen(t);
  return a >= b && !strcmp(s + a - b, t);
}

/* Opens every shard the index's weight_map names, relative to the index's
 * directory, each once. */
static zrt_status open_index(zrt_st_set *s, const char *index) {
  zrt_status st = ZRT_OK;
  char *txt = NULL;
  cJSON *root = NULL;
  st = zrt_ckpt_read_file(index, &txt, NULL);
  if (st != ZRT_OK) return zrt_error_context(st, "the shard index: ");
  root = cJSON_Parse(txt);
  const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  if (!cJSON_IsObject(wm) || !wm->child) {
    st = zrt_error(ZRT_ERR_IO,
                   "'%s' is not a safetensors shard index: it needs a non-empty \"weight_map\" "
                   "object of tensor name -> shard file (what save_pretrained writes)",
                   index);
    goto done;
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", index);
  char *slash = strrchr(dir, '/');
  if (slash)
    slash[1] = '\0';
  else
    dir[0] = '\0';
  const char *seen[ZRT_ST_SET_MAX];
  const cJSON *e;
  cJSON_ArrayForEach(e, wm) {
    if (!cJSON_IsString(e) || strchr(e->valuestring, '/')) {
      st = zrt_error(ZRT_ERR_IO,
                     "'%s': weight_map[\"%s\"] must be a shard file name in the same "
                     "directory",
                     index, e->string);
      goto done;
    }
    int dup = 0;
    for (int i = 0; i < s->n && !dup; i++) dup = !strcmp(seen[i], e->valuestring);
    if (dup) continue;
    if (s->n == ZRT_ST_SET_MAX) {
      st = zrt_error(ZRT_ERR_IO, "'%s' names more than %d shards", index, ZRT_ST_SET_MAX);
      goto done;
    }
    char p[8192];
    snprintf(p, sizeof p, "%s%s", dir, e->valuestring);
    if (!exists(p)) {
      st = zrt_error(ZRT_ERR_IO, "'%s' names the shard '%s' (for tensor '%s'), which is missing",
                     index, p, e->string);
      goto done;
    }
    ZRT_CHECK_GOTO(zrt_st_open(p, &s->f[s->n]), st, done);
    seen[s->n++] = e->valuestring;
  }
done:
  cJSON_Delete(root);
  free(txt);
  return st;
}

zrt_status zrt_st_set_open(const char *path, zrt_st_set **out) {
  zrt_status st = ZRT_OK;
  if (!path || !out) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_st_set_open: NULL argument");
  *out = NULL;
  zrt_st_set *s = calloc(1, sizeof *s);
  if (!s) return zrt_error(ZRT_ERR_OOM, "zrt_st_set_open: out of host memory");
  if (is_dir(path)) {
    char single[4200], index[4200];
    snprintf(single, sizeof single, "%s/model.safetensors", path);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", path);
    if (exists(single)) {
      ZRT_CHECK_GOTO(zrt_st_open(single, &s->f[0]), st, fail);
      s->n = 1;
    } else if (exists(index)) {
      ZRT_CHECK_GOTO(open_index(s, index), st, fail);
    } else {
      st = zrt_error(ZRT_ERR_IO,
                     "'%s' holds no weights: looked for model.safetensors and "
                     "model.safetensors.index.json (what save_pretrained writes)",
                     path);
      goto fail;
    }
  } else if (ends_with(path, ".json")) {
    ZRT_CHECK_GOTO(open_index(s, path), st, fail);
  } else {
    ZRT_CHECK_GOTO(zrt_st_open(path, &s->f[0]), st, fail);
    s->n = 1;
  }
  *out = s;
  return ZRT_OK;
fail:
  zrt_st_set_close(s);
  return st;
}

void zrt_st_set_close(zrt_st_set *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) zrt_st_close(s->f[i]);
  free(s);
}

int zrt_st_set_nfiles(const zrt_st_set *s) { return s->n; }
const zrt_st_file *zrt_st_set_file(const zrt_st_set *s, int i) { return s->f[i]; }

const zrt_st_tensor *zrt_st_set_find(const zrt_st_set *s, const char *name,
                                     const zrt_st_file **file) {
  char pre[512];
  snprintf(pre, sizeof pre, "%s%s", ZRT_ST_SET_PREFIX, name);
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < s->n; i++) {
      const zrt_st_tensor *t = zrt_st_find(s->f[i], pass ? pre : name);
      if (t) {
        if (file) *file = s->f[i];
        return t;
      }
    }
  return NULL;
}

zrt_status zrt_st_set_read_f32(const zrt_st_file *f, const zrt_st_tensor *t, int64_t e0, int64_t n,
                               float *dst, void *scratch) {
  if (t->dtype != ZRT_ST_F32 && t->dtype != ZRT_ST_F16 && t->dtype != ZRT_ST_BF16)
    return zrt_error(ZRT_ERR_IO, "%s: tensor '%s' has dtype %s; zrt loads F32, F16 or BF16",
                     zrt_st_path(f), t->name, zrt_st_dtype_name(t->dtype));
  size_t es = zrt_st_dtype_size(t->dtype);
  void *raw = t->dtype == ZRT_ST_F32 ? (void *)dst : scratch;
  ZRT_CHECK(zrt_st_read(f, t, (uint64_t)e0 * es, raw, (size_t)n * es));
  if (t->dtype == ZRT_ST_F32) return ZRT_OK;
  zrt_dtype sd = t->dtype == ZRT_ST_F16 ? ZRT_F16 : ZRT_BF16;
  for (int64_t e = 0; e < n; e++) dst[e] = zrt_load_f(raw, sd, (size_t)e);
  return ZRT_OK;
}

zrt_status zrt_weights_compare(const char *path, const char *a, const char *b, int *result) {
  zrt_status st = ZRT_OK;
  zrt_st_set *s = NULL;
  float *x = NULL, *y = NULL;
  void *scratch = NULL;
  if (!path || !a || !b || !result)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_weights_compare: NULL argument");
  ZRT_CHECK(zrt_st_set_open(path, &s));
  const zrt_st_file *fa, *fb;
  const zrt_st_tensor *ta = zrt_st_set_find(s, a, &fa), *tb = zrt_st_set_find(s, b, &fb);
  *result = -1;
  if (!ta || !tb) goto done;
  *result = 0;
  int64_t n = zrt_st_numel(ta);
  if (ta->ndim != tb->ndim || n != zrt_st_numel(tb)) goto done;
  for (int d = 0; d < ta->ndim; d++)
    if (ta->shape[d] != tb->shape[d]) goto done;
  const int64_t chunk = 1 << 20;
  x = malloc(chunk * sizeof(float));
  y = malloc(chunk * sizeof(float));
  scratch = malloc(chunk * sizeof(float));
  if (!x || !y || !scratch) {
    st = zrt_error(ZRT_ERR_OOM, "zrt_weights_compare: out of host memory");
    goto done;
  }
  for (int64_t e = 0; e < n; e += chunk) {
    int64_t k = ZRT_MIN(chunk, n - e);
    ZRT_CHECK_GOTO(zrt_st_set_read_f32(fa, ta, e, k, x, scratch), st, done);
    ZRT_CHECK_GOTO(zrt_st_set_read_f32(fb, tb, e, k, y, scratch), st, done);
    if (memcmp(x, y, (size_t)k * sizeof(float))) goto done;
  }
  *result = 1;
done:
  free(x);
  free(y);
  free(scratch);
  zrt_st_set_close(s);
  return st;
}
