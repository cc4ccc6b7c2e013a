/*
 * cmd_env.c — `zrt env`: everything a bug report needs, in fixed sections
 * ("== zrt ==", "== cpu ==", "== numa ==", "== gpus ==", "== libraries ==",
 * "== limits ==", "== environment ==", "== parameters ==", "== config =="),
 * so tests and users can grep them. "== parameters ==" is the table of
 * base/env.c with this machine's values; `zrt env --reference` prints the
 * same table as docs/environment.md. It must run on any machine: no GPU, no NUMA, no config
 * file are all normal answers, never errors. It never initialises MPI (the
 * library version query works before MPI_Init).
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <cpuid.h>
#include <jemalloc/jemalloc.h>
#include <mpi.h>
#include <numa.h>
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <yaml.h>

#include "backend.h"
#include "comm.h"
#include "config.h"
#include "cpu_optim.h"
#include "device_rules.h"
#include "env.h"
#include "internal.h"
#include "launch_threads.h"
#include "launch_util.h"
#include "safe_file.h"
#include "tools.h"
#include "zrt.h"

char *openblas_get_config(void);
int openblas_get_num_threads(void);

static void cli_env_build(void) {
  printf("== zrt ==\n");
  printf("version: %s\n", ZRT_VERSION_STRING);
#ifdef __OPTIMIZE__
  const char *opt = "optimized";
#else
  const char *opt = "not optimized (-O0)";
#endif
#ifdef NDEBUG
  const char *asserts = "off (NDEBUG)";
#else
  const char *asserts = "on";
#endif
  printf("build: %s, assertions %s, compiler %s\n", opt, asserts, __VERSION__);
  const char *san = "none";
#if defined(__SANITIZE_ADDRESS__) && defined(__SANITIZE_THREAD__)
  san = "address,thread";
#elif defined(__SANITIZE_ADDRESS__)
  san = "address";
#elif defined(__SANITIZE_THREAD__)
  san = "thread";
#endif
  printf("sanitizers: %s\n", san);
  printf("CUDA backend: %s\n", zrt_backend_cuda_built() ? "built" : "not built");
  printf("backends (zrt.backend / ZRT_BACKEND): auto, cpu, twin (GPU rules on the CPU: %s), cuda\n",
         zrt_backend_twin_pku()
             ? "protection keys guard device memory"
             : "no protection keys here, pointer kinds checked at op boundaries");
  char nv[160];
  zrt_comm_nccl_version(nv, sizeof nv);
  printf("NCCL comm: %s\n", strncmp(nv, "not built", 9) ? "built" : "not built");
  printf("CPU comms: mpi, shm (ranks on one machine), hier (shm within machines, MPI across); "
         "zrt.comm / $ZRT_COMM auto picks by placement (docs/comms.md)\n");
  printf("cpu kernels ISA: %s (optimizer, conversions, shm SUM, streaming copy; best this CPU "
         "runs; $ZRT_CPU_ISA or $ZRT_ISA forces a lesser one)\n",
         zrt_isa_name(zrt_isa_best()));
}

static void cli_env_cpu(void) {
  printf("\n== cpu ==\n");
  char model[256] = "unknown";
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[1024];
    while (fgets(line, sizeof line, f)) {
      if (strncmp(line, "model name", 10)) continue;
      char *c = strchr(line, ':');
      if (!c) continue;
      c++;
      while (*c == ' ') c++;
      c[strcspn(c, "\n")] = '\0';
      snprintf(model, sizeof model, "%s", c);
      break;
    }
    fclose(f);
  }
  printf("model: %s\n", model);
  printf("isa:");
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  unsigned l1c = 0, l7b = 0, l7c = 0, l71a = 0, max = __get_cpuid_max(0, NULL);
  if (__get_cpuid(1, &a, &b, &c, &d)) l1c = c;
  if (max >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    l7b = b;
    l7c = c;
    __cpuid_count(7, 1, a, b, c, d);
    l71a = a;
  }
  /* the OS must save the wide registers too (XCR0), else the CPU bit lies */
  unsigned long long xcr0 = 0;
  if (l1c & (1u << 27)) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = ((unsigned long long)hi << 32) | lo;
  }
  int avx_os = (xcr0 & 6) == 6, avx512_os = (xcr0 & 0xe6) == 0xe6;
  struct {
    const char *name;
    int on;
  } isa[] = {
      {"sse4.2", !!(l1c & (1u << 20))},
      {"avx", avx_os && (l1c & (1u << 28))},
      {"f16c", avx_os && (l1c & (1u << 29))},
      {"fma", avx_os && (l1c & (1u << 12))},
      {"avx2", avx_os && (l7b & (1u << 5))},
      {"avx512f", avx512_os && (l7b & (1u << 16))},
      {"avx512dq", avx512_os && (l7b & (1u << 17))},
      {"avx512bw", avx512_os && (l7b & (1u << 30))},
      {"avx512vl", avx512_os && (l7b & (1u << 31))},
      {"avx512_vnni", avx512_os && (l7c & (1u << 11))},
      {"avx512_bf16", avx512_os && (l71a & (1u << 5))},
  };
  int any = 0;
  for (size_t i = 0; i < sizeof isa / sizeof isa[0]; i++)
    if (isa[i].on) {
      printf(" %s", isa[i].name);
      any = 1;
    }
  if (!any) printf(" (none of the x86 vector extensions zrt uses)");
#else
  printf(" (not x86: scalar paths)");
#endif
  printf("\n");
  printf("cores online: %ld\n", sysconf(_SC_NPROCESSORS_ONLN));
  cpu_set_t set;
  char list[1024] = "?";
  int n = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    cli_cpulist(&set, list, sizeof list);
    n = CPU_COUNT(&set);
  }
  printf("affinity of this process: %s (%d cores)%s\n", list, n,
         zrt_env("ZRT_BOUND_CPUS") ? " (bound by zrt launch --bind_cores_to_rank)" : "");
  const char *omp = zrt_env("OMP_NUM_THREADS");
  printf("OpenMP: %d threads (OMP_NUM_THREADS=%s), spec %d\n", omp_get_max_threads(),
         omp ? omp : "unset", _OPENMP);
  char wp[320];
  printf("%s\n", cli_wait_policy_text(wp, sizeof wp));
}

/* The thread plan `zrt launch` applies (launch_threads.c): for this rank
 * under the launcher (LOCAL_RANK / LOCAL_WORLD_SIZE set), else for
 * `local_ranks` ranks on this machine (--num_processes, default 1). */
static void cli_env_threads(int local_ranks) {
  printf("\n== threads ==\n");
  const char *lw = zrt_env("LOCAL_WORLD_SIZE"), *lr = zrt_env("LOCAL_RANK");
  const char *h = zrt_env("ZRT_LAUNCH_HELPERS");
  int under = lw && *lw && zrt_env("ZRT_RUN_DIR");
  int ranks = under ? atoi(lw) : local_ranks;
  int bound = zrt_env("ZRT_BOUND_CPUS") != NULL;
  cpu_set_t set;
  int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  if (bound) {
    /* a bound rank sees only its own group: the plan is that group */
    printf("plan: bound by zrt launch --bind_cores_to_rank to %s: OMP_NUM_THREADS=%s\n",
           zrt_env("ZRT_BOUND_CPUS"),
           zrt_env("OMP_NUM_THREADS") ? zrt_env("OMP_NUM_THREADS") : "?");
    return;
  }
  int user = cli_thread_env_user();
  if (under && zrt_env("ZRT_LAUNCH_OMP_USER") && !strcmp(zrt_env("ZRT_LAUNCH_OMP_USER"), "0"))
    user = 0; /* the wrapper set OMP_NUM_THREADS from the plan */
  char buf[256];
  if (under) {
    cli_thread_plan p;
    cli_thread_plan_make(cores, ranks, lr ? atoi(lr) : 0, h ? atoi(h) : 0, user, 0, &p);
    printf("plan (this rank, under zrt launch): %s\n", cli_thread_plan_text(&p, buf, sizeof buf));
    return;
  }
  printf("plan of zrt launch with %d rank%s on this machine (zrt env --num_processes N for "
         "another count), OMP_NUM_THREADS %s:\n",
         ranks, ranks == 1 ? "" : "s", user ? "as set now" : "unset");
  for (int r = 0; r < ranks && r < 8; r++) {
    cli_thread_plan p;
    cli_thread_plan_make(cores, ranks, r, 1, user, 0, &p);
    printf("  %s\n", cli_thread_plan_text(&p, buf, sizeof buf));
  }
  if (ranks > 8) printf("  ... (%d more ranks)\n", ranks - 8);
  printf("  (the copy thread runs only with offload_optimizer or offload_param; "
         "--bind_cores_to_rank also binds each rank to its cores and NUMA node)\n");
}

static void cli_env_numa(void) {
  printf("\n== numa ==\n");
  if (numa_available() < 0) {
    printf("libnuma: NUMA not available on this machine (one memory node)\n");
    return;
  }
  int maxn = numa_max_node();
  printf("nodes: %d\n", maxn + 1);
  struct bitmask *cpus = numa_allocate_cpumask();
  for (int nd = 0; nd <= maxn; nd++) {
    long long freeb = 0;
    long long total = numa_node_size64(nd, &freeb);
    if (total < 0) continue;
    char tb[32], fb[32], cl[1024] = "";
    size_t o = 0;
    if (numa_node_to_cpus(nd, cpus) == 0) {
      cpu_set_t s;
      CPU_ZERO(&s);
      for (unsigned c = 0; c < cpus->size && c < CPU_SETSIZE; c++)
        if (numa_bitmask_isbitset(cpus, c)) CPU_SET(c, &s);
      cli_cpulist(&s, cl, sizeof cl);
      o = strlen(cl);
    }
    printf("node %d: %s total, %s free, cpus %s\n", nd,
           zrt_format_size((uint64_t)total, tb, sizeof tb),
           zrt_format_size((uint64_t)(freeb > 0 ? freeb : 0), fb, sizeof fb), o ? cl : "none");
  }
  numa_free_cpumask(cpus);
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int node = cli_numa_node_of(&set);
    printf("node of this process's first core: %d\n", node);
  }
  struct bitmask *mb = numa_get_membind();
  if (mb) {
    printf("memory binding:");
    int all = 1;
    for (int nd = 0; nd <= maxn; nd++)
      if (!numa_bitmask_isbitset(mb, (unsigned)nd)) all = 0;
    if (all)
      printf(" all nodes\n");
    else {
      for (int nd = 0; nd <= maxn; nd++)
        if (numa_bitmask_isbitset(mb, (unsigned)nd)) printf(" %d", nd);
      printf("\n");
    }
    numa_bitmask_free(mb);
  }
}

static void cli_env_gpus(void) {
  printf("\n== gpus ==\n");
  if (!zrt_backend_cuda_built()) {
    printf("CUDA backend not built: no GPUs used (CPU backend)\n");
    return;
  }
  zrt_cuda_probe probe;
  zrt_backend_cuda_probe_devices(&probe);
  int n = probe.count;
  printf("count: %d\n", n);
  if (probe.kind == ZRT_CUDA_PROBE_ERROR)
    printf("CUDA cannot list devices (a driver problem, not \"no GPU\"): %s\n", probe.what);
  else if (probe.kind == ZRT_CUDA_PROBE_NO_DEVICE)
    printf("no GPU: no NVIDIA driver or no device visible (CUDA_VISIBLE_DEVICES)\n");
  for (int i = 0; i < n; i++) {
    zrt_backend *b = NULL;
    if (zrt_backend_create("cuda", 0, i, &b) != ZRT_OK) {
      printf("gpu %d: cannot open: %s\n", i, zrt_last_error());
      continue;
    }
    printf("gpu %d: %s, numa node %d\n", i, b->description, b->numa_node);
    zrt_backend_destroy(b);
  }
}

static void cli_env_libs(void) {
  printf("\n== libraries ==\n");
  char mpiv[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0, maj = 0, min = 0;
  MPI_Get_library_version(mpiv, &len);
  MPI_Get_version(&maj, &min);
  mpiv[strcspn(mpiv, "\n")] = '\0';
  printf("MPI: %s (standard %d.%d)\n", mpiv, maj, min);
  char ver[160];
  zrt_comm_nccl_version(ver, sizeof ver);
  printf("NCCL: %s\n", ver);
  zrt_backend_cuda_versions(ver, sizeof ver);
  printf("CUDA: %s\n", ver);
  char *ob = openblas_get_config();
  printf("OpenBLAS: %s (%d threads)\n", ob ? ob : "?", openblas_get_num_threads());
  const char *jv = NULL;
  size_t sz = sizeof jv;
  if (mallctl("version", &jv, &sz, NULL, 0) == 0 && jv)
    printf("jemalloc: %s (allocator in use)\n", jv);
  else
    printf("jemalloc: headers %s, not the allocator in use\n", JEMALLOC_VERSION);
  printf("libyaml: %s\n", yaml_get_version_string());
  printf("cJSON: %s\n", cJSON_Version());
  printf("libnuma: API version %d\n", LIBNUMA_API_VERSION);
  printf("liburing: linked\n");
}

static void cli_env_limits(void) {
  printf("\n== limits ==\n");
  struct rlimit rl;
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
    char a[32], b[32];
    printf("RLIMIT_MEMLOCK: soft %s, hard %s%s\n",
           rl.rlim_cur == RLIM_INFINITY ? "unlimited"
                                        : zrt_format_size((uint64_t)rl.rlim_cur, a, sizeof a),
           rl.rlim_max == RLIM_INFINITY ? "unlimited"
                                        : zrt_format_size((uint64_t)rl.rlim_max, b, sizeof b),
           rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (1ull << 30)
               ? " (low: pinned host buffers for offload will fall back or fail; raise with "
                 "ulimit -l)"
               : "");
  }
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  if (pages > 0 && psz > 0) {
    char m[32];
    printf("physical memory: %s\n", zrt_format_size((uint64_t)pages * (uint64_t)psz, m, sizeof m));
  }
}

static void cli_env_vars(void) {
  printf("\n== environment ==\n");
  extern char **environ;
  int n = 0;
  for (char **e = environ; *e; e++) {
    const char *s = *e;
    if (!strncmp(s, "ZRT_", 4) || !strncmp(s, "OMP_", 4) || !strncmp(s, "CUDA_VISIBLE", 12) ||
        !strncmp(s, "NCCL_", 5) || !strncmp(s, "RANK=", 5) || !strncmp(s, "LOCAL_RANK=", 11) ||
        !strncmp(s, "WORLD_SIZE=", 11) || !strncmp(s, "LOCAL_WORLD_SIZE=", 17) ||
        !strncmp(s, "MASTER_", 7)) {
      printf("%s\n", s);
      n++;
    }
  }
  if (!n) printf("(no ZRT_*, OMP_*, NCCL_*, CUDA_VISIBLE_DEVICES or rank variables set)\n");
}

/* The table of base/env.c with what each variable holds here: its value,
 * or what unset means. A hook set without its switch is shown as such
 * (zrt_env reads it as unset). */
static void cli_env_params(void) {
  printf("\n== parameters ==\n");
  size_t n;
  const zrt_env_param *t = zrt_env_params(&n);
  for (size_t i = 0; i < n; i++) {
    const char *v = zrt_env(t[i].name);
    if (v)
      printf("%s=%s (%s)\n", t[i].name, v, zrt_env_kind_name(t[i].kind));
    else
      printf("%s unset: %s (%s)\n", t[i].name, t[i].unset, zrt_env_kind_name(t[i].kind));
  }
  if (zrt_env_check() != ZRT_OK) printf("test hooks: %s\n", zrt_last_error());
  printf("(every variable zrt reads; docs/environment.md describes each; config keys the "
         "environment overrides: zrt config explain, docs/config-reference.md)\n");
}

/* Markdown cells: a '|' would end the cell. */
static void cli_md_cell(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '|') fputc('\\', f);
    fputc(*s, f);
  }
}

/* docs/environment.md: the table of base/env.c, then the config keys the
 * environment overrides (the schema's env column). */
static void cli_env_reference(FILE *f) {
  fprintf(f, "# Environment variables\n\n"
             "<!-- generated by `zrt env --reference` from base/env.c and the config schema "
             "(cmake --build build --target env-reference); do not edit -->\n\n"
             "Every variable zrt (the library and the `zrt` command) reads, from the one table "
             "in base/env.c. `zrt env` prints each with its value on this machine. Test hooks act "
             "only with `ZRT_TEST_HOOKS=1`; a hook set without it stops `zrt_engine_create` with "
             "an error.\n");
  static const zrt_env_kind kinds[] = {ZRT_ENV_KNOB, ZRT_ENV_LAUNCH, ZRT_ENV_FOREIGN, ZRT_ENV_HOOK};
  size_t n;
  const zrt_env_param *t = zrt_env_params(&n);
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    const char *title = zrt_env_kind_name(kinds[k]);
    fprintf(f, "\n## %c%s\n\n", title[0] - 'a' + 'A', title + 1);
    fprintf(f, "| variable | type | unset | read by | what it does |\n"
               "| --- | --- | --- | --- | --- |\n");
    for (size_t i = 0; i < n; i++) {
      if (t[i].kind != kinds[k]) continue;
      fprintf(f, "| `%s` | ", t[i].name);
      cli_md_cell(f, t[i].type);
      fprintf(f, " | ");
      cli_md_cell(f, t[i].unset);
      fprintf(f, " | ");
      cli_md_cell(f, t[i].read);
      fprintf(f, " | ");
      cli_md_cell(f, t[i].doc);
      fprintf(f, " |\n");
    }
  }
  fprintf(f, "\n## Config overrides\n\n"
             "These set a config key (`zrt_config_from_env` and `zrt launch` read them over the "
             "config file, below command-line flags; docs/config.md). Their types, defaults and "
             "ranges are the keys' (docs/config-reference.md).\n\n"
             "| variable | config key |\n| --- | --- |\n");
  for (size_t i = 0; i < zrt_config_schema_count(); i++) {
    const zrt_cfg_key *k = zrt_config_schema_key(i);
    if (k && k->env) fprintf(f, "| `%s` | `%s` |\n", k->env, k->path);
  }
}

static void cli_env_config(void) {
  printf("\n== config ==\n");
  char p[4096];
  cli_default_config_path(p, sizeof p);
  if (access(p, F_OK) != 0) {
    printf("default config: %s (not present; `zrt config` writes it)\n", p);
    return;
  }
  FILE *f = zrt_safe_fopen_read(p, "default config"); /* a FIFO: an error, not a hang */
  if (!f) {
    printf("default config: %s\n", zrt_last_error());
    return;
  }
  printf("default config: %s\n", p);
  char line[1024];
  while (fgets(line, sizeof line, f)) printf("  %s", line);
  fclose(f);
}

int zrt_cmd_env(int argc, char **argv) {
  int local_ranks = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: zrt env [--num_processes N] | zrt env --reference\nPrints the zrt build, "
             "CPU and ISA, core affinity, the thread plan of zrt launch (for N ranks on this "
             "machine, default 1), NUMA nodes, GPUs, library versions, limits, relevant "
             "environment variables, every environment parameter zrt reads and the default "
             "config. --reference: the markdown of docs/environment.md.\n");
      return 0;
    }
    if (!strcmp(argv[i], "--reference")) {
      if (argc != 2) {
        fprintf(stderr, "zrt env: --reference takes no other argument\n");
        return 2;
      }
      cli_env_reference(stdout);
      return 0;
    }
    if (!strcmp(argv[i], "--num_processes") || !strncmp(argv[i], "--num_processes=", 16)) {
      const char *val = argv[i][15] == '=' ? argv[i] + 16 : (i + 1 < argc ? argv[++i] : NULL);
      char *end = NULL;
      long n = val ? strtol(val, &end, 10) : 0;
      if (!val || !*val || *end || n < 1 || n > 4096) {
        fprintf(stderr, "zrt env: --num_processes needs a rank count from 1 to 4096, got '%s'\n",
                val ? val : "(nothing)");
        return 2;
      }
      local_ranks = (int)n;
      continue;
    }
    fprintf(stderr,
            "zrt env: unknown argument '%s' (zrt env takes --num_processes N or --reference)\n",
            argv[i]);
    return 2;
  }
  cli_env_build();
  cli_env_cpu();
  cli_env_threads(local_ranks);
  cli_env_numa();
  cli_env_gpus();
  cli_env_libs();
  cli_env_limits();
  cli_env_vars();
  cli_env_params();
  cli_env_config();
  return 0;
}
