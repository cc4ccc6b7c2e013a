/*
 * train_gpt2.c — trains (or evaluates) GPT-2 with zrt on byte-level text or
 * llm.c token shards (gpt2_data.h), from scratch or from a Hugging Face
 * directory (--init DIR), written only against include/zrt.h. One process
 * is one rank: `zrt launch` (or mpiexec) starts several, the config comes
 * from zrt_config_from_env and the flags below override it.
 *
 * Per micro-batch: every module in order is fetched, run forward and
 * released; the head (ln_f + the tied wte of the embedding module) runs its
 * forward and backward in one fetch; then the blocks backward in reverse,
 * each fetched again, its gradients ADDED into the engine's buffers (loss
 * gradient multiplied by the loss scale), grads_ready, released; the
 * embedding's backward reads no weight and only takes its grads (no fetch:
 * at stage 3 that would be a wasted gather); then zrt_engine_step. Per pass
 * stage 3 gathers the embedding module and every block twice, ln_f once. Weights and
 * grads of the working dtype are staged through fp32 buffers when the
 * working dtype is 16-bit and the kernels compute in fp32, except on CUDA,
 * where the GEMMs read the 16-bit weight matrices as they are (tensor
 * cores, fp32 accumulate). The host never synchronises the device inside
 * a step: the micro-batches' losses are copied on the stream and read back
 * once, at the accumulation window's last micro-batch.
 *
 * Invariants: the data a rank reads is a pure function of (optimizer step,
 * accumulation index, rank), so a resumed run sees the same batches as an
 * uninterrupted one; a stop signal takes effect at a step boundary that
 * all ranks agree on (carried by the boundary's statistics all-reduce:
 * zrt_engine_request_stop, no collective of its own), after a save; every rank
 * runs every forward (stage 3 fetches are
 * collective), including evaluation and sampling; all activations and
 * workspaces come from zrt_engine_alloc (accounted, capacity-checked).
 */
#define _GNU_SOURCE /* strsignal */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gpt2_act16.h"
#include "gpt2_data.h"
#include "gpt2_emu.h"
#include "gpt2_model.h"
#include "gpt2_prof.h"
#include "zrt.h"
#ifdef GPT2_HAVE_CUDA
#include "gpt2_cuda.h"
#endif

/* The default corpus lies beside the program, wherever it was built or
 * installed: BIN/../data/corpus.txt in a build tree (examples/gpt2/
 * CMakeLists.txt makes it there), BIN/../share/zrt/data/corpus.txt in an
 * installed prefix. The first that exists; the build tree's name when
 * neither does (then opening it fails with a message naming both). */
static const char *gpt2_default_data(void) {
  static char path[4096 + 32];
  static char other[4096 + 32];
  if (path[0]) return path;
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    snprintf(path, sizeof path, "data/corpus.txt");
    return path;
  }
  exe[n] = 0;
  char *slash = strrchr(exe, '/');
  if (slash) *slash = 0;
  snprintf(path, sizeof path, "%s/../data/corpus.txt", exe);
  snprintf(other, sizeof other, "%s/../share/zrt/data/corpus.txt", exe);
  struct stat sb;
  if (stat(path, &sb) != 0 && stat(other, &sb) == 0) memcpy(path, other, sizeof path);
  return path;
}
#define GPT2_DEFAULT_DATA gpt2_default_data()

#define CHECK(call)                                                                                \
  do {                                                                                             \
    zrt_status s_ = (call);                                                                        \
    if (s_ != ZRT_OK) {                                                                            \
      fprintf(stderr, "train_gpt2: %s failed: %s: %s\n", #call, zrt_status_string(s_),             \
              zrt_last_error());                                                                   \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)

typedef struct args {
  const char *model, *data, *val_data, *metrics, *init, *save, *resume, *config;
  const char *profile_ops; /* --profile_ops PATH */
  int n_layer, n_head, n_embd, seq_len, batch_size, vocab_size, n_positions, keep_last;
  int64_t steps;
  int val_every, val_batches, sample, eval_only, eval_batches, save_interval, emulate_cuda;
  int actckpt; /* --activation_checkpointing */
  double lr, temperature;
  uint64_t seed;
  const char *sets[32];
  int nsets;
} args;

static void usage(FILE *f) {
  fprintf(f,
          "usage: train_gpt2 [flags]\n"
          "  --model tiny|gpt2|gpt2-medium|gpt2-large|gpt2-xl   shape preset (default tiny)\n"
          "  --n_layer N --n_head N --n_embd N --seq_len T        override the preset\n"
          "  --n_positions N       rows of the position table (default: the preset's)\n"
          "  --vocab_size V        vocabulary (default 256: bytes; GPT-2's BPE is 50257)\n"
          "  --batch_size B        micro-batch per rank (default: the config's, else 4; a config\n"
          "                        that gives another value is an error)\n"
          "  --data FILE|GLOB      llm.c token shards (.bin, e.g. 'fineweb_train_*.bin') or any\n"
          "                        text file, read as bytes (default %s)\n"
          "  --val_data FILE|GLOB  validation shards (default: the last 10%% of --data)\n"
          "  --steps N             total optimizer steps of the run (default 20)\n"
          "  --lr X                optimizer.params.lr\n"
          "  --config FILE         config file overlaid after $ZRT_CONFIG_FILE\n"
          "  --set KEY=VALUE       any config key (repeatable)\n"
          "  --metrics PATH        zrt.metrics_path (JSON lines)\n"
          "  --profile_ops PATH    time the model's kernels by kind (GEMM, attention, LayerNorm,\n"
          "                        ...) every step; write the medians over the steps after the\n"
          "                        first two as JSON to PATH and print them (adds a host wait\n"
          "                        per step)\n"
          "  --val_every N         validation loss every N steps (0 = off)\n"
          "  --val_batches N       batches of the validation split (default 4)\n"
          "  --sample N            print N sampled tokens at the end (bytes for text)\n"
          "  --temperature X       sampling temperature, 0 = greedy (default 0.8)\n"
          "  --seed S              sampling RNG seed (default 1337)\n"
          "  --init DIR|FILE       initial weights: a Hugging Face GPT-2 directory (config.json\n"
          "                        gives the shape; model.safetensors or a sharded index) or\n"
          "                        one .safetensors file with HF GPT-2 names\n"
          "  --save DIR --save_interval K   checkpoint every K steps, at the end, and on\n"
          "                        SIGTERM / SIGUSR1 / Ctrl-C (then exit status 75)\n"
          "  --keep_last K         keep the K newest checkpoints of this run's history in --save\n"
          "                        DIR (0 = all; never latest, never another run's)\n"
          "  --resume DIR          continue from DIR/latest up to --steps\n"
          "  --eval_only           with --resume or --init: print {\"eval_loss\": x}\n"
          "  --eval_batches N      batches for --eval_only (default 8)\n"
          "  --activation_checkpointing   keep only each block's input (the engine's activation\n"
          "                        checkpoints) and recompute the block in the backward; also on\n"
          "                        when the config has an activation_checkpointing section\n"
          "  --emulate_cuda        on the cpu backend, compute what the CUDA kernels\n"
          "                        compute in a bf16 / fp16 run (GEMM operands rounded to the\n"
          "                        dtype, the tensor-core attention's emulation): a GPU\n"
          "                        run's numbers up to summation order; slow, for small models\n",
          GPT2_DEFAULT_DATA);
}

static int parse_int(const char *flag, const char *v, int64_t lo, int64_t *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || *end || end == v || x < lo) {
    fprintf(stderr, "train_gpt2: %s expects an integer >= %lld, got \"%s\"\n", flag, (long long)lo,
            v);
    return -1;
  }
  *out = x;
  return 0;
}

static int parse_args(int argc, char **argv, args *a) {
  memset(a, 0, sizeof *a);
  a->model = "tiny";
  a->data = GPT2_DEFAULT_DATA;
  a->steps = 20;
  a->val_batches = 4;
  a->eval_batches = 8;
  a->temperature = 0.8;
  a->seed = 1337;
  a->lr = -1;
  for (int i = 1; i < argc; i++) {
    const char *f = argv[i];
    if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
      usage(stdout);
      exit(0);
    }
    if (!strcmp(f, "--eval_only")) {
      a->eval_only = 1;
      continue;
    }
    if (!strcmp(f, "--activation_checkpointing")) {
      a->actckpt = 1;
      continue;
    }
    if (!strcmp(f, "--emulate_cuda")) {
      a->emulate_cuda = 1;
      continue;
    }
    if (i + 1 >= argc || strncmp(f, "--", 2) != 0) {
      fprintf(stderr, "train_gpt2: %s: unknown flag or missing value (see --help)\n", f);
      return -1;
    }
    const char *v = argv[++i];
    int64_t x = 0;
#define INTF(name, field, lo)                                                                      \
  if (!strcmp(f, name)) {                                                                          \
    if (parse_int(name, v, lo, &x)) return -1;                                                     \
    a->field = x;                                                                                  \
    continue;                                                                                      \
  }
    INTF("--n_layer", n_layer, 1)
    INTF("--n_head", n_head, 1)
    INTF("--n_embd", n_embd, 1)
    INTF("--seq_len", seq_len, 1)
    INTF("--batch_size", batch_size, 1)
    INTF("--steps", steps, 0)
    INTF("--val_every", val_every, 0)
    INTF("--val_batches", val_batches, 1)
    INTF("--sample", sample, 0)
    INTF("--eval_batches", eval_batches, 1)
    INTF("--save_interval", save_interval, 0)
    INTF("--seed", seed, 0)
    INTF("--vocab_size", vocab_size, 1)
    INTF("--n_positions", n_positions, 1)
    INTF("--keep_last", keep_last, 0)
#undef INTF
    if (!strcmp(f, "--model"))
      a->model = v;
    else if (!strcmp(f, "--data"))
      a->data = v;
    else if (!strcmp(f, "--val_data"))
      a->val_data = v;
    else if (!strcmp(f, "--metrics"))
      a->metrics = v;
    else if (!strcmp(f, "--profile_ops"))
      a->profile_ops = v;
    else if (!strcmp(f, "--init"))
      a->init = v;
    else if (!strcmp(f, "--save"))
      a->save = v;
    else if (!strcmp(f, "--resume"))
      a->resume = v;
    else if (!strcmp(f, "--config"))
      a->config = v;
    else if (!strcmp(f, "--lr") || !strcmp(f, "--temperature")) {
      char *end;
      double d = strtod(v, &end);
      if (*end || end == v || d < 0) {
        fprintf(stderr, "train_gpt2: %s expects a number >= 0, got \"%s\"\n", f, v);
        return -1;
      }
      if (f[2] == 'l')
        a->lr = d;
      else
        a->temperature = d;
    } else if (!strcmp(f, "--set")) {
      if (!strchr(v, '=') || a->nsets == 32) {
        fprintf(stderr, "train_gpt2: --set expects KEY=VALUE (at most 32), got \"%s\"\n", v);
        return -1;
      }
      a->sets[a->nsets++] = v;
    } else {
      fprintf(stderr, "train_gpt2: unknown flag %s (see --help)\n", f);
      return -1;
    }
  }
  if (a->eval_only && a->profile_ops) {
    fprintf(stderr, "train_gpt2: --profile_ops times training steps; drop it with --eval_only\n");
    return -1;
  }
  if (a->eval_only && !a->resume && !a->init) {
    fprintf(stderr, "train_gpt2: --eval_only needs weights: pass --resume DIR or --init "
                    "DIR|FILE.safetensors\n");
    return -1;
  }
  if (a->keep_last && !a->save) {
    fprintf(stderr, "train_gpt2: --keep_last needs --save DIR (the checkpoints it keeps)\n");
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------------ data */

/* Where windows come from: tokens [lo, hi) of a data stream. */
typedef struct split {
  const gpt2_data *d;
  int64_t lo, hi;
} split;

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Row `row` of a stream of windows of `stride` bytes over [lo, hi): inputs
 * the first T bytes, targets shifted by one. Wraps around. With shuffle the
 * windows are visited in a fixed pseudo-random order (row * P mod nwin with
 * P coprime to nwin, a permutation), so consecutive steps do not walk
 * through one document; the order depends only on the file and T. */
static void fill_row(const split *sp, int64_t row, int stride, int T, int shuffle, int *tok,
                     int *tgt) {
  int64_t lo = sp->lo, hi = sp->hi;
  int64_t nwin = (hi - lo - 1) / stride;
  if (nwin < 1) nwin = 1;
  int64_t w = row % nwin;
  if (shuffle) {
    int64_t p = (int64_t)(2654435761u % (uint64_t)nwin);
    while (p == 0 || gcd64(p, nwin) != 1) p = (p + 1) % nwin;
    w = (int64_t)(((unsigned __int128)w * (uint64_t)p) % (uint64_t)nwin);
  }
  int64_t start = lo + w * stride;
  if (start + T + 1 > hi) start = hi - T - 1;
  /* inputs and targets are one window of T + 1 tokens shifted by one */
  gpt2_data_read(sp->d, start, T, tok);
  gpt2_data_read(sp->d, start + 1, T, tgt);
}

/* ---------------------------------------------------------------- trainer */

typedef struct trainer {
  zrt_engine *eng;
  zrt_engine_info info;
  gpt2_config cfg;
  gpt2_acts_layout L;
  int B, nmod; /* modules: 0 embed, 1..n_layer blocks, n_layer+1 ln_f */
  int nckpt;   /* blocks 0..nckpt-1 are checkpointed (zrt_actckpt_*) */
  int *mod_id; /* engine module ids */
  int (*pid)[GPT2_BLOCK_NPARAMS];
  int64_t (*numel)[GPT2_BLOCK_NPARAMS];
  int mod_np[2]; /* param counts of embed / final modules */
  gpt2_ops_f32 ops;
  /* The backend's own ops (the MFU peak's GEMM): ops wraps them with
   * --emulate_cuda (gpt2_emu.h), in a 16-bit run (gpt2_act16.h's audit)
   * and with --profile_ops. */
  gpt2_ops_f32 kern;
  void (*to_f32)(float *dst, const void *src, zrt_dtype dt, int64_t n);
  void (*add_from_f32)(void *dst, const float *src, zrt_dtype dt, int64_t n);
  /* CUDA in a 16-bit run: GEMMs take the gathered 16-bit weight matrices
   * as they are (gpt2_cuda_weight16); NULL elsewhere. */
  int (*w16)(const void *raw, int64_t n);
  void (*w16_clear)(void);
  /* and their dW GEMMs add into the engine's 16-bit gradients as they are
   * (gpt2_cuda_grad16); NULL elsewhere. gdirect: the module's parameters
   * whose gradient pointer is the engine's own (no staging to flush). */
  int (*g16)(void *raw, int64_t n);
  void (*g16_clear)(void);
  unsigned char gdirect[GPT2_BLOCK_NPARAMS];
  void *scratch; /* the CUDA ops' scratch (gpt2_cuda_scratch_bytes) */
  float *acts, *wstage, *gstage, *wte_stage, *dwte;
  int64_t wstage_n; /* floats of wstage (largest_staged(reads16)) */
  int64_t gstage_n; /* floats of gstage (largest_staged(grad_direct)) */
  int *d_tok, *d_tgt;
  /* The token batches in host memory the engine copies asynchronously
   * (zrt_engine_host_alloc): one slice of 2*B*T ints (tokens, then
   * targets) per micro-batch of the accumulation window. h_tok / h_tgt
   * point into the slice of the current micro-batch (use_slice). */
  int *h_tokens;
  int *h_tok, *h_tgt;
  float *h_losses, *h_logits;
  /* With gradient accumulation, the window's per-position losses, one row
   * of B*T per micro-batch (backend memory; NULL at accumulation 1, where
   * the losses stay in the activations until the step reads them): training
   * reads them back once per optimizer step. */
  float *loss_win;
  int64_t accum;
  float *w[GPT2_BLOCK_NPARAMS], *g[GPT2_BLOCK_NPARAMS];
  void *graw[GPT2_BLOCK_NPARAMS];
} trainer;

static int nparams_of(const trainer *tr, int m) {
  return m == 0 ? tr->mod_np[0] : m == tr->nmod - 1 ? tr->mod_np[1] : GPT2_BLOCK_NPARAMS;
}

/* ------------------------------------------------------- compute tasks */

/* The model's compute is launched on the engine's compute stream
 * (zrt_engine_launch), as a CUDA program launches kernels: on cpu it runs at
 * once, on the twin a stream worker runs it after the work queued before it
 * (the fetch's gather, the previous module's compute) and before the work
 * queued after (the reduction of its gradients). With the CUDA kernels the
 * task runs on the calling thread and only enqueues kernels on the same
 * stream: one program text, one ordering on every backend. The engine's
 * pointers (zrt_param_data / zrt_param_grad) are looked up here, on the
 * host, in program order; the task only touches the memory they name. */
enum {
  GPT2_TASK_EMBED_FWD,
  GPT2_TASK_BLOCK_FWD,
  GPT2_TASK_HEAD,
  GPT2_TASK_BLOCK_BWD,
  GPT2_TASK_EMBED_BWD,
  GPT2_TASK_ZERO
};
typedef struct gpt2_task {
  trainer *tr;
  int kind, m, l, train;
  float scale;     /* the head's loss-gradient scale (loss scale / N) */
  const float *in; /* a block's backward: its checkpointed input (recompute), or NULL */
  void *wraw[GPT2_BLOCK_NPARAMS], *graw[GPT2_BLOCK_NPARAMS];
  void *wte_raw; /* the head: the tied wte of the embedding module */
  float *zero_at;
  size_t zero_n;
} gpt2_task;

/* Host side: module m's weight (and, with grads, gradient) pointers. */
static zrt_status task_ptrs(trainer *tr, gpt2_task *t, int m, int grads) {
  for (int p = 0; p < nparams_of(tr, m); p++) {
    zrt_status st = zrt_param_data(tr->eng, tr->pid[m][p], &t->wraw[p]);
    if (st == ZRT_OK && grads) st = zrt_param_grad(tr->eng, tr->pid[m][p], &t->graw[p]);
    if (st != ZRT_OK) return st;
  }
  return ZRT_OK;
}

/* A block's weight matrices: only GEMMs read them. */
static int is_gemm_weight(const trainer *tr, int m, int p) {
  return m >= 1 && m < tr->nmod - 1 &&
         (p == GPT2_ATTN_W || p == GPT2_ATTNPROJ_W || p == GPT2_FC_W || p == GPT2_FCPROJ_W);
}

/* The weights the ops read as the engine's 16-bit tensors when they take
 * them (tr->w16: CUDA): the blocks' weight matrices (the GEMMs) and the
 * embedding's wte and wpe (the encoder forward); the others are staged. */
static int reads16(const trainer *tr, int m, int p) {
  return tr->w16 && tr->info.dtype != ZRT_F32 && (is_gemm_weight(tr, m, p) || m == 0);
}
/* The largest module's floats of the parameters `direct` does not exempt
 * from staging: wstage's (direct = reads16) and gstage's (grad_direct). */
static int64_t largest_staged(const trainer *tr, int (*direct)(const trainer *, int, int)) {
  int64_t most = 0;
  for (int m = 0; m < tr->nmod; m++) {
    int64_t tot = 0;
    for (int p = 0; p < nparams_of(tr, m); p++)
      if (!direct(tr, m, p)) tot += tr->numel[m][p];
    if (tot > most) most = tot;
  }
  return most;
}

/* n floats of a staging of cap floats at *off (advanced), or NULL with
 * the internal error printed: a 16-bit registration the CUDA ops refused
 * would need more than largest_staged sized it for. */
static float *staging_take(float *base, int64_t cap, int64_t *off, int64_t n, int m,
                           const char *what) {
  if (*off + n > cap) {
    fprintf(stderr,
            "train_gpt2: internal error: module %d's %s need %lld floats of staging, %lld "
            "allocated (a 16-bit registration the CUDA ops refused): please report it\n",
            m, what, (long long)(*off + n), (long long)cap);
    return NULL;
  }
  float *at = base + *off;
  *off += n;
  return at;
}

/* Task side: points tr->w at module m's weights as fp32 (converted when
 * 16-bit), or at the 16-bit tensors themselves where the ops take them
 * (reads16; tr->w16: CUDA, where the task runs on the calling thread in
 * program order, so the registration holds for this module's kernels
 * only). The staging holds largest_staged(reads16): a registration the ops
 * refuse (their table full) would need more, an internal error. */
static zrt_status stage_weights(trainer *tr, const gpt2_task *t, int m) {
  int64_t off = 0;
  if (tr->w16_clear) tr->w16_clear();
  if (tr->g16_clear) tr->g16_clear(); /* the previous task's gradients */
  for (int p = 0; p < nparams_of(tr, m); p++) {
    if (tr->info.dtype == ZRT_F32) {
      tr->w[p] = t->wraw[p];
    } else if (reads16(tr, m, p) && tr->w16(t->wraw[p], tr->numel[m][p]) == 0) {
      tr->w[p] = t->wraw[p]; /* read as the run's 16-bit dtype by its op */
    } else {
      tr->w[p] = staging_take(tr->wstage, tr->wstage_n, &off, tr->numel[m][p], m, "weights");
      if (!tr->w[p]) return ZRT_ERR_INTERNAL;
      tr->to_f32(tr->w[p], t->wraw[p], tr->info.dtype, tr->numel[m][p]);
    }
  }
  return ZRT_OK;
}

/* Task side: points tr->g at fp32 gradient buffers of module m: the
 * engine's own when fp32, else zeroed staging that flush_grads adds into
 * the engine's; in a 16-bit run the embedding's wte staging is dwte, which
 * holds the LM head's share of the tied gradient (the head zeroed it and
 * added into it this micro-step: the staging's 0 + dwte, without the pass
 * that zeroes a staging and the one that adds dwte into it, and a gstage
 * the size of the largest module's other gradients). */
static int tied_staging(const trainer *tr, int m, int p) {
  return tr->info.dtype != ZRT_F32 && m == 0 && p == GPT2_WTE;
}
/* No staging: the tied wte's (dwte), and on CUDA the weight matrices',
 * whose dW GEMMs add into the engine's 16-bit gradient as it is (one
 * rounding of the fp32 sum, as the staging's flush rounds it). */
static int grad_direct(const trainer *tr, int m, int p) {
  return tied_staging(tr, m, p) || (tr->g16 && is_gemm_weight(tr, m, p));
}
static zrt_status stage_grads(trainer *tr, const gpt2_task *t, int m) {
  int64_t off = 0;
  if (tr->g16_clear) tr->g16_clear();
  for (int p = 0; p < nparams_of(tr, m); p++) {
    tr->graw[p] = t->graw[p];
    tr->gdirect[p] = 0;
    if (tr->info.dtype == ZRT_F32) {
      tr->g[p] = tr->graw[p];
    } else if (tied_staging(tr, m, p)) {
      tr->g[p] = tr->dwte;
    } else if (grad_direct(tr, m, p) && tr->g16(tr->graw[p], tr->numel[m][p]) == 0) {
      tr->g[p] = (float *)tr->graw[p]; /* C of its dW GEMM, in the run's 16-bit dtype */
      tr->gdirect[p] = 1;
    } else {
      tr->g[p] = staging_take(tr->gstage, tr->gstage_n, &off, tr->numel[m][p], m, "gradients");
      if (!tr->g[p]) return ZRT_ERR_INTERNAL;
      tr->ops.zero(tr->g[p], (size_t)tr->numel[m][p]);
    }
  }
  return ZRT_OK;
}

static void flush_grads(trainer *tr, int m) {
  if (tr->info.dtype == ZRT_F32) return;
  for (int p = 0; p < nparams_of(tr, m); p++)
    if (!tr->gdirect[p]) tr->add_from_f32(tr->graw[p], tr->g[p], tr->info.dtype, tr->numel[m][p]);
}

static zrt_status task_run(void *arg) {
  gpt2_task *t = arg;
  trainer *tr = t->tr;
  const gpt2_ops_f32 *ops = &tr->ops;
  int B = tr->B, last = tr->nmod - 1;
  zrt_status st = ZRT_OK;
  switch (t->kind) {
  case GPT2_TASK_EMBED_FWD:
    if ((st = stage_weights(tr, t, 0)) != ZRT_OK) return st;
    return gpt2_embed_forward_f32(ops, &tr->cfg, &tr->L, tr->acts, tr->d_tok, B, tr->w);
  case GPT2_TASK_BLOCK_FWD:
    if ((st = stage_weights(tr, t, 1 + t->l)) != ZRT_OK) return st;
    return gpt2_block_forward_f32(ops, &tr->cfg, &tr->L, tr->acts, B, t->l, NULL, tr->w);
  case GPT2_TASK_HEAD: {
    const float *wte = t->wte_raw;
    /* first: it clears the 16-bit registrations */
    if ((st = stage_weights(tr, t, last)) != ZRT_OK) return st;
    /* the tied wte: only the head's GEMMs read it, as is on CUDA (tr->w16) */
    if (tr->info.dtype != ZRT_F32 &&
        !(tr->w16 && tr->w16(t->wte_raw, tr->numel[0][GPT2_WTE]) == 0)) {
      tr->to_f32(tr->wte_stage, t->wte_raw, tr->info.dtype, tr->numel[0][GPT2_WTE]);
      wte = tr->wte_stage;
    }
    if (t->train) {
      if ((st = stage_grads(tr, t, last)) != ZRT_OK) return st;
      ops->zero(tr->dwte, (size_t)tr->numel[0][GPT2_WTE]);
    }
    st = gpt2_head_f32(ops, &tr->cfg, &tr->L, tr->acts, B, tr->d_tgt, tr->w, wte, t->scale,
                       t->train ? tr->g : NULL, tr->dwte);
    if (st == ZRT_OK && t->train) flush_grads(tr, last);
    return st;
  }
  case GPT2_TASK_BLOCK_BWD:
    if ((st = stage_weights(tr, t, 1 + t->l)) != ZRT_OK) return st;
    if (t->in) st = gpt2_block_forward_f32(ops, &tr->cfg, &tr->L, tr->acts, B, t->l, t->in, tr->w);
    if (st != ZRT_OK) return st;
    if ((st = stage_grads(tr, t, 1 + t->l)) != ZRT_OK) return st;
    st = gpt2_block_backward_f32(ops, &tr->cfg, &tr->L, tr->acts, B, t->l, t->in, tr->w, tr->g);
    if (st == ZRT_OK) flush_grads(tr, 1 + t->l);
    return st;
  case GPT2_TASK_EMBED_BWD:
    if ((st = stage_grads(tr, t, 0)) != ZRT_OK) return st;
    /* The LM head's share of the tied wte gradient joins the embedding's
     * (a 16-bit run's staging of it is dwte itself: stage_grads). */
    if (tr->info.dtype == ZRT_F32)
      ops->residual_forward(tr->g[GPT2_WTE], tr->g[GPT2_WTE], tr->dwte, NULL,
                            (int)(tr->numel[0][GPT2_WTE] / tr->cfg.n_embd), tr->cfg.n_embd);
    st = gpt2_embed_backward_f32(ops, &tr->cfg, &tr->L, tr->acts, tr->d_tok, B, tr->g);
    if (st == ZRT_OK) flush_grads(tr, 0);
    return st;
  case GPT2_TASK_ZERO: /* the MFU peak's operands: not the model's */
    tr->kern.zero(t->zero_at, t->zero_n);
    return ZRT_OK;
  default: return ZRT_ERR_INTERNAL;
  }
}

static zrt_status launch(trainer *tr, const gpt2_task *t) {
  if (!strcmp(tr->info.backend, "cuda")) return task_run((void *)t); /* enqueues kernels */
  return zrt_engine_launch(tr->eng, task_run, t, sizeof *t);
}

/* Points h_tok / h_tgt at slice k. An upload from a slice reads it when the
 * copy runs on the stream, not when upload_batch returns, so the host
 * refills a slice only after a host wait that covers its last upload (the
 * contract of zrt_engine_host_alloc): training fills slice ai for
 * micro-batch ai of a window, so no slice is refilled before the window's
 * one loss read-back (read_window_losses); evaluation and sampling use
 * slice 0 and read every batch's losses back before the next fill. */
static void use_slice(trainer *tr, int64_t k) {
  size_t N = (size_t)tr->B * (size_t)tr->cfg.seq_len;
  tr->h_tok = tr->h_tokens + (size_t)k * 2 * N;
  tr->h_tgt = tr->h_tok + N;
}

static zrt_status upload_batch(trainer *tr) {
  size_t bytes = (size_t)tr->B * tr->cfg.seq_len * sizeof(int);
  zrt_status st = zrt_engine_memcpy(tr->eng, tr->d_tok, tr->h_tok, bytes, ZRT_COPY_H2D);
  if (st != ZRT_OK) return st;
  return zrt_engine_memcpy(tr->eng, tr->d_tgt, tr->h_tgt, bytes, ZRT_COPY_H2D);
}

/* Mean of n per-position losses, summed in double in position order. */
static float mean_loss(const float *l, int n) {
  double sum = 0;
  for (int i = 0; i < n; i++) sum += l[i];
  return (float)(sum / n);
}

/* Forward of the whole model over the uploaded batch; with train, also the
 * backward (grads into the engine). With loss: the host waits for the
 * pass and *loss is the mean over the B*T positions (evaluation,
 * sampling). Without (training): nothing waits; with accumulation the
 * per-position losses are copied on the stream into row `slot` of
 * tr->loss_win; read_window_losses reads them back once per step. */
static zrt_status run_micro(trainer *tr, int train, float *loss, int64_t slot) {
  zrt_engine *e = tr->eng;
  int nl = tr->cfg.n_layer, last = tr->nmod - 1, N = tr->B * tr->cfg.seq_len;
  zrt_status st;
#define TRY(call)                                                                                  \
  do {                                                                                             \
    st = (call);                                                                                   \
    if (st != ZRT_OK) return st;                                                                   \
  } while (0)
  /* Phase marks for the engine's step breakdown; evaluation passes count as
   * time outside training's forward/backward. */
  TRY(zrt_engine_mark(e, train ? ZRT_PHASE_FORWARD : ZRT_PHASE_OTHER));
  gpt2_task t = {.tr = tr, .train = train};
  TRY(zrt_module_fetch(e, tr->mod_id[0]));
  t.kind = GPT2_TASK_EMBED_FWD;
  TRY(task_ptrs(tr, &t, 0, 0));
  TRY(launch(tr, &t));
  TRY(zrt_module_release(e, tr->mod_id[0]));
  for (int l = 0; l < nl; l++) {
    TRY(zrt_module_fetch(e, tr->mod_id[1 + l]));
    /* a checkpointed block's input is kept by the engine (a copy queued on
     * the stream before the block's forward); its activations live in the
     * shared slot the next checkpointed block overwrites */
    if (train && l < tr->nckpt)
      TRY(zrt_actckpt_save(e, l, tr->acts + gpt2_acts_block_input(&tr->L, l)));
    t.kind = GPT2_TASK_BLOCK_FWD;
    t.l = l;
    TRY(task_ptrs(tr, &t, 1 + l, 0));
    TRY(launch(tr, &t));
    TRY(zrt_module_release(e, tr->mod_id[1 + l]));
  }

  /* Head: ln_f plus the tied wte of the embedding module. Forward and
   * backward run back to back, so the modules stay fetched in between. */
  float scale = 1.0f;
  TRY(zrt_engine_loss_scale(e, &scale));
  TRY(zrt_module_fetch(e, tr->mod_id[last]));
  TRY(zrt_module_fetch(e, tr->mod_id[0]));
  TRY(zrt_param_data(e, tr->pid[0][GPT2_WTE], &t.wte_raw));
  /* the head runs forward, loss and backward in one task: it counts as backward */
  if (train) TRY(zrt_engine_mark(e, ZRT_PHASE_BACKWARD));
  t.kind = GPT2_TASK_HEAD;
  t.scale = scale / N;
  TRY(task_ptrs(tr, &t, last, train));
  TRY(launch(tr, &t));
  if (train) TRY(zrt_module_grads_ready(e, tr->mod_id[last]));
  TRY(zrt_module_release(e, tr->mod_id[0]));
  TRY(zrt_module_release(e, tr->mod_id[last]));

  if (train) {
    for (int l = nl - 1; l >= 0; l--) {
      TRY(zrt_module_fetch(e, tr->mod_id[1 + l]));
      t.kind = GPT2_TASK_BLOCK_BWD;
      t.l = l;
      t.in = NULL;
      /* a checkpointed block: the task recomputes its forward from the
       * checkpointed input (fetched here, ordered on the stream) first */
      if (l < tr->nckpt) TRY(zrt_actckpt_fetch(e, l, (const void **)&t.in));
      TRY(task_ptrs(tr, &t, 1 + l, 1));
      TRY(launch(tr, &t));
      /* stream-ordered: the slot is free once the task above has run */
      if (l < tr->nckpt) TRY(zrt_actckpt_release(e, l));
      TRY(zrt_module_grads_ready(e, tr->mod_id[1 + l]));
      TRY(zrt_module_release(e, tr->mod_id[1 + l]));
    }
    /* The embedding's backward scatters into its grads and reads no weight,
     * so the module is not fetched: at stage 3 a fetch here would gather the
     * tied wte a third time per pass for nothing. */
    t.kind = GPT2_TASK_EMBED_BWD;
    for (int p = 0; p < nparams_of(tr, 0); p++) TRY(zrt_param_grad(e, tr->pid[0][p], &t.graw[p]));
    TRY(launch(tr, &t));
    TRY(zrt_module_grads_ready(e, tr->mod_id[0]));
  }
  /* No device synchronise: a copy to host memory waits for the stream's
   * work before it (and returns its errors), a copy between device buffers
   * is queued behind it. */
  if (!loss)
    return tr->loss_win ? zrt_engine_memcpy(e, tr->loss_win + slot * N, tr->acts + tr->L.losses,
                                            (size_t)N * sizeof(float), ZRT_COPY_D2D)
                        : ZRT_OK;
  TRY(zrt_engine_memcpy(e, tr->h_losses, tr->acts + tr->L.losses, (size_t)N * sizeof(float),
                        ZRT_COPY_D2H));
#undef TRY
  *loss = mean_loss(tr->h_losses, N);
  return ZRT_OK;
}

/* The host wait of a training step: the window's n micro-batch rows of
 * tr->loss_win (at accumulation 1 the one row in the activations) back to
 * the host, and what zrt_engine_step adds up: the
 * micro-batch means summed in float in micro-batch order (the engine's own
 * accumulation order: it adds each micro-step's loss to a float sum that
 * starts at 0, so passing 0 for the earlier micro-steps and this sum with
 * the last gives the very same bits as passing each mean in turn). */
static zrt_status read_window_losses(trainer *tr, int64_t n, float *sum) {
  int N = tr->B * tr->cfg.seq_len;
  const float *src = tr->loss_win ? tr->loss_win : tr->acts + tr->L.losses;
  zrt_status st = zrt_engine_memcpy(tr->eng, tr->h_losses, src,
                                    (size_t)n * (size_t)N * sizeof(float), ZRT_COPY_D2H);
  if (st != ZRT_OK) return st;
  float s = 0.0f;
  for (int64_t i = 0; i < n; i++) s += mean_loss(tr->h_losses + i * N, N);
  *sum = s;
  return ZRT_OK;
}

/* Mean loss over `nbatches` global batches of windows [lo, hi) with the
 * given stride, all ranks together. */
static zrt_status evaluate(trainer *tr, const split *sp, int stride, int nbatches, double *mean) {
  int T = tr->cfg.seq_len, B = tr->B;
  float tot[2] = {0, 0};
  use_slice(tr, 0);
  for (int i = 0; i < nbatches; i++) {
    for (int b = 0; b < B; b++) {
      int64_t row = ((int64_t)i * tr->info.world_size + tr->info.rank) * B + b;
      fill_row(sp, row, stride, T, 0, tr->h_tok + b * T, tr->h_tgt + b * T);
    }
    float loss;
    zrt_status st = upload_batch(tr);
    if (st == ZRT_OK) st = run_micro(tr, 0, &loss, 0);
    if (st != ZRT_OK) return st;
    tot[0] += loss;
    tot[1] += 1;
  }
  zrt_status st = zrt_engine_all_reduce_sum(tr->eng, tot, 2);
  if (st != ZRT_OK) return st;
  *mean = tot[0] / tot[1];
  return ZRT_OK;
}

static uint64_t xorshift(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Every rank generates (the forwards are collective) with the same RNG, so
 * the samples agree; rank 0 prints. */
static zrt_status sample_text(trainer *tr, const split *val, int n, double temp, uint64_t *rng) {
  int T = tr->cfg.seq_len, V = tr->cfg.vocab;
  int plen = T / 2 < 32 ? T / 2 : 32;
  if (plen < 1) plen = 1;
  int *ctx = malloc(sizeof(int) * (size_t)(plen + n));
  if (!ctx) return ZRT_ERR_OOM;
  gpt2_data_read(val->d, val->lo, plen, ctx);
  int len = plen;
  zrt_status st = ZRT_OK;
  use_slice(tr, 0);
  for (int k = 0; k < n; k++) {
    int from = len > T ? len - T : 0, m = len - from;
    for (int b = 0; b < tr->B; b++)
      for (int t = 0; t < T; t++) {
        tr->h_tok[b * T + t] = t < m ? ctx[from + t] : 0;
        tr->h_tgt[b * T + t] = 0;
      }
    float loss;
    st = upload_batch(tr);
    if (st == ZRT_OK) st = run_micro(tr, 0, &loss, 0);
    /* a 16-bit CUDA run's logits slot holds 16-bit elements (gpt2_act16.h):
     * copied past the V floats of h_logits, then widened into them */
    const int half = tr->L.half16;
    const size_t el = half ? 2 : sizeof(float);
    void *row = half ? (void *)(tr->h_logits + V) : (void *)tr->h_logits;
    if (st == ZRT_OK)
      st = zrt_engine_memcpy(tr->eng, row,
                             (const char *)(tr->acts + tr->L.logits) +
                                 (size_t)(m - 1) * tr->L.logits_ld * el,
                             (size_t)V * el, ZRT_COPY_D2H);
    if (st != ZRT_OK) break;
    if (half) gpt2_to_f32(tr->h_logits, row, tr->info.dtype, V);
    const float *lg = tr->h_logits;
    int next = 0;
    for (int v = 1; v < V; v++)
      if (lg[v] > lg[next]) next = v;
    if (temp > 0) {
      double sum = 0, r = (double)(xorshift(rng) >> 11) / (double)(1ull << 53);
      for (int v = 0; v < V; v++) sum += exp((lg[v] - lg[next]) / temp);
      double acc = 0;
      for (int v = 0; v < V; v++) {
        acc += exp((lg[v] - lg[next]) / temp) / sum;
        if (r < acc) {
          next = v;
          break;
        }
      }
    }
    ctx[len++] = next;
  }
  if (st == ZRT_OK && tr->info.rank == 0) {
    /* token data is printed as token ids: decoding needs the tokenizer,
     * which stays with the user (scripts/tokenize_llmc.py --decode) */
    printf("---- sample (prompt %d %s from the validation split, temperature %g) ----\n", plen,
           val->d->tokens ? "token ids" : "bytes", temp);
    for (int i = 0; i < len; i++) {
      int ch = ctx[i];
      if (val->d->tokens)
        printf("%s%d", i ? " " : "", ch);
      else
        putchar(ch == '\n' || ch == '\t' || (ch >= 32 && ch < 127) ? ch : '?');
    }
    printf("\n---- end of sample ----\n");
    fflush(stdout);
  }
  free(ctx);
  return st;
}

static const char *fmt_bytes(size_t b, char *buf, size_t len) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = (double)b;
  int i = 0;
  while (x >= 1024 && i < 4) x /= 1024, i++;
  snprintf(buf, len, "%.1f %s", x, u[i]);
  return buf;
}

/* Reads "key": <number> (or "key": "0x<hex>") out of the user JSON this
 * program wrote itself: every key it writes is unique and no value holds a
 * quote, so a textual lookup is exact. 64-bit values (the RNG) travel as hex
 * strings because JSON numbers are doubles. */
static int json_u64(const char *json, const char *key, uint64_t *out) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char *p = json ? strstr(json, pat) : NULL;
  if (!p) return -1;
  p += strlen(pat);
  while (*p == ' ') p++;
  char *end;
  if (*p == '"')
    *out = strtoull(p + 1, &end, 16);
  else
    *out = strtoull(p, &end, 10);
  return end == p ? -1 : 0;
}

/* The checkpoint user JSON: where training stands (step, next data row,
 * sampling RNG) and the model's shape, so a resume can refuse a different
 * model by name and `zrt consolidate` can write config.json unaided. */
static void user_json_write(char *buf, size_t len, const args *a, const trainer *tr, int64_t step,
                            int64_t next_row, uint64_t rng, int64_t data_tokens) {
  snprintf(buf, len,
           "{\"step\": %lld, \"rng\": \"0x%016llx\", \"next_row\": %lld, \"data_tokens\": %lld, "
           "\"batch_size\": %d, \"world_size\": %d, \"model\": {\"preset\": \"%s\", "
           "\"n_layer\": %d, \"n_head\": %d, \"n_embd\": %d, \"n_positions\": %d, "
           "\"seq_len\": %d, \"vocab_size\": %d}}",
           (long long)step, (unsigned long long)rng, (long long)next_row, (long long)data_tokens,
           tr->B, tr->info.world_size, a->model, tr->cfg.n_layer, tr->cfg.n_head, tr->cfg.n_embd,
           tr->cfg.n_ctx, tr->cfg.seq_len, tr->cfg.vocab);
}

/* Before building: the checkpoint's model must be the one the flags
 * describe. Names every differing field and the flags to pass. Checkpoints
 * without a "model" record are left to the engine's per-parameter check. */
static int check_resume_model(const args *a, const gpt2_config *cfg, int rank0) {
  char *uj = NULL;
  int64_t step = 0;
  zrt_status st = zrt_ckpt_peek(a->resume, &step, &uj);
  if (st != ZRT_OK) {
    if (rank0) fprintf(stderr, "train_gpt2: --resume %s: %s\n", a->resume, zrt_last_error());
    return -1;
  }
  struct {
    const char *key, *flag;
    int mine;
  } f[] = {{"n_layer", "--n_layer", cfg->n_layer},
           {"n_head", "--n_head", cfg->n_head},
           {"n_embd", "--n_embd", cfg->n_embd},
           {"n_positions", "--n_positions", cfg->n_ctx},
           {"vocab_size", "--vocab_size", cfg->vocab}};
  char diff[512] = "", want[256] = "";
  size_t at = 0, wat = 0;
  uint64_t v;
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
    if (json_u64(uj, f[i].key, &v)) continue;
    wat += (size_t)snprintf(want + wat, sizeof want - wat, " %s %llu", f[i].flag,
                            (unsigned long long)v);
    if (wat >= sizeof want) wat = sizeof want - 1;
    if ((int64_t)v == f[i].mine) continue;
    at +=
        (size_t)snprintf(diff + at, sizeof diff - at, "%s%s %llu in the checkpoint, %d in this run",
                         at ? "; " : "", f[i].key, (unsigned long long)v, f[i].mine);
    if (at >= sizeof diff) at = sizeof diff - 1;
  }
  free(uj);
  if (!at) return 0;
  if (rank0)
    fprintf(stderr,
            "train_gpt2: --resume %s (step %lld) holds a different model: %s.\n  Resume with the "
            "shape flags of the run that saved it:%s\n",
            a->resume, (long long)step, diff, want);
  return -1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------- run helpers */

/* The model's shape. With --init DIR holding a config.json the directory
 * decides (a shape flag that contradicts it is an error naming both);
 * otherwise the preset and the flags. seq_len defaults to the preset's (an
 * HF model: its n_positions), clipped to the position table. */
static int resolve_shape(args *a, gpt2_config *cfg) {
  char msg[600];
  if (gpt2_config_preset(a->model, cfg)) {
    fprintf(stderr,
            "train_gpt2: unknown --model \"%s\" (expected tiny, gpt2, gpt2-medium, gpt2-large "
            "or gpt2-xl)\n",
            a->model);
    return -1;
  }
  struct stat sb;
  int hf = 0;
  if (a->init && stat(a->init, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    gpt2_config h = *cfg;
    hf = gpt2_config_from_hf(a->init, &h, msg, sizeof msg);
    if (hf < 0) {
      fprintf(stderr, "train_gpt2: --init %s\n", msg);
      return -1;
    }
    if (hf) {
      const struct {
        const char *flag, *key;
        int given, file;
      } f[] = {{"--n_layer", "n_layer", a->n_layer, h.n_layer},
               {"--n_head", "n_head", a->n_head, h.n_head},
               {"--n_embd", "n_embd", a->n_embd, h.n_embd},
               {"--n_positions", "n_positions", a->n_positions, h.n_ctx},
               {"--vocab_size", "vocab_size", a->vocab_size, h.vocab}};
      for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].given && f[i].given != f[i].file) {
          fprintf(stderr,
                  "train_gpt2: %s %d contradicts %s %d in %s/config.json: the directory sets the "
                  "model's shape; drop %s\n",
                  f[i].flag, f[i].given, f[i].key, f[i].file, a->init, f[i].flag);
          return -1;
        }
      *cfg = h;
      cfg->seq_len = h.n_ctx;
      a->model = "hf";
    }
  }
  if (!hf) {
    if (a->n_layer) cfg->n_layer = a->n_layer;
    if (a->n_head) cfg->n_head = a->n_head;
    if (a->n_embd) cfg->n_embd = a->n_embd;
    if (a->n_positions) cfg->n_ctx = a->n_positions;
    if (a->vocab_size) cfg->vocab = a->vocab_size;
  }
  if (a->seq_len)
    cfg->seq_len = a->seq_len;
  else if (cfg->seq_len > cfg->n_ctx)
    cfg->seq_len = cfg->n_ctx;
  if (gpt2_config_validate(cfg, msg, sizeof msg)) {
    fprintf(stderr, "train_gpt2: %s\n", msg);
    return -1;
  }
  return 0;
}

/* --save DIR must be usable before the first step, not at the first save
 * save_interval steps later: an existing writable directory, or a path
 * whose nearest existing ancestor is a writable directory (zrt_engine_save
 * creates the rest). Nothing is created here, so a failed start leaves no
 * trace. Every rank checks (ranks on other machines write their own shard
 * files there). */
static int check_save_dir(const char *dir) {
  char p[4096];
  if (!dir[0] || strlen(dir) >= sizeof p) {
    fprintf(stderr, "train_gpt2: --save needs a directory path\n");
    return -1;
  }
  snprintf(p, sizeof p, "%s", dir);
  struct stat sb;
  for (;;) {
    if (stat(p, &sb) == 0) break;
    if (errno != ENOENT && errno != ENOTDIR) {
      fprintf(stderr,
              "train_gpt2: --save %s: cannot use '%s': %s (checked at start, before any "
              "step; pass a writable --save DIR)\n",
              dir, p, strerror(errno));
      return -1;
    }
    char *slash = strrchr(p, '/');
    while (slash && slash > p && slash[1] == '\0') { /* trailing slashes */
      *slash = '\0';
      slash = strrchr(p, '/');
    }
    if (!slash) {
      snprintf(p, sizeof p, ".");
    } else if (slash == p) {
      p[1] = '\0';
    } else {
      *slash = '\0';
    }
  }
  const char *why = !S_ISDIR(sb.st_mode)          ? "is not a directory"
                    : access(p, W_OK | X_OK) != 0 ? "is not writable"
                                                  : NULL;
  if (why) {
    fprintf(stderr,
            "train_gpt2: --save %s: '%s' %s (checked at start, before any step; pass a writable "
            "--save DIR)\n",
            dir, p, why);
    return -1;
  }
  return 0;
}

/* The exit status of a run stopped by a signal (EX_TEMPFAIL: "try again
 * later" — continue it with --resume): after a save in the training loop,
 * or at once during start-up, when nothing has been written yet. */
#define GPT2_EXIT_INTERRUPTED 75

/* Slurm's preemption signals (SIGTERM, SIGUSR1) and Ctrl-C.
 *
 * During start-up (reading the data, creating the engine, building,
 * loading: anything may block there, e.g. MPI waiting for a peer) a signal
 * ends the program at once with status 75: nothing has been written yet,
 * so running it again loses nothing. Once every rank is past start-up
 * (g_in_loop, set before a barrier) a signal only raises a flag; the
 * training loop hands it to the engine before each step's boundary
 * (zrt_engine_request_stop), whose statistics all-reduce agrees on it, so
 * every rank finishes the same step and saves the same checkpoint (a signal
 * that comes after a boundary stops the run at the next one). A second Ctrl-C
 * kills at once (the default action is restored). */
static volatile sig_atomic_t g_stop_signal;
static volatile sig_atomic_t g_in_loop;

static void startup_signal_exit(int sig) {
  /* async-signal-safe: constant strings and write(2) only */
  static const char head[] = "train_gpt2: interrupted (";
  static const char tail[] = ") during start-up, before any step: nothing was saved or changed "
                             "(exit status 75: run it again)\n";
  const char *name = sig == SIGTERM ? "SIGTERM" : sig == SIGUSR1 ? "SIGUSR1" : "SIGINT";
  ssize_t w = write(STDERR_FILENO, head, sizeof head - 1);
  w = write(STDERR_FILENO, name, strlen(name));
  w = write(STDERR_FILENO, tail, sizeof tail - 1);
  (void)w;
  _exit(GPT2_EXIT_INTERRUPTED);
}

static void on_stop_signal(int sig) {
  if (!g_in_loop) startup_signal_exit(sig);
  if (!g_stop_signal) g_stop_signal = sig;
  if (sig == SIGINT) signal(SIGINT, SIG_DFL);
}

static void install_stop_handlers(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART; /* blocking I/O and MPI calls carry on */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
}

/* --keep_last K. Which checkpoints belong to this run's history, and may
 * be pruned: the ones this run saved itself, and, when it resumed from a
 * step of the same --save DIR, those at or below the step it resumed from
 * (its own past). Never anything above the step just saved, never a step
 * this run neither saved nor descends from (a longer run's or another
 * branch's checkpoints in the same directory stay whole), never what
 * `latest` names (zrt_ckpt_remove refuses it). Of the history, the K
 * newest stay. Removal is zrt_ckpt_remove's: zrt's own files only, the
 * directory only once empty (a user's notes.txt keeps it). Rank 0, after
 * zrt_engine_save returned. */
typedef struct keep_history {
  int64_t *saved; /* steps this run saved, ascending */
  int nsaved, cap;
  int64_t resumed; /* the step resumed from in the same DIR; -1 none */
} keep_history;

/* The step directory the run resumed from is DIR/step_<step> itself (a
 * --resume naming the root, or the step directory, of the same DIR). */
static int64_t keep_resumed_from(const char *save, const char *resume, int64_t step) {
  if (!resume) return -1;
  char p[4200];
  struct stat a, b;
  snprintf(p, sizeof p, "%s/step_%lld", save, (long long)step);
  if (stat(p, &a) != 0) return -1;
  if (stat(resume, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) return step;
  snprintf(p, sizeof p, "%s/step_%lld", resume, (long long)step);
  if (stat(p, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) return step;
  return -1;
}

static int keep_saved_by_run(const keep_history *h, int64_t step) {
  for (int i = 0; i < h->nsaved; i++)
    if (h->saved[i] == step) return 1;
  return 0;
}

static int cmp_i64_desc(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return a < b ? 1 : a > b ? -1 : 0;
}

static void prune_checkpoints(const char *dir, int keep, keep_history *h, int64_t saved) {
  if (h->nsaved == h->cap) {
    int cap = h->cap ? 2 * h->cap : 64;
    int64_t *p = realloc(h->saved, (size_t)cap * sizeof *p);
    if (!p) {
      fprintf(stderr, "train_gpt2: warning: --keep_last: out of memory; nothing removed\n");
      return;
    }
    h->saved = p;
    h->cap = cap;
  }
  if (!keep_saved_by_run(h, saved)) h->saved[h->nsaved++] = saved;
  DIR *d = opendir(dir);
  if (!d) return;
  int64_t *steps = NULL;
  int n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    const char *s = e->d_name;
    if (strncmp(s, "step_", 5) || s[5] < '0' || s[5] > '9') continue;
    char *end;
    long long v = strtoll(s + 5, &end, 10);
    if (*end || v < 0 || v > saved) continue;
    if (!keep_saved_by_run(h, v) && !(h->resumed >= 0 && v <= h->resumed)) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      int64_t *p = realloc(steps, (size_t)cap * sizeof *p);
      if (!p) break;
      steps = p;
    }
    steps[n++] = v;
  }
  closedir(d);
  if (steps) qsort(steps, (size_t)n, sizeof steps[0], cmp_i64_desc);
  for (int i = keep; i < n; i++) {
    int kept = 0;
    if (zrt_ckpt_remove(dir, steps[i], &kept) != ZRT_OK)
      fprintf(stderr, "train_gpt2: warning: --keep_last did not remove %s/step_%lld: %s\n", dir,
              (long long)steps[i], zrt_last_error());
    else if (!kept)
      printf("removed checkpoint %s/step_%lld (--keep_last %d)\n", dir, (long long)steps[i], keep);
  }
  free(steps);
}

/* The MFU denominator: the backend's measured GEMM rate, through the same
 * ops (and, on the CPU, the same OpenMP split) the model uses, in the
 * dtype its GEMMs run in: fp32 on the CPU and in fp32 CUDA runs; on CUDA in
 * a bf16 / fp16 run, cuBLAS on 16-bit operands (tensor cores, fp32
 * accumulate), A, B and the fp32 C in the activations. Operands live
 * in buffers the first forward overwrites, so the measurement costs no
 * memory. Square GEMMs of side n (a multiple of 64, at most `cap`),
 * repeated for at least `min_s` seconds. Returns FLOP/s, 0 when the buffer
 * is too small. */
#define GPT2_PEAK_SIDE_CPU 1024
#define GPT2_PEAK_SIDE_GPU 4096
#define GPT2_PEAK_MIN_S 0.25
static zrt_status peak_gemm(trainer *tr, int int16, int64_t n, const void *A, const void *B,
                            float *C) {
  if (!int16) return tr->kern.gemm(tr->kern.ctx, 0, 0, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
  return zrt_engine_gemm(tr->eng, 0, 0, n, n, n, 1.0f, A, n, B, n, tr->info.dtype, 0.0f, C, n,
                         ZRT_F32);
}

static double measure_gemm_peak(trainer *tr, int gpu) {
  int64_t cap = gpu ? GPT2_PEAK_SIDE_GPU : GPT2_PEAK_SIDE_CPU, n = cap;
  int int16 = tr->w16 != NULL; /* CUDA GEMMs in the run's 16-bit dtype */
  /* A, B and C in the activation arena (free before the first step): fp32,
   * or 16-bit A and B then an fp32 C */
  while (n >= 64 && (size_t)((int16 ? 2 : 3) * n * n) > tr->L.total) n -= 64;
  if (n < 64) return 0;
  const void *A = tr->acts, *B = tr->acts + n * n;
  float *C = tr->acts + 2 * n * n;
  if (int16) {
#ifdef GPT2_HAVE_CUDA
    gpt2_cuda_fill16(tr->acts, tr->info.dtype, 2 * n * n);
#endif
    B = (const char *)tr->acts + 2 * n * n;
    C = tr->acts + n * n; /* past A and B's 4 n^2 bytes */
  } else {
    gpt2_task z = {
        .tr = tr, .kind = GPT2_TASK_ZERO, .zero_at = tr->acts, .zero_n = (size_t)(3 * n * n)};
    if (launch(tr, &z) != ZRT_OK) return 0;
  }
  if (peak_gemm(tr, int16, n, A, B, C) != ZRT_OK || zrt_engine_synchronize(tr->eng) != ZRT_OK)
    return 0;
  double t0 = now_s(), t = t0;
  int reps = 0;
  while (t - t0 < GPT2_PEAK_MIN_S) {
    if (peak_gemm(tr, int16, n, A, B, C) != ZRT_OK) return 0;
    if (zrt_engine_synchronize(tr->eng) != ZRT_OK) return 0;
    reps++;
    t = now_s();
  }
  return 2.0 * (double)n * (double)n * (double)n * reps / (t - t0);
}

static void fmt_duration(double s, char *buf, size_t len) {
  long x = s < 0 ? 0 : (long)(s + 0.5);
  if (x >= 3600)
    snprintf(buf, len, "%ldh%02ldm", x / 3600, x / 60 % 60);
  else
    snprintf(buf, len, "%ldm%02lds", x / 60, x % 60);
}

int main(int argc, char **argv) {
  args a;
  trainer tr;
  gpt2_data data = {0}, vdata = {0};
  zrt_config *zc = NULL;
  char *user_json = NULL;
  keep_history keep = {.resumed = -1};
  int rc = 1;
  memset(&tr, 0, sizeof tr);
  if (parse_args(argc, argv, &a)) return 2;
  /* from the start: a signal during start-up ends the program at once */
  install_stop_handlers();

  if (resolve_shape(&a, &tr.cfg)) return 2;
  char msg[1024];
  int T = tr.cfg.seq_len;
  /* Train and validation splits: --val_data, else the last 10% of --data. */
  split train_sp, val_sp, all_sp;
  if (gpt2_data_open(a.data, tr.cfg.vocab, &data, msg, sizeof msg)) {
    fprintf(stderr, "train_gpt2: --data: %s%s\n", msg,
            strcmp(a.data, GPT2_DEFAULT_DATA)
                ? ""
                : "\n  (the default corpus, BIN/../data/corpus.txt in a build tree or "
                  "BIN/../share/zrt/data/corpus.txt installed, is built by "
                  "examples/gpt2/make_corpus.sh, run by the build; or pass --data FILE)");
    return 2;
  }
  all_sp = (split){&data, 0, data.n};
  if (a.val_data) {
    if (gpt2_data_open(a.val_data, tr.cfg.vocab, &vdata, msg, sizeof msg)) {
      fprintf(stderr, "train_gpt2: --val_data: %s\n", msg);
      gpt2_data_close(&data);
      return 2;
    }
    train_sp = all_sp;
    val_sp = (split){&vdata, 0, vdata.n};
  } else {
    train_sp = (split){&data, 0, data.n - data.n / 10};
    val_sp = (split){&data, train_sp.hi, data.n};
  }
  if (train_sp.hi - train_sp.lo < T + 1 || val_sp.hi - val_sp.lo < T + 1) {
    fprintf(stderr,
            "train_gpt2: --data %s has %lld tokens%s; with --seq_len %d the train split and the "
            "validation split need at least %d tokens each\n",
            a.data, (long long)data.n,
            a.val_data ? " (validation: --val_data)" : " (the last 10% is the validation split)", T,
            T + 1);
    gpt2_data_close(&data);
    gpt2_data_close(&vdata);
    return 2;
  }
  if (a.save && check_save_dir(a.save)) {
    gpt2_data_close(&data);
    gpt2_data_close(&vdata);
    return 2;
  }

  CHECK(zrt_config_from_env(&zc));
  if (a.config) CHECK(zrt_config_load_file(zc, a.config));
  /* What Hugging Face's Trainer fills into a DeepSpeed config: the
   * micro-batch (the config's own batch size wins; --batch_size
   * contradicting it is an error), accumulation 1, the schedule length
   * from --steps, warmup 0 and HF's defaults for clipping and Adam; each
   * only where the config says "auto" (the micro-batch also where the
   * config gives no batch size). The engine derives the train batch. */
  snprintf(msg, sizeof msg, "%d", a.batch_size ? a.batch_size : 4);
  CHECK(zrt_config_set(zc, "train_micro_batch_size_per_gpu", msg,
                       a.batch_size ? "program (--batch_size)" : "program default (train_gpt2)"));
  CHECK(zrt_config_set(zc, "gradient_accumulation_steps", "1", "program default (train_gpt2)"));
  snprintf(msg, sizeof msg, "%lld", (long long)(a.steps > 0 ? a.steps : 1));
  CHECK(zrt_config_set(zc, "scheduler.params.total_num_steps", msg,
                       "program default (train_gpt2 --steps)"));
  CHECK(
      zrt_config_set(zc, "scheduler.params.warmup_num_steps", "0", "program default (train_gpt2)"));
  CHECK(zrt_config_set(zc, "gradient_clipping", "1.0", "program default (train_gpt2)"));
  CHECK(zrt_config_set(zc, "optimizer.params.weight_decay", "0", "program default (train_gpt2)"));
  CHECK(zrt_config_set(zc, "optimizer.params.betas", "0.9,0.999", "program default (train_gpt2)"));
  CHECK(zrt_config_set(zc, "optimizer.params.eps", "1e-8", "program default (train_gpt2)"));
  /* the CPU ops split large GEMMs over the OpenMP team themselves (cpu_gemm
   * in gpt2_ops_impl.h): OpenBLAS runs single-threaded inside each slab,
   * or its spinning workers would fight every OpenMP kernel for the cores */
  CHECK(zrt_config_set(zc, "zrt.blas_threads", "1", "program"));
  if (a.metrics) CHECK(zrt_config_set(zc, "zrt.metrics_path", a.metrics, "program"));
  if (a.lr >= 0) {
    snprintf(msg, sizeof msg, "%.9g", a.lr);
    CHECK(zrt_config_set(zc, "optimizer.params.lr", msg, "program (--lr)"));
  }
  for (int i = 0; i < a.nsets; i++) {
    char key[200];
    const char *eq = strchr(a.sets[i], '=');
    snprintf(key, sizeof key, "%.*s", (int)(eq - a.sets[i]), a.sets[i]);
    char origin[256];
    snprintf(origin, sizeof origin, "--set %s", key);
    CHECK(zrt_config_set(zc, key, eq + 1, origin));
  }
  /* The progress line below is printed every step: the engine's own
   * "step N loss" line every steps_per_print steps would repeat it. Kept
   * when wall_clock_breakdown wants that cadence or a --set asks for it. */
  {
    char wcb[16] = "";
    int asked = 0;
    for (int i = 0; i < a.nsets; i++) asked |= !strncmp(a.sets[i], "steps_per_print=", 16);
    if (!asked && zrt_config_get(zc, "wall_clock_breakdown", wcb, sizeof wcb) == ZRT_OK &&
        strcmp(wcb, "true"))
      CHECK(zrt_config_set(zc, "steps_per_print", "0", "program"));
  }
  CHECK(zrt_engine_create(zc, &tr.eng));
  CHECK(zrt_engine_get_info(tr.eng, &tr.info));
  /* one truth for the batch: train with the engine's resolved micro-batch */
  tr.B = (int)tr.info.micro_batch;
  tr.accum = tr.info.grad_accum > 0 ? tr.info.grad_accum : 1;
  if (a.resume && check_resume_model(&a, &tr.cfg, tr.info.rank == 0)) {
    rc = 2;
    goto done;
  }
  /* Lets the engine's metrics report tokens/s. */
  CHECK(zrt_engine_set_tokens_per_micro(tr.eng, (int64_t)tr.B * T));
  int rank0 = tr.info.rank == 0;

  /* Kernels of the backend the engine picked. */
  tr.ops = gpt2_cpu_ops_f32;
  tr.to_f32 = gpt2_to_f32;
  tr.add_from_f32 = gpt2_add_from_f32;
  if (!strcmp(tr.info.backend, "cuda")) {
#ifdef GPT2_HAVE_CUDA
    tr.ops = gpt2_cuda_ops_f32;
    gpt2_cuda_set_stream(zrt_engine_stream(tr.eng));
    tr.to_f32 = gpt2_cuda_to_f32;
    tr.add_from_f32 = gpt2_cuda_add_from_f32;
    if (tr.info.dtype != ZRT_F32) {
      tr.w16 = gpt2_cuda_weight16;
      tr.w16_clear = gpt2_cuda_weight16_clear;
      tr.g16 = gpt2_cuda_grad16;
      tr.g16_clear = gpt2_cuda_grad16_clear;
    }
#else
    fprintf(stderr, "train_gpt2: the engine runs on CUDA but this build has no CUDA kernels; "
                    "rebuild with -DZRT_CUDA=ON or set zrt.backend=cpu\n");
    goto fail;
#endif
  }
  tr.ops.ctx = tr.eng;
  tr.kern = tr.ops;
  /* --emulate_cuda: the CUDA kernels' numbers on the host (gpt2_emu.h) */
  static gpt2_ops_f32 emu_inner;
  if (a.emulate_cuda) {
    if (strcmp(tr.info.backend, "cpu")) {
      /* the twin's GEMMs take only its device memory, not the emulation's
       * host copies of the rounded operands */
      fprintf(stderr,
              "train_gpt2: --emulate_cuda computes on the host what the CUDA kernels compute, "
              "on the cpu backend only, and this run is on %s: drop the flag, or set "
              "zrt.backend=cpu\n",
              tr.info.backend);
      goto fail;
    }
    emu_inner = tr.ops;
    gpt2_emu_cuda_ops(&emu_inner, tr.info.dtype, &tr.ops);
    if (rank0)
      printf("train_gpt2: --emulate_cuda: %s\n",
             tr.info.dtype == ZRT_F32
                 ? "an fp32 run: the CUDA kernels compute in fp32 as the host's (nothing to round)"
             : tr.info.dtype == ZRT_BF16
                 ? "GEMM operands rounded to bf16, attention through the tensor-core kernels' "
                   "emulation"
                 : "GEMM operands rounded to fp16, attention through the tensor-core kernels' "
                   "emulation");
  }

  /* Modules and parameters, in the order the passes use them. */
  tr.nmod = tr.cfg.n_layer + 2;
  tr.mod_id = calloc((size_t)tr.nmod, sizeof(int));
  tr.pid = calloc((size_t)tr.nmod, sizeof *tr.pid);
  tr.numel = calloc((size_t)tr.nmod, sizeof *tr.numel);
  if (!tr.mod_id || !tr.pid || !tr.numel) goto fail;
  for (int m = 0; m < tr.nmod; m++) {
    gpt2_param_spec ps[GPT2_BLOCK_NPARAMS];
    int np = gpt2_module_params(&tr.cfg, m - 1, ps);
    if (m == 0) tr.mod_np[0] = np;
    if (m == tr.nmod - 1) tr.mod_np[1] = np;
    char mname[32];
    if (m == 0)
      snprintf(mname, sizeof mname, "embed");
    else if (m == tr.nmod - 1)
      snprintf(mname, sizeof mname, "ln_f");
    else
      snprintf(mname, sizeof mname, "h.%d", m - 1);
    CHECK(zrt_module_add(tr.eng, mname, &tr.mod_id[m]));
    for (int p = 0; p < np; p++) {
      CHECK(zrt_param_add(tr.eng, tr.mod_id[m], ps[p].name, ps[p].ndim, ps[p].shape, ps[p].init,
                          ps[p].flags, &tr.pid[m][p]));
      tr.numel[m][p] = gpt2_param_numel(&ps[p]);
    }
  }
  /* Activation checkpointing: with --activation_checkpointing or a config
   * that asks for it (an activation_checkpointing section), every block
   * is offered; the engine checkpoints the first number_checkpoints of them
   * (all when unset), and those share one slot of the activation layout. */
  size_t N = (size_t)tr.B * T, wte_n = (size_t)tr.numel[0][GPT2_WTE];
  {
    int want = 0;
    CHECK(zrt_actckpt_wanted(tr.eng, &want));
    if (want || a.actckpt) {
      CHECK(zrt_actckpt_declare(tr.eng, tr.cfg.n_layer, N * (size_t)tr.cfg.n_embd * sizeof(float),
                                NULL));
      CHECK(zrt_actckpt_is_on(tr.eng, 0, &want, &tr.nckpt));
      for (int l = 0; l < tr.cfg.n_layer; l++) {
        int on = 0;
        CHECK(zrt_actckpt_is_on(tr.eng, l, &on, NULL));
        if (on != (l < tr.nckpt)) {
          fprintf(stderr,
                  "train_gpt2: the engine checkpoints block %d out of order; the layout "
                  "shares one slot among the first checkpointed blocks\n",
                  l);
          goto fail;
        }
      }
    }
  }
  /* Activations and workspaces: one accounted allocation each, up front
   * after build; declared first so that stage "auto" counts them (the
   * checkpoints are the engine's own and it counts them itself). */
  /* on CUDA the fused attention keeps only each row's logsumexp, and a
   * 16-bit run's GEMM-only activations take 16 bits (gpt2_act16.h) */
  {
    int cuda = !strcmp(tr.info.backend, "cuda");
    gpt2_acts_layout_init(&tr.L, &tr.cfg, tr.B, tr.nckpt,
                          (cuda ? GPT2_ACTS_LSE_ONLY : 0) |
                              (cuda && tr.info.dtype != ZRT_F32 ? GPT2_ACTS_HALF16 : 0));
  }
  /* the CUDA ops' scratch: 16-bit GEMM operands, attention statistics */
  size_t scratch_bytes = 0;
  if (!strcmp(tr.info.backend, "cuda"))
    scratch_bytes = gpt2_cuda_scratch_bytes(&tr.cfg, tr.B, tr.info.dtype);
  {
    uint64_t act = (uint64_t)tr.L.total * 4 + wte_n * 4 + 2 * N * sizeof(int) + scratch_bytes +
                   (tr.accum > 1 ? (uint64_t)tr.accum * N * sizeof(float) : 0);
    if (tr.info.dtype != ZRT_F32)
      act += (uint64_t)(largest_staged(&tr, reads16) + largest_staged(&tr, grad_direct)) * 4 +
             (tr.w16 ? 0 : wte_n * 4);
    CHECK(zrt_engine_set_activation_bytes(tr.eng, act));
  }
  CHECK(zrt_engine_build(tr.eng));
  if (a.init) {
    /* Tensors of a Hugging Face GPT-2 that are no parameter here: the
     * causal-mask buffers of older exports, and lm_head (compared below). */
    static const char *const unused_ok[] = {"lm_head.weight", "h.*.attn.bias",
                                            "h.*.attn.masked_bias", NULL};
    CHECK(zrt_engine_load_safetensors_ex(tr.eng, a.init, unused_ok));
    /* A Hugging Face GPT2LMHeadModel may carry lm_head.weight; the head
     * here is wte, so it must be absent (save_pretrained drops tied
     * copies) or equal. */
    int same = -1;
    CHECK(zrt_weights_compare(a.init, "lm_head.weight", "wte.weight", &same));
    if (same == 0) {
      if (rank0)
        fprintf(stderr,
                "train_gpt2: --init %s: lm_head.weight differs from wte.weight; the GPT example "
                "ties the LM head to the token embedding (GPT-2's tie_word_embeddings)\n",
                a.init);
      goto fail;
    }
  }

  CHECK(
      zrt_engine_alloc(tr.eng, tr.L.total * sizeof(float), ZRT_MEM_ACTIVATIONS, (void **)&tr.acts));
  CHECK(zrt_engine_alloc(tr.eng, wte_n * sizeof(float), ZRT_MEM_ACTIVATIONS, (void **)&tr.dwte));
  CHECK(zrt_engine_alloc(tr.eng, 2 * N * sizeof(int), ZRT_MEM_ACTIVATIONS, (void **)&tr.d_tok));
  if (tr.accum > 1)
    CHECK(zrt_engine_alloc(tr.eng, (size_t)tr.accum * N * sizeof(float), ZRT_MEM_ACTIVATIONS,
                           (void **)&tr.loss_win));
  tr.d_tgt = tr.d_tok + N;
  if (tr.info.dtype != ZRT_F32) {
    tr.wstage_n = largest_staged(&tr, reads16);
    tr.gstage_n = largest_staged(&tr, grad_direct);
    CHECK(zrt_engine_alloc(tr.eng, (size_t)tr.wstage_n * sizeof(float), ZRT_MEM_ACTIVATIONS,
                           (void **)&tr.wstage));
    CHECK(zrt_engine_alloc(tr.eng, (size_t)tr.gstage_n * sizeof(float), ZRT_MEM_ACTIVATIONS,
                           (void **)&tr.gstage));
    if (!tr.w16) /* the head's GEMMs read the 16-bit wte on CUDA */
      CHECK(zrt_engine_alloc(tr.eng, wte_n * sizeof(float), ZRT_MEM_ACTIVATIONS,
                             (void **)&tr.wte_stage));
  }
  if (scratch_bytes) {
    CHECK(zrt_engine_alloc(tr.eng, scratch_bytes, ZRT_MEM_ACTIVATIONS, &tr.scratch));
#ifdef GPT2_HAVE_CUDA
    gpt2_cuda_gemm_setup(tr.info.dtype, tr.scratch, scratch_bytes);
#endif
  }
  /* the uploads' source: no host wait per upload on cuda (pinned) */
  CHECK(zrt_engine_host_alloc(tr.eng, (size_t)tr.accum * 2 * N * sizeof(int), ZRT_MEM_ACTIVATIONS,
                              (void **)&tr.h_tokens));
  use_slice(&tr, 0);
  /* the read-backs' destinations stay pageable: a copy into them is the
   * host wait that returns the data (into zrt_engine_host_alloc memory it
   * would be queued, and the host would have to wait apart) */
  tr.h_losses = malloc((size_t)tr.accum * N * sizeof(float));
  /* V floats, and room past them for a 16-bit logits row (sample) */
  tr.h_logits = malloc((size_t)tr.cfg.vocab * (sizeof(float) + 2));
  if (!tr.h_losses || !tr.h_logits) goto fail;
  /* A 16-bit run's 16-bit activations (gpt2_act16.h): the CUDA ops keep
   * them in the run's dtype; on every backend the audit checks that only
   * their producers and GEMMs touch them. */
  static gpt2_ops_f32 a16_inner;
  if (tr.info.dtype != ZRT_F32) {
    CHECK(gpt2_a16_set(&tr.L, &tr.cfg, tr.B, tr.acts));
    a16_inner = tr.ops;
    gpt2_a16_audit_start(&a16_inner, &tr.ops);
  }

  uint64_t rng = a.seed ? a.seed : 1;
  int64_t start_step = 0, start_row = 0;
  if (a.resume) {
    /* Collective; every rank returns the same status and message. */
    zrt_status ls = zrt_engine_load(tr.eng, a.resume, &user_json);
    if (ls != ZRT_OK) {
      if (rank0)
        fprintf(stderr,
                "train_gpt2: --resume %s failed (%s): %s\n  nothing was loaded and the checkpoint "
                "is unchanged on disk\n",
                a.resume, zrt_status_string(ls), zrt_last_error());
      goto fail;
    }
    uint64_t v;
    if (json_u64(user_json, "step", &v) == 0) start_step = (int64_t)v;
    if (json_u64(user_json, "rng", &v) == 0) rng = v;
    /* The data position carries over as a row of the window stream, so a
     * resume with another world size or micro-batch continues the stream
     * where it stopped (checkpoints without it: step * global batch). */
    start_row = start_step * tr.info.train_batch;
    if (json_u64(user_json, "next_row", &v) == 0) start_row = (int64_t)v;
    /* data_bytes: checkpoints written before token data */
    if (rank0 &&
        (json_u64(user_json, "data_tokens", &v) == 0 ||
         json_u64(user_json, "data_bytes", &v) == 0) &&
        (int64_t)v != data.n)
      fprintf(stderr,
              "train_gpt2: warning: --resume %s was trained on %llu tokens of data, --data %s has "
              "%lld: the data stream does not continue where it stopped\n",
              a.resume, (unsigned long long)v, a.data, (long long)data.n);
    if (rank0 && json_u64(user_json, "seq_len", &v) == 0 && (int)v != T)
      fprintf(stderr,
              "train_gpt2: warning: --resume %s was trained with --seq_len %llu, this run uses "
              "%d: the data windows differ\n",
              a.resume, (unsigned long long)v, T);
    if (rank0)
      printf("resumed from %s at step %lld (data row %lld)\n", a.resume, (long long)start_step,
             (long long)start_row);
  }
  /* before step 1: another job saving into the same DIR stops here, named */
  if (a.save) CHECK(zrt_engine_save_claim(tr.eng, a.save));
  keep.resumed = a.resume && a.save ? keep_resumed_from(a.save, a.resume, start_step) : -1;
  if (!a.eval_only) {
    /* Start-up is over: from here a signal stops the run after a step and
     * a save. The barrier makes that true on every rank before the banner
     * (which tells a watcher the handlers have switched). */
    g_in_loop = 1;
    CHECK(zrt_engine_barrier(tr.eng));
  }
  if (rank0) {
    double step_gflop = gpt2_flops_per_token(&tr.cfg) * (double)T * (double)tr.info.micro_batch *
                        (double)tr.info.grad_accum / 1e9;
    printf("train_gpt2: model %s (%d layers, %d heads, %d embd, %d positions, seq %d, vocab %d): "
           "%.2fM params, %.4g GFLOP per rank per step; backend %s, comm %s, dtype %s, ZeRO stage "
           "%d, %d rank(s), micro-batch %lld, accum %lld, global batch %lld; data %s (%lld %s, %d "
           "file(s))\n",
           a.model, tr.cfg.n_layer, tr.cfg.n_head, tr.cfg.n_embd, tr.cfg.n_ctx, T, tr.cfg.vocab,
           (double)gpt2_num_params(&tr.cfg) / 1e6, step_gflop, tr.info.backend, tr.info.comm,
           zrt_dtype_name(tr.info.dtype), tr.info.zero_stage, tr.info.world_size,
           (long long)tr.info.micro_batch, (long long)tr.info.grad_accum,
           (long long)tr.info.train_batch, a.data, (long long)data.n,
           data.tokens ? "tokens" : "bytes", data.nshards);
    fflush(stdout);
  }

  if (a.eval_only) {
    double mean;
    CHECK(evaluate(&tr, &all_sp, T + 1, a.eval_batches, &mean));
    if (rank0) {
      /* eval_loss_exact: all the digits, for comparisons tighter than 1e-6 */
      printf("{\"eval_loss\": %.6f, \"batches\": %d, \"tokens\": %lld, \"eval_loss_exact\": "
             "%.9g}\n",
             mean, a.eval_batches, (long long)a.eval_batches * tr.info.world_size * tr.B * T, mean);
      fflush(stdout);
    }
    rc = 0;
    goto done;
  }

  int tty = isatty(2) && rank0;
  int64_t accum = tr.accum;
  int64_t step = start_step;
  /* rows of the window stream one optimizer step consumes, all ranks */
  int64_t rows_per_step = accum * tr.info.world_size * tr.B;
  if (rank0 && a.resume && start_step >= a.steps)
    printf("nothing to train: the checkpoint is at step %lld and --steps is %lld (the total "
           "optimizer steps of the run)\n",
           (long long)start_step, (long long)a.steps);
  /* MFU: the model's FLOPs per rank per step over the measured GEMM rate */
  double step_flop =
      gpt2_flops_per_token(&tr.cfg) * (double)T * (double)tr.info.micro_batch * (double)accum;
  double peak = measure_gemm_peak(&tr, !strcmp(tr.info.backend, "cuda"));
  if (rank0 && peak > 0) {
    printf("train_gpt2: measured %s %s GEMM peak %.1f GFLOP/s per rank (MFU denominator)\n",
           tr.info.backend, tr.w16 ? zrt_dtype_name(tr.info.dtype) : "fp32", peak / 1e9);
    fflush(stdout);
  }
  /* --profile_ops: the kernels from here on, by kind (gpt2_prof.h) */
  static gpt2_ops_f32 prof_inner;
  if (a.profile_ops) {
    gpt2_prof_clock clk;
    gpt2_prof_wall_clock(&clk, tr.eng);
#ifdef GPT2_HAVE_CUDA
    if (!strcmp(tr.info.backend, "cuda")) CHECK(gpt2_cuda_prof_clock(&clk));
#endif
    prof_inner = tr.ops;
    CHECK(gpt2_prof_start(&prof_inner, &clk, &tr.ops));
  }
  double t_start = now_s(), t_last = t_start;
  for (; step < a.steps; step++) {
    zrt_step_info si = {0};
    for (int64_t ai = 0; ai < accum; ai++) {
      use_slice(&tr, ai); /* refilled after the last window's read-back */
      for (int b = 0; b < tr.B; b++) {
        int64_t row = start_row + (step - start_step) * rows_per_step +
                      ((ai * tr.info.world_size) + tr.info.rank) * tr.B + b;
        fill_row(&train_sp, row, T, T, 1, tr.h_tok + b * T, tr.h_tgt + b * T);
      }
      /* the losses come back once, at the window's last micro-batch: the
       * host queues the next micro-batch while the device runs this one */
      float loss = 0.0f;
      CHECK(upload_batch(&tr));
      CHECK(run_micro(&tr, 1, NULL, ai));
      if (ai == accum - 1) CHECK(read_window_losses(&tr, accum, &loss));
      if (ai == accum - 1 && g_stop_signal) CHECK(zrt_engine_request_stop(tr.eng));
      CHECK(zrt_engine_step(tr.eng, loss, &si));
    }
    double t = now_s(), dt = t - t_last;
    t_last = t;
    if (a.profile_ops) CHECK(gpt2_prof_step_end(dt));
    if (rank0) {
      zrt_mem_stats ms;
      char mb[32] = "?", el[32], eta[32], mfu[32] = "";
      if (zrt_engine_memory(tr.eng, ZRT_MEM_DEVICE, &ms) == ZRT_OK)
        fmt_bytes(ms.peak_total, mb, sizeof mb);
      double done_steps = (double)(step + 1 - start_step), elapsed = t - t_start;
      fmt_duration(elapsed, el, sizeof el);
      fmt_duration(elapsed / done_steps * (double)(a.steps - step - 1), eta, sizeof eta);
      if (peak > 0) snprintf(mfu, sizeof mfu, " mfu %.1f%%", 100.0 * step_flop / dt / peak);
      fprintf(tty ? stderr : stdout,
              "%sstep %lld/%lld loss %.4f lr %.3g norm %.3f scale %g%s tok/s %.0f%s peak mem %s "
              "elapsed %s eta %s%s",
              tty ? "\r" : "", (long long)(step + 1), (long long)a.steps, si.loss, si.lr,
              si.grad_norm, si.loss_scale, si.skipped ? " (skipped)" : "",
              (double)tr.info.train_batch * T / dt, mfu, mb, el, eta, tty ? "   " : "\n");
      fflush(tty ? stderr : stdout);
    }
    int last = step + 1 == a.steps;
    /* every rank stops after the same step when any rank got a signal (the
     * boundary's all-reduce carried the requests: si.stop agrees) */
    /* a signal during the last step: the run is complete, it ends as usual */
    int stop = si.stop && !last;
    if (a.val_every && !stop && ((step + 1) % a.val_every == 0 || last)) {
      double vl;
      CHECK(evaluate(&tr, &val_sp, T, a.val_batches, &vl));
      if (rank0) {
        printf("%sstep %lld val loss %.4f\n", tty ? "\n" : "", (long long)(step + 1), vl);
        fflush(stdout);
      }
    }
    if (a.save && ((a.save_interval && (step + 1) % a.save_interval == 0) || last || stop)) {
      char uj[512];
      user_json_write(uj, sizeof uj, &a, &tr, step + 1,
                      start_row + (step + 1 - start_step) * rows_per_step, rng, data.n);
      CHECK(zrt_engine_save(tr.eng, a.save, uj));
      if (rank0) {
        printf("%ssaved checkpoint step %lld to %s\n", tty ? "\n" : "", (long long)(step + 1),
               a.save);
        if (a.keep_last) prune_checkpoints(a.save, a.keep_last, &keep, step + 1);
        fflush(stdout);
      }
    }
    if (stop) {
      if (rank0) {
        printf("%sinterrupted (%s) after step %lld of %lld: %s\n", tty ? "\n" : "",
               g_stop_signal ? strsignal(g_stop_signal) : "signal on another rank",
               (long long)(step + 1), (long long)a.steps,
               a.save ? "checkpoint saved; continue with --resume on the same --save DIR"
                      : "no --save DIR was given, nothing was saved");
        fflush(stdout);
      }
      rc = GPT2_EXIT_INTERRUPTED;
      goto done;
    }
  }
  if (tty) fprintf(stderr, "\n");
  if (a.profile_ops) { /* the kernels unwrapped again (sampling runs them after) */
    tr.ops = prof_inner;
    CHECK(gpt2_prof_finish(rank0 ? a.profile_ops : NULL, 2, rank0));
  }
  if (a.sample > 0) CHECK(sample_text(&tr, &val_sp, a.sample, a.temperature, &rng));
  rc = 0;
  goto done;

fail:
  rc = 1;
done:
  if (tr.eng) {
    void *bufs[] = {tr.acts,   tr.dwte,      tr.d_tok,   tr.wstage,
                    tr.gstage, tr.wte_stage, tr.scratch, tr.loss_win};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
      if (bufs[i]) zrt_engine_free(tr.eng, bufs[i]);
    if (tr.h_tokens && zrt_engine_host_free(tr.eng, tr.h_tokens) != ZRT_OK)
      fprintf(stderr, "train_gpt2: zrt_engine_host_free: %s\n", zrt_last_error());
  }
  zrt_engine_destroy(tr.eng);
  /* after the engine: no queued task (the twin's) reads them any more */
  gpt2_a16_clear();
  gpt2_emu_cuda_done();
  zrt_config_destroy(zc);
  free(keep.saved);
  free(user_json);
  free(tr.mod_id);
  free(tr.pid);
  free(tr.numel);
  free(tr.h_losses);
  free(tr.h_logits);
  gpt2_data_close(&data);
  gpt2_data_close(&vdata);
  return rc;
}
