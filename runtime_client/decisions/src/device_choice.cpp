#include "bellows/runtime/device_choice.hpp"

namespace bellows::runtime {

double DeviceChoice::move_seconds(const ChoiceInput& input, std::uint64_t bytes) noexcept {
  if (bytes == 0) return 0.0;
  return input.link_latency_seconds + static_cast<double>(bytes) * input.link_seconds_per_byte;
}

Choice DeviceChoice::choose(const ChoiceInput& input) noexcept {
  Choice c;
  double cpu_moves = 0.0, device_moves = 0.0;
  for (const TileUse& t : input.tiles) {
    if (t.bytes == 0) continue;
    if (!t.on_host) {
      c.cpu_move_bytes += t.bytes;
      cpu_moves += move_seconds(input, t.bytes);
    }
    if (!t.on_device) {
      c.device_move_bytes += t.bytes;
      device_moves += move_seconds(input, t.bytes);
    }
    if (t.leaves && (t.written || !t.on_host)) {
      c.device_move_bytes += t.bytes;
      device_moves += move_seconds(input, t.bytes);
    }
  }
  c.cpu_cost_seconds = cpu_moves + input.cpu_compute_seconds;
  c.device_cost_seconds = device_moves + input.device_compute_seconds;
  c.cpu_finish_seconds = input.cpu_backlog_seconds + c.cpu_cost_seconds;
  c.device_finish_seconds = input.device_backlog_seconds + c.device_cost_seconds;
  if (c.device_finish_seconds < c.cpu_finish_seconds) {
    c.place = Place::device;
  } else if (c.device_finish_seconds == c.cpu_finish_seconds &&
             input.device_backlog_seconds < input.cpu_backlog_seconds) {
    c.place = Place::device;
  } else {
    c.place = Place::cpu;
  }
  return c;
}

std::size_t DeviceChoice::first_to_finish(const GpuOptions& options) noexcept {
  const auto gpus = options.per_gpu.size();
  if (options.required_gpu >= 0 && static_cast<std::size_t>(options.required_gpu) < gpus) {
    return static_cast<std::size_t>(options.required_gpu);
  }
  std::size_t best = 0;
  for (std::size_t g = 1; g < gpus; ++g) {
    const Choice& c = options.per_gpu[g];
    const Choice& b = options.per_gpu[best];
    if (c.device_finish_seconds < b.device_finish_seconds ||
        (c.device_finish_seconds == b.device_finish_seconds && c.device_cost_seconds < b.device_cost_seconds)) {
      best = g;
    }
  }
  return best;
}

const char* to_string(Place place) noexcept {
  return place == Place::device ? "device" : "cpu";
}

}  // namespace bellows::runtime
