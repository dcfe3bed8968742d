#include "bellows/runtime/stats.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace bellows::runtime {

void StealStats::add(const StealStats& o) {
  requests_sent += o.requests_sent;
  requests_failed += o.requests_failed;
  requests_received += o.requests_received;
  requests_served += o.requests_served;
  requests_forwarded += o.requests_forwarded;
  tasks_stolen += o.tasks_stolen;
  tasks_given += o.tasks_given;
  bytes_stolen += o.bytes_stolen;
  tasks_refused += o.tasks_refused;
  requests_refused += o.requests_refused;
  iterations_retired += o.iterations_retired;
  invitations_sent += o.invitations_sent;
  invitations_answered += o.invitations_answered;
  max_hops_seen = std::max(max_hops_seen, o.max_hops_seen);
  max_outstanding = std::max(max_outstanding, o.max_outstanding);
  if (o.min_ready_after_serve >= 0) {
    min_ready_after_serve = min_ready_after_serve < 0
                                ? o.min_ready_after_serve
                                : std::min(min_ready_after_serve, o.min_ready_after_serve);
  }
  round_trip_seconds.insert(round_trip_seconds.end(), o.round_trip_seconds.begin(),
                            o.round_trip_seconds.end());
  round_trip_forwards.insert(round_trip_forwards.end(), o.round_trip_forwards.begin(),
                             o.round_trip_forwards.end());
}

double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  const auto rank = static_cast<std::size_t>(
      std::clamp(std::ceil(q * static_cast<double>(values.size())), 1.0,
                 static_cast<double>(values.size())) - 1);
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(rank), values.end());
  return values[rank];
}

void to_json(nlohmann::json& j, const StealStats& s) {
  const auto summary = [](const std::vector<double>& seconds) {
    const auto us = [&](double q) { return quantile(seconds, q) * 1e6; };
    return nlohmann::json{{"count", seconds.size()}, {"p50", us(0.5)}, {"p90", us(0.9)},
                          {"p99", us(0.99)}, {"max", us(1.0)}};
  };
  std::vector<double> direct;
  for (std::size_t i = 0; i < s.round_trip_seconds.size() && i < s.round_trip_forwards.size(); ++i) {
    if (s.round_trip_forwards[i] == 0) direct.push_back(s.round_trip_seconds[i]);
  }
  j = nlohmann::json{{"requests_sent", s.requests_sent},
                     {"requests_failed", s.requests_failed},
                     {"requests_received", s.requests_received},
                     {"requests_served", s.requests_served},
                     {"requests_forwarded", s.requests_forwarded},
                     {"tasks_stolen", s.tasks_stolen},
                     {"tasks_given", s.tasks_given},
                     {"bytes_stolen", s.bytes_stolen},
                     {"tasks_refused", s.tasks_refused},
                     {"requests_refused", s.requests_refused},
                     {"iterations_retired", s.iterations_retired},
                     {"invitations_sent", s.invitations_sent},
                     {"invitations_answered", s.invitations_answered},
                     {"max_hops_seen", s.max_hops_seen},
                     {"max_outstanding", s.max_outstanding},
                     {"min_ready_after_serve", s.min_ready_after_serve},
                     {"round_trip_us", summary(s.round_trip_seconds)},
                     {"direct_round_trip_us", summary(direct)}};
}

void CheckpointStats::add(const CheckpointStats& o) {
  checkpoints += o.checkpoints;
  tiles_sent += o.tiles_sent;
  tiles_unchanged += o.tiles_unchanged;
  bytes_sent += o.bytes_sent;
  bytes_received += o.bytes_received;
  bytes_held = o.bytes_held;
  post_seconds += o.post_seconds;
  wait_seconds += o.wait_seconds;
  if (o.interval_iterations > 0) interval_iterations = o.interval_iterations;
}

void to_json(nlohmann::json& j, const CheckpointStats& s) {
  j = nlohmann::json{{"checkpoints", s.checkpoints},
                     {"tiles_sent", s.tiles_sent},
                     {"tiles_unchanged", s.tiles_unchanged},
                     {"bytes_sent", s.bytes_sent},
                     {"bytes_received", s.bytes_received},
                     {"bytes_held", s.bytes_held},
                     {"post_seconds", s.post_seconds},
                     {"wait_seconds", s.wait_seconds},
                     {"interval_iterations", s.interval_iterations}};
}

void MessageLogStats::add(const MessageLogStats& o) {
  messages_logged += o.messages_logged;
  bytes_logged += o.bytes_logged;
  messages_in_team += o.messages_in_team;
  bytes_in_team += o.bytes_in_team;
  determinants_logged += o.determinants_logged;
  messages_released += o.messages_released;
  bytes_released += o.bytes_released;
  bytes_replayed += o.bytes_replayed;
  copies_dropped += o.copies_dropped;
  seconds += o.seconds;
  entries_held = o.entries_held;
  bytes_held = o.bytes_held;
  peak_bytes_held = std::max(peak_bytes_held, o.peak_bytes_held);
  bytes_held_by_iteration.insert(bytes_held_by_iteration.end(), o.bytes_held_by_iteration.begin(),
                                 o.bytes_held_by_iteration.end());
}

void to_json(nlohmann::json& j, const MessageLogStats& s) {
  j = nlohmann::json{{"messages_logged", s.messages_logged},
                     {"bytes_logged", s.bytes_logged},
                     {"messages_in_team", s.messages_in_team},
                     {"bytes_in_team", s.bytes_in_team},
                     {"determinants_logged", s.determinants_logged},
                     {"messages_released", s.messages_released},
                     {"bytes_released", s.bytes_released},
                     {"entries_held", s.entries_held},
                     {"bytes_held", s.bytes_held},
                     {"peak_bytes_held", s.peak_bytes_held},
                     {"bytes_replayed", s.bytes_replayed},
                     {"copies_dropped", s.copies_dropped},
                     {"seconds", s.seconds},
                     {"bytes_held_by_iteration", s.bytes_held_by_iteration}};
}

void MemoryStats::add(const MemoryStats& o) {
  minor_page_faults += o.minor_page_faults;
  tile_buffers_reused += o.tile_buffers_reused;
  tile_buffers_fresh += o.tile_buffers_fresh;
  tile_bytes_fresh += o.tile_bytes_fresh;
  peak_tile_bytes_in_use = std::max(peak_tile_bytes_in_use, o.peak_tile_bytes_in_use);
  tile_pool_bytes = o.tile_pool_bytes;
  const auto append = [](std::vector<double>& to, const std::vector<double>& from) {
    to.insert(to.end(), from.begin(), from.end());
  };
  append(minor_page_faults_by_iteration, o.minor_page_faults_by_iteration);
  append(tile_buffers_fresh_by_iteration, o.tile_buffers_fresh_by_iteration);
  append(peak_tile_bytes_in_use_by_iteration, o.peak_tile_bytes_in_use_by_iteration);
}

void to_json(nlohmann::json& j, const MemoryStats& s) {
  j = nlohmann::json{{"minor_page_faults", s.minor_page_faults},
                     {"tile_buffers_reused", s.tile_buffers_reused},
                     {"tile_buffers_fresh", s.tile_buffers_fresh},
                     {"tile_bytes_fresh", s.tile_bytes_fresh},
                     {"peak_tile_bytes_in_use", s.peak_tile_bytes_in_use},
                     {"tile_pool_bytes", s.tile_pool_bytes},
                     {"minor_page_faults_by_iteration", s.minor_page_faults_by_iteration},
                     {"tile_buffers_fresh_by_iteration", s.tile_buffers_fresh_by_iteration},
                     {"peak_tile_bytes_in_use_by_iteration", s.peak_tile_bytes_in_use_by_iteration}};
}

void RankStats::add(const RankStats& o) {
  for (const auto& [name, count] : o.tasks_by_class) tasks_by_class[name] += count;
  tasks_executed += o.tasks_executed;
  tasks_rerun += o.tasks_rerun;
  bytes_sent += o.bytes_sent;
  bytes_received += o.bytes_received;
  bytes_sent_same_host += o.bytes_sent_same_host;
  bytes_received_same_host += o.bytes_received_same_host;
  bytes_sent_in_activations += o.bytes_sent_in_activations;
  bytes_received_in_activations += o.bytes_received_in_activations;
  messages_sent += o.messages_sent;
  messages_received += o.messages_received;
  activations_by_mailbox += o.activations_by_mailbox;
  activations_read_by_workers += o.activations_read_by_workers;
  tasks_on_comm_thread += o.tasks_on_comm_thread;
  busy_seconds += o.busy_seconds;
  idle_seconds += o.idle_seconds;
  modeled_seconds += o.modeled_seconds;
  tasks_on_device += o.tasks_on_device;
  for (std::size_t d = 0; d < tasks_by_device.size(); ++d) tasks_by_device[d] += o.tasks_by_device[d];
  link_bytes += o.link_bytes;
  copy_on_write_bytes += o.copy_on_write_bytes;
  flops += o.flops;
  comm_cpu_seconds += o.comm_cpu_seconds;
  tasks_offloaded += o.tasks_offloaded;
  tasks_offloaded_here += o.tasks_offloaded_here;
  offload_plans_held_back += o.offload_plans_held_back;
  steal.add(o.steal);
  checkpoint.add(o.checkpoint);
  message_log.add(o.message_log);
  memory.add(o.memory);
  if (o.cost.task_samples > 0 || o.cost.transfer_samples > 0 || o.cost.round_trip_samples > 0) {
    cost = o.cost;
  }
}

void to_json(nlohmann::json& j, const CostSummary& s) {
  j = nlohmann::json{{"task_samples", s.task_samples},
                     {"task_overhead_us", s.task_overhead_us},
                     {"seconds_per_gflop", s.seconds_per_gflop},
                     {"transfer_samples", s.transfer_samples},
                     {"transfer_latency_us", s.transfer_latency_us},
                     {"transfer_gbytes_per_s", s.transfer_gbytes_per_s},
                     {"round_trip_samples", s.round_trip_samples},
                     {"round_trip_us", s.round_trip_us}};
}

namespace {

/// The per-device counts up to the last device that ran a task.
std::vector<std::uint64_t> devices_used(const std::array<std::uint64_t, kMaxDevicesPerRank>& counts) {
  std::size_t used = counts.size();
  while (used > 0 && counts[used - 1] == 0) --used;
  return {counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(used)};
}

}  // namespace

void to_json(nlohmann::json& j, const RankStats& s) {
  j = nlohmann::json{{"rank", s.rank},
                     {"host", s.host},
                     {"tasks", s.tasks_executed},
                     {"tasks_rerun", s.tasks_rerun},
                     {"tasks_by_class", s.tasks_by_class},
                     {"bytes_sent", s.bytes_sent},
                     {"bytes_received", s.bytes_received},
                     {"bytes_sent_same_host", s.bytes_sent_same_host},
                     {"bytes_received_same_host", s.bytes_received_same_host},
                     {"bytes_sent_in_activations", s.bytes_sent_in_activations},
                     {"bytes_received_in_activations", s.bytes_received_in_activations},
                     {"messages_sent", s.messages_sent},
                     {"messages_received", s.messages_received},
                     {"activations_by_mailbox", s.activations_by_mailbox},
                     {"activations_read_by_workers", s.activations_read_by_workers},
                     {"tasks_on_comm_thread", s.tasks_on_comm_thread},
                     {"busy_seconds", s.busy_seconds},
                     {"idle_seconds", s.idle_seconds},
                     {"modeled_seconds", s.modeled_seconds},
                     {"tasks_on_device", s.tasks_on_device},
                     {"tasks_by_device", devices_used(s.tasks_by_device)},
                     {"link_bytes", s.link_bytes},
                     {"copy_on_write_bytes", s.copy_on_write_bytes},
                     {"comm_cpu_seconds", s.comm_cpu_seconds},
                     {"tasks_offloaded", s.tasks_offloaded},
                     {"tasks_offloaded_here", s.tasks_offloaded_here},
                     {"offload_plans_held_back", s.offload_plans_held_back},
                     {"steal", s.steal},
                     {"checkpoint", s.checkpoint},
                     {"message_log", s.message_log},
                     {"memory", s.memory},
                     {"cost", s.cost}};
}

}  // namespace bellows::runtime
