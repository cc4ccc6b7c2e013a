/*
 * env.c — the table of environment parameters and its reader (env.h).
 * Owns the only getenv calls of the library and the `zrt` command; holds
 * no state (values are read when asked; sites that must see one value per
 * process cache it themselves, as the "read" column says).
 *
 * Invariant: every variable zrt reads has one row here, and the hook rows
 * are the only ones ZRT_TEST_HOOKS gates. A row's "unset" text is the
 * documentation of the default its reader applies; keep the two together
 * when either changes.
 */
#include "env.h"

#include <stdlib.h>
#include <string.h>

#define HOOKS "ZRT_TEST_HOOKS"

/* clang-format off */
static const zrt_env_param zrt_env_table[] = {
  /* ---------------------------------------------------------------- settings */
  {"ZRT_LOG_LEVEL", "error|warn|info|debug", ZRT_ENV_KNOB, "info (another value: info, with a warning)",
   "the library's log, once per process",
   "threshold of the library's stderr log lines"},
  {"ZRT_CPU_ISA", "scalar|avx2|avx512", ZRT_ENV_KNOB, "the best path this CPU runs",
   "the CPU kernels' dispatch, once per process",
   "forces a lesser vector path of the CPU kernels (optimizer, conversions, shm SUM, streaming "
   "copy); a path the CPU cannot run is logged and the best one used"},
  {"ZRT_ISA", "scalar|avx2|avx512", ZRT_ENV_KNOB, "ZRT_CPU_ISA decides",
   "the CPU kernels' dispatch, once per process, when ZRT_CPU_ISA is unset",
   "older name of ZRT_CPU_ISA"},
  {"ZRT_TWIN_JITTER", "int", ZRT_ENV_KNOB, "no jitter",
   "each twin backend's creation",
   "a decimal seed: the twin backend's streams run their work with seeded random delays, so an "
   "order the program forgot to enforce shows up as a different result"},
  {"ZRT_TWIN_SIDE_DELAY_US", "int", ZRT_ENV_KNOB, "no delay",
   "each twin backend's creation",
   "microseconds (0-10000000) the twin sleeps before each op of every stream but the default one "
   "(a slow copy engine or comm stream), so a missing event shows even behind long compute"},
  {"ZRT_TWIN_SLOW_OP", "LABEL:US", ZRT_ENV_KNOB, "no slow op",
   "each twin backend's creation",
   "the twin sleeps US microseconds (0-10000000) before each op whose label contains LABEL (as "
   "ZRT_TWIN_TRACE names ops), on any stream: one slow kind of work, so a reader on another "
   "stream that is not ordered after it reads stale data"},
  {"ZRT_TWIN_HOST_FN", "stream|sync|cuda", ZRT_ENV_KNOB, "stream",
   "each twin backend's creation",
   "sync: the caller of each host function waits for it (it still runs on its stream's worker): "
   "the buckets' and offload pipe's blocking modes, statistics on the host, comms staged "
   "through host memory (CUDA with mpi); cuda: host functions are stream ops (bucket additions "
   "and the offload pipe in stream mode, comms on their stream as NCCL's) but the statistics "
   "run on the host, as on CUDA"},
  {"ZRT_TWIN_COPY_GUARD", "0|1", ZRT_ENV_KNOB, "1",
   "each twin backend's creation",
   "1: a copy the twin queues from registered (pinned) host memory dies with a message when the "
   "source's bytes change before it runs (the host rewrote it too early), and one into registered "
   "host memory fills the destination with 0xFF bytes (NaN) until it runs; 0: neither"},
  {"ZRT_TWIN_TRACE", "path", ZRT_ENV_KNOB, "no trace",
   "the twin backend",
   "an existing directory: the twin writes each stream's ops with start and end times to "
   "twin_trace.<pid>.txt there (perf/twin_overlap.py reads them)"},
  {"ZRT_COMM_SHM_ZC", "0|1", ZRT_ENV_KNOB, "1",
   "each shm comm's first collective buffer (agreed over the ranks)",
   "1: collective buffers in shared memory (zero-copy collectives); 0: private buffers (the copy "
   "path); private when any rank says 0"},
  {"ZRT_COMM_SHM_NT_BYTES", "size", ZRT_ENV_KNOB, "this CPU's last-level cache size",
   "each shm comm's first reduce-scatter",
   "receives of at least this many bytes are written with non-temporal stores (0: always)"},
  {"ZRT_COMM_SHM_REGION", "size", ZRT_ENV_KNOB, "1 MiB",
   "each shm comm's creation",
   "bytes of each rank's slot in the shm comm's staging segment (1024 bytes to 1 GiB)"},
  {"ZRT_REQUIRE_GPU", "bool", ZRT_ENV_KNOB, "0",
   "each GPU test's skip decision",
   "set and not 0: a GPU test that finds no GPU fails instead of skipping (exit 77)"},
  {"ZRT_CONFIG_HOME", "path", ZRT_ENV_KNOB, "$HOME/.config/zrt",
   "zrt launch, zrt config, zrt env",
   "folder of the default launch config (default_config.yaml)"},
  {"ZRT_MPIEXEC", "path", ZRT_ENV_KNOB, "mpiexec (from PATH)",
   "zrt launch",
   "the Open MPI launcher zrt launch runs"},
  {"ZRT_MPIEXEC_ARGS", "text", ZRT_ENV_KNOB, "none",
   "zrt launch (--log_dir/--tee append to it)",
   "extra mpiexec options, split at blanks"},
  {"ZRT_LAUNCH_GRACE_S", "number", ZRT_ENV_KNOB, "3",
   "zrt launch and its per-rank wrappers",
   "seconds from SIGTERM to SIGKILL when ranks are stopped"},
  {"ZRT_LAUNCH_ABORT_WAIT_S", "number", ZRT_ENV_KNOB, "1",
   "zrt launch",
   "seconds the launcher waits after a rank failed before stopping the others"},
  {"ZRT_LAUNCH_STOP_GRACE_S", "number", ZRT_ENV_KNOB, "30",
   "zrt launch",
   "seconds the ranks may take to stop (a checkpoint) after the launcher got SIGTERM/SIGINT"},

  /* ------------------------------------------------------ set by zrt launch */
  {"ZRT_CONFIG_FILE", "path", ZRT_ENV_LAUNCH, "no file: defaults, env overrides and the program",
   "zrt_config_from_env",
   "the config a rank loads (zrt launch writes the merged one into the run folder)"},
  {"ZRT_RUN_DIR", "path", ZRT_ENV_LAUNCH, "not under zrt launch: no records",
   "the per-rank wrapper, the comm watchdog, zrt env",
   "the launch's run folder: rank records (exit, pid) and the watchdog's status lines"},
  {"ZRT_LAUNCH_FIFO", "path", ZRT_ENV_LAUNCH, "no launcher to watch",
   "the per-rank wrapper",
   "a pipe whose only writer is the launcher: its end tells the wrapper the launcher died"},
  {"ZRT_LAUNCH_PID", "text", ZRT_ENV_LAUNCH, "no launcher to check",
   "the per-rank wrapper",
   "pid:start-time of the launcher, to tell a dead launcher from a reused pid"},
  {"ZRT_LAUNCH_BIND", "bool", ZRT_ENV_LAUNCH, "0",
   "the per-rank wrapper",
   "1: bind each rank to its share of the cores (--bind_cores_to_rank)"},
  {"ZRT_LAUNCH_HELPERS", "int", ZRT_ENV_LAUNCH, "0",
   "the per-rank wrapper, zrt env",
   "helper threads per rank the thread plan leaves a core for (the offload copy thread)"},
  {"ZRT_LAUNCH_OMP_USER", "bool", ZRT_ENV_LAUNCH, "unknown",
   "zrt env",
   "1: OMP_NUM_THREADS was the user's; 0: the wrapper set it from the thread plan"},
  {"ZRT_BOUND_CPUS", "text", ZRT_ENV_LAUNCH, "not bound",
   "zrt env",
   "the cpu list the wrapper bound this rank to (--bind_cores_to_rank)"},

  /* --------------------------------------------------------- set by others */
  {"OMPI_COMM_WORLD_SIZE", "int", ZRT_ENV_FOREIGN, "1",
   "engine placement, comm choice, the per-rank wrapper",
   "Open MPI's world size; above 1 MPI starts before the backend (the local rank picks the GPU)"},
  {"WORLD_SIZE", "int", ZRT_ENV_FOREIGN, "1",
   "engine placement, comm choice",
   "world size from torchrun-style launchers (as OMPI_COMM_WORLD_SIZE)"},
  {"PMI_SIZE", "int", ZRT_ENV_FOREIGN, "1",
   "engine placement, comm choice",
   "world size from a PMI launcher (as OMPI_COMM_WORLD_SIZE)"},
  {"PMIX_SIZE", "int", ZRT_ENV_FOREIGN, "1",
   "engine placement, comm choice",
   "world size from a PMIx launcher (as OMPI_COMM_WORLD_SIZE)"},
  {"SLURM_STEP_NUM_TASKS", "int", ZRT_ENV_FOREIGN, "1",
   "engine placement, comm choice",
   "world size of a Slurm job step (srun) (as OMPI_COMM_WORLD_SIZE)"},
  {"OMPI_COMM_WORLD_LOCAL_SIZE", "int", ZRT_ENV_FOREIGN, "the world size",
   "comm choice, CUDA device choice, the per-rank wrapper",
   "Open MPI's ranks on this machine: all of them picks the shm comm (zrt.comm auto)"},
  {"LOCAL_WORLD_SIZE", "int", ZRT_ENV_FOREIGN, "1",
   "CUDA device choice, zrt env",
   "ranks on this machine (torchrun-style; the per-rank wrapper sets it)"},
  {"LOCAL_RANK", "int", ZRT_ENV_FOREIGN, "0",
   "zrt env",
   "this rank's index on its machine (torchrun-style; the per-rank wrapper sets it)"},
  {"OMPI_COMM_WORLD_RANK", "int", ZRT_ENV_FOREIGN, "PMIX_RANK",
   "the per-rank wrapper",
   "Open MPI's rank of this process"},
  {"PMIX_RANK", "int", ZRT_ENV_FOREIGN, "0",
   "the per-rank wrapper",
   "the PMIx rank, when OMPI_COMM_WORLD_RANK is unset"},
  {"OMPI_COMM_WORLD_LOCAL_RANK", "int", ZRT_ENV_FOREIGN, "the rank",
   "the per-rank wrapper",
   "Open MPI's index of this rank on its machine"},
  {"OMPI_MCA_orte_local_daemon_uri", "text", ZRT_ENV_FOREIGN, "the host name alone",
   "the MPI comm's machine map",
   "Open MPI's local daemon: joins the host name in a machine's identity (shm and hier comms)"},
  {"OMP_NUM_THREADS", "int", ZRT_ENV_FOREIGN, "zrt launch's share of the cores",
   "zrt launch's thread plan, zrt env",
   "OpenMP threads per rank; set by the user, zrt launch keeps it (and warns when oversubscribed)"},
  {"OMP_WAIT_POLICY", "text", ZRT_ENV_FOREIGN, "libgomp's default (spin, then sleep)",
   "zrt env",
   "the OpenMP wait policy: the user's, kept by zrt launch (a taken core is handled by "
   "zrt.adaptive_threads, not by the wait policy)"},
  {"GOMP_SPINCOUNT", "int", ZRT_ENV_FOREIGN, "libgomp's",
   "zrt env",
   "libgomp's spin count; the user's, kept by zrt launch"},
  {"HOME", "path", ZRT_ENV_FOREIGN, ". (the working folder)",
   "zrt launch, zrt config, zrt env",
   "home folder: $HOME/.config/zrt holds the default launch config"},
  {"TMPDIR", "path", ZRT_ENV_FOREIGN, "/tmp",
   "zrt launch",
   "where the run folder and a hostfile's copy are made"},
  {"PATH", "text", ZRT_ENV_FOREIGN, "no search",
   "zrt launch",
   "where zrt launch looks for the program to start"},

  /* ------------------------------------------------------------ test hooks */
  {HOOKS, "1", ZRT_ENV_HOOK, "hooks off (any other value is an error)",
   "each engine's creation",
   "the switch of every test hook; on, metrics carry master_sum / master_sqsum (logged as a "
   "warning)"},
  {"ZRT_TEST_GRAD_FACTOR", "number", ZRT_ENV_HOOK, "1",
   "each engine's creation",
   "a deliberately wrong factor on the gradients' unscale (shows a harness catches it)"},
  {"ZRT_INJECT_NONFINITE_GRADS", "text", ZRT_ENV_HOOK, "no injection",
   "each engine's creation",
   "comma-separated 1-based optimizer steps at which the last rank's gradients are made "
   "non-finite"},
  {"ZRT_TEST_TEAM_FLIP", "int", ZRT_ENV_HOOK, "the adaptive policy decides",
   "each engine's creation",
   "steps (1-1000000): the adaptive OpenMP team alternates between its full size and one "
   "thread fewer every this many optimizer steps instead of timing itself (team changes at "
   "known steps, for the bits-unchanged test)"},
  {"ZRT_CKPT_SLOW_US", "int", ZRT_ENV_HOOK, "0",
   "checkpoint writes, once per process",
   "microseconds every streaming checkpoint write sleeps (so a kill lands inside a save)"},
};
/* clang-format on */

#define ZRT_ENV_N (sizeof zrt_env_table / sizeof zrt_env_table[0])

const zrt_env_param *zrt_env_params(size_t *n) {
  *n = ZRT_ENV_N;
  return zrt_env_table;
}

const zrt_env_param *zrt_env_find(const char *name) {
  for (size_t i = 0; name && i < ZRT_ENV_N; i++)
    if (!strcmp(zrt_env_table[i].name, name)) return &zrt_env_table[i];
  return NULL;
}

const char *zrt_env_kind_name(zrt_env_kind kind) {
  switch (kind) {
  case ZRT_ENV_KNOB: return "setting";
  case ZRT_ENV_LAUNCH: return "set by zrt launch";
  case ZRT_ENV_FOREIGN: return "set by others";
  case ZRT_ENV_HOOK: return "test hook";
  }
  return "?";
}

int zrt_env_hooks_on(void) {
  const char *v = getenv(HOOKS);
  return v && !strcmp(v, "1");
}

const char *zrt_env(const char *name) {
  const zrt_env_param *p = zrt_env_find(name);
  if (!p) {
    zrt_log(ZRT_LOG_ERROR,
            "internal: environment variable %s is read but not in the table of base/env.c "
            "(read as unset)",
            name ? name : "(null)");
    return NULL;
  }
  if (p->kind == ZRT_ENV_HOOK && strcmp(p->name, HOOKS) && !zrt_env_hooks_on()) return NULL;
  return getenv(p->name);
}

const char *zrt_env_config(const char *name) { return name ? getenv(name) : NULL; }

zrt_status zrt_env_check(void) {
  const char *on = getenv(HOOKS);
  if (on && *on && strcmp(on, "1"))
    return zrt_error(ZRT_ERR_CONFIG, "%s='%s': expected 1 (or unset)", HOOKS, on);
  if (zrt_env_hooks_on()) return ZRT_OK;
  for (size_t i = 0; i < ZRT_ENV_N; i++) {
    const zrt_env_param *p = &zrt_env_table[i];
    if (p->kind != ZRT_ENV_HOOK || !strcmp(p->name, HOOKS)) continue;
    const char *v = getenv(p->name);
    if (v && *v)
      return zrt_error(ZRT_ERR_CONFIG,
                       "%s is a test hook: set %s=1 with it, or unset it (docs/environment.md)",
                       p->name, HOOKS);
  }
  return ZRT_OK;
}
