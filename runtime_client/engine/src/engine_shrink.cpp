// A shrink's survivors take their first checkpoint before the leavers go: once the survivors'
// communicator is made, and before the barrier that confirms it over the job's communicator,
// each rank that stays attaches to it and completes a checkpoint under the survivors' buddies
// (attach_shrunk_checkpointed), while the job's communicator, the copies from before the
// shrink (the leavers' included) and the tiles as they were stay held. The barrier that ends
// that checkpoint is the shrink's point of no return: a rank that stays, lost before any rank
// that stays passed it, still gives the shrink up and the job recovers from the copies from
// before; lost after it (the confirming barrier, the leavers' disconnect, the first iteration's
// start), the job recovers from this checkpoint (docs/recovery.md, "A loss during a resize").

#include <mpi.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bellows/runtime/message_logging.hpp"
#include "comm_engine.hpp"
#include "engine.hpp"
#include "peer_watch.hpp"
#include "watched_setup.hpp"

namespace bellows::runtime {

namespace {

/// What begins the text of a failed step of the survivors' first checkpoint that found no
/// survivor lost (completed_watched).
constexpr const char* kShrinkStretch = "shrink: the survivors' ";

}  // namespace

std::vector<int> Engine::attach_shrunk_checkpointed(MPI_Comm survivors) {
  if (!before_hand_off_ || before_hand_off_->job_communicator || comm_ == MPI_COMM_NULL) {
    throw std::logic_error("attach_shrunk_checkpointed without prepare_shrink holding the state before it");
  }
  // Every step on the survivors' communicator is watched (errors returned, on MPI_COMM_WORLD
  // too). Its numbers are not the job's, so the control plane's notices are not read here;
  // the watch on the job's communicator that confirms the shrink next reads them.
  WatchedSetup setup(survivors, ControlPlaneWord::ignored, kShrinkStretch);
  if (!setup.lost_in_duplicate().empty()) return setup.lost_in_duplicate();
  const MPI_Comm duplicate = setup.duplicate();
  PeerWatch& watch = setup.watch();
  const auto given_up = [&](std::vector<int> lost) {
    setup.restore_duplicate_errhandler();  // before the duplicate is freed
    back_onto_job_communicator();
    return lost;
  };

  // The job's communicator and what runs on it are set aside, not let go of.
  auto& kept = before_hand_off_->job_communicator.emplace();
  kept.comm = comm_;
  kept.rank = rank_;
  kept.size = size_;
  kept.comm_engine = std::move(comm_engine_);
  kept.watch = std::move(watch_);
  kept.checkpoints = std::move(checkpoints_);
  kept.iterations_since_attach = iterations_since_attach_;
  kept.teams_planned = teams_planned_;
  kept.task_seconds_by_iteration = task_seconds_by_iteration_;
  checkpoints_ = std::make_unique<BuddyCheckpoints>(options_.checkpoint, node_of(options_.checkpoint));
  use_communicator(duplicate);  // the teams for the survivors, the checkpoint's buddies inside them

  auto nodes = checkpoints_->post_node_gather(comm_);
  if (nodes->request != MPI_REQUEST_NULL) {
    if (auto lost = completed_watched(MPI_SUCCESS, nodes->request, watch, "MPI_Iallgather", kShrinkStretch); !lost.empty()) {
      keep_until_exit(std::move(nodes));
      return given_up(std::move(lost));
    }
  }
  checkpoints_->attach(comm_, nodes->nodes());
  if (!checkpoints_->enabled() || collections_.empty()) return {};  // the next boundary takes it, as before

  // The boundary after iteration_: the first checkpoint under the survivors' buddies, every
  // tile of every collection (nothing of it was sent to these buddies before).
  checkpoints_->take(iteration_, collections_);
  const double seconds = checkpoints_->complete_transfers([&watch] {
    watch.poll();
    return !watch.lost().empty();
  });
  if (seconds < 0.0) {
    checkpoints_->abandon_in_flight();
    return given_up(watch.lost());
  }
  // The shrink's point of no return: past this barrier every rank that stays completed the
  // checkpoint's transfers. Failed here, this rank completed its own and stays on the survivors'
  // communicator: the shrink's confirmation tells whether another rank that stays passed it
  // (confirm_shrunk_checkpoint) or not (leave_unconfirmed_survivors).
  MPI_Request barrier = MPI_REQUEST_NULL;
  if (auto lost = completed_watched(MPI_Ibarrier(comm_, &barrier), barrier, watch, "MPI_Ibarrier",
                                    kShrinkStretch); !lost.empty()) {
    kept.checkpoint_barrier_failed = true;
    return lost;
  }
  checkpoints_->confirmed_complete();
  return {};
}

void Engine::confirm_shrunk_checkpoint() {
  if (!before_hand_off_ || !before_hand_off_->job_communicator ||
      !before_hand_off_->job_communicator->checkpoint_barrier_failed) {
    throw std::logic_error("confirm_shrunk_checkpoint without a survivors' checkpoint whose barrier failed here");
  }
  before_hand_off_->job_communicator->checkpoint_barrier_failed = false;
  checkpoints_->confirmed_complete();
}

void Engine::leave_unconfirmed_survivors() {
  if (before_hand_off_ && before_hand_off_->job_communicator) back_onto_job_communicator();
}

void Engine::back_onto_job_communicator() {
  // The survivors' duplicate is freed, never disconnected (it may hold the dead); the
  // checkpoint under it goes with it, its own copies' sends already complete or freed.
  auto kept = std::move(*before_hand_off_->job_communicator);
  before_hand_off_->job_communicator.reset();
  comm_engine_.reset();
  watch_.reset();
  checkpoints_->abandon_in_flight();
  MPI_Comm_free(&comm_);
  comm_ = kept.comm;
  rank_ = kept.rank;
  size_ = kept.size;
  comm_engine_ = std::move(kept.comm_engine);
  watch_ = std::move(kept.watch);
  checkpoints_ = std::move(kept.checkpoints);
  iterations_since_attach_ = kept.iterations_since_attach;
  teams_planned_ = kept.teams_planned;
  task_seconds_by_iteration_ = std::move(kept.task_seconds_by_iteration);
  if (options_.message_log.enabled) {
    message_log_.attach(resolve_teams(options_.message_log, size_), rank_);
    checkpoints_->set_teams(message_log_.rank_team());
  }
  if (!options_.trace_path.empty()) trace_ = std::make_unique<Trace>(options_.trace_path, rank_);
  total_stats_.rank = rank_;
  local_tasks_known_ = false;
}

}  // namespace bellows::runtime
