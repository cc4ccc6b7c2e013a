/*
 * comm_xnode.h — bytes a rank sends over TCP to ranks on other machines
 * and on its own machine, read from the kernel's per-socket counters
 * (TCP_INFO tcpi_bytes_sent) of the process's sockets: the figure of a
 * collective that carries over from loopback to a real network. Used by
 * `zrt-perf collectives` (perf/bench_collectives.c).
 */
#ifndef ZRT_PERF_COMM_XNODE_H
#define ZRT_PERF_COMM_XNODE_H

#include <stdint.h>

#include "comm.h"

#define ZRT_XN_MAX_SOCK 256

/* One process's TCP sockets: local port, peer port, bytes sent. */
typedef struct zrt_xn_snap {
  int n;
  uint16_t lport[ZRT_XN_MAX_SOCK], pport[ZRT_XN_MAX_SOCK];
  uint64_t sent[ZRT_XN_MAX_SOCK];
} zrt_xn_snap;

/* Reads this process's TCP sockets (no communication). */
void zrt_xn_read(zrt_xn_snap *s);

/* Classifies the bytes sent between before and after by the rank owning
 * each socket's peer port (the ranks' port tables are all-gathered over
 * flat, a comm of the same world; machine of rank r = r / ranks_per_machine,
 * ranks placed by machine): *cross to other machines, *local to this one,
 * *other to sockets of no rank (Open MPI's daemons). Collective over flat. */
zrt_status zrt_xn_classify(zrt_comm *flat, int ranks_per_machine, const zrt_xn_snap *before,
                           const zrt_xn_snap *after, uint64_t *cross, uint64_t *local,
                           uint64_t *other);

#endif
