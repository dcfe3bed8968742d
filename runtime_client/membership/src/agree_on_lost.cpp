// agree_on_lost: the survivors settle on one set of lost ranks before rebuild_without (rebuild.hpp
// says how, and on which MPICH behaviour: a receive from a dead rank fails, one from a live rank
// is answered).

#include "bellows/runtime/rebuild.hpp"

#include "bellows/runtime/loss_notices.hpp"
#include "cancelled_requests.hpp"
#include "rank_set_text.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace bellows::runtime {
namespace {

using Deadline = std::chrono::steady_clock::time_point;

/// One tag per round, so that a slow survivor's set is never read as another round's.
constexpr int kFirstAgreeTag = 0x4260;

std::vector<int> marked(const std::vector<int>& marks) {
  std::vector<int> ranks;
  for (std::size_t r = 0; r < marks.size(); ++r) {
    if (marks[r] != 0) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

/// What a round that ended at its deadline leaves to MPI: the buffers of its sends (freed
/// requests MPI may still read) and of its receives that could not be cancelled.
std::vector<std::vector<int>>& kept_buffers() {
  static std::vector<std::vector<int>> kept;  // freed at exit
  return kept;
}

}  // namespace

std::vector<int> agree_on_lost(MPI_Comm job, std::span<const int> seen, Deadline deadline, int* rounds) {
  int size = 0, rank = -1;
  MPI_Comm_size(job, &size);
  MPI_Comm_rank(job, &rank);
  std::vector<int> marks(static_cast<std::size_t>(size), 0);
  for (const int r : seen) {
    if (r < 0 || r >= size) {
      throw std::invalid_argument("agree_on_lost: rank " + std::to_string(r) + " is not a rank of the " +
                                  std::to_string(size) + " in the job");
    }
    marks[static_cast<std::size_t>(r)] = 1;
  }
  if (marks[static_cast<std::size_t>(rank)] != 0) {
    throw std::invalid_argument("agree_on_lost: rank " + std::to_string(rank) + " names itself lost");
  }
  // The control plane's word counts as a loss seen (a silent rank fails no receive). A notice
  // naming this rank is left to the others: if they heard it too, they name this rank lost.
  const auto add_told = [&] {
    for (const int r : loss_notices().ranks_lost(size)) {
      if (r != rank) marks[static_cast<std::size_t>(r)] = 1;
    }
  };
  add_told();
  for (int round = 0; round < size; ++round) {
    const int tag = kFirstAgreeTag + round;
    std::vector<int> peers;
    for (int r = 0; r < size; ++r) {
      if (r != rank && marks[static_cast<std::size_t>(r)] == 0) peers.push_back(r);
    }
    std::vector<std::vector<int>> theirs(peers.size(), std::vector<int>(static_cast<std::size_t>(size), 0));
    std::vector<MPI_Request> receives(peers.size(), MPI_REQUEST_NULL), sends(peers.size(), MPI_REQUEST_NULL);
    std::vector<char> failed(peers.size(), 0), arrived(peers.size(), 0);
    std::vector<int> outgoing = marks;  // what the sends read; kept past the round if one is freed
    for (std::size_t i = 0; i < peers.size(); ++i) {
      if (MPI_Irecv(theirs[i].data(), size, MPI_INT, peers[i], tag, job, &receives[i]) != MPI_SUCCESS) {
        receives[i] = MPI_REQUEST_NULL;
        failed[i] = 1;
      }
      // A send to a dead peer may fail at the call or complete as if delivered: either is fine.
      if (MPI_Isend(outgoing.data(), size, MPI_INT, peers[i], tag, job, &sends[i]) != MPI_SUCCESS) {
        sends[i] = MPI_REQUEST_NULL;
      }
    }
    for (;;) {
      std::size_t open = 0;
      for (std::size_t i = 0; i < peers.size(); ++i) {
        if (receives[i] == MPI_REQUEST_NULL) continue;
        int done = 0;
        if (MPI_Test(&receives[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
          receives[i] = MPI_REQUEST_NULL;  // the peer died: MPI freed the request
          failed[i] = 1;
        } else if (done) {
          arrived[i] = 1;
        } else {
          ++open;
        }
      }
      // A peer that another survivor's set or the control plane names lost may be silent
      // rather than dead (stopped, cut off): its receive would never fail, so it is given up
      // as a failed one, which adds the peer and, like any failure, calls another round.
      std::vector<int> told_now = loss_notices().ranks_lost(size);
      for (std::size_t i = 0; i < peers.size(); ++i) {
        if (receives[i] == MPI_REQUEST_NULL) continue;
        const auto peer = static_cast<std::size_t>(peers[i]);
        bool named = std::binary_search(told_now.begin(), told_now.end(), peers[i]);
        for (std::size_t j = 0; j < peers.size() && !named; ++j) named = arrived[j] && theirs[j][peer] != 0;
        if (!named) continue;
        if (cancel_request(receives[i])) kept_buffers().push_back(std::move(theirs[i]));
        failed[i] = 1;
        --open;
      }
      if (open == 0) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        std::vector<int> silent;
        for (std::size_t i = 0; i < peers.size(); ++i) {
          if (receives[i] != MPI_REQUEST_NULL) silent.push_back(peers[i]);
          if (sends[i] != MPI_REQUEST_NULL) MPI_Request_free(&sends[i]);
        }
        const std::vector<char> freed_pending = cancel_requests(receives);
        kept_buffers().push_back(std::move(outgoing));
        for (std::size_t i = 0; i < peers.size(); ++i) {
          if (freed_pending[i]) kept_buffers().push_back(std::move(theirs[i]));
        }
        throw RebuildError("agree_on_lost: rank " + std::to_string(rank) + " had no answer from ranks " +
                           rank_set_text(silent) + " in round " + std::to_string(round + 1) +
                           " before its deadline");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    bool sends_freed = false;
    for (std::size_t i = 0; i < peers.size(); ++i) {
      int done = 0;
      if (sends[i] != MPI_REQUEST_NULL && (MPI_Test(&sends[i], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done)) {
        MPI_Request_free(&sends[i]);  // small: it completes locally, or its peer is gone
        sends_freed = true;
      }
    }
    if (sends_freed) kept_buffers().push_back(std::move(outgoing));
    bool all_equal = true;
    std::vector<int> merged = marks;
    for (std::size_t i = 0; i < peers.size(); ++i) {
      if (failed[i]) {
        all_equal = false;
        merged[static_cast<std::size_t>(peers[i])] = 1;
        continue;
      }
      if (theirs[i] != marks) all_equal = false;
      for (std::size_t r = 0; r < merged.size(); ++r) merged[r] |= theirs[i][r];
    }
    if (merged[static_cast<std::size_t>(rank)] != 0) {
      std::vector<int> by;
      for (std::size_t i = 0; i < peers.size(); ++i) {
        if (arrived[i] && theirs[i][static_cast<std::size_t>(rank)] != 0) by.push_back(peers[i]);
      }
      throw RebuildError("agree_on_lost: rank " + std::to_string(rank) + " is named lost by ranks " +
                         rank_set_text(by));
    }
    if (all_equal) {
      if (rounds != nullptr) *rounds = round + 1;
      return marked(marks);
    }
    marks = std::move(merged);
  }
  throw RebuildError("agree_on_lost: rank " + std::to_string(rank) + " found no agreement in " +
                     std::to_string(size) + " rounds; its set is " + rank_set_text(marked(marks)));
}

}  // namespace bellows::runtime
