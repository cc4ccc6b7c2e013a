/*
 * test_nccl_rules.c — the NCCL comm's GPU-free rules (comm/nccl_rules.h),
 * the decisions comm_nccl.c takes on a GPU, checked through the same
 * numbers CUDA reports:
 *   - pointer kinds from cudaPointerAttributes.type (0 unregistered, 1 host,
 *     2 device, 3 managed) and .device: host memory is staged, another
 *     GPU's memory is an error;
 *   - staging plans for the engine's real calls: the agreement triple
 *     {sumsq, nonfinite, loss} all-reduced in place on the stack (12 bytes),
 *     the metrics all-gather from calloc'd memory, an in-place all-gather
 *     with the send inside a host recv, device buffers (nothing staged),
 *     mixed host send / device recv; scratch offsets aligned and disjoint;
 *   - the pinned bounce: every staged plan needs one laid out like the
 *     scratch (the host side of each staged copy; no copy meets pageable
 *     memory), device-only plans none;
 *   - every route comm_nccl.c takes (on one GPU NCCL runs only at world 1,
 *     the even route; the rest runs on a GPU only with two or more):
 *     reduce_scatter even / uneven / empty, host or device send and recv on
 *     the uneven (padded) route; all_gather even / uneven, in place at a
 *     rank's offset or not, empty segments; segment offsets;
 *   - the wait verdict: done beats a passed timeout, an event error or an
 *     asynchronous NCCL error aborts, the timeout aborts, <= 0 never times
 *     out;
 *   - the shared-GPU check by PCI bus id, including Slurm --gpus-per-task
 *     where every rank sees device 0 yet the GPUs differ, and two hosts
 *     with the same bus id.
 */
#include <string.h>

#include "nccl_rules.h"
#include "ztest.h"

enum { UNREG = 0, HOST = 1, DEVICE = 2, MANAGED = 3 };

static void test_kinds(void) {
  ZT_CHECK(zrt_nccl_ptr_kind(UNREG, -2, 0) == ZRT_NCCL_PTR_HOST); /* pageable stack / heap */
  ZT_CHECK(zrt_nccl_ptr_kind(HOST, 0, 0) == ZRT_NCCL_PTR_HOST);   /* cudaHostRegister'd */
  ZT_CHECK(zrt_nccl_ptr_kind(DEVICE, 0, 0) == ZRT_NCCL_PTR_DEVICE);
  ZT_CHECK(zrt_nccl_ptr_kind(DEVICE, 1, 0) == ZRT_NCCL_PTR_OTHER_DEVICE);
  ZT_CHECK(zrt_nccl_ptr_kind(MANAGED, 1, 0) == ZRT_NCCL_PTR_DEVICE);
}

static int aligned(size_t x) { return x % ZRT_NCCL_SCRATCH_ALIGN == 0; }

static void test_plans(void) {
  zrt_nccl_stage g;
  /* device buffers: nothing staged, no scratch */
  ZT_OK(zrt_nccl_stage_plan("all_reduce", ZRT_NCCL_PTR_DEVICE, ZRT_NCCL_PTR_DEVICE, -1, 4096, 4096,
                            &g));
  ZT_CHECK(!g.send_in && !g.recv_in && !g.recv_out && g.scratch_bytes == 0);
  /* engine_step.c: float agree[3] on the stack, all_reduce in place */
  ZT_OK(zrt_nccl_stage_plan("all_reduce", ZRT_NCCL_PTR_HOST, ZRT_NCCL_PTR_HOST, 0, 12, 12, &g));
  ZT_CHECK(g.recv_in && g.recv_out && !g.send_in);
  ZT_CHECK(g.send_off == 0 && g.recv_off == 0 && g.scratch_bytes >= 12 && aligned(g.scratch_bytes));
  /* the metrics all-gather: calloc'd mine (8 floats) into calloc'd all (4 ranks) */
  ZT_OK(zrt_nccl_stage_plan("all_gather", ZRT_NCCL_PTR_HOST, ZRT_NCCL_PTR_HOST, -1, 32, 128, &g));
  ZT_CHECK(g.send_in && g.recv_out && !g.recv_in);
  ZT_CHECK(aligned(g.send_off) && g.send_off >= g.recv_off + 128); /* disjoint */
  ZT_CHECK(g.scratch_bytes >= g.send_off + 32);
  /* in-place all-gather from a host recv: rank 2's segment at byte 64 */
  ZT_OK(zrt_nccl_stage_plan("all_gather", ZRT_NCCL_PTR_HOST, ZRT_NCCL_PTR_HOST, 64, 32, 128, &g));
  ZT_CHECK(g.recv_in && g.recv_out && !g.send_in && g.send_off == 64);
  /* host send into device recv: only the send is staged */
  ZT_OK(zrt_nccl_stage_plan("reduce_scatter", ZRT_NCCL_PTR_HOST, ZRT_NCCL_PTR_DEVICE, -1, 400, 100,
                            &g));
  ZT_CHECK(g.send_in && !g.recv_out && !g.recv_in && g.send_off == 0 && g.scratch_bytes >= 400);
  /* device send into host recv: only the result comes back */
  ZT_OK(zrt_nccl_stage_plan("reduce_scatter", ZRT_NCCL_PTR_DEVICE, ZRT_NCCL_PTR_HOST, -1, 400, 100,
                            &g));
  ZT_CHECK(!g.send_in && g.recv_out && g.scratch_bytes >= 100);
  /* zero bytes: nothing, even from the host */
  ZT_OK(zrt_nccl_stage_plan("all_reduce", ZRT_NCCL_PTR_HOST, ZRT_NCCL_PTR_HOST, 0, 0, 0, &g));
  ZT_CHECK(g.scratch_bytes == 0 && !g.recv_out);
  /* another GPU's memory: an error that says which buffer and what to pass */
  ZT_CHECK(zrt_nccl_stage_plan("all_reduce", ZRT_NCCL_PTR_OTHER_DEVICE, ZRT_NCCL_PTR_DEVICE, -1, 8,
                               8, &g) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "send buffer is on another GPU");
  ZT_CONTAINS(zrt_last_error(), "zrt_engine_alloc");
  ZT_CHECK(zrt_nccl_stage_plan("all_gather", ZRT_NCCL_PTR_DEVICE, ZRT_NCCL_PTR_OTHER_DEVICE, -1, 8,
                               8, &g) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "receive buffer");
  ZT_CHECK(zrt_nccl_stage_plan("all_gather", ZRT_NCCL_PTR_HOST, ZRT_NCCL_PTR_HOST, 100, 32, 128,
                               &g) == ZRT_ERR_INTERNAL); /* send past recv's end */
}

/* The bounce mirrors the scratch whenever something is staged. */
static void test_bounce(void) {
  zrt_nccl_stage g;
  ZT_OK(zrt_nccl_stage_plan("all_reduce", ZRT_NCCL_PTR_DEVICE, ZRT_NCCL_PTR_DEVICE, 0, 64, 64, &g));
  ZT_CHECK(g.bounce_bytes == 0);
  const zrt_nccl_ptr k[2] = {ZRT_NCCL_PTR_DEVICE, ZRT_NCCL_PTR_HOST};
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++)
      for (int at = -1; at <= 64; at += 65) {
        ZT_OK(zrt_nccl_stage_plan("all_gather", k[a], k[b], at, 32, 128, &g));
        int staged = g.send_in || g.recv_in || g.recv_out;
        ZT_CHECK(staged == (a || b));
        ZT_CHECK(g.bounce_bytes == g.scratch_bytes);
        ZT_CHECK(!staged || g.bounce_bytes >= (g.recv_out ? g.recv_off + 128 : g.send_off + 32));
        /* in place from a host recv: the send travels inside it, never twice */
        if (b && at >= 0) ZT_CHECK(g.recv_in && !g.send_in && g.send_off == (size_t)at);
      }
}

static void test_rs_routes(void) {
  zrt_nccl_rs_route rt;
  const size_t even[4] = {100, 100, 100, 100};
  ZT_OK(zrt_nccl_rs_route_plan(4, 2, even, 2, ZRT_NCCL_PTR_HOST, ZRT_NCCL_PTR_HOST, &rt));
  ZT_CHECK(rt.even && rt.maxc == 100 && rt.mine == 100 && rt.total == 400);
  ZT_CHECK(rt.scratch_bytes == 0 && rt.bounce_bytes == 0); /* staging: zrt_nccl_stage_plan */
  /* world 1 (the one-GPU case) is always even */
  ZT_OK(zrt_nccl_rs_route_plan(1, 0, even, 4, ZRT_NCCL_PTR_DEVICE, ZRT_NCCL_PTR_DEVICE, &rt));
  ZT_CHECK(rt.even && rt.maxc == 100);
  /* uneven, device buffers: padded input, aligned result after it, no bounce */
  const size_t uneven[3] = {5, 0, 7};
  ZT_OK(zrt_nccl_rs_route_plan(3, 0, uneven, 4, ZRT_NCCL_PTR_DEVICE, ZRT_NCCL_PTR_DEVICE, &rt));
  ZT_CHECK(!rt.even && rt.maxc == 7 && rt.mine == 5 && rt.total == 12);
  ZT_CHECK(rt.pad_in_bytes == 3 * 7 * 4 && aligned(rt.out_at) && rt.out_at >= rt.pad_in_bytes);
  ZT_CHECK(rt.scratch_bytes == rt.out_at + 7 * 4);
  ZT_CHECK(!rt.host_send && !rt.host_recv && rt.bounce_bytes == 0);
  /* uneven, host send and host recv: the whole send, then this rank's part */
  ZT_OK(zrt_nccl_rs_route_plan(3, 2, uneven, 4, ZRT_NCCL_PTR_HOST, ZRT_NCCL_PTR_HOST, &rt));
  ZT_CHECK(rt.host_send && rt.host_recv && rt.send_bounce_off == 0);
  ZT_CHECK(aligned(rt.recv_bounce_off) && rt.recv_bounce_off >= 12 * 4);
  ZT_CHECK(rt.bounce_bytes >= rt.recv_bounce_off + 7 * 4);
  /* the rank with an empty segment receives nothing: no recv staging */
  ZT_OK(zrt_nccl_rs_route_plan(3, 1, uneven, 4, ZRT_NCCL_PTR_DEVICE, ZRT_NCCL_PTR_HOST, &rt));
  ZT_CHECK(rt.mine == 0 && !rt.host_recv && !rt.host_send && rt.bounce_bytes == 0);
  ZT_CHECK(rt.scratch_bytes > 0); /* it still reduces its peers' segments */
  /* all empty: nothing at all */
  const size_t none[2] = {0, 0};
  ZT_OK(zrt_nccl_rs_route_plan(2, 0, none, 4, ZRT_NCCL_PTR_HOST, ZRT_NCCL_PTR_HOST, &rt));
  ZT_CHECK(rt.even && rt.maxc == 0 && rt.scratch_bytes == 0);
  /* another GPU's memory on the padded route: the same error as a plan */
  ZT_CHECK(zrt_nccl_rs_route_plan(3, 0, uneven, 4, ZRT_NCCL_PTR_OTHER_DEVICE, ZRT_NCCL_PTR_DEVICE,
                                  &rt) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "send buffer is on another GPU");
  ZT_CHECK(zrt_nccl_rs_route_plan(3, 3, uneven, 4, ZRT_NCCL_PTR_DEVICE, ZRT_NCCL_PTR_DEVICE, &rt) ==
           ZRT_ERR_INTERNAL);
}

static void test_ag_routes(void) {
  zrt_nccl_ag_route rt;
  char recv[64];
  const size_t even[2] = {4, 4}, uneven[3] = {3, 0, 5};
  ZT_CHECK(zrt_nccl_segment_off(uneven, 0) == 0 && zrt_nccl_segment_off(uneven, 1) == 3 &&
           zrt_nccl_segment_off(uneven, 2) == 3);
  /* even, out of place */
  zrt_nccl_ag_route_plan(2, 1, even, 2, recv + 40, recv, &rt);
  ZT_CHECK(rt.even && rt.my_off == 4 && rt.mine == 4 && rt.total == 8 && rt.send_at == -1);
  /* even, in place at rank 1's segment (byte 8 for 2-byte elements) */
  zrt_nccl_ag_route_plan(2, 1, even, 2, recv + 8, recv, &rt);
  ZT_CHECK(rt.even && rt.send_at == 8);
  /* in place needs the rank's own offset: rank 0's segment is not rank 1's */
  zrt_nccl_ag_route_plan(2, 1, even, 2, recv, recv, &rt);
  ZT_CHECK(rt.send_at == -1);
  /* uneven, in place at rank 2's offset (3 elements of 4 bytes in) */
  zrt_nccl_ag_route_plan(3, 2, uneven, 4, recv + 12, recv, &rt);
  ZT_CHECK(!rt.even && rt.my_off == 3 && rt.mine == 5 && rt.total == 8 && rt.send_at == 12);
  /* uneven, the rank with nothing to send */
  zrt_nccl_ag_route_plan(3, 1, uneven, 4, recv + 60, recv, &rt);
  ZT_CHECK(!rt.even && rt.mine == 0 && rt.my_off == 3 && rt.send_at == -1);
  /* world 1: even, in place at offset 0 */
  zrt_nccl_ag_route_plan(1, 0, even, 4, recv, recv, &rt);
  ZT_CHECK(rt.even && rt.send_at == 0 && rt.total == 4);
}

static void test_wait_verdict(void) {
  ZT_CHECK(zrt_nccl_wait_decide(ZRT_NCCL_EV_DONE, 0, 0.0, 30.0) == ZRT_NCCL_WAIT_DONE);
  /* done wins over a timeout that passed while the host slept */
  ZT_CHECK(zrt_nccl_wait_decide(ZRT_NCCL_EV_DONE, 0, 31.0, 30.0) == ZRT_NCCL_WAIT_DONE);
  ZT_CHECK(zrt_nccl_wait_decide(ZRT_NCCL_EV_NOT_READY, 0, 1.0, 30.0) == ZRT_NCCL_WAIT_PENDING);
  ZT_CHECK(zrt_nccl_wait_decide(ZRT_NCCL_EV_NOT_READY, 0, 30.0, 30.0) ==
           ZRT_NCCL_WAIT_ABORT_TIMEOUT);
  /* an asynchronous NCCL error (a peer's connection broke) aborts at once */
  ZT_CHECK(zrt_nccl_wait_decide(ZRT_NCCL_EV_NOT_READY, 1, 0.0, 30.0) == ZRT_NCCL_WAIT_ABORT_ERROR);
  ZT_CHECK(zrt_nccl_wait_decide(ZRT_NCCL_EV_ERROR, 0, 0.0, 30.0) == ZRT_NCCL_WAIT_ABORT_ERROR);
  /* comm_timeout_s <= 0 disables the watchdog: never a timeout */
  ZT_CHECK(zrt_nccl_wait_decide(ZRT_NCCL_EV_NOT_READY, 0, 1e9, 0.0) == ZRT_NCCL_WAIT_PENDING);
  ZT_CHECK(zrt_nccl_wait_decide(ZRT_NCCL_EV_NOT_READY, 0, 1e9, -1.0) == ZRT_NCCL_WAIT_PENDING);
}

#define KEY 64
static void put(char *keys, int r, const char *k) { snprintf(keys + r * KEY, KEY, "%s", k); }

static void test_shared(void) {
  char keys[4 * KEY];
  int a = -1, b = -1;
  memset(keys, 0, sizeof keys);
  /* one host, 4 GPUs, one rank each */
  put(keys, 0, "n1:boot/00000000:18:00.0");
  put(keys, 1, "n1:boot/00000000:2A:00.0");
  put(keys, 2, "n1:boot/00000000:3A:00.0");
  put(keys, 3, "n1:boot/00000000:5D:00.0");
  /* (also the Slurm --gpus-per-task case: each rank sees one "device 0",
   * but the bus ids differ; the old rule, local size 4 > 1 visible device,
   * refused NCCL there) */
  ZT_CHECK(!zrt_nccl_shared_gpu(keys, 4, KEY, &a, &b));
  /* two ranks on the one test GPU */
  put(keys, 3, "n1:boot/00000000:2A:00.0");
  ZT_CHECK(zrt_nccl_shared_gpu(keys, 4, KEY, &a, &b) && a == 1 && b == 3);
  /* same bus id on two hosts is two GPUs */
  memset(keys, 0, sizeof keys);
  put(keys, 0, "n1:bootA/00000000:18:00.0");
  put(keys, 1, "n2:bootB/00000000:18:00.0");
  ZT_CHECK(!zrt_nccl_shared_gpu(keys, 2, KEY, &a, &b));
  ZT_CHECK(!zrt_nccl_shared_gpu(keys, 1, KEY, &a, &b));
}

int main(void) {
  test_kinds();
  test_plans();
  test_bounce();
  test_rs_routes();
  test_ag_routes();
  test_wait_verdict();
  test_shared();
  ZT_DONE();
}
