/*
 * launch_util.c — small helpers of the `zrt` subcommands (see
 * launch_util.h). No global state; everything here is a pure function of
 * its arguments, the schema table and the process environment.
 */
#define _GNU_SOURCE
#include "launch_util.h"
#include "env.h"

#include <errno.h>
#include <fcntl.h>
#include <numa.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *cli_schema_key(const char *suffix) {
  size_t n = zrt_config_schema_count(), sl = strlen(suffix);
  const char *found = NULL;
  int nfound = 0;
  for (size_t i = 0; i < n; i++) {
    const zrt_cfg_key *k = zrt_config_schema_key(i);
    if (!k || !k->path) continue;
    if (!strcmp(k->path, suffix)) return k->path;
    size_t kl = strlen(k->path);
    if (kl > sl && k->path[kl - sl - 1] == '.' && !strcmp(k->path + kl - sl, suffix)) {
      found = k->path;
      nfound++;
    }
  }
  return nfound == 1 ? found : NULL;
}

const char *cli_source_text(const zrt_cfg_source *src, char *buf, size_t len) {
  switch (src->kind) {
  case ZRT_SRC_DEFAULT: snprintf(buf, len, "default"); break;
  case ZRT_SRC_FILE: snprintf(buf, len, "file %s", src->where); break;
  case ZRT_SRC_ENV: snprintf(buf, len, "environment %s", src->where); break;
  case ZRT_SRC_FLAG: snprintf(buf, len, "flag %s", src->where); break;
  case ZRT_SRC_PROGRAM:
    snprintf(buf, len, "program%s%s", src->where[0] ? " " : "", src->where);
    break;
  case ZRT_SRC_DERIVED:
    snprintf(buf, len, "derived%s%s", src->where[0] ? " " : "", src->where);
    break;
  default: snprintf(buf, len, "?"); break;
  }
  return buf;
}

const char *cli_default_config_path(char *buf, size_t len) {
  const char *home = zrt_env("ZRT_CONFIG_HOME");
  if (home && home[0]) {
    snprintf(buf, len, "%s/default_config.yaml", home);
    return buf;
  }
  home = zrt_env("HOME");
  snprintf(buf, len, "%s/.config/zrt/default_config.yaml", home && home[0] ? home : ".");
  return buf;
}

int cli_mkdirs_for(const char *path) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) return 0;
  *slash = '\0';
  for (char *p = dir + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -1;
  return 0;
}

static int cli_edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return 99;
  int d[64][64];
  for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
      d[i][j] = c;
    }
  return d[la][lb];
}

const char *cli_suggest(const char *word, const char *const *cands, size_t n) {
  const char *best = NULL;
  /* close guesses only: up to a third of the word, at most 3 edits
   * (--tee must not suggest --set) */
  int bd = (int)(strlen(word) / 3 < 3 ? strlen(word) / 3 : 3) + 1;
  for (size_t i = 0; i < n; i++) {
    int d = cli_edit_distance(word, cands[i]);
    if (d < bd) {
      bd = d;
      best = cands[i];
    }
  }
  return best;
}

const char *cli_cpulist(const cpu_set_t *set, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, set)) continue;
    int e = c;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set)) e++;
    int w = e > c ? snprintf(buf + o, len - o, "%s%d-%d", o ? "," : "", c, e)
                  : snprintf(buf + o, len - o, "%s%d", o ? "," : "", c);
    if (w < 0 || (size_t)w >= len - o) break;
    o += (size_t)w;
    c = e;
  }
  return buf;
}

int cli_split_cores(const cpu_set_t *avail, int local_rank, int local_world, cpu_set_t *out) {
  int cpus[CPU_SETSIZE], n = 0;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, avail)) cpus[n++] = c;
  CPU_ZERO(out);
  if (n == 0 || local_world <= 0 || local_rank < 0) return 0;
  if (n < local_world) {
    CPU_SET(cpus[local_rank % n], out);
    return 1;
  }
  /* Contiguous groups keep a rank's cores on one socket / NUMA node when
   * the CPU numbering is node-major, which it is on Linux x86. */
  int base = n / local_world, rem = n % local_world;
  int start = local_rank * base + (local_rank < rem ? local_rank : rem);
  int count = base + (local_rank < rem);
  for (int i = 0; i < count; i++) CPU_SET(cpus[start + i], out);
  return count;
}

int cli_numa_node_of(const cpu_set_t *set) {
  if (numa_available() < 0) return -1;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, set)) return numa_node_of_cpu(c);
  return -1;
}

const char *cli_signame(int sig, char *buf, size_t len) {
  const char *ab = sigabbrev_np(sig);
  if (ab)
    snprintf(buf, len, "SIG%s", ab);
  else
    snprintf(buf, len, "signal %d", sig);
  return buf;
}

/* Start time of a process in clock ticks since boot (field 22 of
 * /proc/PID/stat), so the launcher can tell a recorded pid from a reused
 * one before it kills it. A zombie (state Z: it has exited, its parent has
 * not reaped it yet) counts as gone. */
unsigned long long cli_proc_start(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ' || p[2] == 'Z') return 0;
  unsigned long long st = 0;
  /* after ") " come fields 3.. ; starttime is field 22 */
  int field = 2;
  for (char *t = p + 1; *t; t++) {
    if (*t == ' ') {
      field++;
      if (field == 22) {
        st = strtoull(t + 1, NULL, 10);
        break;
      }
    }
  }
  return st;
}

int cli_write_atomic(const char *dir, const char *name, const char *text) {
  char tmp[4096], path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s/.%s.%d.tmp", dir, name, (int)getpid());
  unlink(tmp); /* a stale one; the new one is created, never followed */
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    if (fd >= 0) close(fd);
    return -1;
  }
  fputs(text, f);
  if (fclose(f) != 0) return -1;
  return rename(tmp, path);
}
