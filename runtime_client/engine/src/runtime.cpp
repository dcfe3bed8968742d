#include "bellows/runtime/runtime.hpp"

#include <cstring>
#include <type_traits>

#include "engine.hpp"
#include "gather_strings.hpp"
#include "same_host.hpp"

namespace bellows::runtime {

Runtime::Runtime(MPI_Comm comm, RuntimeOptions options)
    : engine_(std::make_unique<Engine>(comm, std::move(options))) {}

Runtime::~Runtime() = default;

int Runtime::rank() const noexcept { return engine_->rank(); }
int Runtime::size() const noexcept { return engine_->size(); }
MPI_Comm Runtime::communicator() const noexcept { return engine_->communicator(); }
const RuntimeOptions& Runtime::options() const noexcept { return engine_->options(); }

void Runtime::add_task_class(std::unique_ptr<TaskClass> task_class) {
  engine_->add_task_class(std::move(task_class));
}

void Runtime::add_collection(TiledMatrix& collection) { engine_->add_collection(collection); }

IterationReport Runtime::run_iteration() { return engine_->run_iteration(); }

std::vector<int> Runtime::expand_onto(MPI_Comm comm) { return engine_->expand_onto(comm); }

std::vector<int> Runtime::join_expansion(int first_new_rank) { return engine_->join_expansion(first_new_rank); }

ShrinkHandoff Runtime::prepare_shrink(std::span<const int> leaving, StateBeforeShrink state) {
  return engine_->prepare_shrink(leaving, state);
}

void Runtime::release_state_before_shrink() { engine_->release_state_before_shrink(); }

void Runtime::give_up_hand_off() { engine_->give_up_hand_off(); }

void Runtime::attach_shrunk(MPI_Comm survivors) { engine_->attach_shrunk(survivors); }

std::vector<int> Runtime::attach_shrunk_checkpointed(MPI_Comm survivors) {
  return engine_->attach_shrunk_checkpointed(survivors);
}

void Runtime::leave_unconfirmed_survivors() { engine_->leave_unconfirmed_survivors(); }

RecoveryReport Runtime::recover(MPI_Comm survivors, std::span<const int> lost) {
  return engine_->recover(survivors, lost);
}

const std::unordered_map<TaskKey, int>& Runtime::pinned() const noexcept {
  return engine_->pinned();
}

Rebalance Runtime::last_rebalance() const noexcept { return engine_->last_rebalance(); }

GraphProfile Runtime::graph_profile() const { return engine_->graph_profile(); }

int Runtime::lanes() const noexcept { return engine_->lanes(); }

const RankStats& Runtime::stats() const noexcept { return engine_->stats(); }

std::unordered_map<TaskKey, int> Runtime::migrations() const { return engine_->migrations(); }

void Runtime::restore_checkpoint(long iteration, std::span<const CheckpointSource> sources) {
  engine_->restore_checkpoint(iteration, sources);
}

std::vector<CheckpointCopy> Runtime::checkpoint_copies() const {
  return engine_->checkpoints().copies();
}

std::vector<int> Runtime::checkpoint_buddies() const { return engine_->checkpoints().buddies(); }

std::vector<int> Runtime::teams() const { return engine_->message_log().rank_team(); }

std::optional<TeamsApplied> Runtime::teams_applied() const { return engine_->teams_applied(); }

const std::vector<RecoveryReport>& Runtime::recoveries() const noexcept { return engine_->recoveries(); }

std::optional<long> Runtime::last_checkpoint() const {
  return engine_->checkpoints().last_complete();
}

namespace {

/// Calls f on every number of a RankStats that gather_stats() carries, in one fixed order
/// (the per-class counts and the round trips travel apart).
template <typename Stats, typename F>  // Stats: RankStats or const RankStats
void for_each_number(Stats& s, F&& f) {
  f(s.tasks_executed);
  f(s.tasks_rerun);
  f(s.bytes_sent);
  f(s.bytes_received);
  f(s.bytes_sent_same_host);
  f(s.bytes_received_same_host);
  f(s.bytes_sent_in_activations);
  f(s.bytes_received_in_activations);
  f(s.messages_sent);
  f(s.messages_received);
  f(s.activations_by_mailbox);
  f(s.tasks_on_comm_thread);
  f(s.busy_seconds);
  f(s.idle_seconds);
  f(s.modeled_seconds);
  f(s.tasks_on_device);
  for (auto& count : s.tasks_by_device) f(count);
  f(s.link_bytes);
  f(s.flops);
  f(s.comm_cpu_seconds);
  f(s.tasks_offloaded);
  f(s.tasks_offloaded_here);
  f(s.offload_plans_held_back);
  f(s.steal.requests_sent);
  f(s.steal.requests_failed);
  f(s.steal.requests_received);
  f(s.steal.requests_served);
  f(s.steal.requests_forwarded);
  f(s.steal.tasks_stolen);
  f(s.steal.tasks_given);
  f(s.steal.bytes_stolen);
  f(s.steal.max_hops_seen);
  f(s.steal.max_outstanding);
  f(s.steal.min_ready_after_serve);
  f(s.steal.tasks_refused);
  f(s.steal.requests_refused);
  f(s.steal.iterations_retired);
  f(s.steal.invitations_sent);
  f(s.steal.invitations_answered);
  f(s.checkpoint.checkpoints);
  f(s.checkpoint.tiles_sent);
  f(s.checkpoint.tiles_unchanged);
  f(s.checkpoint.bytes_sent);
  f(s.checkpoint.bytes_received);
  f(s.checkpoint.bytes_held);
  f(s.checkpoint.post_seconds);
  f(s.checkpoint.wait_seconds);
  f(s.checkpoint.interval_iterations);
  f(s.message_log.messages_logged);
  f(s.message_log.bytes_logged);
  f(s.message_log.messages_in_team);
  f(s.message_log.bytes_in_team);
  f(s.message_log.determinants_logged);
  f(s.message_log.messages_released);
  f(s.message_log.bytes_released);
  f(s.message_log.entries_held);
  f(s.message_log.bytes_held);
  f(s.message_log.peak_bytes_held);
  f(s.message_log.bytes_replayed);
  f(s.message_log.copies_dropped);
  f(s.cost.task_samples);
  f(s.cost.task_overhead_us);
  f(s.cost.seconds_per_gflop);
  f(s.cost.transfer_samples);
  f(s.cost.transfer_latency_us);
  f(s.cost.transfer_gbytes_per_s);
  f(s.cost.round_trip_samples);
  f(s.cost.round_trip_us);
}

}  // namespace

std::vector<RankStats> Runtime::gather_stats() const {
  // Fixed numeric fields travel as doubles; per-class counts follow the class order,
  // which every rank shares.
  const RankStats& s = engine_->stats();
  const MPI_Comm comm = engine_->communicator();
  std::vector<std::string> names;
  for (std::size_t id = 0; id < engine_->class_count(); ++id) {
    names.push_back(engine_->class_name(static_cast<TaskClassId>(id)));
  }
  std::vector<double> mine;
  for_each_number(s, [&](const auto& x) { mine.push_back(static_cast<double>(x)); });
  const std::size_t fixed_fields = mine.size();
  for (const auto& name : names) {
    auto it = s.tasks_by_class.find(name);
    mine.push_back(it == s.tasks_by_class.end() ? 0.0 : static_cast<double>(it->second));
  }
  const int width = static_cast<int>(mine.size());
  std::vector<double> all(static_cast<std::size_t>(width) * engine_->size());
  MPI_Gather(mine.data(), width, MPI_DOUBLE, all.data(), width, MPI_DOUBLE, 0, comm);
  // The steal round trips, one vector per rank.
  const int my_round_trips = static_cast<int>(s.steal.round_trip_seconds.size());
  std::vector<int> round_trips_counts(static_cast<std::size_t>(engine_->size()));
  MPI_Gather(&my_round_trips, 1, MPI_INT, round_trips_counts.data(), 1, MPI_INT, 0, comm);
  std::vector<int> round_trips_displacements(round_trips_counts.size());
  int total_round_trips = 0;
  for (std::size_t r = 0; r < round_trips_counts.size(); ++r) {
    round_trips_displacements[r] = total_round_trips;
    total_round_trips += round_trips_counts[r];
  }
  std::vector<double> all_round_trips(static_cast<std::size_t>(total_round_trips));
  MPI_Gatherv(s.steal.round_trip_seconds.data(), my_round_trips, MPI_DOUBLE,
              all_round_trips.data(), round_trips_counts.data(),
              round_trips_displacements.data(), MPI_DOUBLE, 0, comm);
  std::vector<int> all_forwards(static_cast<std::size_t>(total_round_trips));
  MPI_Gatherv(s.steal.round_trip_forwards.data(), my_round_trips, MPI_INT, all_forwards.data(),
              round_trips_counts.data(), round_trips_displacements.data(), MPI_INT, 0, comm);
  // The message log's size after each iteration, one vector per rank.
  const std::vector<double>& my_log = s.message_log.bytes_held_by_iteration;
  const int my_log_count = static_cast<int>(my_log.size());
  std::vector<int> log_counts(static_cast<std::size_t>(engine_->size()));
  MPI_Gather(&my_log_count, 1, MPI_INT, log_counts.data(), 1, MPI_INT, 0, comm);
  std::vector<int> log_displacements(log_counts.size());
  int total_log = 0;
  for (std::size_t r = 0; r < log_counts.size(); ++r) {
    log_displacements[r] = total_log;
    total_log += log_counts[r];
  }
  std::vector<double> all_log(static_cast<std::size_t>(total_log));
  MPI_Gatherv(my_log.data(), my_log_count, MPI_DOUBLE, all_log.data(), log_counts.data(),
              log_displacements.data(), MPI_DOUBLE, 0, comm);
  const std::vector<std::string> hosts = gather_strings(comm, host_name());
  std::vector<RankStats> out;
  if (engine_->rank() != 0) return out;
  for (int r = 0; r < engine_->size(); ++r) {
    const double* v = all.data() + static_cast<std::size_t>(r) * width;
    RankStats rs;
    rs.rank = r;
    rs.host = hosts[static_cast<std::size_t>(r)];
    std::size_t field = 0;
    for_each_number(rs, [&](auto& x) { x = static_cast<std::decay_t<decltype(x)>>(v[field++]); });
    const auto first = round_trips_displacements[static_cast<std::size_t>(r)];
    const auto samples = round_trips_counts[static_cast<std::size_t>(r)];
    rs.steal.round_trip_seconds.assign(all_round_trips.begin() + first,
                                       all_round_trips.begin() + first + samples);
    rs.steal.round_trip_forwards.assign(all_forwards.begin() + first,
                                        all_forwards.begin() + first + samples);
    const auto first_log = log_displacements[static_cast<std::size_t>(r)];
    rs.message_log.bytes_held_by_iteration.assign(
        all_log.begin() + first_log, all_log.begin() + first_log + log_counts[static_cast<std::size_t>(r)]);
    for (std::size_t c = 0; c < names.size(); ++c) {
      const auto count = static_cast<std::uint64_t>(v[fixed_fields + c]);
      if (count != 0) rs.tasks_by_class[names[c]] = count;
    }
    out.push_back(std::move(rs));
  }
  return out;
}

}  // namespace bellows::runtime
