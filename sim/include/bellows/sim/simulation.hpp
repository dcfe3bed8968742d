#pragma once
// A Bellows job on a simulated machine (SimGrid 3.32, S4U): each rank is an actor on its own
// host that runs one iteration of a task graph (graph.hpp) the way the runtime does, with the
// runtime's own decisions (bellows::runtime_decisions: StealPolicy, CostModel).
//
// What a rank does, after runtime_client/engine (docs/sim.md says what is left out):
//  - a ready queue by priority (higher first) feeding `lanes` executions on its device; a
//    task takes overhead + flops / rate (a SimGrid Exec on the host's cores);
//  - dataflow by handshake: a finished task sends an activation to each other rank owning
//    a consumer, which fetches the tile (request, then the tile's bytes through the network
//    model); collection tiles are fetched from their owners once per rank; write-backs go
//    to the collection tile's owner;
//  - stealing as comm_engine.cpp does it: should_ask / choose_victim / tasks_to_ask on the
//    thief, choose_gifts priced by the victim's CostModel, forward_to, partial and final
//    replies, request_answered's backoff; a stolen task's inputs are fetched from the victim.
//  - each rank's CostModel learns from its simulated tasks, transfers and round trips.
//
// Every task runs exactly once; a second run or a task never run ends the simulation with
// an error.

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "bellows/runtime/options.hpp"
#include "bellows/sim/platform.hpp"
#include "bellows/sim/workload.hpp"

namespace bellows::sim {

struct SimOptions {
  int ranks = 4;
  /// Times the task graph runs; the cost models, steal backoffs and compute shares carry
  /// from one iteration to the next, as in a real run.
  int iterations = 1;
  PlatformOptions platform;
  /// Fixed cost of running one task on a rank, microseconds (measured: docs/sim.md).
  double task_overhead_us = 1.5;
  /// Bytes of a control message (activation, fetch request, steal request or reply).
  std::uint64_t control_bytes = 64;
  /// A platform file to load instead of generating one (hosts taken in name order; at
  /// least `ranks` of them). Empty: generated from `platform`.
  std::string platform_file;
  /// When not empty, the platform XML the run used is written there.
  std::string platform_out;
  runtime::StealOptions steal;
  /// CPU the communication and copy threads of the receiving rank spend on one tile it
  /// receives (the handshake's messages and the copy), microseconds; the tile counts as
  /// arrived when that CPU work is done. 0: free (docs/sim.md, "The ranks' CPU").
  double tile_cpu_us = 0.0;
  /// A victim's CPU for serving one steal request is `steal.request_visit_cost_us` when true.
  bool serve_cpu = true;
  /// 0: each rank has a core of its own for that CPU work (a node each). K > 0: all ranks
  /// share K cores, as ranks on one host do.
  int host_cores = 0;
  /// What an emulated device's lane loses, microseconds, each time it sleeps out a task's
  /// modeled time: the sleep's overshoot (timer slack and the thread's wake-up; measured at
  /// 67 us on an idle host: docs/sim.md, "The emulated lane's wake-up"). The task completes
  /// that much after its modeled end; a lane that stays busy starts its next task at the
  /// modeled end (emulated_device.cpp's catch-up rule), so it delays completions, not a busy
  /// lane's throughput. A sleep uses no CPU: not charged to the host's cores. 0 (default):
  /// lanes wake on time.
  double lane_wake_us = 0.0;
  /// Transfers each link of the nodes' network carries at once (SimGrid's concurrency limit
  /// on those links): a tile that finds either link of its route full waits until both have
  /// room (SimGrid starts it then), and then has the links' bandwidth to itself or shared with
  /// the few others. 0: no limit, every tile in flight shares the links (max-min fair). Control
  /// messages have a network of their own and are never held back (docs/sim.md, "Speed of
  /// the simulator").
  int link_concurrency = 0;
  /// Tile requests a rank has out at once (a tile requested and not yet arrived); further
  /// requests wait and go out in the order they were made, as tiles arrive. 0: no limit,
  /// every tile is requested when its task is instantiated (docs/sim.md, "Speed of the
  /// simulator").
  int fetch_window = 0;
  /// When not empty, every rank appends to this file the samples a real run's --trace
  /// writes (docs/runtime.md; scripts/plot_trace.py plots both), in simulated seconds.
  std::string trace_path;
};

/// An empty string when the options are usable, else what is wrong (naming the option).
[[nodiscard]] std::string validate(const SimOptions& options);

/// Called now and then (at most a few times a second) with tasks done, tasks in all and the
/// simulated time.
using ProgressFn = std::function<void(std::uint64_t done, std::uint64_t total, double simulated)>;

/// Runs the workload's iteration once on `options.ranks` simulated nodes and returns the
/// report (the examples' JSON report fields where they apply, plus "sim"). One simulation
/// per process: SimGrid's engine cannot be started twice. Throws std::invalid_argument on
/// bad options, std::runtime_error when the simulation breaks a rule (a task run twice or
/// never).
[[nodiscard]] nlohmann::json run_simulation(const Workload& workload, const SimOptions& options,
                                            const ProgressFn& progress = {});

}  // namespace bellows::sim
