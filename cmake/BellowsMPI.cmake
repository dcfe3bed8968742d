# Bellows needs an MPICH that can add processes to a running job (MPI_Comm_spawn,
# MPI_Comm_connect/accept). Debian's MPICH (ch4:ucx) cannot, so scripts/install-deps.sh
# builds one (ch3:nemesis) into BELLOWS_MPI_PREFIX. Point FindMPI at it explicitly so
# that whatever `mpicc`/`mpiexec` the system alternatives select never leaks in.
if(NOT EXISTS "${BELLOWS_MPI_PREFIX}/bin/mpicxx")
  message(FATAL_ERROR "bellows: no MPICH at BELLOWS_MPI_PREFIX=${BELLOWS_MPI_PREFIX}; "
                      "run scripts/install-deps.sh first")
endif()
set(MPI_HOME "${BELLOWS_MPI_PREFIX}" CACHE PATH "" FORCE)
set(MPI_C_COMPILER "${BELLOWS_MPI_PREFIX}/bin/mpicc" CACHE FILEPATH "" FORCE)
set(MPI_CXX_COMPILER "${BELLOWS_MPI_PREFIX}/bin/mpicxx" CACHE FILEPATH "" FORCE)
set(MPIEXEC_EXECUTABLE "${BELLOWS_MPI_PREFIX}/bin/mpiexec" CACHE FILEPATH "" FORCE)
set(MPI_CXX_SKIP_MPICXX ON)
find_package(MPI 3.1 REQUIRED COMPONENTS C CXX)
get_target_property(_bellows_mpi_libs MPI::MPI_CXX INTERFACE_LINK_LIBRARIES)
if(NOT "${_bellows_mpi_libs}" MATCHES "${BELLOWS_MPI_PREFIX}")
  message(FATAL_ERROR "bellows: FindMPI picked ${_bellows_mpi_libs}, not ${BELLOWS_MPI_PREFIX}")
endif()
message(STATUS "bellows: MPI from ${BELLOWS_MPI_PREFIX} (mpiexec ${MPIEXEC_EXECUTABLE})")
