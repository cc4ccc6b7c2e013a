/*
 * test_memest.c — the memory model's peer figures and planning rules
 * (engine/memest.h), pure arithmetic:
 *  - zrt_memest_deepspeed reproduces DeepSpeed's own documented outputs of
 *    its cold estimators (docs/code_docs/source/memory.rst, the t5-3b
 *    example: total_params 2851e6, largest_layer_params 32e6, 1 node of 8
 *    GPUs): estimate_zero3_model_states_mem_needs_all_cold prints
 *    71.69GB | 0.12GB (offload param + optimizer), 63.72GB | 0.78GB
 *    (optimizer), 1.43GB | 6.09GB (none) for zero_init=1, and
 *    estimate_zero2_model_states_mem_needs_all_cold prints 127.45GB | 5.31GB
 *    (offload_optimizer=cpu) and 127.45GB | 15.93GB (none), all in GiB with
 *    two decimals; stage 0 has no DeepSpeed estimator;
 *  - zrt_memest_fit_reuse: unchanged at stages 0-2, without a capacity or
 *    with want <= 0; at stage 3 the distance it returns keeps the
 *    prediction within zrt_memest_plan_bytes(capacity) and one more
 *    element's worth would not (unless want itself fits); 0 when model
 *    states alone do not fit;
 *  - zrt_memest_plan_bytes is 9/10 of the capacity, exact for any size;
 *  - Twin-Flow (twin_device_padded D): at stage 3 with optimizer offload cpu
 *    the master, state and fp32 grad bytes split into 4D/N (x k for states)
 *    on the device and the rest on the host, summing to the full-offload
 *    figures; D is ignored without offload, at stages 1-2 and with nvme;
 *    zrt_memest_program_twin_device of the tiny GPT preset
 *    (tools/model_layouts.h; modules of 20480,
 *    49984, 49984 and 128 elements at 2 ranks: parts 10240, 24992, 24992,
 *    64) with sub_group_size 0 and ratio 0.5 keeps int(0.5 * 4) = 2
 *    modules (70464 padded elements) on the device; sub_group_size 30000
 *    groups {emb, block} {block, norm}: ratio 0.5 keeps the first group
 *    (70464) on the device, ratio 0.9 none (int(0.1 * 2) = 0).
 */
#include <stdio.h>
#include <string.h>

#include "memest.h"
#include "model_layouts.h"
#include "ztest.h"

static void gib2(uint64_t bytes, char *out, size_t n) {
  snprintf(out, n, "%.2f", (double)bytes / (double)(1ull << 30));
}

static void ds_row(int stage, int oo, int op, const char *cpu_want, const char *gpu_want) {
  uint64_t cpu = 0, gpu = 0;
  ZT_CHECK(zrt_memest_deepspeed(stage, 2851e6, 32e6, 8, 1, oo, op, &cpu, &gpu) == 1);
  char c[32], g[32];
  gib2(cpu, c, sizeof c);
  gib2(gpu, g, sizeof g);
  printf("DeepSpeed stage %d offload_optimizer %d offload_param %d: %sGB | %sGB (docs: %sGB | "
         "%sGB)\n",
         stage, oo, op, c, g, cpu_want, gpu_want);
  ZT_CHECK(!strcmp(c, cpu_want));
  ZT_CHECK(!strcmp(g, gpu_want));
}

static void test_deepspeed(void) {
  ds_row(3, 1, 1, "71.69", "0.12");
  ds_row(3, 1, 0, "63.72", "0.78");
  ds_row(3, 0, 0, "1.43", "6.09");
  ds_row(2, 1, 0, "127.45", "5.31");
  ds_row(2, 0, 0, "127.45", "15.93");
  ds_row(1, 1, 0, "127.45", "5.31"); /* stage 1 uses the same estimator */
  uint64_t c = 7, g = 7;
  ZT_CHECK(zrt_memest_deepspeed(0, 2851e6, 32e6, 8, 1, 0, 0, &c, &g) == 0);
  ZT_CHECK(c == 7 && g == 7);
}

static void test_fit_reuse(void) {
  zrt_memest_layout l;
  memset(&l, 0, sizeof l);
  l.world = 2;
  l.dtype_bytes = l.comm_bytes = 2;
  l.optim_states = 2;
  l.padded_total = 86039040;
  l.max_module_padded = 7087872;
  l.reduce_bucket_size = 500000;
  l.prefetch_elems = 500000;
  l.max_live_elems = 1000000000;
  l.sub_group_size = 1000000000;
  l.offload_optimizer = l.offload_param = 1;
  l.activation_bytes = 146514432;
  for (int st = 0; st <= 2; st++) {
    l.stage = st;
    ZT_CHECK(zrt_memest_fit_reuse(&l, 524288000, 1000000000) == 1000000000);
  }
  l.stage = 3;
  ZT_CHECK(zrt_memest_fit_reuse(&l, 0, 1000000000) == 1000000000);
  ZT_CHECK(zrt_memest_fit_reuse(&l, 524288000, 0) == 0);
  uint64_t caps[] = {524288000, 300000000, 1ull << 30, 1000};
  for (int k = 0; k < 4; k++) {
    l.device_capacity = caps[k];
    int64_t want = 1000000000;
    int64_t r = zrt_memest_fit_reuse(&l, caps[k], want);
    zrt_memest_layout a = l, b = l;
    a.reuse_elems = 0;
    zrt_memest_result r0;
    zrt_memest_predict(&a, &r0);
    uint64_t room = zrt_memest_plan_bytes(caps[k]);
    printf("capacity %llu: reuse %lld (states+acts %llu of %llu planned)\n",
           (unsigned long long)caps[k], (long long)r, (unsigned long long)r0.device_total,
           (unsigned long long)room);
    ZT_CHECK(r >= 0 && r <= want);
    if (r0.device_total >= room) {
      ZT_CHECK(r == 0);
      continue;
    }
    ZT_CHECK(r0.device_total + 2 * (uint64_t)r <= room);
    if (r < want) ZT_CHECK(r0.device_total + 2 * ((uint64_t)r + 1) > room);
    b.reuse_elems = r;
    zrt_memest_result rr;
    zrt_memest_predict(&b, &rr);
    ZT_CHECK(rr.device_total <= room);
  }
  ZT_CHECK(zrt_memest_plan_bytes(1000) == 900);
  ZT_CHECK(zrt_memest_plan_bytes(UINT64_MAX) == UINT64_MAX / 10 * 9 + UINT64_MAX % 10 * 9 / 10);
  ZT_CHECK(zrt_memest_plan_bytes(7) == 6);
}

static void test_twin(void) {
  zrt_memest_layout l;
  memset(&l, 0, sizeof l);
  l.world = 4;
  l.dtype_bytes = l.comm_bytes = 2;
  l.optim_states = 2;
  l.padded_total = 4096 * 10;
  l.max_module_padded = 4096;
  l.reduce_bucket_size = 1024;
  l.sub_group_size = 1000000000;
  l.offload_optimizer = 1;
  for (int stage = 1; stage <= 3; stage++) {
    zrt_memest_result full, twin;
    l.stage = stage;
    l.twin_device_padded = 0;
    zrt_memest_predict(&l, &full);
    l.twin_device_padded = 4096 * 3;
    zrt_memest_predict(&l, &twin);
    uint64_t ed = stage == 3 ? 4096 * 3 / 4 : 0;
    ZT_CHECK(twin.device[ZRT_MEM_MASTER32] == 4 * ed);
    ZT_CHECK(twin.device[ZRT_MEM_OPTIM_STATE] == 8 * ed);
    ZT_CHECK(twin.device[ZRT_MEM_GRADS] == full.device[ZRT_MEM_GRADS] + 4 * ed);
    int cats[] = {ZRT_MEM_MASTER32, ZRT_MEM_OPTIM_STATE, ZRT_MEM_GRADS};
    for (int c = 0; c < 3; c++)
      ZT_CHECK(twin.host[cats[c]] + twin.device[cats[c]] ==
               full.host[cats[c]] + full.device[cats[c]]);
    ZT_CHECK(twin.host[ZRT_MEM_COMM] == full.host[ZRT_MEM_COMM]);
  }
  zrt_memest_result a, b;
  l.offload_nvme = 1; /* nvme: D ignored */
  l.twin_device_padded = 0;
  zrt_memest_predict(&l, &a);
  l.twin_device_padded = 4096 * 3;
  zrt_memest_predict(&l, &b);
  ZT_CHECK(!memcmp(&a, &b, sizeof a));
  l.offload_nvme = 0;
  l.offload_optimizer = 0; /* no offload: D ignored */
  zrt_memest_predict(&l, &b);
  l.twin_device_padded = 0;
  zrt_memest_predict(&l, &a);
  ZT_CHECK(!memcmp(&a, &b, sizeof a));
  zrt_model_program tiny;
  ZT_CHECK(zrt_model_gpt_program(zrt_model_gpt_find("tiny"), 1, &tiny) == 0);
  const zrt_memest_program *t = &tiny.p;
  int G, dg;
  ZT_CHECK(zrt_memest_program_twin_device(t, 2, 0, 0.5, &G, &dg) == 70464 && G == 4 && dg == 2);
  ZT_CHECK(zrt_memest_program_twin_device(t, 2, 0, 0.0, &G, &dg) == 2 * 70464 - 20480 + 128 &&
           dg == 4);
  ZT_CHECK(zrt_memest_program_twin_device(t, 2, 30000, 0.5, &G, &dg) == 70464 && G == 2 && dg == 1);
  ZT_CHECK(zrt_memest_program_twin_device(t, 2, 30000, 0.9, &G, &dg) == 0 && dg == 0);
  zrt_model_program_free(&tiny);
  printf("twin-flow: device/host split of master, states and grads sums to full offload; tiny "
         "preset splits as DeepSpeed's rule gives\n");
}

int main(void) {
  test_deepspeed();
  test_fit_reuse();
  test_twin();
  ZT_DONE();
}
