/*
 * replay_main.c — runs a libFuzzer target over every file of a corpus
 * directory (or the files named), so the regression corpus is replayed by
 * the ordinary gcc build in CI. The clang -fsanitize=fuzzer build
 * (scripts/fuzz.sh) links the target against libFuzzer's main instead.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
  size_t got = fread(buf, 1, n > 0 ? (size_t)n : 0, f);
  fclose(f);
  LLVMFuzzerTestOneInput(buf, got);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  int files = 0, bad = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "no such corpus: %s\n", argv[i]);
      return 1;
    }
    if (S_ISDIR(st.st_mode)) {
      DIR *d = opendir(argv[i]);
      struct dirent *e;
      while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
        bad += replay_file(p);
        files++;
      }
      if (d) closedir(d);
    } else {
      bad += replay_file(argv[i]);
      files++;
    }
  }
  printf("replayed %d inputs without a crash\n", files);
  return bad || files == 0 ? 1 : 0;
}
