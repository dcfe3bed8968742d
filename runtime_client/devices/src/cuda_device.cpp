// The CUDA device: a manager thread moves each task through the stages of John & Milthorpe,
// "Elasticity in a Task-based Dataflow Runtime Through Inter-node GPU Work Stealing",
// CCGrid 2024, section III-A: device queue -> stage-in (host to device copies) -> execution ->
// stage-out (device to host copies of written slots) -> epilogue (successors).
// The manager enqueues a task's three stages at once, and the GPU orders them with events:
// the copies in on the copy-in stream, the kernels on one of several execution streams
// (RuntimeOptions::cuda_streams) once the copies are done, the copies back on the copy-out
// stream once the kernels are. The manager only waits for a task's last event to retire it.
// So the copies of the next tasks of the device queue run while the execution streams compute
// (up to kInFlightPerStream tasks per stream are taken from the queue ahead), kernels of
// different tasks run side by side, and no thread stands between the stages. Only the device
// queue is visible to stealing. Device buffers come from a DeviceBufferPool and events from
// a free list: once an iteration's peak is reached, a task allocates nothing. Tiles stay in GPU memory between the tasks of an iteration
// (DeviceTileCache, device_tile_cache.hpp): a tile read is copied in once for all the tasks
// that read it, and a tile written is where the next task that reads or updates it starts
// from. A written tile goes back to the host only when it leaves the device
// (ReadyTask::leaving: another rank or a collection needs it); else its host copy is stale
// (Tile::residency without kOnHost) and the engine lets no thief take a task that reads it.
// A task whose outputs go back to the host only for this rank's collections is complete (its
// successors released) once its kernels are done: its copies back finish on their own, the
// tiles host-stale until then and their device copies kept from being written meanwhile
// (the iteration ends only when every copy back is done). Outputs bound for another rank are
// released only once on the host.
//
// With BELLOWS_CUDA_TIMELINE=FILE in the environment, each device appends one JSON line per
// task to FILE at the end of each iteration: its class, key and priority, and when (in ms from
// the iteration's start) the manager took it, enqueued its stages, its copies in and its
// kernels ended on the GPU, its copies back ended, and the manager completed it. It times every
// stage with CUDA events, so it is for finding where an iteration's time goes, not for runs
// whose speed is reported.

#include <utility>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <list>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>

#include "bellows/runtime/cuda_libraries.hpp"
#include "device.hpp"
#include "device_buffer_pool.hpp"
#include "device_tile_cache.hpp"
#include "tile_pool.hpp"
#include "trace.hpp"

namespace bellows::runtime {
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA device: ") + what + ": " + cudaGetErrorString(status));
  }
}

// tile_pool::PinSlab for the CUDA device: page-locks a slab for every CUDA context. Where
// the system refuses (RLIMIT_MEMLOCK, say), says so once; copies then stage through the driver.
bool pin_for_cuda(void* base, std::size_t bytes) {
  const cudaError_t status = cudaHostRegister(base, bytes, cudaHostRegisterPortable);
  if (status == cudaSuccess) return true;
  (void)cudaGetLastError();  // not a task's error
  static std::once_flag warned;
  std::call_once(warned, [&] {
    std::fprintf(stderr, "bellows: CUDA device: cannot pin tile memory (%s); copies to and from the "
                 "GPU go through the driver's staging buffer\n", cudaGetErrorString(status));
  });
  return false;
}

/// Whether the environment leaves a behaviour of the device on: unset, or anything but "0".
/// For measuring it against its absence in one run (docs/gpu-node.md).
bool switched_on(const char* variable) {
  const char* value = std::getenv(variable);
  return value == nullptr || std::string_view(value) != "0";
}

class CudaDevice final : public Device {
 public:
  CudaDevice(DeviceOwner& owner, int ordinal, const RuntimeOptions& options, std::size_t index)
      : Device(owner, index),
        ordinal_(ordinal),
        resident_(Tile::on_device(index)),
        // The rank's first GPU pins the tile memory for every GPU (cudaHostRegisterPortable).
        pin_tiles_(options.cuda_pinned_tiles && index == 0),
        timeline_path_(std::getenv("BELLOWS_CUDA_TIMELINE") != nullptr ? std::getenv("BELLOWS_CUDA_TIMELINE") : ""),
        // Only where every consumer of a host-stale tile runs on this GPU (see the file's
        // comment); BELLOWS_CUDA_EARLY_COMPLETION=0 turns it off.
        complete_early_(options.device == DeviceKind::cuda && options.gpus <= 1 &&
                        switched_on("BELLOWS_CUDA_EARLY_COMPLETION")),
        buffers_([this](std::size_t bytes) { return allocate(bytes); },
                 [this](void* device) { cudaFreeAsync(device, copy_in_stream_); }),
        cache_(options.cuda_tile_cache_bytes,
               [this](void* device, std::size_t bytes) { buffers_.give_back(device, bytes); }) {
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (ordinal < 0 || ordinal >= count) {
      throw std::runtime_error("CUDA device " + std::to_string(ordinal) + " requested but " +
                               std::to_string(count) + " GPUs are visible");
    }
    if (options.cuda_streams < 1) {
      throw std::runtime_error("CUDA device: cuda_streams must be 1 or more, got " +
                               std::to_string(options.cuda_streams));
    }
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    for (auto* s : {&copy_in_stream_, &copy_out_stream_}) {
      check(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    lanes_.resize(static_cast<std::size_t>(options.cuda_streams));
    for (Lane& lane : lanes_) open(lane);
    if (pin_tiles_) tile_pool::pin_slabs(&pin_for_cuda);
  }

  ~CudaDevice() override {
    stop();
    cudaSetDevice(ordinal_);
    cache_.clear();  // emptied by the manager already, unless it never ran
    buffers_.free_idle();
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    if (timeline_origin_ != nullptr) cudaEventDestroy(timeline_origin_);
    cudaStreamSynchronize(copy_in_stream_);
    if (pin_tiles_) tile_pool::pin_slabs(nullptr);
    for (Lane& lane : lanes_) close(lane);
    for (auto s : {copy_in_stream_, copy_out_stream_}) cudaStreamDestroy(s);
  }

  void start() override {
    reset_stop();
    manager_ = std::thread([this] { manage(); });
  }

  void stop() override {
    request_stop();
    if (manager_.joinable()) manager_.join();
  }

 private:
  /// An execution stream and what a task's kernels on it use.
  struct Lane {
    cudaStream_t stream = nullptr;
    cublasHandle_t cublas = nullptr;
    cusolverDnHandle_t cusolver = nullptr;
    void* workspace = nullptr;
    int* device_info = nullptr;
    std::size_t in_flight = 0;  ///< tasks whose kernels are or will be on this stream
  };
  /// Where a slot's device copy comes from, and where it goes when the task is done.
  enum class SlotCopy : std::uint8_t {
    none,         ///< no tile (a control slot)
    cached_read,  ///< read from the cache's copy: released back to it
    owned,        ///< this task's own buffer: given back, or kept by the cache once written
  };
  struct InFlight {
    std::unique_ptr<ReadyTask> task;
    std::vector<double*> device_tiles;
    std::vector<SlotCopy> copies;
    Lane* lane = nullptr;
    cudaEvent_t staged = nullptr;    ///< the copies in are done (null: the task had none)
    std::vector<const void*> filled;            ///< cache buffers its copies in fill
    std::vector<cudaEvent_t> fills_awaited;     ///< other tasks' copies in into tiles it reads
    cudaEvent_t executed = nullptr;  ///< the kernels are done
    cudaEvent_t done = nullptr;      ///< the copies back are done (null: none to do)
    std::vector<TilePtr> sources;    ///< versions the task's outputs replace, read by its copies in
    Clock::time_point started;
    Clock::time_point launched;      ///< its stages enqueued (timeline only)
    Clock::time_point copies_in_enqueued, kernels_enqueued;  ///< (timeline only)
    std::uint64_t copied_bytes = 0;  // host <-> device, both ways
    /// Completed once its kernels are done, before its copies back (see the file's comment).
    bool completes_early = false;
    bool completed = false;  ///< the engine has the task; only its copies back may be under way
    /// Written tiles whose copy back was under way when the task completed: host-stale until
    /// it ends. `buffer`: the task's own device buffer, given back then; null: the cache's
    /// copy, kept in use (never written nor evicted) until then.
    struct CopyBack {
      TilePtr tile;
      void* buffer = nullptr;
    };
    std::vector<CopyBack> copies_back;
    // What the timeline names, kept past the task's completion.
    TaskKey key{};
    std::int64_t priority = 0;
    std::string_view class_name;
    Clock::time_point completed_at;
    double staged_ms = -1.0, executed_ms = -1.0, copied_back_ms = -1.0;
  };

  static constexpr std::size_t kWorkspaceBytes = 64UL << 20;
  /// Tasks taken from the device queue per execution stream before the first of them is done:
  /// enough that the copies of the next ones run while a stream computes, few enough that the
  /// queue stays with the engine, where thieves and priorities see it.
  static constexpr std::size_t kInFlightPerStream = 3;
  /// When nothing it waits for is done, the manager yields its core this many times before
  /// it sleeps between polls: a task's successors become ready when it retires, so a sleep
  /// (about 60 us, with the kernel's timer slack) would sit on a Cholesky's critical path.
  static constexpr int kYieldingPolls = 256;
  static constexpr std::chrono::microseconds kPollInterval{20};

  void open(Lane& lane) {
    check(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    if (math_.create_cublas(&lane.cublas) != CUBLAS_STATUS_SUCCESS) {
      throw std::runtime_error("cublasCreate failed");
    }
    math_.cublas_set_stream(lane.cublas, lane.stream);
    if (math_.create_cusolver(&lane.cusolver) != CUSOLVER_STATUS_SUCCESS) {
      throw std::runtime_error("cusolverDnCreate failed");
    }
    math_.cusolver_set_stream(lane.cusolver, lane.stream);
    check(cudaMalloc(&lane.workspace, kWorkspaceBytes), "cudaMalloc(workspace)");
    check(cudaMalloc(&lane.device_info, sizeof(int)), "cudaMalloc(info)");
  }

  void close(Lane& lane) {
    cudaFree(lane.workspace);
    cudaFree(lane.device_info);
    if (lane.cusolver != nullptr) math_.destroy_cusolver(lane.cusolver);
    if (lane.cublas != nullptr) math_.destroy_cublas(lane.cublas);
    if (lane.stream != nullptr) cudaStreamDestroy(lane.stream);
  }

  /// DeviceBufferPool::Allocate: stream-ordered, so that it waits for no other work.
  void* allocate(std::size_t bytes) {
    void* device = nullptr;
    const cudaError_t status = cudaMallocAsync(&device, bytes, copy_in_stream_);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    check(status, "cudaMallocAsync");
    return device;
  }

  cudaEvent_t take_event() {
    if (!free_events_.empty()) {
      cudaEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, timeline() ? cudaEventDefault : cudaEventDisableTiming),
          "cudaEventCreate");
    return e;
  }

  [[nodiscard]] bool timeline() const noexcept { return !timeline_path_.empty(); }

  /// Milliseconds from the iteration's start on the GPU to the completed event `e`; -1 for none.
  double timeline_ms(cudaEvent_t e) {
    float ms = -1.0F;
    if (e != nullptr && cudaEventElapsedTime(&ms, timeline_origin_, e) != cudaSuccess) {
      (void)cudaGetLastError();
      ms = -1.0F;
    }
    return static_cast<double>(ms);
  }

  /// The timeline's line for a task whose last stage is done (BELLOWS_CUDA_TIMELINE).
  void record_timeline(const InFlight& f, Clock::time_point origin) {
    const auto host_ms = [&](Clock::time_point t) {
      return std::chrono::duration<double, std::milli>(t - origin).count();
    };
    const TaskKey& key = f.key;
    char line[512];
    std::snprintf(line, sizeof line,
                  "{\"gpu\":%d,\"class\":\"%s\",\"key\":[%d,%d,%d],\"priority\":%lld,"
                  "\"taken_ms\":%.4f,\"copies_in_enqueued_ms\":%.4f,\"kernels_enqueued_ms\":%.4f,\"enqueued_ms\":%.4f,\"staged_ms\":%.4f,\"executed_ms\":%.4f,"
                  "\"copied_back_ms\":%.4f,\"completed_ms\":%.4f,\"bytes_copied\":%llu}\n",
                  ordinal_, std::string(f.class_name).c_str(), key.index[0], key.index[1],
                  key.index[2], static_cast<long long>(f.priority), host_ms(f.started),
                  host_ms(f.copies_in_enqueued), host_ms(f.kernels_enqueued), host_ms(f.launched), f.staged_ms, f.executed_ms, f.copied_back_ms,
                  host_ms(f.completed_at), static_cast<unsigned long long>(f.copied_bytes));
    timeline_lines_ += line;
  }

  Lane& least_busy_lane() {
    Lane* best = &lanes_.front();
    for (Lane& lane : lanes_) {
      if (lane.in_flight < best->in_flight) best = &lane;
    }
    return *best;
  }

  [[nodiscard]] bool caching() const noexcept { return cache_.capacity_bytes() > 0; }
  static bool host_stale(const Tile& t) { return !(t.residency() & Tile::kOnHost); }
  /// Whether slot `i` of `task` goes through the cache: a tile with data, while caching.
  [[nodiscard]] bool cached_slot(const ReadyTask& task, std::size_t i) const {
    return caching() && task.tiles[i] && task.tiles[i]->elements() > 0;
  }

  /// Enqueues the task's three stages and returns it in flight.
  InFlight launch(std::unique_ptr<ReadyTask> task) {
    InFlight f;
    f.started = Clock::now();
    f.task = std::move(task);
    stage_in(f);
    if (timeline()) f.copies_in_enqueued = Clock::now();
    f.lane = &least_busy_lane();
    f.lane->in_flight += 1;
    f.key = f.task->key;
    f.priority = f.task->priority;
    f.class_name = f.task->task_class->name();
    // Its successors find its outputs in the cache while their host copies are stale.
    f.completes_early = complete_early_ && caching() && (f.task->to_other_ranks & f.task->writable) == 0;
    execute(f);
    if (timeline()) f.kernels_enqueued = Clock::now();
    stage_out(f);
    f.launched = Clock::now();
    return f;
  }

  void stage_in(InFlight& f) {
    ReadyTask& task = *f.task;
    const std::size_t slots = task.tiles.size();
    f.device_tiles.assign(slots, nullptr);
    f.copies.assign(slots, SlotCopy::none);
    bool copies_in = false;  // anything enqueued on the copy-in stream
    for (std::size_t i = 0; i < slots; ++i) {
      const TilePtr& t = task.tiles[i];
      if (!t) continue;
      const bool writes = task.writable >> i & 1U;
      if (writes && cached_slot(task, i)) {
        // The task updates the cache's copy in place when no one else needs that version;
        // else it writes a copy made on the GPU.
        f.device_tiles[i] = static_cast<double*>(cache_.take_for_writing(t.get()));
        if (!f.device_tiles[i]) {
          if (void* source = cache_.acquire(t.get())) {
            f.device_tiles[i] = static_cast<double*>(buffers_.take(t->bytes()));
            check(cudaMemcpyAsync(f.device_tiles[i], source, t->bytes(), cudaMemcpyDeviceToDevice,
                                  copy_in_stream_), "stage-in copy on the GPU");
            copies_in = true;
            // Given back, if evicted, to the pool, whose next taker starts on this stream.
            cache_.release(t.get());
          }
        }
        if (f.device_tiles[i]) f.copies[i] = SlotCopy::owned;
      } else if (!writes && cached_slot(task, i)) {
        if (void* d = cache_.acquire(t.get())) {
          f.device_tiles[i] = static_cast<double*>(d);
          f.copies[i] = SlotCopy::cached_read;
          // Copied in for a task still in flight: this one's kernels wait for that copy.
          if (const auto filling = filling_.find(d); filling != filling_.end()) {
            f.fills_awaited.push_back(filling->second);
          }
        }
      }
      if (!f.device_tiles[i]) {
        if (host_stale(*t)) throw std::logic_error("CUDA device: a host-stale tile is not in GPU memory");
        auto* d = static_cast<double*>(buffers_.take(t->bytes()));
        check(cudaMemcpyAsync(d, std::as_const(*t).data(), t->bytes(), cudaMemcpyHostToDevice, copy_in_stream_),
              "stage-in copy");
        copies_in = true;
        f.copied_bytes += t->bytes();
        f.device_tiles[i] = d;
        if (!writes && cached_slot(task, i)) {
          cache_.insert_in_use(t, d, t->bytes());
          f.filled.push_back(d);
          f.copies[i] = SlotCopy::cached_read;
        } else {
          f.copies[i] = SlotCopy::owned;
        }
      }
      if (writes && t.use_count() > 1) {
        // Someone else still references this version (copy on write, as
        // ReadyTask::make_writable_slots_exclusive does), but its contents are already on
        // their way to the GPU: the task's output is a new tile whose host contents only
        // the stage-out writes, not a clone of this one, which would copy the whole tile on
        // the host for nothing. The old version stays alive until the task retires, for the
        // copy in that reads it.
        f.sources.push_back(t);
        task.tiles[i] = std::make_shared<Tile>(t->rows(), t->cols());
      }
    }
    // A task that copies nothing in waits only for the copies of tiles it reads that other
    // tasks in flight copy in (fills_awaited), not behind every copy enqueued before it.
    if (!copies_in && precise_waits_) return;
    f.staged = take_event();
    check(cudaEventRecord(f.staged, copy_in_stream_), "cudaEventRecord");
    for (const void* d : f.filled) filling_[d] = f.staged;
  }

  void execute(InFlight& f) {
    Lane& lane = *f.lane;
    if (f.staged != nullptr) check(cudaStreamWaitEvent(lane.stream, f.staged, 0), "cudaStreamWaitEvent");
    for (cudaEvent_t e : f.fills_awaited) check(cudaStreamWaitEvent(lane.stream, e, 0), "cudaStreamWaitEvent");
    std::vector<Tile*> hosts;
    for (auto& t : f.task->tiles) hosts.push_back(t.get());
    CudaTaskContext ctx;
    ctx.stream = lane.stream;
    ctx.cublas = lane.cublas;
    ctx.cusolver = lane.cusolver;
    ctx.device_tiles = f.device_tiles;
    ctx.host_tiles = hosts;
    ctx.workspace = static_cast<double*>(lane.workspace);
    ctx.workspace_bytes = kWorkspaceBytes;
    ctx.device_info = lane.device_info;
    f.task->task_class->execute_cuda(f.task->key, ctx);
    check(cudaGetLastError(), "task body launch");
    f.executed = take_event();
    check(cudaEventRecord(f.executed, lane.stream), "cudaEventRecord");
  }

  void stage_out(InFlight& f) {
    bool waiting = false;  // the copy-out stream waits for the kernels before the first copy
    for (std::size_t i = 0; i < f.device_tiles.size(); ++i) {
      auto& t = f.task->tiles[i];
      const bool written = t && (f.task->writable >> i & 1U);
      // A written tile's GPU copy goes to the cache when the task retires.
      const bool kept = written && cached_slot(*f.task, i);
      if (kept && !(f.task->leaving >> i & 1U)) {
        t->set_residency(resident_);  // its next readers are all on this device
      } else if (written) {
        if (!waiting) {
          check(cudaStreamWaitEvent(copy_out_stream_, f.executed, 0), "cudaStreamWaitEvent");
          waiting = true;
        }
        check(cudaMemcpyAsync(t->data(), f.device_tiles[i], t->bytes(), cudaMemcpyDeviceToHost,
                              copy_out_stream_), "stage-out copy");
        f.copied_bytes += t->bytes();
        // On the host once the copy is done: set then when the task completes before it.
        t->set_residency(f.completes_early ? resident_ : Tile::kOnHost | resident_);
      }
    }
    // A task with nothing to copy back is done with its kernels: it does not wait behind
    // the copies back of tasks launched before it.
    if (!waiting) return;
    f.done = take_event();
    check(cudaEventRecord(f.done, copy_out_stream_), "cudaEventRecord");
  }

  /// Whether the task may retire: its last stage is done.
  static bool finished(const InFlight& f) {
    return cudaEventQuery(f.done != nullptr ? f.done : f.executed) == cudaSuccess;
  }

  /// Whether stage_out() copies slot `i` of `task` back to the host: a written tile that leaves
  /// the device, or any written tile while not caching.
  [[nodiscard]] bool copied_back(const ReadyTask& task, std::size_t i) const {
    const bool written = task.writable >> i & 1U;
    return written && task.tiles[i] && (!cached_slot(task, i) || (task.leaving >> i & 1U));
  }

  /// The task's kernels are done: its reads go back to the cache, its writes stay there (or
  /// their buffers go back to the pool), and its events to the free list. `copies_done`: false
  /// when it completes before its copies back end; the tiles they read are then kept in
  /// copies_back (never written, evicted or given back) until end_copies_back().
  void retire(InFlight& f, bool copies_done) {
    for (const void* d : f.filled) {
      if (const auto it = filling_.find(d); it != filling_.end() && it->second == f.staged) filling_.erase(it);
    }
    for (std::size_t i = 0; i < f.copies.size(); ++i) {
      const TilePtr& t = f.task->tiles[i];
      if (f.copies[i] == SlotCopy::cached_read) {
        cache_.release(t.get());
      } else if (f.copies[i] == SlotCopy::owned) {
        const bool written = f.task->writable >> i & 1U;
        const bool copy_under_way = !copies_done && copied_back(*f.task, i);
        if (written && cached_slot(*f.task, i)) {
          if (copy_under_way) {
            cache_.insert_in_use(t, f.device_tiles[i], t->bytes());
            f.copies_back.push_back({t, nullptr});
          } else {
            cache_.insert_written(t, f.device_tiles[i], t->bytes(), !host_stale(*t));
          }
        } else if (copy_under_way) {
          f.copies_back.push_back({t, f.device_tiles[i]});
        } else {
          buffers_.give_back(f.device_tiles[i], t->bytes());
        }
      }
    }
    for (cudaEvent_t e : {f.staged, f.executed, copies_done ? f.done : nullptr}) {
      if (e != nullptr) free_events_.push_back(e);
    }
    f.lane->in_flight -= 1;
  }

  /// A task that completed early: its copies back are done, its tiles on the host.
  void end_copies_back(InFlight& f) {
    for (InFlight::CopyBack& c : f.copies_back) {
      c.tile->set_residency(Tile::kOnHost | resident_);
      if (c.buffer != nullptr) {
        buffers_.give_back(c.buffer, c.tile->bytes());
      } else {
        cache_.release(c.tile.get());
      }
    }
    f.copies_back.clear();
    free_events_.push_back(f.done);
  }

  /// Hands the task back to the engine (its successors become ready).
  void complete(InFlight& f, UnitStats& unit, Clock::time_point& last_retired, bool copies_done) {
    if (timeline()) {
      f.staged_ms = timeline_ms(f.staged);
      f.executed_ms = timeline_ms(f.executed);
    }
    retire(f, copies_done);
    f.completed = true;
    unit.totals.tasks_on_device += 1;
    unit.totals.link_bytes += f.copied_bytes;
    // A task's own start-to-end time counts the tasks ahead of it in the streams: about
    // 12 tasks' time for GEMM tiles of 512 on an H100, with the tile cache.
    const Clock::time_point now = Clock::now();
    const double seconds = overlapped_task_seconds(f.started, last_retired, now);
    last_retired = now;
    f.completed_at = now;
    finish(std::move(f.task), unit, seconds);
  }

  void manage() {
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    UnitStats unit;
    std::list<InFlight> in_flight;
    const std::size_t max_in_flight = kInFlightPerStream * lanes_.size();
    Clock::time_point last_retired{};
    std::size_t copying_back = 0;  // tasks in flight that completed early
    int idle_polls = 0;
    const Clock::time_point origin = Clock::now();
    if (timeline()) {
      if (timeline_origin_ == nullptr) check(cudaEventCreate(&timeline_origin_), "cudaEventCreate");
      check(cudaEventRecord(timeline_origin_, copy_in_stream_), "cudaEventRecord");
    }
    for (;;) {
      bool progressed = false;
      // Tasks that completed early and only copy back take no place.
      while (in_flight.size() - copying_back < max_in_flight) {
        auto task = try_pop();
        if (!task) break;
        in_flight.push_back(launch(std::move(task)));
        progressed = true;
      }
      for (auto it = in_flight.begin(); it != in_flight.end();) {
        InFlight& f = *it;
        if (!f.completed && f.completes_early && f.done != nullptr &&
            cudaEventQuery(f.executed) == cudaSuccess) {
          complete(f, unit, last_retired, false);
          copying_back += 1;
          progressed = true;
        }
        if (!finished(f)) {
          ++it;
          continue;
        }
        if (timeline()) f.copied_back_ms = timeline_ms(f.done);
        if (f.completed) {
          end_copies_back(f);
          copying_back -= 1;
        } else {
          complete(f, unit, last_retired, true);
        }
        if (timeline()) record_timeline(f, origin);
        it = in_flight.erase(it);
        progressed = true;
      }
      if (in_flight.empty()) {
        auto task = pop_or_wait(unit);
        if (!task) break;
        in_flight.push_back(launch(std::move(task)));
      } else if (progressed) {
        idle_polls = 0;
      } else if (++idle_polls <= kYieldingPolls) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(kPollInterval);
      }
    }
    // The application may change its collections in place between iterations; the buffers
    // stay in the pool for the next one.
    cache_.clear();
    merge_stats(unit);
    if (timeline() && !timeline_lines_.empty()) {
      Trace::append(timeline_path_, ordinal_, timeline_lines_);
      timeline_lines_.clear();
    }
  }

  int ordinal_;
  std::uint8_t resident_;  ///< this GPU's residency bit (Tile::on_device of its index)
  bool pin_tiles_;
  std::string timeline_path_;                ///< BELLOWS_CUDA_TIMELINE; empty: no timeline
  bool complete_early_;                      ///< tasks complete before their copies back
  /// Kernels wait only for the copies in of the tiles they read (BELLOWS_CUDA_PRECISE_WAITS=0:
  /// for every copy in enqueued before theirs).
  bool precise_waits_ = switched_on("BELLOWS_CUDA_PRECISE_WAITS");
  /// Device buffers of the cache whose copy in, by a task in flight, may still be under way:
  /// the event that ends it.
  std::unordered_map<const void*, cudaEvent_t> filling_;
  cudaEvent_t timeline_origin_ = nullptr;    ///< the iteration's start on the GPU
  std::string timeline_lines_;
  cudaStream_t copy_in_stream_ = nullptr;
  cudaStream_t copy_out_stream_ = nullptr;
  std::vector<Lane> lanes_;
  const CudaMathLibraries& math_ = cuda_math_libraries();
  std::vector<cudaEvent_t> free_events_;
  DeviceBufferPool buffers_;  // after the stream it frees on
  DeviceTileCache cache_;     // after the pool it gives buffers back to
  std::thread manager_;
};

}  // namespace

std::unique_ptr<Device> make_cuda_device(DeviceOwner& owner, int ordinal, const RuntimeOptions& options,
                                         std::size_t index) {
  return std::make_unique<CudaDevice>(owner, ordinal, options, index);
}

int visible_cuda_devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace bellows::runtime
