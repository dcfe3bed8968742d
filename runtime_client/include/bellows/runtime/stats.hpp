#pragma once
// Per-rank statistics of the runtime.

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace bellows::runtime {

struct RankStats {
  int rank = 0;
  std::map<std::string, std::uint64_t> tasks_by_class;  ///< tasks executed on this rank
  std::uint64_t tasks_executed = 0;
  std::uint64_t bytes_sent = 0;         ///< tile payloads sent
  std::uint64_t bytes_received = 0;     ///< tile payloads received
  std::uint64_t messages_sent = 0;      ///< control messages sent
  std::uint64_t messages_received = 0;  ///< control messages received
  double busy_seconds = 0.0;            ///< summed over the rank's execution units
  double idle_seconds = 0.0;            ///< execution units waiting for a ready task
  double modeled_seconds = 0.0;         ///< emulated device: sum of flops / rate
  double flops = 0.0;                   ///< flops of the tasks executed here
  double comm_cpu_seconds = 0.0;        ///< CPU time used by the communication thread

  void add(const RankStats& other);
};

void to_json(nlohmann::json& j, const RankStats& s);

/// What one iteration did on this rank.
struct IterationReport {
  int iteration = 0;
  int ranks = 0;
  double seconds = 0.0;       ///< wall time, barrier to barrier (same on every rank)
  double total_flops = 0.0;   ///< summed over all ranks
  RankStats local;            ///< this rank's share of the iteration

  [[nodiscard]] double gflops() const noexcept {
    return seconds > 0.0 ? total_flops / seconds * 1e-9 : 0.0;
  }
};

}  // namespace bellows::runtime
