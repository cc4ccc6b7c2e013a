/*
 * comm_xnode.c — per-socket TCP byte counts of this process, classified by
 * the machine of the peer rank (comm_xnode.h). A socket is identified by
 * its local port; its peer is the rank whose port table holds the socket's
 * peer port (Open MPI's btl/tcp connects ranks directly, so every rank to
 * rank socket is found; a daemon's socket matches no rank).
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm_xnode.h"

void zrt_xn_read(zrt_xn_snap *s) {
  s->n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) && s->n < ZRT_XN_MAX_SOCK) {
    int fd = atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == dirfd(d)) continue;
    struct sockaddr_storage la, pa;
    socklen_t ll = sizeof la, pl = sizeof pa;
    if (getsockname(fd, (struct sockaddr *)&la, &ll) != 0 || la.ss_family != AF_INET) continue;
    if (getpeername(fd, (struct sockaddr *)&pa, &pl) != 0) continue;
    struct tcp_info ti;
    socklen_t tl = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0) continue;
    s->lport[s->n] = ntohs(((struct sockaddr_in *)&la)->sin_port);
    s->pport[s->n] = ntohs(((struct sockaddr_in *)&pa)->sin_port);
    s->sent[s->n] = ti.tcpi_bytes_sent;
    s->n++;
  }
  closedir(d);
}

zrt_status zrt_xn_classify(zrt_comm *flat, int ranks_per_machine, const zrt_xn_snap *before,
                           const zrt_xn_snap *after, uint64_t *cross, uint64_t *local,
                           uint64_t *other) {
  zrt_status st = ZRT_OK;
  int N = flat->world, K = ZRT_XN_MAX_SOCK;
  /* every rank's local ports, moved as 16-bit elements (bits, no arithmetic) */
  uint16_t *all = calloc((size_t)N * (size_t)K, sizeof *all), mine[ZRT_XN_MAX_SOCK] = {0};
  if (!all) return zrt_error(ZRT_ERR_OOM, "collectives: out of host memory for port tables");
  for (int i = 0; i < after->n; i++) mine[i] = after->lport[i];
  ZRT_CHECK_GOTO(zrt_comm_all_gather_even(flat, mine, all, (size_t)K, ZRT_F16, NULL), st, done);
  *cross = *local = *other = 0;
  int me = flat->rank / ranks_per_machine;
  for (int i = 0; i < after->n; i++) {
    uint64_t b0 = 0;
    for (int j = 0; j < before->n; j++)
      if (before->lport[j] == after->lport[i] && before->pport[j] == after->pport[i])
        b0 = before->sent[j];
    uint64_t d = after->sent[i] - b0;
    int peer = -1;
    for (int r = 0; r < N && peer < 0; r++)
      for (int k = 0; k < K && peer < 0; k++)
        if (r != flat->rank && all[(size_t)r * K + k] == after->pport[i]) peer = r;
    if (peer < 0)
      *other += d;
    else if (peer / ranks_per_machine == me)
      *local += d;
    else
      *cross += d;
  }
done:
  free(all);
  return st;
}
