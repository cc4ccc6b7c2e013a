/*
 * config_impl.h — private to config/config*.c: the schema rows with the
 * zrt_cfg field each one fills, the handle layout, the parsed-document tree
 * both loaders (libyaml, cJSON) produce, and the error collector.
 *
 * Invariants: the handle is flat (no pointers except the warning list), so a
 * struct copy plus a warning-list copy is a deep copy — that is how a load
 * works on a tentative copy and commits only when no error was found.
 * val[i] / src[i] / prio[i] / isauto[i] are indexed by schema row.
 */
#ifndef ZRT_CONFIG_IMPL_H
#define ZRT_CONFIG_IMPL_H

#include <stddef.h>

#include "config.h"
#include "internal.h"

typedef struct zrt_cfg_row {
  zrt_cfg_key k;
  size_t off;       /* offset of the field in zrt_cfg */
  size_t size;      /* size of the field (int / int64 / char[N] ...) */
  size_t off2;      /* PAIR: offset of the second double */
  const int *evals; /* ENUM on an int field: value of each choice */
} zrt_cfg_row;

extern const zrt_cfg_row zrt_cfg_rows[];
extern const size_t zrt_cfg_nrows;

/* Priorities of sources (see config.h). */
enum {
  ZRT_PRIO_DEFAULT = 0,
  ZRT_PRIO_BENEATH = 1,
  ZRT_PRIO_FILE = 2,
  ZRT_PRIO_PROGRAM = 3,
  ZRT_PRIO_ENV = 4,
  ZRT_PRIO_FLAG = 5
};

#define ZRT_CFG_MAXKEYS 160

struct zrt_config {
  zrt_cfg v;
  zrt_cfg_source src[ZRT_CFG_MAXKEYS];
  unsigned char prio[ZRT_CFG_MAXKEYS];
  unsigned char isauto[ZRT_CFG_MAXKEYS];
  char **warn;
  size_t nwarn;
};

/* ---- parsed document tree (format independent) */
typedef enum { ZRT_DN_SCALAR = 0, ZRT_DN_MAP, ZRT_DN_SEQ } zrt_dn_kind;

typedef struct zrt_dnode {
  zrt_dn_kind kind;
  char *key; /* map member key (NULL otherwise) */
  int kline, kcol;
  int line, col; /* of the value, 1-based */
  char *text;    /* scalar text */
  int quoted;    /* scalar was a quoted string */
  int is_null;   /* JSON null / YAML null, ~ */
  struct zrt_dnode **kids;
  size_t nkids;
} zrt_dnode;

void zrt_dnode_free(zrt_dnode *n);
zrt_dnode *zrt_dnode_new(zrt_dn_kind kind);
int zrt_dnode_add(zrt_dnode *parent, zrt_dnode *kid);

/* Error collector: every error of a load, one line each. */
typedef struct zrt_cfg_errs {
  char *buf;
  size_t len, cap;
  int n;
} zrt_cfg_errs;
void zrt_cfg_errs_add(zrt_cfg_errs *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void zrt_cfg_errs_free(zrt_cfg_errs *e);

/* Parsers: text (NUL-terminated, len bytes) -> tree, or errors added with
 * "file:line:col: " prefixes. Return NULL on a syntax error. */
zrt_dnode *zrt_config_parse_yaml(const char *text, size_t len, const char *file,
                                 zrt_cfg_errs *errs);
zrt_dnode *zrt_config_parse_json(const char *text, size_t len, const char *file,
                                 zrt_cfg_errs *errs);

/* Sets row i from text at priority prio with source src; returns 0 or adds
 * an error (prefixed by `where`, naming the key) and returns -1. A write at
 * lower priority than the current one is a no-op returning 0. */
int zrt_config_set_row(zrt_config *cfg, size_t i, const char *text, int quoted, int is_null,
                       int prio, const zrt_cfg_source *src, const char *where, zrt_cfg_errs *errs);
/* Text form of row i into buf. */
void zrt_config_row_text(const zrt_config *cfg, size_t i, char *buf, size_t len);
/* Cross-key checks; adds errors naming each key's source. */
void zrt_config_validate(const zrt_config *cfg, zrt_cfg_errs *errs);
int zrt_config_add_warning(zrt_config *cfg, const char *msg);
int zrt_config_prio_of(zrt_cfg_source_kind k);
/* Moves tmp's values into cfg, keeping cfg's warnings; frees tmp. */
void zrt_config_commit_values(zrt_config *cfg, zrt_config *tmp);
/* Shortest text of a double that reads back to the same value. */
void zrt_config_fmt_double(double v, char *buf, size_t len);
/* "program default" applies to row i: the config says "auto" there, or
 * (micro-batch only) gives no batch size at all. */
int zrt_config_program_fills(const zrt_config *cfg, size_t i);
/* ZRT_OK unless row i is a batch key the user gave explicitly with another
 * value than the program's `value` (error naming both); *same = 1 when the
 * user gave exactly that value. */
zrt_status zrt_config_program_agrees(const zrt_config *cfg, size_t i, const char *value,
                                     const char *origin, int *same);
/* Number of dots in a key path; the last component of a key path. */
int zrt_config_key_depth(const char *path);
const char *zrt_config_key_leaf(const char *path);

/* accelerate deepspeed_config short name -> DeepSpeed path, or NULL. */
const char *zrt_config_short_name(const char *name);
/* accelerate's mixed_precision onto DeepSpeed's precision blocks, the one
 * mapping (config.c) that zrt_config_set, the file loader and resolve use:
 * on[k] is whether zrt_cfg_mp_keys[k] ("fp16.enabled", "bf16.enabled") is
 * true under mp. Returns 1 when mp names a 16-bit dtype, 0 for "no". */
extern const char *const zrt_cfg_mp_keys[2];
int zrt_config_mp_blocks(const char *mp, int on[2]);

/* DeepSpeed compatibility (config_compat.c). The alias's schema path for a
 * pydantic field name, or NULL. */
const char *zrt_config_alias(const char *path);
/* A deprecated DeepSpeed boolean that sets `to` = `value` when true. */
int zrt_config_deprecated(const char *path, const char **to, const char **value);
/* 1: `path` turns on a DeepSpeed feature zrt lacks (*instead says what to
 * use); -1: listed but switched off by the node; 0: not listed. */
int zrt_config_unsupported(const char *path, const zrt_dnode *n, const char **instead);

/* Ignored keys (accepted, warned): returns 1 when `path` (dotted) is one. */
int zrt_config_is_ignored(const char *path);
extern const char *const zrt_cfg_ignored[];

#endif
