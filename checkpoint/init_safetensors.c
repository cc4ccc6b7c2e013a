/*
 * init_safetensors.c — zrt_engine_load_safetensors: initial weights from a
 * safetensors file, a sharded index or a Hugging Face directory
 * (safetensors_set.h; F32, F16 or BF16). Every tensor is validated
 * (present, dtype, shape, finite), and every tensor of the file must be
 * used (or allowed unused by the caller), before anything is written; then each rank reads only the
 * elements of its own master extent and the 16-bit working weights are
 * re-derived (zrt_engine_refresh_params). Above the engine in the layers
 * because it is a file format reader feeding the engine, like checkpoints;
 * it reads the engine's parameters through engine_state.h.
 */
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "engine_state.h"
#include "safetensors.h"
#include "safetensors_set.h"

#define ZRT_ST_UNUSED_NAMED 4 /* unused tensors named in the error, then a count */

static int zrt_ptr_cmp(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (const void *const *)a, y = (uintptr_t) * (const void *const *)b;
  return x < y ? -1 : x > y;
}

/* A tensor no parameter resolves to is refused (a config.json with fewer
 * layers than the weights would otherwise load a different model
 * silently), unless a pattern of unused_ok matches its name or its name
 * without the "transformer." prefix. Names the first few, then a count. */
static zrt_status zrt_st_check_unused(const zrt_engine *eng, const zrt_st_set *f, const char *path,
                                      const char *const *unused_ok) {
  zrt_engine_view v;
  zrt_engine_view_get(eng, &v);
  const void **used = malloc((size_t)(v.nparams ? v.nparams : 1) * sizeof *used);
  if (!used) return zrt_error(ZRT_ERR_OOM, "zrt_engine_load_safetensors: out of host memory");
  for (int i = 0; i < v.nparams; i++)
    used[i] = zrt_st_set_find(f, zrt_engine_param_entry(eng, i)->name, NULL);
  qsort(used, (size_t)v.nparams, sizeof *used, zrt_ptr_cmp);
  char names[512] = "";
  int64_t n = 0;
  for (int s = 0; s < zrt_st_set_nfiles(f); s++) {
    const zrt_st_file *sf = zrt_st_set_file(f, s);
    for (size_t i = 0; i < zrt_st_count(sf); i++) {
      const zrt_st_tensor *t = zrt_st_get(sf, i);
      const void *key = t;
      if (bsearch(&key, used, (size_t)v.nparams, sizeof *used, zrt_ptr_cmp)) continue;
      const char *base = strncmp(t->name, "transformer.", 12) ? t->name : t->name + 12;
      int ok = 0;
      for (int k = 0; unused_ok && unused_ok[k] && !ok; k++)
        ok = !fnmatch(unused_ok[k], t->name, 0) || !fnmatch(unused_ok[k], base, 0);
      if (ok) continue;
      if (n++ < ZRT_ST_UNUSED_NAMED) {
        size_t at = strlen(names);
        snprintf(names + at, sizeof names - at, "%s'%s'", at ? ", " : "", t->name);
      }
    }
  }
  free(used);
  if (!n) return ZRT_OK;
  char more[64] = "";
  if (n > ZRT_ST_UNUSED_NAMED)
    snprintf(more, sizeof more, " and %lld more", (long long)(n - ZRT_ST_UNUSED_NAMED));
  return zrt_error(ZRT_ERR_IO,
                   "%s: %lld tensor%s the model does not use: %s%s (fewer layers in config.json "
                   "than in the weights, or weights of another model? nothing was loaded)",
                   path, (long long)n, n == 1 ? "" : "s", names, more);
}

zrt_status zrt_engine_load_safetensors(zrt_engine *eng, const char *path) {
  return zrt_engine_load_safetensors_ex(eng, path, NULL);
}

zrt_status zrt_engine_load_safetensors_ex(zrt_engine *eng, const char *path,
                                          const char *const *unused_ok) {
  zrt_status st = ZRT_OK;
  zrt_st_set *f = NULL;
  float *tmp = NULL;
  void *raw = NULL;
  if (!eng || !path)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_engine_load_safetensors: NULL argument");
  zrt_engine_view v;
  zrt_engine_view_get(eng, &v);
  if (!v.built)
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "zrt_engine_load_safetensors('%s'): call zrt_engine_build first", path);
  ZRT_CHECK(zrt_st_set_open(path, &f));
  /* validate every parameter before touching anything */
  int64_t maxnumel = 1;
  for (int i = 0; i < v.nparams; i++) {
    const zrt_param_entry *p = zrt_engine_param_entry(eng, i);
    const zrt_st_tensor *t = zrt_st_set_find(f, p->name, NULL);
    if (!t) {
      st = zrt_error(ZRT_ERR_IO, "%s: tensor '%s' is missing (the model has this parameter)", path,
                     p->name);
      goto done;
    }
    if (t->dtype != ZRT_ST_F32 && t->dtype != ZRT_ST_F16 && t->dtype != ZRT_ST_BF16) {
      st = zrt_error(ZRT_ERR_IO, "%s: tensor '%s' has dtype %s; zrt loads F32, F16 or BF16", path,
                     t->name, zrt_st_dtype_name(t->dtype));
      goto done;
    }
    int same = t->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->shape[d];
    if (!same) {
      char a[128] = "", b[128] = "";
      for (int d = 0; d < t->ndim; d++)
        snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? "," : "",
                 (long long)t->shape[d]);
      for (int d = 0; d < p->ndim; d++)
        snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? "," : "",
                 (long long)p->shape[d]);
      st = zrt_error(ZRT_ERR_IO, "%s: tensor '%s' has shape [%s] but the parameter is [%s]", path,
                     t->name, a, b);
      goto done;
    }
    maxnumel = ZRT_MAX(maxnumel, p->numel);
  }
  ZRT_CHECK_GOTO(zrt_st_check_unused(eng, f, path, unused_ok), st, done);
  size_t maxlen = 0;
  for (int m = 0; m < v.nmodules; m++) {
    int64_t off, len;
    zrt_engine_master_extent(eng, m, &off, &len);
    maxlen = ZRT_MAX(maxlen, (size_t)len);
  }
  /* the finiteness pass reads whole tensors in chunks of at most this */
  const size_t chunk = (size_t)ZRT_MIN(maxnumel, (int64_t)1 << 22);
  maxlen = ZRT_MAX(maxlen, chunk);
  tmp = calloc(maxlen, sizeof(float));
  raw = malloc(maxlen * sizeof(float));
  if (!tmp || !raw) {
    st = zrt_error(ZRT_ERR_OOM, "zrt_engine_load_safetensors: out of host memory");
    goto done;
  }
  /* Every rank checks every element (not only its shard), so all ranks
   * agree on refusing a file with NaN or Inf before the collective
   * refresh below. */
  for (int i = 0; i < v.nparams; i++) {
    const zrt_param_entry *p = zrt_engine_param_entry(eng, i);
    const zrt_st_file *sf;
    const zrt_st_tensor *t = zrt_st_set_find(f, p->name, &sf);
    for (int64_t e0 = 0; e0 < p->numel; e0 += (int64_t)chunk) {
      int64_t n = ZRT_MIN((int64_t)chunk, p->numel - e0);
      ZRT_CHECK_GOTO(zrt_st_set_read_f32(sf, t, e0, n, tmp, raw), st, done);
      for (int64_t e = 0; e < n; e++)
        if (!isfinite(tmp[e])) {
          st = zrt_error(ZRT_ERR_IO,
                         "%s: tensor '%s' (shard %s) holds %s at element %lld: refusing "
                         "non-finite initial weights (nothing was loaded)",
                         path, t->name, zrt_st_path(sf), isnan(tmp[e]) ? "NaN" : "Inf",
                         (long long)(e0 + e));
          goto done;
        }
    }
  }
  for (int m = 0; m < v.nmodules; m++) {
    zrt_engine_module_view me;
    zrt_engine_module_view_get(eng, m, &me);
    int64_t off, len;
    zrt_engine_master_extent(eng, m, &off, &len);
    memset(tmp, 0, (size_t)len * sizeof(float));
    for (int i = 0; i < me.nparams; i++) {
      const zrt_param_entry *p = zrt_engine_param_entry(eng, me.params[i]);
      int64_t lo = ZRT_MAX(p->offset, off), hi = ZRT_MIN(p->offset + p->numel, off + len);
      if (lo >= hi) continue;
      const zrt_st_file *sf;
      const zrt_st_tensor *t = zrt_st_set_find(f, p->name, &sf);
      ZRT_CHECK_GOTO(zrt_st_set_read_f32(sf, t, lo - p->offset, hi - lo, tmp + (lo - off), raw), st,
                     done);
    }
    ZRT_CHECK_GOTO(zrt_engine_set_master(eng, m, tmp), st, done);
  }
  ZRT_CHECK_GOTO(zrt_engine_refresh_params(eng), st, done);
done:
  free(tmp);
  free(raw);
  zrt_st_set_close(f);
  return st;
}
