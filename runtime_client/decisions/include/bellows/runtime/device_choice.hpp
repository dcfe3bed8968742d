#pragma once
// Where a ready task runs on a rank that has both CPU workers and a device.
//
// After DyPe (Bai et al., "Data-aware Dynamic Execution of Irregular Workloads on
// Heterogeneous Systems", section III: data-aware, dynamic mapping of each operator onto
// the device that finishes it first, counting the data it must move there), reduced to
// one greedy rule per task: for each place the predicted finish is
//
//   finish(place) = backlog(place)                   work queued or running there, per lane
//                 + move_in(place)                    inputs with no valid copy there
//                 + compute(place)                    CostModel's prediction for the class
//                 + move_out(place)                   outputs that must reach the host
//
// and the task goes where finish is smallest (ties to the place with less backlog, then the
// CPU). Moving a tile costs link_latency + bytes / link_bandwidth; a tile already resident
// where the task runs costs nothing, so a task follows its data unless the other place is
// predicted to finish it sooner anyway. Moves out count only on the device: an output that
// leaves the rank or is written back to a collection must come back to the host.
//
// Nothing here reads a clock, takes a lock or sends a message: the engine measures the
// costs and the queues and carries out the choice (engine.cpp, Engine::make_ready).
//
// Thread safety: pure functions.

#include <cstddef>
#include <cstdint>
#include <span>

namespace bellows::runtime {

/// One input slot of the task, as the choice sees it.
struct TileUse {
  std::uint64_t bytes = 0;
  bool on_host = true;     ///< a valid copy is in host memory
  bool on_device = false;  ///< a valid copy is in device memory
  bool written = false;    ///< the task writes it (read_write slot)
  bool leaves = false;     ///< after the task it is needed on the host (another rank, a collection)
};

/// The costs of one ready task on each place.
struct ChoiceInput {
  std::span<const TileUse> tiles;
  double cpu_compute_seconds = 0.0;
  double device_compute_seconds = 0.0;
  /// Predicted seconds of work already queued or running, divided by the place's lanes.
  double cpu_backlog_seconds = 0.0;
  double device_backlog_seconds = 0.0;
  /// Host <-> device link; seconds_per_byte 0: a free link.
  double link_seconds_per_byte = 0.0;
  double link_latency_seconds = 0.0;
};

enum class Place : std::uint8_t { cpu, device };

/// The decision and the estimates behind it.
struct Choice {
  Place place = Place::cpu;
  double cpu_finish_seconds = 0.0;
  double device_finish_seconds = 0.0;
  /// What running there costs on its own (no backlog): moves in, compute, moves out.
  double cpu_cost_seconds = 0.0;
  double device_cost_seconds = 0.0;
  std::uint64_t cpu_move_bytes = 0;     ///< bytes that would come back from the device
  std::uint64_t device_move_bytes = 0;  ///< bytes that would go to the device and back
};

/// Where a task may run among a rank's GPUs (RuntimeOptions::gpus): each GPU's choice
/// against the CPU (its `device_*` estimates, with the tiles resident on that GPU), and the
/// GPU the task must run on, if any: the one that holds the only valid copy of an input (a
/// tile written there that no one has copied back; it cannot reach another GPU but through
/// the host, where it is not).
struct GpuOptions {
  std::span<const Choice> per_gpu;
  int required_gpu = -1;  ///< -1: any
};

/// The rule of the file comment.
class DeviceChoice {
 public:
  [[nodiscard]] static Choice choose(const ChoiceInput& input) noexcept;
  /// Among a rank's GPUs, the one predicted to finish the task first (smallest
  /// device_finish_seconds: its backlog, the tiles it lacks, the compute), the required one
  /// when there is one; ties to the GPU whose own cost is smaller, then to the lower index.
  /// Seed 001's nodes drive several GPUs, and DyPe's rule is per device: this is that rule
  /// across the GPUs of one node. 0 when `per_gpu` is empty.
  [[nodiscard]] static std::size_t first_to_finish(const GpuOptions& options) noexcept;
  /// Seconds to move `bytes` over the link (0 for 0 bytes).
  [[nodiscard]] static double move_seconds(const ChoiceInput& input, std::uint64_t bytes) noexcept;
};

[[nodiscard]] const char* to_string(Place place) noexcept;

}  // namespace bellows::runtime
