/*
 * bench_train_util.c — runs build/bin/train_gpt2 under mpiexec for the
 * training benchmarks and parses what it reports (see bench_train_util.h).
 *
 * Invariants: a run's figures come only from the program's own output (its
 * stdout step lines, the engine's metrics JSONL, the engine's log line);
 * nothing is estimated here. The cache holds every run of this process
 * (a handful) and lives until exit, which is the process' lifetime anyway.
 * Temporary files live in a private mkdtemp directory removed after parsing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_train_util.h"

typedef struct zrt_pt_cached {
  char key[2048];
  zrt_pt_run run;
  struct zrt_pt_cached *next;
} zrt_pt_cached;

static zrt_pt_cached *zrt_pt_cache;

const char *zrt_pt_bindir(void) {
  static char dir[1024];
  if (dir[0]) return dir;
  ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
  if (n <= 0) {
    snprintf(dir, sizeof dir, "build/bin");
    return dir;
  }
  dir[n] = 0;
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  return dir;
}

const char *zrt_pt_offload_name(int offload) {
  return offload == ZRT_PT_OFFLOAD_OPT         ? "optimizer_cpu"
         : offload == ZRT_PT_OFFLOAD_OPT_PARAM ? "optimizer+param_cpu"
                                               : "none";
}

static int zrt_pt_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double zrt_pt_median(const double *v, int n) {
  if (n <= 0) return 0;
  double *c = malloc(sizeof(double) * (size_t)n);
  if (!c) return v[0];
  memcpy(c, v, sizeof(double) * (size_t)n);
  qsort(c, (size_t)n, sizeof(double), zrt_pt_cmp);
  double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
  free(c);
  return m;
}

static int zrt_pt_int_opt(const zrt_perf_args *a, const char *key, int dflt) {
  const char *v = zrt_perf_opt(a, key);
  return v ? atoi(v) : dflt;
}

void zrt_pt_model_from_args(const zrt_perf_args *a, zrt_pt_model *m) {
  memset(m, 0, sizeof *m);
  const char *v = zrt_perf_opt(a, "model");
  snprintf(m->model, sizeof m->model, "%s", v ? v : "tiny");
  m->n_layer = zrt_pt_int_opt(a, "n_layer", 0);
  m->n_head = zrt_pt_int_opt(a, "n_head", 0);
  m->n_embd = zrt_pt_int_opt(a, "n_embd", 0);
  m->seq_len = zrt_pt_int_opt(a, "seq_len", 0);
  m->batch = zrt_pt_int_opt(a, "batch_size", 4);
  m->steps = zrt_pt_int_opt(a, "steps", a->quick ? 4 : 8);
  if (m->steps < 1) m->steps = 1;
  v = zrt_perf_opt(a, "dtype");
  snprintf(m->dtype, sizeof m->dtype, "%s", v ? v : "bf16");
  /* --set k=v[,k=v...]: passed to train_gpt2 as --set k=v each */
  v = zrt_perf_opt(a, "set");
  if (v) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", v);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
      size_t used = strlen(m->extra);
      snprintf(m->extra + used, sizeof m->extra - used, " --set %s", t);
    }
  }
}

void zrt_pt_opts_default(const zrt_perf_args *a, zrt_pt_opts *o) {
  memset(o, 0, sizeof *o);
  o->ranks = zrt_pt_int_opt(a, "ranks", 2);
  if (o->ranks < 1) o->ranks = 1;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  o->threads = zrt_pt_int_opt(a, "threads", (int)(cpus / o->ranks > 0 ? cpus / o->ranks : 1));
  o->stage = 2;
  o->overlap = -1;
}

void zrt_pt_model_json(const zrt_pt_model *m, cJSON *r) {
  cJSON *j = cJSON_AddObjectToObject(r, "model");
  cJSON_AddStringToObject(j, "preset", m->model);
  if (m->n_layer) cJSON_AddNumberToObject(j, "n_layer", m->n_layer);
  if (m->n_head) cJSON_AddNumberToObject(j, "n_head", m->n_head);
  if (m->n_embd) cJSON_AddNumberToObject(j, "n_embd", m->n_embd);
  if (m->seq_len) cJSON_AddNumberToObject(j, "seq_len", m->seq_len);
  cJSON_AddNumberToObject(j, "micro_batch_per_rank", m->batch);
  cJSON_AddStringToObject(j, "dtype", m->dtype);
  cJSON_AddNumberToObject(j, "steps", m->steps);
  if (m->extra[0]) cJSON_AddStringToObject(j, "extra_args", m->extra + 1);
}

/* The arguments that define a run (also the cache key). */
static void zrt_pt_args(const zrt_pt_model *m, const zrt_pt_opts *o, char *buf, size_t len) {
  size_t n = 0;
#define ADD(...) n += (size_t)snprintf(buf + n, n < len ? len - n : 0, __VA_ARGS__)
  ADD(" --model %s --batch_size %d --steps %d", m->model, m->batch, m->steps);
  if (m->n_layer) ADD(" --n_layer %d", m->n_layer);
  if (m->n_head) ADD(" --n_head %d", m->n_head);
  if (m->n_embd) ADD(" --n_embd %d", m->n_embd);
  if (m->seq_len) ADD(" --seq_len %d", m->seq_len);
  if (!strcmp(m->dtype, "bf16"))
    ADD(" --set bf16.enabled=true");
  else if (!strcmp(m->dtype, "fp16"))
    ADD(" --set fp16.enabled=true");
  ADD(" --set zero_optimization.stage=%d", o->stage);
  if (o->offload >= ZRT_PT_OFFLOAD_OPT)
    ADD(" --set zero_optimization.offload_optimizer.device=cpu");
  if (o->offload >= ZRT_PT_OFFLOAD_OPT_PARAM)
    ADD(" --set zero_optimization.offload_param.device=cpu");
  if (o->overlap >= 0)
    ADD(" --set zero_optimization.overlap_comm=%s", o->overlap ? "true" : "false");
  ADD("%s", m->extra);
#undef ADD
}

static char *zrt_pt_slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = malloc((size_t)(n > 0 ? n : 0) + 1);
  if (s) {
    size_t got = fread(s, 1, (size_t)(n > 0 ? n : 0), f);
    s[got] = 0;
  }
  fclose(f);
  return s;
}

static void zrt_pt_tail(const char *s, char *dst, size_t len) {
  size_t n = s ? strlen(s) : 0;
  const char *from = n + 1 > len ? s + n - (len - 1) : s;
  snprintf(dst, len, "%s", from ? from : "");
}

static void zrt_pt_parse_stdout(zrt_pt_run *r, const char *out, int64_t tokens_per_step) {
  double tps[4096];
  int n = 0;
  for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
    const char *p;
    if (!strncmp(l, "step ", 5) && (p = strstr(l, " tok/s ")) && (size_t)(p - l) < 200 && n < 4096)
      tps[n++] = atof(p + 7);
    if (!strncmp(l, "train_gpt2: model", 17) && (p = strstr(l, "M params")) && p - l < 400) {
      const char *q = p;
      while (q > l && q[-1] != ' ' && q[-1] != ':') q--;
      r->params = atof(q) * 1e6;
      if ((p = strstr(l, " GFLOP per rank per step")) && p - l < 500) {
        q = p;
        while (q > l && q[-1] != ' ') q--;
        r->step_gflop = atof(q);
      }
      if ((p = strstr(l, "; backend ")) && p - l < 600) sscanf(p + 10, "%15[a-z0-9]", r->backend);
    }
  }
  if (n > 1)
    r->wall_tok_s = zrt_pt_median(tps + 1, n - 1);
  else if (n == 1)
    r->wall_tok_s = tps[0];
  if (r->wall_tok_s > 0) r->wall_step_s = (double)tokens_per_step / r->wall_tok_s;
}

static void zrt_pt_parse_metrics(zrt_pt_run *r, const char *path) {
  char *all = zrt_pt_slurp(path);
  if (!all) return;
  double st[4096], tk[4096], cb[4096];
  int n = 0;
  for (char *save = NULL, *l = strtok_r(all, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    cJSON *j = cJSON_Parse(l);
    if (!j) continue;
    if (n < 4096) {
      st[n] = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "step_time_s"));
      tk[n] = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "tokens_per_s"));
      cb[n] = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "comm_bytes"));
      n++;
    }
    if (!r->records) r->records = cJSON_CreateArray();
    cJSON_AddItemToArray(r->records, cJSON_Duplicate(j, 1));
    cJSON_Delete(r->last);
    r->last = j;
  }
  free(all);
  r->nsteps = n;
  int k = n > 1 ? 1 : 0; /* the first step carries warm-up */
  r->engine_step_s = zrt_pt_median(st + k, n - k);
  r->engine_tok_s = zrt_pt_median(tk + k, n - k);
  r->comm_bytes = zrt_pt_median(cb + k, n - k);
}

static void zrt_pt_do_run(zrt_pt_run *r, const zrt_pt_model *m, const zrt_pt_opts *o,
                          const char *args) {
  char dir[] = "/tmp/zrt-perf-XXXXXX";
  if (!mkdtemp(dir)) {
    snprintf(r->error, sizeof r->error, "mkdtemp failed");
    return;
  }
  const char *bin = zrt_pt_bindir();
  char data[1200], data_arg[1300] = "";
  struct stat sb;
  snprintf(data, sizeof data, "%s/../data/corpus.txt", bin);
  if (stat(data, &sb) == 0) snprintf(data_arg, sizeof data_arg, " --data %s", data);
  snprintf(
      r->command, sizeof r->command,
      "env OMP_NUM_THREADS=%d mpiexec --oversubscribe --allow-run-as-root --bind-to none -n %d "
      "-x OMP_NUM_THREADS %s/train_gpt2%s%s --metrics %s/metrics.jsonl",
      o->threads, o->ranks, bin, args, data_arg, dir);
  char cmd[3000];
  snprintf(cmd, sizeof cmd, "timeout 900 %s > %s/out.txt 2> %s/err.txt", r->command, dir, dir);
  zrt_perf_note("  train: %s", r->command);
  int rc = system(cmd);
  char path[1100];
  snprintf(path, sizeof path, "%s/out.txt", dir);
  char *out = zrt_pt_slurp(path);
  snprintf(path, sizeof path, "%s/err.txt", dir);
  char *err = zrt_pt_slurp(path);
  int64_t T = m->seq_len;
  if (!T) {
    /* the preset's context: read back from the banner ("seq N") */
    const char *p = out ? strstr(out, ", seq ") : NULL;
    T = p ? atoi(p + 6) : 0;
  }
  zrt_pt_parse_stdout(r, out, (int64_t)m->batch * T * o->ranks);
  const char *b = err ? strstr(err, " padded elements") : NULL;
  if (b) {
    const char *q = b;
    while (q > err && q[-1] >= '0' && q[-1] <= '9') q--;
    r->padded_elements = atof(q);
  }
  snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
  zrt_pt_parse_metrics(r, path);
  if (rc != 0 || r->nsteps == 0) {
    char tail[900];
    zrt_pt_tail(err && *err ? err : out, tail, sizeof tail);
    /* mpiexec's abort banner says nothing: prefer the program's own error line */
    const char *e = err ? strstr(err, "failed: ") : NULL;
    if (!e && err) e = strstr(err, "error");
    if (e) {
      while (e > err && e[-1] != '\n') e--;
      snprintf(tail, sizeof tail, "%.*s", (int)strcspn(e, "\n"), e);
    }
    snprintf(r->error, sizeof r->error, "exit status %d, %d metrics records; stderr tail: %s", rc,
             r->nsteps, tail);
  } else {
    r->ok = 1;
  }
  free(out);
  free(err);
  const char *files[] = {"out.txt", "err.txt", "metrics.jsonl"};
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, files[i]);
    unlink(path);
  }
  rmdir(dir);
}

const zrt_pt_run *zrt_pt_train(const zrt_pt_model *m, const zrt_pt_opts *o) {
  char key[2048];
  zrt_pt_args(m, o, key, sizeof key);
  char full[2100];
  snprintf(full, sizeof full, "n%d t%d%s", o->ranks, o->threads, key);
  for (zrt_pt_cached *c = zrt_pt_cache; c; c = c->next)
    if (!strcmp(c->key, full)) {
      c->run.reused = 1;
      return &c->run;
    }
  static zrt_pt_cached failed; /* when even the cache entry cannot be allocated */
  zrt_pt_cached *c = calloc(1, sizeof *c);
  if (!c) {
    memset(&failed, 0, sizeof failed);
    snprintf(failed.run.error, sizeof failed.run.error, "out of host memory");
    return &failed.run;
  }
  snprintf(c->key, sizeof c->key, "%s", full);
  zrt_pt_do_run(&c->run, m, o, key);
  c->next = zrt_pt_cache;
  zrt_pt_cache = c;
  return &c->run;
}

double zrt_pt_metric_median(const zrt_pt_run *r, const char *key) {
  int n = cJSON_GetArraySize(r->records), k = n > 1 ? 1 : 0, got = 0;
  double *v = n > 0 ? malloc((size_t)n * sizeof *v) : NULL;
  if (!v) return -1;
  for (int i = k; i < n; i++) {
    const cJSON *x = cJSON_GetObjectItem(cJSON_GetArrayItem(r->records, i), key);
    if (cJSON_IsNumber(x)) v[got++] = x->valuedouble;
  }
  double med = got ? zrt_pt_median(v, got) : -1;
  free(v);
  return med;
}

double zrt_pt_metric(const zrt_pt_run *r, const char *key) {
  const cJSON *v = r->last ? cJSON_GetObjectItem(r->last, key) : NULL;
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

cJSON *zrt_pt_run_json(const zrt_pt_run *r) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddBoolToObject(j, "ok", r->ok);
  cJSON_AddStringToObject(j, "command", r->command);
  if (r->reused) cJSON_AddBoolToObject(j, "reused", 1);
  if (!r->ok) {
    cJSON_AddStringToObject(j, "error", r->error);
    return j;
  }
  cJSON_AddNumberToObject(j, "steps_measured", r->nsteps > 1 ? r->nsteps - 1 : r->nsteps);
  cJSON_AddNumberToObject(j, "wall_tokens_per_s", r->wall_tok_s);
  cJSON_AddNumberToObject(j, "wall_step_s", r->wall_step_s);
  cJSON_AddNumberToObject(j, "engine_step_time_s", r->engine_step_s);
  cJSON_AddNumberToObject(j, "engine_tokens_per_s", r->engine_tok_s);
  cJSON_AddNumberToObject(j, "comm_bytes_rank0", r->comm_bytes);
  if (r->padded_elements > 0) cJSON_AddNumberToObject(j, "padded_elements", r->padded_elements);
  if (r->params > 0) cJSON_AddNumberToObject(j, "params_approx", r->params);
  if (r->step_gflop > 0) cJSON_AddNumberToObject(j, "gflop_per_rank_per_step", r->step_gflop);
  const char *keys[] = {"device_peak_bytes", "host_pinned_peak_bytes",
                        "params16",          "grads",
                        "master32",          "optim_state",
                        "activations",       "comm"};
  cJSON *pk = cJSON_AddObjectToObject(j, "peak_bytes");
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    double v = zrt_pt_metric(r, keys[i]);
    if (v >= 0) cJSON_AddNumberToObject(pk, keys[i], v);
  }
  return j;
}
