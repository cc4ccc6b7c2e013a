/*
 * test_hostile_files.c — what zrt reads, when the file is hostile or not a
 * file (docs/security.md). Every case must end promptly (an alarm bounds
 * the whole test: a blocking open of a FIFO fails it) with an error that
 * says what the path is:
 *   - crafted meta.json: "step": 1e30 (a cast would be undefined), a shape
 *     [2^62, 4] whose product wraps to 0, part * world overflowing, a
 *     negative offset, params beyond the module — each refused; a sealed
 *     meta.json with one byte changed fails its CRC32C, one cut short is
 *     refused, a whole one from before the seal (zrt 0.1) loads;
 *   - `latest` holding someone's secret, or a symlink to it: the error never
 *     quotes it; `latest` or meta.json as a FIFO: "a FIFO";
 *   - a rank file replaced by a directory: "a directory", not "truncated";
 *     a symlink (a loop, or to a real file elsewhere): refused as a
 *     symlinked `latest` is, never followed; meta.json a symlink: the same;
 *     the checkpoint directory a symlink loop: the same;
 *   - a config file, a deepspeed_config_file and a safetensors file that
 *     are FIFOs, a weights directory whose model.safetensors or index is
 *     one: "a FIFO" (not "holds no weights");
 *   - a safetensors header with __metadata__ twice (found by
 *     tests/fuzz/fuzz_safetensors: the second overran the first's table) or
 *     a tensor name twice: refused.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_format.h"
#include "safetensors.h"
#include "safetensors_set.h"
#include "ztest.h"

static char D[256];

static const char *meta_fmt =
    "{\n\t\"format\":\t\"zrt-checkpoint\",\n\t\"version\":\t1,\n\t\"step\":\t%s,\n"
    "\t\"world_size\":\t2,\n\t\"zero_stage\":\t1,\n\t\"dtype\":\t\"bf16\",\n"
    "\t\"states\":\t[\"master\"],\n\t\"modules\":\t[{\"name\": \"m\", \"numel\": %s, \"padded\": "
    "%s, \"part\": %s, \"params\": [{\"name\": \"w\", \"shape\": %s, \"offset\": %s}]}],\n"
    "\t\"ranks\":\t[{\"file\": \"rank0.bin\", \"bytes\": 100, \"table_crc32c\": 1}, {\"file\": "
    "\"rank1.bin\", \"bytes\": 100, \"table_crc32c\": 1}]\n}";

/* A sealed meta.json text with the given fields (caller frees). */
static char *meta_text(const char *step, const char *numel, const char *padded, const char *part,
                       const char *shape, const char *offset) {
  char *t = malloc(4096);
  snprintf(t, 4096, meta_fmt, step, numel, padded, part, shape, offset);
  ZT_OK(zrt_ckpt_meta_seal(&t));
  return t;
}

static void expect_meta(const char *what, const char *step, const char *numel, const char *padded,
                        const char *part, const char *shape, const char *offset,
                        const char *needle) {
  char *t = meta_text(step, numel, padded, part, shape, offset);
  zrt_ckpt_meta m;
  ZT_OK(zrt_ckpt_meta_check(t, strlen(t), "meta.json"));
  zrt_status st = zrt_ckpt_meta_parse(t, "meta.json", "step", &m);
  printf("%s: %s\n", what, st == ZRT_OK ? "accepted" : zrt_last_error());
  if (!needle) {
    ZT_OK(st);
    zrt_ckpt_meta_free(&m);
  } else {
    ZT_CHECK(st == ZRT_ERR_IO);
    ZT_CONTAINS(zrt_last_error(), needle);
  }
  free(t);
}

static void put(const char *rel, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", D, rel);
  FILE *f = fopen(p, "w");
  ZT_CHECK(f != NULL);
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

static void sh(const char *fmt, const char *arg) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, fmt, arg, arg, arg, arg);
  if (system(cmd) != 0) {
    fprintf(stderr, "command failed: %s\n", cmd);
    ZT_CHECK(0);
  }
}

static void expect_load(const char *what, const char *rel, const char *needle, const char *never) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", D, rel);
  zrt_ckpt_meta m;
  zrt_status st = zrt_ckpt_meta_load(p, &m);
  printf("%s: %s\n", what, st == ZRT_OK ? "loaded" : zrt_last_error());
  ZT_CHECK(st == ZRT_ERR_IO);
  ZT_CONTAINS(zrt_last_error(), needle);
  if (never && strstr(zrt_last_error(), never)) {
    fprintf(stderr, "the message quotes '%s'\n", never);
    ZT_CHECK(0);
  }
}

int main(void) {
  alarm(60); /* a blocking open of a FIFO ends the test here */
  snprintf(D, sizeof D, "/tmp/zrt_hostile_files_%d", (int)getpid());
  sh("rm -rf %s && mkdir -p %s", D);

  /* ---- crafted metadata */
  expect_meta("valid", "3", "6", "8", "4", "[2, 3]", "0", NULL);
  expect_meta("step 1e30", "1e30", "6", "8", "4", "[2, 3]", "0",
              "step is missing or not an integer in range");
  expect_meta("step -1e300", "-1e300", "6", "8", "4", "[2, 3]", "0",
              "step is missing or not an integer in range");
  expect_meta("shape [2^62, 4]", "3", "0", "0", "0", "[4611686018427387904, 4]", "0",
              "bad param shape");
  expect_meta("shape [2^32, 2^32]", "3", "0", "0", "0", "[4294967296, 4294967296]", "0",
              "product of its dimensions overflows");
  expect_meta("part * world overflows", "3", "6", "0", "4611686018427387904", "[2, 3]", "0",
              "overflow");
  expect_meta("negative offset", "3", "6", "8", "4", "[2, 3]", "-6", "bad param entry");
  expect_meta("params beyond numel", "3", "2", "8", "4", "[2, 3]", "0", "beyond");

  char *t = meta_text("3", "6", "8", "4", "[2, 3]", "0");
  size_t n = strlen(t);
  t[20] ^= 1;
  ZT_CHECK(zrt_ckpt_meta_check(t, n, "meta.json") == ZRT_ERR_IO);
  ZT_CONTAINS(zrt_last_error(), "fails its CRC32C check");
  t[20] ^= 1;
  ZT_OK(zrt_ckpt_meta_check(t, n, "meta.json"));
  ZT_CHECK(zrt_ckpt_meta_check(t, n - 30, "meta.json") == ZRT_ERR_IO);
  ZT_CONTAINS(zrt_last_error(), "no CRC32C seal");
  /* a whole meta.json from before the seal (zrt 0.1: no meta_crc32c member
   * at all) still loads, range-checked; the same text with a seal member
   * that is not last is refused */
  char legacy[4096];
  snprintf(legacy, sizeof legacy, meta_fmt, "3", "6", "8", "4", "[2, 3]", "0");
  strcat(legacy, "\n");
  ZT_OK(zrt_ckpt_meta_check(legacy, strlen(legacy), "meta.json"));
  zrt_ckpt_meta lm;
  ZT_OK(zrt_ckpt_meta_parse(legacy, "meta.json", "step", &lm));
  zrt_ckpt_meta_free(&lm);
  char moved[4200];
  snprintf(moved, sizeof moved, "{\"meta_crc32c\": \"00000000\",%s", legacy + 1);
  ZT_CHECK(zrt_ckpt_meta_check(moved, strlen(moved), "meta.json") == ZRT_ERR_IO);
  ZT_CONTAINS(zrt_last_error(), "no CRC32C seal");

  /* ---- a checkpoint root with a real step */
  sh("mkdir -p %s/ck/step_3 %s/ck2 %s/ck3 %s/ck4", D);
  put("ck/step_3/meta.json", t);
  free(t);
  put("secret.txt", "SECRET-TOKEN-42\n");
  put("ck2/latest", "SECRET-TOKEN-42\n");
  expect_load("latest holding another text", "ck2", "should hold one line 'step_<N>'", "SECRET");
  sh("ln -s %s/secret.txt %s/ck3/latest", D);
  expect_load("latest a symlink to a secret", "ck3", "is a symbolic link", "SECRET");
  sh("mkfifo %s/ck4/latest", D);
  expect_load("latest a FIFO", "ck4", "a FIFO", NULL);
  sh("mkdir -p %s/ck5/step_1 && mkfifo %s/ck5/step_1/meta.json", D);
  expect_load("meta.json a FIFO", "ck5/step_1", "a FIFO", NULL);
  sh("mkdir -p %s/ck6/step_1 && ln -s %s/ck/step_3/meta.json %s/ck6/step_1/meta.json", D);
  expect_load("meta.json a symlink", "ck6/step_1", "meta.json' is a symbolic link", NULL);
  sh("ln -s loop_b %s/loop_a && ln -s loop_a %s/loop_b", D);
  expect_load("checkpoint dir a symlink loop", "loop_a", "a loop of symbolic links",
              "does not exist");

  /* ---- rank files that are not files (read through the validated meta) */
  char step[512];
  snprintf(step, sizeof step, "%s/ck/step_3", D);
  zrt_ckpt_meta m;
  ZT_OK(zrt_ckpt_meta_load(step, &m));
  zrt_ckpt_reader rd;
  sh("mkdir %s/ck/step_3/rank0.bin", D);
  ZT_OK(zrt_ckpt_reader_init(&rd, &m));
  ZT_CHECK(zrt_ckpt_reader_open_all(&rd) == ZRT_ERR_IO);
  printf("rank file a directory: %s\n", zrt_last_error());
  ZT_CONTAINS(zrt_last_error(), "rank0.bin' is a directory, not a regular file");
  ZT_CHECK(!strstr(zrt_last_error(), "truncated"));
  zrt_ckpt_reader_free(&rd);
  sh("rmdir %s/ck/step_3/rank0.bin && ln -s rank0.bin %s/ck/step_3/rank0.bin", D);
  ZT_OK(zrt_ckpt_reader_init(&rd, &m));
  ZT_CHECK(zrt_ckpt_reader_open_all(&rd) == ZRT_ERR_IO);
  printf("rank file a symlink loop: %s\n", zrt_last_error());
  ZT_CONTAINS(zrt_last_error(), "rank0.bin' is a symbolic link");
  ZT_CHECK(!strstr(zrt_last_error(), "does not exist"));
  zrt_ckpt_reader_free(&rd);
  /* a rank file linked to a real file elsewhere: refused as `latest` is */
  sh("rm %s/ck/step_3/rank0.bin && echo data > %s/elsewhere.bin && ln -s %s/elsewhere.bin "
     "%s/ck/step_3/rank0.bin",
     D);
  ZT_OK(zrt_ckpt_reader_init(&rd, &m));
  ZT_CHECK(zrt_ckpt_reader_open_all(&rd) == ZRT_ERR_IO);
  printf("rank file a symlink to a file: %s\n", zrt_last_error());
  ZT_CONTAINS(zrt_last_error(), "rank0.bin' is a symbolic link; zrt wrote a regular file there");
  zrt_ckpt_reader_free(&rd);
  sh("rm %s/ck/step_3/rank0.bin && mkfifo %s/ck/step_3/rank0.bin", D);
  ZT_OK(zrt_ckpt_reader_init(&rd, &m));
  ZT_CHECK(zrt_ckpt_reader_open_all(&rd) == ZRT_ERR_IO);
  printf("rank file a FIFO: %s\n", zrt_last_error());
  ZT_CONTAINS(zrt_last_error(), "is a FIFO (named pipe)");
  zrt_ckpt_reader_free(&rd);
  zrt_ckpt_meta_free(&m);

  /* ---- config files and safetensors that are FIFOs */
  char p[512];
  sh("mkfifo %s/cfg.yaml && mkfifo %s/ds.json", D);
  zrt_config *cfg;
  ZT_OK(zrt_config_create(&cfg));
  snprintf(p, sizeof p, "%s/cfg.yaml", D);
  ZT_CHECK(zrt_config_load_file(cfg, p) != ZRT_OK);
  printf("config file a FIFO: %s\n", zrt_last_error());
  ZT_CONTAINS(zrt_last_error(), "a FIFO (named pipe), not a regular file");
  char yaml[600];
  snprintf(yaml, sizeof yaml, "deepspeed_config_file: %s/ds.json\n", D);
  put("launch.yaml", yaml);
  snprintf(p, sizeof p, "%s/launch.yaml", D);
  ZT_CHECK(zrt_config_load_file(cfg, p) != ZRT_OK);
  printf("deepspeed_config_file a FIFO: %s\n", zrt_last_error());
  ZT_CONTAINS(zrt_last_error(), "ds.json is a FIFO (named pipe)");
  zrt_config_destroy(cfg);
  sh("mkfifo %s/w.safetensors", D);
  snprintf(p, sizeof p, "%s/w.safetensors", D);
  zrt_st_file *sf = NULL;
  ZT_CHECK(zrt_st_open(p, &sf) == ZRT_ERR_IO);
  printf("safetensors a FIFO: %s\n", zrt_last_error());
  ZT_CONTAINS(zrt_last_error(), "a FIFO (named pipe)");
  /* a weights directory whose index, or whose model.safetensors, is a FIFO:
   * said so, never "holds no weights" and never a hang */
  sh("mkdir -p %s/hfi %s/hfs && mkfifo %s/hfi/model.safetensors.index.json && mkfifo "
     "%s/hfs/model.safetensors",
     D);
  static const char *fifo_dirs[] = {"hfi", "hfs"};
  for (int i = 0; i < 2; i++) {
    zrt_st_set *set = NULL;
    snprintf(p, sizeof p, "%s/%s", D, fifo_dirs[i]);
    ZT_CHECK(zrt_st_set_open(p, &set) == ZRT_ERR_IO && set == NULL);
    printf("weights directory with a FIFO (%s): %s\n", fifo_dirs[i], zrt_last_error());
    ZT_CONTAINS(zrt_last_error(), "a FIFO (named pipe), not a regular file");
    ZT_CHECK(!strstr(zrt_last_error(), "holds no weights"));
  }

  /* ---- duplicate keys in a safetensors header */
  static const char *dups[][2] = {
      {"{\"__metadata__\":{\"a\":\"1\"},\"__metadata__\":{\"b\":\"2\",\"c\":\"3\"}}",
       "__metadata__ twice"},
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
       "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}",
       "names tensor 'a' twice"}};
  for (int i = 0; i < 2; i++) {
    snprintf(p, sizeof p, "%s/dup%d.safetensors", D, i);
    FILE *f = fopen(p, "wb");
    uint64_t hl = strlen(dups[i][0]);
    fwrite(&hl, 8, 1, f);
    fputs(dups[i][0], f);
    fwrite("\0\0\0\0", 1, i ? 4 : 0, f);
    fclose(f);
    ZT_CHECK(zrt_st_open(p, &sf) == ZRT_ERR_IO);
    printf("safetensors duplicate: %s\n", zrt_last_error());
    ZT_CONTAINS(zrt_last_error(), dups[i][1]);
  }

  sh("rm -rf %s", D);
  ZT_DONE();
}
