/*
 * test_gpt2_gemm16.c — where a bf16 run's GEMMs find their 16-bit operands
 * in the scratch (examples/gpt2/gpt2_gemm16.h, cu_gemm's planning), checked
 * without a GPU:
 *   - GPT-2 124M's block backward at B = 8 (N = 8192, C = 768, V = 50257)
 *     in a scratch of gpt2_cuda_scratch_bytes' size, as a registered
 *     16-bit run issues it: the one fp32 operand (dres, the projections'
 *     output gradient) is rounded once for dX and reused by dW, inside the
 *     scratch, every other operand a 16-bit slot; placements start past a
 *     held region, and a plan that does not fit is refused;
 *   - a GEMM whose C overwrites a copy's source drops the copy; a non-GEMM
 *     op (g16_forget) drops them all; a reused copy that leaves the other
 *     operand no room falls back to rounding both anew;
 *   - a random sequence of 20 000 GEMMs over 6 buffers, with writes in
 *     between, against a model of the scratch's contents (each 256-byte
 *     block tagged with the source and version last rounded into it): a
 *     reused copy always still holds the source's current rounding, and one
 *     GEMM's two copies never overlap.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../examples/gpt2/gpt2_gemm16.h"
#include "../../examples/gpt2/gpt2_model.c"
#include "ztest.h"

/* one GEMM's operand list: src, ld, rows, cols, needs a copy */
static g16_operand opnd(const void *src, int64_t ld, int64_t rows, int64_t cols, int round) {
  g16_operand o = {src, ld, rows, cols, round, 0, 0};
  return o;
}

static void gpt2_backward_case(void) {
  gpt2_config cfg;
  ZT_CHECK(gpt2_config_preset("gpt2", &cfg) == 0);
  cfg.vocab = 50257; /* the real tokenizer's: no N x V operand may need the scratch */
  const int64_t N = 8L * cfg.seq_len, C = cfg.n_embd;
  g16_state s = {0};
  s.scratch_bytes = gpt2_cuda_scratch_bytes(&cfg, 8, ZRT_BF16);
  printf("gpt2_cuda_scratch_bytes (bf16, B = 8, V = 50257): %zu\n", s.scratch_bytes);
  /* the buffers as disjoint address ranges (only compared, never read) */
#define FAKE(i) ((const void *)(uintptr_t)(((uintptr_t)(i) + 1) << 32))
  const void *dres = FAKE(0), *d4c = FAKE(1), *fchg = FAKE(2), *ln2 = FAKE(3), *atty = FAKE(4);
  const void *ln1 = FAKE(5), *dC = FAKE(6), *w = FAKE(7), *gw = FAKE(8);
  /* a registered 16-bit run (gpt2_act16.h): fch_gelu, ln2, atty, ln1 and
   * d4C are 16-bit slots, read as they are; dres is the one fp32 operand */
  struct {
    const char *what;
    const void *dout; /* the output gradient the pair shares */
    int64_t out_cols; /* its width */
    int dout_fp32;    /* rounded into the scratch (else a 16-bit slot) */
    const void *inp;  /* dW's other operand: a 16-bit slot */
    int64_t in_cols;
  } lin[] = {{"fc proj", dres, C, 1, fchg, 4 * C},
             {"fc", d4c, 4 * C, 0, ln2, C},
             {"attn proj", dres, C, 1, atty, C},
             {"qkv", d4c, 3 * C, 0, ln1, C}};
  for (int l = 0; l < 4; l++) {
    int64_t oc = lin[l].out_cols, ic = lin[l].in_cols;
    int r = lin[l].dout_fp32;
    /* dX = dout W^T: A = dout (N x oc), B = the 16-bit weight */
    g16_operand op[2] = {opnd(lin[l].dout, oc, N, oc, r), opnd(w, ic, ic, oc, 0)};
    ZT_CHECK(g16_plan(&s, op, dC, N, ic, ic));
    ZT_CHECK(op[0].reused == 0 && op[0].at == 0);
    size_t at_dout = op[0].at;
    /* dW += inp^T dout: A = inp (N x ic, transposed, a slot), B = dout */
    g16_operand op2[2] = {opnd(lin[l].inp, ic, N, ic, 0), opnd(lin[l].dout, oc, N, oc, r)};
    ZT_CHECK(g16_plan(&s, op2, gw, ic, oc, oc));
    printf("%-9s dX then dW: dout %s\n", lin[l].what,
           !r              ? "a 16-bit slot"
           : op2[1].reused ? "rounded once, reused"
                           : "ROUNDED AGAIN");
    if (r) {
      ZT_CHECK(op2[1].reused && op2[1].at == at_dout);
      ZT_CHECK(at_dout + (size_t)(N * oc * 2) <= s.scratch_bytes); /* inside */
    }
    g16_forget(&s); /* the bias backward, the LayerNorm backward ... */
  }
  /* a held 16-bit copy at the scratch's start (the ops' form for buffers
   * that are no slot): placements start past it */
  s.res = g16_up256(1000);
  s.scratch_bytes = s.res + (size_t)(N * C * 2);
  g16_operand op[2] = {opnd(dres, C, N, C, 1), opnd(w, C, C, C, 0)};
  ZT_CHECK(g16_plan(&s, op, dC, N, C, C));
  ZT_CHECK(op[0].at == s.res);
  s.scratch_bytes--; /* and refused when the operand no longer fits past it */
  g16_forget(&s);
  ZT_CHECK(!g16_plan(&s, op, dC, N, C, C));
}

static void drop_case(void) {
  g16_state s = {0};
  s.scratch_bytes = 1 << 20;
  static float x[64 * 64], y[64 * 64], z[64 * 64], c[64 * 64];
  g16_operand op[2] = {opnd(x, 64, 64, 64, 1), opnd(y, 64, 64, 64, 1)};
  ZT_CHECK(g16_plan(&s, op, c, 64, 64, 64));
  ZT_CHECK(s.n == 2);
  /* C overwrites x: x's copy goes, y's stays */
  g16_operand op2[2] = {opnd(y, 64, 64, 64, 1), opnd(z, 64, 64, 64, 1)};
  ZT_CHECK(g16_plan(&s, op2, x, 64, 64, 64));
  ZT_CHECK(op2[0].reused && !op2[1].reused && s.n == 2);
  g16_operand op3[2] = {opnd(x, 64, 64, 64, 1), opnd(y, 64, 64, 64, 1)};
  ZT_CHECK(g16_plan(&s, op3, c, 64, 64, 64));
  ZT_CHECK(!op3[0].reused && op3[1].reused); /* x rounded anew */
  g16_operand op3b[2] = {opnd(y, 128, 64, 64, 1), opnd(x, 64, 64, 64, 1)};
  ZT_CHECK(g16_plan(&s, op3b, c, 64, 64, 64));
  ZT_CHECK(!op3b[0].reused && op3b[1].reused); /* another stride is another operand */
  /* a different stride or shape of the same pointer is another operand */
  g16_operand op4[2] = {opnd(y, 64, 32, 64, 1), opnd(x, 32, 64, 32, 1)};
  ZT_CHECK(g16_plan(&s, op4, c, 32, 32, 32));
  ZT_CHECK(!op4[0].reused && !op4[1].reused);
  g16_forget(&s);
  g16_operand op5[2] = {opnd(y, 64, 32, 64, 1), opnd(z, 64, 64, 64, 0)};
  ZT_CHECK(g16_plan(&s, op5, c, 32, 64, 64));
  ZT_CHECK(!op5[0].reused); /* forgotten */
  /* no room beside a reused copy: both anew from the start */
  g16_state t = {0};
  t.scratch_bytes = 3 * 8192;
  static float a[4096], b[4096], e[4096];
  g16_operand p1[2] = {opnd(e, 64, 32, 64, 1), opnd(a, 64, 64, 64, 1)}; /* e 4 KiB, a at 4096 */
  ZT_CHECK(g16_plan(&t, p1, c, 64, 64, 64));
  ZT_CHECK(p1[1].at == 4096);
  t.scratch_bytes = 2 * 8192 + 2048; /* now: a reused at 4096 leaves b no room */
  g16_operand p2[2] = {opnd(b, 64, 64, 64, 1), opnd(a, 64, 64, 64, 1)};
  ZT_CHECK(g16_plan(&t, p2, c, 64, 64, 64));
  ZT_CHECK(!p2[0].reused && !p2[1].reused && p2[0].at == 0 && p2[1].at == 8192);
  /* and when even fresh copies do not fit: refused */
  t.scratch_bytes = 8192;
  ZT_CHECK(!g16_plan(&t, p2, c, 64, 64, 64) && t.n == 0);
}

/* The scratch's contents modelled per 256-byte block: (buffer, version)
 * last rounded there. */
enum { NBUF = 6, BLK = 256, SCRATCH = 64 * 1024 };
static int tag_buf[SCRATCH / BLK], tag_ver[SCRATCH / BLK];

static uint64_t rng = 88172645463325252ull;
static unsigned rnd(unsigned n) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (unsigned)(rng % n);
}

static void fuzz_case(void) {
  static float buf[NBUF][64 * 64];
  int ver[NBUF] = {0};
  g16_state s = {0};
  s.scratch_bytes = SCRATCH;
  long reused = 0, rounded = 0, bad = 0;
  for (int it = 0; it < 20000; it++) {
    if (rnd(5) == 0) { /* a non-GEMM op writes a buffer */
      ver[rnd(NBUF)]++;
      g16_forget(&s);
      continue;
    }
    s.res = rnd(4) == 0 ? (size_t)BLK * rnd(16) : 0;
    if (s.res) g16_forget(&s); /* a held copy comes from the cross-entropy: a non-GEMM op */
    int ia = (int)rnd(NBUF), ib = (int)rnd(NBUF), ic = (int)rnd(NBUF + 1); /* NBUF: C elsewhere */
    int64_t ra = 32 << rnd(2), ca = 32 << rnd(2), rb = 32 << rnd(2), cb = 32 << rnd(2);
    g16_operand op[2] = {opnd(buf[ia], 64, ra, ca, (int)rnd(4) != 0),
                         opnd(buf[ib], 64, rb, cb, (int)rnd(4) != 0)};
    static float cother[64 * 64];
    const void *c = ic == NBUF ? (const void *)cother : (const void *)buf[ic];
    if (!g16_plan(&s, op, c, 64, 64, 64)) continue;
    const int id[2] = {ia, ib};
    for (int i = 0; i < 2; i++) {
      if (!op[i].round) continue;
      size_t b0 = op[i].at / BLK,
             b1 = (op[i].at + (size_t)(op[i].rows * op[i].cols) * 2 + BLK - 1) / BLK;
      if (op[i].at < s.res || b1 * BLK > SCRATCH) bad++;
      if (op[i].reused) {
        reused++;
        for (size_t k = b0; k < b1; k++)
          if (tag_buf[k] != id[i] || tag_ver[k] != ver[id[i]]) bad++;
      } else {
        rounded++;
        for (size_t k = b0; k < b1; k++) tag_buf[k] = id[i], tag_ver[k] = ver[id[i]];
      }
    }
    if (op[0].round && op[1].round) {
      size_t a0 = op[0].at, a1 = a0 + (size_t)(op[0].rows * op[0].cols) * 2;
      size_t b0 = op[1].at, b1 = b0 + (size_t)(op[1].rows * op[1].cols) * 2;
      if (!(a1 <= b0 || b1 <= a0) && !(id[0] == id[1] && a0 == b0)) bad++;
    }
    if (ic < NBUF) ver[ic]++; /* the GEMM wrote C */
  }
  printf("fuzz: %ld copies rounded, %ld reused, %ld violations\n", rounded, reused, bad);
  ZT_CHECK(bad == 0 && reused > 300);
}

int main(void) {
  gpt2_backward_case();
  drop_case();
  fuzz_case();
  ZT_DONE();
}
