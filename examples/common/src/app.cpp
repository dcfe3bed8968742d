#include "bellows/examples/app.hpp"

#include "bellows/examples/elastic.hpp"
#include "bellows/runtime/tile_size.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <cstdlib>
#include <iostream>

namespace bellows::examples {
namespace {

bool parse_grid(const std::string& text, int& p, int& q) {
  const auto x = text.find('x');
  if (x == std::string::npos) return false;
  try {
    std::size_t used = 0;
    p = std::stoi(text.substr(0, x), &used);
    if (used != x) return false;
    const auto rest = text.substr(x + 1);
    q = std::stoi(rest, &used);
    return used == rest.size() && p > 0 && q > 0;
  } catch (const std::exception&) {
    return false;
  }
}

std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::optional<AppOptions> parse_app_options(const std::string& app, const std::string& description,
                                            int argc, char** argv, int ranks, bool speak,
                                            int& exit_code, const ExtraOptions& extra) {
  AppOptions o;
  std::string kernel = "cpu";
  std::string steal = "off";
  std::string steal_cost_rule = "on";
  std::string offload = o.offload.enabled ? "on" : "off";
  std::string checkpoint = o.checkpoint.enabled ? "on" : "off";
  std::string message_log = "off";
  std::string teams;
  std::string steal_across_teams = "off";
  std::string team_plan = "off";
  std::string replan = o.message_log.replan ? "on" : "off";
  std::string same_host = "on";
  std::string same_host_mailboxes = o.same_host_mailboxes ? "on" : "off";
  std::string workers_read_mail = o.workers_read_mail ? "on" : "off";
  std::string cuda_pinned = "on";
  std::string rebalance = "on";
  std::string emulated_compute = "off";
  std::string victim{runtime::to_string(o.steal.policy)};
  CLI::App cli(description, app);
  cli.add_option("--n", o.n, "matrix order");
  std::string tile = std::to_string(o.tile);
  cli.add_option("--tile", tile,
                 "tile order, or auto: chosen before the first iteration from this machine's "
                 "measured kernel speeds (--kernel cpu; a multiple of 32 from 64 to 1024 that "
                 "divides --n)");
  cli.add_option("--iterations", o.iterations, "times the task graph runs");
  cli.add_option("--kernel", kernel,
                 "task bodies: cpu, cuda, emulated, or hybrid (CPU workers and the emulated "
                 "device, each task where it is predicted to finish first)");
  cli.add_flag("--verify", o.verify, "check the result against LAPACK/BLAS on rank 0");
  cli.add_option("--trace", o.trace_path, "append ready/completed task samples (JSON lines) to FILE");
  cli.add_option("--grid", o.grid, "process grid PxQ (default: most square)");
  cli.add_option("--workers", o.workers, "CPU worker threads per rank");
  cli.add_option("--emulated-gflops", o.emulated_gflops, "speed of the emulated device, GFLOP/s");
  cli.add_option("--emulated-lanes", o.emulated_lanes, "tasks the emulated device runs at once");
  cli.add_option("--emulated-compute", emulated_compute,
                 "the emulated device also computes each task (on the CPU, within its modeled "
                 "time): a node of the stated speed with exact results, on or off");
  auto* link_option = cli.add_option("--emulated-link-gbps", o.emulated_link_gbps,
                 "host <-> device link of the emulated device, GB/s (0: moving tiles is free; default: "
                 "12 with --kernel hybrid, free with --kernel emulated)");
  cli.add_option("--emulated-link-latency-us", o.emulated_link_latency_us,
                 "fixed cost of one transfer over that link, microseconds");
  cli.add_option("--seed", o.seed, "seed of the input matrices");
  cli.add_flag("--quiet", o.quiet, "print only the JSON line");
  cli.add_option("--report", o.report_path, "also append the JSON line to FILE");
  cli.add_option("--comm-sleep-us", o.comm_max_sleep_us,
                 "longest sleep of the communication thread when idle, microseconds");
  cli.add_option("--same-host", same_host,
                 "doorbells and direct tile reads between ranks on one host: on or off");
  cli.add_option("--same-host-mailboxes", same_host_mailboxes,
                 "with --same-host on: a worker writes a small activation for a rank of the same "
                 "host into that rank's mailbox itself (off: through the communication thread and "
                 "MPI), on or off");
  cli.add_option("--workers-read-mail", workers_read_mail,
                 "with --same-host-mailboxes on: the workers read their rank's mailboxes between "
                 "tasks and before they sleep (off: only the communication thread reads them), on "
                 "or off");
  cli.add_option("--eager-tile-bytes", o.eager_tile_bytes,
                 "a tile of at most this many bytes travels in its activation, with no fetch "
                 "(0: every tile is fetched)");
  cli.add_option("--comm-poll-us", o.comm_poll_us,
                 "microseconds the communication thread polls after a message before it sleeps");
  cli.add_option("--comm-thread-task-us", o.comm_thread_task_us,
                 "the communication thread runs a task a message made ready itself when every "
                 "worker sleeps and tasks lately took at most this many microseconds (0: never)");
  cli.add_option("--cuda-pinned", cuda_pinned,
                 "--kernel cuda: pin the tile buffers so that copies to and from the GPU skip the "
                 "driver's staging buffer, on or off");
  cli.add_option("--cuda-cache-mib", o.cuda_cache_mib,
                 "--kernel cuda: MiB of tiles kept in GPU memory between tasks, per rank (0: every "
                 "task copies all its tiles in)");
  cli.add_option("--gpus", o.gpus,
                 "--kernel emulated, hybrid or cuda: GPUs each rank drives (emulated GPUs, or CUDA "
                 "ordinals from the first); 0: every CUDA GPU the rank sees");
  cli.add_option("--cuda-streams", o.cuda_streams,
                 "--kernel cuda: streams that run tasks' kernels side by side, per rank");
  cli.add_option("--resize", o.resize,
                 "resize schedule, e.g. iter=3:+2,iter=6:-3 (job started by scripts/bellows-local)");
  cli.add_option("--ask-controller", o.ask_controller,
                 "under bellows run: the application asks the controller for nodes, e.g. iter=9:+1 "
                 "(bellows::runtime::request_resize before that iteration, on rank 0)");
  cli.add_option("--rebalance", rebalance,
                 "re-grid at a resize (every tile where a job started at the new size would hold it): on or off");
  cli.add_option("--steal", steal, "inter-rank work stealing: on or off");
  cli.add_option("--steal-chunk", o.steal.chunk,
                 "tasks asked for in one steal request (with the cost rule, one where a task "
                 "runs no longer than moving that many of its tiles)");
  cli.add_option("--steal-max-hops", o.steal.max_hops,
                 "times a steal request may be forwarded to another victim");
  cli.add_option("--steal-device-threshold", o.steal.device_threshold,
                 "a device starves below this many ready tasks");
  cli.add_option("--steal-node-threshold", o.steal.node_threshold,
                 "a rank starves below this many ready tasks over all its devices");
  cli.add_option("--steal-victim", victim, "victim choice: random or last-victim");
  cli.add_option("--steal-seed", o.steal.seed, "seed of the random victim choice");
  cli.add_option("--offload", offload,
                 "proactive offloading: at the start of each iteration, ranks predicted to "
                 "finish late push work to ranks predicted to finish early (on or off)");
  cli.add_option("--offload-min-imbalance", o.offload.min_imbalance,
                 "offload only when the most loaded rank's predicted work exceeds the mean by "
                 "this fraction (default 0.05)");
  cli.add_option("--offload-min-compute-share", o.offload.min_compute_share,
                 "offload only when the busiest rank's predicted work is at least this share of "
                 "the previous iteration's time (default 0.5)");
  cli.add_option("--checkpoint", checkpoint,
                 "buddy checkpoints: at iteration boundaries each rank keeps its tiles and sends "
                 "a copy to a rank of another node (on or off)");
  cli.add_option("--checkpoint-mtbf", o.checkpoint.node_mean_time_between_failures_seconds,
                 "a node's mean time between failures, seconds, from which with the measured "
                 "checkpoint cost the interval follows (Young/Daly; default 31536000, a year)");
  cli.add_option("--checkpoint-every", o.checkpoint.every_iterations,
                 "a checkpoint every this many iterations instead (default 0: Young/Daly)");
  cli.add_option("--message-log", message_log,
                 "team-based message logging on top of --checkpoint on: a tile sent to a rank of "
                 "another team stays in the sender's log until the next checkpoint (on or off)");
  cli.add_option("--team-size", o.message_log.team_size,
                 "ranks per team, consecutive ranks together (default 0: one team of every rank)");
  cli.add_option("--teams", teams,
                 "the team of each rank instead, comma-separated (e.g. a TeamLB plan: 0,1,0,1)");
  cli.add_option("--team-plan", team_plan,
                 "TeamLB after the first iteration: teams of --team-size ranks and the tiles' "
                 "places in them chosen from the task graph and the measured task times (on or off)");
  cli.add_option("--load-window", o.message_log.load_window,
                 "TeamLB weighs each tile by its median seconds over this many iterations (default 5)");
  cli.add_option("--replan", replan,
                 "TeamLB plans again at a checkpoint once a window was weighed, taking the plan when "
                 "it pays (on or off; default on)");
  cli.add_option("--replan-gain", o.message_log.replan_min_gain,
                 "the fall of the heaviest rank's predicted seconds that pays for a re-plan, a "
                 "fraction (default 0.10)");
  cli.add_option("--steal-across-teams", steal_across_teams,
                 "stealing may cross teams, each task given logged as a determinant (on or off; "
                 "default off: stealing stays inside teams)");
  cli.add_option("--slow-rank", o.slowdown.rank,
                 "emulated device: this rank runs every task --slow-factor times slower from "
                 "iteration --slow-from on, as under a noisy neighbour (default -1: none)");
  cli.add_option("--slow-from", o.slowdown.from_iteration,
                 "first iteration (counting from 1) that --slow-rank runs slowed (default 1)");
  cli.add_option("--slow-factor", o.slowdown.factor,
                 "how many times longer --slow-rank's tasks take (default 1)");
  cli.add_option("--steal-cost-rule", steal_cost_rule,
                 "steal only when the measured costs say it pays: on or off");
  cli.add_option("--steal-victim-poll-us", o.steal.victim_poll_us,
                 "longest sleep of the communication thread of a rank with tasks to spare");
  cli.add_option("--steal-request-visit-cost-us", o.steal.request_visit_cost_us,
                 "what one victim's handling of a steal request costs, us (default 40): a thief "
                 "whose requests bring less task time than that backs off longer");
  if (extra.add) extra.add(cli);
  const auto fail = [&](const std::string& message) -> std::optional<AppOptions> {
    if (speak) std::fprintf(stderr, "%s: error: %s\n", app.c_str(), message.c_str());
    exit_code = 2;
    return std::nullopt;
  };
  try {
    cli.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    exit_code = 0;
    if (speak) std::cout << cli.help();
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    return fail(e.what());
  }
  if (o.n <= 0) return fail("--n must be positive, got " + std::to_string(o.n));
  o.tile_auto = tile == "auto";
  if (o.tile_auto) {
    if (runtime::tile_size_candidates(o.n).empty()) {
      return fail("--tile auto: no multiple of 32 from 64 to 1024 divides --n " +
                  std::to_string(o.n) + "; give --tile a size");
    }
    if (kernel != "cpu") {
      return fail("--tile auto measures the CPU kernels: it needs --kernel cpu, got '" + kernel +
                  "'");
    }
    if (!o.resize.empty() || !o.ask_controller.empty()) {
      return fail("--tile auto is chosen by the ranks that start the job; a job that grows "
                  "(--resize, --ask-controller) needs --tile with a size");
    }
  } else {
    const auto end = tile.data() + tile.size();
    const auto [rest, error] = std::from_chars(tile.data(), end, o.tile);
    if (error != std::errc{} || rest != end || tile.empty()) {
      return fail("--tile must be a tile order or auto, got '" + tile + "'");
    }
    if (o.tile <= 0) return fail("--tile must be positive, got " + std::to_string(o.tile));
  }
  if (!o.tile_auto && o.tile > o.n) {
    return fail("--tile " + std::to_string(o.tile) + " is larger than the matrix (--n " +
                std::to_string(o.n) + ")");
  }
  if (o.iterations <= 0) {
    return fail("--iterations must be positive, got " + std::to_string(o.iterations));
  }
  if (o.workers <= 0) return fail("--workers must be positive, got " + std::to_string(o.workers));
  if (!(o.emulated_gflops > 0.0)) return fail("--emulated-gflops must be positive");
  if (o.emulated_lanes <= 0) return fail("--emulated-lanes must be positive");
  if (link_option->count() > 0 && !(o.emulated_link_gbps >= 0.0)) {
    return fail("--emulated-link-gbps must not be negative");
  }
  if (!(o.emulated_link_latency_us >= 0.0)) {
    return fail("--emulated-link-latency-us must not be negative");
  }
  if (o.comm_max_sleep_us <= 0) return fail("--comm-sleep-us must be positive");
  {
    runtime::RuntimeOptions communication;
    communication.eager_tile_bytes = o.eager_tile_bytes;
    communication.comm_poll_us = o.comm_poll_us;
    communication.comm_thread_task_us = o.comm_thread_task_us;
    if (const auto problem = runtime::validate_communication(communication); !problem.empty()) {
      return fail("--eager-tile-bytes/--comm-poll-us/--comm-thread-task-us: " + problem);
    }
  }
  if (!runtime::parse_device_kind(kernel, o.kernel)) {
    return fail("--kernel must be cpu, cuda, emulated or hybrid, got '" + kernel + "'");
  }
  if (std::string error; !parse_resize_schedule(o.resize, o.iterations, error)) return fail(error);
  if (std::string error; !parse_resize_schedule(o.ask_controller, o.iterations, error)) {
    return fail("--ask-controller" + error.substr(error.find(' ')));
  }
  if (steal != "on" && steal != "off") return fail("--steal must be on or off, got '" + steal + "'");
  if (same_host != "on" && same_host != "off") {
    return fail("--same-host must be on or off, got '" + same_host + "'");
  }
  o.same_host_transport = same_host == "on";
  if (same_host_mailboxes != "on" && same_host_mailboxes != "off") {
    return fail("--same-host-mailboxes must be on or off, got '" + same_host_mailboxes + "'");
  }
  o.same_host_mailboxes = same_host_mailboxes == "on";
  if (workers_read_mail != "on" && workers_read_mail != "off") {
    return fail("--workers-read-mail must be on or off, got '" + workers_read_mail + "'");
  }
  o.workers_read_mail = workers_read_mail == "on";
  if (cuda_pinned != "on" && cuda_pinned != "off") {
    return fail("--cuda-pinned must be on or off, got '" + cuda_pinned + "'");
  }
  o.cuda_pinned_tiles = cuda_pinned == "on";
  if (o.cuda_cache_mib < 0) {
    return fail("--cuda-cache-mib must be 0 or more, got " + std::to_string(o.cuda_cache_mib));
  }
  if (o.gpus < 0 || o.gpus > static_cast<int>(runtime::Tile::kMaxDevices)) {
    return fail("--gpus must be 0 (every visible GPU) or 1 to " + std::to_string(runtime::Tile::kMaxDevices) +
                ", got " + std::to_string(o.gpus));
  }
  if (o.cuda_streams < 1) {
    return fail("--cuda-streams must be 1 or more, got " + std::to_string(o.cuda_streams));
  }
  if (rebalance != "on" && rebalance != "off") {
    return fail("--rebalance must be on or off, got '" + rebalance + "'");
  }
  o.rebalance_on_resize = rebalance == "on";
  o.steal.enabled = steal == "on";
  if (steal_cost_rule != "on" && steal_cost_rule != "off") {
    return fail("--steal-cost-rule must be on or off, got '" + steal_cost_rule + "'");
  }
  o.steal.cost_rule = steal_cost_rule == "on";
  if (offload != "on" && offload != "off") {
    return fail("--offload must be on or off, got '" + offload + "'");
  }
  o.offload.enabled = offload == "on";
  if (const auto problem = runtime::validate(o.offload); !problem.empty()) {
    return fail("--offload-*: " + problem);
  }
  if (checkpoint != "on" && checkpoint != "off") {
    return fail("--checkpoint must be on or off, got '" + checkpoint + "'");
  }
  o.checkpoint.enabled = checkpoint == "on";
  if (const auto problem = runtime::validate(o.checkpoint); !problem.empty()) {
    return fail("--checkpoint-*: " + problem);
  }
  if (message_log != "on" && message_log != "off") {
    return fail("--message-log must be on or off, got '" + message_log + "'");
  }
  o.message_log.enabled = message_log == "on";
  if (steal_across_teams != "on" && steal_across_teams != "off") {
    return fail("--steal-across-teams must be on or off, got '" + steal_across_teams + "'");
  }
  o.message_log.steal_across_teams = steal_across_teams == "on";
  if (team_plan != "on" && team_plan != "off") {
    return fail("--team-plan must be on or off, got '" + team_plan + "'");
  }
  o.message_log.plan_teams = team_plan == "on";
  if (replan != "on" && replan != "off") return fail("--replan must be on or off, got '" + replan + "'");
  o.message_log.replan = replan == "on";
  if (!teams.empty()) {
    std::size_t start = 0;
    while (start <= teams.size()) {
      const std::size_t comma = std::min(teams.find(',', start), teams.size());
      const std::string item = teams.substr(start, comma - start);
      int team = -1;
      const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), team);
      if (error != std::errc{} || end != item.data() + item.size()) {
        return fail("--teams: '" + item + "' (item " +
                    std::to_string(o.message_log.rank_team.size() + 1) + ") is not a team number");
      }
      o.message_log.rank_team.push_back(team);
      start = comma + 1;
    }
    if (o.message_log.rank_team.size() != static_cast<std::size_t>(ranks)) {
      return fail("--teams names " + std::to_string(o.message_log.rank_team.size()) +
                  " ranks, the job has " + std::to_string(ranks));
    }
  }
  if (const auto problem = runtime::validate(o.message_log); !problem.empty()) {
    return fail("--team-size/--teams/--load-window/--replan-gain: " + problem);
  }
  if (o.message_log.enabled && !o.checkpoint.enabled) {
    return fail("--message-log on needs --checkpoint on (a checkpoint releases the log)");
  }
  if (o.slowdown.rank < -1 || o.slowdown.rank >= ranks) {
    return fail("--slow-rank must be -1 or a rank below " + std::to_string(ranks) + ", got " +
                std::to_string(o.slowdown.rank));
  }
  if (o.slowdown.from_iteration < 1) return fail("--slow-from must be at least 1");
  if (!(o.slowdown.factor > 0.0)) return fail("--slow-factor must be positive");
  if (o.slowdown.rank >= 0 && o.kernel != runtime::DeviceKind::emulated &&
      o.kernel != runtime::DeviceKind::hybrid) {
    return fail("--slow-rank needs the emulated device (--kernel emulated or hybrid)");
  }
  if (!runtime::parse_victim_policy(victim, o.steal.policy)) {
    return fail("--steal-victim must be random or last-victim, got '" + victim + "'");
  }
  if (const auto problem = runtime::validate(o.steal); !problem.empty()) {
    return fail("--steal-*: " + problem);
  }
  if (extra.check) {
    if (const auto problem = extra.check(); !problem.empty()) return fail(problem);
  }
  if (emulated_compute != "on" && emulated_compute != "off") {
    return fail("--emulated-compute must be on or off, got '" + emulated_compute + "'");
  }
  o.emulated_compute = emulated_compute == "on";
  if (o.verify && (o.kernel == runtime::DeviceKind::emulated || o.kernel == runtime::DeviceKind::hybrid) &&
      !o.emulated_compute && !extra.verify_without_compute) {
    return fail("--verify needs --kernel cpu or cuda, or the emulated device (emulated, hybrid) with "
                "--emulated-compute on: without it the emulated device does not compute");
  }
  // An elastic job starts as one process that grows itself (runtime::ElasticSession): the
  // grid is over the ranks it grows to.
  const bool spawned = std::getenv(runtime::ElasticSession::kJoinIterationVariable) != nullptr;
  if (!o.resize.empty() && !spawned && ranks > 1 &&
      std::getenv(runtime::ElasticSession::kInitialRanksVariable) == nullptr) {
    return fail("--resize needs the job started by scripts/bellows-local (ranks started "
                "together by mpiexec -n N share one MPI world and cannot leave it)");
  }
  try {
    ranks = runtime::ElasticSession::initial_grid_ranks();
  } catch (const std::invalid_argument& e) {
    return fail(e.what());
  }
  if (!o.grid.empty()) {
    int p = 0, q = 0;
    if (!parse_grid(o.grid, p, q)) return fail("--grid must look like PxQ, got '" + o.grid + "'");
    if (p * q != ranks) {
      return fail("--grid " + o.grid + " needs " + std::to_string(p * q) + " ranks, running on " +
                  std::to_string(ranks));
    }
  }
  exit_code = 0;
  return o;
}

void init_mpi(int& argc, char**& argv) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  if (provided < MPI_THREAD_SERIALIZED) {
    std::fprintf(stderr, "error: MPI provides thread level %d, libbellows needs MPI_THREAD_SERIALIZED\n",
                 provided);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

int run_example(const char* app, int argc, char** argv, int (*run)(int, char**)) {
  init_mpi(argc, argv);
  int code = 1;
  try {
    code = run(argc, argv);
  } catch (const runtime::JoinCalledOff& e) {
    std::fprintf(stderr, "%s: not joining: %s\n", app, e.what());
    code = 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", app, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return code;
}

runtime::BlockCyclic2D grid_for(const AppOptions& options, int ranks) {
  int p = 0, q = 0;
  if (!options.grid.empty() && parse_grid(options.grid, p, q)) return runtime::BlockCyclic2D{p, q};
  return runtime::BlockCyclic2D::square_for(ranks);
}

runtime::RuntimeOptions runtime_options(const AppOptions& options) {
  runtime::RuntimeOptions r;
  r.device = options.kernel;
  r.cpu_workers = options.workers;
  r.emulated_gflops = options.emulated_gflops;
  r.emulated_lanes = options.emulated_lanes;
  r.emulated_compute = options.emulated_compute;
  r.emulated_link_gbps = options.emulated_link_gbps;
  r.emulated_link_latency_us = options.emulated_link_latency_us;
  r.trace_path = options.trace_path;
  r.comm_max_sleep_us = options.comm_max_sleep_us;
  r.eager_tile_bytes = options.eager_tile_bytes;
  r.comm_poll_us = options.comm_poll_us;
  r.comm_thread_task_us = options.comm_thread_task_us;
  r.steal = options.steal;
  r.same_host_transport = options.same_host_transport;
  r.same_host_mailboxes = options.same_host_mailboxes;
  r.workers_read_mail = options.workers_read_mail;
  r.cuda_pinned_tiles = options.cuda_pinned_tiles;
  r.cuda_tile_cache_bytes = static_cast<std::size_t>(options.cuda_cache_mib) << 20;
  r.cuda_streams = options.cuda_streams;
  r.gpus = options.gpus;
  r.rebalance_on_resize = options.rebalance_on_resize;
  r.offload = options.offload;
  r.emulated_slowdown = options.slowdown;
  r.checkpoint = options.checkpoint;
  r.message_log = options.message_log;
  return r;
}

double random_entry(unsigned seed, long i, long j) noexcept {
  const std::uint64_t h = mix(mix(static_cast<std::uint64_t>(seed) * 0x100000001b3ULL +
                                  static_cast<std::uint64_t>(i)) ^
                              static_cast<std::uint64_t>(j));
  return static_cast<double>(h >> 11) * 0x1.0p-53 - 0.5;
}

double spd_entry(unsigned seed, long n, long i, long j) noexcept {
  const double v = random_entry(seed, std::min(i, j), std::max(i, j));
  return i == j ? v + static_cast<double>(n) : v;
}

void fill_random(runtime::TiledMatrix& matrix, unsigned seed) {
  const long tile = matrix.tile_size();
  matrix.for_each_local_tile([&](int m, int n, runtime::Tile& t) {
    for (int j = 0; j < t.cols(); ++j) {
      for (int i = 0; i < t.rows(); ++i) t.at(i, j) = random_entry(seed, m * tile + i, n * tile + j);
    }
  });
}

void fill_spd(runtime::TiledMatrix& matrix, unsigned seed) {
  const long tile = matrix.tile_size();
  const long order = matrix.rows();
  matrix.for_each_local_tile([&](int m, int n, runtime::Tile& t) {
    for (int j = 0; j < t.cols(); ++j) {
      for (int i = 0; i < t.rows(); ++i) {
        t.at(i, j) = spd_entry(seed, order, m * tile + i, n * tile + j);
      }
    }
  });
}

IterationResult iteration_result(const runtime::IterationReport& report, double flops) {
  return {report.seconds, flops / report.seconds * 1e-9, report.ranks, report.busiest_compute_share,
          report.mean_compute_share};
}

namespace {

/// Per failure this rank recovered from (Runtime::recoveries(), oldest first): a count of its
/// RecoveryReport (`field`: the log bytes the ranks that kept their state held for the replay,
/// those their logs served, the copies dropped), summed over the ranks now in the job, as the
/// event log's `recovered` line sums them over the survivors. A rank that joined after a
/// failure holds the later failures only, so each rank's list is aligned at its end.
/// Collective over the runtime's communicator.
std::vector<unsigned long long> recoveries_summed(const runtime::Runtime& runtime,
                                                  std::uint64_t runtime::RecoveryReport::*field) {
  const std::vector<runtime::RecoveryReport>& recoveries = runtime.recoveries();
  const int mine = static_cast<int>(recoveries.size());
  int most = 0;
  MPI_Allreduce(&mine, &most, 1, MPI_INT, MPI_MAX, runtime.communicator());
  std::vector<unsigned long long> bytes(static_cast<std::size_t>(most), 0);
  std::vector<unsigned long long> summed(static_cast<std::size_t>(most), 0);
  const std::size_t first = static_cast<std::size_t>(most - mine);
  for (std::size_t i = 0; i < recoveries.size(); ++i) bytes[first + i] = recoveries[i].*field;
  if (most > 0) {
    MPI_Allreduce(bytes.data(), summed.data(), most, MPI_UNSIGNED_LONG_LONG, MPI_SUM, runtime.communicator());
  }
  return {summed.begin() + static_cast<std::ptrdiff_t>(first), summed.end()};
}

}  // namespace

nlohmann::json runtime_extra(const runtime::Runtime& runtime) {
  nlohmann::json extra = nlohmann::json::object();
  using Report = runtime::RecoveryReport;
  const std::vector<unsigned long long> log_bytes_for_replay = recoveries_summed(runtime, &Report::log_bytes_for_replay);
  const std::vector<unsigned long long> bytes_replayed = recoveries_summed(runtime, &Report::bytes_replayed);
  const std::vector<unsigned long long> copies_dropped = recoveries_summed(runtime, &Report::copies_dropped);
  if (const auto applied = runtime.teams_applied()) {
    extra["team_plan"] = {{"before_iteration", applied->before_iteration},
                          {"rank_team", applied->rank_team},
                          {"tiles_moved", applied->tiles_moved},
                          {"predicted_cut", applied->predicted_cut},
                          {"predicted_logged_bytes", applied->predicted_logged_bytes},
                          {"imbalance_before", applied->imbalance_before},
                          {"imbalance_after", applied->imbalance_after},
                          {"iterations_weighed", applied->iterations_weighed},
                          {"replanned", applied->replanned},
                          {"predicted_gain", applied->predicted_gain},
                          {"rank_slowness", applied->rank_slowness}};
  }
  // Per failure: what rolled back and how far; the tasks each rank re-ran are its
  // rank_stats[].tasks_rerun.
  if (!runtime.recoveries().empty()) {
    nlohmann::json recoveries = nlohmann::json::array();
    for (std::size_t i = 0; i < runtime.recoveries().size(); ++i) {
      const runtime::RecoveryReport& r = runtime.recoveries()[i];
      recoveries.push_back({{"lost", r.lost},
                            {"interrupted_iteration", r.interrupted_iteration},
                            {"rolled_back_to", r.iteration},
                            {"iterations_redone", r.iterations_redone},
                            {"ranks_rolled_back", r.ranks_rolled_back},
                            {"teams_rolled_back", r.teams_rolled_back},
                            {"rolled_back_globally_because", r.rolled_back_globally_because},
                            {"log_bytes_for_replay", log_bytes_for_replay[i]},
                            {"bytes_replayed", bytes_replayed[i]},
                            {"copies_dropped", copies_dropped[i]},
                            {"ranks_before", r.old_size},
                            {"ranks_after", r.new_size},
                            {"seconds", r.seconds}});
    }
    extra["recoveries"] = std::move(recoveries);
  }
  return extra;
}

void print_report(const std::string& app, const AppOptions& options, int ranks,
                  const std::vector<IterationResult>& iterations,
                  const std::optional<bool>& verified, double residual,
                  const std::vector<runtime::RankStats>& rank_stats, const nlohmann::json& extra) {
  nlohmann::json j;
  j["app"] = app;
  j["n"] = options.n;
  j["tile"] = options.tile;
  j["ranks"] = ranks;
  j["kernel"] = std::string(runtime::to_string(options.kernel));
  j["gpus"] = options.gpus;
  j["workers"] = options.workers;
  if (options.kernel == runtime::DeviceKind::emulated || options.kernel == runtime::DeviceKind::hybrid) {
    j["emulated_gflops"] = options.emulated_gflops;
    j["emulated_link_gbps"] = runtime::emulated_link_of(runtime_options(options));
  }
  nlohmann::json its = nlohmann::json::array();
  for (const auto& it : iterations) {
    its.push_back({{"seconds", it.seconds},
                   {"gflops", it.gflops},
                   {"ranks", it.ranks},
                   {"busiest_compute_share", it.busiest_compute_share},
                   {"mean_compute_share", it.mean_compute_share}});
  }
  j["iterations"] = its;
  j["verified"] = verified.value_or(false);
  if (verified) {
    j["residual"] = residual;
  } else {
    j["residual"] = nullptr;
  }
  j["rank_stats"] = rank_stats;
  // Stealing over all ranks: counters summed, round trips pooled before taking percentiles.
  runtime::StealStats steal;
  for (const auto& s : rank_stats) steal.add(s.steal);
  j["steal"] = steal;
  std::uint64_t offloaded = 0;
  std::uint64_t held_back = 0;
  for (const auto& s : rank_stats) {
    offloaded += s.tasks_offloaded;
    held_back += s.offload_plans_held_back;
  }
  j["offload"] = {{"enabled", options.offload.enabled},
                  {"tasks_offloaded", offloaded},
                  {"plans_held_back", held_back}};
  // Checkpoints over all ranks: counts and bytes summed, the times of the slowest rank.
  runtime::CheckpointStats checkpoints;
  for (const auto& s : rank_stats) {
    checkpoints.checkpoints = std::max(checkpoints.checkpoints, s.checkpoint.checkpoints);
    checkpoints.tiles_sent += s.checkpoint.tiles_sent;
    checkpoints.tiles_unchanged += s.checkpoint.tiles_unchanged;
    checkpoints.bytes_sent += s.checkpoint.bytes_sent;
    checkpoints.bytes_received += s.checkpoint.bytes_received;
    checkpoints.bytes_held += s.checkpoint.bytes_held;
    checkpoints.post_seconds = std::max(checkpoints.post_seconds, s.checkpoint.post_seconds);
    checkpoints.wait_seconds = std::max(checkpoints.wait_seconds, s.checkpoint.wait_seconds);
    checkpoints.interval_iterations = std::max(checkpoints.interval_iterations, s.checkpoint.interval_iterations);
  }
  j["checkpoint"] = checkpoints;
  j["checkpoint"]["enabled"] = options.checkpoint.enabled;
  // The message log over all ranks: counts, bytes, seconds and what is held summed (after each
  // iteration too); the peak of the largest rank's log.
  runtime::MessageLogStats logs;
  for (const auto& s : rank_stats) {
    const auto& l = s.message_log;
    logs.messages_logged += l.messages_logged;
    logs.bytes_logged += l.bytes_logged;
    logs.messages_in_team += l.messages_in_team;
    logs.bytes_in_team += l.bytes_in_team;
    logs.determinants_logged += l.determinants_logged;
    logs.messages_released += l.messages_released;
    logs.bytes_released += l.bytes_released;
    logs.entries_held += l.entries_held;
    logs.bytes_held += l.bytes_held;
    logs.peak_bytes_held = std::max(logs.peak_bytes_held, l.peak_bytes_held);
    logs.bytes_replayed += l.bytes_replayed;
    logs.copies_dropped += l.copies_dropped;
    logs.seconds += l.seconds;
    // Per iteration: the bytes held after it, summed over the ranks.
    const auto& held = l.bytes_held_by_iteration;
    if (logs.bytes_held_by_iteration.size() < held.size()) logs.bytes_held_by_iteration.resize(held.size(), 0.0);
    for (std::size_t i = 0; i < held.size(); ++i) logs.bytes_held_by_iteration[i] += held[i];
  }
  j["message_log"] = logs;
  j["message_log"]["enabled"] = options.message_log.enabled;
  j["message_log"]["team_size"] = options.message_log.team_size;
  j["message_log"]["teams"] = options.message_log.rank_team;
  j["message_log"]["team_plan"] = options.message_log.plan_teams;
  for (const auto& [key, value] : extra.items()) j[key] = value;

  if (!options.quiet) {
    std::printf("%s: n=%d tile=%d ranks=%d kernel=%s workers/rank=%d\n", app.c_str(), options.n,
                options.tile, ranks, std::string(runtime::to_string(options.kernel)).c_str(),
                options.workers);
    for (std::size_t i = 0; i < iterations.size(); ++i) {
      std::printf("  iteration %zu: %.4f s, %.1f GFLOP/s on %d ranks\n", i + 1,
                  iterations[i].seconds, iterations[i].gflops, iterations[i].ranks);
    }
    if (extra.contains("resizes")) {
      for (const auto& r : extra["resizes"]) {
        const int from = r.value("from_ranks", 0), to = r.value("to_ranks", 0);
        std::printf("  resize before iteration %d: %d -> %d ranks", r.value("before_iteration", 0),
                    from, to);
        if (r.contains("add")) {
          std::printf(", %d added in %.3f s", r.value("add", 0), r.value("grow_seconds", 0.0));
          if (r.contains("request_to_first_task_seconds")) {
            std::printf("; request to first task on each new rank:");
            for (const auto& t : r["request_to_first_task_seconds"]) {
              if (t.is_number()) {
                std::printf(" %.3f s", t.get<double>());
              } else {
                std::printf(" (none)");
              }
            }
          }
        } else {
          std::printf(", ranks %s left: %.1f MiB handed to backups, drain %.3f s, shrink %.3f s",
                      r.value("remove", nlohmann::json::array()).dump().c_str(),
                      static_cast<double>(r.value("bytes_handed_to_backups", 0ULL)) / (1 << 20),
                      r.value("drain_seconds", 0.0), r.value("shrink_seconds", 0.0));
        }
        std::printf("\n");
      }
    }
    for (const auto& s : rank_stats) {
      std::printf("  rank %d: %llu tasks, sent %.1f MiB, received %.1f MiB, busy %.3f s, idle %.3f s\n",
                  s.rank, static_cast<unsigned long long>(s.tasks_executed),
                  static_cast<double>(s.bytes_sent) / (1 << 20),
                  static_cast<double>(s.bytes_received) / (1 << 20), s.busy_seconds, s.idle_seconds);
    }
    if (verified) {
      std::printf("  verification: %s (residual %.3e)\n", *verified ? "passed" : "FAILED", residual);
    }
  }
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
  if (!options.report_path.empty()) {
    std::ofstream out(options.report_path, std::ios::app);
    out << j.dump() << '\n' << std::flush;
    if (!out) std::fprintf(stderr, "%s: warning: could not append the report to %s\n", app.c_str(),
                           options.report_path.c_str());
  }
}

}  // namespace bellows::examples
