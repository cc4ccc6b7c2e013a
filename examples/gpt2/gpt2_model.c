/*
 * gpt2_model.c — GPT-2 shape presets, the parameter table (Hugging Face
 * names and Conv1D shapes, GPT-2 initialisation), the activation layout, the
 * working-dtype conversions, the vectorisable float exp / tanh, the CPU
 * thread setup (one OpenMP pool, OpenBLAS single-threaded), and the float /
 * double instantiations of the CPU kernels and module passes
 * (gpt2_ops_impl.h).
 *
 * Invariant: the parameter table is the single source of the model's names,
 * shapes, init and weight-decay flags; the trainer registers exactly it and
 * the torch reference (scripts/gpt2_torch_ref.py) mirrors it.
 */
#include "gpt2_model.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpt2_rows.h"

/* exp and tanh of the float kernels, branch-free so that the `omp simd`
 * loops vectorise them (libm's are scalar calls and were a tenth of a
 * step). exp: n = round(x log2 e) by the 1.5 * 2^23 trick, r = x - n ln2
 * with ln2 in two parts, Cephes' polynomial on |r| <= ln2 / 2, 2^n built as
 * an exponent; about 1 ulp, 0 below -87.3 (the callers only pass x <= 0),
 * NaN propagates. tanh from exp(-2|u|): absolute error ~1e-7 near 0, which
 * is what GELU's 1 + tanh needs. The double kernels keep libm. */
static inline float gpt2_expf(float x) {
  float xc = x < -87.3f ? -87.3f : x > 88.0f ? 88.0f : x;
  float t = xc * 1.44269504088896341f + 12582912.0f;
  float n = t - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  /* 2^n from t's mantissa bits; unsigned so that out-of-range and NaN
   * lanes (discarded below) wrap instead of overflowing */
  uint32_t ti, ei;
  memcpy(&ti, &t, 4);
  ei = (ti - 0x4B400000u + 127u) << 23;
  float sc;
  memcpy(&sc, &ei, 4);
  float y = x < -87.3f ? 0.0f : p * sc;
  return x != x ? x : y;
}

static inline float gpt2_tanhf(float u) {
  float e = gpt2_expf(-2.0f * fabsf(u));
  return copysignf((1.0f - e) / (1.0f + e), u);
}

/* Below ~2 MFLOP a GEMM is not worth a parallel region. */
#define GPT2_GEMM_SPLIT_MIN 1e6
#define GPT2_REAL float
#define GPT2_SFX(n) n##_f32
#define GPT2_IS_FLOAT 1
#include "gpt2_ops_impl.h"
#undef GPT2_REAL
#undef GPT2_SFX
#undef GPT2_IS_FLOAT
#define GPT2_REAL double
#define GPT2_SFX(n) n##_f64
#define GPT2_IS_FLOAT 0
#include "gpt2_ops_impl.h"
#undef GPT2_REAL
#undef GPT2_SFX
#undef GPT2_IS_FLOAT

int gpt2_config_preset(const char *name, gpt2_config *cfg) {
  static const struct {
    const char *name;
    int l, h, c, ctx, seq;
  } presets[] = {
      {"tiny", 2, 2, 64, 64, 64},
      {"gpt2", 12, 12, 768, 1024, 1024},
      {"gpt2-medium", 24, 16, 1024, 1024, 1024},
      {"gpt2-large", 36, 20, 1280, 1024, 1024},
      {"gpt2-xl", 48, 25, 1600, 1024, 1024},
  };
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
    if (strcmp(presets[i].name, name) == 0) {
      cfg->n_layer = presets[i].l;
      cfg->n_head = presets[i].h;
      cfg->n_embd = presets[i].c;
      cfg->n_ctx = presets[i].ctx;
      cfg->seq_len = presets[i].seq;
      cfg->vocab = GPT2_VOCAB;
      return 0;
    }
  }
  return -1;
}

int gpt2_config_validate(const gpt2_config *cfg, char *msg, size_t len) {
  if (cfg->n_layer < 1 || cfg->n_head < 1 || cfg->n_embd < 1 || cfg->seq_len < 1) {
    snprintf(msg, len,
             "--n_layer, --n_head, --n_embd and --seq_len must be >= 1 (got %d, %d, %d, %d)",
             cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->seq_len);
    return -1;
  }
  if (cfg->n_embd % cfg->n_head != 0) {
    snprintf(msg, len,
             "--n_embd %d is not divisible by --n_head %d: pick a head count that divides it",
             cfg->n_embd, cfg->n_head);
    return -1;
  }
  if (cfg->seq_len > cfg->n_ctx) {
    snprintf(msg, len,
             "--seq_len %d exceeds n_positions %d (the rows of the position table wpe): pass a "
             "shorter --seq_len%s",
             cfg->seq_len, cfg->n_ctx,
             " or, for a model made here, --n_positions N (an HF model's is in its config.json)");
    return -1;
  }
  if (cfg->vocab < 1 || cfg->n_ctx < 1) {
    snprintf(msg, len, "--vocab_size and --n_positions must be >= 1 (got %d, %d)", cfg->vocab,
             cfg->n_ctx);
    return -1;
  }
  return 0;
}

/* A config.json is a few hundred bytes; this only bounds the allocation. */
#define GPT2_HF_CONFIG_MAX (16L << 20)

int gpt2_config_from_hf(const char *dir, gpt2_config *cfg, char *msg, size_t len) {
  char path[4200];
  snprintf(path, sizeof path, "%s/config.json", dir);
  /* none there: a safetensors file or directory without one */
  struct stat lb;
  if (lstat(path, &lb) != 0 && errno == ENOENT) return 0;
  /* anything else is read by zrt's rule: a FIFO (or a directory, a
   * device) is an error naming it, never a hang in open() */
  int fd;
  if (zrt_file_open_read(path, "Hugging Face config", &fd) != ZRT_OK) {
    snprintf(msg, len, "%s", zrt_last_error());
    return -1;
  }
  FILE *f = fdopen(fd, "rb");
  struct stat sb;
  if (!f || fstat(fd, &sb) != 0 || sb.st_size > GPT2_HF_CONFIG_MAX) {
    snprintf(msg, len, "cannot read %s%s", path,
             f && sb.st_size > GPT2_HF_CONFIG_MAX ? ": larger than any Hugging Face config" : "");
    if (f)
      fclose(f);
    else
      close(fd);
    return -1;
  }
  long n = (long)sb.st_size;
  char *txt = malloc((size_t)n + 1);
  int rc = -1;
  if (!txt || fread(txt, 1, (size_t)n, f) != (size_t)n) {
    snprintf(msg, len, "cannot read %s", path);
    fclose(f);
    free(txt);
    return -1;
  }
  fclose(f);
  txt[n] = '\0';
  cJSON *c = cJSON_Parse(txt);
  free(txt);
  if (!cJSON_IsObject(c)) {
    snprintf(msg, len, "%s is not a JSON object", path);
    goto done;
  }
  const struct {
    const char *key, *alt;
    int *dst;
  } ints[] = {{"n_layer", NULL, &cfg->n_layer},
              {"n_head", NULL, &cfg->n_head},
              {"n_embd", NULL, &cfg->n_embd},
              {"n_positions", "n_ctx", &cfg->n_ctx},
              {"vocab_size", NULL, &cfg->vocab}};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, ints[i].key);
    if (!v && ints[i].alt) v = cJSON_GetObjectItemCaseSensitive(c, ints[i].alt);
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 1e9 ||
        v->valuedouble != (double)(int)v->valuedouble) {
      snprintf(msg, len, "%s: \"%s\" must be a positive integer (GPT2Config)", path, ints[i].key);
      goto done;
    }
    *ints[i].dst = (int)v->valuedouble;
  }
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(c, "model_type");
  if (mt && (!cJSON_IsString(mt) || strcmp(mt->valuestring, "gpt2"))) {
    snprintf(msg, len, "%s: model_type is %s; the GPT example loads \"gpt2\" models", path,
             cJSON_IsString(mt) ? mt->valuestring : "not a string");
    goto done;
  }
  const cJSON *eps = cJSON_GetObjectItemCaseSensitive(c, "layer_norm_epsilon");
  if (eps && (!cJSON_IsNumber(eps) || fabs(eps->valuedouble - 1e-5) > 1e-12)) {
    snprintf(msg, len, "%s: layer_norm_epsilon %g; the kernels use GPT-2's 1e-5", path,
             cJSON_IsNumber(eps) ? eps->valuedouble : NAN);
    goto done;
  }
  const cJSON *act = cJSON_GetObjectItemCaseSensitive(c, "activation_function");
  if (act && (!cJSON_IsString(act) || (strcmp(act->valuestring, "gelu_new") &&
                                       strcmp(act->valuestring, "gelu_pytorch_tanh")))) {
    snprintf(msg, len,
             "%s: activation_function \"%s\"; the kernels compute GELU's tanh form (gelu_new, "
             "gelu_pytorch_tanh)",
             path, cJSON_IsString(act) ? act->valuestring : "?");
    goto done;
  }
  const cJSON *inner = cJSON_GetObjectItemCaseSensitive(c, "n_inner");
  if (inner && !cJSON_IsNull(inner) &&
      !(cJSON_IsNumber(inner) && inner->valuedouble == 4.0 * cfg->n_embd)) {
    snprintf(msg, len, "%s: n_inner %g; the MLP is 4 * n_embd = %d wide (n_inner null)", path,
             cJSON_IsNumber(inner) ? inner->valuedouble : NAN, 4 * cfg->n_embd);
    goto done;
  }
  const cJSON *tie = cJSON_GetObjectItemCaseSensitive(c, "tie_word_embeddings");
  if (cJSON_IsFalse(tie)) {
    snprintf(msg, len, "%s: tie_word_embeddings is false; the GPT example's LM head is wte", path);
    goto done;
  }
  const cJSON *li = cJSON_GetObjectItemCaseSensitive(c, "scale_attn_by_inverse_layer_idx");
  const cJSON *sw = cJSON_GetObjectItemCaseSensitive(c, "scale_attn_weights");
  if (cJSON_IsTrue(li) || cJSON_IsFalse(sw)) {
    snprintf(msg, len,
             "%s: attention scaling other than 1/sqrt(head size) (scale_attn_weights false or "
             "scale_attn_by_inverse_layer_idx true) is not implemented",
             path);
    goto done;
  }
  rc = 1;
done:
  cJSON_Delete(c);
  return rc;
}

static void spec(gpt2_param_spec *p, const char *name, int ndim, int64_t d0, int64_t d1,
                 zrt_init_kind kind, float a, unsigned flags) {
  snprintf(p->name, sizeof p->name, "%s", name);
  p->ndim = ndim;
  p->shape[0] = d0;
  p->shape[1] = d1;
  p->init.kind = kind;
  p->init.a = a;
  p->flags = flags;
}

int gpt2_module_params(const gpt2_config *cfg, int which, gpt2_param_spec *out) {
  int64_t C = cfg->n_embd;
  const unsigned nd = ZRT_PARAM_NO_DECAY;
  if (which < 0) {
    spec(&out[GPT2_WTE], "wte.weight", 2, cfg->vocab, C, ZRT_INIT_NORMAL, 0.02f, 0);
    spec(&out[GPT2_WPE], "wpe.weight", 2, cfg->n_ctx, C, ZRT_INIT_NORMAL, 0.02f, 0);
    return 2;
  }
  if (which >= cfg->n_layer) {
    spec(&out[GPT2_LNF_W], "ln_f.weight", 1, C, 0, ZRT_INIT_ONES, 0, nd);
    spec(&out[GPT2_LNF_B], "ln_f.bias", 1, C, 0, ZRT_INIT_ZEROS, 0, nd);
    return 2;
  }
  /* GPT-2 scales the init of the projections that write into the residual
   * stream by 1/sqrt(2 * n_layer) (two per block). */
  float resid = 0.02f / sqrtf(2.0f * (float)cfg->n_layer);
  char n[64];
#define P(idx, suffix, ndim, d0, d1, kind, a, fl)                                                  \
  do {                                                                                             \
    snprintf(n, sizeof n, "h.%d.%s", which, suffix);                                               \
    spec(&out[idx], n, ndim, d0, d1, kind, a, fl);                                                 \
  } while (0)
  P(GPT2_LN1_W, "ln_1.weight", 1, C, 0, ZRT_INIT_ONES, 0, nd);
  P(GPT2_LN1_B, "ln_1.bias", 1, C, 0, ZRT_INIT_ZEROS, 0, nd);
  P(GPT2_ATTN_W, "attn.c_attn.weight", 2, C, 3 * C, ZRT_INIT_NORMAL, 0.02f, 0);
  P(GPT2_ATTN_B, "attn.c_attn.bias", 1, 3 * C, 0, ZRT_INIT_ZEROS, 0, nd);
  P(GPT2_ATTNPROJ_W, "attn.c_proj.weight", 2, C, C, ZRT_INIT_NORMAL, resid, 0);
  P(GPT2_ATTNPROJ_B, "attn.c_proj.bias", 1, C, 0, ZRT_INIT_ZEROS, 0, nd);
  P(GPT2_LN2_W, "ln_2.weight", 1, C, 0, ZRT_INIT_ONES, 0, nd);
  P(GPT2_LN2_B, "ln_2.bias", 1, C, 0, ZRT_INIT_ZEROS, 0, nd);
  P(GPT2_FC_W, "mlp.c_fc.weight", 2, C, 4 * C, ZRT_INIT_NORMAL, 0.02f, 0);
  P(GPT2_FC_B, "mlp.c_fc.bias", 1, 4 * C, 0, ZRT_INIT_ZEROS, 0, nd);
  P(GPT2_FCPROJ_W, "mlp.c_proj.weight", 2, 4 * C, C, ZRT_INIT_NORMAL, resid, 0);
  P(GPT2_FCPROJ_B, "mlp.c_proj.bias", 1, C, 0, ZRT_INIT_ZEROS, 0, nd);
#undef P
  return GPT2_BLOCK_NPARAMS;
}

int64_t gpt2_param_numel(const gpt2_param_spec *p) {
  return p->ndim == 1 ? p->shape[0] : p->shape[0] * p->shape[1];
}

int64_t gpt2_num_params(const gpt2_config *cfg) {
  gpt2_param_spec ps[GPT2_BLOCK_NPARAMS];
  int64_t total = 0;
  for (int m = -1; m <= cfg->n_layer; m++) {
    int np = gpt2_module_params(cfg, m, ps);
    for (int i = 0; i < np; i++) total += gpt2_param_numel(&ps[i]);
  }
  return total;
}

double gpt2_flops_per_token(const gpt2_config *cfg) {
  double L = cfg->n_layer, C = cfg->n_embd, T = cfg->seq_len, V = cfg->vocab;
  return 6.0 * (L * 12.0 * C * C + V * C) + 6.0 * L * T * C;
}

size_t gpt2_cuda_scratch_bytes(const gpt2_config *cfg, int B, zrt_dtype dt) {
  size_t N = (size_t)B * (size_t)cfg->seq_len, C = (size_t)cfg->n_embd;
  size_t att = (size_t)B * (size_t)cfg->n_head * (size_t)cfg->seq_len * sizeof(float);
  /* the column reductions' partials (gpt2_rows.h): the LayerNorms' [S, 2C],
   * the biases' [S, OC] for OC = C, 3C, 4C (a 16-bit run's d4C slot holds
   * the GELU backward's and the attention backward's 16-bit gradients: no
   * held copy before them) */
  const int n = (int)N, c = (int)C;
  size_t ln = rw_part_floats(rw_ln_plan(n), 2 * c) * 4;
  size_t c1 = rw_part_floats(rw_col_plan(n, c), c) * 4;
  size_t c3 = rw_part_floats(rw_col_plan(n, 3 * c), 3 * c) * 4;
  size_t c4 = rw_part_floats(rw_col_plan(n, 4 * c), 4 * c) * 4;
  size_t red = ln > c1 ? ln : c1;
  if (c3 > red) red = c3;
  if (c4 > red) red = c4;
  if (att > red) red = att;
  if (dt == ZRT_F32) return red;
  /* the converted operands: with gpt2_act16.h's registry (which a 16-bit
   * run sets) every GEMM operand is a 16-bit weight or slot but the
   * residual stream's gradient dres, an N x C operand of the two
   * projections' dX GEMMs (their dW GEMMs reuse its copy): the activations
   * GEMMs read, fch and the logits written by GEMMs, d4C with the
   * gradients of the fcproj dX GEMM, the GELU and the attention */
  size_t one = (N * C * 2 + 255) / 256 * 256;
  return one > red ? one : red;
}

size_t gpt2_acts_block_input(const gpt2_acts_layout *L, int layer) {
  if (layer == 0) return L->encoded;
  int prev = layer - 1, slot = prev < L->nckpt ? 0 : prev - L->nckpt + (L->nckpt > 0);
  return L->layer_stride * (size_t)slot + L->res3;
}

int gpt2_acts_layer_slots(const gpt2_config *cfg, int nckpt) {
  return cfg->n_layer - nckpt + (nckpt > 0);
}

void gpt2_acts_layout_init(gpt2_acts_layout *L, const gpt2_config *cfg, int B, int nckpt,
                           int flags) {
  size_t T = (size_t)cfg->seq_len, C = (size_t)cfg->n_embd, NH = (size_t)cfg->n_head;
  size_t N = (size_t)B * T, off = 0;
  int lse_only = (flags & GPT2_ACTS_LSE_ONLY) != 0, h16 = (flags & GPT2_ACTS_HALF16) != 0;
  /* a 16-bit layout starts every buffer on 256 bytes (64 floats): the
   * GEMMs read its 16-bit slots in place, as aligned as the scratch */
#define ALIGN64(x) (h16 ? ((x) + 63) & ~(size_t)63 : (x))
  /* floats for n elements of a 16-bit slot (gpt2_act16.h) */
#define A16(n) (h16 ? ALIGN64(((n) + 1) / 2) : (n))
  memset(L, 0, sizeof *L);
  L->half16 = h16;
#define TAKE(field, n)                                                                             \
  do {                                                                                             \
    off = ALIGN64(off);                                                                            \
    L->field = off;                                                                                \
    off += (n);                                                                                    \
  } while (0)
  TAKE(encoded, N * C);
  size_t layer0 = ALIGN64(off);
  off = 0; /* per-layer offsets are relative to the layer base */
  TAKE(ln1, A16(N * C));
  TAKE(ln1_mean, N);
  TAKE(ln1_rstd, N);
  TAKE(qkv, 3 * N * C);
  TAKE(att, (size_t)B * NH * T * (lse_only ? 1 : T));
  TAKE(atty, A16(N * C));
  TAKE(res2, N * C);
  TAKE(ln2, A16(N * C));
  TAKE(ln2_mean, N);
  TAKE(ln2_rstd, N);
  TAKE(fch, A16(4 * N * C));
  TAKE(fch_gelu, A16(4 * N * C));
  TAKE(res3, N * C);
  L->layer_stride = ALIGN64(off); /* each layer slot aligned as the first */
  /* Shift the per-layer offsets so that acts + stride * l + field works. */
  L->ln1 += layer0, L->ln1_mean += layer0, L->ln1_rstd += layer0, L->qkv += layer0;
  L->att += layer0, L->atty += layer0, L->res2 += layer0, L->ln2 += layer0;
  L->ln2_mean += layer0, L->ln2_rstd += layer0, L->fch += layer0, L->fch_gelu += layer0;
  L->res3 += layer0;
  L->nckpt = nckpt;
  off = layer0 + L->layer_stride * (size_t)gpt2_acts_layer_slots(cfg, nckpt);
  TAKE(lnf, A16(N * C));
  TAKE(lnf_mean, N);
  TAKE(lnf_rstd, N);
  L->logits_ld = ((size_t)cfg->vocab + 63) & ~(size_t)63;
  TAKE(logits, A16(N * L->logits_ld));
  TAKE(losses, N);
  TAKE(dres, N * C);
  TAKE(dC, A16(N * C));
  TAKE(d4C, A16(4 * N * C));
#undef TAKE
#undef A16
#undef ALIGN64
  L->total = off;
}

/* ------------------------------------------------------- dtype staging */

float gpt2_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal: renormalise */
      int e = -1;
      do {
        e++;
        man <<= 1;
      } while (!(man & 0x400));
      bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 112) << 23 | man << 13;
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t gpt2_float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0);
  if (ax >= 0x477ff000u) return sign | 0x7c00; /* rounds past 65504 */
  if (ax < 0x38800000u) {                      /* fp16 subnormal or zero */
    float a;
    memcpy(&a, &ax, 4);
    /* a * 2^24 rounded to nearest even is the subnormal mantissa. */
    return sign | (uint16_t)nearbyintf(a * 16777216.0f);
  }
  uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u); /* round to nearest even */
  return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

float gpt2_bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t gpt2_float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

/* Staging loops: simd always, the team only above ~32k elements (a tiny
 * model's per-module arrays are far below, and waking the team for them
 * cost more than the copy). */
#define GPT2_STAGE_PAR_MIN ((int64_t)1 << 15)

void gpt2_to_f32(float *dst, const void *src, zrt_dtype dt, int64_t n) {
  const uint16_t *s = src;
  if (dt == ZRT_F32) {
    memcpy(dst, src, (size_t)n * 4);
  } else if (dt == ZRT_BF16) {
#pragma omp parallel for simd if (n >= GPT2_STAGE_PAR_MIN)
    for (int64_t i = 0; i < n; i++) dst[i] = gpt2_bf16_to_float(s[i]);
  } else {
#pragma omp parallel for simd if (n >= GPT2_STAGE_PAR_MIN)
    for (int64_t i = 0; i < n; i++) dst[i] = gpt2_half_to_float(s[i]);
  }
}

void gpt2_add_from_f32(void *dst, const float *src, zrt_dtype dt, int64_t n) {
  if (dt == ZRT_F32) {
    float *d = dst;
#pragma omp parallel for simd if (n >= GPT2_STAGE_PAR_MIN)
    for (int64_t i = 0; i < n; i++) d[i] += src[i];
  } else if (dt == ZRT_BF16) {
    uint16_t *d = dst;
#pragma omp parallel for simd if (n >= GPT2_STAGE_PAR_MIN)
    for (int64_t i = 0; i < n; i++) d[i] = gpt2_float_to_bf16(gpt2_bf16_to_float(d[i]) + src[i]);
  } else {
    uint16_t *d = dst;
#pragma omp parallel for simd if (n >= GPT2_STAGE_PAR_MIN)
    for (int64_t i = 0; i < n; i++) d[i] = gpt2_float_to_half(gpt2_half_to_float(d[i]) + src[i]);
  }
}
