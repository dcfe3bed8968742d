#include "bellows/sim/simulation.hpp"

#include <simgrid/s4u.hpp>
#include <xbt/log.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "bellows/runtime/stats.hpp"
#include "rank.hpp"
#include "simgrid_engine.hpp"

namespace bellows::sim {

std::string validate(const SimOptions& o) {
  if (o.ranks < 1) return "--ranks must be at least 1, got " + std::to_string(o.ranks);
  if (o.platform_file.empty()) {
    if (auto error = validate(o.platform); !error.empty()) return error;
  }
  if (!(o.task_overhead_us >= 0.0) || !std::isfinite(o.task_overhead_us)) {
    return "--task-overhead-us must be at least 0, got " + std::to_string(o.task_overhead_us);
  }
  if (auto error = runtime::validate(o.steal); !error.empty()) return error;
  if (!(o.tile_cpu_us >= 0.0) || !std::isfinite(o.tile_cpu_us)) {
    return "--tile-cpu-us must be at least 0, got " + std::to_string(o.tile_cpu_us);
  }
  if (o.iterations < 1) return "--iterations must be at least 1, got " + std::to_string(o.iterations);
  if (!(o.lane_wake_us >= 0.0) || !std::isfinite(o.lane_wake_us)) {
    return "--lane-wake-us must be at least 0, got " + std::to_string(o.lane_wake_us);
  }
  if (o.host_cores < 0) return "--host-cores must be at least 0, got " + std::to_string(o.host_cores);
  if (o.link_concurrency < 0) {
    return "--link-concurrency must be at least 0, got " + std::to_string(o.link_concurrency);
  }
  if (o.fetch_window < 0) return "--fetch-window must be at least 0, got " + std::to_string(o.fetch_window);
  return {};
}

namespace {

namespace s4u = simgrid::s4u;
using detail::Rank;
using detail::World;

std::vector<s4u::Host*> rank_hosts(const s4u::Engine& engine, int ranks) {
  std::vector<s4u::Host*> hosts;
  bool named = true;
  for (int r = 0; r < ranks && named; ++r) {
    s4u::Host* h = engine.host_by_name_or_null(host_name(r));
    if (h == nullptr) named = false;
    hosts.push_back(h);
  }
  if (named) return hosts;
  hosts = engine.get_all_hosts();
  std::sort(hosts.begin(), hosts.end(),
            [](const s4u::Host* a, const s4u::Host* b) { return a->get_name() < b->get_name(); });
  if (hosts.size() < static_cast<std::size_t>(ranks)) {
    throw std::invalid_argument("the platform has " + std::to_string(hosts.size()) + " hosts for " +
                                std::to_string(ranks) + " ranks");
  }
  hosts.resize(static_cast<std::size_t>(ranks));
  return hosts;
}

/// The ranks' CPU for their communication and copy threads: hosts of their own outside the
/// network (a zone without routes; only executions run there), one core at 1 GFLOP/s
/// each, or one host of `host_cores` cores that every rank's CPU work shares.
std::vector<s4u::Host*> cpu_hosts(const s4u::Engine& engine, const SimOptions& options) {
  auto* zone = s4u::create_empty_zone("bellows-cpu");
  zone->set_parent(engine.get_netzone_root());
  std::vector<s4u::Host*> cpus;
  if (options.host_cores > 0) {
    s4u::Host* shared = zone->create_host("cpu-shared", 1e9);
    shared->set_core_count(options.host_cores);
    shared->seal();
    cpus.assign(static_cast<std::size_t>(options.ranks), shared);
  } else {
    for (int r = 0; r < options.ranks; ++r) {
      s4u::Host* own = zone->create_host("cpu-" + std::to_string(r), 1e9);
      own->seal();
      cpus.push_back(own);
    }
  }
  zone->seal();
  return cpus;
}

/// The control network: a host per rank, where its actor lives, with a link of its own to a
/// switch. The control messages (activations, tile requests, steal requests and replies, an
/// iteration's end) go through it and the tiles through the nodes' links, so a 64-byte
/// message pays its latency and bytes but no share of the tiles' bandwidth, and SimGrid's
/// flow solver never couples it with the tiles in flight (docs/sim.md, "Speed of the
/// simulator"). Its latency and bandwidth are those of the route between the first two
/// nodes (each link half the latency).
std::vector<s4u::Host*> control_hosts(const s4u::Engine& engine, const std::vector<s4u::Host*>& nodes) {
  double latency = 0.0;
  double bandwidth = 1e12;
  if (nodes.size() > 1) {
    std::vector<s4u::Link*> route;
    nodes[0]->route_to(nodes[1], route, &latency);
    for (const s4u::Link* link : route) bandwidth = std::min(bandwidth, link->get_bandwidth());
  }
  auto* zone = s4u::create_star_zone("bellows-control");
  zone->set_parent(engine.get_netzone_root());
  std::vector<s4u::Host*> hosts;
  for (std::size_t r = 0; r < nodes.size(); ++r) {
    s4u::Host* host = zone->create_host("control-" + std::to_string(r), nodes[r]->get_speed());
    host->seal();
    auto* link = zone->create_split_duplex_link("control-link-" + std::to_string(r), bandwidth);
    link->set_latency(latency / 2.0);
    link->seal();
    zone->add_route(host->get_netpoint(), nullptr, nullptr, nullptr,
                    {s4u::LinkInRoute(link, s4u::LinkInRoute::Direction::UP)}, true);
    hosts.push_back(host);
  }
  zone->seal();
  return hosts;
}

}  // namespace

nlohmann::json run_simulation(const Workload& workload, const SimOptions& options, const ProgressFn& progress) {
  if (auto error = validate(options); !error.empty()) throw std::invalid_argument(error);
  const SimGraph& g = workload.graph;
  if (g.ranks() != options.ranks) {
    throw std::invalid_argument("the workload was built for " + std::to_string(g.ranks()) + " ranks, not " +
                                std::to_string(options.ranks));
  }
  const auto wall_start = std::chrono::steady_clock::now();

  // The platform: the file named, else one generated (and kept where asked).
  std::string platform_path = options.platform_file;
  std::string temporary;
  if (platform_path.empty()) {
    platform_path = write_platform(options.platform, options.ranks, options.platform_out);
    if (options.platform_out.empty()) temporary = platform_path;
  }
  SimGridEngine engine("bellows-sim", platform_path);
  if (!temporary.empty()) std::remove(temporary.c_str());
  const auto hosts = rank_hosts(engine.get(), options.ranks);
  if (options.link_concurrency > 0) {
    for (s4u::Link* link : engine.get().get_all_links()) link->set_concurrency_limit(options.link_concurrency);
  }
  const auto cpus = cpu_hosts(engine.get(), options);
  const auto controls = control_hosts(engine.get(), hosts);

  World world{g, options};
  world.runs.assign(g.size(), 0);
  world.missing.assign(g.size(), 0);
  world.instantiated.assign(g.size(), 0);
  world.stolen.assign(g.size(), 0);
  world.owned.resize(static_cast<std::size_t>(options.ranks));
  for (std::uint32_t t = 0; t < g.size(); ++t) {
    world.missing[t] = g.task(t).predecessor_slots;
    world.owned[static_cast<std::size_t>(g.task(t).owner)].push_back(t);
  }
  world.progress = progress;
  for (int r = 0; r < options.ranks; ++r) {
    const auto at = static_cast<std::size_t>(r);
    world.ranks.push_back(std::make_unique<Rank>(world, r, hosts[at], controls[at], cpus[at]));
  }
  for (int r = 0; r < options.ranks; ++r) {
    Rank* rank = world.ranks[static_cast<std::size_t>(r)].get();
    s4u::Actor::create("rank-" + std::to_string(r), rank->control(), [rank] { rank->run(); });
  }
  engine.get().run();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();

  if (!world.error.empty()) throw std::runtime_error(world.error);
  std::uint64_t never = 0, twice = 0;
  for (const auto runs : world.runs) {
    never += runs == 0 ? 1 : 0;
    twice += runs > 1 ? 1 : 0;
  }
  if (never > 0 || twice > 0) {
    throw std::runtime_error(std::to_string(never) + " tasks never ran and " + std::to_string(twice) +
                             " ran more than once");
  }

  // The report: the examples' fields where they apply, and "sim".
  const double speed = hosts.front()->get_speed();
  const int lanes = world.ranks.front()->lanes();
  const double overhead = options.task_overhead_us * 1e-6;
  const double work = g.total_flops() / speed + static_cast<double>(g.size()) * overhead;
  const double critical = g.critical_path_seconds(1.0 / speed, overhead);
  const double perfect = work / (static_cast<double>(options.ranks) * lanes);
  const double bound = std::max(perfect, critical);
  double most_owned = 0.0;
  std::vector<double> owned(static_cast<std::size_t>(options.ranks), 0.0);
  for (std::size_t t = 0; t < g.size(); ++t) {
    owned[static_cast<std::size_t>(g.task(t).owner)] += g.task(t).flops / speed + overhead;
  }
  for (const double o : owned) most_owned = std::max(most_owned, o / lanes);

  nlohmann::json j = workload.description;
  j["ranks"] = options.ranks;
  j["kernel"] = "simulated";
  j["emulated_gflops"] = speed * 1e-9;
  j["emulated_lanes"] = lanes;
  j["iterations"] = nlohmann::json::array();
  for (const auto& it : world.iterations) {
    j["iterations"].push_back({{"seconds", it.seconds},
                               {"gflops", it.seconds > 0 ? g.total_flops() / it.seconds * 1e-9 : 0.0},
                               {"ranks", options.ranks},
                               {"busiest_compute_share", it.busiest_compute_share},
                               {"mean_compute_share", it.mean_compute_share}});
  }
  // The makespan: the iteration's time, or with several the median of all but the first
  // (as bench_common.makespan takes a real run's steady iteration time).
  std::vector<double> steady;
  for (std::size_t i = world.iterations.size() > 1 ? 1 : 0; i < world.iterations.size(); ++i) {
    steady.push_back(world.iterations[i].seconds);
  }
  std::sort(steady.begin(), steady.end());
  const double makespan = steady.empty() ? 0.0
                          : steady.size() % 2 == 1 ? steady[steady.size() / 2]
                                                   : (steady[steady.size() / 2 - 1] + steady[steady.size() / 2]) / 2;
  j["verified"] = false;
  j["residual"] = nullptr;
  runtime::StealStats steal;
  nlohmann::json rank_stats = nlohmann::json::array();
  std::uint64_t most_requests_out = 0;
  for (const auto& r : world.ranks) {
    steal.add(r->steal_stats());
    nlohmann::json s;
    s["rank"] = &r - world.ranks.data();
    s["tasks"] = r->tasks_executed;
    s["tasks_owned"] = r->owned_tasks;
    s["tasks_by_class"] = r->tasks_by_class;
    s["flops"] = r->flops;
    s["busy_seconds"] = r->busy_seconds;
    s["comm_cpu_seconds"] = r->cpu_seconds;
    s["idle_seconds"] = std::max(0.0, world.makespan * r->lanes() - r->busy_seconds);
    s["bytes_sent"] = r->bytes_sent;
    s["bytes_received"] = r->bytes_received;
    s["messages_sent"] = r->messages_sent;
    s["messages_received"] = r->messages_received;
    s["most_tile_requests_out"] = r->most_tile_requests_out;
    most_requests_out = std::max(most_requests_out, r->most_tile_requests_out);
    s["steal"] = r->steal_stats();
    s["cost"] = r->cost().summary();
    rank_stats.push_back(std::move(s));
  }
  j["rank_stats"] = std::move(rank_stats);
  j["steal"] = steal;
  j["offload"] = {{"enabled", false}, {"tasks_offloaded", 0}, {"plans_held_back", 0}};
  j["work_seconds"] = work;
  j["critical_path_seconds"] = critical;
  j["balanced_bound_seconds"] = bound;
  j["max_rank_work_seconds"] = most_owned;
  const double answered = static_cast<double>(steal.requests_sent);
  nlohmann::json sim;
  sim["makespan_seconds"] = makespan;
  sim["first_iteration_seconds"] = world.iterations.empty() ? 0.0 : world.iterations.front().seconds;
  sim["perfect_balance_seconds"] = perfect;
  sim["bound_seconds"] = bound;
  sim["makespan_over_bound"] = bound > 0 ? makespan / bound : 0.0;
  sim["makespan_over_max_rank_work"] = most_owned > 0 ? makespan / most_owned : 0.0;
  sim["steal_enabled"] = options.steal.enabled;
  sim["steal_cost_rule"] = options.steal.cost_rule;
  sim["steal_success_rate"] =
      answered > 0 ? (answered - static_cast<double>(steal.requests_failed)) / answered : 0.0;
  sim["tasks_run_exactly_once"] = true;
  sim["events"] = world.events;
  sim["wall_seconds"] = wall;
  sim["events_per_second"] = wall > 0 ? static_cast<double>(world.events) / wall : 0.0;
  sim["task_overhead_us"] = options.task_overhead_us;
  sim["control_bytes"] = options.control_bytes;
  sim["tile_cpu_us"] = options.tile_cpu_us;
  sim["serve_cpu_us"] = options.serve_cpu ? options.steal.request_visit_cost_us : 0;
  sim["host_cores"] = options.host_cores;
  sim["lane_wake_us"] = options.lane_wake_us;
  sim["link_concurrency"] = options.link_concurrency;
  sim["fetch_window"] = options.fetch_window;
  sim["most_tile_requests_out"] = most_requests_out;
  sim["platform_file"] = temporary.empty() ? platform_path : std::string();
  if (options.platform_file.empty()) {
    sim["platform"] = {{"gflops", options.platform.gflops},
                       {"lanes", options.platform.lanes},
                       {"latency_us", options.platform.latency_us},
                       {"bandwidth_gbps", options.platform.bandwidth_gbps},
                       {"backbone_gbps", options.platform.backbone_gbps}};
  }
  j["sim"] = std::move(sim);
  return j;
}

}  // namespace bellows::sim
