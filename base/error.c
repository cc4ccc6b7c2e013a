/*
 * error.c — status names and the per-thread last-error message.
 *
 * The message buffer is thread-local so that concurrent threads (OpenMP
 * workers, the comm watchdog) never clobber each other's diagnostics.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define ZRT_ERRMSG_LEN 8192
#define ZRT_ERRTRACE_LEN 1024
static _Thread_local char zrt_errmsg[ZRT_ERRMSG_LEN];
/* "file:line <- file:line ...": where the last error was set, then every
 * check macro that propagated it (capped; "..." marks a cut). */
static _Thread_local char zrt_errtrace[ZRT_ERRTRACE_LEN];

static const char *zrt_base_name(const char *file) {
  const char *s = strrchr(file, '/');
  return s ? s + 1 : file;
}

const char *zrt_last_error_trace(void) { return zrt_errtrace; }

void zrt_error_trace_push(const char *file, int line) {
  size_t n = strlen(zrt_errtrace);
  if (n + 64 >= sizeof zrt_errtrace) {
    if (n + 5 < sizeof zrt_errtrace && strcmp(zrt_errtrace + n - 4, " ...") != 0)
      memcpy(zrt_errtrace + n, " ...", 5);
    return;
  }
  snprintf(zrt_errtrace + n, sizeof zrt_errtrace - n, "%s%s:%d", n ? " <- " : "",
           zrt_base_name(file), line);
}

/* The header's macros as this library was compiled: a program compiled
 * against another zrt.h sees the difference here. */
zrt_status zrt_version(int *major, int *minor, int *patch) {
  if (major) *major = ZRT_VERSION_MAJOR;
  if (minor) *minor = ZRT_VERSION_MINOR;
  if (patch) *patch = ZRT_VERSION_PATCH;
  return ZRT_OK;
}

const char *zrt_status_string(zrt_status st) {
  switch (st) {
  case ZRT_OK: return "ZRT_OK";
  case ZRT_ERR_INVALID_ARG: return "ZRT_ERR_INVALID_ARG";
  case ZRT_ERR_CONFIG: return "ZRT_ERR_CONFIG";
  case ZRT_ERR_OOM: return "ZRT_ERR_OOM";
  case ZRT_ERR_COMM: return "ZRT_ERR_COMM";
  case ZRT_ERR_CUDA: return "ZRT_ERR_CUDA";
  case ZRT_ERR_IO: return "ZRT_ERR_IO";
  case ZRT_ERR_INTERNAL: return "ZRT_ERR_INTERNAL";
  case ZRT_ERR_OVERFLOW: return "ZRT_ERR_OVERFLOW";
  case ZRT_ERR_UNSUPPORTED: return "ZRT_ERR_UNSUPPORTED";
  }
  return "ZRT_ERR_UNKNOWN";
}

const char *zrt_last_error(void) { return zrt_errmsg; }

zrt_status zrt_error_at(const char *file, int line, zrt_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(zrt_errmsg, sizeof zrt_errmsg, fmt, ap);
  va_end(ap);
  zrt_errtrace[0] = 0;
  zrt_error_trace_push(file, line);
  return st;
}

zrt_status zrt_error_context(zrt_status st, const char *fmt, ...) {
  char prefix[1024];
  char old[ZRT_ERRMSG_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, zrt_errmsg, sizeof old);
  snprintf(zrt_errmsg, sizeof zrt_errmsg, "%s%s", prefix, old);
  return st;
}
