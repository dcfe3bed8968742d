// Carrying on after ranks died mid-iteration (Runtime::recover): the survivors roll back to
// the last checkpoint every copy they need of is complete for, take the lost ranks' tiles
// from their buddies' memory, and continue on the communicator rebuilt without the dead.
// With message logging between teams, where choose_team_rollback() allows it, only the teams
// that lost a rank roll back; the others keep their state and serve the replay from their
// logs (docs/teams.md, "Only the lost rank's team rolls back"), and the checkpoint rolled
// back to is re-homed for the survivors, so that a loss during that replay rolls every rank
// back to it (docs/teams.md, "A loss during the replay").
// What to do is decided by plan_recovery and choose_checkpoint (recovery_plan.hpp); this
// file carries it out.

#include <algorithm>
#include <deque>
#include <iterator>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "bellows/runtime/recovery_plan.hpp"
#include "bellows/runtime/survivors.hpp"
#include "bellows/runtime/team_replay.hpp"
#include "comm_engine.hpp"
#include "engine.hpp"
#include "peer_watch.hpp"
#include "rank_set_text.hpp"
#include "sleeping_wait.hpp"

namespace bellows::runtime {
namespace {

/// A CheckpointCopy as the longs that travel in the gather.
constexpr int kLongsPerCopy = 5;
/// What each survivor sends before its copies: the iterations it completed, the iteration
/// whose start its kept tiles are of (-1: none).
constexpr std::size_t kHeaderLongs = 2;

/// What a survivor tells the others in the gather besides its copies.
struct SurvivorState {
  long completed = 0;
  long tiles_kept_at = -1;
};

/// What decides a collective that completed while the watch found a survivor lost.
enum class WhenBothSeen {
  lost,       ///< its result may be wrong: the loss counts (a later step is watched too)
  completed,  ///< the last step: every survivor took part, so the loss is left to the next
              ///< iteration's watch rather than to a survivor that may be alone in seeing it
};

/// Waits for a collective over the survivors while watching each of them (`watch`, armed).
/// A collective with a member that died may fail, may succeed with a wrong result, or, for
/// the ranks that do not need that member's data, complete; so a loss the watch finds by the
/// time the collective completes (as `both` says), or within `grace` of its failing, voids
/// it. Returns the lost survivors (ranks of the survivors' communicator), empty when the
/// collective completed and counts; throws RecoveryError when it failed with none found lost.
std::vector<int> wait_watched(MPI_Request& request, PeerWatch& watch, const char* what,
                              std::chrono::milliseconds grace, WhenBothSeen both) {
  int rc = MPI_SUCCESS;
  for (;;) {
    int done = 0;
    rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && done && both == WhenBothSeen::completed) return {};
    watch.poll();
    if (!watch.lost().empty() || rc != MPI_SUCCESS || done) break;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (rc != MPI_SUCCESS && watch.lost().empty()) {
    const auto give_up = std::chrono::steady_clock::now() + grace;
    while (watch.lost().empty() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      watch.poll();
    }
    if (watch.lost().empty()) {
      throw RecoveryError(std::string("recover: ") + what + " failed (" + describe_mpi_error(rc) +
                          ") and no survivor was found lost");
    }
  }
  // A request that neither completed nor failed is left to MPI (a collective's request may be
  // neither freed nor cancelled); its buffers belong to the caller, who keeps them.
  return watch.lost();
}

/// Every survivor's checkpoint copies, over `survivors` (collective, asleep, watched), and in
/// `gathered` what the survivors' states say together: the fewest and most iterations any
/// completed (a loss during an iteration's end leaves some survivors past it and others not),
/// and the range of iterations their kept tiles are of.
/// Empty `lost` on success; otherwise the survivors (their ranks in `survivors`) found lost
/// during the gather, whose result is then void.
std::vector<CheckpointCopy> gather_copies(MPI_Comm survivors, const std::vector<CheckpointCopy>& mine,
                                          const SurvivorState& state, TeamRollbackFacts& gathered,
                                          PeerWatch& watch, std::chrono::milliseconds grace,
                                          std::vector<int>& lost) {
  // Buffers a collective left unfinished may still write: kept until the process exits.
  static std::vector<std::vector<long>> kept_buffers;
  static std::vector<std::vector<int>> kept_counts;
  int size = 0;
  MPI_Comm_size(survivors, &size);
  std::vector<long> flat{state.completed, state.tiles_kept_at};
  for (const CheckpointCopy& c : mine) {
    flat.insert(flat.end(), {static_cast<long>(c.owner), static_cast<long>(c.holder), c.iteration,
                             c.tiles_expected, c.tiles_held});
  }
  const int count = static_cast<int>(flat.size());
  kept_counts.emplace_back(static_cast<std::size_t>(size) + 1);
  std::vector<int>& counts = kept_counts.back();
  counts[static_cast<std::size_t>(size)] = count;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Iallgather(&counts[static_cast<std::size_t>(size)], 1, MPI_INT, counts.data(), 1, MPI_INT, survivors,
                 &request);
  lost = wait_watched(request, watch, "gathering the checkpoint copies' counts", grace, WhenBothSeen::lost);
  if (!lost.empty()) return {};
  std::vector<int> displacements(static_cast<std::size_t>(size));
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displacements[static_cast<std::size_t>(r)] = total;
    total += counts[static_cast<std::size_t>(r)];
  }
  kept_buffers.push_back(std::move(flat));
  kept_buffers.emplace_back(static_cast<std::size_t>(total));
  std::vector<long>& all = kept_buffers.back();
  const std::vector<long>& sent = kept_buffers[kept_buffers.size() - 2];
  MPI_Iallgatherv(sent.data(), count, MPI_LONG, all.data(), counts.data(), displacements.data(),
                  MPI_LONG, survivors, &request);
  lost = wait_watched(request, watch, "gathering the checkpoint copies", grace, WhenBothSeen::lost);
  if (!lost.empty()) return {};
  std::vector<CheckpointCopy> copies;
  gathered.fewest_completed = gathered.most_completed = state.completed;
  gathered.oldest_tiles_kept_at = gathered.newest_tiles_kept_at = state.tiles_kept_at;
  for (int r = 0; r < size; ++r) {
    const auto begin = static_cast<std::size_t>(displacements[static_cast<std::size_t>(r)]);
    const auto end = begin + static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]);
    if (end >= begin + kHeaderLongs) {
      gathered.fewest_completed = std::min(gathered.fewest_completed, all[begin]);
      gathered.most_completed = std::max(gathered.most_completed, all[begin]);
      gathered.oldest_tiles_kept_at = std::min(gathered.oldest_tiles_kept_at, all[begin + 1]);
      gathered.newest_tiles_kept_at = std::max(gathered.newest_tiles_kept_at, all[begin + 1]);
    }
    for (std::size_t i = begin + kHeaderLongs; i + kLongsPerCopy <= end; i += kLongsPerCopy) {
      copies.push_back(CheckpointCopy{static_cast<int>(all[i]), static_cast<int>(all[i + 1]), all[i + 2],
                                      all[i + 3], all[i + 4]});
    }
  }
  // Nothing can still write them: the collectives completed.
  kept_buffers.resize(kept_buffers.size() - 2);
  kept_counts.pop_back();
  return copies;
}

/// Throws std::invalid_argument when the survivors' communicator (out.new_size, out.new_rank)
/// is not what `plan` makes of the job without out.lost.
void check_renumbering(const RecoveryReport& out, const RecoveryPlan& plan) {
  const int expected_rank = plan.ranks.new_rank[static_cast<std::size_t>(out.old_rank)];
  if (plan.survivors != out.new_size || expected_rank != out.new_rank) {
    throw std::invalid_argument(
        "recover: losing ranks " + rank_set_text(out.lost) + " of " + std::to_string(out.old_size) +
        " leaves " + std::to_string(plan.survivors) + " ranks with rank " + std::to_string(out.old_rank) +
        " as rank " + std::to_string(expected_rank) + ", but the survivors' communicator has " +
        std::to_string(out.new_size) + " ranks with this one as rank " + std::to_string(out.new_rank));
  }
}

/// Communicators that held a dead rank: never freed (see Engine::recover).
void kept_until_exit(MPI_Comm comm) {
  static std::vector<MPI_Comm> kept;
  kept.push_back(comm);
}

}  // namespace

bool Engine::wait_for_reductions(EndOfIterationSums& sums) {
  for (;;) {
    int done = 0;
    if (MPI_Testall(static_cast<int>(sums.requests.size()), sums.requests.data(), &done,
                    MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
      return false;
    }
    if (done) return true;
    watch_->poll();
    if (!watch_->lost().empty()) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void Engine::EndOfIterationSums::keep_until_exit(std::unique_ptr<EndOfIterationSums> sums) {
  static std::vector<std::unique_ptr<EndOfIterationSums>> kept;
  kept.push_back(std::move(sums));
}

IterationReport Engine::abandon_iteration(bool devices_started) {
  const auto begin = Clock::now();
  abandoning_.store(true, std::memory_order_release);
  std::size_t dropped = 0;
  if (devices_started) {
    for (auto& d : devices_) dropped += d->discard_queued();
    for (auto& d : devices_) d->stop();  // the tasks units hold finish; nothing new is queued
  }
  comm_engine_->abandon();
  if (held_for_comm_thread_) {  // the communication thread stopped before it ran it
    held_for_comm_thread_.reset();
    ++dropped;
  }
  checkpoints_->abandon_in_flight();
  {
    std::lock_guard lock(mutex_);
    dropped += pending_.size();
    pending_.clear();
    cache_.clear();
  }
  // Who is lost (wait_for_loss_verdict): kLossGrace after the first peer found lost, so that
  // ranks that died together are named together; an MPI failure that names no lost peer waits
  // for the watch or the control plane up to the verdict limit, then is reported as what it is.
  const std::string failure = comm_engine_->mpi_failure();
  (void)wait_for_loss_verdict(*watch_, begin, kLossGrace);
  watch_->disarm();
  for (auto& d : devices_) (void)d->take_stats();  // the abandoned iteration's work is redone
  (void)comm_engine_->take_stats();
  abandoning_.store(false, std::memory_order_release);
  if (watch_->lost().empty()) {
    throw std::runtime_error("iteration " + std::to_string(iteration_) + " on rank " +
                             std::to_string(rank_) + ": " +
                             (failure.empty() ? std::string("an MPI call failed") : failure) +
                             ", and no peer was found lost within " + loss_verdict_limit_text() +
                             " (neither by this rank's watch nor by the control plane)");
  }
  lost_ranks_ = watch_->lost();
  IterationReport report;
  report.iteration = iteration_;
  report.ranks = size_;
  report.lost_ranks = lost_ranks_;
  report.local.rank = rank_;
  report.start_steady_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(iteration_start_.time_since_epoch()).count();
  abandon_seconds_ = seconds_between(begin, Clock::now());
  tasks_dropped_ = dropped;
  if (trace_) trace_->flush();
  return report;
}

void Engine::map_without_lost(const ShrinkPlan& plan, int new_rank) {
  const auto leaver = [&](int r) { return plan.leaves(r); };
  const auto renumbered = [&](int r) { return plan.new_rank[static_cast<std::size_t>(r)]; };
  const auto survivor = [&](int r) { return leaver(r) ? plan.backup[static_cast<std::size_t>(r)] : r; };
  for (auto* c : collections_) {
    std::vector<int> placement(static_cast<std::size_t>(c->distribution().size()));
    for (int g = 0; g < c->distribution().size(); ++g) {
      const int now = c->placement().empty() ? g : c->placement()[static_cast<std::size_t>(g)];
      placement[static_cast<std::size_t>(g)] = renumbered(survivor(now));
    }
    std::vector<int> owners = c->tile_owners();
    for (int& own : owners) {
      if (own != TiledMatrix::kNoTileOwner) own = renumbered(survivor(own));
    }
    c->set_mapping(std::move(placement), std::move(owners), new_rank);
  }
  std::unordered_map<TaskKey, int> pinned;
  for (const auto& [key, rank] : pinned_) {
    if (!leaver(rank)) pinned.emplace(key, renumbered(rank));
  }
  pinned_ = std::move(pinned);  // a lost rank's pinned tasks go back to their tiles' owners
  offloaded_.clear();
  if (first_new_rank_ >= 0) {
    int before = 0;
    for (int r = 1; r < first_new_rank_; ++r) before += leaver(r) ? 1 : 0;
    first_new_rank_ -= before;
  }
  std::lock_guard lock(migrations_mutex_);
  migrations_.clear();  // rank numbers change
  stolen_this_iteration_.clear();
}

RecoveryPlan Engine::decide_recovery(RecoveryReport& out, const std::vector<CheckpointCopy>& copies,
                                     TeamRollbackFacts facts) const {
  if (collections_.empty()) {
    // No tiles: nothing to restore or roll back. An iteration abandoned by the loss runs again.
    RecoveryPlan plan;
    plan.ranks = plan_survivors_without_data(out.old_size, out.lost);
    plan.survivors = out.old_size - static_cast<int>(out.lost.size());
    out.iteration = lost_ranks_.empty() ? iteration_ : iteration_ - 1;
    check_renumbering(out, plan);
    return plan;
  }
  if (!checkpoints_->enabled()) {
    throw RecoveryError("recover: checkpoints are off (RuntimeOptions::checkpoint.enabled), so no "
                        "copy of the tiles of ranks " + rank_set_text(out.lost) + " exists");
  }
  const std::vector<int> buddies = checkpoints_->buddies();
  if (buddies.empty()) {
    refuse_unless_resize_carries_on(out, false);  // during a resize: its phase named
    throw RecoveryError("recover: no checkpoint was taken before ranks " + rank_set_text(out.lost) +
                        " were lost");
  }
  RecoveryRequest request;
  request.hosts = checkpoints_->nodes();
  request.buddies = buddies;
  request.lost = out.lost;
  request.on_node_loss = NodeLossAction::shrink;
  // Only the teams that lost a rank roll back where the survivors' states allow it; the
  // facts are the same on every survivor, and so is the choice.
  facts.logging_between_teams = message_log_.active();
  facts.steal_across_teams = options_.message_log.steal_across_teams;
  facts.offloading = options_.offload.enabled;
  facts.resize_under_way = resize_under_way_.has_value() || plan_given_up_;
  facts.replay_under_way = replay_checkpoint_.has_value();
  const TeamRollbackChoice scope = choose_team_rollback(facts);
  if (scope.by_teams) {
    request.rank_team = message_log_.rank_team();
  } else if (options_.message_log.enabled) {
    out.rolled_back_globally_because = scope.reason;
  }
  RecoveryDecision decision = plan_recovery(request);
  if (!decision.plan) {
    // During a resize its phase is named, as for a refusal of on_loss_during_resize.
    const std::string when = resize_under_way_
                                 ? " were lost " + resize_loss_phase_text(resize_under_way_->kind, resize_under_way_->phase)
                                 : " lost in iteration " + std::to_string(iteration_);
    throw RecoveryError("recover: ranks " + rank_set_text(out.lost) + when + ": " + decision.refusal);
  }
  const RecoveryPlan& plan = *decision.plan;
  check_renumbering(out, plan);
  const CheckpointChoice choice = choose_checkpoint(copies, plan.roll_back);
  // After a resize the only checkpoints are those taken after it.
  refuse_unless_resize_carries_on(out, choice.iteration.has_value(), choice.refusal);
  if (!choice.iteration) {
    throw RecoveryError("recover: ranks " + rank_set_text(out.lost) + " lost in iteration " +
                        std::to_string(iteration_) + ": " + choice.refusal);
  }
  out.iteration = *choice.iteration;
  for (const CheckpointSource& source : plan.roll_back) out.ranks_rolled_back.push_back(source.owner);
  std::set<int> teams;
  for (const int r : out.ranks_rolled_back) {
    teams.insert(message_log_.active() ? message_log_.rank_team()[static_cast<std::size_t>(r)] : 0);
  }
  out.teams_rolled_back.assign(teams.begin(), teams.end());
  return std::move(*decision.plan);
}

void Engine::keep_state_for_replay(RecoveryReport& out, const RecoveryPlan& plan, TeamReplayState& replay) {
  // The tiles as the interrupted iteration started: its tasks' writes here are undone, and
  // the application's changes before it are kept (it ran the iterations before).
  (void)tiles_at_start_.reinstall(collections_);
  // The collection tiles sent in the window to ranks that roll back: a rank re-running an
  // iteration of the window fetches from this rank what it fetched then (or what a rank of
  // its team fetched: stealing stays inside the teams). One copy per tile and iteration.
  // The task outputs sent in the window to ranks that roll back: sent again as activations
  // as their iteration starts (replay_logged_outputs), one per producer, slot and iteration.
  for (const LoggedMessage& m : message_log_.messages()) {
    if (replay_destination(m.iteration, m.destination, replay.window, out.ranks_rolled_back, plan.ranks) < 0) {
      continue;
    }
    if (!m.from_collection) {
      const bool kept = std::any_of(replay.logged_outputs.begin(), replay.logged_outputs.end(), [&](const auto& o) {
        return o.iteration == m.iteration && o.producer == m.producer && o.slot == m.slot;
      });
      if (kept) continue;
      replay.logged_outputs.push_back({m.iteration, m.producer, m.slot, m.tile});
      if (m.tile) out.log_bytes_for_replay += m.tile->bytes();
      continue;
    }
    const auto [at, added] =
        replay.logged_tiles.emplace(std::make_tuple(m.tile_index.collection, m.tile_index.m, m.tile_index.n,
                                                    m.iteration),
                                    m.tile);
    if (added) out.log_bytes_for_replay += at->second->bytes();
  }
}

void Engine::refuse_unless_resize_carries_on(const RecoveryReport& out, bool checkpoint_after_complete,
                                             const std::string& detail) const {
  if (!resize_under_way_) return;
  // The copies from before the resize were dropped when it changed the communicator.
  const ResizeLossDecision decision = on_loss_during_resize(
      ResizeLossFacts{resize_under_way_->kind, resize_under_way_->phase, false, checkpoint_after_complete});
  if (decision.action == ResizeLossAction::carry_on) return;
  throw RecoveryError("recover: ranks " + rank_set_text(out.lost) + " were lost " + decision.reason +
                      (detail.empty() ? "" : "; " + detail));
}

std::vector<CheckpointCopy> Engine::settle_plan_before_recovery(const RecoveryReport& out,
                                                                std::vector<CheckpointCopy> copies) {
  // The copies are every survivor's, so every survivor that holds before_plan_ decides alike;
  // one that let it go passed the barrier after the plan's checkpoint, so every survivor
  // completed that checkpoint's transfers, and the plan is carried on here too.
  std::vector<CheckpointCopy> after;
  std::vector<CheckpointCopy> before;
  for (const CheckpointCopy& copy : copies) {
    (copy.iteration >= before_plan_->boundary ? after : before).push_back(copy);
  }
  // Whether the checkpoint under the plan's teams holds every copy a global roll-back needs
  // (a resize under way rolls every rank back, choose_team_rollback).
  bool checkpoint_after_complete = false;
  if (const std::vector<int> buddies = checkpoints_->buddies(); !buddies.empty()) {
    RecoveryRequest request;
    request.hosts = checkpoints_->nodes();
    request.buddies = buddies;
    request.lost = out.lost;
    request.on_node_loss = NodeLossAction::shrink;
    if (const RecoveryDecision decision = plan_recovery(request); decision.plan) {
      checkpoint_after_complete = choose_checkpoint(after, decision.plan->roll_back).iteration.has_value();
    }
  }
  const ResizePhase phase = resize_under_way_ ? resize_under_way_->phase : ResizePhase::first_iteration_tasks;
  const ResizeLossDecision decision =
      on_loss_during_resize(ResizeLossFacts{ResizeKind::regrid, phase, true, checkpoint_after_complete});
  if (decision.action == ResizeLossAction::carry_on) {
    before_plan_.reset();
    return after;
  }
  give_up_plan();
  return before;
}

void Engine::give_up_plan() {
  StateBeforePlan kept = std::move(*before_plan_);
  before_plan_.reset();
  // The checkpoint under the plan's teams may have receives in flight (abandon_iteration
  // cancelled them): MPI may still write into its copies, kept until the process exits.
  static std::vector<std::unique_ptr<BuddyCheckpoints>> given_up;
  given_up.push_back(std::move(checkpoints_));
  checkpoints_ = std::move(kept.checkpoints);
  // The tiles' owners before the moves: a tile that came here is dropped, one that left is
  // empty until the roll-back installs this rank's copy of it.
  for (std::size_t id = 0; id < collections_.size(); ++id) {
    collections_[id]->set_mapping(std::move(kept.placements[id]), std::move(kept.tile_owners[id]), rank_);
  }
  message_log_.attach(std::move(kept.rank_team), rank_);
  teams_applied_ = std::move(kept.teams_applied);
  pending_moves_.clear();
  local_tasks_known_ = false;
  resize_under_way_.reset();
  plan_given_up_ = true;
}

void Engine::attach_recovered(MPI_Comm duplicate, std::vector<std::string> nodes) {
  // attach()'s steps, less its two collectives (the duplicate, the nodes' gather).
  use_communicator(duplicate);
  checkpoints_->attach(comm_, std::move(nodes));  // new buddies; a checkpoint at the next boundary
}

RecoveryReport Engine::recover(MPI_Comm survivors, std::span<const int> lost) {
  const auto begin = Clock::now();
  if (comm_ == MPI_COMM_NULL) {
    throw std::logic_error("recover on a runtime that is between the halves of a shrink or has "
                           "left the job");
  }
  RecoveryReport out;
  out.old_rank = rank_;
  out.old_size = size_;
  out.lost.assign(lost.begin(), lost.end());
  std::sort(out.lost.begin(), out.lost.end());
  for (const int r : lost_ranks_) {
    if (!std::binary_search(out.lost.begin(), out.lost.end(), r)) {
      throw std::invalid_argument("recover: rank " + std::to_string(r) + " was lost in iteration " +
                                  std::to_string(iteration_) + " on rank " + std::to_string(rank_) +
                                  ", but the lost set " + rank_set_text(out.lost) + " leaves it out");
    }
  }
  MPI_Comm_rank(survivors, &out.new_rank);
  MPI_Comm_size(survivors, &out.new_size);

  // Every collective of the recovery happens first, under a watch of every survivor (a
  // zero-byte receive from each), and before anything changes: the gather of the copies
  // and the duplicate of the survivors' communicator the runtime will use. A survivor that
  // dies meanwhile (a second loss during the recovery) makes this call throw
  // LostDuringRecovery on every survivor that finds it, with the runtime as it was, so
  // that the survivors can rebuild again and call recover() with the larger set, instead of
  // waiting in a collective that never ends, fails or lies. A survivor that finds nothing
  // here while another does waits in the duplicate for it, and so finds the loss too.
  std::vector<CheckpointCopy> copies;
  TeamRollbackFacts gathered;  // what the survivors' states say together
  RecoveryPlan plan;
  MPI_Comm duplicate = MPI_COMM_NULL;
  {
    const ErrorsReturned world_errors_returned(MPI_COMM_WORLD);
    const ErrorsReturned errors_returned(survivors);
    PeerWatch watch(survivors, out.new_rank, out.new_size, ControlPlaneWord::ignored);
    watch.arm();
    const auto lost_during = [&](const std::vector<int>& lost_now, const char* phase) {
      const std::vector<int> remaining = survivors_without(out.old_size, out.lost);
      std::vector<int> old_numbers;
      for (const int r : lost_now) {
        if (r < static_cast<int>(remaining.size())) old_numbers.push_back(remaining[static_cast<std::size_t>(r)]);
      }
      return LostDuringRecovery("recover: survivors " + rank_set_text(lost_now) + " (ranks " + rank_set_text(old_numbers) +
                                    " before the recovery) were lost while " + phase + ", after ranks " +
                                    rank_set_text(out.lost) + "; rank " + std::to_string(out.old_rank) +
                                    " did not recover",
                                lost_now, old_numbers);
    };
    std::vector<int> lost_now;
    // The iterations this rank completed: an abandoned iteration was numbered, not completed.
    SurvivorState state;
    state.completed = lost_ranks_.empty() ? iteration_ : iteration_ - 1;
    state.tiles_kept_at = tiles_at_start_.iteration();
    std::vector<CheckpointCopy> held = checkpoints_->copies();
    if (before_plan_) {  // the copies from before TeamLB's plan too, older than its checkpoint
      const auto before = before_plan_->checkpoints->copies();
      held.insert(held.end(), before.begin(), before.end());
    }
    copies = gather_copies(survivors, held, state, gathered, watch, kLossGrace, lost_now);
    if (!lost_now.empty()) throw lost_during(lost_now, "the survivors gathered their checkpoint copies");
    if (before_plan_) copies = settle_plan_before_recovery(out, std::move(copies));
    if (replay_checkpoint_) copies = settle_replay_checkpoint(out, std::move(copies));
    plan = decide_recovery(out, copies, gathered);
    // Where a duplicate left unfinished may still write its handle: a deque keeps each
    // element in place as others are added.
    static std::deque<MPI_Comm> pending_duplicates;
    pending_duplicates.push_back(MPI_COMM_NULL);
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Comm_idup(survivors, &pending_duplicates.back(), &request);
    lost_now = wait_watched(request, watch, "duplicating the survivors' communicator", kLossGrace,
                            WhenBothSeen::completed);
    if (!lost_now.empty()) throw lost_during(lost_now, "the runtime duplicated the survivors' communicator");
    duplicate = pending_duplicates.back();
    pending_duplicates.pop_back();
  }
  replay_checkpoint_.reset();  // rolled back to it, or carried on from the one after it

  // The old communicator holds the dead, so it is never disconnected (rebuild.hpp says why);
  // nor is it freed: messages of the abandoned iteration may still be on their way to this
  // rank on it, and a freed communicator's context id may be given to the next one, where
  // they would match the new iteration's receives (a stale fetch, a checkpoint tile sent
  // as unchanged). It is kept, unused, until the process exits.
  comm_engine_.reset();
  watch_.reset();
  kept_until_exit(comm_);
  comm_ = MPI_COMM_NULL;

  // The iteration the loss interrupted: the one after the last that any survivor completed
  // (the same on every survivor; one that abandoned an earlier iteration, whose end the loss
  // hit, ran its tasks already).
  out.interrupted_iteration = gathered.most_completed + 1;
  out.iterations_redone = std::max(0L, out.interrupted_iteration - 1 - out.iteration);
  // Only some teams roll back (choose_team_rollback): the others keep their state and serve
  // the replay from their logs (docs/teams.md, "Only the lost rank's team rolls back").
  const bool team_roll_back = !collections_.empty() &&
                              static_cast<int>(out.ranks_rolled_back.size()) < out.old_size;
  const bool rolls_back_here = !team_roll_back || std::binary_search(out.ranks_rolled_back.begin(),
                                                                     out.ranks_rolled_back.end(), out.old_rank);
  team_replay_.reset();
  bytes_replayed_.store(0, std::memory_order_relaxed);
  copies_dropped_.store(0, std::memory_order_relaxed);
  // The task outputs received that this rank takes again: a rank that rolls back re-runs the
  // iterations after the checkpoint, and every rank runs the interrupted iteration again; a
  // rank that keeps its state still holds what it received in the window, and drops a copy.
  received_versions_.forget_from(rolls_back_here ? out.iteration + 1 : out.interrupted_iteration);
  TeamReplayState replay;
  if (team_roll_back) {
    replay.window = replay_window(out.iteration, out.interrupted_iteration);
    replay.here = rolls_back_here;
    for (const int r : out.ranks_rolled_back) {
      if (!plan.ranks.leaves(r)) replay.replaying.push_back(plan.ranks.new_rank[static_cast<std::size_t>(r)]);
    }
    std::sort(replay.replaying.begin(), replay.replaying.end());
  }

  // The lost ranks' tiles and grid places go to their buddies; every survivor that rolls back
  // then installs its own copy at that iteration, and each buddy its lost wards' copies.
  map_without_lost(plan.ranks, out.new_rank);
  if (!rolls_back_here) {
    keep_state_for_replay(out, plan, replay);
  } else if (!collections_.empty()) {
    out.tiles_restored += checkpoints_->install(out.old_rank, out.iteration, collections_);
  }
  for (const TileRestore& restore : plan.restores) {
    if (plan.ranks.backup[static_cast<std::size_t>(restore.lost_rank)] != out.old_rank) continue;
    const std::size_t tiles = checkpoints_->install(restore.lost_rank, out.iteration, collections_);
    out.tiles_restored += tiles;
    out.tiles_taken_over += tiles;
  }
  completed_before_loss_ = std::max(completed_before_loss_, out.interrupted_iteration - 1);
  pending_moves_.clear();
  lost_ranks_.clear();
  resize_under_way_.reset();  // carried on: the state restored is the one after it
  plan_given_up_ = false;
  iteration_ = static_cast<int>(out.iteration);
  std::vector<std::string> survivor_nodes;  // nodes do not change: known from before the loss
  if (checkpoints_->enabled()) {  // else the checkpoints never learnt them, nor need them
    for (const int r : survivors_without(out.old_size, out.lost)) {
      survivor_nodes.push_back(checkpoints_->nodes()[static_cast<std::size_t>(r)]);
    }
  }
  // With iterations to replay, the checkpoint rolled back to is kept, re-homed for the
  // survivors, so that a loss in the replay can roll every rank back to it.
  const bool rehome = team_roll_back && replay.window.iterations() > 0 && checkpoints_->enabled();
  if (rehome) {
    use_communicator(duplicate);  // attach_recovered() less the checkpoints' attach
  } else {
    attach_recovered(duplicate, std::move(survivor_nodes));
  }
  if (team_roll_back) {
    // The ranks that re-run the window steal only from each other; the others run no task.
    std::vector<int> partners;
    if (replay.here) {
      std::copy_if(replay.replaying.begin(), replay.replaying.end(), std::back_inserter(partners),
                   [&](int r) { return r != rank_; });
    }
    comm_engine_->confine_steals(std::move(partners));
    // The re-grid waits for the replay's end, when every rank is at the same iteration.
    last_rebalance_ = Rebalance{};
    if (options_.rebalance_on_resize) replay.moves_after = plan_regrid();
    out.tiles_regridded = replay.moves_after.size();
    team_replay_ = std::move(replay);
    // No checkpoint of the state now: the ranks are at different iterations until the
    // replay ends. The first boundary after it takes one, completed before its tasks; until
    // then the checkpoint rolled back to, re-homed, is the one a loss goes back to.
    if (rehome) {
      const auto restored = Clock::now();
      rehome_checkpoint_for_replay(out, plan.ranks, std::move(survivor_nodes));
      out.checkpoint_seconds = seconds_between(restored, Clock::now());
    }
    out.seconds = seconds_between(begin, Clock::now());
    recoveries_.push_back(out);
    return out;
  }
  last_rebalance_ = Rebalance{};
  if (options_.rebalance_on_resize) {
    pending_moves_ = plan_regrid();  // carried out by checkpoint_recovered_state()
    for (const TileMove& move : pending_moves_) {
      ++last_rebalance_.tiles;
      last_rebalance_.tasks += move.tasks;
    }
  }
  out.tiles_regridded = pending_moves_.size();
  const auto restored = Clock::now();
  checkpoint_recovered_state(out);
  out.checkpoint_seconds = seconds_between(restored, Clock::now());
  out.seconds = seconds_between(begin, Clock::now());
  recoveries_.push_back(out);
  return out;
}

void Engine::checkpoint_recovered_state(const RecoveryReport& out) {
  if (!checkpoints_->enabled() || collections_.empty()) return;
  // The copies from before the loss were dropped when the runtime attached to the
  // survivors; until the state restored has copies under the new buddies, a second loss
  // would find no checkpoint to roll back to. So the re-grid's moves are carried out here
  // rather than at the next iteration's start, and the checkpoint of the result is taken
  // and completed before recover() returns: its layout is the one the next iterations run
  // on. Every survivor is watched meanwhile, as in recover()'s collectives before.
  const ErrorsReturned world_errors_returned(MPI_COMM_WORLD);
  const ErrorsReturned errors_returned(comm_);
  watch_ = std::make_unique<PeerWatch>(comm_, rank_, size_, ControlPlaneWord::ignored);
  watch_->arm();
  if (!pending_moves_.empty() && !apply_tile_moves()) {
    // No move is applied here, but survivors that moved nothing with the lost one applied
    // theirs: the layouts differ, and no copy of the state restored exists. Refused.
    const std::vector<int> remaining = survivors_without(out.old_size, out.lost);
    std::vector<int> old_numbers;
    for (const int r : watch_->lost()) old_numbers.push_back(remaining[static_cast<std::size_t>(r)]);
    throw RecoveryError("recover: survivors " + rank_set_text(watch_->lost()) + " (ranks " +
                        rank_set_text(old_numbers) + " before the recovery) were lost while the survivors "
                        "re-gridded the restored tiles, after ranks " + rank_set_text(out.lost) + "; rank " +
                        std::to_string(out.old_rank) + " did not recover: no copy of the state restored from "
                        "iteration " + std::to_string(out.iteration) + " is left");
  }
  pending_moves_.clear();
  checkpoints_->take(iteration_, collections_);
  complete_recovery_checkpoint("the checkpoint of the state restored from iteration " + std::to_string(out.iteration));
}

void Engine::rehome_checkpoint_for_replay(RecoveryReport& out, const ShrinkPlan& ranks,
                                          std::vector<std::string> nodes) {
  // The survivors' copies of the checkpoint rolled back to: a rank that kept its state sends
  // its copy of it, not its tiles (at the iteration before the interrupted one). Every
  // survivor is watched meanwhile, as in checkpoint_recovered_state().
  const ErrorsReturned world_errors_returned(MPI_COMM_WORLD);
  const ErrorsReturned errors_returned(comm_);
  watch_ = std::make_unique<PeerWatch>(comm_, rank_, size_, ControlPlaneWord::ignored);
  watch_->arm();
  ReplayCheckpoint kept;
  kept.iteration = out.iteration;
  for (const TiledMatrix* c : collections_) {
    kept.placements.push_back(c->placement());
    kept.tile_owners.push_back(c->tile_owners());
  }
  out.checkpoint_bytes_rehomed = checkpoints_->rehome(comm_, std::move(nodes), out.iteration, ranks, collections_);
  replay_checkpoint_ = std::move(kept);
  complete_recovery_checkpoint("the copies of the checkpoint of iteration " + std::to_string(out.iteration) +
                               " re-homed for the replay");
}

void Engine::complete_recovery_checkpoint(const std::string& what) {
  const double posted_and_waited = checkpoints_->complete_transfers([this] {
    watch_->poll();
    return !watch_->lost().empty();
  });
  if (posted_and_waited < 0.0) {
    // A transfer with a lost survivor: the wards' copies that did not all arrive are dropped,
    // those that did stay and count for the next recovery (choose_checkpoint).
    checkpoints_->abandon_in_flight();
    const auto give_up = Clock::now() + kLossGrace;  // a failed transfer before the watch saw
    while (watch_->lost().empty() && Clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      watch_->poll();
    }
    if (watch_->lost().empty()) {
      throw RecoveryError("recover: a transfer of " + what + " failed and no survivor was found lost");
    }
  } else {
    // Every survivor that gets through the barrier completed its transfers: the checkpoint is
    // complete everywhere. A barrier that completed counts (a loss it hid is the next
    // iteration's); one that a loss held up leaves the checkpoint complete here but not marked.
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Ibarrier(comm_, &request);
    (void)wait_watched(request, *watch_, ("confirming " + what).c_str(), kLossGrace, WhenBothSeen::completed);
  }
  if (!watch_->lost().empty()) {
    // A survivor lost while the checkpoint was completed: this survivor and those that got
    // through the barrier before the loss cannot tell which copies every holder completed.
    // So none refuses here: the watch, kept, makes the next run_iteration() report the loss at
    // once (the others' finds it in its barrier), and the recovery from it decides alike on
    // every survivor from the copies that arrived, as for a loss during an iteration's end.
    return;
  }
  watch_->disarm();
  checkpoints_->confirmed_complete();
  watch_ = std::make_unique<PeerWatch>(comm_, rank_, size_);  // the job's numbering from here
}

std::vector<CheckpointCopy> Engine::settle_replay_checkpoint(const RecoveryReport& out,
                                                             std::vector<CheckpointCopy> copies) {
  // The copies are every survivor's, so every survivor decides alike. Newer than the re-homed
  // checkpoint: the one taken at the interrupted iteration's start, after the replay and the
  // recovery's re-grid, not yet confirmed complete (replay_checkpoint_ is still held).
  const long rehomed = replay_checkpoint_->iteration;
  std::vector<CheckpointCopy> after;
  std::vector<CheckpointCopy> before;
  for (const CheckpointCopy& copy : copies) (copy.iteration > rehomed ? after : before).push_back(copy);
  if (!after.empty()) {
    // Every copy a global roll-back to it needs arrived: every rank took it, so every rank
    // applied the re-grid's moves it was taken after; carried on from it.
    RecoveryRequest request;
    request.hosts = checkpoints_->nodes();
    const std::vector<int> buddies = checkpoints_->buddies();
    request.buddies = buddies;
    request.lost = out.lost;
    request.on_node_loss = NodeLossAction::shrink;
    if (const RecoveryDecision decision = plan_recovery(request);
        decision.plan && choose_checkpoint(after, decision.plan->roll_back).iteration) {
      replay_checkpoint_.reset();
      return after;
    }
  }
  // Back to the re-homed checkpoint, under the tiles' owners it was re-homed under: a tile
  // the re-grid moved here is dropped, one that left is empty until the roll-back installs
  // this rank's copy of it.
  checkpoints_->drop_newer_than(rehomed);
  for (std::size_t id = 0; id < collections_.size(); ++id) {
    collections_[id]->set_mapping(replay_checkpoint_->placements[id],
                                  replay_checkpoint_->tile_owners[id], rank_);
  }
  return before;
}

}  // namespace bellows::runtime
