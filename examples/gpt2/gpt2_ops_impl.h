/*
 * gpt2_ops_impl.h — the CPU kernels (OpenMP) and the per-module
 * forward/backward passes of GPT-2, written once and instantiated by
 * gpt2_model.c for float (training) and double (the float64 gradient check
 * runs exactly this code). No include guard: included once per type with
 * GPT2_REAL / GPT2_SFX defined.
 *
 * The passes only touch memory through the ops table, so they run on the
 * CUDA kernels as well. Kernel parallelisation never lets two threads add
 * into the same element: reductions over rows (weight / bias gradients,
 * embedding gradients) are split over column blocks instead, and GEMMs are
 * split over output rows / columns only (never K). Inner loops are `omp
 * simd`; their reductions have a fixed order set at compile time, so
 * results do not depend on thread scheduling.
 */

#define R GPT2_REAL
#define S GPT2_SFX
#define R_EXP(x) _Generic((x), float : gpt2_expf, default : exp)(x)
#define R_LOG(x) _Generic((x), float : logf, default : log)(x)
#define R_TANH(x) _Generic((x), float : gpt2_tanhf, default : tanh)(x)
#define R_SQRT(x) _Generic((x), float : sqrtf, default : sqrt)(x)
#define COLBLK 64
/* Elements (or multiply-adds) below which a kernel runs on the calling
 * thread: waking the team costs more than the loop. */
#define PAR_MIN ((size_t)1 << 15)

static void S(cpu_zero)(R *p, size_t n) { memset(p, 0, n * sizeof(R)); }

static zrt_status S(cpu_gemm_naive)(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                                    const R *a, int64_t lda, const R *b, int64_t ldb, float beta,
                                    R *c, int64_t ldc) {
#pragma omp parallel for
  for (int64_t i = 0; i < m; i++) {
    for (int64_t j = 0; j < n; j++) {
      double acc = 0;
      for (int64_t p = 0; p < k; p++) {
        double av = ta ? a[p * lda + i] : a[i * lda + p];
        double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        acc += av * bv;
      }
      R *cij = &c[i * ldc + j];
      *cij = (R)(alpha * acc + (beta == 0.0f ? 0.0 : beta * (double)*cij));
    }
  }
  return ZRT_OK;
}

static void S(cpu_encoder_forward)(R *out, const int *tok, const R *wte, const R *wpe, int B, int T,
                                   int C) {
#pragma omp parallel for if ((size_t)B * T * C >= PAR_MIN)
  for (int bt = 0; bt < B * T; bt++) {
    const R *e = wte + (size_t)tok[bt] * C, *p = wpe + (size_t)(bt % T) * C;
    R *o = out + (size_t)bt * C;
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
  }
}

static void S(cpu_encoder_backward)(R *dwte, R *dwpe, const R *dout, const int *tok, int B, int T,
                                    int C) {
  /* Tokens repeat, so wte rows are owned by column block, not by position. */
#pragma omp parallel for if ((size_t)B * T * C >= PAR_MIN)
  for (int c0 = 0; c0 < C; c0 += COLBLK) {
    int c1 = c0 + COLBLK < C ? c0 + COLBLK : C;
    for (int bt = 0; bt < B * T; bt++) {
      const R *d = dout + (size_t)bt * C;
      R *w = dwte + (size_t)tok[bt] * C;
#pragma omp simd
      for (int c = c0; c < c1; c++) w[c] += d[c];
    }
  }
#pragma omp parallel for if ((size_t)B * T * C >= PAR_MIN)
  for (int t = 0; t < T; t++) {
    R *w = dwpe + (size_t)t * C;
    for (int b = 0; b < B; b++) {
      const R *d = dout + ((size_t)b * T + t) * C;
#pragma omp simd
      for (int c = 0; c < C; c++) w[c] += d[c];
    }
  }
}

static void S(cpu_layernorm_forward)(R *out, R *mean, R *rstd, const R *inp, const R *w, const R *b,
                                     int N, int C) {
#pragma omp parallel for if ((size_t)N * C >= PAR_MIN)
  for (int i = 0; i < N; i++) {
    const R *x = inp + (size_t)i * C;
    R m = 0, v = 0;
#pragma omp simd reduction(+ : m)
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    v /= C;
    R s = (R)1 / R_SQRT(v + (R)1e-5);
    R *o = out + (size_t)i * C;
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
    mean[i] = m;
    rstd[i] = s;
  }
}

static void S(cpu_layernorm_backward)(R *dinp, R *dw, R *db, const R *dout, const R *inp,
                                      const R *w, const R *mean, const R *rstd, int N, int C) {
#pragma omp parallel for if ((size_t)N * C >= PAR_MIN)
  for (int i = 0; i < N; i++) {
    const R *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
    R m = mean[i], s = rstd[i], dn_mean = 0, dn_norm_mean = 0;
#pragma omp simd reduction(+ : dn_mean, dn_norm_mean)
    for (int c = 0; c < C; c++) {
      R dn = w[c] * d[c];
      dn_mean += dn;
      dn_norm_mean += dn * (x[c] - m) * s;
    }
    dn_mean /= C;
    dn_norm_mean /= C;
    R *di = dinp + (size_t)i * C;
#pragma omp simd
    for (int c = 0; c < C; c++) {
      R norm = (x[c] - m) * s;
      di[c] += (w[c] * d[c] - dn_mean - norm * dn_norm_mean) * s;
    }
  }
#pragma omp parallel for if ((size_t)N * C >= PAR_MIN)
  for (int c0 = 0; c0 < C; c0 += COLBLK) {
    int c1 = c0 + COLBLK < C ? c0 + COLBLK : C;
    R aw[COLBLK] = {0}, ab[COLBLK] = {0};
    for (int i = 0; i < N; i++) {
      const R *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
      R m = mean[i], s = rstd[i];
#pragma omp simd
      for (int c = c0; c < c1; c++) {
        aw[c - c0] += (x[c] - m) * s * d[c];
        ab[c - c0] += d[c];
      }
    }
    for (int c = c0; c < c1; c++) {
      dw[c] += aw[c - c0];
      db[c] += ab[c - c0];
    }
  }
}

static void S(cpu_bias_backward)(R *db, const R *dout, int N, int OC) {
#pragma omp parallel for if ((size_t)N * OC >= PAR_MIN)
  for (int c0 = 0; c0 < OC; c0 += COLBLK) {
    int c1 = c0 + COLBLK < OC ? c0 + COLBLK : OC;
    R acc[COLBLK] = {0};
    for (int i = 0; i < N; i++) {
      const R *d = dout + (size_t)i * OC;
#pragma omp simd
      for (int c = c0; c < c1; c++) acc[c - c0] += d[c];
    }
    for (int c = c0; c < c1; c++) db[c] += acc[c - c0];
  }
}

/* Causal softmax attention as GEMMs. One (b, h) pair per thread (so each
 * thread owns its head's columns of out / dqkv; the GEMMs run
 * single-threaded inside), its queries in row blocks of ATT_BLK: for the
 * block [r0, r1) only the keys [0, r1) exist, so S = Q K^T is one
 * m x r1 x hs GEMM, the causal softmax runs per row in place (scaled there,
 * upper triangle zeroed: att keeps exact zeros there), and O = P V one
 * m x hs x r1 GEMM. The backward per block: dV += P^T dO, dP = dO V^T into
 * a per-thread scratch, dS = P (dP - rowsum(P dP)) scale in place,
 * dQ += dS K, dK += dS^T Q. Work above the diagonal is at most one block per
 * row (12.5% at T = 1024). The GEMMs are the engine's (OpenBLAS) when the
 * table carries one, else the double-accumulating loops; a GEMM's order of
 * summation is fixed by its shape, so results do not depend on which
 * thread ran which head. */
#define ATT_BLK 64

typedef struct S(att_gemm) {
  int ta, tb;
  int64_t m, n, k;
  const R *a;
  int64_t lda;
  const R *b;
  int64_t ldb;
  float beta;
  R *c;
  int64_t ldc;
} S(att_gemm);

static zrt_status S(cpu_gemm)(void *ctx, int ta, int tb, int64_t m, int64_t n, int64_t k,
                              float alpha, const R *a, int64_t lda, const R *b, int64_t ldb,
                              float beta, R *c, int64_t ldc);

/* Runs one GEMM (alpha 1) through the table's GEMM: inside the heads'
 * parallel region cpu_gemm stays on the calling thread. */
static zrt_status S(att_gemm_run)(void *ctx, const S(att_gemm) * g) {
  return S(cpu_gemm)(ctx, g->ta, g->tb, g->m, g->n, g->k, 1.0f, g->a, g->lda, g->b, g->ldb, g->beta,
                     g->c, g->ldc);
}

/* Shared failure record of a parallel attention pass: the first failing
 * GEMM's arguments, re-run on the caller's thread afterwards so that its
 * message (thread-local) reaches the caller. Argument checks fail before C
 * is written, so the re-run sees what the first attempt saw. */
typedef struct S(att_fail) {
  zrt_status st;
  S(att_gemm) g;
} S(att_fail);

static int S(att_call)(void *ctx, const S(att_gemm) * g, S(att_fail) * f) {
  zrt_status st = S(att_gemm_run)(ctx, g);
  if (st == ZRT_OK) return 0;
#pragma omp critical(gpt2_att_fail)
  if (f->st == ZRT_OK) f->st = st, f->g = *g;
  return 1;
}

static zrt_status S(att_finish)(void *ctx, const S(att_fail) * f) {
  if (f->st == ZRT_OK) return ZRT_OK;
  zrt_status again = S(att_gemm_run)(ctx, &f->g);
  return again != ZRT_OK ? again : f->st;
}

/* Per-thread scratch of an attention pass: host memory on the cpu backend
 * (outside the pools, as the memory estimate assumes); on a device-like
 * backend (the twin), where a kernel cannot read pageable host memory and
 * the scratch is a GEMM operand, one slice per thread of backend memory,
 * taken before the team forms. */
typedef struct S(att_ws) {
  unsigned char *ws; /* nthr slices of `bytes`, or NULL: each thread mallocs its own */
  size_t bytes;
} S(att_ws);

static zrt_status S(att_ws_open)(void *ctx, size_t bytes, int nthr, S(att_ws) * w) {
  zrt_engine_info ei;
  w->ws = NULL;
  w->bytes = bytes;
  if (ctx && GPT2_IS_FLOAT && zrt_engine_get_info(ctx, &ei) == ZRT_OK &&
      strcmp(ei.backend, "cpu") &&
      zrt_engine_alloc(ctx, bytes * (size_t)nthr, ZRT_MEM_ACTIVATIONS, (void **)&w->ws) != ZRT_OK)
    return ZRT_ERR_OOM;
  return ZRT_OK;
}
static R *S(att_ws_take)(const S(att_ws) * w) {
  return w->ws ? (R *)(w->ws + w->bytes * (size_t)omp_get_thread_num()) : malloc(w->bytes);
}
static void S(att_ws_give)(const S(att_ws) * w, R *p) {
  if (!w->ws) free(p);
}
static void S(att_ws_close)(void *ctx, S(att_ws) * w) {
  if (w->ws) zrt_engine_free(ctx, w->ws);
}

/* Head h of sequence b: q, k, v with the qkv GEMM's bias added, packed as
 * three [T][hs] matrices into hb (3 T hs elements). */
static void S(att_head)(R *hb, const R *qkv, const R *bias, int b, int h, int T, int C, int hs) {
  size_t C3 = 3 * (size_t)C;
  for (int p = 0; p < 3; p++) {
    const R *src = qkv + (size_t)b * T * C3 + (size_t)p * C + (size_t)h * hs;
    const R *bb = bias + (size_t)p * C + (size_t)h * hs;
    R *dst = hb + (size_t)p * T * hs;
    for (int t = 0; t < T; t++) {
#pragma omp simd
      for (int e = 0; e < hs; e++) dst[(size_t)t * hs + e] = src[(size_t)t * C3 + e] + bb[e];
    }
  }
}

/* Where a head's q, k and v are read from: qkv itself (ld 3C) without a
 * bias, else hb packed by att_head (ld hs). */
typedef struct S(att_qkv) {
  const R *q, *k, *v;
  int64_t ld;
} S(att_qkv);

static S(att_qkv)
    S(att_src)(R *hb, const R *qkv, const R *bias, int b, int h, int T, int C, int hs) {
  if (!bias) {
    const R *q = qkv + (size_t)b * T * 3 * (size_t)C + (size_t)h * hs;
    return (S(att_qkv)){q, q + C, q + 2 * (size_t)C, 3 * (int64_t)C};
  }
  S(att_head)(hb, qkv, bias, b, h, T, C, hs);
  return (S(att_qkv)){hb, hb + (size_t)T * hs, hb + 2 * (size_t)T * hs, hs};
}

static zrt_status S(att_oom)(const char *pass, size_t bytes, int T) {
  fprintf(stderr,
          "train_gpt2: attention %s: out of memory for %zu bytes of scratch per thread (seq_len "
          "%d)\n",
          pass, bytes, T);
  return ZRT_ERR_OOM;
}

static zrt_status S(cpu_attention_forward)(void *ctx, R *out, R *att, const R *qkv, const R *bias,
                                           int B, int T, int C, int NH) {
  int hs = C / NH;
  R scale = (R)1 / R_SQRT((R)hs);
  S(att_fail) fail = {.st = ZRT_OK};
  int par = (size_t)B * NH * T * T * hs >= PAR_MIN, nthr = par ? omp_get_max_threads() : 1;
  int oom = 0;
  size_t hbytes = bias ? 3 * (size_t)T * hs * sizeof(R) : 0;
  S(att_ws) w = {0};
  if (hbytes && S(att_ws_open)(ctx, hbytes, nthr, &w) != ZRT_OK)
    return S(att_oom)("forward", hbytes, T);
#pragma omp parallel num_threads(nthr) if (par)
  {
    R *hb = hbytes ? S(att_ws_take)(&w) : NULL;
    if (hbytes && !hb) {
#pragma omp atomic write
      oom = 1;
    }
#pragma omp for schedule(dynamic)
    for (int bh = 0; bh < B * NH; bh++) {
      if (hbytes && !hb) continue;
      int b = bh / NH, h = bh % NH;
      S(att_qkv) a = S(att_src)(hb, qkv, bias, b, h, T, C, hs);
      R *abh = att + (size_t)bh * T * T, *o0 = out + (size_t)b * T * C + h * hs;
      for (int r0 = 0; r0 < T; r0 += ATT_BLK) {
        int r1 = r0 + ATT_BLK < T ? r0 + ATT_BLK : T, m = r1 - r0;
        R *ablk = abh + (size_t)r0 * T;
        S(att_gemm) qk = {0, 1, m, r1, hs, a.q + (size_t)r0 * a.ld, a.ld, a.k, a.ld, 0.0f, ablk, T};
        if (S(att_call)(ctx, &qk, &fail)) break;
        for (int t = r0; t < r1; t++) {
          R *p = abh + (size_t)t * T, mx = -INFINITY, sum = 0;
#pragma omp simd reduction(max : mx)
          for (int t2 = 0; t2 <= t; t2++) {
            p[t2] *= scale;
            mx = p[t2] > mx ? p[t2] : mx;
          }
#pragma omp simd reduction(+ : sum)
          for (int t2 = 0; t2 <= t; t2++) {
            p[t2] = R_EXP(p[t2] - mx);
            sum += p[t2];
          }
          R inv = (R)1 / sum;
#pragma omp simd
          for (int t2 = 0; t2 <= t; t2++) p[t2] *= inv;
          for (int t2 = t + 1; t2 < T; t2++) p[t2] = 0;
        }
        S(att_gemm) pv = {0, 0, m, hs, r1, ablk, T, a.v, a.ld, 0.0f, o0 + (size_t)r0 * C, C};
        if (S(att_call)(ctx, &pv, &fail)) break;
      }
    }
    if (hb) S(att_ws_give)(&w, hb);
  }
  S(att_ws_close)(ctx, &w);
  if (oom) return S(att_oom)("forward", hbytes, T);
  return S(att_finish)(ctx, &fail);
}

static zrt_status S(cpu_attention_backward)(void *ctx, R *dqkv, const R *dout, const R *qkv,
                                            const R *bias, const R *out, const R *att, int B, int T,
                                            int C, int NH) {
  (void)out; /* att keeps the whole softmax */
  int hs = C / NH;
  int64_t C3 = 3 * (int64_t)C;
  R scale = (R)1 / R_SQRT((R)hs);
  S(att_fail) fail = {.st = ZRT_OK};
  int oom = 0;
  /* dP, then dS, of one row block (ld r1); then the head's biased q, k, v */
  size_t dsn = (size_t)(T < ATT_BLK ? T : ATT_BLK) * (size_t)T;
  size_t scratch = (dsn + (bias ? 3 * (size_t)T * hs : 0)) * sizeof(R);
  int par = (size_t)B * NH * T * T * hs >= PAR_MIN, nthr = par ? omp_get_max_threads() : 1;
  S(att_ws) w;
  if (S(att_ws_open)(ctx, scratch, nthr, &w) != ZRT_OK) return S(att_oom)("backward", scratch, T);
#pragma omp parallel num_threads(nthr) if (par)
  {
    R *ds = S(att_ws_take)(&w);
    if (!ds) {
#pragma omp atomic write
      oom = 1;
    }
#pragma omp for schedule(dynamic)
    for (int bh = 0; bh < B * NH; bh++) {
      if (!ds) continue;
      int b = bh / NH, h = bh % NH;
      S(att_qkv) a = S(att_src)(ds + dsn, qkv, bias, b, h, T, C, hs);
      R *dq0 = dqkv + (size_t)b * T * C3 + h * hs, *dk0 = dq0 + C, *dv0 = dq0 + 2 * C;
      const R *abh = att + (size_t)bh * T * T, *do0 = dout + (size_t)b * T * C + h * hs;
      /* dqkv is written: dq per row block (beta 0), dk and dv summed over
       * the row blocks from zero */
      for (int t = 0; t < T; t++) {
        memset(dk0 + (size_t)t * C3, 0, (size_t)hs * sizeof(R));
        memset(dv0 + (size_t)t * C3, 0, (size_t)hs * sizeof(R));
      }
      for (int r0 = 0; r0 < T; r0 += ATT_BLK) {
        int r1 = r0 + ATT_BLK < T ? r0 + ATT_BLK : T, m = r1 - r0;
        const R *pblk = abh + (size_t)r0 * T, *doblk = do0 + (size_t)r0 * C;
        S(att_gemm) dv = {1, 0, r1, hs, m, pblk, T, doblk, C, 1.0f, dv0, C3};
        S(att_gemm) dp = {0, 1, m, r1, hs, doblk, C, a.v, a.ld, 0.0f, ds, r1};
        if (S(att_call)(ctx, &dv, &fail) || S(att_call)(ctx, &dp, &fail)) break;
        for (int i = 0; i < m; i++) {
          const R *p = pblk + (size_t)i * T;
          R *d = ds + (size_t)i * r1, sum = 0;
          int t = r0 + i;
#pragma omp simd reduction(+ : sum)
          for (int t2 = 0; t2 <= t; t2++) sum += p[t2] * d[t2];
#pragma omp simd
          for (int t2 = 0; t2 <= t; t2++) d[t2] = p[t2] * (d[t2] - sum) * scale;
          for (int t2 = t + 1; t2 < r1; t2++) d[t2] = 0;
        }
        S(att_gemm) dq = {0, 0, m, hs, r1, ds, r1, a.k, a.ld, 0.0f, dq0 + (size_t)r0 * C3, C3};
        S(att_gemm) dk = {1, 0, r1, hs, m, ds, r1, a.q + (size_t)r0 * a.ld, a.ld, 1.0f, dk0, C3};
        if (S(att_call)(ctx, &dq, &fail) || S(att_call)(ctx, &dk, &fail)) break;
      }
    }
    if (ds) S(att_ws_give)(&w, ds);
  }
  S(att_ws_close)(ctx, &w);
  if (oom) return S(att_oom)("backward", scratch, T);
  return S(att_finish)(ctx, &fail);
}

#define GELU_S 0.7978845608028654 /* sqrt(2/pi) */
/* The row loops below branch on bias once, outside the vector loop. */
static R S(gelu)(R x) {
  return (R)0.5 * x * ((R)1 + R_TANH((R)GELU_S * (x + (R)0.044715 * x * x * x)));
}
static void S(cpu_gelu_forward)(R *out, const R *inp, const R *bias, int N, int OC) {
#pragma omp parallel for if ((size_t)N * OC >= PAR_MIN)
  for (int i = 0; i < N; i++) {
    const R *x = inp + (size_t)i * OC;
    R *o = out + (size_t)i * OC;
    if (bias) {
#pragma omp simd
      for (int c = 0; c < OC; c++) o[c] = S(gelu)(x[c] + bias[c]);
    } else {
#pragma omp simd
      for (int c = 0; c < OC; c++) o[c] = S(gelu)(x[c]);
    }
  }
}

static R S(gelu_grad)(R x) {
  R th = R_TANH((R)GELU_S * (x + (R)0.044715 * x * x * x));
  R sech2 = (R)1 - th * th;
  return (R)0.5 * ((R)1 + th) +
         (R)0.5 * x * sech2 * (R)GELU_S * ((R)1 + (R)3 * (R)0.044715 * x * x);
}
static void S(cpu_gelu_backward)(R *dinp, R *db, const R *inp, const R *bias, const R *dout, int N,
                                 int OC) {
#pragma omp parallel for if ((size_t)N * OC >= PAR_MIN)
  for (int i = 0; i < N; i++) {
    size_t r = (size_t)i * OC;
    if (bias) {
#pragma omp simd
      for (int c = 0; c < OC; c++) dinp[r + c] = S(gelu_grad)(inp[r + c] + bias[c]) * dout[r + c];
    } else {
#pragma omp simd
      for (int c = 0; c < OC; c++) dinp[r + c] = S(gelu_grad)(inp[r + c]) * dout[r + c];
    }
  }
  if (db) S(cpu_bias_backward)(db, dinp, N, OC); /* the CPU gains nothing from fusing */
}

static void S(cpu_residual_forward)(R *out, const R *a, const R *b, const R *bias, int N, int C) {
#pragma omp parallel for if ((size_t)N * C >= PAR_MIN)
  for (int i = 0; i < N; i++) {
    size_t r = (size_t)i * C;
    if (bias) {
#pragma omp simd
      for (int c = 0; c < C; c++) out[r + c] = a[r + c] + (b[r + c] + bias[c]);
    } else {
#pragma omp simd
      for (int c = 0; c < C; c++) out[r + c] = a[r + c] + b[r + c];
    }
  }
}

static void S(cpu_crossentropy)(R *losses, R *logits, const int *targets, int N, int V, int ld,
                                R dloss) {
#pragma omp parallel for if ((size_t)N * V >= PAR_MIN)
  for (int i = 0; i < N; i++) {
    R *l = logits + (size_t)i * ld;
    R mx = l[0], sum = 0;
#pragma omp simd reduction(max : mx)
    for (int v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < V; v++) sum += R_EXP(l[v] - mx);
    losses[i] = R_LOG(sum) + mx - l[targets[i]];
    if (dloss != 0) {
      R k = dloss / sum;
#pragma omp simd
      for (int v = 0; v < V; v++) l[v] = R_EXP(l[v] - mx) * k;
      l[targets[i]] -= dloss;
    }
  }
}

/* ------------------------------------------------------------ passes */

#define GPT2_PASS_CHECK(call)                                                                      \
  do {                                                                                             \
    zrt_status s_ = (call);                                                                        \
    if (s_ != ZRT_OK) return s_;                                                                   \
  } while (0)

/* Base of layer's slot: the first nckpt layers share slot 0. */
static R *S(layer_base)(const gpt2_acts_layout *L, R *acts, int layer) {
  int slot = layer < L->nckpt ? 0 : layer - L->nckpt + (L->nckpt > 0);
  return acts + L->layer_stride * (size_t)slot;
}

/* A checkpointed layer's forward reads its input from the shared slot's
 * res3 and writes res3 last, after its final read of the input (the
 * residual add into res2), so sharing the slot is safe in the forward. */
static R *S(res_in)(const gpt2_acts_layout *L, R *acts, int layer) {
  return layer == 0 ? acts + L->encoded : S(layer_base)(L, acts, layer - 1) + L->res3;
}

zrt_status S(gpt2_embed_forward)(const S(gpt2_ops) * ops, const gpt2_config *cfg,
                                 const gpt2_acts_layout *L, R *acts, const int *tokens, int B,
                                 R *const *w) {
  ops->encoder_forward(acts + L->encoded, tokens, w[GPT2_WTE], w[GPT2_WPE], B, cfg->seq_len,
                       cfg->n_embd);
  return ops->check ? ops->check() : ZRT_OK;
}

zrt_status S(gpt2_block_forward)(const S(gpt2_ops) * ops, const gpt2_config *cfg,
                                 const gpt2_acts_layout *L, R *acts, int B, int layer, const R *in,
                                 R *const *w) {
  int T = cfg->seq_len, C = cfg->n_embd, NH = cfg->n_head, N = B * T;
  R *base = S(layer_base)(L, acts, layer);
  const R *res = in ? in : S(res_in)(L, acts, layer);
  R *ln1 = base + L->ln1, *qkv = base + L->qkv, *atty = base + L->atty, *res2 = base + L->res2;
  R *ln2 = base + L->ln2, *fch = base + L->fch, *fchg = base + L->fch_gelu, *res3 = base + L->res3;
  R *tmp = acts + L->dC;
  void *x = ops->ctx;

  ops->layernorm_forward(ln1, base + L->ln1_mean, base + L->ln1_rstd, res, w[GPT2_LN1_W],
                         w[GPT2_LN1_B], N, C);
  GPT2_PASS_CHECK(ops->gemm(x, 0, 0, N, 3 * C, C, 1, ln1, C, w[GPT2_ATTN_W], 3 * C, 0, qkv, 3 * C));
  /* qkv stays without its bias: the attention adds it as it reads */
  GPT2_PASS_CHECK(ops->attention_forward(x, atty, base + L->att, qkv, w[GPT2_ATTN_B], B, T, C, NH));
  GPT2_PASS_CHECK(ops->gemm(x, 0, 0, N, C, C, 1, atty, C, w[GPT2_ATTNPROJ_W], C, 0, tmp, C));
  ops->residual_forward(res2, res, tmp, w[GPT2_ATTNPROJ_B], N, C);
  ops->layernorm_forward(ln2, base + L->ln2_mean, base + L->ln2_rstd, res2, w[GPT2_LN2_W],
                         w[GPT2_LN2_B], N, C);
  GPT2_PASS_CHECK(ops->gemm(x, 0, 0, N, 4 * C, C, 1, ln2, C, w[GPT2_FC_W], 4 * C, 0, fch, 4 * C));
  ops->gelu_forward(fchg, fch, w[GPT2_FC_B], N, 4 * C); /* fch stays without the bias */
  GPT2_PASS_CHECK(ops->gemm(x, 0, 0, N, C, 4 * C, 1, fchg, 4 * C, w[GPT2_FCPROJ_W], C, 0, tmp, C));
  ops->residual_forward(res3, res2, tmp, w[GPT2_FCPROJ_B], N, C);
  return ops->check ? ops->check() : ZRT_OK;
}

zrt_status S(gpt2_head)(const S(gpt2_ops) * ops, const gpt2_config *cfg, const gpt2_acts_layout *L,
                        R *acts, int B, const int *targets, R *const *w, const R *wte, R dloss,
                        R *const *g, R *dwte) {
  int T = cfg->seq_len, C = cfg->n_embd, V = cfg->vocab, N = B * T, ldv = (int)L->logits_ld;
  R *res = S(res_in)(L, acts, cfg->n_layer), *lnf = acts + L->lnf, *logits = acts + L->logits;
  R *mean = acts + L->lnf_mean, *rstd = acts + L->lnf_rstd;
  void *x = ops->ctx;

  ops->layernorm_forward(lnf, mean, rstd, res, w[GPT2_LNF_W], w[GPT2_LNF_B], N, C);
  GPT2_PASS_CHECK(ops->gemm(x, 0, 1, N, V, C, 1, lnf, C, wte, C, 0, logits, ldv));
  ops->crossentropy(acts + L->losses, logits, targets, N, V, ldv, g ? dloss : 0);
  if (g) {
    /* logits now hold dlogits. */
    R *dlnf = acts + L->dC, *dres = acts + L->dres;
    GPT2_PASS_CHECK(ops->gemm(x, 0, 0, N, C, V, 1, logits, ldv, wte, C, 0, dlnf, C));
    GPT2_PASS_CHECK(ops->gemm(x, 1, 0, V, C, N, 1, logits, ldv, lnf, C, 1, dwte, C));
    ops->zero(dres, (size_t)N * C);
    ops->layernorm_backward(dres, g[GPT2_LNF_W], g[GPT2_LNF_B], dlnf, res, w[GPT2_LNF_W], mean,
                            rstd, N, C);
  }
  return ops->check ? ops->check() : ZRT_OK;
}

zrt_status S(gpt2_block_backward)(const S(gpt2_ops) * ops, const gpt2_config *cfg,
                                  const gpt2_acts_layout *L, R *acts, int B, int layer, const R *in,
                                  R *const *w, R *const *g) {
  int T = cfg->seq_len, C = cfg->n_embd, NH = cfg->n_head, N = B * T;
  R *base = S(layer_base)(L, acts, layer);
  const R *res = in ? in : S(res_in)(L, acts, layer);
  R *ln1 = base + L->ln1, *qkv = base + L->qkv, *atty = base + L->atty, *res2 = base + L->res2;
  R *ln2 = base + L->ln2, *fch = base + L->fch, *fchg = base + L->fch_gelu;
  R *dres = acts + L->dres, *dC = acts + L->dC, *d4C = acts + L->d4C;
  void *x = ops->ctx;

  /* dres holds d(res3); the residual adds make it d(res2) and then d(res). */
  GPT2_PASS_CHECK(ops->gemm(x, 0, 1, N, 4 * C, C, 1, dres, C, w[GPT2_FCPROJ_W], C, 0, d4C, 4 * C));
  GPT2_PASS_CHECK(ops->gemm(x, 1, 0, 4 * C, C, N, 1, fchg, 4 * C, dres, C, 1, g[GPT2_FCPROJ_W], C));
  ops->bias_backward(g[GPT2_FCPROJ_B], dres, N, C);
  ops->gelu_backward(d4C, g[GPT2_FC_B], fch, w[GPT2_FC_B], d4C, N, 4 * C);
  GPT2_PASS_CHECK(ops->gemm(x, 0, 1, N, C, 4 * C, 1, d4C, 4 * C, w[GPT2_FC_W], 4 * C, 0, dC, C));
  GPT2_PASS_CHECK(ops->gemm(x, 1, 0, C, 4 * C, N, 1, ln2, C, d4C, 4 * C, 1, g[GPT2_FC_W], 4 * C));
  ops->layernorm_backward(dres, g[GPT2_LN2_W], g[GPT2_LN2_B], dC, res2, w[GPT2_LN2_W],
                          base + L->ln2_mean, base + L->ln2_rstd, N, C);

  GPT2_PASS_CHECK(ops->gemm(x, 0, 1, N, C, C, 1, dres, C, w[GPT2_ATTNPROJ_W], C, 0, dC, C));
  GPT2_PASS_CHECK(ops->gemm(x, 1, 0, C, C, N, 1, atty, C, dres, C, 1, g[GPT2_ATTNPROJ_W], C));
  ops->bias_backward(g[GPT2_ATTNPROJ_B], dres, N, C);
  GPT2_PASS_CHECK(ops->attention_backward(x, d4C, dC, qkv, w[GPT2_ATTN_B], atty, base + L->att, B,
                                          T, C, NH)); /* writes d4C's 3C columns */
  GPT2_PASS_CHECK(ops->gemm(x, 0, 1, N, C, 3 * C, 1, d4C, 3 * C, w[GPT2_ATTN_W], 3 * C, 0, dC, C));
  GPT2_PASS_CHECK(ops->gemm(x, 1, 0, C, 3 * C, N, 1, ln1, C, d4C, 3 * C, 1, g[GPT2_ATTN_W], 3 * C));
  ops->bias_backward(g[GPT2_ATTN_B], d4C, N, 3 * C);
  ops->layernorm_backward(dres, g[GPT2_LN1_W], g[GPT2_LN1_B], dC, res, w[GPT2_LN1_W],
                          base + L->ln1_mean, base + L->ln1_rstd, N, C);
  return ops->check ? ops->check() : ZRT_OK;
}

zrt_status S(gpt2_embed_backward)(const S(gpt2_ops) * ops, const gpt2_config *cfg,
                                  const gpt2_acts_layout *L, R *acts, const int *tokens, int B,
                                  R *const *g) {
  ops->encoder_backward(g[GPT2_WTE], g[GPT2_WPE], acts + L->dres, tokens, B, cfg->seq_len,
                        cfg->n_embd);
  return ops->check ? ops->check() : ZRT_OK;
}

#if GPT2_IS_FLOAT
/* Rows [lo, hi) of C (by_rows) or its columns [lo, hi). */
static zrt_status S(gemm_slab)(zrt_engine *e, int by_rows, int ta, int tb, int64_t m, int64_t n,
                               int64_t k, float alpha, const R *a, int64_t lda, const R *b,
                               int64_t ldb, float beta, R *c, int64_t ldc, int64_t lo, int64_t hi) {
  if (by_rows)
    return zrt_engine_gemm(e, ta, tb, hi - lo, n, k, alpha, ta ? a + lo : a + lo * lda, lda, b, ldb,
                           ZRT_F32, beta, c + lo * ldc, ldc, ZRT_F32);
  return zrt_engine_gemm(e, ta, tb, m, hi - lo, k, alpha, a, lda, tb ? b + lo * ldb : b + lo, ldb,
                         ZRT_F32, beta, c + lo, ldc, ZRT_F32);
}
#endif

/* GEMM: through the engine (OpenBLAS, fp32 accumulation) when the table
 * carries one, else the plain loops (accumulating in double) that the
 * gradient check and engine-less tests use. */
static zrt_status S(cpu_gemm)(void *ctx, int ta, int tb, int64_t m, int64_t n, int64_t k,
                              float alpha, const R *a, int64_t lda, const R *b, int64_t ldb,
                              float beta, R *c, int64_t ldc) {
#if GPT2_IS_FLOAT
  if (ctx) {
    zrt_engine *e = ctx;
    /* Split the larger of m / n into 16-aligned slabs, as many as the team
     * the process started with (OMP_NUM_THREADS, read at the first GEMM),
     * shared out over the team in force now: the adaptive team
     * (zrt.adaptive_threads) may run one thread fewer for a while, and the
     * slabs, hence every element's arithmetic, stay the same. */
    static int split_team; /* atomic: the twin runs these ops on stream workers */
    int st0 = __atomic_load_n(&split_team, __ATOMIC_RELAXED);
    if (!st0 && !omp_in_parallel()) {
      st0 = omp_get_max_threads();
      __atomic_store_n(&split_team, st0, __ATOMIC_RELAXED);
    }
    int nt = omp_in_parallel() || !st0 ? 1 : st0;
    int by_rows = m >= n;
    int64_t dim = by_rows ? m : n;
    if (nt > 1 && (double)m * (double)n * (double)k >= GPT2_GEMM_SPLIT_MIN && dim >= 32 * nt) {
      int64_t bad_lo = -1, bad_hi = -1;
      int64_t slab = ((dim + nt - 1) / nt + 15) / 16 * 16;
#pragma omp parallel for schedule(static, 1)
      for (int sl = 0; sl < nt; sl++) {
        int64_t lo = sl * slab, hi = lo + slab < dim ? lo + slab : dim;
        if (lo < hi && S(gemm_slab)(e, by_rows, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c,
                                    ldc, lo, hi) != ZRT_OK) {
#pragma omp critical(gpt2_gemm_error)
          if (bad_lo < 0 || lo < bad_lo) bad_lo = lo, bad_hi = hi;
        }
      }
      if (bad_lo < 0) return ZRT_OK;
      /* The engine's message is thread-local: a failed slab is re-run here so
       * the caller's thread gets it. Argument checks fail before C is
       * written, so the re-run sees C as the first attempt did. */
      return S(gemm_slab)(e, by_rows, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bad_lo,
                          bad_hi);
    }
    return zrt_engine_gemm(e, ta, tb, m, n, k, alpha, a, lda, b, ldb, ZRT_F32, beta, c, ldc,
                           ZRT_F32);
  }
#else
  (void)ctx;
#endif
  return S(cpu_gemm_naive)(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

const S(gpt2_ops) S(gpt2_cpu_ops) = {
    .ctx = NULL,
    .gemm = S(cpu_gemm),
    .zero = S(cpu_zero),
    .encoder_forward = S(cpu_encoder_forward),
    .encoder_backward = S(cpu_encoder_backward),
    .layernorm_forward = S(cpu_layernorm_forward),
    .layernorm_backward = S(cpu_layernorm_backward),
    .bias_backward = S(cpu_bias_backward),
    .attention_forward = S(cpu_attention_forward),
    .attention_backward = S(cpu_attention_backward),
    .gelu_forward = S(cpu_gelu_forward),
    .gelu_backward = S(cpu_gelu_backward),
    .residual_forward = S(cpu_residual_forward),
    .crossentropy = S(cpu_crossentropy),
    .check = NULL,
};

#undef R
#undef S
#undef R_EXP
#undef R_LOG
#undef R_TANH
#undef R_SQRT
#undef COLBLK
#undef ATT_BLK
#undef PAR_MIN
#undef GELU_S
#undef GPT2_PASS_CHECK
