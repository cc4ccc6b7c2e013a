/*
 * device_rules.c — the GPU-free decisions of the CUDA path (device_rules.h):
 * probe classification, backend choice, device sharing and the per-rank
 * device share. No CUDA types here, so every branch runs in the unit tests
 * on a machine without a GPU.
 */
#include "device_rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "internal.h"

void zrt_cuda_probe_classify(int err, int no_device_code, int count, int driver_version,
                             const char *msg, zrt_cuda_probe *out) {
  memset(out, 0, sizeof *out);
  if (err == 0 && count > 0) {
    out->kind = ZRT_CUDA_PROBE_OK;
    out->count = count;
  } else if (err == 0 || err == no_device_code || driver_version == 0) {
    out->kind = ZRT_CUDA_PROBE_NO_DEVICE;
  } else {
    out->kind = ZRT_CUDA_PROBE_ERROR;
    snprintf(out->what, sizeof out->what, "%s", msg && *msg ? msg : "unknown CUDA error");
  }
}

zrt_status zrt_backend_decide(const char *want, const zrt_cuda_probe *p, int *use_cuda) {
  *use_cuda = 0;
  if (!want || !*want) want = "auto";
  if (!strcmp(want, "cpu") || !strcmp(want, "twin")) return ZRT_OK;
  if (strcmp(want, "auto") && strcmp(want, "cuda"))
    return zrt_error(ZRT_ERR_INVALID_ARG,
                     "backend \"%s\" is unknown: expected \"auto\", \"cpu\", \"twin\" or "
                     "\"cuda\"",
                     want);
  int cuda = !strcmp(want, "cuda");
  switch (p->kind) {
  case ZRT_CUDA_PROBE_OK: *use_cuda = 1; return ZRT_OK;
  case ZRT_CUDA_PROBE_NOT_BUILT:
    if (cuda)
      return zrt_error(ZRT_ERR_UNSUPPORTED,
                       "backend \"cuda\" was requested but this zrt was built without CUDA: "
                       "reconfigure with -DZRT_CUDA=ON where nvcc is installed, or use backend "
                       "\"auto\" or \"cpu\"");
    return ZRT_OK;
  case ZRT_CUDA_PROBE_NO_DEVICE:
    if (cuda)
      return zrt_error(ZRT_ERR_CUDA,
                       "backend \"cuda\" was requested but no CUDA device is visible: check "
                       "nvidia-smi and CUDA_VISIBLE_DEVICES, or use backend \"auto\" or \"cpu\"");
    return ZRT_OK;
  case ZRT_CUDA_PROBE_ERROR:
  default:
    if (cuda)
      return zrt_error(ZRT_ERR_CUDA,
                       "backend \"cuda\" was requested but CUDA cannot list devices: %s; check "
                       "the driver with nvidia-smi (this build's CUDA needs the driver `zrt env` "
                       "names), or use backend \"cpu\"",
                       p->what);
    zrt_log_once("backend.cuda_probe", ZRT_LOG_WARN,
                 "backend auto: CUDA is built but cannot list devices (%s); running on the CPU. "
                 "This is a driver problem, not a machine without a GPU: check nvidia-smi and "
                 "`zrt env`, or set backend \"cpu\" to silence this",
                 p->what);
    return ZRT_OK;
  }
}

int zrt_device_for_local_rank(int local_rank, int ndev) {
  if (ndev < 1 || local_rank < 0) return 0;
  return local_rank % ndev;
}

int zrt_ranks_sharing_device(int local_world, int ndev, int device) {
  if (local_world < 1) local_world = 1;
  if (ndev < 1) return local_world;
  if (device < 0 || device >= ndev) return 0;
  return local_world / ndev + (device < local_world % ndev ? 1 : 0);
}

size_t zrt_device_share(size_t free_bytes, size_t reserve, int sharing) {
  if (free_bytes <= reserve) return 0;
  if (sharing < 1) sharing = 1;
  return (free_bytes - reserve) / (size_t)sharing;
}

size_t zrt_device_reserve(size_t total_bytes) {
  size_t frac = total_bytes / ZRT_DEVICE_RESERVE_DIV;
  return frac > ZRT_DEVICE_RESERVE_MIN ? frac : ZRT_DEVICE_RESERVE_MIN;
}

int zrt_cuda_error_sticky(int err) {
  switch (err) {
  case ZRT_CUDA_ERR_ECC_UNCORRECTABLE:
  case ZRT_CUDA_ERR_ILLEGAL_ADDRESS:
  case ZRT_CUDA_ERR_LAUNCH_TIMEOUT:
  case ZRT_CUDA_ERR_ASSERT:
  case ZRT_CUDA_ERR_HARDWARE_STACK:
  case ZRT_CUDA_ERR_ILLEGAL_INSTRUCTION:
  case ZRT_CUDA_ERR_MISALIGNED_ADDRESS:
  case ZRT_CUDA_ERR_INVALID_ADDRESS_SPACE:
  case ZRT_CUDA_ERR_INVALID_PC:
  case ZRT_CUDA_ERR_LAUNCH_FAILURE: return 1;
  default: return 0;
  }
}

int zrt_require_gpu(void) {
  const char *v = zrt_env("ZRT_REQUIRE_GPU");
  return v && *v && strcmp(v, "0") != 0;
}
