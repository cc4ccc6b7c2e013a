/*
 * cmd_config.c — `zrt config`: the interactive questionnaire that writes an
 * accelerate-style launch YAML (distributed_type: DEEPSPEED plus a
 * deepspeed_config: section), `--defaults`, and the `check`, `explain` and
 * `reference` subcommands.
 *
 * Every question is a schema key (DESIGN.md rule 7): its type, choices,
 * range, default and doc line come from zrt_config_schema_key, and an
 * answer is accepted only when zrt_config_set accepts it, so the
 * questionnaire can never write a value the loader would reject. The file is
 * written only after every question was answered and the text read back
 * through zrt_config_load_file (temporary file + rename): EOF in the middle
 * or an invalid result writes nothing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "backend.h"
#include "config.h"
#include "internal.h"
#include "launch_util.h"
#include "tools.h"
#include "zrt.h"

/* ------------------------------------------------------ questionnaire */

typedef struct cli_question {
  const char *yaml;   /* key as written in the launch YAML ("deepspeed_config.zero_stage") */
  const char *prompt; /* the question */
  const char *dflt;   /* questionnaire default when the schema's is auto/empty, else NULL */
  int when;           /* CLI_Q_* condition on earlier answers */
} cli_question;

enum {
  CLI_Q_ALWAYS = 0,
  CLI_Q_MULTI,     /* num_machines > 1 */
  CLI_Q_OPT_NVME,  /* offload_optimizer_device == nvme */
  CLI_Q_STAGE3,    /* zero_stage == 3 */
  CLI_Q_PARAM_NVME /* stage 3 and offload_param_device == nvme */
};

static const cli_question cli_questions[] = {
    {"compute_environment", "In which compute environment are you running?", NULL, CLI_Q_ALWAYS},
    {"use_cpu", "Run on the CPU only, even when a GPU is present?", NULL, CLI_Q_ALWAYS},
    {"num_machines", "How many machines will you use?", NULL, CLI_Q_ALWAYS},
    {"machine_rank", "What is the rank of this machine?", NULL, CLI_Q_MULTI},
    {"main_process_ip", "What is the IP address of the machine that will host the main process?",
     NULL, CLI_Q_MULTI},
    {"main_process_port", "What is the port of the main process?", NULL, CLI_Q_MULTI},
    {"hostfile", "Hostfile naming the machines for mpiexec ('host slots=N' lines)?", NULL,
     CLI_Q_MULTI},
    {"num_processes", "How many processes in total (over all machines)?", NULL, CLI_Q_ALWAYS},
    {"mixed_precision", "Do you wish to use mixed precision?", NULL, CLI_Q_ALWAYS},
    {"deepspeed_config.zero_stage", "What should be your DeepSpeed's ZeRO optimization stage?", "2",
     CLI_Q_ALWAYS},
    {"deepspeed_config.offload_optimizer_device", "Where to offload optimizer states?", NULL,
     CLI_Q_ALWAYS},
    {"deepspeed_config.offload_optimizer_nvme_path", "Nvme path for the optimizer states?",
     "/local_nvme", CLI_Q_OPT_NVME},
    {"deepspeed_config.offload_param_device", "Where to offload parameters?", NULL, CLI_Q_STAGE3},
    {"deepspeed_config.offload_param_nvme_path", "Nvme path for the parameters?", "/local_nvme",
     CLI_Q_PARAM_NVME},
    {"deepspeed_config.gradient_accumulation_steps", "How many gradient accumulation steps?", "1",
     CLI_Q_ALWAYS},
    {"deepspeed_config.gradient_clipping", "Gradient clipping value (0 = off)?", "1.0",
     CLI_Q_ALWAYS},
};
#define CLI_NQ (sizeof cli_questions / sizeof cli_questions[0])

typedef struct cli_answers {
  char val[CLI_NQ][ZRT_CFG_STR];
  int asked[CLI_NQ];
} cli_answers;

static const char *cli_answer(const cli_answers *ans, const char *yaml) {
  for (size_t i = 0; i < CLI_NQ; i++)
    if (!strcmp(cli_questions[i].yaml, yaml)) return ans->asked[i] ? ans->val[i] : NULL;
  return NULL;
}

static int cli_q_applies(const cli_question *q, const cli_answers *ans) {
  const char *s;
  switch (q->when) {
  case CLI_Q_MULTI: return (s = cli_answer(ans, "num_machines")) && atoi(s) > 1;
  case CLI_Q_OPT_NVME:
    return (s = cli_answer(ans, "deepspeed_config.offload_optimizer_device")) && !strcmp(s, "nvme");
  case CLI_Q_STAGE3: return (s = cli_answer(ans, "deepspeed_config.zero_stage")) && !strcmp(s, "3");
  case CLI_Q_PARAM_NVME:
    return (s = cli_answer(ans, "deepspeed_config.zero_stage")) && !strcmp(s, "3") &&
           (s = cli_answer(ans, "deepspeed_config.offload_param_device")) && !strcmp(s, "nvme");
  default: return 1;
  }
}

static const zrt_cfg_key *cli_q_key(const cli_question *q, const char **path) {
  const char *p = zrt_config_canonical_key(q->yaml);
  if (!p) p = q->yaml;
  long i = zrt_config_schema_find(p);
  *path = p;
  return i < 0 ? NULL : zrt_config_schema_key((size_t)i);
}

/* Normalises an answer to the schema's text form (yes -> true, enum case). */
static void cli_normalise(const zrt_cfg_key *k, const char *in, char *out, size_t len) {
  snprintf(out, len, "%s", in);
  if (k->type == ZRT_CFGT_BOOL) {
    if (!strcasecmp(in, "y") || !strcasecmp(in, "yes") || !strcasecmp(in, "true") ||
        !strcmp(in, "1"))
      snprintf(out, len, "true");
    else if (!strcasecmp(in, "n") || !strcasecmp(in, "no") || !strcasecmp(in, "false") ||
             !strcmp(in, "0"))
      snprintf(out, len, "false");
  } else if (k->type == ZRT_CFGT_ENUM && k->choices) {
    /* give back the schema's spelling of a case-insensitive match */
    const char *c = k->choices;
    while (*c) {
      const char *bar = strchr(c, '|');
      size_t l = bar ? (size_t)(bar - c) : strlen(c);
      if (strlen(in) == l && !strncasecmp(in, c, l)) {
        snprintf(out, len, "%.*s", (int)l, c);
        break;
      }
      if (!bar) break;
      c = bar + 1;
    }
  }
}

static const char *cli_q_default(const cli_question *q, const zrt_cfg_key *k) {
  if (q->dflt) return q->dflt;
  if (k->def && k->def[0] && strcmp(k->def, "auto")) return k->def;
  return "";
}

static void cli_prompt(const cli_question *q, const zrt_cfg_key *k, const char *dflt) {
  printf("%s", q->prompt);
  if (k->type == ZRT_CFGT_ENUM && k->choices) {
    printf(" [");
    for (const char *c = k->choices; *c; c++) putchar(*c == '|' ? '/' : *c);
    printf("]");
  } else if (k->type == ZRT_CFGT_BOOL) {
    printf(" [yes/no]");
  } else if (k->type == ZRT_CFGT_INT && k->min <= k->max && k->max - k->min <= 16) {
    printf(" [%.0f-%.0f]", k->min, k->max);
  }
  if (dflt[0])
    printf(" (default %s): ",
           k->type == ZRT_CFGT_BOOL ? (!strcmp(dflt, "true") ? "yes" : "no") : dflt);
  else
    printf(" (default none): ");
  fflush(stdout);
}

static const char *cli_type_hint(const zrt_cfg_key *k, char *buf, size_t len) {
  switch (k->type) {
  case ZRT_CFGT_BOOL: snprintf(buf, len, "answer yes or no"); break;
  case ZRT_CFGT_ENUM: {
    size_t o = (size_t)snprintf(buf, len, "choose one of: ");
    for (const char *c = k->choices ? k->choices : ""; *c && o + 2 < len; c++) {
      if (*c == '|') {
        buf[o++] = ',';
        buf[o++] = ' ';
      } else
        buf[o++] = *c;
    }
    buf[o < len ? o : len - 1] = '\0';
    break;
  }
  case ZRT_CFGT_INT:
    if (k->min <= k->max)
      snprintf(buf, len, "an integer from %.0f to %.0f", k->min, k->max);
    else
      snprintf(buf, len, "an integer");
    break;
  case ZRT_CFGT_FLOAT:
    if (k->min <= k->max)
      snprintf(buf, len, "a number from %g to %g", k->min, k->max);
    else
      snprintf(buf, len, "a number");
    break;
  default: snprintf(buf, len, "%s", k->doc ? k->doc : "a value"); break;
  }
  return buf;
}

/* YAML 1.1 reads these plain words as booleans or null (PyYAML's
 * resolver): a text value spelled so is written quoted. */
static int cli_yaml11_word(const char *v) {
  static const char *const w[] = {"yes", "no", "true", "false", "on", "off", "null", "~", NULL};
  for (size_t i = 0; w[i]; i++)
    if (!strcasecmp(v, w[i])) return 1;
  return 0;
}

/* Quotes a YAML scalar when it is not a plain word; an enum value YAML 1.1
 * would read as a boolean ('no') in single quotes, as accelerate's
 * yaml.safe_dump writes `mixed_precision: 'no'`. */
static void cli_yaml_scalar(FILE *f, const zrt_cfg_key *k, const char *v) {
  int plain = v[0] != '\0' && k->type != ZRT_CFGT_STRING;
  if (plain && k->type != ZRT_CFGT_BOOL && cli_yaml11_word(v)) {
    fprintf(f, "'%s'", v);
    return;
  }
  if (!plain) {
    fputc('"', f);
    for (const char *p = v; *p; p++) {
      if (*p == '"' || *p == '\\') fputc('\\', f);
      fputc(*p, f);
    }
    fputc('"', f);
  } else {
    fputs(v, f);
  }
}

static int cli_write_launch_yaml(const char *path, const cli_answers *ans, int from_defaults) {
  if (cli_mkdirs_for(path) != 0) {
    fprintf(stderr, "zrt config: cannot create the directory of '%s': %s\n", path, strerror(errno));
    return 1;
  }
  char tmp[PATH_MAX + 32];
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  /* created new, never through a planted name (docs/security.md) */
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    fprintf(stderr, "zrt config: cannot create '%s': %s\n", tmp,
            errno == EEXIST ? "a file or link of that name exists; remove it" : strerror(errno));
    if (fd >= 0) close(fd);
    return 1;
  }
  fprintf(f,
          "# zrt launch config, written by `zrt config%s` (zrt %s).\n"
          "# accelerate format; `zrt config explain %s` shows every resolved value.\n",
          from_defaults ? " --defaults" : "", ZRT_VERSION_STRING, path);
  /* top-level keys first, then the deepspeed_config: section, each in
   * question order */
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 0) fprintf(f, "distributed_type: DEEPSPEED\n");
    if (pass == 1) fprintf(f, "deepspeed_config:\n");
    for (size_t i = 0; i < CLI_NQ; i++) {
      if (!ans->asked[i]) continue;
      const cli_question *q = &cli_questions[i];
      const char *path_k;
      const zrt_cfg_key *k = cli_q_key(q, &path_k);
      int ds = !strncmp(q->yaml, "deepspeed_config.", 17);
      if (ds != pass || !k) continue;
      fprintf(f, "%s%s: ", ds ? "  " : "", ds ? q->yaml + 17 : q->yaml);
      cli_yaml_scalar(f, k, ans->val[i]);
      fputc('\n', f);
    }
  }
  if (fclose(f) != 0) {
    fprintf(stderr, "zrt config: cannot write '%s': %s\n", tmp, strerror(errno));
    unlink(tmp);
    return 1;
  }
  /* read it back exactly as `zrt launch` will */
  zrt_config *chk = NULL;
  zrt_status st = zrt_config_create(&chk);
  if (st == ZRT_OK) st = zrt_config_load_file(chk, tmp);
  zrt_config_destroy(chk);
  if (st != ZRT_OK) {
    fprintf(stderr, "zrt config: the written config does not load back (nothing written):\n%s\n",
            zrt_last_error());
    unlink(tmp);
    return 1;
  }
  if (rename(tmp, path) != 0) {
    fprintf(stderr, "zrt config: cannot rename '%s' to '%s': %s\n", tmp, path, strerror(errno));
    unlink(tmp);
    return 1;
  }
  printf("zrt config: wrote %s\n", path);
  return 0;
}

static int cli_questionnaire(const char *path, int defaults) {
  cli_answers ans;
  memset(&ans, 0, sizeof ans);
  zrt_config *work = NULL;
  if (zrt_config_create(&work) != ZRT_OK) {
    fprintf(stderr, "zrt config: %s\n", zrt_last_error());
    return 1;
  }
  int echo = !isatty(STDIN_FILENO);
  char *line = NULL;
  size_t cap = 0;
  int rc = 0;
  for (size_t i = 0; i < CLI_NQ && rc == 0; i++) {
    const cli_question *q = &cli_questions[i];
    if (!cli_q_applies(q, &ans)) continue;
    const char *kpath;
    const zrt_cfg_key *k = cli_q_key(q, &kpath);
    if (!k) {
      fprintf(stderr, "zrt config: the config schema has no key for '%s' (zrt build mismatch)\n",
              q->yaml);
      rc = 1;
      break;
    }
    char dflt[ZRT_CFG_STR];
    snprintf(dflt, sizeof dflt, "%s", cli_q_default(q, k));
    if (!strcmp(q->yaml, "num_processes") && defaults) {
      int g = zrt_backend_cuda_device_count();
      snprintf(dflt, sizeof dflt, "%d", g > 0 ? g : 1);
    }
    for (;;) {
      char val[ZRT_CFG_STR];
      if (defaults) {
        snprintf(val, sizeof val, "%s", dflt);
      } else {
        cli_prompt(q, k, dflt);
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) {
          printf("\n");
          fprintf(stderr,
                  "zrt config: input ended before every question was answered (at \"%s\"); "
                  "nothing written\n",
                  q->prompt);
          rc = 1;
          break;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' '))
          line[--n] = '\0';
        char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (echo) printf("%s\n", s);
        cli_normalise(k, *s ? s : dflt, val, sizeof val);
      }
      if (val[0] == '\0' && k->type == ZRT_CFGT_STRING) {
        /* an empty string is a valid answer for optional text keys */
        ans.asked[i] = 1;
        ans.val[i][0] = '\0';
        break;
      }
      if (zrt_config_set(work, kpath, val, "zrt config") == ZRT_OK) {
        ans.asked[i] = 1;
        snprintf(ans.val[i], sizeof ans.val[i], "%s", val);
        break;
      }
      char hint[512];
      fprintf(defaults ? stderr : stdout, "  invalid answer '%s': %s (%s)\n", val, zrt_last_error(),
              cli_type_hint(k, hint, sizeof hint));
      if (defaults) {
        rc = 1;
        break;
      }
    }
  }
  free(line);
  zrt_config_destroy(work);
  if (rc) return rc;
  return cli_write_launch_yaml(path, &ans, defaults);
}

/* ------------------------------------------------------------- check */

static int cli_world_of(const zrt_config *cfg, int world_flag) {
  if (world_flag > 0) return world_flag;
  const zrt_cfg *v = zrt_config_values(cfg);
  return v->num_processes > 0 ? (int)v->num_processes : 1;
}

static int cli_check(int argc, char **argv) {
  int world = 0, nfiles = 0, bad = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--world_size") && i + 1 < argc) {
      world = atoi(argv[++i]);
      if (world <= 0) {
        fprintf(stderr, "zrt config check: --world_size needs a positive integer\n");
        return 2;
      }
    } else if (!strncmp(argv[i], "--", 2)) {
      fprintf(stderr,
              "zrt config check: unknown option '%s'\nusage: zrt config check FILE... "
              "[--world_size N]\n",
              argv[i]);
      return 2;
    }
  }
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--world_size")) {
      i++;
      continue;
    }
    const char *file = argv[i];
    nfiles++;
    zrt_config *cfg = NULL;
    zrt_status st = zrt_config_create(&cfg);
    if (st == ZRT_OK) st = zrt_config_load_file(cfg, file);
    if (st == ZRT_OK) st = zrt_config_resolve_pending(cfg, cli_world_of(cfg, world));
    /* what zrt launch would refuse from the file alone */
    const zrt_cfg *v = st == ZRT_OK ? zrt_config_values(cfg) : NULL;
    if (v && v->num_machines > 1 && !v->hostfile[0])
      st = zrt_error(ZRT_ERR_CONFIG,
                     "num_machines is %lld but no machines are named: zrt launch needs a hostfile "
                     "(hostfile: FILE, or accelerate's mpirun_config.mpirun_hostfile, with "
                     "'host slots=N' lines) or its --hostfile / --hosts flag",
                     (long long)v->num_machines);
    if (st == ZRT_OK) {
      printf("%s: ok\n", file);
      size_t nw = zrt_config_warning_count(cfg);
      for (size_t w = 0; w < nw; w++) printf("%s: warning: %s\n", file, zrt_config_warning(cfg, w));
    } else {
      fprintf(stderr, "%s\n%s: invalid\n", zrt_last_error(), file);
      bad++;
    }
    zrt_config_destroy(cfg);
  }
  if (nfiles == 0) {
    fprintf(stderr, "usage: zrt config check FILE... [--world_size N]\n");
    return 2;
  }
  return bad ? 1 : 0;
}

/* ----------------------------------------------------------- explain */

static int cli_explain(int argc, char **argv) {
  int world = 0, rc = 1;
  const char *files[64];
  int nfiles = 0;
  zrt_config *cfg = NULL;
  if (zrt_config_create(&cfg) != ZRT_OK) goto err;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--world_size") && i + 1 < argc) {
      world = atoi(argv[++i]);
      if (world <= 0) {
        fprintf(stderr, "zrt config explain: --world_size needs a positive integer\n");
        rc = 2;
        goto out;
      }
    } else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
      i++; /* applied after the files and the environment */
    } else if (!strncmp(argv[i], "--", 2)) {
      fprintf(stderr,
              "zrt config explain: unknown option '%s'\nusage: zrt config explain [FILE...] "
              "[--set KEY=VALUE]... [--world_size N]\n",
              argv[i]);
      rc = 2;
      goto out;
    } else if (nfiles < 64) {
      files[nfiles++] = argv[i];
    }
  }
  char dflt[4096];
  if (nfiles == 0 && access(cli_default_config_path(dflt, sizeof dflt), R_OK) == 0)
    files[nfiles++] = dflt;
  for (int f = 0; f < nfiles; f++)
    if (zrt_config_load_file(cfg, files[f]) != ZRT_OK) goto err;
  if (zrt_config_load_env(cfg) != ZRT_OK) goto err;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--set") || i + 1 >= argc) continue;
    char kv[1024];
    snprintf(kv, sizeof kv, "%s", argv[++i]);
    char *eq = strchr(kv, '=');
    if (!eq) {
      fprintf(stderr, "zrt config explain: --set needs KEY=VALUE, got '%s'\n", kv);
      rc = 2;
      goto out;
    }
    *eq = '\0';
    char origin[1100];
    snprintf(origin, sizeof origin, "--set %s", kv);
    if (zrt_config_set(cfg, kv, eq + 1, origin) != ZRT_OK) goto err;
  }
  world = cli_world_of(cfg, world);
  if (zrt_config_resolve_pending(cfg, world) != ZRT_OK) goto err;

  printf("# zrt config explain:");
  for (int f = 0; f < nfiles; f++) printf(" %s", files[f]);
  if (!nfiles) printf(" (no file: defaults)");
  printf(", world size %d\n# key = value  (source)\n", world);
  size_t n = zrt_config_schema_count();
  for (size_t i = 0; i < n; i++) {
    const char *key = NULL;
    char val[ZRT_CFG_STR], stxt[ZRT_CFG_STR + 32];
    zrt_cfg_source src;
    if (zrt_config_entry(cfg, i, &key, val, sizeof val, &src) != ZRT_OK || !key) continue;
    char lhs[1024];
    snprintf(lhs, sizeof lhs, "%s = %s", key, val[0] ? val : "\"\"");
    printf("%-60s (%s)\n", lhs, cli_source_text(&src, stxt, sizeof stxt));
  }
  const zrt_cfg *v = zrt_config_values(cfg);
  static const char *const offl[] = {"none", "cpu", "nvme"};
  printf("\n# derived\n");
  printf("train_batch_size = %lld = micro %lld x accumulation %lld x world %d\n",
         (long long)v->train_batch_size, (long long)v->train_micro_batch_size_per_gpu,
         (long long)v->gradient_accumulation_steps, world);
  printf("working dtype = %s (master weights and gradient partitions %s, optimizer states "
         "%s)\n",
         zrt_dtype_name(zrt_config_dtype(cfg)), v->bf16_master_weights_and_grads ? "bf16" : "fp32",
         v->bf16_optimizer_states ? "bf16" : "fp32");
  printf("loss scaling = %s\n", !v->fp16_enabled         ? "none (not fp16)"
                                : v->fp16_loss_scale > 0 ? "static"
                                                         : "dynamic");
  printf("gradient reduction dtype = %s\n",
         v->communication_data_type < 0 ? zrt_dtype_name(zrt_config_dtype(cfg))
                                        : zrt_dtype_name((zrt_dtype)v->communication_data_type));
  static const char *const stage_txt[] = {"replicated (no partitioning)",
                                          "optimizer states partitioned",
                                          "optimizer states + gradients partitioned",
                                          "optimizer states + gradients + parameters "
                                          "partitioned"};
  printf("zero stage = %d: %s\n", v->zero_stage,
         v->zero_stage >= 0 && v->zero_stage <= 3 ? stage_txt[v->zero_stage] : "?");
  printf("optimizer states on = %s, parameters on = %s\n",
         v->offload_optimizer.device == ZRT_OFFLOAD_NONE ? "device"
                                                         : offl[v->offload_optimizer.device],
         v->offload_param.device == ZRT_OFFLOAD_NONE ? "device" : offl[v->offload_param.device]);
  size_t nw = zrt_config_warning_count(cfg);
  for (size_t w = 0; w < nw; w++) printf("warning: %s\n", zrt_config_warning(cfg, w));
  rc = 0;
  goto out;
err:
  fprintf(stderr, "zrt config explain: %s\n", zrt_last_error());
  rc = 1;
out:
  zrt_config_destroy(cfg);
  return rc;
}

/* --------------------------------------------------------- dispatcher */

static void cli_config_usage(FILE *f) {
  char p[4096];
  fprintf(f,
          "usage:\n"
          "  zrt config [--config_file F]        questionnaire (answers from the terminal or a "
          "pipe)\n"
          "  zrt config --defaults [--config_file F]   write a default launch config without "
          "asking\n"
          "  zrt config check FILE... [--world_size N]   validate configs; every error is "
          "printed\n"
          "  zrt config explain [FILE...] [--set KEY=VALUE]... [--world_size N]\n"
          "                                      every resolved value and where it came from\n"
          "  zrt config reference                markdown reference of every key\n\n"
          "default config file: %s\n",
          cli_default_config_path(p, sizeof p));
}

int zrt_cmd_config(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "check")) return cli_check(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "explain")) return cli_explain(argc - 1, argv + 1);
  if (argc >= 2 && !strcmp(argv[1], "reference")) {
    if (argc > 2) {
      fprintf(stderr, "usage: zrt config reference\n");
      return 2;
    }
    if (zrt_config_write_reference(stdout) != ZRT_OK) {
      fprintf(stderr, "zrt config reference: %s\n", zrt_last_error());
      return 1;
    }
    return 0;
  }
  const char *file = NULL;
  int defaults = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      cli_config_usage(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--defaults")) {
      defaults = 1;
    } else if (!strcmp(argv[i], "--config_file") && i + 1 < argc) {
      file = argv[++i];
    } else if (!strncmp(argv[i], "--config_file=", 14)) {
      file = argv[i] + 14;
    } else {
      static const char *const subs[] = {"check",      "explain",       "reference",
                                         "--defaults", "--config_file", "--help"};
      const char *sug = cli_suggest(argv[i], subs, sizeof subs / sizeof subs[0]);
      fprintf(stderr, "zrt config: unknown argument '%s'%s%s%s\n", argv[i],
              sug ? " (did you mean " : "", sug ? sug : "", sug ? "?)" : "");
      cli_config_usage(stderr);
      return 2;
    }
  }
  char path[4096];
  if (!file) file = cli_default_config_path(path, sizeof path);
  return cli_questionnaire(file, defaults);
}
