/*
 * ztest.h — the tiny assertion layer every C test uses. Checks print the
 * expression, file:line and (for comparisons) the max difference against
 * the reference and its tolerance, so a failure says how far off it was.
 * ZT_SKIP exits 77, which ctest reports as skipped.
 */
#ifndef ZTEST_H
#define ZTEST_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int zt_failures;

#define ZT_CHECK(cond)                                                                             \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                              \
      zt_failures++;                                                                               \
    }                                                                                              \
  } while (0)

#define ZT_OK(call)                                                                                \
  do {                                                                                             \
    zrt_status zt_s_ = (call);                                                                     \
    if (zt_s_ != ZRT_OK) {                                                                         \
      fprintf(stderr, "FAIL %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,                     \
              zrt_status_string(zt_s_), zrt_last_error());                                         \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

/* Checks |got - want| <= tol elementwise; prints the max difference. */
#define ZT_CLOSE_ARRAY(what, got, want, n, tol)                                                    \
  do {                                                                                             \
    double zt_md_ = 0;                                                                             \
    size_t zt_at_ = 0;                                                                             \
    for (size_t zt_i_ = 0; zt_i_ < (size_t)(n); zt_i_++) {                                         \
      double zt_d_ = fabs((double)(got)[zt_i_] - (double)(want)[zt_i_]);                           \
      if (!(zt_d_ <= zt_md_)) {                                                                    \
        zt_md_ = zt_d_;                                                                            \
        zt_at_ = zt_i_;                                                                            \
      }                                                                                            \
    }                                                                                              \
    printf("%s: max diff %.3g at %zu (tolerance %.3g)\n", what, zt_md_, zt_at_, (double)(tol));    \
    if (!(zt_md_ <= (tol))) {                                                                      \
      fprintf(stderr, "FAIL %s:%d: %s max diff %.3g > %.3g\n", __FILE__, __LINE__, what, zt_md_,   \
              (double)(tol));                                                                      \
      zt_failures++;                                                                               \
    }                                                                                              \
  } while (0)

#define ZT_CONTAINS(haystack, needle)                                                              \
  do {                                                                                             \
    if (!strstr((haystack), (needle))) {                                                           \
      fprintf(stderr, "FAIL %s:%d: message does not contain \"%s\":\n  %s\n", __FILE__, __LINE__,  \
              (needle), (haystack));                                                               \
      zt_failures++;                                                                               \
    }                                                                                              \
  } while (0)

#define ZT_SKIP(why)                                                                               \
  do {                                                                                             \
    printf("SKIP: %s\n", why);                                                                     \
    exit(77);                                                                                      \
  } while (0)

/* The backend of a test whose model computes on the host (launched on the
 * compute stream): "twin" when ZRT_BACKEND=twin (the suites' twin runs,
 * tests/CMakeLists.txt), else "cpu" (auto would pick CUDA on a GPU). */
static inline const char *zt_host_backend(void) {
  const char *b = getenv("ZRT_BACKEND");
  return b && !strcmp(b, "twin") ? "twin" : "cpu";
}

#define ZT_DONE()                                                                                  \
  do {                                                                                             \
    if (zt_failures)                                                                               \
      fprintf(stderr, "%d check(s) failed\n", zt_failures);                                        \
    else                                                                                           \
      printf("all checks passed\n");                                                               \
    return zt_failures ? 1 : 0;                                                                    \
  } while (0)

#endif
