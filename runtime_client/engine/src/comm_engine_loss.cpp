// The communication thread when a peer dies: MPI errors noted instead of aborting, and an
// abandoned iteration's requests cancelled or freed (comm_engine.hpp, PeerWatch).

#include <chrono>
#include <thread>

#include "comm_engine.hpp"
#include "peer_watch.hpp"

namespace bellows::runtime {

bool CommEngine::peer_lost_after(const std::string& error) {
  // The watch notices a dead peer within milliseconds of its death; a read of its memory can
  // fail a little earlier.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (!watch_->poll() && watch_->lost().empty()) {
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (mpi_failure_.empty()) mpi_failure_ = error;
  return true;
}

bool CommEngine::succeeded(int code, const char* call) {
  if (code == MPI_SUCCESS) return true;
  if (mpi_failure_.empty()) mpi_failure_ = std::string(call) + ": " + describe_mpi_error(code);
  return false;
}

void CommEngine::checked(int code, MPI_Request& request, const char* call) {
  if (!succeeded(code, call)) request = MPI_REQUEST_NULL;
}

void CommEngine::abandon() {
  // Receives are cancelled (those from the dead never complete otherwise); a send may still
  // be read by MPI, so its buffer is kept for the life of the process with the request
  // freed. Collectives' requests may be neither: they stay as they are.
  for (std::size_t i = 0; i < requests_.size(); ++i) {
    MPI_Request& request = requests_[i];
    if (request == MPI_REQUEST_NULL) continue;
    if (is_receive(operations_[i])) {
      MPI_Cancel(&request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);  // a cancelled receive completes at once
    } else {
      MPI_Request_free(&request);
      kept_send_buffers().push_back(std::move(operations_[i]));
    }
  }
  requests_.clear();
  operations_.clear();
  published_.clear();
  collection_reads_.clear();
  pending_reads_.clear();
  {
    std::lock_guard lock(outbox_mutex_);
    outbox_.clear();
  }
  mpi_transfers_ = 0;
  mpi_receives_ = 0;
  steal_outstanding_.store(false, std::memory_order_release);
}

std::vector<CommEngine::Operation>& CommEngine::kept_send_buffers() {
  static std::vector<Operation> kept;  // freed at exit: MPI may read them until then
  return kept;
}

}  // namespace bellows::runtime
