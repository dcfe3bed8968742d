#pragma once
// One string from every rank, gathered on rank 0 (a rank's host, its node). Internal to
// libbellows.

#include <mpi.h>

#include <string>
#include <vector>

namespace bellows::runtime {

/// Collective over comm: every rank's `text`, in rank order, on rank 0 (empty elsewhere).
inline std::vector<std::string> gather_strings(MPI_Comm comm, const std::string& text) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int length = static_cast<int>(text.size());
  std::vector<int> lengths(rank == 0 ? static_cast<std::size_t>(size) : 0);
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm);
  std::vector<int> displacements(lengths.size());
  int total = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    displacements[r] = total;
    total += lengths[r];
  }
  std::vector<char> all(static_cast<std::size_t>(total));
  MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), displacements.data(), MPI_CHAR, 0, comm);
  std::vector<std::string> out;
  for (std::size_t r = 0; r < lengths.size(); ++r)
    out.emplace_back(all.data() + displacements[r], static_cast<std::size_t>(lengths[r]));
  return out;
}

}  // namespace bellows::runtime
