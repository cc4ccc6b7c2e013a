/*
 * config_names.c — key names: the error collector and parsed-tree helpers
 * both loaders share, the edit distance behind every did-you-mean, the
 * suggestion search over schema paths, section prefixes, extra names and
 * ignored keys, the schema lookup (with the "bfloat16" alias) and
 * accelerate's deepspeed_config short names.
 *
 * Invariants: a suggestion is offered only at the same depth as the key it
 * corrects and only when the distance is small against the leaf's length,
 * so an unrelated key never gets a misleading guess.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_impl.h"

/* ------------------------------------------------------------ utilities */

void zrt_cfg_errs_add(zrt_cfg_errs *e, const char *fmt, ...) {
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof line) n = sizeof line - 1;
  e->n++;
  /* past this size the list is only noise; keep the count honest */
  if (e->len > 6000) return;
  size_t need = e->len + (size_t)n + 2;
  if (need > e->cap) {
    size_t cap = e->cap ? e->cap * 2 : 1024;
    while (cap < need) cap *= 2;
    char *nb = realloc(e->buf, cap);
    if (!nb) return;
    e->buf = nb;
    e->cap = cap;
  }
  if (e->len) e->buf[e->len++] = '\n';
  memcpy(e->buf + e->len, line, (size_t)n);
  e->len += (size_t)n;
  e->buf[e->len] = 0;
}

void zrt_cfg_errs_free(zrt_cfg_errs *e) {
  free(e->buf);
  memset(e, 0, sizeof *e);
}

zrt_dnode *zrt_dnode_new(zrt_dn_kind kind) {
  zrt_dnode *n = calloc(1, sizeof *n);
  if (n) n->kind = kind;
  return n;
}

int zrt_dnode_add(zrt_dnode *parent, zrt_dnode *kid) {
  if (!(parent->nkids & (parent->nkids - 1)) || !parent->kids) {
    size_t cap = parent->nkids ? parent->nkids * 2 : 4;
    zrt_dnode **nk = realloc(parent->kids, cap * sizeof *nk);
    if (!nk) return -1;
    parent->kids = nk;
  }
  parent->kids[parent->nkids++] = kid;
  return 0;
}

void zrt_dnode_free(zrt_dnode *n) {
  if (!n) return;
  for (size_t i = 0; i < n->nkids; i++) zrt_dnode_free(n->kids[i]);
  free(n->kids);
  free(n->key);
  free(n->text);
  free(n);
}

/* The distance when it is at most `max`, else a value above max: a row of
 * the table whose minimum exceeds max can only grow, so it stops there. */
static int edit_distance_upto(const char *a, const char *b, int max) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 64 || lb > 64) return 99;
  if ((int)(la > lb ? la - lb : lb - la) > max) return max + 1;
  int d[65][65];
  for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int rowmin = d[i][0];
    for (size_t j = 1; j <= lb; j++) {
      int c = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]) ? 0 : 1;
      int v = d[i - 1][j - 1] + c;
      if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
      /* adjacent transposition: the most common typo */
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
        v = d[i - 2][j - 2] + 1;
      d[i][j] = v;
      if (v < rowmin) rowmin = v;
    }
    /* a transposition reads two rows back: stop only when both exceed max */
    if (rowmin > max && i > 1) {
      int prevmin = d[i - 1][0];
      for (size_t j = 1; j <= lb; j++)
        if (d[i - 1][j] < prevmin) prevmin = d[i - 1][j];
      if (prevmin > max) return max + 1;
    }
  }
  return d[la][lb];
}

int zrt_config_key_depth(const char *p) {
  int d = 0;
  for (; *p; p++) d += *p == '.';
  return d;
}

const char *zrt_config_key_leaf(const char *p) {
  const char *d = strrchr(p, '.');
  return d ? d + 1 : p;
}

/* Extra names a file may use that are not schema rows. */
static const char *const extra_names[] = {"bfloat16",
                                          "deepspeed_config",
                                          "deepspeed_config_file",
                                          "deepspeed_config.deepspeed_config_file",
                                          "deepspeed_config.zero_stage",
                                          "deepspeed_config.offload_optimizer_device",
                                          "deepspeed_config.offload_param_device",
                                          "deepspeed_config.offload_optimizer_nvme_path",
                                          "deepspeed_config.offload_param_nvme_path",
                                          "deepspeed_config.gradient_accumulation_steps",
                                          "deepspeed_config.gradient_clipping",
                                          "deepspeed_config.deepspeed_hostfile",
                                          "_zrt_sources",
                                          NULL};

/* The names a suggestion may offer, in the order they are tried (schema
 * paths, section prefixes, extra names, ignored keys), each with its depth,
 * length and a histogram of its characters (case folded, 6 bits): derived
 * from the constant tables the first time a suggestion is asked for, so one
 * suggestion is one pass over the names (a file with 100k unknown keys asks
 * 100k times). Only the table's shape is kept; it never changes after. */
#define SUGGEST_MAX (3 * ZRT_CFG_MAXKEYS)
typedef struct suggest_name {
  const char *name;
  int depth, len;
  unsigned char hist[64];
} suggest_name;
static suggest_name suggest_names[SUGGEST_MAX];
static char suggest_sec[ZRT_CFG_MAXKEYS][96];
static size_t suggest_n;
static pthread_once_t suggest_once = PTHREAD_ONCE_INIT;

static void suggest_hist(const char *s, unsigned char h[64]) {
  memset(h, 0, 64);
  for (; *s; s++) {
    unsigned char *b = &h[tolower((unsigned char)*s) & 63];
    if (*b < 255) (*b)++;
  }
}

static void suggest_add(const char *name) {
  if (suggest_n >= SUGGEST_MAX) return;
  suggest_name *e = &suggest_names[suggest_n++];
  e->name = name;
  e->depth = zrt_config_key_depth(name);
  e->len = (int)strlen(name);
  suggest_hist(name, e->hist);
}

static void suggest_names_init(void) {
  size_t nsec = 0;
  for (size_t i = 0; i < zrt_cfg_nrows; i++) {
    const char *p = zrt_cfg_rows[i].k.path;
    suggest_add(p);
    const char *q = p;
    while ((q = strchr(q, '.')) && nsec < ZRT_CFG_MAXKEYS) {
      size_t n = (size_t)(q - p);
      if (n < sizeof suggest_sec[0]) {
        memcpy(suggest_sec[nsec], p, n);
        suggest_sec[nsec][n] = 0;
        int dup = 0;
        for (size_t j = 0; j < nsec && !dup; j++) dup = !strcmp(suggest_sec[j], suggest_sec[nsec]);
        if (!dup) nsec++;
      }
      q++;
    }
  }
  /* sections after all the paths: a path wins a tie, as it always did */
  for (size_t j = 0; j < nsec; j++) suggest_add(suggest_sec[j]);
  for (size_t i = 0; extra_names[i]; i++) suggest_add(extra_names[i]);
  for (size_t i = 0; zrt_cfg_ignored[i]; i++) suggest_add(zrt_cfg_ignored[i]);
}

const char *zrt_config_suggest(const char *key_path, char *buf, size_t len) {
  if (!buf || !len) return "";
  buf[0] = 0;
  if (!key_path) return buf;
  int depth = zrt_config_key_depth(key_path);
  int leaf = (int)strlen(zrt_config_key_leaf(key_path));
  int limit = leaf / 3 > 2 ? leaf / 3 : 2;
  const char *best = NULL;
  int bestd = limit + 1; /* nothing farther is offered */
  int klen = (int)strlen(key_path);
  unsigned char kh[64];
  suggest_hist(key_path, kh);
  pthread_once(&suggest_once, suggest_names_init);
  for (size_t i = 0; i < suggest_n; i++) {
    const suggest_name *e = &suggest_names[i];
    if (e->depth != depth || abs(e->len - klen) >= bestd) continue;
    /* each edit changes the character counts by at most 2 in all: a cheap
     * lower bound that rules out most names before the distance table */
    int l1 = 0;
    for (int b = 0; b < 64; b++) l1 += abs((int)e->hist[b] - (int)kh[b]);
    if ((l1 + 1) / 2 >= bestd) continue;
    int d = edit_distance_upto(e->name, key_path, bestd - 1);
    if (d < bestd) {
      bestd = d;
      best = e->name;
    }
  }
  if (best && bestd <= limit) snprintf(buf, len, "did you mean '%s'?", best);
  return buf;
}

long zrt_config_schema_find(const char *key_path) {
  if (!key_path) return -1;
  char tmp[256];
  if (!strncmp(key_path, "bfloat16.", 9)) {
    snprintf(tmp, sizeof tmp, "bf16.%s", key_path + 9);
    key_path = tmp;
  }
  const char *alias = zrt_config_alias(key_path);
  if (alias) key_path = alias;
  for (size_t i = 0; i < zrt_cfg_nrows; i++)
    if (!strcmp(zrt_cfg_rows[i].k.path, key_path)) return (long)i;
  return -1;
}

/* accelerate's deepspeed_config short names -> DeepSpeed key paths */
static const char *const short_names[][2] = {
    {"zero_stage", "zero_optimization.stage"},
    {"offload_optimizer_device", "zero_optimization.offload_optimizer.device"},
    {"offload_param_device", "zero_optimization.offload_param.device"},
    {"offload_optimizer_nvme_path", "zero_optimization.offload_optimizer.nvme_path"},
    {"offload_param_nvme_path", "zero_optimization.offload_param.nvme_path"},
    {"gradient_accumulation_steps", "gradient_accumulation_steps"},
    {"gradient_clipping", "gradient_clipping"},
    {"deepspeed_hostfile", "hostfile"},
    {NULL, NULL}};

const char *zrt_config_short_name(const char *name) {
  for (size_t i = 0; short_names[i][0]; i++)
    if (!strcmp(short_names[i][0], name)) return short_names[i][1];
  return NULL;
}

const char *zrt_config_canonical_key(const char *key_path) {
  if (!key_path) return NULL;
  long i = zrt_config_schema_find(key_path);
  if (i >= 0) return zrt_cfg_rows[i].k.path;
  const char *k = key_path;
  if (!strncmp(k, "deepspeed_config.", 17)) k += 17;
  const char *s = zrt_config_short_name(k);
  if (s) return s;
  char tmp[256];
  snprintf(tmp, sizeof tmp, "zrt.%s", k);
  i = zrt_config_schema_find(tmp);
  if (i >= 0) return zrt_cfg_rows[i].k.path;
  return NULL;
}

/* ---------------------------------------------------------- field access */
