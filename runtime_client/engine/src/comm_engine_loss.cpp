// The communication thread when a peer dies: MPI errors noted instead of aborting, and an
// abandoned iteration's requests cancelled or freed (comm_engine.hpp, PeerWatch).

#include <algorithm>
#include <chrono>
#include <thread>

#include "cancelled_requests.hpp"
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

bool CommEngine::receive_matched(MPI_Message& matched, std::vector<std::byte>& bytes, int source) {
  // Not MPI_Mrecv: a message too large to be sent eagerly is matched on its announcement, and
  // its data never comes when the sender dies in between; MPI_Mrecv would wait for good.
  MPI_Request request = MPI_REQUEST_NULL;
  if (!succeeded(MPI_Imrecv(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, &matched, &request),
                 "MPI_Imrecv")) {
    return false;
  }
  for (;;) {
    int done = 0;
    if (!succeeded(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test (a control message)")) return false;
    if (done) return true;
    watch_->poll();
    if (std::find(watch_->lost().begin(), watch_->lost().end(), source) != watch_->lost().end()) {
      MPI_Request_free(&request);
      kept_transfer_buffers().push_back(Operation{Operation::Kind::activation_recv, source, std::move(bytes), {}, {}, {}});
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
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
  // Receives are cancelled (those from the dead never complete otherwise); one MPI cannot
  // cancel any more is freed, and so is every send, since MPI may still read or write their
  // buffers: those are kept for the life of the process. Collectives' requests may be
  // neither: they stay as they are.
  std::vector<MPI_Request> receives;
  std::vector<std::size_t> receive_ops;
  for (std::size_t i = 0; i < requests_.size(); ++i) {
    MPI_Request& request = requests_[i];
    if (request == MPI_REQUEST_NULL) continue;
    if (is_receive(operations_[i])) {
      receives.push_back(request);
      receive_ops.push_back(i);
    } else {
      MPI_Request_free(&request);
      kept_transfer_buffers().push_back(std::move(operations_[i]));
    }
    request = MPI_REQUEST_NULL;
  }
  const std::vector<char> freed_pending = cancel_requests(receives);
  for (std::size_t r = 0; r < receive_ops.size(); ++r) {
    if (freed_pending[r]) kept_transfer_buffers().push_back(std::move(operations_[receive_ops[r]]));
  }
  requests_.clear();
  operations_.clear();
  published_.clear();
  collection_reads_.clear();
  pending_reads_.clear();
  {
    std::lock_guard lock(mail_mutex_);  // a worker may still be looking at the mailboxes
    same_host_.drop_mail();
  }
  {
    std::lock_guard lock(outbox_mutex_);
    outbox_.clear();
  }
  mpi_transfers_ = 0;
  mpi_receives_ = 0;
  steal_outstanding_.store(false, std::memory_order_release);
}

std::vector<CommEngine::Operation>& CommEngine::kept_transfer_buffers() {
  static std::vector<Operation> kept;  // freed at exit: MPI may use them until then
  return kept;
}

}  // namespace bellows::runtime
