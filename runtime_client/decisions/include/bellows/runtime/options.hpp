#pragma once
// Runtime configuration.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace bellows::runtime {

/// Which device runs the task bodies of a rank.
enum class DeviceKind {
  cpu,       ///< CPU worker threads run execute_cpu
  cuda,      ///< a CUDA GPU runs execute_cuda through stage-in / execute / stage-out queues
  emulated,  ///< charges each task flops / rate seconds without computing
  hybrid,    ///< CPU workers and the emulated device; each ready task goes where it is
             ///< predicted to finish first, data movement included (DeviceChoice)
};

[[nodiscard]] std::string_view to_string(DeviceKind kind) noexcept;
/// Parses "cpu", "cuda", "emulated" or "hybrid"; returns false on anything else.
[[nodiscard]] bool parse_device_kind(std::string_view text, DeviceKind& out) noexcept;

/// How a starving rank picks the rank it asks for work (John & Milthorpe,
/// "Elasticity in a Task-based Dataflow Runtime Through Inter-node GPU Work Stealing",
/// CCGrid 2024, section IV-A).
enum class VictimPolicy {
  random,       ///< a random other rank every time
  last_victim,  ///< the last rank that gave work, else random; victims forward likewise
};

[[nodiscard]] std::string_view to_string(VictimPolicy policy) noexcept;
/// Parses "random" or "last-victim"; returns false on anything else.
[[nodiscard]] bool parse_victim_policy(std::string_view text, VictimPolicy& out) noexcept;

/// Inter-rank work stealing (John & Milthorpe (CCGrid 2024), section IV). Every parameter
/// lives here; the examples set them from their command line, the YAML policy will set them
/// later.
struct StealOptions {
  bool enabled = false;
  /// Tasks a thief asks for in one request; with cost_rule, one where a typical task runs no
  /// longer than moving this many of its tiles (StealPolicy::tasks_to_ask).
  int chunk = 4;
  /// Times a request may be forwarded, on the thief's behalf, to another victim.
  int max_hops = 2;
  /// A device starves when its ready tasks drop below this; a victim never gives away
  /// so many tasks that its own device would drop below it. With both thresholds 0 a
  /// rank never starves, so it never asks (it still gives).
  int device_threshold = 1;
  /// A rank (node) starves when the ready tasks of all its devices together drop
  /// below this.
  int node_threshold = 1;
  VictimPolicy policy = VictimPolicy::last_victim;
  /// Seeds the random victim choice (mixed with the rank).
  unsigned seed = 1;
  /// Pause of a thief after a request came back empty, doubled up to max_backoff_us.
  int min_backoff_us = 50;
  int max_backoff_us = 2000;
  /// Longest sleep of the communication thread of a rank that has tasks to spare, so
  /// that steal requests are answered quickly, when some peer cannot ring this rank's
  /// doorbell (see same_host_transport); with doorbells a request wakes it at once.
  int victim_poll_us = 50;
  /// Steal only when it pays, by the measured costs of CostModel (cost_model.hpp): a
  /// victim gives a task only when the thief is predicted to finish it (inputs fetched,
  /// outputs returned) before the victim would have started it and the gift shortens the
  /// longer of the two ranks' remaining work; a thief asks only when it expects to idle
  /// longer than a round trip (StealPolicy::choose_gifts, should_ask). Off: any task a
  /// victim can spare goes, as in John & Milthorpe.
  bool cost_rule = true;
  /// What one victim's handling of a steal request costs the machine, us (waking its
  /// communication thread, pricing its queue, answering): 40 us, as measured on 8 ranks on
  /// 2 cores (communication-thread CPU with requests against without, per request
  /// handled). Under cost_rule a thief whose requests bring less task time than they cost
  /// their victims backs off longer (StealPolicy::request_answered).
  int request_visit_cost_us = 40;
};

/// Returns an empty string when the options are usable, else what is wrong with them.
[[nodiscard]] std::string validate(const StealOptions& options);

/// Proactive offloading (OffloadPolicy, offload_policy.hpp): at the start of an iteration,
/// from the costs measured in the previous ones, ranks predicted to finish late push the
/// tasks of some of their tiles to ranks predicted to finish early; reactive stealing (when
/// on) evens out what the prediction missed.
struct OffloadOptions {
  bool enabled = false;
  /// No push unless (max L - mean L) / mean L exceeds this, L the ranks' predicted work:
  /// below it the measured speeds differ by noise more than by load, and the moves would
  /// only cost transfers.
  double min_imbalance = 0.05;
  /// No push unless the busiest rank's predicted work is at least this share of the previous
  /// iteration's time: when an iteration takes much longer than its busiest rank's work, what
  /// holds it back is not where the work is (messages, transfers, a host shared by ranks),
  /// and moving work would only add transfers.
  double min_compute_share = 0.5;
};

/// Returns an empty string when the options are usable, else what is wrong with them.
[[nodiscard]] std::string validate(const OffloadOptions& options);

/// A rank whose emulated device slows down part-way through a job, as under a noisy
/// neighbour: from iteration `from_iteration` on (the first is 1), rank `rank` takes
/// `factor` times its modeled time for every task. For experiments on an imbalance that
/// changes between iterations. rank -1: none.
struct EmulatedSlowdown {
  int rank = -1;
  int from_iteration = 1;
  double factor = 1.0;
};

/// Buddy checkpoints (docs/recovery.md, "Recovery"): at an iteration boundary each rank keeps
/// its collections' tiles and sends a copy to its buddy, a rank on another node
/// (buddies.hpp), which keeps it in memory. When: every `every_iterations` boundaries, or
/// by Young/Daly's interval (checkpoint_interval.hpp) from the measured cost of the last
/// checkpoint, the measured iteration time and `node_mean_time_between_failures_seconds`;
/// always at the first boundary and at the first after a resize. Must be the same on every
/// rank.
struct CheckpointOptions {
  bool enabled = false;
  /// A node's mean time between failures, seconds (the policy's
  /// recovery.node_mean_time_between_failures; its default, 8760 h).
  double node_mean_time_between_failures_seconds = 8760.0 * 3600.0;
  /// A checkpoint every this many iterations instead of Young/Daly's interval; 0: Young/Daly.
  long every_iterations = 0;
  /// The node this rank runs on, which buddies must differ in; empty: the environment's
  /// BELLOWS_NODE (set for ranks that nodes' daemons start), else the host name (uname).
  std::string node;
};

/// Returns an empty string when the options are usable, else what is wrong with them.
[[nodiscard]] std::string validate(const CheckpointOptions& options);

/// Team-based message logging (Meneses, Kale and Bronevetsky, "Dynamic Load Balance for
/// Optimized Message Logging in Fault Tolerant HPC Applications", section III; docs/teams.md):
/// ranks are grouped into teams, and a tile sent to a rank of another team stays in the
/// sender's log until the next complete checkpoint; tiles sent within a team are not logged.
/// Needs `checkpoint.enabled` (the log is released by checkpoints). Must be the same on every
/// rank.
struct MessageLogOptions {
  bool enabled = false;
  /// Ranks per team, consecutive ranks together (team r / team_size; the last team smaller
  /// when it does not divide the ranks): 1 logs every message between ranks, the job's rank
  /// count (or more) makes one team, which logs nothing. 0: one team of every rank.
  int team_size = 0;
  /// When not empty, the team of each rank (a plan's TeamPlan::rank_team), used instead of
  /// team_size while the job has exactly this many ranks; after a resize the teams are
  /// consecutive ranks of the plan's largest team size.
  std::vector<int> rank_team;
  /// Stealing across teams (StealOptions::enabled): off, a rank asks and forwards requests
  /// within its team only and gives nothing to a thief of another team, so a replay runs the
  /// same tasks on the same ranks; on, a task given to a thief of another team is logged by
  /// the victim as a determinant (which task ran where).
  bool steal_across_teams = false;
  /// TeamLB between iterations (bellows/runtime/teams.hpp, plan_teams): after the first
  /// iteration, and after the first following each resize or recovery, the teams of
  /// `team_size` ranks (0: one team) and the tiles' places inside each team are chosen from
  /// the task graph's traffic and the compute seconds measured for each tile's tasks;
  /// the tile moves are carried out at the start of the next iteration, which takes a fresh
  /// checkpoint under the new teams; later, planned again where it pays (`replan`).
  /// `rank_team` is then ignored.
  bool plan_teams = false;
  /// With plan_teams: a tile weighs the median of its measured seconds over the last
  /// `load_window` iterations (TileLoadHistory, team_load.hpp), >= 1. The first plan after an
  /// attach weighs the one iteration it follows; the history starts again after each plan.
  int load_window = 5;
  /// With plan_teams: at a boundary that takes a checkpoint, once `load_window` iterations
  /// were weighed since the last plan, TeamLB plans again and takes the new teams only when
  /// the heaviest rank's predicted seconds fall by more than `replan_min_gain` (a fraction,
  /// finite and >= 0) and the cut stays within its bound (replan_decision, team_load.hpp).
  bool replan = true;
  double replan_min_gain = 0.10;
  /// After a team roll-back, a rank re-running an iteration of the replay sends its task
  /// outputs to the ranks that kept their state too, which drop them as copies they hold
  /// (team_replay.hpp, ReceivedVersions). Off (the default), the sender leaves those sends
  /// out, since it knows which ranks replay: the receiver's check is the guarantee, and this
  /// switch lets a test exercise it.
  bool replay_to_ranks_kept = false;
};

/// Returns an empty string when the options are usable, else what is wrong with them.
[[nodiscard]] std::string validate(const MessageLogOptions& options);

struct RuntimeOptions {
  DeviceKind device = DeviceKind::cpu;
  /// CPU worker threads per rank (devices cpu and hybrid).
  int cpu_workers = 1;
  /// Modeled speed of the emulated device, GFLOP/s.
  double emulated_gflops = 1000.0;
  /// Tasks the emulated device runs at once (streams of a GPU).
  int emulated_lanes = 1;
  /// The emulated device also runs each task's CPU body, then waits out the rest of the
  /// task's modeled time: a node of a stated speed whose results are exact. The modeled
  /// speed must stay below what the host computes for the rank, or tasks take longer: a
  /// task then reports as its compute seconds its body's wall seconds, not the modeled ones.
  bool emulated_compute = false;
  /// Host <-> device link of the emulated device (devices emulated and hybrid), GB/s
  /// (1e9 bytes per second); 0: a free link, no data movement charged. The device keeps
  /// track of which tiles are in its memory: a task there first moves in the inputs it
  /// does not hold, a tile it writes stays there, and a tile needed on the host (by a CPU
  /// worker, another rank or a collection) comes back over the link. Transfers use the
  /// link one at a time. kLinkOfDevice (the default): 12 GB/s, about what PCIe 3.0 x16
  /// sustains, in hybrid mode, where the choice of device weighs it; a free link for the
  /// emulated device alone, so that a GPU-speed rank is its rate alone unless a link is named.
  /// emulated_link_of(options) gives the rate the device charges.
  static constexpr double kLinkOfDevice = -1.0;
  static constexpr double kHybridLinkGbps = 12.0;
  double emulated_link_gbps = kLinkOfDevice;
  /// Fixed cost of one transfer over that link, microseconds.
  double emulated_link_latency_us = 10.0;
  /// GPUs the rank drives (devices emulated, hybrid and cuda), 1 to Tile::kMaxDevices: that
  /// many emulated GPUs, each with emulated_lanes lanes and a host link of its own, or the
  /// CUDA GPUs of ordinals cuda_device, cuda_device + 1, ...; 0: every CUDA GPU the process
  /// sees (CUDA_VISIBLE_DEVICES), one for the emulated device. Each ready task goes to the GPU
  /// predicted to finish it first, counting the tiles it would have to copy there, and to
  /// the GPU that holds a tile whose only valid copy is on a GPU (device_choice.hpp). Stealing
  /// sees the rank's GPUs as one node: a steal request goes out when the tasks ready on all of
  /// them fall below the threshold.
  int gpus = 1;
  /// CUDA device ordinal (device cuda) of the rank's first GPU.
  int cuda_device = 0;
  /// Device cuda: pin the tile buffers' shared slabs (cudaHostRegister) so that the copies
  /// to and from the GPU run at the link's rate instead of through the driver's staging
  /// buffer. Pinned memory stays resident for the life of the process.
  bool cuda_pinned_tiles = true;
  /// Device cuda: the most bytes of tiles no task in flight uses that stay in GPU memory
  /// between the tasks of an iteration (DeviceTileCache): a tile read is copied in once for
  /// all its readers, and a tile written stays for the next task that reads or updates it; a
  /// written tile is copied back to the host only when it leaves the GPU (another rank or a
  /// collection needs it). 0: every task copies all its tiles in and every written tile
  /// back. Per rank; emptied at the end of each iteration.
  std::size_t cuda_tile_cache_bytes = std::size_t{2} << 30;
  /// Device cuda: streams that run tasks' kernels side by side, each with its own cuBLAS and
  /// cuSOLVER handles and workspace, so that tasks too small to fill the GPU alone fill it
  /// together (copies in and out have a stream each besides). At least 1.
  int cuda_streams = 4;
  /// When not empty, every rank appends its trace (JSON lines) to this file.
  std::string trace_path;
  /// Longest sleep of the communication thread when nothing happens, microseconds.
  int comm_max_sleep_us = 200;
  /// A tile of at most this many bytes that goes to another rank travels in its activation
  /// (wire::Activate::tile_bytes): the consumer takes it from the message and answers
  /// nothing, so a small cross-rank dependency costs one control message instead of an
  /// activation and its fetch or Fetched answer (PaRSEC's short-limit payload,
  /// comm_short_limit). Larger tiles, and every tile when 0, follow the handshake. Each rank
  /// decides for the tiles it sends, so ranks may differ. At most kMaxEagerTileBytes.
  std::size_t eager_tile_bytes = 4096;
  /// After a pass of its loop that did something (a message sent or received, a tile
  /// delivered), the communication thread polls for this many microseconds more before it
  /// sleeps, so that the next message of a chain of dependencies finds it awake instead of
  /// paying a wake-up (PaRSEC's comm_yield). 0: it sleeps as soon as nothing is to do. At
  /// most kMaxCommPollUs.
  int comm_poll_us = 0;
  /// A task that a message made ready is run by the communication thread that handled the
  /// message, instead of a worker it would wake, when every CPU worker sleeps and tasks lately
  /// took at most this many microseconds (task_on_arrival.hpp): one thread wake-up less on the
  /// path of a cross-rank dependency. 0: always a worker. At most kMaxCommThreadTaskUs.
  int comm_thread_task_us = 50;
  /// Between ranks on one host: doorbells that wake an idle communication thread, and
  /// tiles read straight from the producer's memory (process_vm_readv) instead of
  /// MPI's polled shared-memory rendezvous. Probed at start; pairs where it does not
  /// work use MPI alone. Must be the same on every rank.
  bool same_host_transport = true;
  /// With the same-host transport, in jobs of at most 32 ranks: a worker that finishes a task
  /// whose consumer is on a rank of the same host writes the activation into that rank's
  /// mailbox in shared memory and rings its doorbell itself, when the tile travels in the
  /// activation (eager_tile_bytes) or is a control token. Its own communication thread is
  /// not woken and MPI is not called: one thread wake-up less per cross-rank dependency.
  /// Off, or when the mailbox is full, the communication thread sends it through MPI. Each
  /// rank decides for what it sends, so ranks may differ.
  bool same_host_mailboxes = true;
  /// With same_host_mailboxes: the CPU workers read their rank's mailboxes themselves, between
  /// tasks and, when no task is ready, for worker_poll_us before they sleep; while one is
  /// awake a peer that posts mail rings nobody, and the activation is delivered and its task
  /// run on the worker with no thread woken on either side. Only an activation that arrives
  /// while every worker sleeps rings the communication thread, as without this. A worker never
  /// calls MPI (MPI_THREAD_SERIALIZED is enough). While a worker runs a task, mail waits until
  /// the task ends. The folding of the communication thread's progress into an idle worker
  /// follows PaRSEC's, whose execution streams call remote_dep_progress when the runtime runs
  /// without its communication thread (`__parsec_context_wait`, parsec/scheduling.c). On by
  /// default: METG(50 %) of the 3-dependency stencil on 2 ranks falls from 12-13 us to 2 us
  /// and dense GEMM and Cholesky do not change (docs/benchmarks.md, "Task overhead: METG").
  /// Off: only the communication thread reads the mailboxes, rung for every message.
  bool workers_read_mail = true;
  /// With workers_read_mail: microseconds a worker that finds no ready task keeps polling the
  /// mailboxes (yielding its core between looks) before it sleeps. 0: it looks once and
  /// sleeps. At most kMaxWorkerPollUs.
  int worker_poll_us = 0;
  /// Re-grids at a resize (regrid.hpp): every tile, and with it the tasks it decides,
  /// goes where a job started at the new size would hold it, with the grid's positions
  /// given to the ranks that already hold most of their tiles. The iterations after the
  /// resize then read and move what such a job would. Off:
  /// new ranks get work by stealing only, what they steal is pinned to them for good (the
  /// override table), and each leaver's tiles go to one backup, as in John & Milthorpe
  /// (CCGrid 2024), section V.
  /// Must be the same on every rank.
  bool rebalance_on_resize = true;
  StealOptions steal;
  /// Must be the same on every rank.
  OffloadOptions offload;
  /// Devices emulated and hybrid; the factor must be positive.
  EmulatedSlowdown emulated_slowdown;
  /// Must be the same on every rank (the node excepted).
  CheckpointOptions checkpoint;
  /// Must be the same on every rank.
  MessageLogOptions message_log;
};

/// The largest RuntimeOptions::eager_tile_bytes: a control message stays small.
inline constexpr std::size_t kMaxEagerTileBytes = 65536;
/// The largest RuntimeOptions::comm_poll_us: a poll that long is a spin, not a pause.
inline constexpr int kMaxCommPollUs = 1000;

/// The largest RuntimeOptions::comm_thread_task_us: a longer task keeps messages waiting.
inline constexpr int kMaxCommThreadTaskUs = 1000;
/// The largest RuntimeOptions::worker_poll_us: a poll that long is a spin, not a pause.
inline constexpr int kMaxWorkerPollUs = 1000;

/// What is wrong with the communication options eager_tile_bytes, comm_poll_us,
/// comm_thread_task_us and worker_poll_us, naming the option and the value; empty: nothing.
[[nodiscard]] std::string validate_communication(const RuntimeOptions& options);

/// The link rate the emulated device charges, GB/s: `emulated_link_gbps` as named, or for
/// kLinkOfDevice kHybridLinkGbps in hybrid mode and 0 (free) otherwise.
[[nodiscard]] double emulated_link_of(const RuntimeOptions& options) noexcept;

}  // namespace bellows::runtime
