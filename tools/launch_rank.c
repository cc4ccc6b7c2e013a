/*
 * launch_rank.c — the hidden per-rank wrapper of `zrt launch`
 * (`zrt launch __rank PROGRAM ARGS...`, started by mpiexec once per rank).
 *
 * It turns Open MPI's OMPI_COMM_WORLD_* variables into the RANK /
 * LOCAL_RANK / WORLD_SIZE / LOCAL_WORLD_SIZE every training program
 * expects, optionally binds the program to its share of the machine's
 * cores and their NUMA node (else sets OMP_NUM_THREADS to that share when
 * the user set none: the thread plan, launch_threads.c), fork/execs the
 * program, forwards termination
 * signals to it, and writes how it ended to $ZRT_RUN_DIR/rank<R>.exit
 * before ending the same way (same exit status, or the same signal).
 *
 * The wrapper never outlives the launcher: it watches the launcher's pipe
 * ($ZRT_LAUNCH_FIFO, whose only writer is the launcher) and when that
 * closes — the launcher died, however it died — it ends the program
 * (SIGTERM, SIGKILL after $ZRT_LAUNCH_GRACE_S) and exits. A wrapper that
 * opens the pipe after the launcher is gone would see no hang-up, so it
 * checks the launcher's pid and start time ($ZRT_LAUNCH_PID) once opened.
 *
 * Invariants: the program never outlives the wrapper (PR_SET_PDEATHSIG,
 * so a SIGKILL of the wrapper by mpiexec or the launcher reaches it); the
 * exit record is written atomically (temporary file + rename) so the
 * launcher never reads half a record; the wrapper itself stays
 * single-threaded so the death signal fires on the right thread's exit.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <numa.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "env.h"
#include "internal.h"
#include "launch_threads.h"
#include "launch_util.h"

static volatile sig_atomic_t cli_rank_child = 0;

static void cli_rank_forward(int sig) {
  if (cli_rank_child > 0) kill(cli_rank_child, sig);
}

static int cli_env_int(const char *name, int dflt) {
  const char *s = zrt_env(name);
  if (!s || !*s) return dflt;
  char *end;
  long v = strtol(s, &end, 10);
  return *end ? dflt : (int)v;
}

static void cli_setenv_int(const char *name, int v) {
  char b[32];
  snprintf(b, sizeof b, "%d", v);
  setenv(name, b, 1);
}

/* Opens the launcher's pipe for watching; -1 when there is none (the
 * launcher is on another machine, or this wrapper was started by hand).
 * *gone is set when the launcher has already died. */
static int cli_launcher_watch(int *gone) {
  *gone = 0;
  const char *fifo = zrt_env("ZRT_LAUNCH_FIFO");
  if (!fifo || !*fifo) return -1;
  int fd = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat sb;
  if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISFIFO(sb.st_mode)) {
    if (fd >= 0) close(fd);
    return -1;
  }
  const char *lp = zrt_env("ZRT_LAUNCH_PID");
  int pid = 0;
  unsigned long long start = 0;
  if (lp && sscanf(lp, "%d:%llu", &pid, &start) == 2 && pid > 0 && cli_proc_start(pid) != start)
    *gone = 1;
  return fd;
}

static double cli_mono_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cli_wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_rank_main(int argc, char **argv) {
  /* argv[0] = "__rank", argv[1..] = program and args */
  if (argc < 2) {
    fprintf(stderr, "zrt launch __rank: no program given (this is the internal per-rank "
                    "wrapper that `zrt launch` starts under mpiexec)\n");
    return 2;
  }
  int rank = cli_env_int("OMPI_COMM_WORLD_RANK", cli_env_int("PMIX_RANK", 0));
  int world = cli_env_int("OMPI_COMM_WORLD_SIZE", 1);
  int lrank = cli_env_int("OMPI_COMM_WORLD_LOCAL_RANK", rank);
  int lworld = cli_env_int("OMPI_COMM_WORLD_LOCAL_SIZE", world);
  cli_setenv_int("RANK", rank);
  cli_setenv_int("WORLD_SIZE", world);
  cli_setenv_int("LOCAL_RANK", lrank);
  cli_setenv_int("LOCAL_WORLD_SIZE", lworld);
  if (lworld > 0) {
    /* machines are filled with the same number of ranks (ppr mapping) */
    cli_setenv_int("NODE_RANK", rank / lworld);
    cli_setenv_int("GROUP_RANK", rank / lworld);
  }
  zrt_log_set_rank(rank);

  const char *rundir = zrt_env("ZRT_RUN_DIR");
  if (rundir && *rundir) mkdir(rundir, 0700); /* other machines have no run dir yet */

  /* Binding: computed from the wrapper's own affinity, which mpiexec
   * (--bind-to none) inherited from the launcher on this machine. */
  int bind = cli_env_int("ZRT_LAUNCH_BIND", 0);
  cpu_set_t avail, mine;
  int ncores = 0, node = -1;
  char cpus[1024] = "all";
  if (bind) {
    if (sched_getaffinity(0, sizeof avail, &avail) != 0) {
      fprintf(stderr, "zrt launch: rank %d: sched_getaffinity failed: %s\n", rank, strerror(errno));
      return 1;
    }
    int navail = CPU_COUNT(&avail);
    ncores = cli_split_cores(&avail, lrank, lworld, &mine);
    node = cli_numa_node_of(&mine);
    cli_cpulist(&mine, cpus, sizeof cpus);
    cli_setenv_int("OMP_NUM_THREADS", ncores);
    setenv("ZRT_BOUND_CPUS", cpus, 1);
    if (navail < lworld)
      zrt_log(ZRT_LOG_WARN,
              "launch: %d local ranks share %d cores; each rank is bound to one shared core",
              lworld, navail);
  }
  cli_thread_plan plan;
  if (!bind) cli_thread_plan_apply(lrank, lworld, &plan); /* OpenMP threads: the rank's share */
  char host[256] = "?";
  gethostname(host, sizeof host);
  if (bind)
    zrt_log(ZRT_LOG_INFO,
            "launch: rank %d/%d (local %d/%d) on %s: bound to cores %s (%d), numa node %d, "
            "OMP_NUM_THREADS=%d: %s",
            rank, world, lrank, lworld, host, cpus, ncores, node, ncores, argv[1]);
  else
    zrt_log(ZRT_LOG_INFO,
            "launch: rank %d/%d (local %d/%d) on %s: not bound, OMP_NUM_THREADS=%d (%s): %s", rank,
            world, lrank, lworld, host, plan.threads,
            plan.source == CLI_THREADS_USER ? "set by the user" : "cores / local ranks", argv[1]);

  /* Block the forwarded signals across fork so none is lost between fork
   * and the handler seeing the child's pid. */
  static const int fwd[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT};
  sigset_t block, old;
  sigemptyset(&block);
  for (size_t i = 0; i < sizeof fwd / sizeof fwd[0]; i++) sigaddset(&block, fwd[i]);
  sigprocmask(SIG_BLOCK, &block, &old);
  fflush(stdout);
  fflush(stderr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "zrt launch: rank %d: fork failed: %s\n", rank, strerror(errno));
    return 1;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(137); /* wrapper already gone */
    for (size_t i = 0; i < sizeof fwd / sizeof fwd[0]; i++) signal(fwd[i], SIG_DFL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (bind) {
      if (sched_setaffinity(0, sizeof mine, &mine) != 0)
        fprintf(stderr, "zrt launch: rank %d: cannot bind to cores %s: %s\n", rank, cpus,
                strerror(errno));
      if (node >= 0) {
        struct bitmask *bm = numa_allocate_nodemask();
        numa_bitmask_setbit(bm, (unsigned)node);
        numa_set_membind(bm); /* memory policy survives execve */
        numa_free_nodemask(bm);
      }
    }
    execvp(argv[1], argv + 1);
    int e = errno;
    fprintf(stderr, "zrt launch: rank %d: cannot run '%s': %s%s\n", rank, argv[1], strerror(e),
            e == ENOENT ? " (not a file and not in PATH)" : "");
    _exit(e == ENOENT ? 127 : 126);
  }
  cli_rank_child = pid;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = cli_rank_forward;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof fwd / sizeof fwd[0]; i++) sigaction(fwd[i], &sa, NULL);
  sigprocmask(SIG_SETMASK, &old, NULL);

  char rec[512];
  if (rundir && *rundir) {
    snprintf(rec, sizeof rec,
             "{\"rank\":%d,\"host\":\"%s\",\"wrapper_pid\":%d,\"wrapper_start\":%llu,"
             "\"pid\":%d,\"start\":%llu}\n",
             rank, host, (int)parent, cli_proc_start(parent), (int)pid, cli_proc_start(pid));
    char name[64];
    snprintf(name, sizeof name, "rank%d.pid", rank);
    cli_write_atomic(rundir, name, rec);
  }

  int status = 0, launcher_gone = 0;
  int watch = cli_launcher_watch(&launcher_gone);
  double grace = 3.0, t_term = -1;
  const char *gs = zrt_env("ZRT_LAUNCH_GRACE_S");
  if (gs && *gs) grace = atof(gs);
  for (;;) {
    int blocking = watch < 0 && !launcher_gone;
    pid_t w = waitpid(pid, &status, blocking ? 0 : WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      fprintf(stderr, "zrt launch: rank %d: waitpid failed: %s\n", rank, strerror(errno));
      return 1;
    }
    if (w != 0) continue;
    if (!launcher_gone) {
      struct pollfd pf = {.fd = watch, .events = POLLIN};
      if (poll(&pf, 1, 200) > 0) {
        char junk[64];
        if (pf.revents & (POLLHUP | POLLERR))
          launcher_gone = 1;
        else if (pf.revents & POLLIN && read(watch, junk, sizeof junk) == 0)
          launcher_gone = 1;
      }
      if (!launcher_gone) continue;
    }
    if (watch >= 0) {
      close(watch);
      watch = -1;
    }
    if (t_term < 0) {
      fprintf(stderr,
              "zrt launch: rank %d: the launcher (zrt launch) is gone; ending the program "
              "(SIGTERM, SIGKILL after %g s)\n",
              rank, grace);
      kill(pid, SIGTERM);
      t_term = cli_mono_now();
    } else if (cli_mono_now() - t_term >= grace) {
      kill(pid, SIGKILL);
    }
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (watch >= 0) close(watch);
  cli_rank_child = 0;
  char sname[32];
  if (WIFSIGNALED(status))
    snprintf(rec, sizeof rec,
             "{\"rank\":%d,\"local_rank\":%d,\"host\":\"%s\",\"pid\":%d,\"signal\":%d,"
             "\"signal_name\":\"%s\",\"time\":%.6f}\n",
             rank, lrank, host, (int)pid, WTERMSIG(status),
             cli_signame(WTERMSIG(status), sname, sizeof sname), cli_wall_now());
  else
    snprintf(rec, sizeof rec,
             "{\"rank\":%d,\"local_rank\":%d,\"host\":\"%s\",\"pid\":%d,\"exit_code\":%d,"
             "\"time\":%.6f}\n",
             rank, lrank, host, (int)pid, WEXITSTATUS(status), cli_wall_now());
  if (rundir && *rundir) {
    char name[64];
    snprintf(name, sizeof name, "rank%d.exit", rank);
    cli_write_atomic(rundir, name, rec);
  }
  fflush(stdout);
  fflush(stderr);
  if (WIFSIGNALED(status)) {
    /* End the same way so mpiexec reports the signal too. */
    int sig = WTERMSIG(status);
    signal(sig, SIG_DFL);
    sigset_t un;
    sigemptyset(&un);
    sigaddset(&un, sig);
    sigprocmask(SIG_UNBLOCK, &un, NULL);
    prctl(PR_SET_DUMPABLE, 0); /* the program already dumped core if it was going to */
    raise(sig);
    return 128 + sig;
  }
  return WEXITSTATUS(status);
}
