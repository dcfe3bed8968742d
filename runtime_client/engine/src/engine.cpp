// The engine's core: construction (devices, cost priors, checkpoints), attaching to a
// communicator and the collective steps of an expand or shrink, registering task classes and
// collections, the cost measurements, and a task's life from instantiation through its
// inputs' arrival and placement on a device to its completion and successors' activation.
// The iteration around them is engine_iteration.cpp's.

#include "engine.hpp"
#include "peer_watch.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "bellows/protocol/job_directory.hpp"
#include "bellows/runtime/message_logging.hpp"
#include "bellows/runtime/task_on_arrival.hpp"
#include "comm_engine.hpp"
#include "rank_set_text.hpp"
#include "same_host.hpp"
#include "watched_setup.hpp"

namespace bellows::runtime {

std::string node_of(const CheckpointOptions& options) {
  if (!options.node.empty()) return options.node;
  if (const char* node = std::getenv(protocol::job_environment::kNode); node != nullptr && *node != '\0') {
    return node;
  }
  return host_name();
}

namespace {

/// How many GPUs a rank of `options` drives (RuntimeOptions::gpus, 0 resolved); 0 with
/// DeviceKind::cpu. Throws std::invalid_argument when the count is out of range.
std::size_t gpus_of(const RuntimeOptions& options) {
  if (options.device == DeviceKind::cpu) return 0;
  int gpus = options.gpus;
  if (gpus == 0) {
    gpus = options.device == DeviceKind::cuda ? visible_cuda_devices() - options.cuda_device : 1;
    if (gpus < 1) {
      throw std::invalid_argument("gpus 0 (every visible GPU): no CUDA GPU is visible from ordinal " +
                                  std::to_string(options.cuda_device) + " on");
    }
  }
  if (gpus < 1 || static_cast<std::size_t>(gpus) > Tile::kMaxDevices) {
    throw std::invalid_argument("gpus must be 0 (every visible GPU) or 1 to " +
                                std::to_string(Tile::kMaxDevices) + ", got " + std::to_string(options.gpus));
  }
  return static_cast<std::size_t>(gpus);
}

}  // namespace

std::string Engine::describe(const TaskClass& cls, const TaskKey& key) {
  return std::string(cls.name()) + "(" + std::to_string(key.index[0]) + "," +
         std::to_string(key.index[1]) + "," + std::to_string(key.index[2]) + ")";
}

Engine::Engine(MPI_Comm comm, RuntimeOptions options) : options_(std::move(options)) {
  const bool emulated =
      options_.device == DeviceKind::emulated || options_.device == DeviceKind::hybrid;
  if (emulated && !(options_.emulated_gflops > 0.0)) {
    throw std::invalid_argument("emulated device rate must be positive, got " +
                                std::to_string(options_.emulated_gflops) + " GFLOP/s");
  }
  if (!(options_.emulated_slowdown.factor > 0.0)) {
    throw std::invalid_argument("emulated slowdown factor must be positive, got " +
                                std::to_string(options_.emulated_slowdown.factor));
  }
  if (const auto problem = validate_communication(options_); !problem.empty()) {
    throw std::invalid_argument(problem);
  }
  if (const auto problem = validate(options_.steal); !problem.empty()) {
    throw std::invalid_argument(problem);
  }
  if (const auto problem = validate(options_.offload); !problem.empty()) {
    throw std::invalid_argument(problem);
  }
  if (const auto problem = validate(options_.message_log); !problem.empty()) {
    throw std::invalid_argument(problem);
  }
  if (options_.message_log.enabled && !options_.checkpoint.enabled) {
    throw std::invalid_argument("message log: needs checkpoints (RuntimeOptions::checkpoint): "
                                "a complete checkpoint is what releases the log");
  }
  options_.emulated_link_gbps = emulated_link_of(options_);
  if (emulated && !(options_.emulated_link_gbps >= 0.0 && options_.emulated_link_latency_us >= 0.0)) {
    throw std::invalid_argument("emulated link rate and latency must not be negative, got " +
                                std::to_string(options_.emulated_link_gbps) + " GB/s and " +
                                std::to_string(options_.emulated_link_latency_us) + " us");
  }
  gpus_ = gpus_of(options_);
  if (emulated) {
    link_ = std::make_shared<EmulatedLink>(options_.emulated_link_gbps,
                                           options_.emulated_link_latency_us * 1e-6);
  }
  switch (options_.device) {
    case DeviceKind::cpu: devices_.push_back(make_cpu_device(*this, options_.cpu_workers)); break;
    case DeviceKind::emulated:
    case DeviceKind::hybrid:
      for (std::size_t g = 0; g < gpus_; ++g) {
        // Each GPU has a host link of its own, like link_ (a PCIe slot each).
        auto link = g == 0 ? link_ : std::make_shared<EmulatedLink>(options_.emulated_link_gbps,
                                                                      options_.emulated_link_latency_us * 1e-6);
        devices_.push_back(make_emulated_device(*this, options_.emulated_gflops, options_.emulated_lanes,
                                                options_.emulated_compute, std::move(link), g));
      }
      if (options_.device == DeviceKind::hybrid) {
        devices_.push_back(make_cpu_device(*this, options_.cpu_workers, gpus_, link_));
      }
      break;
    case DeviceKind::cuda:
      for (std::size_t g = 0; g < gpus_; ++g) {
        devices_.push_back(make_cuda_device(*this, options_.cuda_device + static_cast<int>(g), options_, g));
      }
      break;
  }
  for (std::size_t d = 0; d < devices_.size(); ++d) {
    device_costs_.emplace_back(device_cost_priors(options_, d));
  }
  backlog_seconds_.assign(devices_.size(), 0.0);
  checkpoints_ = std::make_unique<BuddyCheckpoints>(options_.checkpoint, node_of(options_.checkpoint));
  // Duplicated only once nothing above can throw, so the duplicate is never leaked.
  lost_in_attach_ = attach(comm);
}

std::vector<int> Engine::attach(MPI_Comm comm) {
  // Ranks get here at different times (a resize, new ranks starting): wait asleep. On a rank
  // an expand adds a member may be lost here (the expand is then given up: join_expansion),
  // so every collective is watched, as expand_onto's are, with errors returned (on
  // MPI_COMM_WORLD too, as in an iteration). The duplicate takes `comm`'s own handler.
  WatchedSetup setup(comm);
  if (!setup.lost_in_duplicate().empty()) return setup.lost_in_duplicate();
  MPI_Comm duplicate = setup.duplicate();
  PeerWatch& watch = setup.watch();
  const auto given_up = [&](std::vector<int> lost) {
    // The duplicate is freed, never disconnected (it holds the dead).
    comm_engine_.reset();
    watch_.reset();
    setup.restore_duplicate_errhandler();
    MPI_Comm_free(&duplicate);
    comm_ = MPI_COMM_NULL;
    return lost;
  };
  try {
    use_communicator(duplicate, &watch);
  } catch (const MembersLost& e) {
    return given_up(e.lost());
  }
  auto nodes = checkpoints_->post_node_gather(comm_);
  if (nodes->request != MPI_REQUEST_NULL) {
    if (auto lost = completed_watched(MPI_SUCCESS, nodes->request, watch, "MPI_Iallgather"); !lost.empty()) {
      keep_until_exit(std::move(nodes));
      return given_up(std::move(lost));
    }
  }
  checkpoints_->attach(comm_, nodes->nodes());  // new buddies; a checkpoint at the next boundary
  return {};
}

void Engine::use_communicator(MPI_Comm duplicate, PeerWatch* setup_watch, MessageLogTeams log_teams) {
  comm_ = duplicate;
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  watch_ = std::make_unique<PeerWatch>(comm_, rank_, size_);
  // Teams for the new rank count (the CommEngine confines stealing to them); the entries
  // logged before are forgotten, as the resize forgets the checkpoints they were kept for.
  if (log_teams == MessageLogTeams::now) attach_message_log();
  iterations_since_attach_ = 0;
  teams_planned_ = false;
  task_seconds_by_iteration_.clear();  // of tiles on other ranks, or of other ranks
  comm_engine_ = std::make_unique<CommEngine>(*this, comm_, options_.comm_max_sleep_us,
                                              options_.same_host_transport, setup_watch);
  // The trace and the statistics name this rank by its number in the new communicator.
  if (!options_.trace_path.empty()) trace_ = std::make_unique<Trace>(options_.trace_path, rank_);
  total_stats_.rank = rank_;
  local_tasks_known_ = false;  // the task total is summed over the new communicator
}

void Engine::attach_message_log() {
  if (!options_.message_log.enabled) return;
  message_log_.attach(resolve_teams(options_.message_log, size_), rank_);
  checkpoints_->set_teams(message_log_.rank_team());  // buddies inside the teams
}

void Engine::attach_shrunk(MPI_Comm survivors) {
  if (comm_ != MPI_COMM_NULL) {
    throw std::logic_error("attach_shrunk without prepare_shrink");
  }
  if (const std::vector<int> lost = attach(survivors); !lost.empty()) {
    throw std::runtime_error("attach_shrunk: ranks " + rank_set_text(lost) +
                             " of the survivors' communicator were lost while the runtime attached to it");
  }
}

Engine::~Engine() {
  devices_.clear();
  comm_engine_.reset();
  watch_.reset();
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void Engine::restore_checkpoint(long iteration, std::span<const CheckpointSource> sources) {
  if (comm_ == MPI_COMM_NULL) {
    throw std::logic_error("restore_checkpoint on a runtime that is between the halves of a "
                           "shrink or has left the job");
  }
  checkpoints_->restore(iteration, sources, collections_);
}

void Engine::add_task_class(std::unique_ptr<TaskClass> task_class) {
  if (!task_class) throw std::invalid_argument("add_task_class: null task class");
  if (task_class->id() == kReservedTaskClassId) {
    throw std::invalid_argument("task class '" + std::string(task_class->name()) + "' uses id " +
                                std::to_string(kReservedTaskClassId) +
                                ", which the wire protocol reserves");
  }
  if (task_class->id() != classes_.size()) {
    throw std::invalid_argument("task class '" + std::string(task_class->name()) + "' has id " +
                                std::to_string(task_class->id()) + " but " +
                                std::to_string(classes_.size()) + " classes were added before it");
  }
  class_names_.emplace_back(task_class->name());
  classes_.push_back(std::move(task_class));
  local_tasks_known_ = false;
  task_graph_.reset();
}

void Engine::add_collection(TiledMatrix& collection) {
  if (collection.id() != collections_.size()) {
    throw std::invalid_argument("collection has id " + std::to_string(collection.id()) + " but " +
                                std::to_string(collections_.size()) +
                                " collections were added before it");
  }
  // A rank that joined an expanded job got the placements in join_expansion.
  const auto id = collections_.size();
  if (id < joined_placements_.size() &&
      (!joined_placements_[id].empty() || !joined_tile_owners_[id].empty())) {
    collection.set_mapping(joined_placements_[id], joined_tile_owners_[id], rank_);
  }
  check_fits(collection);
  collections_.push_back(&collection);
}

const TaskClass& Engine::task_class(TaskClassId id) const {
  if (id >= classes_.size()) {
    throw std::out_of_range("unknown task class id " + std::to_string(id));
  }
  return *classes_[id];
}

TiledMatrix& Engine::collection(CollectionId id) const {
  if (id >= collections_.size()) {
    throw std::out_of_range("unknown collection id " + std::to_string(id));
  }
  return *collections_[id];
}

int Engine::rank_of(const TaskKey& key) const {
  if (!pinned_.empty()) {
    if (const auto it = pinned_.find(key); it != pinned_.end()) return it->second;
  }
  const auto& cls = task_class(key.task_class);
  const int owner = cls.owner(key);
  if (owner < 0 || owner >= size_) {
    throw std::out_of_range("task " + describe(cls, key) + " maps to rank " +
                            std::to_string(owner) + " outside a communicator of " +
                            std::to_string(size_));
  }
  return owner;
}

std::size_t Engine::ready_count() const {
  std::size_t count = 0;
  for (const auto& d : devices_) count += d->ready_count();
  return count;
}

double Engine::iteration_clock() const { return seconds_between(iteration_start_, Clock::now()); }

void Engine::check_fits(const TiledMatrix& collection) const {
  for (int g = 0; g < collection.distribution().size(); ++g) {
    const int holder = collection.placement().empty()
                           ? g
                           : collection.placement()[static_cast<std::size_t>(g)];
    if (holder < 0 || holder >= size_) {
      throw std::invalid_argument("collection " + std::to_string(collection.id()) +
                                  " is distributed over " +
                                  std::to_string(collection.distribution().size()) +
                                  " ranks but the communicator has " + std::to_string(size_));
    }
  }
}

bool Engine::prepare_local_tasks() {
  for (const auto* c : collections_) check_fits(*c);
  local_roots_.clear();
  local_task_count_ = 0;
  local_flops_ = 0.0;
  local_by_priority_.clear();
  std::vector<InputSource> specs;
  // While other teams replay an iteration this rank kept, it runs none of its tasks.
  const bool runs_tasks = !team_replay_ || team_replay_->here || !replaying(iteration_ + 1);
  for (const auto& cls : classes_) {
    if (!runs_tasks) break;
    cls->for_each_task([&](const TaskKey& key) {
      if (rank_of(key) != rank_) return;
      ++local_task_count_;
      local_flops_ += cls->flops(key);
      local_by_priority_[cls->priority(key)].add_task(cls->flops(key));
      specs.clear();
      cls->inputs(key, specs);
      bool has_predecessor = false;
      for (const auto& s : specs) has_predecessor = has_predecessor || s.from_predecessor();
      if (!has_predecessor) local_roots_.push_back(key);
    });
  }
  // Buffers of their own: a reduction a lost peer leaves pending stays MPI's until exit.
  auto counts = std::make_unique<std::array<std::int64_t, 2>>();
  (*counts)[0] = local_task_count_;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Iallreduce(&(*counts)[0], &(*counts)[1], 1, MPI_INT64_T, MPI_SUM, comm_, &request);
  if (!wait_watching_peers(std::span<MPI_Request>(&request, 1))) {
    static std::vector<std::unique_ptr<std::array<std::int64_t, 2>>> left_pending;
    left_pending.push_back(std::move(counts));
    return false;
  }
  total_task_count_ = (*counts)[1];
  local_tasks_known_ = true;
  return true;
}

bool Engine::wait_watching_peers(std::span<MPI_Request> requests) {
  for (;;) {
    int done = 0;
    const int rc = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (rc == MPI_SUCCESS && done) return true;
    watch_->poll();
    if (!watch_->lost().empty()) return false;
    if (rc != MPI_SUCCESS) {
      // A transfer with a peer that died can fail before the watch sees the death.
      if (wait_for_loss_verdict(*watch_, Clock::now(), kLossGrace) == LossVerdict::report_lost) return false;
      throw std::runtime_error("rank " + std::to_string(rank_) + ": " + describe_mpi_error(rc) +
                               " between iterations, and no peer was found lost within " +
                               loss_verdict_limit_text() + " (neither by this rank's watch nor by the control plane)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

bool Engine::starving() const {
  return StealPolicy::starving(options_.steal, ready_count());
}

bool Engine::has_tasks_to_spare() const {
  return StealPolicy::has_tasks_to_spare(options_.steal, ready_count());
}

void Engine::ready_task_taken() {
  if (first_task_steady_ns_.load(std::memory_order_relaxed) == 0) {
    std::int64_t none = 0;
    first_task_steady_ns_.compare_exchange_strong(
        none, std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
  }
  if (!stealing() || !roots_queued()) return;
  if (starving()) comm_engine_->notify_starving();
}

void Engine::record_migration(const TaskKey& key, int rank) {
  std::lock_guard lock(migrations_mutex_);
  migrations_[key] = rank;
}

std::unordered_map<TaskKey, int> Engine::migrations() const {
  std::lock_guard lock(migrations_mutex_);
  return migrations_;
}

void Engine::leaves_remaining_work(std::int64_t priority, double flops) {
  std::lock_guard lock(priority_mutex_);
  const auto it = remaining_by_priority_.find(priority);
  if (it == remaining_by_priority_.end()) return;  // not counted (e.g. before the iteration)
  it->second.tasks -= 1;
  it->second.flops -= flops;
  if (it->second.tasks <= 0) remaining_by_priority_.erase(it);
}

void Engine::task_measured(TaskClassId task_class, double flops, double seconds) {
  std::lock_guard lock(cost_mutex_);
  cost_model_.task_ran(task_class, flops, seconds);
}

void Engine::device_task_measured(std::size_t index, const TaskKey& key, double flops,
                                  double compute_seconds) {
  std::lock_guard lock(cost_mutex_);
  compute_seconds_this_iteration_ += compute_seconds;
  flops_this_iteration_ += flops;
  ++tasks_measured_this_iteration_;
  if (index < device_costs_.size()) device_costs_[index].task_ran(key.task_class, flops, compute_seconds);
  if (measuring_task_seconds_) task_seconds_this_iteration_[key] += compute_seconds;
}

void Engine::transfer_measured(int peer, std::uint64_t bytes, double seconds) {
  std::lock_guard lock(cost_mutex_);
  cost_model_.transfer_done(peer, bytes, seconds);
}

void Engine::round_trip_measured(double seconds) {
  std::lock_guard lock(cost_mutex_);
  cost_model_.round_trip_done(seconds);
}

double Engine::remaining_work_seconds() const {
  const auto tasks = static_cast<double>(std::max<std::int64_t>(local_remaining_.load(), 0));
  const double flops = std::max(remaining_flops_.load(std::memory_order_relaxed), 0.0);
  std::lock_guard lock(cost_mutex_);
  return cost_model_.work_seconds(tasks, flops) / static_cast<double>(lanes());
}

double Engine::round_trip_seconds() const {
  std::lock_guard lock(cost_mutex_);
  return cost_model_.round_trip_seconds();
}

std::optional<double> Engine::recent_task_seconds() const {
  std::lock_guard lock(cost_mutex_);
  return cost_model_.recent_task_seconds();
}

double Engine::transfer_seconds(int peer, std::uint64_t bytes) const {
  std::lock_guard lock(cost_mutex_);
  return cost_model_.transfer_seconds(peer, bytes);
}

std::pair<double, double> Engine::compute_shares() const {
  std::lock_guard lock(cost_mutex_);
  return {busiest_compute_share_, mean_compute_share_};
}

CostSummary Engine::cost_summary() const {
  std::lock_guard lock(cost_mutex_);
  return cost_model_.summary();
}

int Engine::lanes() const noexcept {
  switch (options_.device) {
    case DeviceKind::cpu: return std::max(options_.cpu_workers, 1);
    case DeviceKind::emulated: return std::max(options_.emulated_lanes, 1) * static_cast<int>(gpus_);
    case DeviceKind::hybrid:
      return std::max(options_.emulated_lanes, 1) * static_cast<int>(gpus_) + std::max(options_.cpu_workers, 1);
    case DeviceKind::cuda: return static_cast<int>(gpus_);
  }
  return 1;
}

void Engine::adopt_stolen(const TaskKey& key) {
  const auto& cls = task_class(key.task_class);
  std::vector<InputSource> specs;
  cls.inputs(key, specs);
  if (specs.size() > 32) {
    throw std::length_error("stolen task " + describe(cls, key) + " has " +
                            std::to_string(specs.size()) + " input slots; at most 32 are supported");
  }
  record_migration(key, rank_);
  {
    std::lock_guard lock(migrations_mutex_);
    stolen_this_iteration_.push_back(key);
  }
  {
    std::lock_guard priority_lock(priority_mutex_);
    remaining_by_priority_[cls.priority(key)].add_task(cls.flops(key));
  }
  remaining_flops_.fetch_add(cls.flops(key), std::memory_order_relaxed);
  local_remaining_.fetch_add(1, std::memory_order_acq_rel);
  std::unique_lock lock(mutex_);
  auto [it, inserted] = pending_.try_emplace(key);
  if (!inserted) {
    throw std::logic_error("stolen task " + describe(cls, key) + " is already pending on rank " +
                           std::to_string(rank_));
  }
  PendingTask& p = it->second;
  p.migrated = true;
  p.tiles.resize(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto& spec = specs[i];
    if (spec.access == Access::read_write) p.writable |= 1U << i;
    if (spec.kind == InputSource::Kind::control) p.control |= 1U << i;
    if (spec.kind == InputSource::Kind::scratch) {
      p.tiles[i] = std::make_shared<Tile>(spec.rows, spec.cols);
      p.tiles[i]->set_residency(Tile::kEverywhere);  // contents undefined
    } else {
      ++p.missing;  // sent by the victim: a tile to fetch, or a control token
    }
  }
  if (p.missing == 0) {
    PendingTask ready = std::move(p);
    pending_.erase(it);
    lock.unlock();
    make_ready(key, std::move(ready));
  }
}

Engine::PendingTask& Engine::instantiate(const TaskKey& key, std::vector<TileIndex>& fetches) {
  const auto& cls = task_class(key.task_class);
  thread_local std::vector<InputSource> specs;
  specs.clear();
  cls.inputs(key, specs);
  if (specs.size() > 32) {
    throw std::length_error("task " + describe(cls, key) + " has " + std::to_string(specs.size()) +
                            " input slots; at most 32 are supported");
  }
  auto [it, inserted] = pending_.try_emplace(key);
  PendingTask& p = it->second;
  p.tiles.resize(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto& s = specs[i];
    if (s.access == Access::read_write) p.writable |= 1U << i;
    if (s.kind == InputSource::Kind::control) p.control |= 1U << i;
    switch (s.kind) {
      case InputSource::Kind::collection: {
        auto& coll = collection(s.tile.collection);
        if (coll.owner(s.tile.m, s.tile.n) == rank_) {
          p.tiles[i] = coll.tile(s.tile.m, s.tile.n);
          break;
        }
        auto& entry = cache_[s.tile];
        if (entry.tile) {
          p.tiles[i] = entry.tile;
        } else {
          if (entry.waiters.empty()) fetches.push_back(s.tile);
          entry.waiters.emplace_back(key, static_cast<int>(i));
          ++p.missing;
        }
        break;
      }
      case InputSource::Kind::scratch:
        p.tiles[i] = std::make_shared<Tile>(s.rows, s.cols);
        p.tiles[i]->set_residency(Tile::kEverywhere);  // contents undefined
        break;
      case InputSource::Kind::task:
      case InputSource::Kind::control:
        ++p.missing;
        break;
    }
  }
  return p;
}

void Engine::make_ready(const TaskKey& key, PendingTask&& pending) {
  if (abandoning_.load(std::memory_order_acquire)) return;  // a peer was lost: no new work
  auto task = std::make_unique<ReadyTask>();
  const auto& cls = task_class(key.task_class);
  task->key = key;
  task->task_class = &cls;
  task->tiles = std::move(pending.tiles);
  task->writable = pending.writable;
  task->priority = cls.priority(key);
  task->flops = cls.flops(key);
  task->sequence = sequence_.fetch_add(1, std::memory_order_relaxed);
  // A stolen task, or one pinned to a new rank, is never stolen (again); an offloaded one
  // may be, when the prediction that sent it here was wrong.
  task->migrated = pending.migrated || (!pinned_.empty() && pinned_.count(key) != 0 &&
                                        offloaded_.count(key) == 0);
  // The emulated link charges the outputs that leave the device; the CUDA device copies back
  // only those.
  if (link_ || options_.device == DeviceKind::cuda) mark_leaving_slots(*task);
  if (devices_.size() == 1 && message_handler_.load(std::memory_order_relaxed) == std::this_thread::get_id()) {
    TaskOnArrival facts;
    facts.device = options_.device;
    facts.workers = options_.cpu_workers;
    facts.sleeping_workers = devices_[0]->sleeping_units();
    facts.limit_seconds = options_.comm_thread_task_us * 1e-6;
    facts.holding = held_for_comm_thread_ != nullptr;
    if (facts.limit_seconds > 0.0 && !facts.holding && facts.sleeping_workers >= facts.workers) {
      facts.recent_task_seconds = recent_task_seconds();
    }
    if (comm_thread_runs_it(facts)) {
      held_for_comm_thread_ = std::move(task);
      return;
    }
  }
  const std::size_t d = devices_.size() > 1 ? place(*task) : 0;
  devices_[d]->push(std::move(task));
  if (trace_) trace_->sample(iteration_clock(), ready_count(), completed_this_iteration_.load());
}

void Engine::mark_leaving_slots(ReadyTask& task) const {
  thread_local std::vector<Successor> successors;
  task.leaving = 0;
  task.to_other_ranks = 0;
  for (std::size_t slot = 0; slot < task.tiles.size(); ++slot) {
    if (!task.tiles[slot]) continue;
    successors.clear();
    task.task_class->successors(task.key, static_cast<int>(slot), successors);
    for (const auto& s : successors) {
      const int dest = s.kind == Successor::Kind::collection
                           ? collection(s.tile.collection).owner(s.tile.m, s.tile.n)
                           : rank_of(s.consumer);
      if (s.kind == Successor::Kind::collection || dest != rank_) task.leaving |= 1U << slot;
      if (dest != rank_) task.to_other_ranks |= 1U << slot;
    }
  }
}

std::size_t Engine::place(ReadyTask& task) {
  // The CUDA device has no modeled link: the H100 node's measured host <-> GPU rate
  // (docs/gpu-node.md: 52-54 GB/s for tiles of 2-8 MiB) stands for it.
  constexpr double kCudaLinkGbps = 50.0;
  constexpr double kCudaLinkLatencySeconds = 10e-6;
  thread_local std::vector<TileUse> uses;
  thread_local std::vector<std::uint8_t> residencies;
  thread_local std::vector<Choice> per_gpu;
  uses.clear();
  residencies.clear();
  int required_gpu = -1;
  for (std::size_t slot = 0; slot < task.tiles.size(); ++slot) {
    const TilePtr& tile = task.tiles[slot];
    if (!tile || tile->elements() == 0) continue;
    const auto where = tile->residency();
    TileUse u;
    u.bytes = tile->bytes();
    u.on_host = (where & Tile::kOnHost) != 0;
    u.written = (task.writable >> slot & 1U) != 0;
    u.leaves = (task.leaving >> slot & 1U) != 0;
    uses.push_back(u);
    residencies.push_back(where);
    if (!u.on_host && required_gpu < 0) {
      for (std::size_t g = 0; g < gpus_; ++g) {
        if (where & Tile::on_device(g)) {
          required_gpu = static_cast<int>(g);
          break;
        }
      }
    }
  }
  ChoiceInput in;
  in.tiles = uses;
  in.link_seconds_per_byte = link_ ? link_->seconds_per_byte() : 1.0 / (kCudaLinkGbps * 1e9);
  in.link_latency_seconds = link_ ? link_->latency_seconds() : kCudaLinkLatencySeconds;
  const bool hybrid = options_.device == DeviceKind::hybrid;
  const double gpu_lanes = options_.device == DeviceKind::cuda ? 1.0 : std::max(options_.emulated_lanes, 1);
  const double cpu_lanes = std::max(options_.cpu_workers, 1);
  std::lock_guard lock(cost_mutex_);
  if (hybrid) {
    in.cpu_compute_seconds = device_costs_[gpus_].task_seconds(task.key.task_class, task.flops);
    in.cpu_backlog_seconds = std::max(backlog_seconds_[gpus_], 0.0) / cpu_lanes;
  } else {
    in.cpu_compute_seconds = std::numeric_limits<double>::infinity();  // no CPU place
  }
  per_gpu.clear();
  for (std::size_t g = 0; g < gpus_; ++g) {
    for (std::size_t i = 0; i < uses.size(); ++i) uses[i].on_device = (residencies[i] & Tile::on_device(g)) != 0;
    in.device_compute_seconds = device_costs_[g].task_seconds(task.key.task_class, task.flops);
    in.device_backlog_seconds = std::max(backlog_seconds_[g], 0.0) / gpu_lanes;
    per_gpu.push_back(DeviceChoice::choose(in));
  }
  const std::size_t gpu = DeviceChoice::first_to_finish({per_gpu, required_gpu});
  const Choice& choice = per_gpu[gpu];
  const bool on_gpu = !hybrid || choice.place == Place::device;
  const std::size_t d = on_gpu ? gpu : gpus_;
  task.device_index = d;
  task.predicted_seconds = on_gpu ? choice.device_cost_seconds : choice.cpu_cost_seconds;
  backlog_seconds_[d] += task.predicted_seconds;
  return d;
}

void Engine::request_fetches(const std::vector<TileIndex>& fetches) {
  for (const auto& index : fetches) {
    const auto& coll = collection(index.collection);
    comm_engine_->fetch_collection_tile(index, coll.owner(index.m, index.n),
                                        coll.rows_of_tile(index.m), coll.cols_of_tile(index.n));
  }
}

TilePtr Engine::tile_to_serve(const TileIndex& index, int peer) {
  if (team_replay_ && !team_replay_->here && replaying(iteration_)) {
    const auto kept = team_replay_->logged_tiles.find(std::make_tuple(index.collection, index.m, index.n,
                                                                       static_cast<long>(iteration_)));
    if (kept == team_replay_->logged_tiles.end()) {
      throw std::out_of_range("tile (" + std::to_string(index.m) + ", " + std::to_string(index.n) +
                              ") of collection " + std::to_string(index.collection) +
                              " is not in this rank's log for iteration " + std::to_string(iteration_) +
                              ", which rank " + std::to_string(peer) + " re-runs");
    }
    bytes_replayed_.fetch_add(kept->second->bytes(), std::memory_order_relaxed);
    return kept->second;
  }
  TilePtr tile = collection(index.collection).tile(index.m, index.n);  // throws when not local
  if (options_.message_log.enabled) message_log_.collection_tile_sent(iteration_, index, peer, tile);
  return tile;
}

bool Engine::first_receipt(const TaskKey& producer, int slot, long version) {
  if (received_versions_.first_receipt(MessageVersion{false, producer.task_class, producer.index, slot, version})) {
    return true;
  }
  copies_dropped_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void Engine::deliver(const TaskKey& key, int slot, TilePtr tile) {
  thread_local std::vector<TileIndex> fetches;
  fetches.clear();
  std::unique_lock lock(mutex_);
  auto it = pending_.find(key);
  PendingTask& p = (it == pending_.end()) ? instantiate(key, fetches) : it->second;
  if (slot < 0 || static_cast<std::size_t>(slot) >= p.tiles.size()) {
    throw std::out_of_range("input delivered to slot " + std::to_string(slot) + " of task " +
                            describe(task_class(key.task_class), key) + " which has " +
                            std::to_string(p.tiles.size()) + " slots");
  }
  if (p.missing <= 0) {
    throw std::logic_error("task " + describe(task_class(key.task_class), key) +
                           " received more inputs than it has predecessors (slot " +
                           std::to_string(slot) + ")");
  }
  // A control slot stays empty whatever the producer's slot carried.
  if (!(p.control >> slot & 1U)) p.tiles[static_cast<std::size_t>(slot)] = std::move(tile);
  if (--p.missing == 0) {
    PendingTask ready = std::move(p);
    pending_.erase(key);
    lock.unlock();
    make_ready(key, std::move(ready));
  } else {
    lock.unlock();
  }
  request_fetches(fetches);
}

void Engine::set_handling_messages(bool handling) noexcept {
  message_handler_.store(handling ? std::this_thread::get_id() : std::thread::id{}, std::memory_order_relaxed);
}

bool Engine::run_held_task() {
  if (!held_for_comm_thread_) return false;
  auto task = std::move(held_for_comm_thread_);
  if (abandoning_.load(std::memory_order_acquire)) return false;  // a peer was lost: no new work
  if (!devices_[0]->run_on_caller(task)) {
    devices_[0]->push(std::move(task));  // not a device whose tasks this thread can run
  }
  return true;
}

void Engine::unit_awake(bool awake) {
  if (comm_engine_) comm_engine_->worker_awake(awake);
}

void Engine::take_arrivals() {
  if (comm_engine_) comm_engine_->read_mail_between_tasks();
}

bool Engine::take_arrivals_while_idle(const std::function<bool()>& woken) {
  if (!comm_engine_) return true;
  return comm_engine_->read_mail_while_idle(woken);
}

void Engine::collection_tile_arrived(const TileIndex& index, TilePtr tile) {
  std::vector<std::pair<TaskKey, PendingTask>> ready;
  {
    std::lock_guard lock(mutex_);
    auto& entry = cache_[index];
    entry.tile = std::move(tile);
    for (const auto& [key, slot] : entry.waiters) {
      auto it = pending_.find(key);
      if (it == pending_.end()) {
        throw std::logic_error("collection tile arrived for a task that is not pending");
      }
      it->second.tiles[static_cast<std::size_t>(slot)] = entry.tile;
      if (--it->second.missing == 0) {
        ready.emplace_back(key, std::move(it->second));
        pending_.erase(it);
      }
    }
    entry.waiters.clear();
  }
  for (auto& [key, p] : ready) make_ready(key, std::move(p));
}

void Engine::write_back(const TileIndex& index, TilePtr tile) {
  collection(index.collection).set_tile(index.m, index.n, std::move(tile));
}

void Engine::complete(std::unique_ptr<ReadyTask> task) {
  thread_local std::vector<Successor> successors;
  thread_local std::vector<std::pair<TaskKey, int>> local;
  thread_local std::vector<std::pair<int, std::vector<wire::Target>>> remote;
  const auto& cls = *task->task_class;
  const double flops = task->flops;
  const std::int64_t priority = task->priority;
  // A task without inputs still has slot 0, which carries control tokens.
  const std::size_t slots = std::max<std::size_t>(task->tiles.size(), 1);
  for (std::size_t slot = 0; slot < slots; ++slot) {
    successors.clear();
    cls.successors(task->key, static_cast<int>(slot), successors);
    if (successors.empty()) continue;
    TilePtr tile = slot < task->tiles.size() ? std::move(task->tiles[slot]) : nullptr;
    local.clear();
    remote.clear();
    const auto remote_group = [&](int dest) -> std::vector<wire::Target>& {
      for (auto& [r, targets] : remote) {
        if (r == dest) return targets;
      }
      return remote.emplace_back(dest, std::vector<wire::Target>{}).second;
    };
    for (const auto& s : successors) {
      if (s.kind == Successor::Kind::task) {
        const int dest = rank_of(s.consumer);
        if (dest == rank_) {
          local.emplace_back(s.consumer, s.consumer_slot);
        } else {
          wire::Target t;
          t.consumer = s.consumer;
          t.slot = s.consumer_slot;
          remote_group(dest).push_back(t);
        }
      } else {
        const auto& coll = collection(s.tile.collection);
        const int dest = coll.owner(s.tile.m, s.tile.n);
        if (dest == rank_) {
          write_back(s.tile, tile);
        } else {
          wire::Target t;
          t.to_collection = true;
          t.tile = s.tile;
          remote_group(dest).push_back(t);
        }
      }
    }
    // With logging between teams an activation names its producer and version, so that a
    // receiver recognises a copy it holds (first_receipt).
    std::optional<wire::Producer> named;
    if (message_log_.active()) {
      named = wire::Producer{task->key, static_cast<std::uint8_t>(slot), static_cast<std::uint32_t>(iteration_)};
    }
    for (auto& [dest, targets] : remote) {
      // While the teams that rolled back replay, a rank that kept its state runs no task and
      // received this output before the loss: it is not sent again (it would drop the copy).
      if (replaying(iteration_) && !options_.message_log.replay_to_ranks_kept &&
          !std::binary_search(team_replay_->replaying.begin(), team_replay_->replaying.end(), dest)) {
        continue;
      }
      if (options_.message_log.enabled) {
        message_log_.task_tile_sent(iteration_, task->key, static_cast<int>(slot), dest, tile);
      }
      comm_engine_->send_activation(dest, tile, std::move(targets), named);
    }
    for (std::size_t i = 0; i < local.size(); ++i) {
      deliver(local[i].first, local[i].second, i + 1 == local.size() ? std::move(tile) : tile);
    }
  }
  if (devices_.size() > 1) {
    std::lock_guard lock(cost_mutex_);
    backlog_seconds_[task->device_index] -= task->predicted_seconds;
  }
  task.reset();
  // Counted before the remaining work drops: whoever sees no work left also sees the count.
  completed_unreported_.fetch_add(1, std::memory_order_acq_rel);
  const auto completed = completed_this_iteration_.fetch_add(1, std::memory_order_relaxed) + 1;
  ready_samples_sum_.fetch_add(ready_count(), std::memory_order_relaxed);
  leaves_remaining_work(priority, flops);
  remaining_flops_.fetch_sub(flops, std::memory_order_relaxed);
  const auto remaining = local_remaining_.fetch_sub(1, std::memory_order_acq_rel) - 1;
  if (trace_) trace_->sample(iteration_clock(), ready_count(), completed);
  if (remaining == 0) comm_engine_->notify();
}

}  // namespace bellows::runtime
