/*
 * test_gpt2_gradcheck.c — checks the GPT-2 example's backward against
 * central finite differences of its forward, in float64, on a tiny model
 * (2 layers, 2 heads, 8 channels, T = 5, B = 2, vocab 250: the logits'
 * rows 256 apart, their 6 entries past the vocabulary NaN). The double
 * instantiation is the same source as the float kernels that train
 * (examples/gpt2/gpt2_ops_impl.h), so this checks the training code path.
 * Also: the float instantiation against the double one, the ADD semantics
 * of every gradient, and the fp16 / bf16 staging conversions exhaustively.
 *
 * Tolerances: finite differences with eps = 1e-5 in double have truncation
 * error ~eps^2 * |f'''| and rounding ~1e-16 / eps, both far below 1e-7,
 * the absolute tolerance used for gradients of size ~1e-3..1. The float
 * path is compared with 1e-5 (loss) and 5e-5 (gradients) absolute.
 *
 * Built by tests/CMakeLists.txt (unit label) with only zrt_testcommon, so it
 * compiles the example's model source directly.
 */
#include "../../examples/gpt2/gpt2_model.c"

#include <stdlib.h>

#include "ztest.h"

#define B 2
#define NMOD_MAX 8

static gpt2_config cfg;
static gpt2_acts_layout L;
static int nmod; /* modules: embed, blocks, final */
static int mod_np[NMOD_MAX];
static gpt2_param_spec specs[NMOD_MAX][GPT2_BLOCK_NPARAMS];
static double *w64[NMOD_MAX][GPT2_BLOCK_NPARAMS], *g64[NMOD_MAX][GPT2_BLOCK_NPARAMS];
static int tokens[B * 5], targets[B * 5];

static uint64_t rng = 88172645463325252ull;
static double urand(void) { /* xorshift64, uniform in [-1, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / (double)(1ull << 52) - 1.0;
}

/* Full micro-batch in double: forward, and backward when grads != 0.
 * Returns the mean loss. */
static double run64(double *acts, int grads) {
  const gpt2_ops_f64 *ops = &gpt2_cpu_ops_f64;
  int nl = cfg.n_layer, N = B * cfg.seq_len;
  ZT_OK(gpt2_embed_forward_f64(ops, &cfg, &L, acts, tokens, B, w64[0]));
  for (int l = 0; l < nl; l++)
    ZT_OK(gpt2_block_forward_f64(ops, &cfg, &L, acts, B, l, NULL, w64[1 + l]));
  ZT_OK(gpt2_head_f64(ops, &cfg, &L, acts, B, targets, w64[nl + 1], w64[0][GPT2_WTE], 1.0 / N,
                      grads ? g64[nl + 1] : NULL, g64[0][GPT2_WTE]));
  double loss = 0;
  for (int i = 0; i < N; i++) loss += acts[L.losses + i];
  if (grads) {
    for (int l = nl - 1; l >= 0; l--)
      ZT_OK(gpt2_block_backward_f64(ops, &cfg, &L, acts, B, l, NULL, w64[1 + l], g64[1 + l]));
    ZT_OK(gpt2_embed_backward_f64(ops, &cfg, &L, acts, tokens, B, g64[0]));
  }
  return loss / N;
}

static double run32(float *acts, float *(*w)[GPT2_BLOCK_NPARAMS], float *(*g)[GPT2_BLOCK_NPARAMS]) {
  const gpt2_ops_f32 *ops = &gpt2_cpu_ops_f32;
  int nl = cfg.n_layer, N = B * cfg.seq_len;
  ZT_OK(gpt2_embed_forward_f32(ops, &cfg, &L, acts, tokens, B, w[0]));
  for (int l = 0; l < nl; l++)
    ZT_OK(gpt2_block_forward_f32(ops, &cfg, &L, acts, B, l, NULL, w[1 + l]));
  ZT_OK(gpt2_head_f32(ops, &cfg, &L, acts, B, targets, w[nl + 1], w[0][GPT2_WTE], 1.0f / N,
                      g[nl + 1], g[0][GPT2_WTE]));
  for (int l = nl - 1; l >= 0; l--)
    ZT_OK(gpt2_block_backward_f32(ops, &cfg, &L, acts, B, l, NULL, w[1 + l], g[1 + l]));
  ZT_OK(gpt2_embed_backward_f32(ops, &cfg, &L, acts, tokens, B, g[0]));
  double loss = 0;
  for (int i = 0; i < N; i++) loss += acts[L.losses + i];
  return loss / N;
}

static void check_conversions(void) {
  /* Every finite 16-bit pattern survives a round trip through float. */
  int bad_h = 0, bad_b = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    if ((h & 0x7c00) != 0x7c00 && gpt2_float_to_half(gpt2_half_to_float((uint16_t)h)) != h) bad_h++;
    if ((h & 0x7f80) != 0x7f80 && gpt2_float_to_bf16(gpt2_bf16_to_float((uint16_t)h)) != h) bad_b++;
  }
  printf("fp16 round-trip mismatches: %d, bf16: %d (of 65536)\n", bad_h, bad_b);
  ZT_CHECK(bad_h == 0 && bad_b == 0);
  ZT_CHECK(gpt2_float_to_half(1.0f) == 0x3c00);
  ZT_CHECK(gpt2_float_to_half(65504.0f) == 0x7bff);
  ZT_CHECK(gpt2_float_to_half(70000.0f) == 0x7c00);
  ZT_CHECK(gpt2_float_to_half(1.0f + 1.0f / 2048) == 0x3c00); /* tie -> even */
  ZT_CHECK(gpt2_float_to_half(1.0f + 3.0f / 2048) == 0x3c02);
  ZT_CHECK(gpt2_float_to_bf16(1.0f) == 0x3f80);
  ZT_CHECK(gpt2_float_to_bf16(1.0f + 1.0f / 256) == 0x3f80); /* tie -> even */
  ZT_CHECK(gpt2_float_to_bf16(1.0f + 3.0f / 256) == 0x3f82);
  float x = 0.3f, y = 0;
  uint16_t acc16 = gpt2_float_to_bf16(1.0f);
  gpt2_add_from_f32(&acc16, &x, ZRT_BF16, 1);
  y = gpt2_bf16_to_float(acc16);
  printf("bf16 1 + 0.3 = %g\n", y);
  ZT_CHECK(fabsf(y - 1.3f) <= 1.0f / 128);
}

int main(void) {
  check_conversions();

  cfg =
      (gpt2_config){.n_layer = 2, .n_head = 2, .n_embd = 8, .n_ctx = 6, .seq_len = 5, .vocab = 250};
  char msg[256];
  ZT_CHECK(gpt2_config_validate(&cfg, msg, sizeof msg) == 0);
  gpt2_config badc = cfg;
  badc.n_head = 3;
  ZT_CHECK(gpt2_config_validate(&badc, msg, sizeof msg) != 0);
  ZT_CONTAINS(msg, "not divisible by --n_head 3");
  gpt2_config pre;
  ZT_CHECK(gpt2_config_preset("gpt2", &pre) == 0);
  printf("gpt2 preset: %lld parameters\n", (long long)gpt2_num_params(&pre));
  /* Blocks + ln_f are 85,056,000 as in GPT-2 124M (whose 50257-token wte
   * makes up the rest); here wte is 256 x 768. */
  ZT_CHECK(gpt2_num_params(&pre) == 85056000LL + 256LL * 768 + 1024LL * 768);
  ZT_CHECK(gpt2_config_preset("gpt3", &pre) != 0);

  gpt2_acts_layout_init(&L, &cfg, B, 0, 0);
  nmod = cfg.n_layer + 2;
  int64_t nparams = 0;
  for (int m = 0; m < nmod; m++) {
    mod_np[m] = gpt2_module_params(&cfg, m - 1, specs[m]);
    for (int p = 0; p < mod_np[m]; p++) {
      int64_t n = gpt2_param_numel(&specs[m][p]);
      nparams += n;
      w64[m][p] = malloc(n * sizeof(double));
      g64[m][p] = calloc(n, sizeof(double));
      for (int64_t i = 0; i < n; i++) {
        double base = specs[m][p].init.kind == ZRT_INIT_ONES ? 1.0 : 0.0;
        w64[m][p][i] = base + 0.3 * urand();
      }
    }
  }
  ZT_CHECK(nparams == gpt2_num_params(&cfg));
  ZT_CHECK(strcmp(specs[1][GPT2_ATTN_W].name, "h.0.attn.c_attn.weight") == 0);
  ZT_CHECK(specs[1][GPT2_ATTN_W].shape[0] == 8 && specs[1][GPT2_ATTN_W].shape[1] == 24);
  ZT_CHECK(specs[2][GPT2_FCPROJ_W].shape[0] == 32 &&
           specs[2][GPT2_FCPROJ_B].flags == ZRT_PARAM_NO_DECAY);
  for (int i = 0; i < B * cfg.seq_len; i++) {
    tokens[i] = ((int)((urand() + 1) * 128) & 255) % cfg.vocab;
    targets[i] = ((int)((urand() + 1) * 128) & 255) % cfg.vocab;
  }

  /* the logits' rows are padded (gpt2_acts_layout's logits_ld): NaN in
   * the padding, so that an op reading past the vocabulary fails */
  ZT_CHECK(L.logits_ld == 256);
  double *acts = calloc(L.total, sizeof(double));
  for (int i = 0; i < B * cfg.seq_len; i++)
    for (size_t v = (size_t)cfg.vocab; v < L.logits_ld; v++)
      acts[L.logits + (size_t)i * L.logits_ld + v] = NAN;
  double loss = run64(acts, 1);
  int pads_kept = 1; /* nor written */
  for (int i = 0; i < B * cfg.seq_len; i++)
    for (size_t v = (size_t)cfg.vocab; v < L.logits_ld; v++)
      pads_kept &= isnan(acts[L.logits + (size_t)i * L.logits_ld + v]) != 0;
  ZT_CHECK(pads_kept);
  printf("double loss %.9f (ln %d = %.6f)\n", loss, cfg.vocab, log((double)cfg.vocab));

  /* Central differences over every parameter element. */
  const double eps = 1e-5;
  double worst = 0;
  for (int m = 0; m < nmod; m++) {
    for (int p = 0; p < mod_np[m]; p++) {
      int64_t n = gpt2_param_numel(&specs[m][p]);
      double *fd = malloc(n * sizeof(double));
      for (int64_t i = 0; i < n; i++) {
        double keep = w64[m][p][i];
        w64[m][p][i] = keep + eps;
        double lp = run64(acts, 0);
        w64[m][p][i] = keep - eps;
        double lm = run64(acts, 0);
        w64[m][p][i] = keep;
        fd[i] = (lp - lm) / (2 * eps);
      }
      double mx = 0;
      for (int64_t i = 0; i < n; i++) mx = fmax(mx, fabs(fd[i]));
      char what[128];
      snprintf(what, sizeof what, "grad %s (max |g| %.3g)", specs[m][p].name, mx);
      ZT_CLOSE_ARRAY(what, g64[m][p], fd, n, 1e-7);
      ZT_CHECK(mx > 1e-6); /* every parameter must actually receive gradient */
      for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(fd[i] - g64[m][p][i]));
      free(fd);
    }
  }
  printf("worst |analytic - finite difference| over all parameters: %.3g\n", worst);

  /* Float instantiation vs double, and ADD semantics (grads start at 1). */
  float *acts32 = calloc(L.total, sizeof(float));
  for (int i = 0; i < B * cfg.seq_len; i++)
    for (size_t v = (size_t)cfg.vocab; v < L.logits_ld; v++)
      acts32[L.logits + (size_t)i * L.logits_ld + v] = NAN;
  float *w32[NMOD_MAX][GPT2_BLOCK_NPARAMS], *g32[NMOD_MAX][GPT2_BLOCK_NPARAMS];
  for (int m = 0; m < nmod; m++)
    for (int p = 0; p < mod_np[m]; p++) {
      int64_t n = gpt2_param_numel(&specs[m][p]);
      w32[m][p] = malloc(n * sizeof(float));
      g32[m][p] = malloc(n * sizeof(float));
      for (int64_t i = 0; i < n; i++) {
        w32[m][p][i] = (float)w64[m][p][i];
        g32[m][p][i] = 1.0f;
      }
    }
  double loss32 = run32(acts32, w32, g32);
  printf("float loss %.9f\n", loss32);
  double l32[1] = {loss32}, l64[1] = {loss};
  ZT_CLOSE_ARRAY("loss float vs double", l32, l64, 1, 1e-5);
  for (int m = 0; m < nmod; m++)
    for (int p = 0; p < mod_np[m]; p++) {
      int64_t n = gpt2_param_numel(&specs[m][p]);
      double *want = malloc(n * sizeof(double));
      for (int64_t i = 0; i < n; i++) want[i] = g64[m][p][i] + 1.0;
      char what[128];
      snprintf(what, sizeof what, "float grad %s (+1 accumulated)", specs[m][p].name);
      ZT_CLOSE_ARRAY(what, g32[m][p], want, n, 5e-5);
      free(want);
    }
  for (int m = 0; m < nmod; m++)
    for (int p = 0; p < mod_np[m]; p++) {
      free(w64[m][p]);
      free(g64[m][p]);
      free(w32[m][p]);
      free(g32[m][p]);
    }
  free(acts);
  free(acts32);
  ZT_DONE();
}
