/*
 * test_device_rules.c — the GPU-free rules of the CUDA path
 * (backend/device_rules.h), all branches, with the numbers CUDA uses:
 *   - probe classification: cudaSuccess with devices, cudaErrorNoDevice
 *     (100), no driver installed (cudaErrorInsufficientDriver 35 with
 *     driver version 0) are "no GPU"; 35 with a driver present (too old:
 *     nvcc 13 binaries on an R570 driver report 12080) is a driver problem
 *     that keeps CUDA's message;
 *   - the backend choice for auto / cpu / cuda under each probe: auto falls
 *     back to the CPU on a driver problem but says so with CUDA's message;
 *     cuda fails with it;
 *   - ranks sharing a device under the local_rank % ndev round robin;
 *   - the device share: free minus the reserve, divided among the sharers;
 *   - sticky CUDA errors (illegal address, launch failure, ...) vs those a
 *     later call recovers from;
 *   - ZRT_REQUIRE_GPU parsing;
 *   - and on this machine, zrt_backend_create("auto") against the probe.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "comm.h"
#include "device_rules.h"
#include "ztest.h"

enum {
  CUDA_SUCCESS = 0,
  CUDA_INSUFFICIENT_DRIVER = ZRT_CUDA_ERR_INSUFFICIENT_DRIVER,
  CUDA_NO_DEVICE = ZRT_CUDA_ERR_NO_DEVICE
};

static void test_classify(void) {
  zrt_cuda_probe p;
  zrt_cuda_probe_classify(CUDA_SUCCESS, CUDA_NO_DEVICE, 2, 13000, "ok", &p);
  ZT_CHECK(p.kind == ZRT_CUDA_PROBE_OK && p.count == 2);
  zrt_cuda_probe_classify(CUDA_SUCCESS, CUDA_NO_DEVICE, 0, 13000, "ok", &p);
  ZT_CHECK(p.kind == ZRT_CUDA_PROBE_NO_DEVICE && p.count == 0);
  zrt_cuda_probe_classify(CUDA_NO_DEVICE, CUDA_NO_DEVICE, 0, 13000, "no CUDA-capable device", &p);
  ZT_CHECK(p.kind == ZRT_CUDA_PROBE_NO_DEVICE && p.count == 0);
  zrt_cuda_probe_classify(CUDA_INSUFFICIENT_DRIVER, CUDA_NO_DEVICE, 0, 0, "insufficient", &p);
  ZT_CHECK(p.kind == ZRT_CUDA_PROBE_NO_DEVICE); /* no driver at all: no GPU */
  zrt_cuda_probe_classify(CUDA_INSUFFICIENT_DRIVER, CUDA_NO_DEVICE, 0, 12080,
                          "cudaGetDeviceCount: CUDA driver version is insufficient", &p);
  ZT_CHECK(p.kind == ZRT_CUDA_PROBE_ERROR && p.count == 0);
  ZT_CONTAINS(p.what, "driver version is insufficient");
  /* a failing call never reports devices, whatever count it left behind */
  zrt_cuda_probe_classify(999, CUDA_NO_DEVICE, 4, 13000, "cudaErrorUnknown", &p);
  ZT_CHECK(p.kind == ZRT_CUDA_PROBE_ERROR && p.count == 0);
}

static void test_decide(void) {
  zrt_cuda_probe ok, none, bad, nb;
  zrt_cuda_probe_classify(CUDA_SUCCESS, CUDA_NO_DEVICE, 1, 13000, "", &ok);
  zrt_cuda_probe_classify(CUDA_NO_DEVICE, CUDA_NO_DEVICE, 0, 13000, "", &none);
  zrt_cuda_probe_classify(CUDA_INSUFFICIENT_DRIVER, CUDA_NO_DEVICE, 0, 12080,
                          "cudaGetDeviceCount: CUDA driver version is insufficient", &bad);
  memset(&nb, 0, sizeof nb);
  nb.kind = ZRT_CUDA_PROBE_NOT_BUILT;
  int use = -1;
  ZT_OK(zrt_backend_decide("auto", &ok, &use));
  ZT_CHECK(use == 1);
  ZT_OK(zrt_backend_decide(NULL, &ok, &use));
  ZT_CHECK(use == 1);
  ZT_OK(zrt_backend_decide("cpu", &ok, &use));
  ZT_CHECK(use == 0);
  ZT_OK(zrt_backend_decide("cuda", &ok, &use));
  ZT_CHECK(use == 1);
  ZT_OK(zrt_backend_decide("auto", &none, &use));
  ZT_CHECK(use == 0);
  ZT_OK(zrt_backend_decide("auto", &nb, &use));
  ZT_CHECK(use == 0);
  ZT_CHECK(zrt_backend_decide("cuda", &none, &use) == ZRT_ERR_CUDA && use == 0);
  ZT_CONTAINS(zrt_last_error(), "no CUDA device is visible");
  ZT_CHECK(zrt_backend_decide("cuda", &nb, &use) == ZRT_ERR_UNSUPPORTED);
  ZT_CONTAINS(zrt_last_error(), "built without CUDA");
  /* a driver problem: cuda fails with CUDA's own words ... */
  ZT_CHECK(zrt_backend_decide("cuda", &bad, &use) == ZRT_ERR_CUDA && use == 0);
  ZT_CONTAINS(zrt_last_error(), "cannot list devices");
  ZT_CONTAINS(zrt_last_error(), "driver version is insufficient");
  /* ... and auto runs on the CPU but logs them (checked in a pipe below) */
  int fds[2];
  ZT_CHECK(pipe(fds) == 0);
  fflush(stderr);
  int keep = dup(2);
  dup2(fds[1], 2);
  ZT_OK(zrt_backend_decide("auto", &bad, &use));
  fflush(stderr);
  dup2(keep, 2);
  close(keep);
  close(fds[1]);
  char buf[1024] = {0};
  ssize_t got = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  printf("auto on a driver problem logs: %s", got > 0 ? buf : "(nothing)\n");
  ZT_CHECK(use == 0);
  ZT_CONTAINS(buf, "driver version is insufficient");
  ZT_CONTAINS(buf, "not a machine without a GPU");
  ZT_CHECK(zrt_backend_decide("tpu", &ok, &use) == ZRT_ERR_INVALID_ARG);
  ZT_CONTAINS(zrt_last_error(), "backend \"tpu\" is unknown");
}

static void test_sharing(void) {
  /* local ranks r use device r % ndev */
  ZT_CHECK(zrt_ranks_sharing_device(1, 1, 0) == 1);
  ZT_CHECK(zrt_ranks_sharing_device(2, 1, 0) == 2); /* 2 ranks on the one test GPU */
  ZT_CHECK(zrt_ranks_sharing_device(8, 8, 3) == 1);
  ZT_CHECK(zrt_ranks_sharing_device(3, 2, 0) == 2); /* ranks 0, 2 */
  ZT_CHECK(zrt_ranks_sharing_device(3, 2, 1) == 1); /* rank 1 */
  ZT_CHECK(zrt_ranks_sharing_device(1, 4, 2) == 0); /* nobody */
  ZT_CHECK(zrt_ranks_sharing_device(0, 1, 0) == 1); /* unknown local world: alone */
  for (int lw = 1; lw <= 9; lw++)
    for (int nd = 1; nd <= 4; nd++) {
      int sum = 0;
      for (int d = 0; d < nd; d++) {
        int brute = 0;
        for (int r = 0; r < lw; r++) brute += r % nd == d;
        ZT_CHECK(zrt_ranks_sharing_device(lw, nd, d) == brute);
        sum += brute;
      }
      ZT_CHECK(sum == lw);
    }
}

static void test_share(void) {
  const size_t GiB = (size_t)1 << 30;
  /* H100 80 GB: 79.1 GiB total; 1/32 of it is 2.47 GiB > 1 GiB */
  size_t total = (size_t)(79.1 * (double)GiB), fr = (size_t)(78.5 * (double)GiB);
  size_t res = zrt_device_reserve(total);
  ZT_CHECK(res == total / 32);
  ZT_CHECK(zrt_device_reserve(16 * GiB) == GiB); /* small card: the 1 GiB floor */
  ZT_CHECK(zrt_device_share(fr, res, 1) == fr - res);
  ZT_CHECK(zrt_device_share(fr, res, 2) == (fr - res) / 2);
  ZT_CHECK(zrt_device_share(fr, res, 0) == fr - res);
  ZT_CHECK(zrt_device_share(GiB / 2, GiB, 1) == 0); /* less free than the reserve */
  ZT_CHECK(zrt_device_share(GiB, GiB, 1) == 0);
  /* another process holds 40 GiB: the share follows free, not total */
  ZT_CHECK(zrt_device_share(fr - 40 * GiB, res, 1) < total - 40 * GiB);
  printf("H100 80GB: reserve %.2f GiB, 2 ranks get %.2f GiB each\n", (double)res / (double)GiB,
         (double)zrt_device_share(fr, res, 2) / (double)GiB);
}

static void test_sticky(void) {
  /* what a kernel fault leaves: the context is lost */
  int sticky[] = {ZRT_CUDA_ERR_ILLEGAL_ADDRESS,    ZRT_CUDA_ERR_LAUNCH_FAILURE,
                  ZRT_CUDA_ERR_MISALIGNED_ADDRESS, ZRT_CUDA_ERR_ASSERT,
                  ZRT_CUDA_ERR_ECC_UNCORRECTABLE,  ZRT_CUDA_ERR_LAUNCH_TIMEOUT};
  for (size_t i = 0; i < sizeof sticky / sizeof sticky[0]; i++)
    ZT_CHECK(zrt_cuda_error_sticky(sticky[i]));
  /* recoverable: success, invalid value (1), out of memory (2), not ready
   * (600), no device, insufficient driver */
  int soft[] = {0, 1, 2, 600, ZRT_CUDA_ERR_NO_DEVICE, ZRT_CUDA_ERR_INSUFFICIENT_DRIVER};
  for (size_t i = 0; i < sizeof soft / sizeof soft[0]; i++)
    ZT_CHECK(!zrt_cuda_error_sticky(soft[i]));
}

static void test_require(void) {
  unsetenv("ZRT_REQUIRE_GPU");
  ZT_CHECK(!zrt_require_gpu());
  setenv("ZRT_REQUIRE_GPU", "0", 1);
  ZT_CHECK(!zrt_require_gpu());
  setenv("ZRT_REQUIRE_GPU", "", 1);
  ZT_CHECK(!zrt_require_gpu());
  setenv("ZRT_REQUIRE_GPU", "1", 1);
  ZT_CHECK(zrt_require_gpu());
  unsetenv("ZRT_REQUIRE_GPU");
}

static void test_this_machine(void) {
  zrt_cuda_probe p;
  zrt_backend_cuda_probe_devices(&p);
  printf("this machine: probe kind %d, %d device(s)%s%s\n", (int)p.kind, p.count,
         p.what[0] ? ": " : "", p.what);
  ZT_CHECK(p.kind != ZRT_CUDA_PROBE_NOT_BUILT || !zrt_backend_cuda_built());
  zrt_backend *b = NULL;
  ZT_OK(zrt_backend_create("auto", 0, 0, &b));
  ZT_CHECK(!strcmp(b->iface->name, p.kind == ZRT_CUDA_PROBE_OK ? "cuda" : "cpu"));
  zrt_backend_destroy(b);
}

/* the round robin over visible devices, and the launchers' world sizes */
static void test_device_pick(void) {
  ZT_CHECK(zrt_device_for_local_rank(0, 8) == 0);
  ZT_CHECK(zrt_device_for_local_rank(5, 8) == 5);
  ZT_CHECK(zrt_device_for_local_rank(9, 8) == 1);
  ZT_CHECK(zrt_device_for_local_rank(3, 1) == 0);
  ZT_CHECK(zrt_device_for_local_rank(3, 0) == 0);
  ZT_CHECK(zrt_device_for_local_rank(-1, 4) == 0);
  static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "WORLD_SIZE",  "PMI_SIZE", "PMIX_SIZE",
                               "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"};
  char *saved[6];
  for (int i = 0; i < 6; i++) {
    const char *v = getenv(vars[i]);
    saved[i] = v ? strdup(v) : NULL;
    unsetenv(vars[i]);
  }
  int w = -1;
  ZT_CHECK(zrt_comm_env_world(&w) == ZRT_OK && w == 1);
  setenv("SLURM_NTASKS", "8", 1); /* a batch script's one process: not a world */
  ZT_CHECK(zrt_comm_env_world(&w) == ZRT_OK && w == 1);
  for (int i = 0; i < 5; i++) {
    setenv(vars[i], "3", 1);
    ZT_CHECK(zrt_comm_env_world(&w) == ZRT_OK && w == 3);
    unsetenv(vars[i]);
  }
  /* a malformed rank count is an error naming the variable, never 1 (a job
   * of ranks that each train alone) */
  static const char *bad[] = {"bogus", "2x", "", "0", "-2", "99999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("PMI_SIZE", bad[i], 1);
    zrt_status st = zrt_comm_env_world(&w);
    if (!*bad[i]) { /* empty = unset */
      ZT_CHECK(st == ZRT_OK && w == 1);
      continue;
    }
    ZT_CHECK(st == ZRT_ERR_CONFIG);
    ZT_CONTAINS(zrt_last_error(), "PMI_SIZE=");
    ZT_CONTAINS(zrt_last_error(), "rank count");
  }
  unsetenv("PMI_SIZE");
  for (int i = 0; i < 6; i++) {
    if (saved[i])
      setenv(vars[i], saved[i], 1);
    else
      unsetenv(vars[i]);
    free(saved[i]);
  }
}

int main(void) {
  test_classify();
  test_decide();
  test_sharing();
  test_share();
  test_sticky();
  test_device_pick();
  test_require();
  test_this_machine();
  ZT_DONE();
}
