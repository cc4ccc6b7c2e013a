/*
 * test_ckpt_remove.c — zrt_ckpt_remove (include/zrt.h), the removal that
 * --keep_last uses, under docs/security.md's removal rule:
 *   - the step `latest` names is refused and stays whole; a `latest` that
 *     is a symlink stops the removal (it might name the step);
 *   - zrt's own names go (meta.json, rank files, generations, temporaries)
 *     and the emptied directory with them;
 *   - a user's file, a symlink named rank0.bin (its target untouched) and a
 *     subdirectory stay, with the directory, and are counted;
 *   - a step directory that is a symlink is refused, its target untouched.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zrt.h"
#include "ztest.h"

static char D[256];

static void sh(const char *fmt) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "D=%s; %s", D, fmt);
  if (system(cmd) != 0) {
    fprintf(stderr, "command failed: %s\n", cmd);
    ZT_CHECK(0);
  }
}

static int exists(const char *rel) {
  char p[512];
  struct stat sb;
  snprintf(p, sizeof p, "%s/%s", D, rel);
  return lstat(p, &sb) == 0;
}

int main(void) {
  snprintf(D, sizeof D, "/tmp/zrt_ckpt_remove_%d", (int)getpid());
  sh("rm -rf $D && mkdir -p $D/ck/step_1 $D/ck/step_2 $D/ck/step_3 $D/ck/step_4/sub $D/elsewhere");
  sh("cd $D/ck && for s in 1 2 3 4; do echo m > step_$s/meta.json; echo r > step_$s/rank0.bin; "
     "done && echo step_2 > latest && echo t > step_1/rank1.g2.bin && "
     "echo t > step_1/meta.json.tmp.123.abcd && echo t > step_1/rank0.bin.tmp.1.ff");
  char ck[300];
  snprintf(ck, sizeof ck, "%s/ck", D);
  int kept = -1;

  /* the step latest names */
  ZT_CHECK(zrt_ckpt_remove(ck, 2, &kept) == ZRT_ERR_INVALID_ARG);
  printf("latest's step: %s\n", zrt_last_error());
  ZT_CONTAINS(zrt_last_error(), "is the checkpoint");
  ZT_CHECK(exists("ck/step_2/meta.json") && exists("ck/step_2/rank0.bin"));

  /* only zrt's names: the directory goes with them */
  ZT_OK(zrt_ckpt_remove(ck, 1, &kept));
  ZT_CHECK(kept == 0 && !exists("ck/step_1"));
  printf("step_1 removed whole\n");

  /* a user's file, a planted link at a rank file's name, a subdirectory */
  sh("echo secret > $D/elsewhere/target && echo note > $D/ck/step_4/notes.txt && rm "
     "$D/ck/step_4/rank0.bin && ln -s $D/elsewhere/target $D/ck/step_4/rank0.bin");
  ZT_OK(zrt_ckpt_remove(ck, 4, &kept));
  printf("step_4 with a user's file, a link and a subdirectory: kept %d\n", kept);
  ZT_CHECK(kept == 3);
  ZT_CHECK(exists("ck/step_4/notes.txt") && exists("ck/step_4/rank0.bin") &&
           exists("ck/step_4/sub") && !exists("ck/step_4/meta.json"));
  ZT_CHECK(exists("elsewhere/target"));

  /* a step directory that is a link */
  sh("mkdir -p $D/elsewhere/step_9 && echo m > $D/elsewhere/step_9/meta.json && ln -s "
     "$D/elsewhere/step_9 $D/ck/step_9");
  ZT_CHECK(zrt_ckpt_remove(ck, 9, &kept) != ZRT_OK);
  printf("linked step directory: %s\n", zrt_last_error());
  ZT_CONTAINS(zrt_last_error(), "symbolic link");
  ZT_CHECK(exists("elsewhere/step_9/meta.json"));

  /* a latest that is a link stops every removal */
  sh("rm $D/ck/latest && ln -s $D/elsewhere/target $D/ck/latest");
  ZT_CHECK(zrt_ckpt_remove(ck, 3, &kept) != ZRT_OK);
  printf("latest a link: %s\n", zrt_last_error());
  ZT_CHECK(exists("ck/step_3/meta.json"));

  sh("rm -rf $D");
  ZT_DONE();
}
