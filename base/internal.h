/*
 * internal.h — what every zrt source file shares: the error-setting helper,
 * the check macros (NCCL's CHECK / CHECKGOTO style, one cleanup label per
 * function) and small utilities. Not installed; programs use include/zrt.h.
 *
 * Invariant: a function that returns a non-OK status has set the thread's
 * last-error message (through zrt_error) before returning; callers that only
 * propagate keep that message.
 */
#ifndef ZRT_INTERNAL_H
#define ZRT_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zrt.h"

/* Sets the thread's last-error message, starts its trace at file:line (the
 * failing call, zrt_last_error_trace) and returns st. Called through the
 * zrt_error macro, which passes the caller's file and line. */
zrt_status zrt_error_at(const char *file, int line, zrt_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define zrt_error(st, ...) zrt_error_at(__FILE__, __LINE__, (st), __VA_ARGS__)
/* Appends " <- file:line" to the thread's error trace: a check macro
 * propagating a failure (NCCL's "file:line -> status" trail). */
void zrt_error_trace_push(const char *file, int line);
/* Prepends context ("while loading X: ") to the current message; returns st. */
zrt_status zrt_error_context(zrt_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Both record the failing call's file:line in the error trace. */
#define ZRT_CHECK(call)                                                                            \
  do {                                                                                             \
    zrt_status zrt_s_ = (call);                                                                    \
    if (zrt_s_ != ZRT_OK) {                                                                        \
      zrt_error_trace_push(__FILE__, __LINE__);                                                    \
      return zrt_s_;                                                                               \
    }                                                                                              \
  } while (0)

#define ZRT_CHECK_GOTO(call, st, label)                                                            \
  do {                                                                                             \
    (st) = (call);                                                                                 \
    if ((st) != ZRT_OK) {                                                                          \
      zrt_error_trace_push(__FILE__, __LINE__);                                                    \
      goto label;                                                                                  \
    }                                                                                              \
  } while (0)

/* Logging state (global by design: DESIGN.md rule 5). */
void zrt_log_set_rank(int rank);
int zrt_log_get_rank(void);
zrt_log_level zrt_log_get_level(void);
/* A message every rank logs alike (derived from the config and the
 * layout): rank 0 prints it; every process does while its rank is not yet
 * known. Keeps an N-rank launch from printing N copies. */
void zrt_log0(zrt_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Logs once per process per key (e.g. the backend choice). */
void zrt_log_once(const char *key, zrt_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Parses "24MiB", "1.5GB", "4096" into bytes; false on junk. */
bool zrt_parse_size(const char *s, uint64_t *out);
/* Formats bytes as "24.0 MiB" into buf. */
const char *zrt_format_size(uint64_t bytes, char *buf, size_t len);

/* Monotonic seconds. */
double zrt_now_s(void);

#define ZRT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define ZRT_MAX(a, b) ((a) > (b) ? (a) : (b))
#define ZRT_DIV_UP(a, b) (((a) + (b)-1) / (b))
#define ZRT_ALIGN_UP(a, b) (ZRT_DIV_UP(a, b) * (b))

#endif /* ZRT_INTERNAL_H */
