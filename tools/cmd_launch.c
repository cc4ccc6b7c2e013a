/*
 * cmd_launch.c — `zrt launch`: resolves the config (flag > launch YAML >
 * DeepSpeed file > default, with ZRT_* environment values between files and
 * flags), writes it as JSON into a fresh run directory, and starts the
 * ranks through Open MPI's mpiexec, each under the hidden wrapper
 * (launch_rank.c) that sets RANK / LOCAL_RANK / WORLD_SIZE /
 * LOCAL_WORLD_SIZE, binds cores when asked, gives each rank its share of
 * OpenMP threads otherwise (the thread plan, launch_threads.c) and records
 * how the rank ended.
 *
 * Failure handling: the launcher watches the run directory. The first rank
 * that exits non-zero or is killed starts the teardown: mpiexec gets a
 * moment to abort the job itself, then its process group gets SIGTERM,
 * then (after the grace period) SIGKILL, and every rank pid recorded in the
 * run directory is killed too, so no rank outlives the launcher. SIGINT /
 * SIGTERM / SIGHUP to the launcher are passed once to each rank (through
 * its wrapper; mpiexec stays up to carry output and serve MPI_Finalize),
 * the ranks get ZRT_LAUNCH_STOP_GRACE_S to end as they choose (a program
 * may save and exit 75), then the same teardown; the launcher exits with
 * the ranks' common status. The report names the first
 * rank that failed and how, plus the comm watchdog's rank<R>.status files
 * (which rank is behind).
 *
 * When the launcher itself dies, however it dies (SIGKILL included, when no
 * handler runs), the job ends too: mpiexec has PR_SET_PDEATHSIG, and every
 * rank wrapper on this machine watches the launcher's pipe (the FIFO
 * launcher.fifo in the run directory, held open for writing by the launcher
 * only; the kernel closes it at its death) and ends its program
 * (launch_rank.c).
 *
 * Invariants: the launcher itself is single-threaded and handles signals
 * synchronously (blocked + sigtimedwait), so there is no async-signal
 * hazard; mpiexec runs in its own process group.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "config.h"
#include "env.h"
#include "internal.h"
#include "launch_habits.h"
#include "launch_noise.h"
#include "launch_run.h"
#include "launch_threads.h"
#include "launch_util.h"
#include "safe_file.h"
#include "tools.h"
#include "zrt.h"

/* ------------------------------------------------------------ options */

typedef enum { OPT_VALUE = 0, OPT_BOOL, OPT_OPTVALUE } cli_opt_kind;

typedef struct cli_opt {
  const char *name;  /* without the leading "--" */
  cli_opt_kind kind; /* VALUE: needs an argument; BOOL: none or =true/false */
  const char *key;   /* schema key (dotted suffix) the flag sets; NULL = launcher-only */
  const char *arg;   /* argument name for --help */
  const char *help;
} cli_opt;

static const cli_opt cli_launch_opts[] = {
    {"config_file", OPT_VALUE, NULL, "FILE",
     "launch YAML (default: $ZRT_CONFIG_HOME/default_config.yaml or "
     "~/.config/zrt/default_config.yaml when it exists)"},
    {"deepspeed_config_file", OPT_VALUE, NULL, "FILE",
     "DeepSpeed JSON/YAML config; the launch YAML's values win over it"},
    {"num_processes", OPT_VALUE, "num_processes", "N", "total number of ranks (all machines)"},
    {"num_machines", OPT_VALUE, "num_machines", "M", "number of machines"},
    {"machine_rank", OPT_VALUE, "machine_rank", "R", "rank of this machine (0 starts the job)"},
    {"main_process_ip", OPT_VALUE, "main_process_ip", "IP",
     "address of machine 0 (exported as MASTER_ADDR)"},
    {"main_process_port", OPT_VALUE, "main_process_port", "P",
     "port on machine 0 (exported as MASTER_PORT)"},
    {"hostfile", OPT_VALUE, "hostfile", "FILE",
     "Open MPI hostfile of the machines (one 'host slots=N' a line)"},
    {"hosts", OPT_VALUE, NULL, "LIST", "machines as Open MPI's -H list (h1:4,h2:4)"},
    {"mixed_precision", OPT_VALUE, "mixed_precision", "no|fp16|bf16", "working precision"},
    {"zero_stage", OPT_VALUE, "zero_optimization.stage", "0-3", "ZeRO stage"},
    {"offload_optimizer_device", OPT_VALUE, "offload_optimizer.device", "none|cpu|nvme",
     "where the optimizer states live"},
    {"offload_param_device", OPT_VALUE, "offload_param.device", "none|cpu|nvme",
     "where the parameters live (stage 3)"},
    {"offload_optimizer_nvme_path", OPT_VALUE, "offload_optimizer.nvme_path", "DIR",
     "NVMe directory of the optimizer states"},
    {"offload_param_nvme_path", OPT_VALUE, "offload_param.nvme_path", "DIR",
     "NVMe directory of the parameters"},
    {"gradient_accumulation_steps", OPT_VALUE, "gradient_accumulation_steps", "K",
     "micro-batches per optimizer step"},
    {"gradient_clipping", OPT_VALUE, "gradient_clipping", "X", "global-norm clipping (0 = off)"},
    {"bind_cores_to_rank", OPT_BOOL, "bind_cores_to_rank", NULL,
     "split this machine's cores among its ranks; bind each rank and its memory"},
    {"cpu", OPT_BOOL, "use_cpu", NULL, "run on the CPU backend even when a GPU is present"},
    {"metrics", OPT_OPTVALUE, "metrics_path", "[PATH]",
     "write per-step metrics (JSON lines) to PATH (default zrt_metrics.jsonl)"},
    {"set", OPT_VALUE, NULL, "KEY=VALUE", "set any config key (repeatable)"},
    {"dry_run", OPT_BOOL, NULL, NULL,
     "write the config and print the mpiexec command; run nothing"},
    {"help", OPT_BOOL, NULL, NULL, "this help"},
};
#define CLI_NOPTS (sizeof cli_launch_opts / sizeof cli_launch_opts[0])

#define CLI_MAX_SETS 64

typedef struct cli_launch_args {
  const char *val[CLI_NOPTS]; /* NULL = not given; BOOL: "true"/"false" */
  const char *sets[CLI_MAX_SETS];
  int nsets;
  int prog; /* index of PROGRAM in argv */
} cli_launch_args;

static const cli_opt *cli_find_opt(const char *name, size_t len, size_t *idx) {
  for (size_t i = 0; i < CLI_NOPTS; i++)
    if (strlen(cli_launch_opts[i].name) == len && !strncmp(cli_launch_opts[i].name, name, len)) {
      *idx = i;
      return &cli_launch_opts[i];
    }
  return NULL;
}

static size_t cli_opt_index(const char *name) {
  size_t i = 0;
  cli_find_opt(name, strlen(name), &i);
  return i;
}

static void cli_launch_usage(FILE *f) {
  fprintf(f, "usage: zrt launch [options] PROGRAM [ARGS...]\n\n"
             "Starts the ranks of PROGRAM through mpiexec with the resolved config.\n"
             "Precedence: flag > environment ZRT_* > launch YAML > DeepSpeed file > default.\n\n"
             "options:\n");
  for (size_t i = 0; i < CLI_NOPTS; i++) {
    char lhs[64];
    snprintf(lhs, sizeof lhs, "--%s%s%s", cli_launch_opts[i].name,
             cli_launch_opts[i].arg ? " " : "",
             cli_launch_opts[i].arg ? cli_launch_opts[i].arg : "");
    fprintf(f, "  %-42s %s\n", lhs, cli_launch_opts[i].help);
  }
  fprintf(f, "\nSee docs/launch.md and docs/cli.md.\n");
}

/* Returns 0, or 2 after printing a usage error. */
static int cli_parse_launch(int argc, char **argv, cli_launch_args *a) {
  memset(a, 0, sizeof *a);
  a->prog = -1;
  int i = 1;
  for (; i < argc; i++) {
    const char *s = argv[i];
    if (!strcmp(s, "--")) {
      i++;
      break;
    }
    if (!strcmp(s, "-h")) s = "--help";
    if (strncmp(s, "--", 2) != 0) break;
    const char *name = s + 2, *eq = strchr(name, '=');
    size_t nl = eq ? (size_t)(eq - name) : strlen(name);
    size_t idx;
    const cli_opt *o = cli_find_opt(name, nl, &idx);
    if (!o) {
      /* accept accelerate's dashed spellings too (--num-processes) */
      char alt[128];
      snprintf(alt, sizeof alt, "%.*s", (int)(nl < 127 ? nl : 127), name);
      for (char *p = alt; *p; p++)
        if (*p == '-') *p = '_';
      o = cli_find_opt(alt, strlen(alt), &idx);
      if (!o) {
        const char *names[CLI_NOPTS];
        for (size_t k = 0; k < CLI_NOPTS; k++) names[k] = cli_launch_opts[k].name;
        const char *sug = cli_suggest(alt, names, CLI_NOPTS);
        fprintf(stderr, "zrt launch: unknown option '--%s'%s%s%s\n", alt,
                sug ? " (did you mean --" : "", sug ? sug : "", sug ? "?)" : "");
        fprintf(stderr, "Run `zrt launch --help` for the options.\n");
        return 2;
      }
    }
    const char *v = NULL;
    if (o->kind == OPT_BOOL) {
      v = eq ? eq + 1 : "true";
    } else if (eq) {
      v = eq + 1;
    } else if (o->kind == OPT_OPTVALUE) {
      /* --metrics takes a path only when the next word looks like one of
       * its files; otherwise the next word is the program. */
      const char *n = i + 1 < argc ? argv[i + 1] : NULL;
      size_t l = n ? strlen(n) : 0;
      if (n && ((l > 5 && !strcmp(n + l - 5, ".json")) || (l > 6 && !strcmp(n + l - 6, ".jsonl"))))
        v = argv[++i];
      else
        v = "zrt_metrics.jsonl";
    } else {
      if (i + 1 >= argc) {
        fprintf(stderr, "zrt launch: option --%s needs a value (%s)\n", o->name, o->arg);
        return 2;
      }
      v = argv[++i];
    }
    if (!strcmp(o->name, "set")) {
      if (!strchr(v, '=')) {
        fprintf(stderr, "zrt launch: --set needs KEY=VALUE, got '%s'\n", v);
        return 2;
      }
      if (a->nsets == CLI_MAX_SETS) {
        fprintf(stderr, "zrt launch: at most %d --set options\n", CLI_MAX_SETS);
        return 2;
      }
      a->sets[a->nsets++] = v;
    } else {
      a->val[idx] = v;
    }
  }
  if (a->val[cli_opt_index("help")]) return 0;
  if (i >= argc) {
    fprintf(stderr, "zrt launch: no PROGRAM given\nusage: zrt launch [options] PROGRAM "
                    "[ARGS...]  (zrt launch --help)\n");
    return 2;
  }
  a->prog = i;
  return 0;
}

/* ------------------------------------------------------------- config */

static zrt_status cli_set(zrt_config *cfg, const char *suffix, const char *value,
                          const char *origin) {
  const char *key = cli_schema_key(suffix);
  if (!key)
    return zrt_error(ZRT_ERR_INTERNAL, "%s: the config schema has no key '%s' (zrt build mismatch)",
                     origin, suffix);
  return zrt_config_set(cfg, key, value, origin);
}

/* Builds the config the ranks get. *used_file receives the launch YAML
 * actually read ("" when none). */
static zrt_status cli_build_config(const cli_launch_args *a, zrt_config **out, char *used_file,
                                   size_t used_len) {
  zrt_config *cfg = NULL;
  zrt_status st;
  used_file[0] = '\0';
  ZRT_CHECK_GOTO(zrt_config_create(&cfg), st, fail);
  /* Same-priority loads: the later one wins, so the DeepSpeed file goes
   * first and the launch YAML's values override it. */
  const char *ds = a->val[cli_opt_index("deepspeed_config_file")];
  if (ds) ZRT_CHECK_GOTO(zrt_config_load_file(cfg, ds), st, fail);
  const char *file = a->val[cli_opt_index("config_file")];
  char dflt[4096];
  if (!file) {
    cli_default_config_path(dflt, sizeof dflt);
    if (access(dflt, R_OK) == 0) file = dflt;
  }
  if (file) {
    ZRT_CHECK_GOTO(zrt_config_load_file(cfg, file), st, fail);
    snprintf(used_file, used_len, "%s", file);
  }
  ZRT_CHECK_GOTO(zrt_config_load_env(cfg), st, fail);
  for (size_t i = 0; i < CLI_NOPTS; i++) {
    const cli_opt *o = &cli_launch_opts[i];
    if (!a->val[i] || !o->key) continue;
    char origin[80];
    snprintf(origin, sizeof origin, "--%s", o->name);
    /* --mixed_precision sets fp16/bf16.enabled too (zrt_config_set maps it) */
    ZRT_CHECK_GOTO(cli_set(cfg, o->key, a->val[i], origin), st, fail);
  }
  for (int i = 0; i < a->nsets; i++) {
    char kv[1024];
    snprintf(kv, sizeof kv, "%s", a->sets[i]);
    char *eq = strchr(kv, '=');
    *eq = '\0';
    char origin[1100];
    snprintf(origin, sizeof origin, "--set %s", kv);
    ZRT_CHECK_GOTO(zrt_config_set(cfg, kv, eq + 1, origin), st, fail);
  }
  *out = cfg;
  return ZRT_OK;
fail:
  zrt_config_destroy(cfg);
  return st;
}

/* ------------------------------------------------------------ command */

/* How long the ranks may take to answer an interrupt (finish a step, save
 * a checkpoint, exit) before the launcher ends them: Slurm's default
 * KillWait, the time a preempted job gets between SIGTERM and SIGKILL. */
#define CLI_STOP_GRACE_DEFAULT_S 30.0

static int cli_count_hosts(const char *hostfile) {
  FILE *f = zrt_safe_fopen_read(hostfile, "hostfile"); /* a FIFO is an error, not a hang */
  if (!f) return -1;
  char line[1024];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (*p && *p != '#' && *p != '\n') n++;
  }
  fclose(f);
  return n;
}

static int cli_find_program(const char *prog) {
  if (strchr(prog, '/')) return access(prog, X_OK) == 0;
  const char *path = zrt_env("PATH");
  if (!path) return 0;
  char buf[PATH_MAX];
  for (const char *p = path; *p;) {
    const char *c = strchr(p, ':');
    size_t l = c ? (size_t)(c - p) : strlen(p);
    snprintf(buf, sizeof buf, "%.*s/%s", (int)l, l ? p : ".", prog);
    struct stat sb;
    if (stat(buf, &sb) == 0 && S_ISREG(sb.st_mode) && access(buf, X_OK) == 0) return 1;
    if (!c) break;
    p = c + 1;
  }
  return 0;
}

static void cli_print_cmd(FILE *f, char **av) {
  for (int i = 0; av[i]; i++) {
    const char *s = av[i];
    int plain = *s != '\0';
    for (const char *p = s; *p; p++)
      if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%", *p))
        plain = 0;
    if (plain)
      fprintf(f, "%s%s", i ? " " : "", s);
    else {
      fprintf(f, "%s'", i ? " " : "");
      for (const char *p = s; *p; p++) {
        if (*p == '\'')
          fputs("'\\''", f);
        else
          fputc(*p, f);
      }
      fputc('\'', f);
    }
  }
  fputc('\n', f);
}

static double cli_mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cli_wall(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cli_env_double(const char *name, double dflt) {
  const char *s = zrt_env(name);
  if (!s || !*s) return dflt;
  char *end;
  double v = strtod(s, &end);
  return *end || v < 0 ? dflt : v;
}

/* What the launcher starts: the config resolved and validated for the
 * world size, the machines, the program. */
typedef struct cli_plan {
  const char *prog;
  int64_t nproc, nmach;
  const char *hosts, *hostfile;
  char hostfile_buf[ZRT_CFG_STR];
  int bind;
  char mainip[256], port[32];
  int have_port;
} cli_plan;

/* Resolves and checks the job. Returns -1 to go on (*cfg_out: the config
 * the ranks read), else the launcher's exit status (nothing to free). */
static int cli_plan_job(const cli_launch_args *a, const char *prog, cli_plan *p,
                        zrt_config **cfg_out) {
  memset(p, 0, sizeof *p);
  p->prog = prog;
  zrt_config *cfg = NULL, *check = NULL;
  char used_file[4096];
  *cfg_out = NULL;
  if (cli_build_config(a, &cfg, used_file, sizeof used_file) != ZRT_OK) {
    fprintf(stderr, "zrt launch: %s\n", zrt_last_error());
    return 2;
  }
  const zrt_cfg *v = zrt_config_values(cfg);
  int64_t nproc = v->num_processes;
  if (nproc <= 0) {
    int g = v->use_cpu ? 0 : zrt_backend_cuda_device_count();
    nproc = g > 0 ? g : 1;
  }
  int64_t nmach = v->num_machines > 0 ? v->num_machines : 1;
  int64_t mrank = v->machine_rank > 0 ? v->machine_rank : 0;
  const char *hosts = a->val[cli_opt_index("hosts")];
  /* cfg is destroyed before the command line is built */
  snprintf(p->hostfile_buf, sizeof p->hostfile_buf, "%s", v->hostfile);
  const char *hostfile = p->hostfile_buf[0] ? p->hostfile_buf : NULL;
  if (hostfile && a->val[cli_opt_index("num_machines")] == NULL && nmach == 1) {
    int nh = cli_count_hosts(hostfile);
    if (nh < 0) {
      fprintf(stderr, "zrt launch: %s\n", zrt_last_error());
      zrt_config_destroy(cfg);
      return 2;
    }
    if (nh > 0) nmach = nh;
  }

  /* Validate the whole config (cross-key rules, batch triple) for this
   * world size before starting anything; the ranks get the unresolved
   * values so "auto" still resolves from what the program sets. */
  if (cli_build_config(a, &check, used_file, sizeof used_file) != ZRT_OK ||
      zrt_config_resolve_pending(check, (int)nproc) != ZRT_OK) {
    fprintf(stderr, "zrt launch: invalid config%s%s:\n%s\n", used_file[0] ? " from " : "",
            used_file, zrt_last_error());
    zrt_config_destroy(check);
    zrt_config_destroy(cfg);
    return 2;
  }
  zrt_config_destroy(check);

  if (nmach > 1 && mrank > 0) {
    fprintf(stderr,
            "zrt launch: machine_rank %lld: with Open MPI, machine 0 starts the ranks of all %lld "
            "machines (over ssh); nothing to start here\n",
            (long long)mrank, (long long)nmach);
    zrt_config_destroy(cfg);
    return 0;
  }
  if (nmach > 1 && !hostfile && !hosts) {
    fprintf(stderr,
            "zrt launch: num_machines is %lld but no machines are named: pass --hostfile FILE "
            "(lines 'host slots=N') or --hosts h1:N,h2:N so mpiexec can start the ranks there\n",
            (long long)nmach);
    zrt_config_destroy(cfg);
    return 2;
  }
  if (nproc % nmach != 0) {
    fprintf(stderr,
            "zrt launch: num_processes %lld is not a multiple of num_machines %lld (each "
            "machine runs the same number of ranks)\n",
            (long long)nproc, (long long)nmach);
    zrt_config_destroy(cfg);
    return 2;
  }
  if (nproc > CLI_MAX_RANKS) {
    fprintf(stderr, "zrt launch: num_processes %lld is above %d\n", (long long)nproc,
            CLI_MAX_RANKS);
    zrt_config_destroy(cfg);
    return 2;
  }
  if (nmach == 1 && !hostfile && !hosts && !cli_find_program(prog)) {
    fprintf(stderr, "zrt launch: program '%s' not found (%s)\n", prog,
            strchr(prog, '/') ? "no such executable file" : "not a file and not in PATH");
    zrt_config_destroy(cfg);
    return 2;
  }
  p->nproc = nproc;
  p->nmach = nmach;
  p->hosts = hosts;
  p->hostfile = hostfile;
  *cfg_out = cfg;
  return -1;
}

/* The run directory, the config the ranks read (cfgpath), the launcher's
 * pipe and the environment the ranks inherit. 0, or the exit status after
 * cleaning up. */
static int cli_prepare_run(zrt_config *cfg, cli_plan *p, cli_run *run, char *cfgpath, size_t cfglen,
                           int *fifo_fd) {
  /* Run directory and the config the ranks read. */
  const zrt_cfg *v = zrt_config_values(cfg);
  memset(run, 0, sizeof *run);
  run->first_fail = -1;
  run->nranks = (int)p->nproc;
  const char *tmp = zrt_env("TMPDIR");
  snprintf(run->dir, sizeof run->dir, "%s/zrt-run-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(run->dir)) {
    fprintf(stderr, "zrt launch: cannot create a run directory under %s: %s\n",
            tmp && *tmp ? tmp : "/tmp", strerror(errno));
    return 1;
  }
  snprintf(cfgpath, cfglen, "%s/config.json", run->dir);
  if (zrt_config_write_json(cfg, cfgpath) != ZRT_OK) {
    fprintf(stderr, "zrt launch: %s\n", zrt_last_error());
    cli_remove_run_dir(run->dir);
    return 1;
  }
  p->bind = v->bind_cores_to_rank;
  cli_thread_plan_announce(v, (int)(p->nproc / p->nmach), p->bind);
  snprintf(p->mainip, sizeof p->mainip, "%s", v->main_process_ip);
  snprintf(p->port, sizeof p->port, "%lld", (long long)v->main_process_port);
  p->have_port = v->main_process_port > 0;

  setenv("ZRT_CONFIG_FILE", cfgpath, 1);
  setenv("ZRT_RUN_DIR", run->dir, 1);
  /* The launcher's pipe (see the top): opened read-write so the open does
   * not wait for a reader; close-on-exec so mpiexec does not hold it. */
  char fifo[PATH_MAX + 32];
  snprintf(fifo, sizeof fifo, "%s/%s", run->dir, CLI_LAUNCH_FIFO);
  *fifo_fd = mkfifo(fifo, 0600) == 0 ? open(fifo, O_RDWR | O_NONBLOCK | O_CLOEXEC) : -1;
  if (*fifo_fd < 0) {
    fprintf(stderr, "zrt launch: cannot create the launcher pipe %s: %s\n", fifo, strerror(errno));
    cli_remove_run_dir(run->dir);
    return 1;
  }
  char lpid[64];
  snprintf(lpid, sizeof lpid, "%d:%llu", (int)getpid(), cli_proc_start(getpid()));
  setenv("ZRT_LAUNCH_FIFO", fifo, 1);
  setenv("ZRT_LAUNCH_PID", lpid, 1);
  setenv("ZRT_LAUNCH_BIND", p->bind ? "1" : "0", 1);
  if (p->mainip[0]) setenv("MASTER_ADDR", p->mainip, 1);
  if (p->have_port) setenv("MASTER_PORT", p->port, 1);
  return 0;
}

/* The mpiexec command line (or, for one process on this machine, the rank
 * wrapper's own). */
typedef struct cli_cmd {
  char **av;  /* NULL-terminated */
  char **own; /* the strings av owns */
  int nown;
  char *extra_copy; /* $ZRT_MPIEXEC_ARGS, split in place */
  char self[PATH_MAX], nbuf[32], ppr[64];
} cli_cmd;

static void cli_cmd_free(cli_cmd *cmd) {
  for (int i = 0; i < cmd->nown; i++) free(cmd->own[i]);
  free(cmd->own);
  free(cmd->av);
  free(cmd->extra_copy);
}

/* 0, or the exit status (cmd freed by the caller either way). */
static int cli_mpiexec_argv(const cli_plan *p, int argc, char **argv, int prog_at, cli_cmd *cmd) {
  /* mpiexec command line */
  memset(cmd, 0, sizeof *cmd);
  char *self = cmd->self;
  ssize_t sl = readlink("/proc/self/exe", self, sizeof cmd->self - 1);
  if (sl <= 0) {
    fprintf(stderr, "zrt launch: cannot find the zrt executable: %s\n", strerror(errno));
    return 1;
  }
  self[sl] = '\0';
  size_t cap = (size_t)argc + 256;
  extern char **environ;
  for (char **e = environ; *e; e++) cap += 2;
  char **av = cmd->av = calloc(cap, sizeof *av);
  char **own = cmd->own = calloc(cap, sizeof *own); /* strings av owns */
  if (!av || !own) {
    fprintf(stderr, "zrt launch: out of memory\n");
    return 1;
  }
  int n = 0, nown = 0;
  const char *mpiexec = zrt_env("ZRT_MPIEXEC");
  av[n++] = (char *)(mpiexec && *mpiexec ? mpiexec : "mpiexec");
  if (geteuid() == 0) av[n++] = "--allow-run-as-root";
  av[n++] = "--oversubscribe";
  av[n++] = "--bind-to";
  av[n++] = "none";
  if (isatty(STDIN_FILENO)) {
    /* mpiexec runs in a background process group: reading the terminal
     * would stop it (SIGTTIN) */
    av[n++] = "--stdin";
    av[n++] = "none";
  }
  av[n++] = "-n";
  char *nbuf = cmd->nbuf;
  snprintf(nbuf, sizeof cmd->nbuf, "%lld", (long long)p->nproc);
  av[n++] = nbuf;
  char *ppr = cmd->ppr;
  if (p->hostfile || p->hosts) {
    if (p->hostfile) {
      av[n++] = "--hostfile";
      av[n++] = (char *)p->hostfile;
    } else {
      av[n++] = "-H";
      av[n++] = (char *)p->hosts;
    }
    /* accelerate runs num_processes / num_machines ranks per machine */
    snprintf(ppr, sizeof cmd->ppr, "ppr:%lld:node", (long long)(p->nproc / p->nmach));
    av[n++] = "--map-by";
    av[n++] = ppr;
  }
  /* Local ranks inherit the environment anyway; -x carries it to other
   * machines. */
  for (char **e = environ; *e; e++) {
    const char *s = *e;
    if (!strncmp(s, "ZRT_", 4) || !strncmp(s, "OMP_", 4) || !strncmp(s, "MASTER_", 7) ||
        !strncmp(s, "PATH=", 5) || !strncmp(s, "LD_LIBRARY_PATH=", 16) ||
        !strncmp(s, "CUDA_VISIBLE_DEVICES=", 21) || !strncmp(s, "NCCL_", 5)) {
      const char *eq = strchr(s, '=');
      if (!eq) continue;
      char *name = strndup(s, (size_t)(eq - s));
      own[nown++] = name;
      av[n++] = "-x";
      av[n++] = name;
    }
  }
  const char *extra = zrt_env("ZRT_MPIEXEC_ARGS");
  char *extra_copy = cmd->extra_copy = extra ? strdup(extra) : NULL;
  if (extra_copy) {
    char *save = NULL;
    for (char *t = strtok_r(extra_copy, " \t", &save); t && (size_t)n < cap - (size_t)argc - 8;
         t = strtok_r(NULL, " \t", &save))
      av[n++] = t;
  }
  av[n++] = self;
  av[n++] = "launch";
  av[n++] = "__rank";
  for (int i = prog_at; i < argc; i++) av[n++] = argv[i];
  av[n] = NULL;
  /* A single process on this machine needs no mpiexec: the rank wrapper
   * runs it directly (rank 0 of 1, comm self), unless the user asked for a
   * particular mpiexec or mpiexec options. */
  if (p->nproc == 1 && p->nmach == 1 && !p->hostfile && !p->hosts && !(extra && *extra) &&
      !(mpiexec && *mpiexec)) {
    int k = 0;
    while (av[k] != self) k++;
    memmove(av, av + k, (size_t)(n - k + 1) * sizeof *av);
    n -= k;
  }
  cmd->nown = nown;
  return 0;
}

/* Starts mpiexec (its own process group, its stderr through the noise
 * filter, PR_SET_PDEATHSIG) and supervises the job to its end: the
 * launcher's signals, the first rank failure, the grace period, no rank
 * left behind. 0 (end filled in), or the exit status when mpiexec could not
 * be started. */
static int cli_supervise(cli_run *run, const cli_plan *p, char **av, cli_job_end *end) {
  memset(end, 0, sizeof *end);
  run->rec = calloc((size_t)p->nproc, sizeof *run->rec);
  if (!run->rec) {
    fprintf(stderr, "zrt launch: out of memory\n");
    return 1;
  }
  sigset_t mask, old;
  sigemptyset(&mask);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGHUP);
  sigaddset(&mask, SIGCHLD);
  sigprocmask(SIG_BLOCK, &mask, &old);
  fflush(stdout);
  fflush(stderr);
  double grace = end->grace = cli_env_double("ZRT_LAUNCH_GRACE_S", 3.0);
  /* mpiexec's own stderr goes through a filter into the run directory */
  pid_t noise_pid = -1;
  int noise_fd = zrt_launch_noise_start(run->dir, &noise_pid);
  /* every rank on this machine: the launcher reaches each wrapper itself */
  int local = !(p->hostfile || p->hosts);
  pid_t launcher = getpid();
  pid_t mp = fork();
  if (mp < 0) {
    fprintf(stderr, "zrt launch: fork failed: %s\n", strerror(errno));
    sigprocmask(SIG_SETMASK, &old, NULL);
    return 1;
  }
  if (mp == 0) {
    setpgid(0, 0);
    if (noise_fd >= 0) {
      dup2(noise_fd, STDERR_FILENO);
      close(noise_fd);
    }
    /* mpiexec ends its job when the launcher dies, however it dies */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != launcher) _exit(128 + SIGTERM); /* already gone */
    /* a launcher started in the background inherits SIGINT ignored; mpiexec
     * and the ranks must still end on the signals the launcher forwards */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    /* Open MPI's own abort sends SIGTERM, then SIGKILL after
     * odls_base_sigkill_timeout (1 s): on a loaded machine a rank wrapper
     * may not get to write its exit record in 1 s. Give mpiexec the same
     * grace as the launcher (a user's own setting wins; 4.x reads OMPI_MCA_,
     * 5.x's PRRTE PRTE_MCA_). */
    char gbuf[32];
    snprintf(gbuf, sizeof gbuf, "%d", (int)(grace + 0.999));
    setenv("OMPI_MCA_odls_base_sigkill_timeout", gbuf, 0);
    setenv("PRTE_MCA_odls_base_sigkill_timeout", gbuf, 0);
    /* On one machine the launcher, not mpiexec, decides when a rank's exit
     * ends the job (it sees every wrapper's record, and a wrapper gone
     * without one: cli_scan_lost)
     * (the first failure, ZRT_LAUNCH_ABORT_WAIT_S): ranks that answer an
     * interrupt by saving and exiting 75 one after the other are not a
     * failure. Open MPI 4.1's own abort would kill the ranks still saving,
     * and its kill path sleeps odls_base_sigkill_timeout twice in mpiexec's
     * event loop, so their MPI_Finalize waits out both sleeps (3 s grace:
     * 5.7 s to end an interrupted job; 1 s without it). */
    if (local) setenv("OMPI_MCA_orte_abort_on_non_zero_status", "0", 0);
    execvp(av[0], av);
    fprintf(stderr, "zrt launch: cannot run '%s': %s (install Open MPI or set ZRT_MPIEXEC)\n",
            av[0], strerror(errno));
    _exit(127);
  }
  setpgid(mp, mp); /* either side may win the race; both set the same */
  if (noise_fd >= 0) close(noise_fd);

  double abort_wait = cli_env_double("ZRT_LAUNCH_ABORT_WAIT_S", 1.0);
  double stop_grace = end->stop_grace =
      cli_env_double("ZRT_LAUNCH_STOP_GRACE_S", CLI_STOP_GRACE_DEFAULT_S);
  int user_sig = 0, mp_status = 0, mp_done = 0;
  double t_user_wall = 0, t_user = -1;
  double t_fail = -1, t_term = -1, t_kill = -1, t_all = -1;
  struct timespec tick = {0, 100 * 1000 * 1000};
  while (!mp_done) {
    siginfo_t si;
    int sig = sigtimedwait(&mask, &si, &tick);
    double now = cli_mono();
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      if (user_sig && t_kill < 0) {
        /* a second interrupt: no more grace */
        kill(-mp, SIGKILL);
        cli_kill_recorded(run, SIGKILL);
        t_kill = now;
      } else if (!user_sig) {
        char sn[32];
        user_sig = sig;
        t_user_wall = cli_wall();
        t_user = now;
        if (local) {
          /* Each rank gets the signal once, through its wrapper, and mpiexec
           * none: it stays up to carry the ranks' output and to serve their
           * MPI_Finalize, so a program that saves on the signal (train_gpt2:
           * after the step, exit 75) ends as it chose. Signalling mpiexec
           * would start its own teardown: the ranks' output stops, and their
           * MPI_Finalize waits on a server that is going away until the
           * SIGKILL. */
          fprintf(stderr,
                  "zrt launch: got %s; passing it to the ranks and waiting for them to end "
                  "(ZRT_LAUNCH_STOP_GRACE_S %g s, then SIGTERM/SIGKILL; a second signal kills "
                  "at once)\n",
                  cli_signame(sig, sn, sizeof sn), stop_grace);
          cli_forward_recorded(run, sig);
        } else {
          /* ranks on other machines are reached only through mpiexec */
          fprintf(stderr, "zrt launch: got %s; ending all ranks\n",
                  cli_signame(sig, sn, sizeof sn));
          kill(-mp, sig);
          cli_kill_recorded(run, SIGTERM);
          t_term = now;
        }
      }
    }
    /* a wrapper that recorded itself after the interrupt gets it now */
    if (user_sig && local && t_term < 0) cli_forward_recorded(run, user_sig);
    pid_t w = waitpid(mp, &mp_status, WNOHANG);
    if (w == mp) mp_done = 1;
    if (cli_scan_exits(run) && t_fail < 0) t_fail = now;
    if (local && !user_sig && t_fail < 0 && cli_scan_lost(run)) t_fail = now;
    if (mp_done) break;
    if (user_sig && local && t_term < 0) {
      /* the ranks answer the interrupt as they choose (a save takes a
       * while): only the stop grace ends the wait, not a rank's exit; once
       * every rank has ended, mpiexec gets ZRT_LAUNCH_ABORT_WAIT_S to exit
       * (without its abort, Open MPI 4.1 stays up after ranks that died of
       * a signal) */
      int all = 1;
      for (int r = 0; r < run->nranks && all; r++) all = run->rec[r].have;
      if (all && t_all < 0) t_all = now;
      if (t_all >= 0 && now - t_all >= abort_wait) {
        kill(-mp, SIGTERM);
        t_term = now;
      } else if (now - t_user >= stop_grace) {
        fprintf(stderr,
                "zrt launch: the ranks are still running %g s after the interrupt "
                "(ZRT_LAUNCH_STOP_GRACE_S); ending them\n",
                stop_grace);
        kill(-mp, SIGTERM);
        cli_kill_recorded(run, SIGTERM);
        t_term = now;
      }
    } else if (t_fail >= 0 && t_term < 0 && now - t_fail >= abort_wait) {
      /* mpiexec did not end the job on its own */
      kill(-mp, SIGTERM);
      cli_kill_recorded(run, SIGTERM);
      t_term = now;
    }
    if (t_term >= 0 && t_kill < 0 && now - t_term >= grace) {
      kill(-mp, SIGKILL);
      cli_kill_recorded(run, SIGKILL);
      t_kill = now;
    }
  }
  /* mpiexec is gone; make sure its ranks are too (a rank mpiexec lost
   * track of would otherwise run on as an orphan). */
  cli_kill_recorded(run, SIGTERM);
  double t0 = cli_mono();
  while (cli_any_recorded_alive(run) && cli_mono() - t0 < grace) {
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  cli_kill_recorded(run, SIGKILL);
  kill(-mp, SIGKILL); /* anything left in mpiexec's group */
  cli_scan_exits(run);
  zrt_launch_noise_finish(noise_pid, grace);
  sigprocmask(SIG_SETMASK, &old, NULL);
  end->user_sig = user_sig;
  end->t_user_wall = t_user_wall;
  end->mp_status = mp_status;
  end->remote = p->hostfile || p->hosts;
  return 0;
}

int zrt_cmd_launch(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "__rank")) return cli_rank_main(argc - 1, argv + 1);
  /* DeepSpeed's / accelerate's launcher flags typed from habit */
  int hrc = zrt_launch_habits_rewrite(&argc, &argv);
  if (hrc) return hrc;

  cli_launch_args a;
  int rc = cli_parse_launch(argc, argv, &a);
  if (rc) return rc;
  if (a.val[cli_opt_index("help")]) {
    cli_launch_usage(stdout);
    return 0;
  }
  cli_plan p;
  zrt_config *cfg = NULL;
  rc = cli_plan_job(&a, argv[a.prog], &p, &cfg);
  if (rc >= 0) return rc;

  cli_run run;
  char cfgpath[PATH_MAX + 16];
  int fifo_fd = -1;
  rc = cli_prepare_run(cfg, &p, &run, cfgpath, sizeof cfgpath, &fifo_fd);
  zrt_config_destroy(cfg);
  if (rc) return rc;

  cli_cmd cmd;
  rc = cli_mpiexec_argv(&p, argc, argv, a.prog, &cmd);
  if (rc) {
    cli_cmd_free(&cmd);
    close(fifo_fd);
    cli_remove_run_dir(run.dir);
    return rc;
  }
  if (a.val[cli_opt_index("dry_run")] && strcmp(a.val[cli_opt_index("dry_run")], "false")) {
    /* a dry run starts nothing and keeps nothing: the config is shown,
     * then the run directory goes */
    char *cj = cli_slurp(cfgpath);
    printf("config (the ranks would read it from the run directory):\n%s", cj ? cj : "?\n");
    free(cj);
    close(fifo_fd);
    cli_remove_run_dir(run.dir);
    cli_print_cmd(stdout, cmd.av);
    cli_cmd_free(&cmd);
    return 0;
  }

  cli_job_end end;
  rc = cli_supervise(&run, &p, cmd.av, &end);
  int ret = rc ? rc : cli_report_end(&run, &end);
  if (ret == 0 || run.stopped) /* an interrupt the ranks all answered leaves nothing to inspect */
    cli_remove_run_dir(run.dir);
  else if (!rc)
    fprintf(stderr, "zrt launch: run directory kept for inspection: %s\n", run.dir);
  else
    cli_remove_run_dir(run.dir);
  cli_cmd_free(&cmd);
  free(run.rec);
  close(fifo_fd);
  return ret;
}
