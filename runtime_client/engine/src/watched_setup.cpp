#include "watched_setup.hpp"

#include "rank_set_text.hpp"
#include "peer_watch.hpp"

namespace bellows::runtime {

MembersLost::MembersLost(std::vector<int> lost, const std::string& step)
    : std::runtime_error("ranks " + rank_set_text(lost) + " were lost in " + step), lost_(std::move(lost)) {}

std::vector<int> completed_watched(int posted, MPI_Request& request, PeerWatch& watch, const char* call) {
  WatchedCompletion outcome = complete_watched(posted, request, watch, kSetupLossGrace);
  if (!outcome.completed && outcome.lost.empty()) {
    throw std::runtime_error(std::string("runtime setup: ") + call + " failed (" +
                             describe_mpi_error(outcome.failed_code) + ") and no member was found lost");
  }
  return std::move(outcome.lost);
}

}  // namespace bellows::runtime
