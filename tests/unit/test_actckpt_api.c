/*
 * test_actckpt_api.c — the activation-checkpoint calls (zrt_actckpt_*) used
 * wrongly, one rank, comm self, on the host backend (cpu; twin under
 * ZRT_BACKEND=twin): bad handles (NULL engine or output, a block that was
 * not declared or is not checkpointed), calls before or after build that
 * belong to the other side of it, the wrong order (fetch before save, a
 * save or a second fetch while a block is fetched, release of a block not
 * fetched, a double release, a fetch after release) and checkpoints over
 * the device's budget. Each fails with ZRT_ERR_INVALID_ARG (ZRT_ERR_OOM for
 * the budget) and a message naming the call, the block and what to do, and
 * changes nothing: the right sequence afterwards hands back every block's
 * input bit for bit, device and cpu_checkpointing alike. Over budget, the
 * build's refusal names cpu_checkpointing (the checkpoints dominate), a
 * program that checkpoints nothing is pointed at zrt.activation_checkpointing,
 * and stage "auto" moves the checkpoints to the host when nothing else fits.
 * On the twin, cpu_checkpointing's copies and stalls are timed (stats
 * copy_s / stall_s): with slowed side streams and no compute to hide them
 * behind, the stall is the copies' time. Also on the twin, with the copy
 * stream slowed: every save and fetch orders its staging slot with events
 * (the inputs come back bit for bit over three passes, one backward cut
 * short), and destroy waits for the copies to the host still in flight.
 * Labelled twin too (scripts/twin-mutants.sh runs it): these checks are
 * where a missing event or synchronize in engine_actckpt.c shows.
 */
#include <string.h>

#include "zt_engine.h"
#include "ztest.h"

#define NBLK 4
#define BLK_FLOATS 256

static zrt_config *config(int cpu) {
  zrt_config *cfg;
  ZT_OK(zrt_config_create(&cfg));
  ZT_OK(zrt_config_set(cfg, "zrt.backend", zt_host_backend(), "test"));
  ZT_OK(zrt_config_set(cfg, "zrt.pin_memory_fallback", "true", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.reduce_bucket_size", "1000", "test"));
  if (cpu) ZT_OK(zrt_config_set(cfg, "activation_checkpointing.cpu_checkpointing", "true", "test"));
  return cfg;
}

static void add_model(zrt_engine *eng) {
  int mid, pid;
  ZT_OK(zrt_module_add(eng, "m", &mid));
  int64_t shape[1] = {64};
  zrt_init init = {ZRT_INIT_ZEROS, 0};
  ZT_OK(zrt_param_add(eng, mid, "m.w", 1, shape, init, 0, &pid));
}

#define EXPECT(call, code, text)                                                                   \
  do {                                                                                             \
    ZT_CHECK((call) == (code));                                                                    \
    ZT_CONTAINS(zrt_last_error(), text);                                                           \
  } while (0)

/* The host copy of a fetched input (device memory). */
static void input_of(zrt_engine *eng, const void *dev, float *host) {
  ZT_OK(zrt_engine_synchronize(eng));
  ZT_OK(zrt_engine_memcpy(eng, host, dev, BLK_FLOATS * sizeof(float), ZRT_COPY_D2H));
}

static void misuse(int cpu) {
  zrt_config *cfg = config(cpu);
  EXPECT(zrt_actckpt_wanted(NULL, NULL), ZRT_ERR_INVALID_ARG, "zrt_actckpt_wanted: NULL engine");
  EXPECT(zrt_actckpt_declare(NULL, 1, 4, NULL), ZRT_ERR_INVALID_ARG,
         "zrt_actckpt_declare: NULL engine");
  EXPECT(zrt_actckpt_save(NULL, 0, cfg), ZRT_ERR_INVALID_ARG, "zrt_actckpt_save: NULL engine");
  const void *in = NULL;
  EXPECT(zrt_actckpt_fetch(NULL, 0, &in), ZRT_ERR_INVALID_ARG, "zrt_actckpt_fetch: NULL engine");
  EXPECT(zrt_actckpt_release(NULL, 0), ZRT_ERR_INVALID_ARG, "zrt_actckpt_release: NULL engine");
  zrt_actckpt_stats stats;
  EXPECT(zrt_actckpt_get_stats(NULL, &stats), ZRT_ERR_INVALID_ARG,
         "zrt_actckpt_get_stats: NULL engine");

  zrt_engine *eng;
  ZT_OK(zrt_engine_create(cfg, &eng));
  add_model(eng);
  EXPECT(zrt_actckpt_wanted(eng, NULL), ZRT_ERR_INVALID_ARG, "zrt_actckpt_wanted: NULL output");
  EXPECT(zrt_actckpt_is_on(eng, 0, NULL, NULL), ZRT_ERR_INVALID_ARG,
         "zrt_actckpt_is_on: NULL output");
  EXPECT(zrt_actckpt_get_stats(eng, NULL), ZRT_ERR_INVALID_ARG,
         "zrt_actckpt_get_stats: NULL output");
  EXPECT(zrt_actckpt_declare(eng, -1, 4, NULL), ZRT_ERR_INVALID_ARG, "-1 blocks of 4 bytes");
  EXPECT(zrt_actckpt_declare(eng, 2, 0, NULL), ZRT_ERR_INVALID_ARG, "their input's bytes (> 0)");
  /* block 1 is not offered: blocks 0, 2 and 3 are checkpointed */
  const unsigned char offer[NBLK] = {1, 0, 1, 1};
  ZT_OK(zrt_actckpt_declare(eng, NBLK, BLK_FLOATS * sizeof(float), offer));
  int on = -1, count = -1;
  ZT_OK(zrt_actckpt_is_on(eng, 1, &on, &count));
  ZT_CHECK(on == 0 && count == 3);
  ZT_OK(zrt_actckpt_is_on(eng, 7, &on, NULL));
  ZT_CHECK(on == 0);
  EXPECT(zrt_actckpt_save(eng, 0, cfg), ZRT_ERR_INVALID_ARG,
         "zrt_actckpt_save: call zrt_engine_build first");
  EXPECT(zrt_actckpt_fetch(eng, 0, &in), ZRT_ERR_INVALID_ARG,
         "zrt_actckpt_fetch: call zrt_engine_build first");
  EXPECT(zrt_actckpt_release(eng, 0), ZRT_ERR_INVALID_ARG,
         "zrt_actckpt_release: call zrt_engine_build first");
  ZT_OK(zrt_engine_build(eng));
  EXPECT(zrt_actckpt_declare(eng, 2, 4, NULL), ZRT_ERR_INVALID_ARG,
         "call it before zrt_engine_build");
  ZT_CHECK(zt_probe(eng).ack_nblocks == NBLK && zt_probe(eng).ack_n == 3); /* unchanged */

  /* each block's input: distinct values in device memory */
  float *src;
  ZT_OK(zrt_engine_alloc(eng, BLK_FLOATS * sizeof(float), ZRT_MEM_ACTIVATIONS, (void **)&src));
  float want[NBLK][BLK_FLOATS], got[BLK_FLOATS];
  for (int b = 0; b < NBLK; b++)
    for (int i = 0; i < BLK_FLOATS; i++) want[b][i] = (float)(1000 * (b + 1) + i) + 0.25f;

  /* bad handles */
  EXPECT(zrt_actckpt_save(eng, -1, src), ZRT_ERR_INVALID_ARG,
         "zrt_actckpt_save: block -1 is not declared (zrt_actckpt_declare gave 4 blocks)");
  EXPECT(zrt_actckpt_save(eng, NBLK, src), ZRT_ERR_INVALID_ARG, "block 4 is not declared");
  EXPECT(zrt_actckpt_save(eng, 1, src), ZRT_ERR_INVALID_ARG,
         "zrt_actckpt_save: block 1 is not checkpointed");
  EXPECT(zrt_actckpt_save(eng, 0, NULL), ZRT_ERR_INVALID_ARG, "block 0: NULL input");
  EXPECT(zrt_actckpt_fetch(eng, 2, NULL), ZRT_ERR_INVALID_ARG, "zrt_actckpt_fetch: NULL output");
  EXPECT(zrt_actckpt_release(eng, 1), ZRT_ERR_INVALID_ARG,
         "zrt_actckpt_release: block 1 is not checkpointed");
  /* wrong order: nothing saved yet */
  EXPECT(zrt_actckpt_fetch(eng, 3, &in), ZRT_ERR_INVALID_ARG,
         "zrt_actckpt_fetch: block 3 was not saved in this forward");
  EXPECT(zrt_actckpt_release(eng, 3), ZRT_ERR_INVALID_ARG,
         "zrt_actckpt_release: block 3 is not fetched");

  for (int pass = 0; pass < 2; pass++) {
    /* forward: blocks 0, 2, 3 saved, src overwritten after each save */
    for (int b = 0; b < NBLK; b++) {
      if (b == 1) continue;
      ZT_OK(zrt_engine_memcpy(eng, src, want[b], sizeof want[b], ZRT_COPY_H2D));
      ZT_OK(zrt_actckpt_save(eng, b, src));
    }
    ZT_OK(zrt_engine_memcpy(eng, src, want[1], sizeof want[1], ZRT_COPY_H2D));
    /* backward */
    ZT_OK(zrt_actckpt_fetch(eng, 3, &in));
    input_of(eng, in, got);
    ZT_CHECK(!memcmp(got, want[3], sizeof got));
    EXPECT(zrt_actckpt_save(eng, 0, src), ZRT_ERR_INVALID_ARG,
           "zrt_actckpt_save: block 0 while block 3 is fetched (release it first)");
    EXPECT(zrt_actckpt_fetch(eng, 2, &in), ZRT_ERR_INVALID_ARG,
           "zrt_actckpt_fetch: block 2 while block 3 is still fetched (release it first");
    EXPECT(zrt_actckpt_release(eng, 2), ZRT_ERR_INVALID_ARG,
           "zrt_actckpt_release: block 2 is not fetched (another block is)");
    ZT_OK(zrt_actckpt_release(eng, 3));
    EXPECT(zrt_actckpt_release(eng, 3), ZRT_ERR_INVALID_ARG,
           "zrt_actckpt_release: block 3 is not fetched");
    EXPECT(zrt_actckpt_fetch(eng, 3, &in), ZRT_ERR_INVALID_ARG,
           "block 3 was not saved in this forward (zrt_actckpt_save) or was already released");
    /* out of backward order (0 before 2): served, on demand where offloaded */
    ZT_OK(zrt_actckpt_fetch(eng, 0, &in));
    input_of(eng, in, got);
    ZT_CHECK(!memcmp(got, want[0], sizeof got));
    ZT_OK(zrt_actckpt_release(eng, 0));
    ZT_OK(zrt_actckpt_fetch(eng, 2, &in));
    input_of(eng, in, got);
    ZT_CHECK(!memcmp(got, want[2], sizeof got));
    ZT_OK(zrt_actckpt_release(eng, 2));
  }
  ZT_OK(zrt_actckpt_get_stats(eng, &stats));
  printf("%s checkpoints: saves %lld fetches %lld resident %lld prefetched %lld on demand %lld, "
         "bytes out %llu in %llu\n",
         cpu ? "cpu" : "device", (long long)stats.saves, (long long)stats.fetches,
         (long long)stats.resident, (long long)stats.prefetched, (long long)stats.on_demand,
         (unsigned long long)stats.bytes_out, (unsigned long long)stats.bytes_in);
  ZT_CHECK(stats.saves == 6 && stats.fetches == 6);
  ZT_CHECK(stats.resident + stats.prefetched + stats.on_demand == stats.fetches);
  if (cpu) {
    ZT_CHECK(stats.bytes_out == 6 * BLK_FLOATS * sizeof(float));
    /* block 0 of each pass was in no slot; its copy-in keeps block 2's slot */
    ZT_CHECK(stats.on_demand == 2 && stats.resident == 4);
  } else {
    ZT_CHECK(stats.bytes_out == 0 && stats.bytes_in == 0 && stats.resident == 6);
  }
  zrt_engine_free(eng, src);
  zrt_engine_destroy(eng);
  zrt_config_destroy(cfg);
}

/* Checkpoints of 8 blocks x 512 KiB under a 2 MiB device. */
#define BIG_NBLK 8
#define BIG_BYTES (512u << 10)

static zrt_status build_big(const char *stage, int cpu, int declare, uint64_t act_bytes,
                            zrt_engine **out) {
  zrt_config *cfg = config(cpu);
  ZT_OK(zrt_config_set(cfg, "zrt.device_memory_limit", "2MiB", "test"));
  ZT_OK(zrt_config_set(cfg, "zero_optimization.stage", stage, "test"));
  zrt_engine *eng;
  ZT_OK(zrt_engine_create(cfg, &eng));
  add_model(eng);
  if (declare) ZT_OK(zrt_actckpt_declare(eng, BIG_NBLK, BIG_BYTES, NULL));
  if (act_bytes) ZT_OK(zrt_engine_set_activation_bytes(eng, act_bytes));
  zrt_status st = zrt_engine_build(eng);
  zrt_config_destroy(cfg);
  *out = eng;
  return st;
}

static void over_budget(void) {
  zrt_engine *eng;
  /* device checkpoints, 4 MiB: refused at build, pointed at cpu_checkpointing */
  EXPECT(build_big("0", 0, 1, 0, &eng), ZRT_ERR_OOM, "needs at least");
  ZT_CONTAINS(zrt_last_error(), "activation_checkpointing.cpu_checkpointing=true");
  printf("over budget: %s\n", zrt_last_error());
  zrt_engine_destroy(eng);
  /* the same in pinned host memory: two staging slots stay on the device */
  ZT_OK(build_big("0", 1, 1, 0, &eng));
  zrt_mem_stats d;
  ZT_OK(zrt_engine_memory(eng, ZRT_MEM_DEVICE, &d));
  ZT_CHECK(d.current[ZRT_MEM_ACTIVATIONS] == 2 * (uint64_t)BIG_BYTES);
  zrt_engine_destroy(eng);
  /* a program that checkpoints nothing, activations the larger part */
  EXPECT(build_big("0", 0, 0, 3u << 20, &eng), ZRT_ERR_OOM, "needs at least");
  ZT_CONTAINS(zrt_last_error(), "--set zrt.activation_checkpointing=true");
  printf("no checkpoints: %s\n", zrt_last_error());
  zrt_engine_destroy(eng);
  /* stage auto: nothing fits with device checkpoints; auto moves them to the host */
  ZT_OK(build_big("auto", 0, 1, 0, &eng));
  ZT_CHECK(zt_probe(eng).ack_cpu == 1);
  ZT_OK(zrt_engine_memory(eng, ZRT_MEM_DEVICE, &d));
  ZT_CHECK(d.current[ZRT_MEM_ACTIVATIONS] == 2 * (uint64_t)BIG_BYTES);
  zrt_engine_destroy(eng);
}

/* A built 1-rank twin engine with 3 checkpointed blocks (cpu_checkpointing)
 * whose side streams (the copy stream) are slowed by delay_us per op, and
 * one block-sized input buffer in *src. */
static zrt_engine *twin_engine(const char *delay_us, zrt_config **cfg, float **src) {
  setenv("ZRT_TWIN_SIDE_DELAY_US", delay_us, 1);
  *cfg = config(1);
  ZT_OK(zrt_config_set(*cfg, "zrt.backend", "twin", "test"));
  zrt_engine *eng;
  ZT_OK(zrt_engine_create(*cfg, &eng));
  add_model(eng);
  ZT_OK(zrt_actckpt_declare(eng, 3, BLK_FLOATS * sizeof(float), NULL));
  ZT_OK(zrt_engine_build(eng));
  ZT_OK(zrt_engine_alloc(eng, BLK_FLOATS * sizeof(float), ZRT_MEM_ACTIVATIONS, (void **)src));
  return eng;
}

/* cpu_checkpointing's timing on the twin (timing events): every copy and
 * wait measured, none untimed; with side streams slowed by D per op
 * (ZRT_TWIN_SIDE_DELAY_US), each copy takes at least D of copy-stream time
 * and block 0's on-demand copy-in (no prefetch covers the first fetch out
 * of order) stalls the compute stream by about D (checked at D / 2: the
 * host's own time between queueing the copy and the wait is not bounded). */
static void timing(long delay_us) {
  char d[32];
  snprintf(d, sizeof d, "%ld", delay_us);
  zrt_config *cfg;
  float *src;
  zrt_engine *eng = twin_engine(d, &cfg, &src);
  const void *in;
  for (int b = 0; b < 3; b++) ZT_OK(zrt_actckpt_save(eng, b, src));
  /* 0 first: in no slot (0 and 2 share slot 0, 2 was saved last) */
  int order[3] = {0, 2, 1};
  for (int i = 0; i < 3; i++) {
    ZT_OK(zrt_actckpt_fetch(eng, order[i], &in));
    ZT_OK(zrt_actckpt_release(eng, order[i]));
  }
  ZT_OK(zrt_engine_synchronize(eng));
  zrt_actckpt_stats st;
  ZT_OK(zrt_actckpt_get_stats(eng, &st));
  double D = 1e-6 * (double)delay_us;
  printf("twin timing, side delay %.0f ms: copies %lld in %.2f ms, stall %.2f ms, timed %lld, "
         "untimed %lld, on demand %lld\n",
         1e3 * D, (long long)(st.bytes_out + st.bytes_in) / (BLK_FLOATS * 4), 1e3 * st.copy_s,
         1e3 * st.stall_s, (long long)st.timed, (long long)st.untimed, (long long)st.on_demand);
  int64_t copies = (int64_t)(st.bytes_out + st.bytes_in) / (BLK_FLOATS * 4);
  ZT_CHECK(st.untimed == 0 && st.on_demand >= 1 && copies >= 4);
  ZT_CHECK(st.timed == copies + st.saves + st.fetches); /* a span per copy, save, fetch */
  ZT_CHECK(st.copy_s > 0 && st.copy_s >= (double)copies * D);
  if (delay_us) ZT_CHECK(st.stall_s >= D / 2);
  zrt_engine_free(eng, src);
  zrt_engine_destroy(eng);
  zrt_config_destroy(cfg);
  unsetenv("ZRT_TWIN_SIDE_DELAY_US");
}

/* cpu_checkpointing's events on the twin, with the copy stream slowed by
 * ORDER_DELAY_US an op (ZRT_TWIN_SIDE_DELAY_US) so that every copy the
 * engine stream could overtake without an event does overtake it (jitter
 * alone cannot: it delays every stream alike, by at most 200 us). Three
 * blocks share the two staging slots; each pass's backward starts once the
 * copy stream has caught up, so a late write into a slot shows in the data
 * a resident fetch reads. Each fetched input must equal its save's bit for
 * bit (tolerance 0). The passes exercise, in engine_actckpt.c:
 * - pass 0: save 2 refills block 0's slot: its wait for the slot's copy-out
 *   (ev_out, and that copy-out's record); fetch 0 is prefetched while the
 *   engine reads block 1: the fetch's wait for the copy-in (ev_ready, and the
 *   copy-in's record);
 * - pass 1: the backward stops after block 1, its prefetch of block 0 never
 *   fetched (a backward cut short);
 * - pass 2: save 1 refills the slot that prefetch is still copying into: the
 *   save's wait for the slot's last fill (ev_ready).
 * Every copy and wait is timed (stats: none untimed). */
#define ORDER_DELAY_US "5000"

static void ordering(void) {
  zrt_config *cfg;
  float *src;
  zrt_engine *eng = twin_engine(ORDER_DELAY_US, &cfg, &src);
  float want[3][BLK_FLOATS], got[BLK_FLOATS];
  const void *in;
  char what[64];
  for (int pass = 0; pass < 3; pass++) {
    for (int b = 0; b < 3; b++) {
      for (int i = 0; i < BLK_FLOATS; i++)
        want[b][i] = (float)(100000 * (pass + 1) + 1000 * (b + 1) + i) + 0.5f;
      ZT_OK(zrt_engine_memcpy(eng, src, want[b], sizeof want[b], ZRT_COPY_H2D));
      ZT_OK(zrt_actckpt_save(eng, b, src));
    }
    /* the copy engine catches up: what it wrote late is in the slots now */
    ZT_OK(zrt_backend_synchronize(zt_view(eng).backend, zt_probe(eng).ack_copy_stream));
    int last = pass == 1 ? 1 : 0; /* pass 1: block 0 is never fetched */
    for (int b = 2; b >= last; b--) {
      ZT_OK(zrt_actckpt_fetch(eng, b, &in));
      /* read on the engine stream alone (the copy to pageable memory is a host
       * wait for that stream): a synchronize of the whole device would also
       * finish the copy stream's work and hide a read that overtakes it */
      ZT_OK(zrt_engine_memcpy(eng, got, in, sizeof got, ZRT_COPY_D2H));
      snprintf(what, sizeof what, "ordering: pass %d block %d input", pass, b);
      ZT_CLOSE_ARRAY(what, got, want[b], BLK_FLOATS, 0.0);
      ZT_OK(zrt_actckpt_release(eng, b));
    }
  }
  ZT_OK(zrt_backend_synchronize(zt_view(eng).backend, zt_probe(eng).ack_copy_stream));
  zrt_actckpt_stats st;
  ZT_OK(zrt_actckpt_get_stats(eng, &st));
  printf("ordering, side delay %s us: saves %lld fetches %lld resident %lld prefetched %lld on "
         "demand %lld, timed %lld untimed %lld\n",
         ORDER_DELAY_US, (long long)st.saves, (long long)st.fetches, (long long)st.resident,
         (long long)st.prefetched, (long long)st.on_demand, (long long)st.timed,
         (long long)st.untimed);
  ZT_CHECK(st.saves == 9 && st.fetches == 8 && st.prefetched == 2 && st.on_demand == 0);
  ZT_CHECK(st.untimed == 0);
  zrt_engine_free(eng, src);
  zrt_engine_destroy(eng);
  zrt_config_destroy(cfg);
  unsetenv("ZRT_TWIN_SIDE_DELAY_US");
}

/* An engine destroyed right after its saves, their copies to the host
 * still queued behind a slow copy stream: destroy must let them finish
 * before the host pool goes (the twin dies with a message when a copy runs
 * on host memory unregistered under it, as a copy engine would write into
 * freed pages). */
static void teardown(void) {
  zrt_config *cfg;
  float *src;
  zrt_engine *eng = twin_engine("20000", &cfg, &src);
  for (int b = 0; b < 3; b++) ZT_OK(zrt_actckpt_save(eng, b, src));
  zrt_engine_free(eng, src);
  zrt_engine_destroy(eng); /* no synchronize first */
  zrt_config_destroy(cfg);
  unsetenv("ZRT_TWIN_SIDE_DELAY_US");
  printf("teardown with copies to the host in flight: done\n");
}

int main(void) {
  misuse(0);
  misuse(1);
  over_budget();
  timing(0);
  timing(50000);
  ordering();
  teardown();
  ZT_DONE();
}
