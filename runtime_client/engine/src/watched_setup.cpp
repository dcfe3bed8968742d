#include "watched_setup.hpp"

#include "comm_numbers.hpp"
#include "rank_set_text.hpp"
#include "peer_watch.hpp"

namespace bellows::runtime {

MembersLost::MembersLost(std::vector<int> lost, const std::string& step)
    : std::runtime_error("ranks " + rank_set_text(lost) + " were lost in " + step), lost_(std::move(lost)) {}

std::vector<int> completed_watched(int posted, MPI_Request& request, PeerWatch& watch, const char* call,
                                   const char* stretch) {
  WatchedCompletion outcome = complete_watched(posted, request, watch, kSetupLossGrace);
  if (!outcome.completed && outcome.lost.empty()) {
    throw std::runtime_error(std::string(stretch) + call + " failed (" + describe_mpi_error(outcome.failed_code) +
                             ") and no member was found lost");
  }
  return std::move(outcome.lost);
}

WatchedDuplicate duplicate_watched(MPI_Comm comm, MPI_Errhandler handler, PeerWatch& watch, const char* stretch) {
  // The handle's storage is kept with a duplicate given up: MPI may still write it.
  auto pending = std::make_unique<MPI_Comm>(MPI_COMM_NULL);
  MPI_Request request = MPI_REQUEST_NULL;
  const int posted = MPI_Comm_idup(comm, pending.get(), &request);
  WatchedDuplicate duplicate;
  try {
    duplicate.lost = completed_watched(posted, request, watch, "MPI_Comm_idup", stretch);
  } catch (...) {
    MPI_Errhandler_free(&handler);
    throw;
  }
  if (duplicate.lost.empty()) {
    duplicate.comm = *pending;
    MPI_Comm_set_errhandler(duplicate.comm, handler);
  } else {
    keep_until_exit(std::move(pending));
  }
  MPI_Errhandler_free(&handler);
  return duplicate;
}

namespace {

/// The handler `comm` has now (the caller frees it).
MPI_Errhandler errhandler_of(MPI_Comm comm) {
  MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
  MPI_Comm_get_errhandler(comm, &handler);
  return handler;
}

}  // namespace

// `comm`'s handler is taken before the stretch sets errors to return on it.
WatchedSetup::WatchedSetup(MPI_Comm comm, ControlPlaneWord word, const char* stretch)
    : WatchedSetup(comm, errhandler_of(comm), word, stretch) {}

WatchedSetup::WatchedSetup(MPI_Comm comm, MPI_Errhandler handler, ControlPlaneWord word, const char* stretch)
    : world_errors_returned_(MPI_COMM_WORLD),
      errors_returned_(comm),
      watch_(comm, rank_in(comm), size_of(comm), word) {
  watch_.arm();
  duplicate_ = duplicate_watched(comm, handler, watch_, stretch);
  if (duplicate_.lost.empty()) duplicate_errors_returned_.emplace(duplicate_.comm);
}

}  // namespace bellows::runtime
