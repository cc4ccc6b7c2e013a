/*
 * zt_child.c — runs a test function in a forked child so that a check can
 * look at what a process-wide failure does (a lowered rlimit, a dropped
 * capability, a signal) without touching the test process itself. The
 * child's stderr goes to a temporary file the parent reads back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zt_child.h"

int zt_in_child(int (*fn)(void *), void *arg, char *buf, size_t len) {
  char path[] = "/tmp/zt_child_XXXXXX";
  int fd = mkstemp(path);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd, 2);
    int rc = fn(arg);
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  int ws = 0;
  waitpid(pid, &ws, 0);
  ssize_t n = pread(fd, buf, len - 1, 0);
  buf[n > 0 ? n : 0] = 0;
  close(fd);
  unlink(path);
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 100;
}
