/*
 * zt_mpi.h — the end of a multi-rank test (tests/mpi/): every rank learns
 * the failures of all ranks (so ctest sees the run fail whichever rank
 * failed), MPI is finalised and main returns through ZT_DONE. Include after
 * ztest.h, in main's file only.
 */
#ifndef ZT_MPI_H
#define ZT_MPI_H
#include <mpi.h>

#include "ztest.h"

/* MPI at MPI_THREAD_MULTIPLE: on the twin the engine's comm issues its
 * collectives from its comm stream's thread (stream-ordered, docs/comms.md)
 * while the test's own thread calls MPI too; the comm refuses a lower level. */
#define ZT_MPI_INIT(argcp, argvp)                                                                  \
  do {                                                                                             \
    int zt_provided_ = 0;                                                                          \
    MPI_Init_thread((argcp), (argvp), MPI_THREAD_MULTIPLE, &zt_provided_);                         \
  } while (0)

#define ZT_MPI_DONE()                                                                              \
  do {                                                                                             \
    int zt_mine_ = zt_failures, zt_all_ = 0;                                                       \
    MPI_Allreduce(&zt_mine_, &zt_all_, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);                       \
    MPI_Finalize();                                                                                \
    zt_failures = zt_all_;                                                                         \
    ZT_DONE();                                                                                     \
  } while (0)

#endif
