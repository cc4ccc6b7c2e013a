/*
 * gpt2_data.c — text and llm.c token shards as one memory-mapped token
 * stream (gpt2_data.h).
 *
 * Invariant: after a successful open every shard is mapped, holds at least
 * one token, and every token is < the vocabulary given to open, so reads
 * need no checks.
 */
#define _GNU_SOURCE
#include "gpt2_data.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zrt.h"

static int ends_with(const char *s, const char *t) {
  size_t a = strlen(s), b = strlen(t);
  return a >= b && !strcmp(s + a - b, t);
}

/* Maps one file and checks it; sets *is_tok. */
static int shard_open(gpt2_shard *s, const char *path, int *is_tok, char *msg, size_t len) {
  s->path = strdup(path);
  if (!s->path) {
    snprintf(msg, len, "out of memory opening %s", path);
    return -1;
  }
  /* zrt's rule for what it reads: a FIFO or a device is an error naming
   * it, never a hang in open() */
  int fd;
  if (zrt_file_open_read(path, "data file", &fd) != ZRT_OK) {
    snprintf(msg, len, "%s", zrt_last_error());
    return -1;
  }
  struct stat sb;
  if (fstat(fd, &sb)) {
    snprintf(msg, len, "cannot stat %s: %s", path, strerror(errno));
    close(fd);
    return -1;
  }
  if (sb.st_size == 0) {
    snprintf(msg, len, "%s is empty", path);
    close(fd);
    return -1;
  }
  s->map_len = (size_t)sb.st_size;
  s->map = mmap(NULL, s->map_len, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (s->map == MAP_FAILED) {
    s->map = NULL;
    snprintf(msg, len, "cannot map %s: %s", path, strerror(errno));
    return -1;
  }
  const int32_t *h = s->map;
  int magic = s->map_len >= 4 && h[0] == GPT2_LLMC_MAGIC;
  *is_tok = magic || ends_with(path, ".bin");
  if (!*is_tok) {
    s->bytes = s->map;
    s->ntok = (int64_t)s->map_len;
    return 0;
  }
  const size_t hb = GPT2_LLMC_HEADER_INTS * sizeof(int32_t);
  if (!magic) {
    snprintf(msg, len,
             "%s is not an llm.c token file: magic %d, expected %d (a .bin file is read as tokens; "
             "rename a text file to another extension to read it as bytes)",
             path, s->map_len >= 4 ? h[0] : -1, GPT2_LLMC_MAGIC);
    return -1;
  }
  if (s->map_len < hb) {
    snprintf(msg, len, "%s is truncated: %zu bytes, shorter than the %zu-byte llm.c header", path,
             s->map_len, hb);
    return -1;
  }
  if (h[1] != GPT2_LLMC_VERSION) {
    snprintf(msg, len,
             "%s: llm.c token file version %d; zrt reads version %d (uint16 tokens, GPT-2's "
             "tokenizer family)",
             path, h[1], GPT2_LLMC_VERSION);
    return -1;
  }
  int64_t n = h[2];
  size_t want = hb + (size_t)n * sizeof(uint16_t);
  if (n <= 0 || s->map_len != want) {
    snprintf(msg, len,
             "%s: the header declares %lld tokens (a %zu-byte file) but the file has %zu bytes%s",
             path, (long long)n, want, s->map_len,
             s->map_len < want ? ": truncated (an interrupted write?)" : "");
    return -1;
  }
  s->toks = (const uint16_t *)((const char *)s->map + hb);
  s->ntok = n;
  return 0;
}

void gpt2_data_close(gpt2_data *d) {
  for (int i = 0; i < d->nshards; i++) {
    if (d->sh[i].map) munmap(d->sh[i].map, d->sh[i].map_len);
    free(d->sh[i].path);
  }
  free(d->sh);
  free(d->cum);
  memset(d, 0, sizeof *d);
}

int gpt2_data_open(const char *pattern, int vocab, gpt2_data *d, char *msg, size_t len) {
  memset(d, 0, sizeof *d);
  glob_t g;
  /* a plain path that does not exist reaches shard_open and its errno */
  int wild = strpbrk(pattern, "*?[") != NULL;
  int gr = glob(pattern, wild ? 0 : GLOB_NOCHECK, NULL, &g);
  if (gr != 0 || g.gl_pathc == 0) {
    snprintf(msg, len, "%s matches no file", pattern);
    if (gr == 0) globfree(&g);
    return -1;
  }
  d->sh = calloc(g.gl_pathc, sizeof *d->sh);
  d->cum = calloc(g.gl_pathc + 1, sizeof *d->cum);
  if (!d->sh || !d->cum) {
    snprintf(msg, len, "out of host memory opening %s", pattern);
    goto fail;
  }
  for (size_t i = 0; i < g.gl_pathc; i++) {
    int tok = 0;
    d->nshards = (int)i + 1;
    if (shard_open(&d->sh[i], g.gl_pathv[i], &tok, msg, len)) goto fail;
    if (i == 0) d->tokens = tok;
    if (tok != d->tokens) {
      snprintf(msg, len, "%s mixes llm.c token files and text (%s is %s, %s is %s)", pattern,
               g.gl_pathv[0], d->tokens ? "tokens" : "text", g.gl_pathv[i],
               tok ? "tokens" : "text");
      goto fail;
    }
    const gpt2_shard *s = &d->sh[i];
    for (int64_t k = 0; k < s->ntok; k++) {
      int t = s->toks ? s->toks[k] : s->bytes[k];
      if (t > d->max_tok) d->max_tok = t;
      if (t >= vocab) {
        snprintf(msg, len,
                 "%s: token %d at position %lld is outside the vocabulary of %d (%s); use the "
                 "model the data was tokenized for (--init DIR or --vocab_size N)",
                 s->path, t, (long long)k, vocab,
                 s->toks ? "llm.c tokens" : "text read as bytes needs --vocab_size >= 256");
        goto fail;
      }
    }
    d->cum[i + 1] = d->cum[i] + s->ntok;
  }
  d->n = d->cum[d->nshards];
  globfree(&g);
  return 0;
fail:
  globfree(&g);
  gpt2_data_close(d);
  return -1;
}

void gpt2_data_read(const gpt2_data *d, int64_t start, int n, int *dst) {
  int lo = 0, hi = d->nshards - 1;
  while (lo < hi) { /* the last shard with cum <= start */
    int mid = (lo + hi + 1) / 2;
    if (d->cum[mid] <= start)
      lo = mid;
    else
      hi = mid - 1;
  }
  int s = lo;
  int64_t k = start - d->cum[s];
  for (int i = 0; i < n; i++) {
    while (k >= d->sh[s].ntok) {
      s++;
      k = 0;
    }
    dst[i] = d->sh[s].toks ? d->sh[s].toks[k] : d->sh[s].bytes[k];
    k++;
  }
}
