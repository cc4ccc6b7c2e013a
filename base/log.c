/*
 * log.c — stderr logging with a rank prefix, levels from ZRT_LOG_LEVEL
 * (error|warn|info|debug, default info), a log-once facility, and small
 * text helpers (sizes with units, monotonic time) shared by all modules.
 *
 * Global state here is the log settings only (DESIGN.md rule 5).
 */
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "env.h"
#include "internal.h"

static int zrt_log_rank = -1;
static int zrt_log_level_cached = -1; /* atomic: any thread may log first */
static pthread_mutex_t zrt_log_mu = PTHREAD_MUTEX_INITIALIZER;

#define ZRT_LOG_ONCE_MAX 64
static char zrt_log_once_keys[ZRT_LOG_ONCE_MAX][64];
static int zrt_log_once_n;

void zrt_log_set_rank(int rank) { zrt_log_rank = rank; }
int zrt_log_get_rank(void) { return zrt_log_rank; }

zrt_log_level zrt_log_get_level(void) {
  int cached = __atomic_load_n(&zrt_log_level_cached, __ATOMIC_RELAXED);
  if (cached < 0) {
    const char *s = zrt_env("ZRT_LOG_LEVEL");
    int lvl = ZRT_LOG_INFO;
    if (s) {
      if (!strcasecmp(s, "error"))
        lvl = ZRT_LOG_ERROR;
      else if (!strcasecmp(s, "warn") || !strcasecmp(s, "warning"))
        lvl = ZRT_LOG_WARN;
      else if (!strcasecmp(s, "debug"))
        lvl = ZRT_LOG_DEBUG;
      else if (*s && strcasecmp(s, "info"))
        fprintf(stderr,
                "[zrt] warn: ZRT_LOG_LEVEL=%s is not one of error|warn|info|debug; "
                "logging at info\n",
                s);
    }
    __atomic_store_n(&zrt_log_level_cached, lvl, __ATOMIC_RELAXED);
    cached = lvl;
  }
  return (zrt_log_level)cached;
}

static void zrt_vlog(zrt_log_level level, const char *fmt, va_list ap) {
  static const char *names[] = {"error", "warn", "info", "debug"};
  if ((int)level > (int)zrt_log_get_level()) return;
  char msg[4096];
  vsnprintf(msg, sizeof msg, fmt, ap);
  pthread_mutex_lock(&zrt_log_mu);
  if (zrt_log_rank >= 0)
    fprintf(stderr, "[zrt rank %d] %s: %s\n", zrt_log_rank, names[level], msg);
  else
    fprintf(stderr, "[zrt] %s: %s\n", names[level], msg);
  pthread_mutex_unlock(&zrt_log_mu);
}

void zrt_log(zrt_log_level level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  zrt_vlog(level, fmt, ap);
  va_end(ap);
}

void zrt_log0(zrt_log_level level, const char *fmt, ...) {
  if (zrt_log_rank > 0) return;
  va_list ap;
  va_start(ap, fmt);
  zrt_vlog(level, fmt, ap);
  va_end(ap);
}

void zrt_log_once(const char *key, zrt_log_level level, const char *fmt, ...) {
  pthread_mutex_lock(&zrt_log_mu);
  for (int i = 0; i < zrt_log_once_n; i++) {
    if (!strcmp(zrt_log_once_keys[i], key)) {
      pthread_mutex_unlock(&zrt_log_mu);
      return;
    }
  }
  if (zrt_log_once_n < ZRT_LOG_ONCE_MAX) {
    snprintf(zrt_log_once_keys[zrt_log_once_n], sizeof zrt_log_once_keys[0], "%s", key);
    zrt_log_once_n++;
  }
  pthread_mutex_unlock(&zrt_log_mu);
  va_list ap;
  va_start(ap, fmt);
  zrt_vlog(level, fmt, ap);
  va_end(ap);
}

bool zrt_parse_size(const char *s, uint64_t *out) {
  if (!s) return false;
  while (isspace((unsigned char)*s)) s++;
  if (!*s || *s == '-') return false;
  char *end = NULL;
  double v = strtod(s, &end);
  if (end == s || !isfinite(v) || v < 0) return false;
  while (isspace((unsigned char)*end)) end++;
  static const struct {
    const char *suffix;
    double mul;
  } units[] = {{"", 1.0},
               {"B", 1.0},
               {"KiB", 1024.0},
               {"MiB", 1048576.0},
               {"GiB", 1073741824.0},
               {"TiB", 1099511627776.0},
               {"KB", 1e3},
               {"MB", 1e6},
               {"GB", 1e9},
               {"TB", 1e12},
               {"K", 1024.0},
               {"M", 1048576.0},
               {"G", 1073741824.0}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (!strcmp(end, units[i].suffix)) {
      double b = v * units[i].mul;
      if (b > 1.8e19) return false;
      if (units[i].mul == 1.0 && b != floor(b)) return false;
      *out = (uint64_t)b;
      return true;
    }
  }
  return false;
}

const char *zrt_format_size(uint64_t bytes, char *buf, size_t len) {
  static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int i = 0;
  while (v >= 1024.0 && i < 4) {
    v /= 1024.0;
    i++;
  }
  if (i == 0)
    snprintf(buf, len, "%llu B", (unsigned long long)bytes);
  else
    snprintf(buf, len, "%.2f %s", v, u[i]);
  return buf;
}

double zrt_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
