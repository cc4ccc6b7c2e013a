/*
 * config_load.c — zrt_config_load_file: reads a file, detects JSON or YAML
 * from its content, parses it into the document tree, and applies the tree
 * to the schema: DeepSpeed sections, the `zrt:` section, accelerate-style
 * launch keys, `deepspeed_config:` short names, `deepspeed_config_file:`
 * (loaded beneath the launch YAML), "_zrt_sources" (written by
 * zrt_config_write_json), and the keys zrt accepts but ignores.
 *
 * Invariants: the whole load works on a copy of the config and commits only
 * when no error was found, so a failed load changes nothing; every error is
 * collected (not just the first) and reported one per line as
 * "FILE:LINE:COL: KEY.PATH: what was expected".
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_impl.h"

#define ZRT_CFG_MAX_FILE (16u << 20)

/* Unknown top-level keys kept for the messages (all are counted). */
#define ZRT_CFG_UNKNOWN_KEPT 64

typedef struct lctx {
  zrt_config *cfg;
  const char *file; /* as shown in messages */
  char dir[4096];   /* directory of the file, for deepspeed_config_file */
  int prio;
  int nested; /* 1 while loading a deepspeed_config_file beneath */
  zrt_cfg_errs *errs;
  char warned[2048];        /* ignored keys seen, for the one warning line */
  const zrt_dnode *ds_file; /* deepspeed_config_file value node */
  const zrt_dnode *sources; /* _zrt_sources */
  int set_mp;               /* mixed_precision set by this file */
  /* the node that set each row in this file: a key given twice under two
   * spellings ("zero_optimization.stage" beside the nested section, an
   * accelerate short name beside its DeepSpeed path) is a duplicate */
  const zrt_dnode *row_node[ZRT_CFG_MAXKEYS];
  const zrt_dnode *fsdp;       /* accelerate's fsdp_config section */
  const zrt_dnode *actckpt;    /* DeepSpeed's activation_checkpointing section (a mapping) */
  const zrt_dnode *ds_section; /* accelerate's deepspeed_config section */
  /* top-level keys zrt does not know (no near miss): a warning in a
   * DeepSpeed file, an error in an accelerate launch file; the first
   * ZRT_CFG_UNKNOWN_KEPT kept, all counted */
  const zrt_dnode *unknown[ZRT_CFG_UNKNOWN_KEPT];
  long nunknown;
} lctx;

/* Unknown top-level keys warned one by one; the rest are one line ("and N
 * more"), so a file of 100k such keys prints a screenful, not 100k lines. */
#define ZRT_CFG_UNKNOWN_SHOWN 10

static zrt_status load_text(zrt_config *cfg, const char *text, size_t len, const char *file,
                            const char *dir, int prio, int nested, zrt_cfg_errs *errs,
                            zrt_config *commit_warnings_to);

static const char *kind_word(const zrt_dnode *n) {
  return n->kind == ZRT_DN_MAP ? "a mapping" : n->kind == ZRT_DN_SEQ ? "a list" : "a scalar";
}

static int is_section(const char *path) {
  size_t n = strlen(path);
  for (size_t i = 0; i < zrt_cfg_nrows; i++)
    if (!strncmp(zrt_cfg_rows[i].k.path, path, n) && zrt_cfg_rows[i].k.path[n] == '.') return 1;
  return 0;
}

/* Logs a load warning once per process (zrt launch loads a file more than
 * once); zrt_log_once keys are short, so the key is the message's hash. */
static void warn_once(const char *msg) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const char *p = msg; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  char key[40];
  snprintf(key, sizeof key, "config.warn.%016llx", (unsigned long long)h);
  zrt_log_once(key, ZRT_LOG_WARN, "%s", msg);
}

static void note_ignored(lctx *c, const char *path, const zrt_dnode *n) {
  char w[1024];
  snprintf(w, sizeof w, "%s:%d:%d: %s: accepted but not used by zrt; ignored", c->file, n->kline,
           n->kcol, path);
  zrt_config_add_warning(c->cfg, w);
  size_t l = strlen(c->warned);
  if (l + strlen(path) + 3 < sizeof c->warned)
    snprintf(c->warned + l, sizeof c->warned - l, "%s%s", l ? ", " : "", path);
}

static void set_leaf(lctx *c, size_t row, const char *path, const zrt_dnode *n) {
  char where[600], srcw[ZRT_CFG_STR];
  snprintf(where, sizeof where, "%s:%d:%d", c->file, n->kline, n->kcol);
  snprintf(srcw, sizeof srcw, "%s:%d:%d", c->file, n->kline, n->kcol);
  zrt_cfg_source src = {.kind = ZRT_SRC_FILE};
  snprintf(src.where, sizeof src.where, "%s", srcw);
  const zrt_cfg_key *k = &zrt_cfg_rows[row].k;
  if (c->row_node[row]) {
    const zrt_dnode *f = c->row_node[row];
    zrt_cfg_errs_add(c->errs, "%s: %s: duplicate key (first given at line %d as '%s'); keep one",
                     where, path, f->kline, f->key ? f->key : path);
    return;
  }
  c->row_node[row] = n;
  if (k->type == ZRT_CFGT_PAIR && n->kind == ZRT_DN_SEQ) {
    if (n->nkids != 2 || n->kids[0]->kind != ZRT_DN_SCALAR || n->kids[1]->kind != ZRT_DN_SCALAR) {
      zrt_cfg_errs_add(c->errs,
                       "%s: %s: expected a list of two numbers [beta1, beta2], got %zu items",
                       where, path, n->nkids);
      return;
    }
    char t[256];
    snprintf(t, sizeof t, "%.100s,%.100s", n->kids[0]->text, n->kids[1]->text);
    zrt_config_set_row(c->cfg, row, t, 0, 0, c->prio, &src, where, c->errs);
    return;
  }
  if (n->kind != ZRT_DN_SCALAR) {
    zrt_cfg_errs_add(c->errs, "%s: %s: expected %s, got %s", where, path,
                     k->type == ZRT_CFGT_PAIR    ? "a [number, number] pair"
                     : k->type == ZRT_CFGT_BOOL  ? "true or false"
                     : k->type == ZRT_CFGT_INT   ? "a number (an integer)"
                     : k->type == ZRT_CFGT_FLOAT ? "a number"
                                                 : "a single value",
                     kind_word(n));
    return;
  }
  if (k->type == ZRT_CFGT_PAIR && !n->quoted && strcmp(n->text, "auto")) {
    zrt_cfg_errs_add(c->errs,
                     "%s: %s: expected a list of two numbers [beta1, beta2], got \"%.60s\"", where,
                     path, n->text);
    return;
  }
  /* a quoted "true" or "5" in JSON is still a string: DeepSpeed (pydantic)
   * coerces those, so zrt does too; an explicit null is only for keys that
   * may be unset */
  zrt_config_set_row(c->cfg, row, n->text, n->quoted, n->is_null, c->prio, &src, where, c->errs);
  if (!strcmp(path, "mixed_precision")) c->set_mp = 1;
}

static void apply_map(lctx *c, const zrt_dnode *map, const char *prefix);

/* A deprecated DeepSpeed boolean (cpu_offload: true) sets what DeepSpeed
 * maps it to, at this file's priority, and says so once. */
static void apply_deprecated(lctx *c, const char *path, const zrt_dnode *n, const char *to,
                             const char *val) {
  char where[600];
  snprintf(where, sizeof where, "%s:%d:%d", c->file, n->kline, n->kcol);
  if (n->kind != ZRT_DN_SCALAR ||
      (strcmp(n->text, "true") && strcmp(n->text, "false") && !n->is_null)) {
    zrt_cfg_errs_add(c->errs, "%s: %s: expected true or false, got %s", where, path,
                     n->kind == ZRT_DN_SCALAR ? n->text : kind_word(n));
    return;
  }
  if (n->is_null || strcmp(n->text, "true")) return;
  size_t row = (size_t)zrt_config_schema_find(to);
  if (c->row_node[row]) {
    zrt_cfg_errs_add(c->errs, "%s: %s: duplicate of %s (given at line %d); keep one", where, path,
                     to, c->row_node[row]->kline);
    return;
  }
  c->row_node[row] = n;
  zrt_cfg_source src = {.kind = ZRT_SRC_FILE};
  snprintf(src.where, sizeof src.where, "%s", where);
  zrt_config_set_row(c->cfg, row, val, 0, 0, c->prio, &src, where, c->errs);
  char w[800];
  snprintf(w, sizeof w, "%s: %s is deprecated in DeepSpeed; read as %s: %s", where, path, to, val);
  zrt_config_add_warning(c->cfg, w);
}

/* Duplicate keys of one mapping, in one pass: first[i] is the index of the
 * earlier key that kid i repeats, or -1 (a hash table of the keys; bf16 and
 * bfloat16 are the same section at the top level). NULL when out of
 * memory: then every key counts as new, which only loses the message. */
static uint64_t key_hash(const char *k) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const char *p = k; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  return h;
}

static const char *dup_name(const char *k, int top) {
  return top && !strcmp(k, "bfloat16") ? "bf16" : k;
}

static long *find_dups(const zrt_dnode *map, int top) {
  size_t n = map->nkids, cap = 16;
  while (cap < 2 * n) cap *= 2;
  long *first = malloc(n * sizeof *first + 1);
  long *slot = malloc(cap * sizeof *slot);
  if (!first || !slot) {
    free(first);
    free(slot);
    return NULL;
  }
  for (size_t j = 0; j < cap; j++) slot[j] = -1;
  for (size_t i = 0; i < n; i++) {
    const char *k = dup_name(map->kids[i]->key, top);
    size_t j = (size_t)key_hash(k) & (cap - 1);
    first[i] = -1;
    for (; slot[j] >= 0; j = (j + 1) & (cap - 1))
      if (!strcmp(dup_name(map->kids[slot[j]]->key, top), k)) {
        first[i] = slot[j];
        break;
      }
    if (first[i] < 0) slot[j] = (long)i;
  }
  free(slot);
  return first;
}

static int check_dups(lctx *c, const zrt_dnode *map, const long *first, size_t i,
                      const char *prefix) {
  if (!first || first[i] < 0) return 0;
  const zrt_dnode *n = map->kids[i];
  zrt_cfg_errs_add(c->errs, "%s:%d:%d: %s%s%s: duplicate key (first given at line %d); keep one",
                   c->file, n->kline, n->kcol, prefix, *prefix ? "." : "", n->key,
                   map->kids[first[i]]->kline);
  return 1;
}

static void apply_accelerate_ds(lctx *c, const zrt_dnode *map) {
  long *first = find_dups(map, 0);
  for (size_t i = 0; i < map->nkids; i++) {
    const zrt_dnode *n = map->kids[i];
    if (check_dups(c, map, first, i, "deepspeed_config")) continue;
    char path[512];
    snprintf(path, sizeof path, "deepspeed_config.%s", n->key);
    if (!strcmp(n->key, "deepspeed_config_file")) {
      c->ds_file = n;
      continue;
    }
    if (zrt_config_is_ignored(path)) {
      note_ignored(c, path, n);
      continue;
    }
    const char *to = zrt_config_short_name(n->key);
    if (!to) {
      /* accelerate copies the section's keys onto its launch arguments and
       * never looks at one it does not know: a warning, not an error */
      char sug[300], w[1200];
      zrt_config_suggest(path, sug, sizeof sug);
      snprintf(w, sizeof w,
               "%s:%d:%d: unknown key '%s' ignored (accelerate ignores it too; its "
               "deepspeed_config short names: zero_stage, offload_optimizer_device, "
               "offload_param_device, offload_optimizer_nvme_path, offload_param_nvme_path, "
               "gradient_accumulation_steps, gradient_clipping, deepspeed_config_file, "
               "zero3_init_flag, ...)%s%s",
               c->file, n->kline, n->kcol, path, *sug ? "; " : "", sug);
      zrt_config_add_warning(c->cfg, w);
      warn_once(w);
      continue;
    }
    set_leaf(c, (size_t)zrt_config_schema_find(to), to, n);
  }
  free(first);
}

static void apply_map(lctx *c, const zrt_dnode *map, const char *prefix) {
  long *first = find_dups(map, !*prefix);
  for (size_t i = 0; i < map->nkids; i++) {
    const zrt_dnode *n = map->kids[i];
    if (check_dups(c, map, first, i, prefix)) continue;
    char path[512];
    const char *key = n->key;
    if (!*prefix && !strcmp(key, "bfloat16")) key = "bf16";
    if (*prefix)
      snprintf(path, sizeof path, "%s.%s", prefix, key);
    else
      snprintf(path, sizeof path, "%s", key);
    if (!*prefix && !strcmp(key, "_zrt_sources")) {
      c->sources = n;
      continue;
    }
    if (!*prefix && !strcmp(key, "deepspeed_config_file")) {
      c->ds_file = n;
      continue;
    }
    if (!*prefix && !strcmp(key, "fsdp_config")) {
      c->fsdp = n; /* read after the map: it matters with distributed_type FSDP */
      continue;
    }
    if (!*prefix && !strcmp(key, "mpirun_config") && n->kind == ZRT_DN_MAP) {
      apply_map(c, n, "mpirun_config"); /* mpirun_hostfile is the hostfile */
      continue;
    }
    if (!*prefix && !strcmp(key, "deepspeed_config")) {
      if (n->kind == ZRT_DN_MAP)
        c->ds_section = n; /* read after the map: only distributed_type DEEPSPEED uses it */
      else if (!n->is_null)
        zrt_cfg_errs_add(c->errs,
                         "%s:%d:%d: deepspeed_config: expected a mapping of accelerate's "
                         "DeepSpeed keys, got %s",
                         c->file, n->kline, n->kcol, kind_word(n));
      continue;
    }
    const char *instead, *to, *val;
    int u = zrt_config_unsupported(path, n, &instead);
    if (u > 0) {
      zrt_cfg_errs_add(c->errs, "%s:%d:%d: `%s` is not supported by zrt: %s", c->file, n->kline,
                       n->kcol, path, instead);
      continue;
    }
    if (u < 0 || zrt_config_is_ignored(path)) {
      note_ignored(c, path, n);
      continue;
    }
    if (zrt_config_deprecated(path, &to, &val)) {
      apply_deprecated(c, path, n, to, val);
      continue;
    }
    long row = zrt_config_schema_find(path);
    if (row >= 0) {
      set_leaf(c, (size_t)row, path, n);
      continue;
    }
    if (is_section(path)) {
      if (!*prefix && !strcmp(path, "activation_checkpointing") && n->kind == ZRT_DN_MAP)
        c->actckpt = n;
      if (n->kind == ZRT_DN_MAP)
        apply_map(c, n, path);
      else if (!n->is_null) /* "offload_param": null is DeepSpeed for "none" */
        zrt_cfg_errs_add(c->errs, "%s:%d:%d: %s: expected a mapping (section), got %s", c->file,
                         n->kline, n->kcol, path, kind_word(n));
      continue;
    }
    char sug[300];
    zrt_config_suggest(path, sug, sizeof sug);
    if (!*prefix && !*sug) {
      /* DeepSpeed ignores unknown top-level keys, accelerate refuses them:
       * decided after the map (unknown_top_keys) */
      if (c->nunknown < ZRT_CFG_UNKNOWN_KEPT) c->unknown[c->nunknown] = n;
      c->nunknown++;
      continue;
    }
    zrt_cfg_errs_add(c->errs, "%s:%d:%d: unknown key '%s'%s%s (see docs/config-reference.md)",
                     c->file, n->kline, n->kcol, path, *sug ? "; " : "", sug);
  }
  free(first);
}

static int set_by_this(const lctx *c, size_t row) {
  const zrt_cfg_source *s = &c->cfg->src[row];
  size_t n = strlen(c->file);
  return s->kind == ZRT_SRC_FILE && c->cfg->prio[row] == c->prio &&
         !strncmp(s->where, c->file, n) && s->where[n] == ':';
}

/* Restores sources recorded by zrt_config_write_json: rows it lists get
 * their original kind/where (and that kind's priority), rows it omits were
 * defaults when written. */
static void apply_sources(lctx *c, const zrt_dnode *s) {
  if (s->kind != ZRT_DN_MAP) {
    zrt_cfg_errs_add(c->errs, "%s:%d:%d: _zrt_sources: expected a mapping, got %s", c->file,
                     s->kline, s->kcol, kind_word(s));
    return;
  }
  unsigned char listed[ZRT_CFG_MAXKEYS] = {0};
  for (size_t i = 0; i < s->nkids; i++) {
    const zrt_dnode *n = s->kids[i];
    long row = zrt_config_schema_find(n->key);
    if (row < 0 || n->kind != ZRT_DN_SCALAR) {
      zrt_cfg_errs_add(c->errs, "%s:%d:%d: _zrt_sources.%s: unknown key or not a text value",
                       c->file, n->kline, n->kcol, n->key);
      continue;
    }
    const char *sp = strchr(n->text, ' ');
    size_t kl = sp ? (size_t)(sp - n->text) : strlen(n->text);
    zrt_cfg_source_kind kinds[] = {ZRT_SRC_DEFAULT, ZRT_SRC_FILE,    ZRT_SRC_ENV,
                                   ZRT_SRC_FLAG,    ZRT_SRC_PROGRAM, ZRT_SRC_DERIVED};
    int found = -1;
    for (int k = 0; k < 6; k++) {
      const char *w = zrt_config_source_kind_name(kinds[k]);
      if (strlen(w) == kl && !strncmp(w, n->text, kl)) found = k;
    }
    if (found < 0) {
      zrt_cfg_errs_add(c->errs,
                       "%s:%d:%d: _zrt_sources.%s: expected \"KIND WHERE\" with KIND one of "
                       "default|file|env|flag|program|derived",
                       c->file, n->line, n->col, n->key);
      continue;
    }
    /* only rows this file actually set carry over its recorded source */
    if (!set_by_this(c, (size_t)row)) continue;
    listed[row] = 1;
    c->cfg->src[row].kind = kinds[found];
    snprintf(c->cfg->src[row].where, sizeof c->cfg->src[row].where, "%s", sp ? sp + 1 : "");
    int p = zrt_config_prio_of(kinds[found]);
    /* a file's own values never rise above what loading it may set */
    c->cfg->prio[row] = (unsigned char)(p > c->prio && kinds[found] == ZRT_SRC_FILE ? c->prio : p);
  }
  for (size_t i = 0; i < zrt_cfg_nrows; i++) {
    if (listed[i] || !set_by_this(c, i)) continue;
    memset(&c->cfg->src[i], 0, sizeof c->cfg->src[i]);
    c->cfg->prio[i] = ZRT_PRIO_DEFAULT;
  }
}

static int looks_binary(const char *t, size_t len, size_t *at) {
  for (size_t i = 0; i < len; i++)
    if (t[i] == 0) {
      *at = i;
      return 1;
    }
  return 0;
}

static zrt_status read_file(const char *path, char **text, size_t *len, zrt_cfg_errs *errs,
                            const char *referer) {
  struct stat st;
  *text = NULL;
  char ref[700] = "";
  if (referer) snprintf(ref, sizeof ref, "%s: ", referer);
  if (stat(path, &st) != 0) {
    zrt_cfg_errs_add(errs, "%scannot open config file %s: %s", ref, path, strerror(errno));
    return errno == ENOENT ? ZRT_ERR_IO : ZRT_ERR_IO;
  }
  if (S_ISDIR(st.st_mode)) {
    zrt_cfg_errs_add(errs, "%s%s is a directory, not a config file; give the .yaml or .json path",
                     ref, path);
    return ZRT_ERR_IO;
  }
  if (st.st_size > (off_t)ZRT_CFG_MAX_FILE) {
    zrt_cfg_errs_add(errs, "%s%s is %lld bytes; a config file is at most %u", ref, path,
                     (long long)st.st_size, ZRT_CFG_MAX_FILE);
    return ZRT_ERR_CONFIG;
  }
  /* O_NONBLOCK: a FIFO (or one swapped in after the stat) must not block
   * the open; only a regular file is read */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    zrt_cfg_errs_add(errs, "%scannot open config file %s: %s", ref, path, strerror(errno));
    return ZRT_ERR_IO;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    zrt_cfg_errs_add(
        errs, "%s%s is %s, not a regular file; give the path of the .yaml or .json file", ref, path,
        S_ISFIFO(st.st_mode)  ? "a FIFO (named pipe)"
        : S_ISDIR(st.st_mode) ? "a directory"
        : S_ISCHR(st.st_mode) ? "a character device"
                              : "not a regular file");
    return ZRT_ERR_IO;
  }
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    zrt_cfg_errs_add(errs, "%scannot open config file %s: %s", ref, path, strerror(errno));
    return ZRT_ERR_IO;
  }
  char *buf = malloc(ZRT_CFG_MAX_FILE + 1);
  if (!buf) {
    fclose(f);
    zrt_cfg_errs_add(errs, "%sout of host memory reading %s", ref, path);
    return ZRT_ERR_OOM;
  }
  size_t n = fread(buf, 1, ZRT_CFG_MAX_FILE, f);
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    zrt_cfg_errs_add(errs, "%scannot read config file %s", ref, path);
    return ZRT_ERR_IO;
  }
  buf[n] = 0;
  *text = buf;
  *len = n;
  return ZRT_OK;
}

/* accelerate (DeepSpeedPlugin.set_mixed_precision) raises when the launch
 * YAML's mixed_precision names one 16-bit dtype and the DeepSpeed file
 * enables the other: so does zrt, naming both places. The file's own
 * values are read on a scratch config (the YAML's outrank them in cfg). */
static void precision_conflict(lctx *c, const char *text, size_t len, const char *path) {
  const char *mp = c->cfg->v.mixed_precision;
  int mp_on[2];
  if (!zrt_config_mp_blocks(mp, mp_on)) return;
  int fp16 = mp_on[0];
  zrt_config *scratch;
  if (zrt_config_create(&scratch) != ZRT_OK) return;
  zrt_cfg_errs e = {0};
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  load_text(scratch, text, len, path, dirname(dir), ZRT_PRIO_BENEATH, 1, &e, NULL);
  const char *other = fp16 ? "bf16.enabled" : "fp16.enabled";
  long r = zrt_config_schema_find(other);
  int other_on = fp16 ? scratch->v.bf16_enabled : scratch->v.fp16_enabled;
  if (!e.n && other_on && !scratch->isauto[r]) {
    long m = zrt_config_schema_find("mixed_precision");
    zrt_cfg_errs_add(c->errs,
                     "%s: mixed_precision %s conflicts with %s: %s true; make them agree (or set "
                     "%s \"auto\" in the DeepSpeed file); accelerate raises on the same conflict",
                     c->cfg->src[m].where, mp, scratch->src[r].where, other, other);
  }
  zrt_cfg_errs_free(&e);
  zrt_config_destroy(scratch);
}

static void load_beneath(lctx *c) {
  const zrt_dnode *n = c->ds_file;
  if (n->kind != ZRT_DN_SCALAR || n->is_null || !*n->text) {
    zrt_cfg_errs_add(c->errs,
                     "%s:%d:%d: deepspeed_config_file: expected the path of a DeepSpeed "
                     "JSON file, got %s",
                     c->file, n->kline, n->kcol,
                     n->kind == ZRT_DN_SCALAR ? "nothing" : kind_word(n));
    return;
  }
  if (c->nested) {
    zrt_cfg_errs_add(c->errs,
                     "%s:%d:%d: deepspeed_config_file inside a file that is itself a "
                     "deepspeed_config_file; only the launch YAML may name one",
                     c->file, n->kline, n->kcol);
    return;
  }
  /* accelerate opens a relative path from the working directory; one
   * that is not there is looked for beside the launch YAML (noted) */
  char path[8192];
  snprintf(path, sizeof path, "%s", n->text);
  if (n->text[0] != '/' && c->dir[0] && access(path, F_OK) != 0) {
    snprintf(path, sizeof path, "%s/%s", c->dir, n->text);
    if (access(path, F_OK) == 0) {
      char w[8400];
      snprintf(w, sizeof w,
               "%s:%d:%d: deepspeed_config_file %s is not in the working directory (where "
               "accelerate looks); using %s beside the launch YAML",
               c->file, n->kline, n->kcol, n->text, path);
      zrt_config_add_warning(c->cfg, w);
      warn_once(w); /* zrt launch prints it too, as docs/launch.md says */
    }
  }
  char referer[700];
  snprintf(referer, sizeof referer, "%s:%d:%d: deepspeed_config_file", c->file, n->kline, n->kcol);
  char *text;
  size_t len;
  if (read_file(path, &text, &len, c->errs, referer) != ZRT_OK) return;
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  load_text(c->cfg, text, len, path, dirname(dir), ZRT_PRIO_BENEATH, 1, c->errs, NULL);
  if (c->set_mp) precision_conflict(c, text, len, path);
  free(text);
}

/* Sets row `path` from text at this file's priority (source `at`) unless
 * the file gives that key itself. */
static void set_from(lctx *c, const char *path, const char *text, const char *at) {
  size_t row = (size_t)zrt_config_schema_find(path);
  if (c->row_node[row]) return;
  char where[600];
  snprintf(where, sizeof where, "%s", at);
  zrt_cfg_source src = {.kind = ZRT_SRC_FILE};
  snprintf(src.where, sizeof src.where, "%s", where);
  zrt_config_set_row(c->cfg, row, text, 0, 0, c->prio, &src, where, c->errs);
}

/* accelerate's distributed_type FSDP as its ZeRO equivalent: FULL_SHARD (or
 * fsdp_reshard_after_forward true) -> stage 3, SHARD_GRAD_OP (false) -> 2,
 * NO_SHARD -> 0; fsdp_offload_params -> optimizer (and, at stage 3,
 * parameter) offload to cpu. Logged once; keys without an equivalent are
 * named in one warning. */
static void apply_fsdp(lctx *c) {
  const zrt_dnode *f = c->fsdp;
  const char *stage = NULL, *why = "";
  int offload = 0;
  char other[1024] = "";
  for (size_t i = 0; f && f->kind == ZRT_DN_MAP && i < f->nkids; i++) {
    const zrt_dnode *k = f->kids[i];
    const char *t = k->kind == ZRT_DN_SCALAR && k->text ? k->text : "";
    if (!strcmp(k->key, "fsdp_sharding_strategy") ||
        !strcmp(k->key, "fsdp_reshard_after_forward")) {
      if (!strcmp(t, "FULL_SHARD") || !strcmp(t, "1") || !strcmp(t, "true"))
        stage = "3";
      else if (!strcmp(t, "SHARD_GRAD_OP") || !strcmp(t, "2") || !strcmp(t, "false"))
        stage = "2";
      else if (!strcmp(t, "NO_SHARD") || !strcmp(t, "3"))
        stage = "0";
      else if (!strncmp(t, "HYBRID_SHARD", 12) || !strcmp(t, "4") || !strcmp(t, "5")) {
        stage = !strcmp(t, "HYBRID_SHARD_ZERO2") || !strcmp(t, "5") ? "2" : "3";
        why = " (hybrid sharding has no ZeRO equivalent: zrt shards over all ranks)";
      } else {
        zrt_cfg_errs_add(c->errs,
                         "%s:%d:%d: fsdp_config.%s: \"%s\" is not an FSDP sharding "
                         "strategy (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD)",
                         c->file, k->kline, k->kcol, k->key, t);
        return;
      }
    } else if (!strcmp(k->key, "fsdp_offload_params")) {
      offload = !strcmp(t, "true");
    } else if (strlen(other) + strlen(k->key) + 3 < sizeof other) {
      snprintf(other + strlen(other), sizeof other - strlen(other), "%s%s", other[0] ? ", " : "",
               k->key);
    }
  }
  if (!stage) {
    stage = "3"; /* accelerate's default strategy is FULL_SHARD */
    if (!f) why = " (no fsdp_config: accelerate's default FULL_SHARD)";
  }
  char at[600];
  long dt = zrt_config_schema_find("distributed_type");
  if (f)
    snprintf(at, sizeof at, "%s:%d:%d", c->file, f->kline, f->kcol);
  else
    snprintf(at, sizeof at, "%s", c->cfg->src[dt].where);
  set_from(c, "zero_optimization.stage", stage, at);
  if (offload) {
    set_from(c, "zero_optimization.offload_optimizer.device", "cpu", at);
    if (!strcmp(stage, "3")) set_from(c, "zero_optimization.offload_param.device", "cpu", at);
  }
  char msg[1600];
  snprintf(msg, sizeof msg, "%s: distributed_type FSDP runs as ZeRO stage %s%s%s%s", c->file, stage,
           why, offload ? ", optimizer and parameter offload to cpu" : "",
           other[0] ? "; fsdp_config keys without a ZeRO equivalent, ignored: " : "");
  if (other[0]) snprintf(msg + strlen(msg), sizeof msg - strlen(msg), "%s", other);
  zrt_config_add_warning(c->cfg, msg);
  warn_once(msg);
}

/* A file naming distributed_type or compute_environment at its top level
 * is an accelerate launch config (accelerate requires distributed_type). */
static int is_accelerate_file(const zrt_dnode *tree) {
  for (size_t i = 0; i < tree->nkids; i++)
    if (!strcmp(tree->kids[i]->key, "distributed_type") ||
        !strcmp(tree->kids[i]->key, "compute_environment"))
      return 1;
  return 0;
}

static int cmp_key(const void *a, const void *b) {
  return strcmp((*(const zrt_dnode *const *)a)->key, (*(const zrt_dnode *const *)b)->key);
}

/* Unknown top-level keys: accelerate's ClusterConfig.from_yaml_file raises
 * on them (listing them sorted), DeepSpeed ignores them. */
static void unknown_top_keys(lctx *c, const zrt_dnode *tree) {
  if (!c->nunknown) return;
  int kept = c->nunknown < ZRT_CFG_UNKNOWN_KEPT ? (int)c->nunknown : ZRT_CFG_UNKNOWN_KEPT;
  if (!is_accelerate_file(tree)) {
    /* the first few one by one; the rest are one line at the end of the load */
    for (int i = 0; i < kept && i < ZRT_CFG_UNKNOWN_SHOWN; i++) {
      const zrt_dnode *n = c->unknown[i];
      char w[700];
      snprintf(w, sizeof w,
               "%s:%d:%d: unknown top-level key '%s' ignored (DeepSpeed ignores it too; see "
               "docs/config-reference.md)",
               c->file, n->kline, n->kcol, n->key);
      zrt_config_add_warning(c->cfg, w);
      warn_once(w);
    }
    return;
  }
  const zrt_dnode *sorted[ZRT_CFG_UNKNOWN_KEPT];
  memcpy(sorted, c->unknown, (size_t)kept * sizeof sorted[0]);
  qsort(sorted, (size_t)kept, sizeof sorted[0], cmp_key);
  char list[1500] = "";
  for (int i = 0; i < kept; i++) {
    size_t l = strlen(list);
    snprintf(list + l, sizeof list - l, "%s'%s'", i ? ", " : "", sorted[i]->key);
  }
  if (c->nunknown > kept) {
    size_t l = strlen(list);
    snprintf(list + l, sizeof list - l, " and %ld more", c->nunknown - kept);
  }
  zrt_cfg_errs_add(c->errs,
                   "%s:%d:%d: The config file at %s had unknown keys (%s): accelerate refuses "
                   "them too; fix or remove them (a launch YAML takes accelerate's keys and "
                   "DeepSpeed's, see docs/config-reference.md)",
                   c->file, c->unknown[0]->kline, c->unknown[0]->kcol, c->file, list);
}

/* accelerate's parallelism_config: tensor, context and sequence parallel
 * sizes above 1 split each sample or layer across ranks, which zrt cannot
 * do; running the ranks as data parallel instead would train another
 * batch, so the file is refused naming the key. Sizes of 1 and the data
 * parallel sizes (dp_replicate, dp_shard: what ZeRO's data parallelism
 * is) are accepted. */
static void parallelism_config(lctx *c, const zrt_dnode *tree) {
  for (size_t i = 0; i < tree->nkids; i++) {
    const zrt_dnode *p = tree->kids[i];
    if (strcmp(p->key, "parallelism_config") || p->kind != ZRT_DN_MAP) continue;
    static const char *const split[][2] = {{"parallelism_config_tp_size", "tensor"},
                                           {"parallelism_config_cp_size", "context"},
                                           {"parallelism_config_sp_size", "sequence"}};
    for (size_t j = 0; j < p->nkids; j++) {
      const zrt_dnode *n = p->kids[j];
      for (size_t k = 0; k < sizeof split / sizeof split[0]; k++) {
        if (strcmp(n->key, split[k][0]) || n->kind != ZRT_DN_SCALAR) continue;
        char *end;
        long v = strtol(n->text, &end, 10);
        if (*end || end == n->text || v <= 1) continue;
        zrt_cfg_errs_add(c->errs,
                         "%s:%d:%d: parallelism_config.%s %ld: zrt has no %s parallelism (it "
                         "runs every rank as a data-parallel ZeRO rank, which would train "
                         "another global batch than accelerate's %ld-rank %s shards); set it "
                         "to 1 or remove parallelism_config",
                         c->file, n->kline, n->kcol, n->key, v, split[k][1], v, split[k][1]);
      }
    }
  }
}

/* Applies one text to cfg (already a tentative copy). Errors go to errs. */
static zrt_status load_text(zrt_config *cfg, const char *text, size_t len, const char *file,
                            const char *dir, int prio, int nested, zrt_cfg_errs *errs,
                            zrt_config *unused) {
  (void)unused;
  size_t at = 0;
  if (looks_binary(text, len, &at)) {
    zrt_cfg_errs_add(errs,
                     "%s: looks like a binary file (NUL byte at offset %zu); expected "
                     "YAML or DeepSpeed JSON text",
                     file, at);
    return ZRT_ERR_CONFIG;
  }
  size_t i = 0;
  if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) i = 3;
  while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n')) i++;
  if (i == len) {
    zrt_cfg_errs_add(errs, "%s: the file is empty; expected DeepSpeed JSON or YAML config keys",
                     file);
    return ZRT_ERR_CONFIG;
  }
  zrt_dnode *tree = text[i] == '{' ? zrt_config_parse_json(text, len, file, errs)
                                   : zrt_config_parse_yaml(text, len, file, errs);
  if (!tree) return ZRT_ERR_CONFIG;
  if (tree->kind != ZRT_DN_MAP) {
    zrt_cfg_errs_add(errs, "%s: expected a mapping of config keys at the top level", file);
    zrt_dnode_free(tree);
    return ZRT_ERR_CONFIG;
  }
  lctx c = {.cfg = cfg, .file = file, .prio = prio, .nested = nested, .errs = errs};
  snprintf(c.dir, sizeof c.dir, "%s", dir ? dir : "");
  apply_map(&c, tree, "");
  if (c.actckpt) {
    /* DeepSpeed checkpoints when the model calls deepspeed.checkpointing (a
     * Hugging Face user switches gradient checkpointing on beside the
     * section); in zrt the section itself says so, unless this same file
     * sets zrt.activation_checkpointing */
    long r = zrt_config_schema_find("zrt.activation_checkpointing");
    if (!c.row_node[r]) {
      zrt_cfg_source src = {.kind = ZRT_SRC_FILE};
      snprintf(src.where, sizeof src.where, "%s:%d:%d", file, c.actckpt->kline, c.actckpt->kcol);
      zrt_config_set_row(cfg, (size_t)r, "true", 0, 0, prio, &src, src.where, errs);
    }
  }
  unknown_top_keys(&c, tree);
  parallelism_config(&c, tree);
  if (c.ds_section) {
    /* accelerate reads deepspeed_config (and opens its deepspeed_config_file)
     * only for distributed_type DEEPSPEED */
    long dt = zrt_config_schema_find("distributed_type");
    const char *type = cfg->v.distributed_type;
    if (!strcmp(type, "DEEPSPEED") || !set_by_this(&c, (size_t)dt)) {
      apply_accelerate_ds(&c, c.ds_section);
    } else if (c.ds_section->nkids) {
      char why[160];
      snprintf(why, sizeof why,
               "deepspeed_config (distributed_type %s: accelerate uses it only "
               "with DEEPSPEED)",
               type);
      note_ignored(&c, why, c.ds_section);
    }
  }
  if (c.set_mp) {
    /* mixed_precision sets fp16/bf16.enabled unless this same file names
     * them itself; "no" defers to a deepspeed_config_file beneath */
    long mrow = zrt_config_schema_find("mixed_precision");
    int on[2];
    if (zrt_config_mp_blocks(cfg->v.mixed_precision, on) || !c.ds_file) {
      for (int k = 0; k < 2; k++) {
        long r = zrt_config_schema_find(zrt_cfg_mp_keys[k]);
        if (cfg->src[r].kind == ZRT_SRC_FILE && cfg->prio[r] == prio &&
            !strncmp(cfg->src[r].where, file, strlen(file)) &&
            cfg->src[r].where[strlen(file)] == ':')
          continue;
        zrt_config_set_row(cfg, (size_t)r, on[k] ? "true" : "false", 0, 0, prio, &cfg->src[mrow],
                           NULL, errs);
      }
    }
  }
  /* (a config zrt wrote, _zrt_sources, already holds the mapped values) */
  if (!strcmp(cfg->v.distributed_type, "FSDP") && !c.sources)
    apply_fsdp(&c);
  else if (c.fsdp)
    note_ignored(&c, "fsdp_config", c.fsdp);
  if (c.sources) apply_sources(&c, c.sources);
  if (c.ds_file) load_beneath(&c);
  if (c.nunknown > ZRT_CFG_UNKNOWN_SHOWN && !is_accelerate_file(tree)) {
    char w[700];
    snprintf(w, sizeof w,
             "%s: and %ld more unknown top-level keys ignored (DeepSpeed ignores them too; see "
             "docs/config-reference.md)",
             file, c.nunknown - ZRT_CFG_UNKNOWN_SHOWN);
    zrt_config_add_warning(cfg, w);
    warn_once(w);
  }
  if (c.warned[0]) {
    /* once per process: zrt launch loads the same file more than once */
    char msg[2400];
    snprintf(msg, sizeof msg, "%s: keys accepted but not used by zrt: %s", file, c.warned);
    warn_once(msg);
  }
  zrt_dnode_free(tree);
  return errs->n ? ZRT_ERR_CONFIG : ZRT_OK;
}

static zrt_status finish(zrt_config *cfg, zrt_config *tmp, zrt_cfg_errs *errs, zrt_status st) {
  if (errs->n) {
    if (st == ZRT_OK) st = ZRT_ERR_CONFIG;
    zrt_status r = zrt_error(st, "%s", errs->buf);
    if (errs->n > 1) zrt_error_context(r, "%d config errors:\n", errs->n);
    zrt_cfg_errs_free(errs);
    zrt_config_destroy(tmp);
    return r;
  }
  /* commit: the copy becomes the config (its warnings include cfg's) */
  for (size_t i = 0; i < cfg->nwarn; i++) free(cfg->warn[i]);
  free(cfg->warn);
  *cfg = *tmp;
  free(tmp);
  return ZRT_OK;
}

zrt_status zrt_config_load_buffer(zrt_config *cfg, const char *text, size_t len, const char *name,
                                  const char *dir) {
  if (!cfg || !text || !name)
    return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_config_load_buffer: NULL argument");
  zrt_config *tmp;
  ZRT_CHECK(zrt_config_copy(cfg, &tmp));
  zrt_cfg_errs errs = {0};
  /* the parsers want a terminated string */
  char *t = malloc(len + 1);
  if (!t) {
    zrt_config_destroy(tmp);
    return zrt_error(ZRT_ERR_OOM, "out of host memory loading %s", name);
  }
  memcpy(t, text, len);
  t[len] = 0;
  zrt_status st = load_text(tmp, t, len, name, dir, ZRT_PRIO_FILE, 0, &errs, NULL);
  free(t);
  if (st == ZRT_OK) zrt_config_validate(tmp, &errs);
  return finish(cfg, tmp, &errs, st);
}

zrt_status zrt_config_load_file(zrt_config *cfg, const char *path) {
  if (!cfg || !path) return zrt_error(ZRT_ERR_INVALID_ARG, "zrt_config_load_file: NULL argument");
  zrt_cfg_errs errs = {0};
  char *text;
  size_t len;
  zrt_status st = read_file(path, &text, &len, &errs, NULL);
  if (st != ZRT_OK) {
    zrt_status r = zrt_error(st, "%s", errs.buf ? errs.buf : "cannot read config file");
    zrt_cfg_errs_free(&errs);
    return r;
  }
  zrt_config *tmp;
  st = zrt_config_copy(cfg, &tmp);
  if (st != ZRT_OK) {
    free(text);
    return st;
  }
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  st = load_text(tmp, text, len, path, dirname(dir), ZRT_PRIO_FILE, 0, &errs, NULL);
  free(text);
  if (st == ZRT_OK) zrt_config_validate(tmp, &errs);
  return finish(cfg, tmp, &errs, st);
}
