/*
 * zt_bits.c — "bits" lines of the engine tests (zt_bits.h): to a per-process
 * file under ZRT_TEST_BITS_DIR when twin_equal.sh asks for it, one write()
 * per line, opened with O_APPEND; else to stdout. A failed write aborts the
 * test (a lost line is what this replaces).
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zt_bits.h"

void zt_bits(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0 || n >= (int)sizeof line - 1) {
    fprintf(stderr, "zt_bits: a bits line longer than %zu bytes\n", sizeof line - 2);
    abort();
  }
  line[n++] = '\n';
  const char *dir = getenv("ZRT_TEST_BITS_DIR");
  if (!dir || !*dir) {
    fwrite(line, 1, (size_t)n, stdout);
    fflush(stdout);
    return;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/bits.%ld", dir, (long)getpid());
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0 || write(fd, line, (size_t)n) != n) {
    fprintf(stderr, "zt_bits: cannot write %s (ZRT_TEST_BITS_DIR)\n", path);
    abort();
  }
  close(fd);
}
