/* Preloaded (LD_PRELOAD) into the processes of a `bellows run` by a test, to lose a joining rank
 * at one exact point of an expand: after the accept and merge, when it posts the barrier that
 * confirms the grown communicator. A rank that a resize adds (BELLOWS_JOIN_RESIZE, which the
 * controller sets, names a resize other than 0, the job's start, whose ranks join alike) SIGKILLs
 * itself in its first MPI_Ibarrier, which is that confirmation (ElasticJob's constructor, before
 * the rank's setup); the ranks from
 * before the expand then fail the barrier, as when the joiner's node dies in that window. Every
 * other process, and every other call, goes to MPI's own MPI_Ibarrier. Nothing of Bellows itself
 * knows of this library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*IbarrierFunction)(MPI_Comm, MPI_Request*);

int MPI_Ibarrier(MPI_Comm comm, MPI_Request* request) {
  const char* resize = getenv("BELLOWS_JOIN_RESIZE");
  if (resize != NULL && strcmp(resize, "0") != 0) {
    fprintf(stderr, "joiner_dies_at_confirmation: the joining rank kills itself at the grown communicator's "
                    "confirmation\n");
    fflush(stderr);
    raise(SIGKILL);
  }
  void* found = dlsym(RTLD_NEXT, "MPI_Ibarrier");
  if (found == NULL) {
    fprintf(stderr, "joiner_dies_at_confirmation: MPI_Ibarrier not found after this library: %s\n", dlerror());
    abort();
  }
  IbarrierFunction mpi_ibarrier;
  memcpy(&mpi_ibarrier, &found, sizeof mpi_ibarrier);  /* POSIX: a symbol's address converts to its function */
  return mpi_ibarrier(comm, request);
}
