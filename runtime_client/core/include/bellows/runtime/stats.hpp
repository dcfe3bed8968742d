#pragma once
// Per-rank statistics of the runtime.

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "bellows/runtime/cost_model.hpp"
#include "bellows/runtime/tile.hpp"

namespace bellows::runtime {

/// Work-stealing counters of one rank (John & Milthorpe,
/// "Elasticity in a Task-based Dataflow Runtime Through Inter-node GPU Work Stealing",
/// CCGrid 2024, section IV). A rank is a thief for the
/// requests it starts and a victim for those that reach it.
struct StealStats {
  std::uint64_t requests_sent = 0;       ///< thief: requests started
  std::uint64_t requests_failed = 0;     ///< thief: requests answered without any task
  std::uint64_t requests_received = 0;   ///< victim: requests that reached this rank
  std::uint64_t requests_served = 0;     ///< victim: requests this rank gave tasks to
  std::uint64_t requests_forwarded = 0;  ///< victim: requests passed on to another victim
  std::uint64_t tasks_stolen = 0;        ///< thief: tasks received
  std::uint64_t tasks_given = 0;         ///< victim: tasks handed to thieves
  std::uint64_t bytes_stolen = 0;        ///< thief: input bytes fetched for stolen tasks
  /// victim: tasks the thresholds let go but the cost rule kept (StealOptions::cost_rule)
  std::uint64_t tasks_refused = 0;
  /// victim: requests it gave nothing to although it had tasks to spare (the cost rule)
  std::uint64_t requests_refused = 0;
  /// thief: iterations in which the rank, its own tasks run and no request able to pay
  /// (StealPolicy::asking_pays) or thresholds of 0, stopped asking and entered the
  /// end-of-iteration barrier without waiting to hear that every rank was done
  std::uint64_t iterations_retired = 0;
  /// victim: invitations to steal it sent while its work drifted past the iteration's plan
  /// (proactive offloading: wire::StealInvitation)
  std::uint64_t invitations_sent = 0;
  /// thief: invitations it answered with a request
  std::uint64_t invitations_answered = 0;
  std::uint64_t max_hops_seen = 0;       ///< most forwards of a request that reached here
  std::uint64_t max_outstanding = 0;     ///< most requests this rank had in flight at once
  /// Fewest ready tasks a victim kept right after giving some away; -1: never gave.
  std::int64_t min_ready_after_serve = -1;
  /// Thief: seconds from sending a request to its complete answer, one per request,
  /// and how many times each was forwarded (a request forwarded h times visited h + 1
  /// victims one after the other).
  std::vector<double> round_trip_seconds;
  std::vector<int> round_trip_forwards;

  void add(const StealStats& other);
};

/// Buddy checkpoints of one rank (RuntimeOptions::checkpoint). The own copy shares the
/// collections' tiles (a task that writes a collection tile replaces it), so it costs no
/// memory until the tiles change; the copies held for wards are memory of their own.
struct CheckpointStats {
  std::uint64_t checkpoints = 0;     ///< checkpoints taken (own copy kept, copy sent)
  std::uint64_t tiles_sent = 0;      ///< tiles sent to the buddy
  /// Tiles the buddy's copy of the previous checkpoint already held (unchanged since; sent
  /// as empty messages)
  std::uint64_t tiles_unchanged = 0;
  std::uint64_t bytes_sent = 0;      ///< likewise, bytes
  std::uint64_t bytes_received = 0;  ///< bytes of wards' tiles received
  /// Bytes of wards' copies held after the latest iteration (a gauge: add() keeps the newer).
  std::uint64_t bytes_held = 0;
  /// At the boundaries: keeping the own copy and posting the transfers (in the iteration's
  /// time, before its tasks start).
  double post_seconds = 0.0;
  /// At the ends of the iterations that carried the transfers: waiting for what had not
  /// completed while the tasks ran.
  double wait_seconds = 0.0;
  /// The interval in force after the latest iteration, in iterations (a gauge; 0: none yet).
  long interval_iterations = 0;

  void add(const CheckpointStats& other);
};

/// Team-based message logging of one rank (RuntimeOptions::message_log, docs/teams.md): the
/// tiles it sent to ranks of other teams, kept until a complete checkpoint releases them.
struct MessageLogStats {
  std::uint64_t messages_logged = 0;    ///< tiles sent to another team, kept in the log
  std::uint64_t bytes_logged = 0;       ///< likewise, bytes
  std::uint64_t messages_in_team = 0;   ///< tiles sent to a rank of the own team, not logged
  std::uint64_t bytes_in_team = 0;      ///< likewise, bytes
  /// Tasks this rank gave to a thief of another team, logged as determinants (which task ran
  /// where; MessageLogOptions::steal_across_teams).
  std::uint64_t determinants_logged = 0;
  std::uint64_t messages_released = 0;  ///< entries a complete checkpoint released
  std::uint64_t bytes_released = 0;
  /// What the log holds after the latest iteration (gauges: add() keeps the newer).
  std::uint64_t entries_held = 0;
  std::uint64_t bytes_held = 0;
  /// The most bytes the log held after any iteration.
  std::uint64_t peak_bytes_held = 0;
  /// After a team roll-back, on a rank that kept its state: the bytes of its log it served to
  /// the ranks re-running the iterations since the checkpoint (the replay).
  std::uint64_t bytes_replayed = 0;
  /// Activations this rank received again and dropped: copies of task outputs it already
  /// held (same producer, output slot and iteration), which a rank re-running an iteration of
  /// a replay sent once more (team_replay.hpp, ReceivedVersions).
  std::uint64_t copies_dropped = 0;
  /// Time this rank spent in the log's own work (steady clock, one pair of reads per
  /// operation): recording a tile sent or a determinant, trimming the log after a checkpoint,
  /// taking the iteration's statistics and keeping the collection tiles as an iteration starts.
  /// The log holds references to tiles, never copies: a task that later writes a tile still
  /// held copies it first (copy on write), which is charged to the task, not counted here.
  double seconds = 0.0;
  /// Bytes held after each iteration, in order (add() appends).
  std::vector<double> bytes_held_by_iteration;
  void add(const MessageLogStats& other);
};

/// Memory of one rank (a process) during its iterations: page faults, and the tile buffer pool
/// (tile_pool.hpp), from the iteration's start to the end of its tasks and checkpoint
/// transfers. Counts that the host's load cannot move, unlike times: what holding tiles longer
/// (the message log, docs/teams.md) does to memory shows here.
struct MemoryStats {
  /// Minor page faults of the whole process (every thread: getrusage RUSAGE_SELF ru_minflt),
  /// pages populated at once for a fresh tile buffer (MADV_POPULATE_WRITE) and first reads
  /// through a mapping of a peer's tile slab included.
  std::uint64_t minor_page_faults = 0;
  /// Tile buffers the pool handed out from those it cached, pages resident (no page taken).
  std::uint64_t tile_buffers_reused = 0;
  /// Tile buffers that took fresh pages (zeroed by the kernel): new space in a slab, a buffer
  /// whose pages had gone back to the system, or a plain allocation.
  std::uint64_t tile_buffers_fresh = 0;
  std::uint64_t tile_bytes_fresh = 0;  ///< likewise, bytes
  /// The most bytes of tile buffers in use at once in any iteration (the pool's high-water
  /// mark of buffers handed out; a gauge: add() keeps the larger).
  std::uint64_t peak_tile_bytes_in_use = 0;
  /// Bytes the pool held, in use and cached, after the latest iteration (a gauge: add() keeps
  /// the newer).
  std::uint64_t tile_pool_bytes = 0;
  /// Per iteration, in order (add() appends): minor page faults, fresh tile buffers and the
  /// most tile bytes in use at once.
  std::vector<double> minor_page_faults_by_iteration;
  std::vector<double> tile_buffers_fresh_by_iteration;
  std::vector<double> peak_tile_bytes_in_use_by_iteration;
  void add(const MemoryStats& other);
};

/// A rank's devices: up to Tile::kMaxDevices GPUs and the CPU workers.
inline constexpr std::size_t kMaxDevicesPerRank = Tile::kMaxDevices + 1;

struct RankStats {
  int rank = 0;
  std::string host;  ///< the rank's host name (uname), as gather_stats() found it
  std::map<std::string, std::uint64_t> tasks_by_class;  ///< tasks executed on this rank
  std::uint64_t tasks_executed = 0;
  /// Of tasks_executed: those of iterations that re-ran an iteration completed before a loss
  /// (after Runtime::recover() rolled back past it): the work the loss made this rank redo.
  std::uint64_t tasks_rerun = 0;
  std::uint64_t bytes_sent = 0;         ///< tile payloads sent
  std::uint64_t bytes_received = 0;     ///< tile payloads received
  /// The part of bytes_sent / bytes_received that moved by single-copy reads between ranks of
  /// one node (the same-host transport); the rest went through MPI.
  std::uint64_t bytes_sent_same_host = 0;
  std::uint64_t bytes_received_same_host = 0;
  /// The part of bytes_sent / bytes_received carried in activations themselves (tiles of at
  /// most RuntimeOptions::eager_tile_bytes); it went through MPI.
  std::uint64_t bytes_sent_in_activations = 0;
  std::uint64_t bytes_received_in_activations = 0;
  std::uint64_t messages_sent = 0;      ///< control messages sent
  std::uint64_t messages_received = 0;  ///< control messages received
  /// Of messages_sent: activations a worker wrote into a same-host peer's mailbox itself
  /// (RuntimeOptions::same_host_mailboxes); the rest went through MPI.
  std::uint64_t activations_by_mailbox = 0;
  /// Of messages_received: activations a worker read from a mailbox itself, the communication
  /// thread not woken (RuntimeOptions::workers_read_mail); the rest it read.
  std::uint64_t activations_read_by_workers = 0;
  /// Of tasks_executed: those the communication thread ran itself, a message having made them
  /// ready while every worker slept (RuntimeOptions::comm_thread_task_us).
  std::uint64_t tasks_on_comm_thread = 0;
  double busy_seconds = 0.0;            ///< summed over the rank's execution units
  double idle_seconds = 0.0;            ///< execution units waiting for a ready task
  double modeled_seconds = 0.0;         ///< emulated device: sum of flops / rate
  /// Tasks the emulated or the CUDA device ran (device hybrid: the rest ran on CPU workers).
  std::uint64_t tasks_on_device = 0;
  /// Tasks each of the rank's devices ran: its GPUs in order (RuntimeOptions::gpus), then the
  /// CPU workers of hybrid mode; with DeviceKind::cpu, the CPU workers at index 0.
  std::array<std::uint64_t, kMaxDevicesPerRank> tasks_by_device{};
  /// Bytes moved between host and device memory, both ways: over the emulated device's link
  /// (modeled), or copied to and from the GPU (device cuda).
  std::uint64_t link_bytes = 0;
  /// Bytes of tiles a task copied before writing them (copy on write) because another holder
  /// still referenced them: the message log, the tiles kept as an iteration started, a
  /// checkpoint or a send in flight (CPU workers and the emulated device computing).
  std::uint64_t copy_on_write_bytes = 0;
  double flops = 0.0;                   ///< flops of the tasks executed here
  double comm_cpu_seconds = 0.0;        ///< CPU time of the communication and copy threads
  /// Proactive offloading (RuntimeOptions::offload): tasks of this rank that the plans of
  /// the iterations sent to other ranks, and tasks of other ranks they sent here.
  std::uint64_t tasks_offloaded = 0;
  std::uint64_t tasks_offloaded_here = 0;
  /// Iterations whose plan the first rank held back because a plan had cost more than it
  /// brought (OffloadFeedback; counted on the first rank only).
  std::uint64_t offload_plans_held_back = 0;
  StealStats steal;
  CheckpointStats checkpoint;
  MessageLogStats message_log;
  MemoryStats memory;
  /// The cost model at the end of the latest iteration (a gauge: add() keeps the newer one).
  CostSummary cost;
  /// Mean number of ready tasks waiting on this rank, sampled at each task completion of
  /// one iteration (a gauge: add() leaves it alone, and the JSON report does not carry it).
  double ready_tasks_mean = 0.0;

  void add(const RankStats& other);
};

void to_json(nlohmann::json& j, const StealStats& s);
void to_json(nlohmann::json& j, const CheckpointStats& s);
void to_json(nlohmann::json& j, const MessageLogStats& s);
void to_json(nlohmann::json& j, const MemoryStats& s);
void to_json(nlohmann::json& j, const RankStats& s);
void to_json(nlohmann::json& j, const CostSummary& s);

/// The q-quantile (0 <= q <= 1, nearest rank) of values; 0 when empty.
double quantile(std::vector<double> values, double q);

/// What one iteration did on this rank.
struct IterationReport {
  /// 1 for the job's first iteration, then 2, ... (a rank added by an expand continues
  /// the job's count, so that its trace lines name the same iterations as the others').
  int iteration = 0;
  int ranks = 0;
  double seconds = 0.0;       ///< wall time, barrier to barrier (same on every rank)
  double total_flops = 0.0;   ///< summed over all ranks
  /// The share of the iteration the devices spent computing, per lane: the largest over
  /// the ranks and their mean (the cost rule's weights, docs/runtime.md).
  double busiest_compute_share = 0.0;
  double mean_compute_share = 0.0;
  RankStats local;            ///< this rank's share of the iteration
  /// When this rank's first task of the iteration started, as std::chrono::steady_clock
  /// nanoseconds since its epoch (comparable between processes of one host); 0: none.
  std::int64_t first_task_steady_ns = 0;
  /// When the iteration started on this rank (after the barrier that starts it), on the
  /// same clock: the origin of the trace's "t" for this iteration.
  std::int64_t start_steady_ns = 0;
  /// Empty when the iteration completed. Otherwise it was abandoned because these ranks
  /// (numbers in the communicator it ran on, ascending) died: this rank stopped its devices,
  /// dropped the iteration's pending work and messages, and trusted none of its collectives.
  /// Its tiles are then as the abandoned iteration left them, and `seconds`, `total_flops`
  /// and the shares are not measured; Runtime::recover() carries on without the lost ranks.
  std::vector<int> lost_ranks;
  /// Empty when every rank ran the iteration. After a recovery that rolled back only the
  /// teams that lost a rank (RecoveryReport::ranks_rolled_back), the iterations those teams
  /// re-run alone, fed by the other teams' logs, name here the ranks that re-ran it (numbers
  /// in the communicator it ran on, ascending). A rank not named kept its state and ran no
  /// task: the application must leave its tiles as they are (ran_here() is false), since for
  /// it the iteration had run before the loss.
  std::vector<int> replaying_ranks;

  /// False when this rank kept its state while other teams replayed the iteration
  /// (replaying_ranks): its tiles did not change and must not be evolved.
  [[nodiscard]] bool ran_here() const noexcept {
    return replaying_ranks.empty() ||
           std::binary_search(replaying_ranks.begin(), replaying_ranks.end(), local.rank);
  }
  /// False when the iteration was abandoned because ranks were lost (lost_ranks).
  [[nodiscard]] bool completed() const noexcept { return lost_ranks.empty(); }
  [[nodiscard]] double gflops() const noexcept {
    return seconds > 0.0 ? total_flops / seconds * 1e-9 : 0.0;
  }
};

}  // namespace bellows::runtime
