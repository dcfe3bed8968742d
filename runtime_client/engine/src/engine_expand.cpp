// An expand as the runtime sees it: the ranks from before it move onto the grown communicator
// (expand_onto), the ranks it adds receive the mapping state (join_expansion) after their
// Runtime constructor (Engine::attach). Every step on the grown communicator, the same-host
// probe included, is watched for lost members (watched_setup.hpp), and the ranks from before
// keep their communicator, the buddies' copies and the message log until every member holds
// the mapping state, so that a loss until then gives the expand up (docs/recovery.md, "A loss
// during the expand itself").

#include <mpi.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bellows/runtime/message_logging.hpp"
#include "comm_engine.hpp"
#include "engine.hpp"
#include "peer_watch.hpp"
#include "watched_setup.hpp"

namespace bellows::runtime {

namespace {

/// The buffers of an expand's mapping broadcasts, kept until the process exits when a loss
/// leaves their collectives to MPI (watched_setup.hpp).
struct MappingBuffers {
  std::array<std::int64_t, 3> sizes{};  // the state's length, the collection count, the iterations run
  std::vector<std::int32_t> state;
  MPI_Request request = MPI_REQUEST_NULL;
};

}  // namespace

std::vector<int> Engine::share_mapping_state(PeerWatch& watch) {
  // [first_new_rank, then per collection: grid size and placement (empty: identity),
  //  tile count and per-tile owners (empty: none), then the tile moves as (collection,
  //  m, n, to, tasks), then the pinned tasks as (class, i0, i1, i2, rank)], from rank 0.
  auto buffers = std::make_unique<MappingBuffers>();
  std::vector<std::int32_t>& state = buffers->state;
  if (rank_ == 0) {
    state.push_back(first_new_rank_);
    for (const auto* c : collections_) {
      state.push_back(static_cast<std::int32_t>(c->placement().size()));
      state.insert(state.end(), c->placement().begin(), c->placement().end());
      state.push_back(static_cast<std::int32_t>(c->tile_owners().size()));
      state.insert(state.end(), c->tile_owners().begin(), c->tile_owners().end());
    }
    state.push_back(static_cast<std::int32_t>(pending_moves_.size()));
    for (const auto& move : pending_moves_) {
      state.insert(state.end(), {static_cast<std::int32_t>(move.collection), move.m, move.n,
                                 move.to, static_cast<std::int32_t>(move.tasks)});
    }
    for (const auto& [key, rank] : pinned_) {
      state.insert(state.end(), {static_cast<std::int32_t>(key.task_class), key.index[0],
                                 key.index[1], key.index[2], rank});
    }
  }
  // Rank 0 sends the length, the collection count and the iterations run so far first;
  // the others wait asleep. Then a barrier: every member holds the state.
  buffers->sizes = {static_cast<std::int64_t>(state.size()), static_cast<std::int64_t>(collections_.size()),
                    iteration_};
  const auto given_up = [&buffers](std::vector<int> lost) {
    if (buffers->request != MPI_REQUEST_NULL) keep_until_exit(std::move(buffers));
    return lost;
  };
  int posted = MPI_Ibcast(buffers->sizes.data(), 3, MPI_INT64_T, 0, comm_, &buffers->request);
  if (auto lost = completed_watched(posted, buffers->request, watch, "MPI_Ibcast"); !lost.empty()) {
    return given_up(std::move(lost));
  }
  const auto sizes = buffers->sizes;
  const auto collection_count = static_cast<std::size_t>(sizes[1]);
  state.resize(static_cast<std::size_t>(sizes[0]));
  posted = MPI_Ibcast(state.data(), static_cast<int>(sizes[0]), MPI_INT32_T, 0, comm_, &buffers->request);
  if (auto lost = completed_watched(posted, buffers->request, watch, "MPI_Ibcast"); !lost.empty()) {
    return given_up(std::move(lost));
  }
  posted = MPI_Ibarrier(comm_, &buffers->request);
  if (auto lost = completed_watched(posted, buffers->request, watch, "MPI_Ibarrier"); !lost.empty()) {
    return given_up(std::move(lost));
  }
  if (rank_ == 0) return {};
  std::size_t at = 0;
  const auto take = [&](std::vector<int>& out) {
    const auto entries = static_cast<std::size_t>(state.at(at++));
    out.assign(state.begin() + static_cast<std::ptrdiff_t>(at),
               state.begin() + static_cast<std::ptrdiff_t>(at + entries));
    at += entries;
  };
  const int first_new_rank = state.at(at++);
  std::vector<std::vector<int>> placements(collection_count), owners(collection_count);
  for (std::size_t c = 0; c < collection_count; ++c) {
    take(placements[c]);
    take(owners[c]);
  }
  pending_moves_.clear();
  const auto moves = static_cast<std::size_t>(state.at(at++));
  for (std::size_t i = 0; i < moves; ++i, at += 5) {
    pending_moves_.push_back(TileMove{static_cast<CollectionId>(state.at(at)), state.at(at + 1),
                                      state.at(at + 2), state.at(at + 3),
                                      static_cast<std::uint32_t>(state.at(at + 4))});
  }
  pinned_.clear();
  for (; at + 4 < state.size(); at += 5) {
    pinned_.emplace(TaskKey{static_cast<TaskClassId>(state[at]),
                            {state[at + 1], state[at + 2], state[at + 3]}},
                    state[at + 4]);
  }
  last_rebalance_ = Rebalance{};
  for (const auto& move : pending_moves_) {
    ++last_rebalance_.tiles;
    last_rebalance_.tasks += move.tasks;
  }
  if (collections_.empty()) {
    // A new rank: add_collection applies these as the collections are registered.
    first_new_rank_ = first_new_rank;
    iteration_ = static_cast<int>(sizes[2]);  // continue the job's count of iterations
    joined_placements_ = std::move(placements);
    joined_tile_owners_ = std::move(owners);
  }
  local_tasks_known_ = false;
  return {};
}

std::vector<int> Engine::join_expansion(int first_new_rank) {
  // A member lost while the constructor attached (the duplicate, the same-host probe, the
  // nodes' gather; this rank's number may be unknown): given up before the mapping state.
  if (!lost_in_attach_.empty()) return lost_in_attach_;
  if (first_new_rank < 1 || first_new_rank > rank_) {
    throw std::invalid_argument("join_expansion: rank " + std::to_string(rank_) +
                                " cannot be new when the ranks before the expand were " +
                                std::to_string(first_new_rank));
  }
  if (!collections_.empty() || !classes_.empty()) {
    throw std::logic_error("join_expansion must come before the first add_collection and "
                           "add_task_class");
  }
  // Watched as the members' expand_onto is: a member lost before every member holds the
  // mapping state gives the expand up, and this rank leaves (ElasticJob::attach).
  const ErrorsReturned world_errors_returned(MPI_COMM_WORLD);
  const ErrorsReturned errors_returned(comm_);
  PeerWatch watch(comm_, rank_, size_);
  watch.arm();
  if (auto lost = share_mapping_state(watch); !lost.empty()) return lost;
  if (first_new_rank_ < 0) first_new_rank_ = first_new_rank;
  resize_under_way_ = ResizeUnderWay{ResizeKind::expand, ResizePhase::attach};
  return {};
}

std::vector<int> Engine::expand_onto(MPI_Comm comm) {
  int new_rank = -1, new_size = 0;
  MPI_Comm_rank(comm, &new_rank);
  MPI_Comm_size(comm, &new_size);
  if (comm_ == MPI_COMM_NULL || new_rank != rank_ || new_size < size_) {
    throw std::invalid_argument("expand_onto: rank " + std::to_string(rank_) + " of " +
                                std::to_string(size_) + " would become rank " +
                                std::to_string(new_rank) + " of " + std::to_string(new_size) +
                                "; the new communicator must keep every rank and only add");
  }
  // Until every member holds the mapping state the expand can still be given up: the runtime
  // keeps its communicator from before it and the buddies' copies (checkpoints_ stays on it)
  // until then, and every step on the grown communicator is watched (errors returned, on
  // MPI_COMM_WORLD too, as in an iteration). Nothing runs between iterations: no thread of
  // the communication engine is alive.
  // The duplicate takes the grown communicator's handler, as a duplicate made outside this
  // watched stretch would, and returns errors only until it ends.
  WatchedSetup setup(comm);
  if (!setup.lost_in_duplicate().empty()) return setup.lost_in_duplicate();
  const MPI_Comm duplicate = setup.duplicate();
  PeerWatch& watch = setup.watch();
  const MPI_Comm before = comm_;
  const int old_size = size_;
  const int iterations_since_attach = iterations_since_attach_;
  const bool teams_planned = teams_planned_;
  auto task_seconds_by_iteration = task_seconds_by_iteration_;
  const auto moves_before = pending_moves_;
  const Rebalance rebalance_before = last_rebalance_;
  const int first_new_rank_before = first_new_rank_;
  // The communication engine and the watch on the communicator from before are kept aside:
  // building them again there would take collectives (the same-host probe) with the lost.
  std::unique_ptr<CommEngine> comm_engine_before = std::move(comm_engine_);
  std::unique_ptr<PeerWatch> watch_before = std::move(watch_);
  const auto back_to_before = [&](std::vector<int> lost) {
    // Back onto the communicator from before, as if the expand had not begun; the grown
    // one's duplicate is freed, never disconnected (it holds the dead). This rank's number is
    // the same in both, so the trace and the statistics stand. The message log kept its
    // teams and its entries (MessageLogTeams::later): a loss after the expand given up is
    // replayed by teams from the checkpoint before it, as outside a resize.
    comm_engine_.reset();
    setup.restore_duplicate_errhandler();
    MPI_Comm_free(&comm_);
    comm_ = before;
    size_ = old_size;
    watch_ = std::move(watch_before);
    comm_engine_ = std::move(comm_engine_before);
    local_tasks_known_ = false;
    iterations_since_attach_ = iterations_since_attach;
    teams_planned_ = teams_planned;
    task_seconds_by_iteration_ = std::move(task_seconds_by_iteration);
    pending_moves_ = moves_before;
    last_rebalance_ = rebalance_before;
    first_new_rank_ = first_new_rank_before;
    return lost;
  };
  // The same-host probe on the grown communicator, watched; the message log keeps its teams
  // and entries until the expand stands.
  try {
    use_communicator(duplicate, &watch, MessageLogTeams::later);
  } catch (const MembersLost& e) {
    return back_to_before(e.lost());
  }
  // Every rank's node for the new buddies, as the new ranks' attach() gathers it.
  auto nodes = checkpoints_->post_node_gather(comm_);
  if (nodes->request != MPI_REQUEST_NULL) {
    if (auto lost = completed_watched(MPI_SUCCESS, nodes->request, watch, "MPI_Iallgather"); !lost.empty()) {
      keep_until_exit(std::move(nodes));
      return back_to_before(std::move(lost));
    }
  }
  if (first_new_rank_ < 0) first_new_rank_ = old_size;
  if (rank_ == 0) {
    pending_moves_ = plan_expand(old_size);
    last_rebalance_ = Rebalance{};
    for (const auto& move : pending_moves_) {
      ++last_rebalance_.tiles;
      last_rebalance_.tasks += move.tasks;
    }
  }
  if (auto lost = share_mapping_state(watch); !lost.empty()) return back_to_before(std::move(lost));
  // Every member holds the state: the copies from before match neither the new numbers nor
  // the new tiles, and the communicator from before goes.
  resize_under_way_ = ResizeUnderWay{ResizeKind::expand, ResizePhase::attach};
  checkpoints_->detach();
  attach_message_log();  // the grown communicator's teams; the entries from before forgotten
  if (options_.message_log.enabled) {
    comm_engine_->confine_steals(steal_partners(message_log_.rank_team(), rank_,
                                                options_.message_log.steal_across_teams));
  }
  comm_engine_before.reset();
  watch_before.reset();
  MPI_Comm old = before;
  MPI_Comm_disconnect(&old);
  checkpoints_->attach(comm_, nodes->nodes());  // new buddies; a checkpoint at the next boundary
  return {};
}

}  // namespace bellows::runtime
