// The job's end (Runtime::finish): after the last iteration, the collections the application
// reads and every rank's statistics go to rank 0 over point-to-point messages, and a barrier
// ends it, every step under the peer watch with errors returned, as in an iteration. A peer
// lost on the way is reported as by an abandoned iteration, one past the last completed, so
// that the survivors recover from it (engine_recovery.cpp) as from any loss, run the
// iterations after the checkpoint again, and come back here.

#include <utility>
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cancelled_requests.hpp"
#include "engine.hpp"
#include "peer_watch.hpp"
#include "rank_set_text.hpp"
#include "watched_setup.hpp"

namespace bellows::runtime {
namespace {

// Between iterations the runtime's communicator carries no other data message with these
// tags (kHandoffTag and kMoveTag, engine_mapping.cpp, are 7002 and 7003).
constexpr int kEndTileTag = 7004;
constexpr int kEndStatsSizeTag = 7005;
constexpr int kEndStatsTag = 7006;

/// One step's transfers and what they read from or write into: kept until the process exits
/// when the step is given up, since MPI may still use them.
struct EndTransfers {
  std::vector<MPI_Request> requests;
  std::vector<char> receiving;  ///< per request: 1 a receive, 0 a send
  std::vector<std::vector<double>> received;
  std::vector<long> sizes;
  std::vector<TilePtr> sent;
  std::vector<double> stats;
  long stats_size = 0;

  void add(MPI_Request request, bool receive) {
    requests.push_back(request);
    receiving.push_back(receive ? 1 : 0);
  }
  /// After a loss: receives still pending cancelled, sends freed, the buffers kept.
  static void let_go(std::unique_ptr<EndTransfers> transfers) {
    std::vector<MPI_Request> receives;
    for (std::size_t i = 0; i < transfers->requests.size(); ++i) {
      MPI_Request& request = transfers->requests[i];
      if (request == MPI_REQUEST_NULL) continue;
      if (transfers->receiving[i] != 0) {
        receives.push_back(request);
      } else {
        MPI_Request_free(&request);
      }
    }
    (void)cancel_requests(receives);
    keep_until_exit(std::move(transfers));
  }
};

}  // namespace

Engine::JobEndTransfers Engine::finish(std::span<const TiledMatrix* const> gather,
                                       const std::vector<double>& my_stats) {
  if (!lost_in_attach_.empty()) {
    throw std::runtime_error("finish: ranks " + rank_set_text(lost_in_attach_) +
                             " were lost while the runtime attached to its communicator (its constructor)");
  }
  if (comm_ == MPI_COMM_NULL) {
    throw std::logic_error("finish on a runtime that is between the halves of a shrink or has left the job");
  }
  if (!lost_ranks_.empty()) {
    throw std::logic_error("finish after iteration " + std::to_string(iteration_) + " lost ranks " +
                           rank_set_text(lost_ranks_) + ": call recover() on the survivors' communicator first");
  }
  for (std::size_t i = 0; i < gather.size(); ++i) {
    const TiledMatrix* c = gather[i];
    const bool registered = c != nullptr && c->id() < collections_.size() && collections_[c->id()] == c;
    if (!registered) {
      throw std::invalid_argument("finish: collection " + std::to_string(i) + " to gather (id " +
                                  (c == nullptr ? std::string("none") : std::to_string(c->id())) +
                                  ") is not registered with this runtime");
    }
  }
  const ErrorsReturned world_errors_returned(MPI_COMM_WORLD);
  const ErrorsReturned errors_returned(comm_);
  JobEndTransfers out;
  // What run_iteration() would do first: a team replay that ended, and its tile moves.
  if (team_replay_ && !replaying(iteration_ + 1)) end_team_replay();
  watch_->arm();
  const auto given_up = [&]() -> JobEndTransfers {
    ++iteration_;  // reported as the iteration after the last completed, abandoned
    out.report = abandon_iteration(false);
    return std::move(out);
  };
  if (!watch_->lost().empty()) return given_up();  // found by recover()'s last checkpoint
  if (!pending_moves_.empty() && !apply_tile_moves()) return given_up();
  keep_tiles_at_start();

  // The tiles and the sizes of the statistics, then the statistics.
  auto first = std::make_unique<EndTransfers>();
  first->stats = my_stats;
  first->stats_size = static_cast<long>(my_stats.size());
  if (rank_ == 0) {
    first->sizes.assign(static_cast<std::size_t>(size_), 0);
    first->sizes[0] = first->stats_size;
    std::size_t receives = 0;
    for (const TiledMatrix* c : gather) {
      for (int n = 0; n < c->tile_cols(); ++n) {
        for (int m = 0; m < c->tile_rows(); ++m) receives += c->kept(m, n) && c->owner(m, n) != 0 ? 1 : 0;
      }
    }
    first->received.reserve(receives);
  }
  for (const TiledMatrix* c : gather) {
    for (int n = 0; n < c->tile_cols(); ++n) {
      for (int m = 0; m < c->tile_rows(); ++m) {
        if (!c->kept(m, n)) continue;
        const int owner = c->owner(m, n);
        const int values = c->rows_of_tile(m) * c->cols_of_tile(n);
        MPI_Request request = MPI_REQUEST_NULL;
        if (rank_ == 0 && owner != 0) {
          auto& buffer = first->received.emplace_back(static_cast<std::size_t>(values));
          MPI_Irecv(buffer.data(), values, MPI_DOUBLE, owner, kEndTileTag, comm_, &request);
          first->add(request, true);
        } else if (rank_ != 0 && owner == rank_) {
          const TilePtr& tile = c->tile(m, n);
          first->sent.push_back(tile);
          MPI_Isend(std::as_const(*tile).data(), values, MPI_DOUBLE, 0, kEndTileTag, comm_, &request);
          first->add(request, false);
        }
      }
    }
  }
  MPI_Request request = MPI_REQUEST_NULL;
  if (rank_ == 0) {
    for (int r = 1; r < size_; ++r) {
      MPI_Irecv(&first->sizes[static_cast<std::size_t>(r)], 1, MPI_LONG, r, kEndStatsSizeTag, comm_, &request);
      first->add(request, true);
    }
  } else {
    MPI_Isend(&first->stats_size, 1, MPI_LONG, 0, kEndStatsSizeTag, comm_, &request);
    first->add(request, false);
  }
  if (!wait_watching_peers(first->requests)) {
    EndTransfers::let_go(std::move(first));
    return given_up();
  }

  auto second = std::make_unique<EndTransfers>();
  if (rank_ == 0) {
    second->received.resize(static_cast<std::size_t>(size_));
    for (int r = 1; r < size_; ++r) {
      auto& buffer = second->received[static_cast<std::size_t>(r)];
      buffer.resize(static_cast<std::size_t>(std::max(0L, first->sizes[static_cast<std::size_t>(r)])));
      MPI_Irecv(buffer.data(), static_cast<int>(buffer.size()), MPI_DOUBLE, r, kEndStatsTag, comm_, &request);
      second->add(request, true);
    }
  } else {
    second->stats = my_stats;
    MPI_Isend(second->stats.data(), static_cast<int>(second->stats.size()), MPI_DOUBLE, 0, kEndStatsTag, comm_,
              &request);
    second->add(request, false);
  }
  if (!wait_watching_peers(second->requests)) {
    EndTransfers::let_go(std::move(second));
    return given_up();
  }

  // No rank leaves before rank 0 holds everything: a loss until then is every survivor's.
  MPI_Request barrier = MPI_REQUEST_NULL;
  MPI_Ibarrier(comm_, &barrier);
  if (!wait_watching_peers(std::span<MPI_Request>(&barrier, 1))) {
    // A collective's request may be neither freed nor cancelled: left to MPI.
    return given_up();
  }
  watch_->disarm();

  out.report.iteration = iteration_;
  out.report.ranks = size_;
  out.report.local.rank = rank_;
  if (rank_ != 0) return out;
  // Rank 0 lays the matrices out as TiledMatrix::gather_to_root does.
  std::size_t next = 0;
  for (const TiledMatrix* c : gather) {
    const int rows = c->rows(), tile = c->tile_size();
    std::vector<double>& full = out.gathered.emplace_back(static_cast<std::size_t>(rows) * c->cols(), 0.0);
    for (int n = 0; n < c->tile_cols(); ++n) {
      for (int m = 0; m < c->tile_rows(); ++m) {
        if (!c->kept(m, n)) continue;
        const int tr = c->rows_of_tile(m), tc = c->cols_of_tile(n);
        const double* src = c->owner(m, n) == 0 ? std::as_const(*c->tile(m, n)).data() : first->received[next++].data();
        for (int j = 0; j < tc; ++j) {
          std::copy_n(src + static_cast<std::size_t>(j) * tr, tr,
                      full.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(n * tile + j) * rows +
                                                                 static_cast<std::size_t>(m) * tile));
        }
      }
    }
  }
  out.stats_by_rank = std::move(second->received);
  out.stats_by_rank[0] = my_stats;
  return out;
}

}  // namespace bellows::runtime
