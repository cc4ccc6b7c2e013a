/*
 * launch_habits.c — DeepSpeed's and accelerate's launcher flags, as people
 * type them from habit, rewritten into `zrt launch`'s own before parsing.
 *
 * The rewrite stops at PROGRAM (the first word that is neither a flag nor a
 * flag's value) so the program's own arguments are never touched. zrt's
 * own flags pass through unchanged (a value flag carries its next word).
 * Settings that are environment, not config (CUDA_VISIBLE_DEVICES,
 * OMP_NUM_THREADS, per-rank log files through ZRT_MPIEXEC_ARGS) are set in
 * the launcher's environment, which mpiexec passes on; --bind_core_list
 * narrows the launcher's own affinity, which the rank wrappers inherit and
 * split (launch_rank.c). Every rewrite prints one note.
 */
#define _GNU_SOURCE
#include "launch_habits.h"

#include "env.h"
#include "internal.h"
#include "safe_file.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct hstate {
  zrt_launch_habits *h;
  int n, cap;
  long gpus, nodes;
  int have_nproc;
  const char *include, *exclude, *hostfile, *log_dir;
  int tee;
} hstate;

static int push(hstate *s, const char *w) {
  if (s->n + 2 > s->cap) {
    int cap = s->cap ? 2 * s->cap : 32;
    char **nv = realloc(s->h->argv, (size_t)cap * sizeof *nv);
    if (!nv) return -1;
    s->h->argv = nv;
    s->cap = cap;
  }
  s->h->argv[s->n++] = (char *)w;
  s->h->argv[s->n] = NULL;
  return 0;
}

static char *own(hstate *s, char *p) {
  if (p && s->h->nowned < ZRT_HABITS_MAX_OWNED) s->h->owned[s->h->nowned++] = p;
  return p;
}

static void note(const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "zrt launch: note: ");
  fprintf(stderr, fmt, a, b);
  fputc('\n', stderr);
}

/* zrt launch's own flags that take no value / an optional one */
static int zrt_bool_flag(const char *n) {
  return !strcmp(n, "bind_cores_to_rank") || !strcmp(n, "cpu") || !strcmp(n, "dry_run") ||
         !strcmp(n, "help");
}

static long parse_pos(const char *flag, const char *v) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || end == v || x < 1) {
    fprintf(stderr, "zrt launch: --%s expects a positive integer, got '%s'\n", flag, v);
    return -1;
  }
  return x;
}

static int count_ids(const char *ids) {
  int n = 1;
  for (; *ids; ids++) n += *ids == ',';
  return n;
}

/* DeepSpeed's "host[:ids]@host[:ids]": does `host` appear, and with how
 * many slots (0 = all of them)? */
static int listed(const char *spec, const char *host, int *slots) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", spec);
  char *save = NULL;
  for (char *e = strtok_r(buf, "@", &save); e; e = strtok_r(NULL, "@", &save)) {
    char *colon = strchr(e, ':');
    size_t hl = colon ? (size_t)(colon - e) : strlen(e);
    if (strlen(host) == hl && !strncmp(e, host, hl)) {
      *slots = colon ? count_ids(colon + 1) : 0;
      return 1;
    }
  }
  return 0;
}

/* Writes the hostfile filtered by --include / --exclude to a temporary
 * file; returns its path (malloc) or NULL after a message. */
static char *filter_hostfile(hstate *s) {
  FILE *in = zrt_safe_fopen_read(s->hostfile, "hostfile"); /* a FIFO is an error, not a hang */
  if (!in) {
    fprintf(stderr, "zrt launch: %s\n", zrt_last_error());
    return NULL;
  }
  const char *tmp = zrt_env("TMPDIR");
  char *path = malloc(4096);
  snprintf(path, 4096, "%s/zrt_hostfile_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int fd = mkstemp(path);
  FILE *out = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!out) {
    fprintf(stderr, "zrt launch: cannot write a filtered hostfile: %s\n", strerror(errno));
    fclose(in);
    free(path);
    return NULL;
  }
  char line[1024];
  int kept = 0;
  while (fgets(line, sizeof line, in)) {
    char host[512];
    int slots = 1, sl = 0;
    if (sscanf(line, " %511s", host) != 1 || host[0] == '#') continue;
    const char *sp = strstr(line, "slots=");
    if (sp) slots = atoi(sp + 6);
    if (s->include) {
      if (!listed(s->include, host, &sl)) continue;
      if (sl) slots = sl;
    }
    if (s->exclude && listed(s->exclude, host, &sl)) {
      if (!sl) continue;
      slots -= sl;
      if (slots <= 0) continue;
    }
    fprintf(out, "%s slots=%d\n", host, slots);
    kept++;
  }
  fclose(in);
  fclose(out);
  if (!kept) {
    fprintf(stderr, "zrt launch: --include/--exclude leave no machine of hostfile '%s'\n",
            s->hostfile);
    unlink(path);
    free(path);
    return NULL;
  }
  return path;
}

/* --include without a hostfile: Open MPI's -H list */
static char *include_hosts(hstate *s) {
  char *out = calloc(1, 4096), buf[4096];
  snprintf(buf, sizeof buf, "%s", s->include);
  char *save = NULL;
  for (char *e = strtok_r(buf, "@", &save); e; e = strtok_r(NULL, "@", &save)) {
    char *colon = strchr(e, ':');
    int slots = colon ? count_ids(colon + 1) : (s->gpus > 0 ? (int)s->gpus : 1);
    if (colon) *colon = 0;
    size_t l = strlen(out);
    snprintf(out + l, 4096 - l, "%s%s:%d", l ? "," : "", e, slots);
  }
  return out;
}

static int bind_core_list(const char *list) {
  cpu_set_t set;
  CPU_ZERO(&set);
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", list);
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int a, b;
    char extra;
    if (sscanf(t, "%d-%d%c", &a, &b, &extra) == 2 && a >= 0 && b >= a && b < CPU_SETSIZE) {
      for (int c = a; c <= b; c++) CPU_SET(c, &set);
    } else if (sscanf(t, "%d%c", &a, &extra) == 1 && a >= 0 && a < CPU_SETSIZE) {
      CPU_SET(a, &set);
    } else {
      fprintf(stderr, "zrt launch: --bind_core_list '%s': expected cores like 0-7,16-23\n", list);
      return -1;
    }
  }
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    fprintf(stderr, "zrt launch: --bind_core_list '%s': %s (are those cores online?)\n", list,
            strerror(errno));
    return -1;
  }
  return 0;
}

int zrt_launch_habits_apply(int argc, char **argv, zrt_launch_habits *h) {
  memset(h, 0, sizeof *h);
  hstate s = {.h = h};
  if (push(&s, argv[0])) return 2;
  int i = 1;
  for (; i < argc; i++) {
    const char *w = argv[i];
    if (!strcmp(w, "--") || strncmp(w, "--", 2)) break;
    char name[128];
    const char *eq = strchr(w + 2, '=');
    size_t nl = eq ? (size_t)(eq - w - 2) : strlen(w + 2);
    snprintf(name, sizeof name, "%.*s", (int)(nl < 127 ? nl : 127), w + 2);
    for (char *p = name; *p; p++)
      if (*p == '-') *p = '_';
    /* the value of a habit flag that takes one */
    const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[i + 1] : NULL);
#define TAKE()                                                                                     \
  do {                                                                                             \
    if (!v) {                                                                                      \
      fprintf(stderr, "zrt launch: --%s needs a value\n", name);                                   \
      return 2;                                                                                    \
    }                                                                                              \
    if (!eq) i++;                                                                                  \
  } while (0)
    if (!strcmp(name, "num_gpus")) {
      TAKE();
      if ((s.gpus = parse_pos(name, v)) < 0) return 2;
    } else if (!strcmp(name, "num_nodes")) {
      TAKE();
      if ((s.nodes = parse_pos(name, v)) < 0) return 2;
      if (push(&s, "--num_machines") || push(&s, v)) return 2;
      note("--num_nodes %s read as --num_machines %s", v, v);
    } else if (!strcmp(name, "master_addr") || !strcmp(name, "master_port")) {
      TAKE();
      const char *to = name[7] == 'a' ? "--main_process_ip" : "--main_process_port";
      if (push(&s, to) || push(&s, v)) return 2;
      note("--%s read as %s", name, to);
    } else if (!strcmp(name, "include") || !strcmp(name, "exclude")) {
      TAKE();
      *(name[0] == 'i' ? &s.include : &s.exclude) = v;
    } else if (!strcmp(name, "deepspeed_hostfile") || !strcmp(name, "hostfile")) {
      TAKE();
      s.hostfile = v;
      if (name[0] == 'd') note("--deepspeed_hostfile %s read as --hostfile %s", v, v);
    } else if (!strcmp(name, "bind_core_list")) {
      TAKE();
      if (bind_core_list(v)) return 2;
      if (push(&s, "--bind_cores_to_rank")) return 2;
      note("--bind_core_list %s: the ranks share cores %s (as --bind_cores_to_rank)", v, v);
    } else if (!strcmp(name, "gpu_ids")) {
      TAKE();
      if (strcmp(v, "all")) setenv("CUDA_VISIBLE_DEVICES", v, 1);
      note("--gpu_ids %s: CUDA_VISIBLE_DEVICES=%s for the ranks", v,
           strcmp(v, "all") ? v : "(all)");
    } else if (!strcmp(name, "num_cpu_threads_per_process")) {
      TAKE();
      if (parse_pos(name, v) < 0) return 2;
      setenv("OMP_NUM_THREADS", v, 1);
      note("--num_cpu_threads_per_process %s: OMP_NUM_THREADS=%s for the ranks", v, v);
    } else if (!strcmp(name, "log_dir")) {
      TAKE();
      s.log_dir = v;
    } else if (!strcmp(name, "tee")) {
      /* torchrun's --tee takes a stream selector (0-3); all streams go */
      if (eq || (v && strspn(v, "0123") == strlen(v) && *v)) TAKE();
      s.tee = 1;
    } else if (!strcmp(name, "use_deepspeed") || !strcmp(name, "multi_gpu") ||
               !strcmp(name, "zero3_init_flag")) {
      if (!strcmp(name, "zero3_init_flag") && !eq && v &&
          (!strcasecmp(v, "true") || !strcasecmp(v, "false")))
        i++;
      note("--%s accepted: zrt always runs DeepSpeed-style ZeRO%s", name,
           name[0] == 'z' ? " (parameters are initialised sharded at stage 3 anyway)" : "");
    } else {
      /* zrt's own flag: carry it, with its value */
      if (!strcmp(name, "num_processes")) s.have_nproc = 1;
      if (push(&s, w)) return 2;
      if (eq || zrt_bool_flag(name)) continue;
      if (!strcmp(name, "metrics")) {
        size_t l = v ? strlen(v) : 0;
        if (!(v &&
              ((l > 5 && !strcmp(v + l - 5, ".json")) || (l > 6 && !strcmp(v + l - 6, ".jsonl")))))
          continue;
      }
      if (v) {
        if (push(&s, v)) return 2;
        i++;
      }
    }
#undef TAKE
  }
  if (s.gpus > 0 && !s.have_nproc) {
    char *n = own(&s, malloc(32));
    snprintf(n, 32, "%ld", s.gpus * (s.nodes > 0 ? s.nodes : 1));
    if (push(&s, "--num_processes") || push(&s, n)) return 2;
    char g[32];
    snprintf(g, sizeof g, "%ld", s.gpus);
    note("--num_gpus %s (per machine) read as --num_processes %s", g, n);
  }
  if (s.hostfile && (s.include || s.exclude)) {
    char *f = own(&s, filter_hostfile(&s));
    if (!f) return 2;
    h->tmp_hostfile = f;
    if (push(&s, "--hostfile") || push(&s, f)) return 2;
    note("--include/--exclude applied to the hostfile: %s%s", f, "");
  } else if (s.hostfile) {
    if (push(&s, "--hostfile") || push(&s, s.hostfile)) return 2;
  } else if (s.exclude) {
    fprintf(stderr,
            "zrt launch: --exclude %s needs the machines to exclude from: give "
            "--hostfile FILE (or --deepspeed_hostfile FILE)\n",
            s.exclude);
    return 2;
  } else if (s.include) {
    char *hs = own(&s, include_hosts(&s));
    if (push(&s, "--hosts") || push(&s, hs)) return 2;
    note("--include %s read as --hosts %s", s.include, hs);
  }
  if (s.log_dir || s.tee) {
    const char *dir = s.log_dir ? s.log_dir : "zrt_logs";
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
      fprintf(stderr, "zrt launch: --log_dir %s: %s\n", dir, strerror(errno));
      return 2;
    }
    const char *prev = zrt_env("ZRT_MPIEXEC_ARGS");
    char *args = own(&s, malloc(8192));
    snprintf(args, 8192, "%s%s--output-filename %s", prev ? prev : "", prev ? " " : "", dir);
    setenv("ZRT_MPIEXEC_ARGS", args, 1);
    note("per-rank output also goes to files under %s/ (mpiexec --output-filename%s)", dir,
         s.log_dir ? "" : "; --tee without --log_dir writes to ./zrt_logs");
  }
  for (; i < argc; i++)
    if (push(&s, argv[i])) return 2;
  h->argc = s.n;
  return 0;
}

void zrt_launch_habits_free(zrt_launch_habits *h) {
  if (!h) return;
  if (h->tmp_hostfile) unlink(h->tmp_hostfile);
  for (int i = 0; i < h->nowned; i++) free(h->owned[i]);
  free(h->argv);
  memset(h, 0, sizeof *h);
}

static zrt_launch_habits cli_habits;

static void cli_habits_release(void) { zrt_launch_habits_free(&cli_habits); }

int zrt_launch_habits_rewrite(int *argc, char ***argv) {
  int rc = zrt_launch_habits_apply(*argc, *argv, &cli_habits);
  if (rc) {
    zrt_launch_habits_free(&cli_habits);
    return rc;
  }
  atexit(cli_habits_release);
  *argc = cli_habits.argc;
  *argv = cli_habits.argv;
  return 0;
}
