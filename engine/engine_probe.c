/*
 * engine_probe.c — zrt_engine_probe_get (engine_probe.h): a read-only
 * snapshot of the engine's build decisions and parts for white-box tests.
 * Owns nothing; changes nothing.
 */
#include "engine_probe.h"

#include "engine_internal.h"

void zrt_engine_probe_get(const zrt_engine *eng, zrt_engine_probe *out) {
  *out = (zrt_engine_probe){.activation_bytes = eng->activation_bytes,
                            .plan_device_bytes = eng->plan_device_bytes,
                            .prefetch_elems = eng->prefetch_elems,
                            .reuse_distance = eng->reuse_distance,
                            .offload_opt = eng->offload_opt,
                            .offload_par = eng->offload_par,
                            .coord = eng->coord,
                            .offload = eng->offload,
                            .pswap = eng->pswap,
                            .shard_arena = eng->shard_arena,
                            .host_pool = eng->host_pool,
                            .buckets = eng->buckets,
                            .ack_nblocks = eng->ack.nblocks,
                            .ack_n = eng->ack.n,
                            .ack_cpu = eng->ack.cpu,
                            .ack_copy_stream = eng->ack.copy_stream,
                            .nvme_rd0 = eng->st.nvme_rd0,
                            .nvme_wr0 = eng->st.nvme_wr0};
}
