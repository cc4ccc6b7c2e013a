/*
 * config.c — the config handle (the value store): typed values with their
 * sources and priorities, text parsing of one value per schema row,
 * set / get / explain and environment overrides. Key names and
 * did-you-mean live in config_names.c, validation and resolution in
 * config_resolve.c, the writers in config_write.c.
 *
 * Invariants: every schema row always holds a valid typed value in cfg->v
 * (auto keeps the row's sentinel: -1 for integers, the default for reals),
 * its source, the priority that source carries and an auto flag. A write at
 * lower priority than a row's current one changes nothing, which is what
 * makes precedence independent of the order files, env and flags arrive in.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_impl.h"
#include "env.h"

static void *field(zrt_config *cfg, size_t i) { return (char *)&cfg->v + zrt_cfg_rows[i].off; }
static const void *cfield(const zrt_config *cfg, size_t i) {
  return (const char *)&cfg->v + zrt_cfg_rows[i].off;
}

static int64_t get_int(const void *p, size_t size) {
  if (size == sizeof(int)) return *(const int *)p;
  return *(const int64_t *)p;
}

static void put_int(void *p, size_t size, int64_t v) {
  if (size == sizeof(int))
    *(int *)p = (int)v;
  else
    *(int64_t *)p = v;
}

void zrt_config_fmt_double(double v, char *buf, size_t len) {
  snprintf(buf, len, "%.15g", v);
  if (strtod(buf, NULL) != v) snprintf(buf, len, "%.17g", v);
}

static int enum_index(const zrt_cfg_key *k, const char *text) {
  const char *c = k->choices;
  int idx = 0;
  size_t tl = strlen(text);
  while (c && *c) {
    const char *bar = strchr(c, '|');
    size_t n = bar ? (size_t)(bar - c) : strlen(c);
    if (n == tl && ((k->flags & ZRT_CFGK_NOCASE) ? !strncasecmp(c, text, n) : !strncmp(c, text, n)))
      return idx;
    idx++;
    if (!bar) break;
    c = bar + 1;
  }
  return -1;
}

static void enum_choice(const zrt_cfg_key *k, int idx, char *buf, size_t len) {
  const char *c = k->choices;
  for (int i = 0; i < idx && c; i++) {
    c = strchr(c, '|');
    if (c) c++;
  }
  if (!c) {
    snprintf(buf, len, "?");
    return;
  }
  const char *bar = strchr(c, '|');
  size_t n = bar ? (size_t)(bar - c) : strlen(c);
  snprintf(buf, len, "%.*s", (int)n, c);
}

void zrt_config_row_text(const zrt_config *cfg, size_t i, char *buf, size_t len) {
  const zrt_cfg_row *r = &zrt_cfg_rows[i];
  const void *p = cfield(cfg, i);
  if (cfg->isauto[i]) {
    snprintf(buf, len, "auto");
    return;
  }
  switch (r->k.type) {
  case ZRT_CFGT_BOOL: snprintf(buf, len, "%s", *(const int *)p ? "true" : "false"); break;
  case ZRT_CFGT_INT: {
    int64_t v = get_int(p, r->size);
    if (v < 0 && r->k.min >= 0)
      snprintf(buf, len, "null");
    else
      snprintf(buf, len, "%lld", (long long)v);
    break;
  }
  case ZRT_CFGT_FLOAT: zrt_config_fmt_double(*(const double *)p, buf, len); break;
  case ZRT_CFGT_SIZE: snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)p); break;
  case ZRT_CFGT_STRING: snprintf(buf, len, "%s", (const char *)p); break;
  case ZRT_CFGT_ENUM:
    if (r->evals) {
      int v = *(const int *)p;
      int idx = 0;
      for (const char *c = r->k.choices; c; c = strchr(c, '|') ? strchr(c, '|') + 1 : NULL, idx++)
        if (r->evals[idx] == v) break;
      enum_choice(&r->k, idx, buf, len);
    } else
      snprintf(buf, len, "%s", (const char *)p);
    break;
  case ZRT_CFGT_PAIR: {
    char a[40], b[40];
    zrt_config_fmt_double(*(const double *)p, a, sizeof a);
    zrt_config_fmt_double(*(const double *)((const char *)&cfg->v + r->off2), b, sizeof b);
    snprintf(buf, len, "[%s, %s]", a, b);
    break;
  }
  }
}

/* Strict full-string number parses. */
static int parse_double(const char *s, double *out) {
  while (isspace((unsigned char)*s)) s++;
  if (!*s) return -1;
  errno = 0;
  char *end;
  double v = strtod(s, &end);
  while (isspace((unsigned char)*end)) end++;
  if (*end || end == s || !isfinite(v)) return -1;
  /* strtod takes "nan", "inf", hex: files should not */
  for (const char *q = s; q < end; q++)
    if (isalpha((unsigned char)*q) && *q != 'e' && *q != 'E') return -1;
  *out = v;
  return 0;
}

static int parse_int(const char *s, int64_t *out, int *not_integral) {
  double d;
  *not_integral = 0;
  const char *q = s;
  while (isspace((unsigned char)*q)) q++;
  char *end;
  errno = 0;
  long long v = strtoll(q, &end, 10);
  while (isspace((unsigned char)*end)) end++;
  if (!*end && end != q && errno == 0) {
    *out = v;
    return 0;
  }
  if (parse_double(s, &d)) return -1;
  if (d != floor(d)) {
    *not_integral = 1;
    return -1;
  }
  /* outside [-2^63, 2^63) the conversion is undefined: report, not wrap */
  if (d >= 9223372036854775808.0 || d < -9223372036854775808.0) {
    *not_integral = 2;
    return -1;
  }
  *out = (int64_t)d;
  return 0;
}

static const char *short_text(const char *t, char *buf, size_t len) {
  size_t n = strlen(t);
  if (n + 1 > len && len > 4)
    snprintf(buf, len, "%.*s...", (int)(len - 4), t);
  else
    snprintf(buf, len, "%s", t);
  /* control bytes in a message would garble a terminal */
  for (char *c = buf; *c; c++)
    if ((unsigned char)*c < 0x20) *c = '?';
  return buf;
}

static void range_text(const zrt_cfg_key *k, char *buf, size_t len) {
  if (k->max >= 9e18)
    snprintf(buf, len, ">= %g", k->min);
  else
    snprintf(buf, len, "%g..%g", k->min, k->max);
}

int zrt_config_set_row(zrt_config *cfg, size_t i, const char *text, int quoted, int is_null,
                       int prio, const zrt_cfg_source *src, const char *where, zrt_cfg_errs *errs) {
  const zrt_cfg_row *r = &zrt_cfg_rows[i];
  const zrt_cfg_key *k = &r->k;
  char got[96], rng[64];
  const char *pre = where && *where ? where : "";
  const char *sep = where && *where ? ": " : "";
  if (!text) text = "";
  short_text(text, got, sizeof got);
  int isauto = 0;
  union {
    int64_t i;
    double d;
    uint64_t u;
    int e;
    double pair[2];
  } val;
  memset(&val, 0, sizeof val);
  char ebuf[64] = "";

  /* accelerate writes null for a launch key it leaves unset
   * (main_process_port: null): the default */
  if (is_null && (k->flags & ZRT_CFGK_LAUNCH) && k->def) {
    text = k->def;
    is_null = 0;
  }
  if (!is_null && !strcasecmp(text, "auto") &&
      !(k->type == ZRT_CFGT_ENUM && enum_index(k, "auto") >= 0)) {
    if (!(k->flags & ZRT_CFGK_AUTO)) {
      zrt_cfg_errs_add(errs, "%s%s%s: \"auto\" is not accepted here; expected %s", pre, sep,
                       k->path,
                       k->type == ZRT_CFGT_ENUM   ? k->choices
                       : k->type == ZRT_CFGT_BOOL ? "true or false"
                                                  : "a value");
      return -1;
    }
    isauto = 1;
  } else
    switch (k->type) {
    case ZRT_CFGT_BOOL:
      if (is_null) goto wrong_null;
      if (!strcasecmp(text, "true") || !strcasecmp(text, "yes") || !strcasecmp(text, "on") ||
          !strcmp(text, "1"))
        val.i = 1;
      else if (!strcasecmp(text, "false") || !strcasecmp(text, "no") || !strcasecmp(text, "off") ||
               !strcmp(text, "0"))
        val.i = 0;
      else {
        zrt_cfg_errs_add(errs, "%s%s%s: expected true or false, got \"%s\"", pre, sep, k->path,
                         got);
        return -1;
      }
      break;
    case ZRT_CFGT_INT: {
      if (is_null) {
        if (k->def) goto wrong_null;
        val.i = -1;
        break;
      }
      int nonint = 0;
      if (parse_int(text, &val.i, &nonint)) {
        if (nonint == 2) {
          range_text(k, rng, sizeof rng);
          zrt_cfg_errs_add(errs,
                           "%s%s%s: %s is out of range: it does not fit a 64-bit integer; expected "
                           "%s",
                           pre, sep, k->path, got, rng);
          return -1;
        }
        zrt_cfg_errs_add(errs, "%s%s%s: expected an integer%s, got \"%s\"%s", pre, sep, k->path,
                         (k->flags & ZRT_CFGK_AUTO) ? " or \"auto\"" : "", got,
                         nonint ? " (not a whole number)" : "");
        return -1;
      }
      if ((double)val.i > k->max && k->max >= 9e18) {
        zrt_cfg_errs_add(errs, "%s%s%s: %s is out of range: expected at most %.0f", pre, sep,
                         k->path, got, k->max);
        return -1;
      }
      if ((double)val.i < k->min || (double)val.i > k->max) {
        range_text(k, rng, sizeof rng);
        zrt_cfg_errs_add(errs, "%s%s%s: %s is out of range: expected %s%s", pre, sep, k->path, got,
                         rng, (k->flags & ZRT_CFGK_AUTO) ? " or \"auto\"" : "");
        return -1;
      }
      break;
    }
    case ZRT_CFGT_FLOAT:
      if (is_null) goto wrong_null;
      if (parse_double(text, &val.d)) {
        zrt_cfg_errs_add(errs, "%s%s%s: expected a number%s, got \"%s\"", pre, sep, k->path,
                         (k->flags & ZRT_CFGK_AUTO) ? " or \"auto\"" : "", got);
        return -1;
      }
      if (val.d < k->min || val.d > k->max) {
        range_text(k, rng, sizeof rng);
        zrt_cfg_errs_add(errs, "%s%s%s: %g is out of range: expected %s", pre, sep, k->path, val.d,
                         rng);
        return -1;
      }
      break;
    case ZRT_CFGT_SIZE:
      if (is_null) goto wrong_null;
      if (!zrt_parse_size(text, &val.u)) {
        zrt_cfg_errs_add(errs,
                         "%s%s%s: expected a size (bytes, or a number with KiB, MiB, GiB, KB, "
                         "MB, GB), got \"%s\"",
                         pre, sep, k->path, got);
        return -1;
      }
      break;
    case ZRT_CFGT_STRING:
      if (is_null) text = "";
      if (strlen(text) >= r->size) {
        zrt_cfg_errs_add(errs, "%s%s%s: value is too long (%zu bytes, at most %zu)", pre, sep,
                         k->path, strlen(text), r->size - 1);
        return -1;
      }
      break;
    case ZRT_CFGT_ENUM: {
      int idx = enum_index(k, is_null ? "null" : text);
      if (idx < 0 && is_null) idx = enum_index(k, "none");
      if (idx < 0 && !strcasecmp(text, "none")) idx = enum_index(k, "null");
      if (idx < 0) {
        zrt_cfg_errs_add(errs, "%s%s%s: \"%s\" is not one of %s%s", pre, sep, k->path,
                         is_null ? "null" : got, k->choices,
                         (k->flags & ZRT_CFGK_NOCASE) ? " (any case)" : "");
        return -1;
      }
      val.e = idx;
      enum_choice(k, idx, ebuf, sizeof ebuf);
      break;
    }
    case ZRT_CFGT_PAIR: {
      if (is_null) goto wrong_null;
      char tmp[128];
      snprintf(tmp, sizeof tmp, "%s", text);
      char *s = tmp;
      while (isspace((unsigned char)*s)) s++;
      if (*s == '[') s++;
      char *e = s + strlen(s);
      while (e > s && isspace((unsigned char)e[-1])) e--;
      if (e > s && e[-1] == ']') e--;
      *e = 0;
      char *comma = strchr(s, ',');
      if (!comma || strchr(comma + 1, ',')) goto bad_pair;
      *comma = 0;
      if (parse_double(s, &val.pair[0]) || parse_double(comma + 1, &val.pair[1])) goto bad_pair;
      for (int j = 0; j < 2; j++)
        if (val.pair[j] < k->min || val.pair[j] >= k->max + (k->max == 1 ? 0 : 1e-300)) {
          zrt_cfg_errs_add(errs, "%s%s%s: %g is out of range: each beta must be in [0, 1)", pre,
                           sep, k->path, val.pair[j]);
          return -1;
        }
      break;
    bad_pair:
      zrt_cfg_errs_add(errs, "%s%s%s: expected two numbers [beta1, beta2], got \"%s\"", pre, sep,
                       k->path, got);
      return -1;
    }
    }
  (void)quoted;
  if (prio < cfg->prio[i]) return 0;
  void *p = field(cfg, i);
  if (isauto) {
    if (k->type == ZRT_CFGT_INT) put_int(p, r->size, -1);
    if (k->type == ZRT_CFGT_BOOL) *(int *)p = 0;
  } else
    switch (k->type) {
    case ZRT_CFGT_BOOL: *(int *)p = (int)val.i; break;
    case ZRT_CFGT_INT: put_int(p, r->size, val.i); break;
    case ZRT_CFGT_FLOAT: *(double *)p = val.d; break;
    case ZRT_CFGT_SIZE: *(uint64_t *)p = val.u; break;
    case ZRT_CFGT_STRING: snprintf((char *)p, r->size, "%s", text); break;
    case ZRT_CFGT_ENUM:
      if (r->evals)
        *(int *)p = r->evals[val.e];
      else
        snprintf((char *)p, r->size, "%s", ebuf);
      break;
    case ZRT_CFGT_PAIR:
      *(double *)p = val.pair[0];
      *(double *)((char *)&cfg->v + r->off2) = val.pair[1];
      break;
    }
  cfg->isauto[i] = (unsigned char)isauto;
  cfg->prio[i] = (unsigned char)prio;
  if (src)
    cfg->src[i] = *src;
  else
    memset(&cfg->src[i], 0, sizeof cfg->src[i]);
  return 0;
wrong_null:
  zrt_cfg_errs_add(errs, "%s%s%s: null is not accepted here; expected a %s", pre, sep, k->path,
                   k->type == ZRT_CFGT_BOOL ? "boolean" : "value");
  return -1;
}

/* --------------------------------------------------------------- handle */

zrt_status zrt_config_create(zrt_config **out) {
  if (!out) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_config_create: out is NULL");
  *out = NULL;
  zrt_config *cfg = calloc(1, sizeof *cfg);
  if (!cfg) return zrt_error(ZRT_ERR_OOM, "zrt_config_create: out of host memory");
  zrt_cfg_errs errs = {0};
  for (size_t i = 0; i < zrt_cfg_nrows; i++) {
    const zrt_cfg_key *k = &zrt_cfg_rows[i].k;
    zrt_config_set_row(cfg, i, k->def ? k->def : "", 0, k->def == NULL, ZRT_PRIO_DEFAULT, NULL,
                       "schema default", &errs);
  }
  if (errs.n) {
    zrt_status st = zrt_error(ZRT_ERR_INTERNAL, "config schema has a bad default: %s", errs.buf);
    zrt_cfg_errs_free(&errs);
    free(cfg);
    return st;
  }
  *out = cfg;
  return ZRT_OK;
}

void zrt_config_destroy(zrt_config *cfg) {
  if (!cfg) return;
  for (size_t i = 0; i < cfg->nwarn; i++) free(cfg->warn[i]);
  free(cfg->warn);
  free(cfg);
}

zrt_status zrt_config_copy(const zrt_config *cfg, zrt_config **out) {
  if (!cfg || !out) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_config_copy: NULL argument");
  *out = NULL;
  zrt_config *c = malloc(sizeof *c);
  if (!c) return zrt_error(ZRT_ERR_OOM, "zrt_config_copy: out of host memory");
  *c = *cfg;
  c->warn = NULL;
  c->nwarn = 0;
  for (size_t i = 0; i < cfg->nwarn; i++) {
    if (zrt_config_add_warning(c, cfg->warn[i])) {
      zrt_config_destroy(c);
      return zrt_error(ZRT_ERR_OOM, "zrt_config_copy: out of host memory");
    }
  }
  *out = c;
  return ZRT_OK;
}

int zrt_config_add_warning(zrt_config *cfg, const char *msg) {
  for (size_t i = 0; i < cfg->nwarn; i++)
    if (!strcmp(cfg->warn[i], msg)) return 0;
  char **nw = realloc(cfg->warn, (cfg->nwarn + 1) * sizeof *nw);
  if (!nw) return -1;
  cfg->warn = nw;
  cfg->warn[cfg->nwarn] = strdup(msg);
  if (!cfg->warn[cfg->nwarn]) return -1;
  cfg->nwarn++;
  return 0;
}

size_t zrt_config_warning_count(const zrt_config *cfg) { return cfg ? cfg->nwarn : 0; }
const char *zrt_config_warning(const zrt_config *cfg, size_t i) {
  return cfg && i < cfg->nwarn ? cfg->warn[i] : NULL;
}

const zrt_cfg *zrt_config_values(const zrt_config *cfg) { return cfg ? &cfg->v : NULL; }

zrt_dtype zrt_config_dtype(const zrt_config *cfg) {
  if (!cfg) return ZRT_F32;
  if (cfg->v.bf16_enabled) return ZRT_BF16;
  if (cfg->v.fp16_enabled) return ZRT_F16;
  return ZRT_F32;
}

const char *zrt_config_source_kind_name(zrt_cfg_source_kind k) {
  switch (k) {
  case ZRT_SRC_DEFAULT: return "default";
  case ZRT_SRC_FILE: return "file";
  case ZRT_SRC_ENV: return "env";
  case ZRT_SRC_FLAG: return "flag";
  case ZRT_SRC_PROGRAM: return "program";
  case ZRT_SRC_DERIVED: return "derived";
  }
  return "?";
}

int zrt_config_prio_of(zrt_cfg_source_kind k) {
  switch (k) {
  case ZRT_SRC_DEFAULT: return ZRT_PRIO_DEFAULT;
  case ZRT_SRC_FILE: return ZRT_PRIO_FILE;
  case ZRT_SRC_ENV: return ZRT_PRIO_ENV;
  case ZRT_SRC_FLAG: return ZRT_PRIO_FLAG;
  case ZRT_SRC_PROGRAM: return ZRT_PRIO_PROGRAM;
  case ZRT_SRC_DERIVED: return ZRT_PRIO_DEFAULT;
  }
  return ZRT_PRIO_DEFAULT;
}

/* Moves tmp's values into cfg, keeping cfg's warnings; frees tmp. */
void zrt_config_commit_values(zrt_config *cfg, zrt_config *tmp) {
  char **w = cfg->warn;
  size_t nw = cfg->nwarn;
  for (size_t i = 0; i < tmp->nwarn; i++) free(tmp->warn[i]);
  free(tmp->warn);
  *cfg = *tmp;
  cfg->warn = w;
  cfg->nwarn = nw;
  free(tmp);
}

static int is_batch_row(size_t i) {
  const char *p = zrt_cfg_rows[i].k.path;
  return !strcmp(p, "train_batch_size") || !strcmp(p, "train_micro_batch_size_per_gpu") ||
         !strcmp(p, "gradient_accumulation_steps");
}

/* A value the user gave (file, environment, flag), not auto. */
static int user_given(const zrt_config *cfg, size_t i) {
  zrt_cfg_source_kind k = cfg->src[i].kind;
  return !cfg->isauto[i] && (k == ZRT_SRC_FILE || k == ZRT_SRC_ENV || k == ZRT_SRC_FLAG);
}

int zrt_config_program_fills(const zrt_config *cfg, size_t i) {
  if (cfg->isauto[i]) return 1;
  if (user_given(cfg, i)) return 0;
  /* the micro-batch is the program's when the config gives no batch size */
  if (!strcmp(zrt_cfg_rows[i].k.path, "train_micro_batch_size_per_gpu"))
    return !user_given(cfg, (size_t)zrt_config_schema_find("train_batch_size"));
  return 0;
}

zrt_status zrt_config_program_agrees(const zrt_config *cfg, size_t i, const char *value,
                                     const char *origin, int *same) {
  *same = 0;
  if (!is_batch_row(i) || !user_given(cfg, i)) return ZRT_OK;
  int64_t want = 0, have = get_int(cfield(cfg, i), zrt_cfg_rows[i].size);
  int nonint = 0;
  if (parse_int(value, &want, &nonint)) return ZRT_OK; /* set_row reports the text */
  if (want == have) {
    *same = 1;
    return ZRT_OK;
  }
  const char *p = zrt_cfg_rows[i].k.path;
  return zrt_error(ZRT_ERR_CONFIG,
                   "%s: the program (%s) trains with %lld but the config gives %lld (%s %s): the "
                   "config's batch size is what the program trains with; remove the program's "
                   "value (e.g. its batch-size option) or the config's, or make the config's "
                   "\"auto\" (Hugging Face's Trainer raises on the same mismatch)",
                   p, origin ? origin : "program", (long long)want, (long long)have,
                   zrt_config_source_kind_name(cfg->src[i].kind), cfg->src[i].where);
}

static zrt_status unknown_key(const char *key_path) {
  char sug[256];
  zrt_config_suggest(key_path, sug, sizeof sug);
  return zrt_error(ZRT_ERR_CONFIG, "unknown config key '%s'%s%s", key_path, *sug ? "; " : "", sug);
}

static void mixed_precision_map(zrt_config *cfg, int prio, const zrt_cfg_source *src, int force_no,
                                zrt_cfg_errs *errs);

zrt_status zrt_config_set(zrt_config *cfg, const char *key_path, const char *value,
                          const char *origin) {
  if (!cfg || !key_path || !value)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_config_set: NULL argument");
  const char *path = zrt_config_canonical_key(key_path);
  if (!path) {
    if (zrt_config_is_ignored(key_path)) {
      zrt_log(ZRT_LOG_WARN, "config key '%s' is accepted but not used by zrt; ignored", key_path);
      return ZRT_OK;
    }
    return unknown_key(key_path);
  }
  size_t i = (size_t)zrt_config_schema_find(path);
  zrt_cfg_source src = {0};
  int prio;
  if (origin && !strncmp(origin, "program default", 15)) {
    /* the program's value for what the config leaves to it (HF's Trainer
     * filling "auto"): never over a value the config gives */
    if (!zrt_config_program_fills(cfg, i)) {
      zrt_log(ZRT_LOG_DEBUG, "config: %s=%s (%s) not applied: the config gives it", path, value,
              origin);
      return ZRT_OK;
    }
  } else if (origin && strncmp(origin, "--", 2) && strncmp(origin, "ZRT_", 4)) {
    /* one truth for the batch: the program contradicting the config's own
     * batch size is an error, as HF's Trainer raises on the mismatch */
    int same = 0;
    ZRT_CHECK(zrt_config_program_agrees(cfg, i, value, origin, &same));
    if (same) return ZRT_OK; /* the config's own value (and its source) stays */
  }
  if (origin && !strncmp(origin, "--", 2)) {
    src.kind = ZRT_SRC_FLAG;
    prio = ZRT_PRIO_FLAG;
  } else if (origin && !strncmp(origin, "ZRT_", 4)) {
    src.kind = ZRT_SRC_ENV;
    prio = ZRT_PRIO_ENV;
  } else {
    src.kind = ZRT_SRC_PROGRAM;
    prio = ZRT_PRIO_PROGRAM;
  }
  snprintf(src.where, sizeof src.where, "%s", origin ? origin : "program");
  zrt_config *tmp;
  ZRT_CHECK(zrt_config_copy(cfg, &tmp));
  zrt_cfg_errs errs = {0};
  int is_null = !strcmp(value, "null");
  zrt_config_set_row(tmp, i, value, 0, is_null, prio, &src, src.where, &errs);
  if (!errs.n && !strcmp(path, "mixed_precision")) mixed_precision_map(tmp, prio, &src, 1, &errs);
  if (errs.n) {
    zrt_status st = zrt_error(ZRT_ERR_CONFIG, "%s", errs.buf);
    zrt_cfg_errs_free(&errs);
    zrt_config_destroy(tmp);
    return st;
  }
  if (prio < cfg->prio[i])
    zrt_log(ZRT_LOG_DEBUG, "config: %s=%s from %s does not override the value from %s", path, value,
            src.where, cfg->src[i].where);
  zrt_config_commit_values(cfg, tmp);
  return ZRT_OK;
}

/* mixed_precision fp16|bf16 turns that one on and the other off at the
 * same priority; "no" turns both off only when asked (a launch YAML whose
 * DeepSpeed file beneath decides the precision says "no" too). */
static void mixed_precision_map(zrt_config *cfg, int prio, const zrt_cfg_source *src, int force_no,
                                zrt_cfg_errs *errs) {
  int on[2];
  if (!zrt_config_mp_blocks(cfg->v.mixed_precision, on) && !force_no) return;
  for (int k = 0; k < 2; k++)
    zrt_config_set_row(cfg, (size_t)zrt_config_schema_find(zrt_cfg_mp_keys[k]),
                       on[k] ? "true" : "false", 0, 0, prio, src, src->where, errs);
}

const char *const zrt_cfg_mp_keys[2] = {"fp16.enabled", "bf16.enabled"};

int zrt_config_mp_blocks(const char *mp, int on[2]) {
  on[0] = !strcmp(mp, "fp16");
  on[1] = !strcmp(mp, "bf16");
  return on[0] || on[1];
}

zrt_status zrt_config_get(const zrt_config *cfg, const char *key_path, char *buf, size_t len) {
  if (!cfg || !key_path || !buf || !len)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_config_get: NULL argument");
  const char *path = zrt_config_canonical_key(key_path);
  if (!path) return unknown_key(key_path);
  zrt_config_row_text(cfg, (size_t)zrt_config_schema_find(path), buf, len);
  return ZRT_OK;
}

zrt_status zrt_config_source(const zrt_config *cfg, const char *key_path, zrt_cfg_source *src) {
  if (!cfg || !key_path || !src)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_config_source: NULL argument");
  const char *path = zrt_config_canonical_key(key_path);
  if (!path) return unknown_key(key_path);
  *src = cfg->src[zrt_config_schema_find(path)];
  return ZRT_OK;
}

int zrt_config_is_auto(const zrt_config *cfg, const char *key_path) {
  const char *path = cfg ? zrt_config_canonical_key(key_path) : NULL;
  return path ? cfg->isauto[zrt_config_schema_find(path)] : 0;
}

zrt_status zrt_config_entry(const zrt_config *cfg, size_t i, const char **key_path, char *value,
                            size_t value_len, zrt_cfg_source *src) {
  if (!cfg || i >= zrt_cfg_nrows)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_config_entry: index %zu out of range (%zu keys)", i,
                     zrt_cfg_nrows);
  if (key_path) *key_path = zrt_cfg_rows[i].k.path;
  if (value && value_len) zrt_config_row_text(cfg, i, value, value_len);
  if (src) *src = cfg->src[i];
  return ZRT_OK;
}

/* ------------------------------------------------------------ environment */

zrt_status zrt_config_load_env(zrt_config *cfg) {
  if (!cfg) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_config_load_env: cfg is NULL");
  zrt_config *tmp;
  ZRT_CHECK(zrt_config_copy(cfg, &tmp));
  zrt_cfg_errs errs = {0};
  for (size_t i = 0; i < zrt_cfg_nrows; i++) {
    const char *env = zrt_cfg_rows[i].k.env;
    const char *v = zrt_env_config(env);
    if (!v) continue;
    zrt_cfg_source src = {.kind = ZRT_SRC_ENV};
    snprintf(src.where, sizeof src.where, "%s", env);
    char where[128];
    snprintf(where, sizeof where, "environment %s=%.40s", env, v);
    zrt_config_set_row(tmp, i, v, 0, 0, ZRT_PRIO_ENV, &src, where, &errs);
  }
  if (errs.n) {
    zrt_status st = zrt_error(ZRT_ERR_CONFIG, "%s", errs.buf);
    zrt_cfg_errs_free(&errs);
    zrt_config_destroy(tmp);
    return st;
  }
  zrt_config_commit_values(cfg, tmp);
  return ZRT_OK;
}

zrt_status zrt_config_from_env(zrt_config **out) {
  if (!out) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_config_from_env: out is NULL");
  *out = NULL;
  zrt_config *cfg;
  zrt_status st;
  ZRT_CHECK(zrt_config_create(&cfg));
  const char *file = zrt_env("ZRT_CONFIG_FILE");
  if (file && *file) {
    st = zrt_config_load_file(cfg, file);
    if (st != ZRT_OK) {
      zrt_error_context(st, "ZRT_CONFIG_FILE=%s: ", file);
      goto fail;
    }
  }
  ZRT_CHECK_GOTO(zrt_config_load_env(cfg), st, fail);
  *out = cfg;
  return ZRT_OK;
fail:
  zrt_config_destroy(cfg);
  return st;
}
