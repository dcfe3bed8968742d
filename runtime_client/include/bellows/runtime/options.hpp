#pragma once
// Runtime configuration.

#include <string>
#include <string_view>

namespace bellows::runtime {

/// Which device runs the task bodies of a rank.
enum class DeviceKind {
  cpu,       ///< CPU worker threads run execute_cpu
  cuda,      ///< a CUDA GPU runs execute_cuda through stage-in / execute / stage-out queues
  emulated,  ///< charges each task flops / rate seconds without computing
};

[[nodiscard]] std::string_view to_string(DeviceKind kind) noexcept;
/// Parses "cpu", "cuda" or "emulated"; returns false on anything else.
[[nodiscard]] bool parse_device_kind(std::string_view text, DeviceKind& out) noexcept;

struct RuntimeOptions {
  DeviceKind device = DeviceKind::cpu;
  /// CPU worker threads per rank (device cpu).
  int cpu_workers = 1;
  /// Modeled speed of the emulated device, GFLOP/s.
  double emulated_gflops = 1000.0;
  /// Tasks the emulated device runs at once (streams of a GPU).
  int emulated_lanes = 1;
  /// CUDA device ordinal (device cuda).
  int cuda_device = 0;
  /// When not empty, every rank appends its trace (JSON lines) to this file.
  std::string trace_path;
  /// Longest sleep of the communication thread when nothing happens, microseconds.
  int comm_max_sleep_us = 200;
};

}  // namespace bellows::runtime
