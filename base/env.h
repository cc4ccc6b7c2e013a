/*
 * env.h — the table of environment parameters (NCCL's NCCL_PARAM idea):
 * every variable zrt (the library and the `zrt` command) reads, with its
 * type, what unset means, when it is read and one line of documentation.
 * zrt_env() is the one reader: no other file calls getenv
 * (tests/cli/test_env_table.sh checks it). The same table is printed by
 * `zrt env` and generates docs/environment.md (`zrt env --reference`).
 *
 * Test hooks (kind ZRT_ENV_HOOK) act only behind one switch,
 * ZRT_TEST_HOOKS=1: without it zrt_env() returns NULL for them, and
 * zrt_env_check() (run by zrt_engine_create) refuses a hook that is set,
 * so a stray variable never changes a training run silently.
 *
 * Values are not copied: a variable the launcher sets in its own process
 * before reading it back (ZRT_LAUNCH_HELPERS, OMP_WAIT_POLICY...) and the
 * tests that set one between two engines see the current value. A reader
 * that must see one value per process caches it at its site (column
 * "read": "once per process").
 */
#ifndef ZRT_ENV_H
#define ZRT_ENV_H

#include <stddef.h>

#include "internal.h"

typedef enum zrt_env_kind {
  ZRT_ENV_KNOB = 0, /* a setting for users */
  ZRT_ENV_LAUNCH,   /* set by `zrt launch` for its ranks and wrappers */
  ZRT_ENV_FOREIGN,  /* set by others (Open MPI, a launcher, OpenMP, the system) */
  ZRT_ENV_HOOK,     /* a test hook: acts only with ZRT_TEST_HOOKS=1 */
} zrt_env_kind;

typedef struct zrt_env_param {
  const char *name;
  const char *type; /* "bool", "int", "number", "size", "path", "text", or the choices "a|b|c" */
  zrt_env_kind kind;
  const char *unset; /* what unset (or empty) means */
  const char *read;  /* who reads it and when */
  const char *doc;   /* one line */
} zrt_env_param;

/* The table, in documentation order; *n its length. */
const zrt_env_param *zrt_env_params(size_t *n);
/* The row of name, or NULL. */
const zrt_env_param *zrt_env_find(const char *name);
const char *zrt_env_kind_name(zrt_env_kind kind);

/* The value of a variable of the table (NULL when unset; a hook's NULL
 * unless ZRT_TEST_HOOKS=1). A name that is not in the table is a bug in
 * zrt: it is logged as an error and NULL is returned. */
const char *zrt_env(const char *name);

/* A config override: the value of the environment variable the config
 * schema names for a key (its env column; config-reference.md), NULL when
 * unset. The schema is that table; only config.c reads through it. */
const char *zrt_env_config(const char *name);

/* 1 when ZRT_TEST_HOOKS=1. */
int zrt_env_hooks_on(void);
/* ZRT_TEST_HOOKS is unset, empty or 1, and no hook is set without it;
 * else ZRT_ERR_CONFIG naming the variable and what to do. */
zrt_status zrt_env_check(void);

#endif
