#include "bellows/runtime/runtime.hpp"

#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "engine.hpp"
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

void Runtime::release_state_before_shrink(OldCommunicator old) { engine_->release_state_before_shrink(old); }

void Runtime::give_up_hand_off() { engine_->give_up_hand_off(); }

void Runtime::attach_shrunk(MPI_Comm survivors) { engine_->attach_shrunk(survivors); }

std::vector<int> Runtime::attach_shrunk_checkpointed(MPI_Comm survivors) {
  return engine_->attach_shrunk_checkpointed(survivors);
}

void Runtime::confirm_shrunk_checkpoint() { engine_->confirm_shrunk_checkpoint(); }

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
  f(s.activations_read_by_workers);
  f(s.tasks_on_comm_thread);
  f(s.busy_seconds);
  f(s.idle_seconds);
  f(s.modeled_seconds);
  f(s.tasks_on_device);
  for (auto& count : s.tasks_by_device) f(count);
  f(s.link_bytes);
  f(s.copy_on_write_bytes);
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
  f(s.message_log.seconds);
  f(s.memory.minor_page_faults);
  f(s.memory.tile_buffers_reused);
  f(s.memory.tile_buffers_fresh);
  f(s.memory.tile_bytes_fresh);
  f(s.memory.peak_tile_bytes_in_use);
  f(s.memory.tile_pool_bytes);
  f(s.cost.task_samples);
  f(s.cost.task_overhead_us);
  f(s.cost.seconds_per_gflop);
  f(s.cost.transfer_samples);
  f(s.cost.transfer_latency_us);
  f(s.cost.transfer_gbytes_per_s);
  f(s.cost.round_trip_samples);
  f(s.cost.round_trip_us);
}

/// A rank's statistics as the numbers that travel to rank 0 (one definition for
/// gather_stats() and finish()): the fixed fields, the per-class counts in class order, the
/// steal round trips and their forwards, the message log's size after each iteration, the
/// memory counts of each iteration, the host's name.
std::vector<double> encode_stats(const RankStats& s, const std::vector<std::string>& class_names,
                                 const std::string& host) {
  std::vector<double> out;
  for_each_number(s, [&](const auto& x) { out.push_back(static_cast<double>(x)); });
  for (const auto& name : class_names) {
    auto it = s.tasks_by_class.find(name);
    out.push_back(it == s.tasks_by_class.end() ? 0.0 : static_cast<double>(it->second));
  }
  out.push_back(static_cast<double>(s.steal.round_trip_seconds.size()));
  out.insert(out.end(), s.steal.round_trip_seconds.begin(), s.steal.round_trip_seconds.end());
  for (const int forwards : s.steal.round_trip_forwards) out.push_back(forwards);
  const auto series = [&](const std::vector<double>& values) {
    out.push_back(static_cast<double>(values.size()));
    out.insert(out.end(), values.begin(), values.end());
  };
  series(s.message_log.bytes_held_by_iteration);
  series(s.memory.minor_page_faults_by_iteration);
  series(s.memory.tile_buffers_fresh_by_iteration);
  series(s.memory.peak_tile_bytes_in_use_by_iteration);
  out.push_back(static_cast<double>(host.size()));
  for (const char c : host) out.push_back(static_cast<unsigned char>(c));
  return out;
}

/// encode_stats() read back, for rank `rank`; throws std::runtime_error on numbers that do
/// not fit (a rank with another task class list).
RankStats decode_stats(const std::vector<double>& v, const std::vector<std::string>& class_names, int rank) {
  std::size_t at = 0;
  const auto next = [&]() -> double {
    if (at >= v.size()) {
      throw std::runtime_error("rank " + std::to_string(rank) + "'s statistics end after " + std::to_string(v.size()) +
                               " numbers, before what they must hold");
    }
    return v[at++];
  };
  const auto count = [&]() { return static_cast<std::size_t>(next()); };
  RankStats rs;
  rs.rank = rank;
  for_each_number(rs, [&](auto& x) { x = static_cast<std::decay_t<decltype(x)>>(next()); });
  for (const auto& name : class_names) {
    const auto tasks = static_cast<std::uint64_t>(next());
    if (tasks != 0) rs.tasks_by_class[name] = tasks;
  }
  const std::size_t round_trips = count();
  for (std::size_t i = 0; i < round_trips; ++i) rs.steal.round_trip_seconds.push_back(next());
  for (std::size_t i = 0; i < round_trips; ++i) rs.steal.round_trip_forwards.push_back(static_cast<int>(next()));
  const auto series = [&](std::vector<double>& values) {
    const std::size_t size = count();
    for (std::size_t i = 0; i < size; ++i) values.push_back(next());
  };
  series(rs.message_log.bytes_held_by_iteration);
  series(rs.memory.minor_page_faults_by_iteration);
  series(rs.memory.tile_buffers_fresh_by_iteration);
  series(rs.memory.peak_tile_bytes_in_use_by_iteration);
  const std::size_t host = count();
  for (std::size_t i = 0; i < host; ++i) rs.host.push_back(static_cast<char>(static_cast<unsigned char>(next())));
  return rs;
}

std::vector<std::string> class_names(const Engine& engine) {
  std::vector<std::string> names;
  for (std::size_t id = 0; id < engine.class_count(); ++id) {
    names.push_back(engine.class_name(static_cast<TaskClassId>(id)));
  }
  return names;
}

}  // namespace

std::vector<RankStats> Runtime::gather_stats() const {
  const MPI_Comm comm = engine_->communicator();
  const std::vector<std::string> names = class_names(*engine_);
  const std::vector<double> mine = encode_stats(engine_->stats(), names, host_name());
  const int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(engine_->size()));
  MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm);
  std::vector<int> displacements(counts.size());
  int total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    displacements[r] = total;
    total += counts[r];
  }
  std::vector<double> all(static_cast<std::size_t>(total));
  MPI_Gatherv(mine.data(), count, MPI_DOUBLE, all.data(), counts.data(), displacements.data(), MPI_DOUBLE, 0, comm);
  std::vector<RankStats> out;
  if (engine_->rank() != 0) return out;
  for (int r = 0; r < engine_->size(); ++r) {
    const auto first = all.begin() + displacements[static_cast<std::size_t>(r)];
    out.push_back(decode_stats(std::vector<double>(first, first + counts[static_cast<std::size_t>(r)]), names, r));
  }
  return out;
}

JobEnd Runtime::finish(std::span<const TiledMatrix* const> gather) {
  const std::vector<std::string> names = class_names(*engine_);
  Engine::JobEndTransfers transfers = engine_->finish(gather, encode_stats(engine_->stats(), names, host_name()));
  JobEnd end;
  end.report = std::move(transfers.report);
  end.gathered = std::move(transfers.gathered);
  for (std::size_t r = 0; r < transfers.stats_by_rank.size(); ++r) {
    end.stats.push_back(decode_stats(transfers.stats_by_rank[r], names, static_cast<int>(r)));
  }
  return end;
}

}  // namespace bellows::runtime
