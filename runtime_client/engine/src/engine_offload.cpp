// Proactive offloading: at the start of an iteration, the tasks of some tiles of the ranks
// predicted to finish late go to the ranks predicted to finish early (OffloadPolicy,
// offload_policy.hpp, decides which), through the same override table as the tasks pinned
// to new ranks (pinned_), so that their predecessors send straight to the new rank and
// nothing is moved while the iteration runs.
//
// The unit that moves is the work one tile decides (the tasks whose owner is that tile's
// owner, as found by for_each_task_by_tile): a C tile of a GEMM with its whole chain of
// updates, so that the chain's intermediate tiles stay on one rank.

#include <algorithm>
#include <array>

#include "bellows/runtime/offload_policy.hpp"
#include "engine.hpp"
#include "sleeping_wait.hpp"

namespace bellows::runtime {
namespace {

/// What each rank tells the others before the plan.
struct MeasuredRates {
  double seconds_per_flop = -1.0;  ///< per lane folded in; negative: no task measured yet
  double transfer_latency_seconds = 0.0;
  double seconds_per_byte = 0.0;
};
constexpr int kRateFields = 3;

std::uint64_t tile_bytes(const TiledMatrix& c, int m, int n) {
  return static_cast<std::uint64_t>(c.rows_of_tile(m)) * static_cast<std::uint64_t>(c.cols_of_tile(n)) *
         sizeof(double);
}

}  // namespace

void Engine::apply_slowdown() {
  const auto& slow = options_.emulated_slowdown;
  const bool slowed = slow.rank == rank_ && iteration_ >= slow.from_iteration;
  for (auto& device : devices_) device->set_slowdown(slowed ? slow.factor : 1.0);
}

void Engine::withdraw_offloads() {
  if (offloaded_.empty()) return;
  for (const auto& key : offloaded_) pinned_.erase(key);
  offloaded_.clear();
  local_tasks_known_ = false;
}

void Engine::plan_offloads() {
  tasks_offloaded_ = 0;
  tasks_offloaded_here_ = 0;
  offload_moved_ = false;
  planned_makespan_seconds_ = 0.0;
  planned_seconds_per_flop_ = 0.0;
  invitees_.clear();
  next_invitee_ = 0;
  if (size_ < 2 || collections_.empty()) return;
  WorkMap work = map_work({});

  // This rank's measured speed and what a tile costs to bring here. A flop costs what it
  // cost in the last iteration (its tasks' measured times over their flops, per lane), so
  // that a rank slowed down part-way is seen at its new speed after one iteration (the cost
  // model forgets its samples gradually: the first plan after a 3x slowdown saw it 2.7x,
  // docs/benchmarks.md). Before a rank ran a task, what its cost model predicts for its
  // typical task, the fitted overhead per task included.
  double flops = 0.0, tasks = 0.0;
  for (std::size_t s = 0; s < work.weight.size(); ++s) {
    flops += work.weight[s];
    tasks += work.tasks[s];
  }
  MeasuredRates mine;
  {
    std::lock_guard lock(cost_mutex_);
    const CostSummary summary = cost_model_.summary();
    if (previous_seconds_per_flop_ > 0.0) {
      mine.seconds_per_flop = previous_seconds_per_flop_ / lanes();
    } else if (summary.task_samples > 0 && tasks > 0.0 && flops > 0.0) {
      const double typical = flops / tasks;
      mine.seconds_per_flop = cost_model_.work_seconds(1.0, typical) / typical / lanes();
    }
    const CostModelOptions& priors = cost_model_.options();
    mine.transfer_latency_seconds = priors.transfer_latency_seconds;
    mine.seconds_per_byte = priors.seconds_per_byte;
    if (summary.transfer_samples > 0) {
      mine.transfer_latency_seconds = summary.transfer_latency_us * 1e-6;
      if (summary.transfer_gbytes_per_s > 0.0) mine.seconds_per_byte = 1.0 / (summary.transfer_gbytes_per_s * 1e9);
    }
  }
  const std::array<double, kRateFields> sent{mine.seconds_per_flop, mine.transfer_latency_seconds,
                                             mine.seconds_per_byte};
  std::vector<double> all(static_cast<std::size_t>(size_) * kRateFields);
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Iallgather(sent.data(), kRateFields, MPI_DOUBLE, all.data(), kRateFields, MPI_DOUBLE, comm_,
                 &request);
  wait_asleep(request);

  // Rank 0 predicts every rank's work and plans, unless the last plans cost more than they
  // brought (OffloadFeedback); the moves travel as (tile, receiver) pairs, and the predicted
  // work after them (before them, without a plan) tells each rank when it drifts.
  std::vector<std::int32_t> moves;
  std::vector<double> planned_loads;
  if (rank_ == 0) {
    std::vector<OffloadRank> ranks(static_cast<std::size_t>(size_));
    double known = 0.0, sum = 0.0;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      ranks[r].seconds_per_flop = all[r * kRateFields];
      ranks[r].transfer_latency_seconds = std::max(all[r * kRateFields + 1], 0.0);
      ranks[r].seconds_per_byte = std::max(all[r * kRateFields + 2], 0.0);
      if (ranks[r].seconds_per_flop >= 0.0) {
        known += 1.0;
        sum += ranks[r].seconds_per_flop;
      }
    }
    // A rank that has not run a task yet (new, or owning none) is taken to be as fast as the
    // mean of the others; before any rank has measured one, nothing is predicted.
    if (known > 0.0) {
      for (auto& r : ranks) {
        if (r.seconds_per_flop < 0.0) r.seconds_per_flop = sum / known;
      }
      std::vector<OffloadCandidate> candidates;
      std::vector<std::size_t> tile_of;
      for (std::size_t s = 0; s < work.weight.size(); ++s) {
        const int holder = work.holder[s];
        if (holder >= 0 && holder < size_) {
          ranks[static_cast<std::size_t>(holder)].load_seconds += work.weight[s];
          if (work.tasks[s] > 0) {
            candidates.push_back(OffloadCandidate{holder, work.weight[s], 0, 0});
            tile_of.push_back(s);
          }
        }
      }
      for (std::size_t r = 0; r < ranks.size(); ++r) {
        ranks[r].load_seconds = (ranks[r].load_seconds + work.load[r]) * ranks[r].seconds_per_flop;
        planned_loads.push_back(ranks[r].load_seconds);
      }
      // Held back by OffloadFeedback, the plan is the predicted work alone: nothing is priced.
      if (offload_feedback_.may_plan() && !candidates.empty()) {
        // What a receiver must be sent: the tiles each task reads that no task of the same
        // tile produces (collection tiles at their size, a predecessor's at the deciding
        // tile's), and the deciding tile once more, written back.
        std::vector<std::int32_t> candidate_of(work.weight.size(), -1);
        for (std::size_t i = 0; i < tile_of.size(); ++i) candidate_of[tile_of[i]] = static_cast<std::int32_t>(i);
        std::vector<std::uint64_t> bytes_of_tile(work.weight.size(), 0);
        for (std::size_t c = 0; c < collections_.size(); ++c) {
          const auto* coll = collections_[c];
          for (int n = 0; n < coll->tile_cols(); ++n) {
            for (int m = 0; m < coll->tile_rows(); ++m) {
              bytes_of_tile[static_cast<std::size_t>(work.base[c]) + coll->slot(m, n)] = tile_bytes(*coll, m, n);
            }
          }
        }
        for (std::size_t i = 0; i < candidates.size(); ++i) {
          candidates[i].bytes = bytes_of_tile[tile_of[i]];
          candidates[i].transfers = 1;
        }
        std::vector<InputSource> specs;
        for_each_task_by_tile([&](const TaskClass& cls, const TaskKey& key, int tile) {
          if (tile < 0 || candidate_of[static_cast<std::size_t>(tile)] < 0 || pinned_.count(key) != 0) return;
          auto& candidate = candidates[static_cast<std::size_t>(candidate_of[static_cast<std::size_t>(tile)])];
          specs.clear();
          cls.inputs(key, specs);
          for (const auto& spec : specs) {
            if (spec.kind == InputSource::Kind::collection) {
              const auto& coll = collection(spec.tile.collection);
              candidate.bytes += tile_bytes(coll, spec.tile.m, spec.tile.n);
              ++candidate.transfers;
            } else if (spec.kind == InputSource::Kind::task) {
              const int producer = task_class(spec.producer.task_class).owner(spec.producer);
              if (producer == -(tile + 2)) continue;  // made by a task of the same tile
              candidate.bytes += bytes_of_tile[static_cast<std::size_t>(tile)];
              ++candidate.transfers;
            }
          }
        });
        const OffloadPlan plan =
            OffloadPolicy::plan(ranks, candidates, options_.offload, previous_iteration_seconds_);
        for (const auto& move : plan.moves) {
          moves.insert(moves.end(), {static_cast<std::int32_t>(tile_of[move.candidate]), move.to});
        }
        planned_loads = plan.loads_after;
      }
    }
  }
  std::array<std::int64_t, 2> counts{static_cast<std::int64_t>(moves.size()),
                                     static_cast<std::int64_t>(planned_loads.size())};
  MPI_Ibcast(counts.data(), 2, MPI_INT64_T, 0, comm_, &request);
  wait_asleep(request);
  if (counts[1] == size_) {
    planned_loads.resize(static_cast<std::size_t>(size_));
    MPI_Ibcast(planned_loads.data(), size_, MPI_DOUBLE, 0, comm_, &request);
    wait_asleep(request);
    planned_makespan_seconds_ = *std::max_element(planned_loads.begin(), planned_loads.end());
    // As for the plan (OffloadOptions::min_compute_share): where the last iteration took far
    // longer than its work, messages or a shared host held it back, and task times that
    // include them tell no slowdown; nobody drifts.
    if (planned_makespan_seconds_ < options_.offload.min_compute_share * previous_iteration_seconds_) {
      planned_makespan_seconds_ = 0.0;
    }
    planned_seconds_per_flop_ = std::max(mine.seconds_per_flop, 0.0);
    invitees_ = OffloadPolicy::invitation_order(planned_loads, rank_);
  }
  const std::int64_t count = counts[0];
  if (count == 0) return;
  offload_moved_ = true;
  moves.resize(static_cast<std::size_t>(count));
  MPI_Ibcast(moves.data(), static_cast<int>(count), MPI_INT32_T, 0, comm_, &request);
  wait_asleep(request);

  std::vector<int> receiver(work.weight.size(), -1);
  for (std::size_t i = 0; i + 1 < moves.size(); i += 2) {
    receiver.at(static_cast<std::size_t>(moves[i])) = moves[i + 1];
  }
  std::vector<std::pair<TaskKey, int>> pushed;
  for_each_task_by_tile([&](const TaskClass&, const TaskKey& key, int tile) {
    if (tile < 0 || pinned_.count(key) != 0) return;
    const int to = receiver[static_cast<std::size_t>(tile)];
    if (to < 0) return;
    pushed.emplace_back(key, to);
    tasks_offloaded_ += work.holder[static_cast<std::size_t>(tile)] == rank_ ? 1 : 0;
    tasks_offloaded_here_ += to == rank_ ? 1 : 0;
  });
  for (const auto& [key, to] : pushed) {
    pinned_.emplace(key, to);
    offloaded_.insert(key);
  }
  local_tasks_known_ = false;
}

std::optional<int> Engine::drift_invitee() {
  // Called on every pass of the communication loop: nothing to lock without a plan.
  if (next_invitee_ >= invitees_.size() || planned_makespan_seconds_ <= 0.0) return std::nullopt;
  // Too few tasks measured yet to tell a slowdown from one slow task.
  constexpr std::uint64_t kMinSamples = 4;
  OffloadPolicy::Drift drift;
  drift.planned_makespan_seconds = planned_makespan_seconds_;
  drift.planned_seconds_per_flop = planned_seconds_per_flop_;
  {
    std::lock_guard lock(cost_mutex_);
    const double per_flop = measured_seconds_per_flop();
    if (tasks_measured_this_iteration_ < kMinSamples || per_flop <= 0.0) return std::nullopt;
    const double left = std::max(remaining_flops_.load(std::memory_order_relaxed), 0.0);
    drift.seconds_per_flop = per_flop / lanes();
    drift.predicted_work_seconds = (compute_seconds_this_iteration_ + left * per_flop) / lanes();
  }
  if (!OffloadPolicy::drifted(drift, options_.offload)) return std::nullopt;
  return invitees_[next_invitee_++];
}

}  // namespace bellows::runtime
