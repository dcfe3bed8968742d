#pragma once
// What tasks and tile transfers cost on this rank, learned online from the ones made so far.
//
// After the load model of proactive load balancing on Chameleon ("From Work Stealing to
// Reactive Load Balancing", section 3, performance modeling, and section 4, stages 1-2:
// task characterization, then online load prediction): the runtime characterises tasks and
// transfers by measuring those already made and predicts the cost of the rest, instead of
// assuming that moving a task is free. Here the model is linear:
//
//   compute(class, flops)  = overhead(class) + seconds_per_flop(class) * flops
//   transfer(peer, bytes)  = latency(peer)   + bytes / bandwidth(peer)
//   steal round trip       = an exponentially weighted mean of the measured round trips
//
// each line fitted by least squares over all its samples with exponential forgetting (weight
// `forgetting`^age), so that the model follows a change of regime (another job on the node, a
// congested link) within a few dozen samples. When every sample of a line has about the same x
// (all GEMM tiles of one size, all transfers of one tile size) the two parameters cannot be
// told apart; the line then predicts y proportionally to x (intercept 0), which is exact for
// the x it saw. A class without samples falls back to the fit over all classes, a peer
// without samples to the fit over all peers, and those without samples to the priors.
//
// Nothing here reads a clock, sends a message or takes a lock: the engine feeds samples and
// asks for predictions (engine.hpp serialises the calls).
//
// Thread safety: none; one instance is used under its owner's lock.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>

#include "bellows/runtime/options.hpp"

namespace bellows::runtime {

/// y = intercept + slope * x, fitted by weighted least squares over samples whose weights
/// decay by `forgetting` at each new sample (1.0: plain least squares).
class LinearFit {
 public:
  explicit LinearFit(double forgetting = 0.97) : forgetting_(forgetting) {}

  void add(double x, double y) noexcept;
  /// The predicted y at x, never negative; nullopt before the first sample.
  [[nodiscard]] std::optional<double> predict(double x) const noexcept;
  /// The mean y over the samples, weighted as the fit weighs them; nullopt before the first.
  [[nodiscard]] std::optional<double> mean_y() const noexcept;
  /// Samples seen (not decayed).
  [[nodiscard]] std::uint64_t samples() const noexcept { return samples_; }
  /// The fitted intercept and slope (0 and mean y / mean x when the x are all alike).
  [[nodiscard]] double intercept() const noexcept;
  [[nodiscard]] double slope() const noexcept;

 private:
  [[nodiscard]] bool degenerate() const noexcept;
  double forgetting_;
  double w_ = 0.0, x_ = 0.0, y_ = 0.0, xx_ = 0.0, xy_ = 0.0;  // decayed weighted sums
  std::uint64_t samples_ = 0;
};

/// Priors used until the first samples arrive, and the forgetting factor.
struct CostModelOptions {
  double forgetting = 0.97;
  /// Compute: 1 TFLOP/s, no overhead (the emulated device's default speed).
  double seconds_per_flop = 1e-12;
  /// Transfers: 20 us latency, 5 GB/s.
  double transfer_latency_seconds = 20e-6;
  double seconds_per_byte = 0.2e-9;
  /// Steal round trip (request sent to complete answer).
  double round_trip_seconds = 100e-6;
};

/// The priors of device `device_index` of a rank configured by `options` (the engine's
/// devices in their order: the GPUs first (RuntimeOptions::gpus; the emulated ones in
/// hybrid mode), then the CPU workers): until a device has run a task of a class, an
/// emulated GPU is taken at its stated speed, and CPU workers and CUDA GPUs at 10 GFLOP/s (one core's DGEMM, roughly); both are
/// learned from the first samples on.
[[nodiscard]] CostModelOptions device_cost_priors(const RuntimeOptions& options,
                                                  std::size_t device_index) noexcept;

/// A snapshot of the model for reports: the fits over all classes and all peers.
struct CostSummary {
  std::uint64_t task_samples = 0;
  double task_overhead_us = 0.0;        ///< fitted fixed cost of one task
  double seconds_per_gflop = 0.0;       ///< fitted compute time per 1e9 flops
  std::uint64_t transfer_samples = 0;
  double transfer_latency_us = 0.0;     ///< fitted fixed cost of one transfer
  double transfer_gbytes_per_s = 0.0;   ///< fitted bandwidth (0: not known)
  std::uint64_t round_trip_samples = 0;
  double round_trip_us = 0.0;           ///< current estimate of a steal round trip
};

/// Measured costs of tasks, transfers and steal round trips (see the file comment).
class CostModel {
 public:
  explicit CostModel(CostModelOptions options = {});

  // ---- samples ----

  /// A task of class `task_class` with `flops` took `seconds` to run on this rank's device.
  void task_ran(std::uint32_t task_class, double flops, double seconds);
  /// `bytes` of tile moved between this rank and `peer` in `seconds` (request to arrival).
  void transfer_done(int peer, std::uint64_t bytes, double seconds);
  /// A steal request of this rank was fully answered `seconds` after it was sent.
  void round_trip_done(double seconds);

  // ---- predictions (seconds) ----

  /// Running one task of `task_class` with `flops` here.
  [[nodiscard]] double task_seconds(std::uint32_t task_class, double flops) const;
  /// What a task has taken to run here lately, over all classes (the mean with the
  /// model's forgetting); nullopt before the first task ran.
  [[nodiscard]] std::optional<double> recent_task_seconds() const noexcept;
  /// Running `tasks` tasks with `flops` in all, of classes mixed as seen so far.
  [[nodiscard]] double work_seconds(double tasks, double flops) const;
  /// Moving `bytes` of tile between this rank and `peer` (0 for 0 bytes).
  [[nodiscard]] double transfer_seconds(int peer, std::uint64_t bytes) const;
  /// One steal round trip.
  [[nodiscard]] double round_trip_seconds() const noexcept { return round_trip_; }

  [[nodiscard]] CostSummary summary() const;
  [[nodiscard]] const CostModelOptions& options() const noexcept { return options_; }

 private:
  CostModelOptions options_;
  std::map<std::uint32_t, LinearFit> by_class_;
  LinearFit all_classes_;
  std::map<int, LinearFit> by_peer_;
  LinearFit all_peers_;
  double round_trip_;
  std::uint64_t round_trips_ = 0;
};

}  // namespace bellows::runtime
