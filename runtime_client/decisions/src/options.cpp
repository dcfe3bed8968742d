#include "bellows/runtime/options.hpp"

#include <cmath>
#include <cstdio>
#include <string>

namespace bellows::runtime {
namespace {

std::string shown(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace

std::string_view to_string(DeviceKind kind) noexcept {
  switch (kind) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::cuda: return "cuda";
    case DeviceKind::emulated: return "emulated";
    case DeviceKind::hybrid: return "hybrid";
  }
  return "unknown";
}

bool parse_device_kind(std::string_view text, DeviceKind& out) noexcept {
  for (auto kind : {DeviceKind::cpu, DeviceKind::cuda, DeviceKind::emulated, DeviceKind::hybrid}) {
    if (text == to_string(kind)) {
      out = kind;
      return true;
    }
  }
  return false;
}

std::string_view to_string(VictimPolicy policy) noexcept {
  switch (policy) {
    case VictimPolicy::random: return "random";
    case VictimPolicy::last_victim: return "last-victim";
  }
  return "unknown";
}

bool parse_victim_policy(std::string_view text, VictimPolicy& out) noexcept {
  for (auto policy : {VictimPolicy::random, VictimPolicy::last_victim}) {
    if (text == to_string(policy)) {
      out = policy;
      return true;
    }
  }
  return false;
}

std::string validate_communication(const RuntimeOptions& o) {
  if (o.eager_tile_bytes > kMaxEagerTileBytes) {
    return "eager tile limit must be at most " + std::to_string(kMaxEagerTileBytes) +
           " bytes, got " + std::to_string(o.eager_tile_bytes);
  }
  if (o.comm_poll_us < 0 || o.comm_poll_us > kMaxCommPollUs) {
    return "communication thread's poll after a message must be 0 to " +
           std::to_string(kMaxCommPollUs) + " us, got " + std::to_string(o.comm_poll_us) + " us";
  }
  if (o.comm_thread_task_us < 0 || o.comm_thread_task_us > kMaxCommThreadTaskUs) {
    return "longest task the communication thread runs itself must be 0 to " +
           std::to_string(kMaxCommThreadTaskUs) + " us, got " +
           std::to_string(o.comm_thread_task_us) + " us";
  }
  if (o.worker_poll_us < 0 || o.worker_poll_us > kMaxWorkerPollUs) {
    return "worker's poll of the mailboxes before it sleeps must be 0 to " +
           std::to_string(kMaxWorkerPollUs) + " us, got " + std::to_string(o.worker_poll_us) + " us";
  }
  return {};
}

std::string validate(const StealOptions& o) {
  if (o.chunk < 1) return "steal chunk must be at least 1, got " + std::to_string(o.chunk);
  if (o.max_hops < 0) return "steal max_hops must not be negative, got " + std::to_string(o.max_hops);
  if (o.device_threshold < 0) {
    return "steal device threshold must not be negative, got " + std::to_string(o.device_threshold);
  }
  if (o.node_threshold < 0) {
    return "steal node threshold must not be negative, got " + std::to_string(o.node_threshold);
  }
  if (o.min_backoff_us < 1) {
    return "steal min backoff must be at least 1 us, got " + std::to_string(o.min_backoff_us);
  }
  if (o.max_backoff_us < o.min_backoff_us) {
    return "steal max backoff (" + std::to_string(o.max_backoff_us) +
           " us) is below the min backoff (" + std::to_string(o.min_backoff_us) + " us)";
  }
  if (o.victim_poll_us < 1) {
    return "steal victim poll must be at least 1 us, got " + std::to_string(o.victim_poll_us);
  }
  if (o.request_visit_cost_us < 0) {
    return "steal request visit cost must not be negative, got " +
           std::to_string(o.request_visit_cost_us) + " us";
  }
  return {};
}

std::string validate(const OffloadOptions& o) {
  if (!(o.min_imbalance >= 0.0)) {
    return "offload min imbalance must not be negative, got " + std::to_string(o.min_imbalance);
  }
  if (!(o.min_compute_share >= 0.0)) {
    return "offload min compute share must not be negative, got " +
           std::to_string(o.min_compute_share);
  }
  return {};
}

std::string validate(const CheckpointOptions& o) {
  if (!(o.node_mean_time_between_failures_seconds > 0.0) ||
      !std::isfinite(o.node_mean_time_between_failures_seconds)) {
    return "checkpoint: a node's mean time between failures must be a finite number of seconds "
           "above 0, got " + shown(o.node_mean_time_between_failures_seconds);
  }
  if (o.every_iterations < 0) {
    return "checkpoint: the interval in iterations must not be negative (0: Young/Daly), got " +
           std::to_string(o.every_iterations);
  }
  return {};
}

std::string validate(const MessageLogOptions& o) {
  if (o.team_size < 0) {
    return "message log: the team size must not be negative (0: one team), got " +
           std::to_string(o.team_size);
  }
  if (o.load_window < 1) {
    return "message log: TeamLB's load window must be at least 1 iteration, got " +
           std::to_string(o.load_window);
  }
  if (!std::isfinite(o.replan_min_gain) || o.replan_min_gain < 0.0) {
    return "message log: TeamLB's least gain for a re-plan must be finite and not negative, got " +
           std::to_string(o.replan_min_gain);
  }
  for (std::size_t r = 0; r < o.rank_team.size(); ++r) {
    if (o.rank_team[r] < 0 || static_cast<std::size_t>(o.rank_team[r]) >= o.rank_team.size()) {
      return "message log: rank " + std::to_string(r) + " is given team " +
             std::to_string(o.rank_team[r]) + "; teams of " + std::to_string(o.rank_team.size()) +
             " ranks are numbered 0 .. " + std::to_string(o.rank_team.size() - 1);
    }
  }
  return {};
}

double emulated_link_of(const RuntimeOptions& options) noexcept {
  if (options.emulated_link_gbps != RuntimeOptions::kLinkOfDevice) return options.emulated_link_gbps;
  return options.device == DeviceKind::hybrid ? RuntimeOptions::kHybridLinkGbps : 0.0;
}

}  // namespace bellows::runtime
