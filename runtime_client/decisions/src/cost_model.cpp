#include "bellows/runtime/cost_model.hpp"

#include <algorithm>
#include <cmath>

namespace bellows::runtime {

void LinearFit::add(double x, double y) noexcept {
  w_ = w_ * forgetting_ + 1.0;
  x_ = x_ * forgetting_ + x;
  y_ = y_ * forgetting_ + y;
  xx_ = xx_ * forgetting_ + x * x;
  xy_ = xy_ * forgetting_ + x * y;
  ++samples_;
}

bool LinearFit::degenerate() const noexcept {
  if (w_ <= 0.0) return true;
  const double mean_x = x_ / w_;
  const double var_x = xx_ / w_ - mean_x * mean_x;
  // All x alike (relative spread under 1 %), or fewer than two samples.
  if (samples_ < 2 || var_x <= 1e-4 * mean_x * mean_x) return true;
  const double cov = xy_ / w_ - mean_x * (y_ / w_);
  return cov <= 0.0;  // y does not grow with x: no usable slope
}

double LinearFit::slope() const noexcept {
  if (w_ <= 0.0) return 0.0;
  const double mean_x = x_ / w_, mean_y = y_ / w_;
  if (degenerate()) return mean_x > 0.0 ? mean_y / mean_x : 0.0;
  const double var_x = xx_ / w_ - mean_x * mean_x;
  const double cov = xy_ / w_ - mean_x * mean_y;
  const double b = cov / var_x;
  // A negative intercept would make small x free: refit through the origin instead.
  if (mean_y - b * mean_x < 0.0) return xy_ / xx_;
  return b;
}

double LinearFit::intercept() const noexcept {
  if (w_ <= 0.0) return 0.0;
  const double mean_x = x_ / w_, mean_y = y_ / w_;
  if (degenerate()) return mean_x > 0.0 ? 0.0 : mean_y;
  return std::max(0.0, mean_y - slope() * mean_x);
}

std::optional<double> LinearFit::mean_y() const noexcept {
  if (samples_ == 0 || w_ <= 0.0) return std::nullopt;
  return y_ / w_;
}

std::optional<double> LinearFit::predict(double x) const noexcept {
  if (samples_ == 0) return std::nullopt;
  return std::max(0.0, intercept() + slope() * x);
}

CostModel::CostModel(CostModelOptions options)
    : options_(options),
      all_classes_(options.forgetting),
      all_peers_(options.forgetting),
      round_trip_(options.round_trip_seconds) {}

void CostModel::task_ran(std::uint32_t task_class, double flops, double seconds) {
  by_class_.try_emplace(task_class, options_.forgetting).first->second.add(flops, seconds);
  all_classes_.add(flops, seconds);
}

void CostModel::transfer_done(int peer, std::uint64_t bytes, double seconds) {
  const auto x = static_cast<double>(bytes);
  by_peer_.try_emplace(peer, options_.forgetting).first->second.add(x, seconds);
  all_peers_.add(x, seconds);
}

void CostModel::round_trip_done(double seconds) {
  // The same forgetting as the fits: the mean over about 1 / (1 - forgetting) requests.
  const double keep = round_trips_ == 0 ? 0.0 : options_.forgetting;
  round_trip_ = keep * round_trip_ + (1.0 - keep) * seconds;
  ++round_trips_;
}

double CostModel::task_seconds(std::uint32_t task_class, double flops) const {
  if (const auto it = by_class_.find(task_class); it != by_class_.end()) {
    if (const auto p = it->second.predict(flops)) return *p;
  }
  if (const auto p = all_classes_.predict(flops)) return *p;
  return flops * options_.seconds_per_flop;
}

std::optional<double> CostModel::recent_task_seconds() const noexcept {
  return all_classes_.mean_y();
}

double CostModel::work_seconds(double tasks, double flops) const {
  if (tasks <= 0.0) return 0.0;
  if (all_classes_.samples() == 0) return flops * options_.seconds_per_flop;
  // `tasks` tasks of flops / tasks each, by the fit over all classes.
  return tasks * all_classes_.intercept() + all_classes_.slope() * flops;
}

double CostModel::transfer_seconds(int peer, std::uint64_t bytes) const {
  if (bytes == 0) return 0.0;
  const auto x = static_cast<double>(bytes);
  if (const auto it = by_peer_.find(peer); it != by_peer_.end()) {
    if (const auto p = it->second.predict(x)) return *p;
  }
  if (const auto p = all_peers_.predict(x)) return *p;
  return options_.transfer_latency_seconds + x * options_.seconds_per_byte;
}

CostSummary CostModel::summary() const {
  CostSummary s;
  s.task_samples = all_classes_.samples();
  if (s.task_samples > 0) {
    s.task_overhead_us = all_classes_.intercept() * 1e6;
    s.seconds_per_gflop = all_classes_.slope() * 1e9;
  } else {
    s.seconds_per_gflop = options_.seconds_per_flop * 1e9;
  }
  s.transfer_samples = all_peers_.samples();
  if (s.transfer_samples > 0) {
    s.transfer_latency_us = all_peers_.intercept() * 1e6;
    const double per_byte = all_peers_.slope();
    s.transfer_gbytes_per_s = per_byte > 0.0 ? 1e-9 / per_byte : 0.0;
  } else {
    s.transfer_latency_us = options_.transfer_latency_seconds * 1e6;
    s.transfer_gbytes_per_s = 1e-9 / options_.seconds_per_byte;
  }
  s.round_trip_samples = round_trips_;
  s.round_trip_us = round_trip_ * 1e6;
  return s;
}

CostModelOptions device_cost_priors(const RuntimeOptions& options,
                                    std::size_t device_index) noexcept {
  constexpr double kCpuCoreGflops = 10.0;
  const bool emulated_first =
      options.device == DeviceKind::emulated || options.device == DeviceKind::hybrid;
  CostModelOptions priors;
  const auto emulated_gpus = static_cast<std::size_t>(std::max(options.gpus, 1));
  priors.seconds_per_flop = (emulated_first && device_index < emulated_gpus)
                                ? 1.0 / (options.emulated_gflops * 1e9)
                                : 1.0 / (kCpuCoreGflops * 1e9);
  return priors;
}

}  // namespace bellows::runtime
