/*
 * launch_run.c — the launcher's run directory (launch_run.h): exit records,
 * recorded pids, the watchdog's status files, the end-of-job report.
 */
#define _GNU_SOURCE
#include "launch_run.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launch_noise.h"
#include "launch_util.h"

char *cli_slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap = cap ? 2 * cap : 8192;
      char *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = nb;
    }
    size_t n = fread(buf + len, 1, 4096, f);
    len += n;
    if (n == 0) break;
  }
  fclose(f);
  buf[len] = '\0';
  return buf;
}

static int cli_json_int(const cJSON *o, const char *name, int dflt) {
  const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, name);
  return cJSON_IsNumber(it) ? it->valueint : dflt;
}

/* The JSON record run->dir/rank<r>.<ext> (exit, pid) a rank's wrapper
 * wrote, or NULL while it is absent or incomplete. */
static cJSON *cli_rank_record(const cli_run *run, int r, const char *ext) {
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/rank%d.%s", run->dir, r, ext);
  char *txt = cli_slurp(path);
  if (!txt) return NULL;
  cJSON *j = cJSON_Parse(txt);
  free(txt);
  return j;
}

/* Reads the rank<R>.exit records that appeared; returns 1 when a new
 * failure was seen. */
int cli_scan_exits(cli_run *run) {
  int newfail = 0;
  for (int r = 0; r < run->nranks; r++) {
    if (run->rec[r].have) continue;
    cJSON *j = cli_rank_record(run, r, "exit");
    if (!j) continue;
    cli_exit_rec *e = &run->rec[r];
    e->have = 1;
    e->sig = cli_json_int(j, "signal", 0);
    e->code = e->sig ? -1 : cli_json_int(j, "exit_code", 0);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "time");
    e->time = cJSON_IsNumber(t) ? t->valuedouble : 0;
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(j, "host");
    snprintf(e->host, sizeof e->host, "%s", cJSON_IsString(h) ? h->valuestring : "?");
    cJSON_Delete(j);
    if (e->sig || e->code) {
      newfail = 1;
      if (run->first_fail < 0 || e->time < run->rec[run->first_fail].time) run->first_fail = r;
    }
  }
  return newfail;
}

/* Sends `sig` (0: none) to every rank process recorded in rank<R>.pid
 * whose start time still matches (wrappers and programs) and returns how
 * many of them are still there. The wrapper counts: it writes the exit
 * record after reaping the program, so a program that is gone does not
 * mean its record is written. */
static int cli_signal_recorded(const cli_run *run, int sig) {
  int alive = 0;
  for (int r = 0; r < run->nranks; r++) {
    cJSON *j = cli_rank_record(run, r, "pid");
    if (!j) continue;
    static const char *const pf[2][2] = {{"pid", "start"}, {"wrapper_pid", "wrapper_start"}};
    for (int k = 0; k < 2; k++) {
      const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, pf[k][0]);
      const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, pf[k][1]);
      if (!cJSON_IsNumber(p) || !cJSON_IsNumber(s) || p->valueint <= 1) continue;
      pid_t pid = (pid_t)p->valueint;
      unsigned long long st = cli_proc_start(pid);
      if (!st || (double)st != s->valuedouble) continue;
      alive++;
      if (sig) kill(pid, sig);
    }
    cJSON_Delete(j);
  }
  return alive;
}

void cli_kill_recorded(const cli_run *run, int sig) { (void)cli_signal_recorded(run, sig); }

/* Sends sig once to each rank wrapper recorded since the last call (the
 * wrapper passes it to its program: one signal per program, as a user's
 * kill of the program itself would be). Wrappers whose record is not
 * written yet get it on a later call. */
void cli_forward_recorded(cli_run *run, int sig) {
  for (int r = 0; r < run->nranks; r++) {
    if (run->rec[r].forwarded) continue;
    cJSON *j = cli_rank_record(run, r, "pid");
    if (!j) continue;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "wrapper_pid");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "wrapper_start");
    if (cJSON_IsNumber(p) && cJSON_IsNumber(st) && p->valueint > 1) {
      pid_t pid = (pid_t)p->valueint;
      if ((double)cli_proc_start(pid) == st->valuedouble) kill(pid, sig);
      run->rec[r].forwarded = 1; /* gone already: nothing left to tell */
    }
    cJSON_Delete(j);
  }
}

/* 1 when a rank's wrapper recorded its pid and is gone without writing an
 * exit record (SIGKILLed: its program went with it), checked twice a tick
 * apart so a record written just before the wrapper's exit is not missed.
 * With mpiexec's own abort off, this is how the launcher sees such a rank
 * end. */
int cli_scan_lost(cli_run *run) {
  for (int r = 0; r < run->nranks; r++) {
    cli_exit_rec *e = &run->rec[r];
    if (e->have || e->lost > 1) continue;
    cJSON *j = cli_rank_record(run, r, "pid");
    if (!j) continue;
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "wrapper_pid");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "wrapper_start");
    int gone = cJSON_IsNumber(p) && cJSON_IsNumber(st) &&
               (double)cli_proc_start((pid_t)p->valueint) != st->valuedouble;
    cJSON_Delete(j);
    if (gone && ++e->lost > 1) return 1;
  }
  return 0;
}

/* How the ranks ended after an interrupt: 1 with *status the launcher's
 * exit status when every rank's record is there and all say the same (exit
 * code, or 128 + signal), else 0. */
static int cli_common_end(const cli_run *run, int *status) {
  int have = 0, st = -1;
  for (int r = 0; r < run->nranks; r++) {
    const cli_exit_rec *e = &run->rec[r];
    if (!e->have) return 0;
    int s = e->sig ? 128 + e->sig : e->code;
    if (have && s != st) return 0;
    st = s;
    have = 1;
  }
  if (!have) return 0;
  *status = st;
  return 1;
}

int cli_any_recorded_alive(const cli_run *run) { return cli_signal_recorded(run, 0) > 0; }

/* Prints the comm watchdog's rank<R>.status files (format: comm/comm.h)
 * and which rank is behind: a rank that wrote none never timed out in a
 * wait, so it never reached the collective the others wait in; otherwise
 * the lowest last_completed_seq. */
void cli_report_status(const cli_run *run) {
  long long lowest = -1, highest = -1;
  int behind = -1, n = 0;
  char missing[512] = "";
  size_t mo = 0;
  int nmissing = 0;
  for (int r = 0; r < run->nranks; r++) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/rank%d.status", run->dir, r);
    char *txt = cli_slurp(path);
    if (!txt) {
      if (mo + 16 < sizeof missing)
        mo += (size_t)snprintf(missing + mo, sizeof missing - mo, "%s%d", nmissing ? ", " : "", r);
      nmissing++;
      continue;
    }
    cJSON *j = cJSON_Parse(txt);
    if (!j) {
      fprintf(stderr, "zrt launch: rank %d status (unparsed): %s\n", r, txt);
      free(txt);
      continue;
    }
    free(txt);
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(j, "last_completed_seq");
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(j, "last_op");
    const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(j, "last_bytes");
    const cJSON *wseq = cJSON_GetObjectItemCaseSensitive(j, "waiting_seq");
    const cJSON *wop = cJSON_GetObjectItemCaseSensitive(j, "waiting_op");
    long long s = cJSON_IsNumber(seq) ? (long long)seq->valuedouble : -1;
    if (s > 0)
      fprintf(stderr,
              "zrt launch: rank %d watchdog: last completed collective #%lld %s (%lld bytes)", r, s,
              cJSON_IsString(op) ? op->valuestring : "?",
              cJSON_IsNumber(bytes) ? (long long)bytes->valuedouble : -1);
    else
      fprintf(stderr, "zrt launch: rank %d watchdog: no collective completed", r);
    if (cJSON_IsNumber(wseq))
      fprintf(stderr, "; timed out waiting in #%lld %s", (long long)wseq->valuedouble,
              cJSON_IsString(wop) ? wop->valuestring : "?");
    fprintf(stderr, "\n");
    cJSON_Delete(j);
    if (s >= 0) {
      if (lowest < 0 || s < lowest) {
        lowest = s;
        behind = r;
      }
      if (s > highest) highest = s;
      n++;
    }
  }
  if (n == 0) return;
  if (nmissing)
    fprintf(stderr,
            "zrt launch: rank%s %s wrote no watchdog status: %s never reached the collective "
            "the others waited in (stuck in compute, or dead) — behind\n",
            nmissing > 1 ? "s" : "", missing, nmissing > 1 ? "they" : "it");
  else if (lowest != highest)
    fprintf(stderr, "zrt launch: rank %d is behind (lowest last_completed_seq %lld)\n", behind,
            lowest);
  else
    fprintf(stderr, "zrt launch: every rank completed collective #%lld and timed out in the next\n",
            lowest);
}

void cli_remove_run_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    const char *n = e->d_name;
    if (!strcmp(n, ".") || !strcmp(n, "..")) continue;
    /* only what zrt itself writes there; anything else keeps the directory */
    if (!strcmp(n, "config.json") || !strcmp(n, CLI_LAUNCH_FIFO) || !strncmp(n, "rank", 4) ||
        !strncmp(n, ".rank", 5) || !strcmp(n, ZRT_NOISE_FILE)) {
      char p[PATH_MAX + 256];
      snprintf(p, sizeof p, "%s/%s", dir, n);
      unlink(p);
    }
  }
  closedir(d);
  rmdir(dir);
}

int cli_report_end(cli_run *run, const cli_job_end *end) {
  int user_sig = end->user_sig, mp_status = end->mp_status;
  double t_user_wall = end->t_user_wall, grace = end->grace;
  int ret = 0;
  char sn[32];
  /* Ranks that ended after the interrupt ended because of it: not failures. */
  if (user_sig && run->first_fail >= 0 && run->rec[run->first_fail].time >= t_user_wall)
    run->first_fail = -1;
  if (run->first_fail >= 0) {
    const cli_exit_rec *e = &run->rec[run->first_fail];
    if (e->sig) {
      fprintf(stderr, "zrt launch: rank %d was killed by signal %d (%s)\n", run->first_fail, e->sig,
              cli_signame(e->sig, sn, sizeof sn));
      ret = 128 + e->sig;
    } else {
      fprintf(stderr, "zrt launch: rank %d exited with status %d\n", run->first_fail, e->code);
      ret = e->code;
    }
    for (int r = 0; r < run->nranks; r++) {
      const cli_exit_rec *o = &run->rec[r];
      if (r != run->first_fail && !o->have && !user_sig) {
        char pp[PATH_MAX + 32];
        snprintf(pp, sizeof pp, "%s/rank%d.pid", run->dir, r);
        if (access(pp, F_OK) == 0)
          fprintf(stderr,
                  "zrt launch:   then rank %d ended without an exit record (its wrapper was "
                  "killed before it could write one, e.g. by mpiexec's abort or when the %g s "
                  "grace ran out)\n",
                  r, grace);
        else if (!end->remote) /* other machines' ranks write their own run dirs */
          fprintf(stderr, "zrt launch:   rank %d never started (no %s)\n", r, pp);
      }
      if (r == run->first_fail || !o->have || (!o->sig && !o->code)) continue;
      if (user_sig && o->time >= t_user_wall) continue;
      if (o->sig)
        fprintf(stderr, "zrt launch:   then rank %d was killed by signal %d (%s)\n", r, o->sig,
                cli_signame(o->sig, sn, sizeof sn));
      else
        fprintf(stderr, "zrt launch:   then rank %d exited with status %d\n", r, o->code);
    }
    cli_report_status(run);
    int ms = WIFSIGNALED(mp_status) ? WTERMSIG(mp_status) : 0;
    if (ms && ms != SIGTERM && ms != SIGKILL && ms != SIGINT && ms != SIGHUP)
      /* not a signal the launcher sends: mpiexec crashed while aborting */
      fprintf(stderr,
              "zrt launch: note: mpiexec itself then died of %s while ending the job (Open MPI "
              "4.1.x can crash in PMIx_Finalize there; its own output is in %s/%s); the ranks' "
              "ends above are what the rank wrappers recorded, and none is left running\n",
              cli_signame(ms, sn, sizeof sn), run->dir, ZRT_NOISE_FILE);
  }
  if (user_sig) {
    int nended = 0, common = 0;
    for (int r = 0; r < run->nranks; r++) nended += run->rec[r].have;
    fprintf(stderr, "zrt launch: interrupted by %s; all ranks ended (%d of %d reported)\n",
            cli_signame(user_sig, sn, sizeof sn), nended, run->nranks);
    if (run->first_fail < 0) cli_report_status(run);
    if (cli_common_end(run, &common)) {
      /* the ranks' own answer to the signal: 75 when they saved and asked
       * to be run again (a requeue wrapper's cue), 143 when it killed them */
      if (run->rec[0].sig)
        fprintf(stderr, "zrt launch: every rank was killed by signal %d (%s); exiting with %d\n",
                run->rec[0].sig, cli_signame(run->rec[0].sig, sn, sizeof sn), common);
      else
        fprintf(stderr, "zrt launch: every rank exited with status %d; exiting with it\n", common);
      ret = common;
      run->stopped = 1;
    } else {
      /* no single answer: say how each ended; the interrupt is the status */
      for (int r = 0; r < run->nranks; r++) {
        const cli_exit_rec *o = &run->rec[r];
        if (!o->have)
          fprintf(stderr, "zrt launch:   rank %d: no exit record\n", r);
        else if (o->sig)
          fprintf(stderr, "zrt launch:   rank %d: killed by signal %d (%s)\n", r, o->sig,
                  cli_signame(o->sig, sn, sizeof sn));
        else
          fprintf(stderr, "zrt launch:   rank %d: exited with status %d\n", r, o->code);
      }
      fprintf(stderr, "zrt launch: the ranks ended differently; exiting with %d (128 + %s)\n",
              128 + user_sig, cli_signame(user_sig, sn, sizeof sn));
      ret = 128 + user_sig;
    }
  } else if (run->first_fail < 0) {
    /* no rank failed: mpiexec's own words are the story */
    if (WIFSIGNALED(mp_status) || WEXITSTATUS(mp_status) != 0)
      zrt_launch_noise_show(run->dir, stderr);
    if (WIFSIGNALED(mp_status)) {
      fprintf(stderr, "zrt launch: mpiexec was killed by signal %d (%s)\n", WTERMSIG(mp_status),
              cli_signame(WTERMSIG(mp_status), sn, sizeof sn));
      ret = 128 + WTERMSIG(mp_status);
    } else if (WEXITSTATUS(mp_status) != 0) {
      int nrec = 0;
      for (int r = 0; r < run->nranks; r++) nrec += run->rec[r].have;
      fprintf(stderr, "zrt launch: mpiexec exited with status %d%s\n", WEXITSTATUS(mp_status),
              nrec ? "" : " before any rank ended (see its message above)");
      cli_report_status(run);
      ret = WEXITSTATUS(mp_status);
    }
  }
  return ret;
}
