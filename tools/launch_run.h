/*
 * launch_run.h — the launcher's run directory: the exit records the rank
 * wrappers write there (rank<R>.exit, rank<R>.pid), signals to the ranks it
 * recorded, the watchdog's status files, the end-of-job report, and
 * removing what zrt wrote there. Used by `zrt launch` (cmd_launch.c).
 */
#ifndef ZRT_LAUNCH_RUN_H
#define ZRT_LAUNCH_RUN_H

#include <limits.h>

#define CLI_MAX_RANKS 4096

typedef struct cli_exit_rec {
  int have;
  int code; /* exit code, or -1 when killed */
  int sig;
  double time;
  char host[128];
  int forwarded; /* the launcher's interrupt was passed to this rank's wrapper */
  int lost;      /* scans that found the wrapper gone without a record */
} cli_exit_rec;

typedef struct cli_run {
  char dir[PATH_MAX];
  int nranks;
  cli_exit_rec *rec;
  int first_fail; /* rank of the first failure by time, -1 none */
  int stopped;    /* after an interrupt, every rank ended the same way */
} cli_run;

/* The whole of a small file, malloc'd and NUL-terminated, or NULL. */
char *cli_slurp(const char *path);
/* Reads the exit records that appeared since the last call; returns 1 when
 * a rank failed (first_fail set) in this call. */
int cli_scan_exits(cli_run *run);
/* Sends sig to every rank pid recorded in the run directory (0: probe). */
void cli_kill_recorded(const cli_run *run, int sig);
/* 1 when a recorded wrapper is gone without an exit record (two scans). */
int cli_scan_lost(cli_run *run);
/* Passes sig once to each rank wrapper recorded so far and not yet told. */
void cli_forward_recorded(cli_run *run, int sig);
/* 1 while some recorded rank pid is still alive. */
int cli_any_recorded_alive(const cli_run *run);
/* Prints the comm watchdog's rank<R>.status files and the rank behind. */
void cli_report_status(const cli_run *run);
/* Removes what zrt wrote in dir, then dir itself if it is empty. */
void cli_remove_run_dir(const char *dir);

/* How the job ended, as the launcher saw it. */
typedef struct cli_job_end {
  int user_sig;       /* the signal the user sent the launcher (0: none) */
  double t_user_wall; /* when it came (wall clock, as the exit records) */
  int mp_status;      /* mpiexec's wait status */
  double grace;       /* ZRT_LAUNCH_GRACE_S */
  double stop_grace;  /* ZRT_LAUNCH_STOP_GRACE_S */
  int remote;         /* ranks on other machines (a hostfile or hosts) */
} cli_job_end;
/* Prints the report (the first failed rank and how, the others, the
 * watchdog's status, mpiexec's own failure) and returns the launcher's exit
 * status: the failing rank's; after an interrupt, the ranks' common status
 * (75 when every rank saved and exited 75), else 128 + the signal. */
int cli_report_end(cli_run *run, const cli_job_end *end);

#endif
