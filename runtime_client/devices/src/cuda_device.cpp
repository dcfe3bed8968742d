// The CUDA device: a manager thread moves each task through the stages of John & Milthorpe,
// "Elasticity in a Task-based Dataflow Runtime Through Inter-node GPU Work Stealing",
// CCGrid 2024, section III-A: device queue -> stage-in (host to device copies) -> execution ->
// stage-out (device to host copies of written slots) -> epilogue (successors).
// Stages run on three streams and overlap across tasks; only the device queue is
// visible to stealing. Tiles stay in GPU memory between the tasks of an iteration
// (DeviceTileCache, device_tile_cache.hpp): a tile read is copied in once for all the tasks
// that read it, and a tile written is where the next task that reads or updates it starts
// from. A written tile goes back to the host only when it leaves the device
// (ReadyTask::leaving: another rank or a collection needs it); else its host copy is stale
// (Tile::residency without kOnHost) and the engine lets no thief take a task that reads it.

#include <cuda_runtime.h>

#include <cstdio>
#include <deque>
#include <stdexcept>
#include <string>
#include <thread>

#include "bellows/runtime/cuda_libraries.hpp"
#include "device.hpp"
#include "device_tile_cache.hpp"
#include "tile_pool.hpp"

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

class CudaDevice final : public Device {
 public:
  CudaDevice(DeviceOwner& owner, int ordinal, bool pin_tiles, std::size_t cache_bytes)
      : Device(owner),
        ordinal_(ordinal),
        pin_tiles_(pin_tiles),
        cache_(cache_bytes, [this](void* device) { cudaFreeAsync(device, stage_in_stream_); }) {
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (ordinal < 0 || ordinal >= count) {
      throw std::runtime_error("CUDA device " + std::to_string(ordinal) + " requested but " +
                               std::to_string(count) + " GPUs are visible");
    }
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    for (auto* s : {&stage_in_stream_, &exec_stream_, &stage_out_stream_}) {
      check(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    if (math_.create_cublas(&cublas_) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate failed");
    math_.cublas_set_stream(cublas_, exec_stream_);
    if (math_.create_cusolver(&cusolver_) != CUSOLVER_STATUS_SUCCESS) {
      throw std::runtime_error("cusolverDnCreate failed");
    }
    math_.cusolver_set_stream(cusolver_, exec_stream_);
    check(cudaMalloc(&workspace_, kWorkspaceBytes), "cudaMalloc(workspace)");
    check(cudaMalloc(&device_info_, sizeof(int)), "cudaMalloc(info)");
    if (pin_tiles_) tile_pool::pin_slabs(&pin_for_cuda);
  }

  ~CudaDevice() override {
    stop();
    cudaSetDevice(ordinal_);
    cache_.clear();  // emptied by the manager already, unless it never ran
    cudaStreamSynchronize(stage_in_stream_);
    if (pin_tiles_) tile_pool::pin_slabs(nullptr);
    cudaFree(workspace_);
    cudaFree(device_info_);
    math_.destroy_cusolver(cusolver_);
    math_.destroy_cublas(cublas_);
    for (auto s : {stage_in_stream_, exec_stream_, stage_out_stream_}) cudaStreamDestroy(s);
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
  /// Where a slot's device copy comes from, and where it goes when the task is done.
  enum class SlotCopy : std::uint8_t {
    none,         ///< no tile (a control slot)
    cached_read,  ///< read from the cache's copy: released back to it
    owned,        ///< this task's own buffer: freed, or kept by the cache once written back
  };
  struct InFlight {
    std::unique_ptr<ReadyTask> task;
    std::vector<double*> device_tiles;
    std::vector<SlotCopy> copies;
    cudaEvent_t done = nullptr;
    Clock::time_point started;
    std::uint64_t copied_bytes = 0;  // host <-> device, both ways
  };

  static constexpr std::size_t kWorkspaceBytes = 64UL << 20;
  static constexpr std::size_t kMaxStagedIn = 2;

  [[nodiscard]] bool caching() const noexcept { return cache_.capacity_bytes() > 0; }
  static bool host_stale(const Tile& t) { return !(t.residency() & Tile::kOnHost); }
  /// Whether slot `i` of `task` goes through the cache: a tile with data, while caching.
  [[nodiscard]] bool cached_slot(const ReadyTask& task, std::size_t i) const {
    return caching() && task.tiles[i] && task.tiles[i]->elements() > 0;
  }

  InFlight stage_in(std::unique_ptr<ReadyTask> task) {
    InFlight f;
    f.started = Clock::now();
    const std::size_t slots = task->tiles.size();
    f.device_tiles.assign(slots, nullptr);
    f.copies.assign(slots, SlotCopy::none);
    // A slot the task writes takes the cache's copy over first: the cache's reference
    // would otherwise make the slot's tile look shared, and be cloned below for nothing.
    for (std::size_t i = 0; i < slots; ++i) {
      if (!(task->writable >> i & 1U) || !cached_slot(*task, i)) continue;
      const TilePtr& t = task->tiles[i];
      f.device_tiles[i] = static_cast<double*>(cache_.take_for_writing(t.get()));
      if (!f.device_tiles[i] && host_stale(*t)) {
        // Readers of this version are still to come: the task writes a copy of the GPU's.
        void* source = cache_.acquire(t.get());
        if (!source) throw std::logic_error("CUDA device: a host-stale tile is not in GPU memory");
        check(cudaMallocAsync(reinterpret_cast<void**>(&f.device_tiles[i]), t->bytes(), stage_in_stream_),
              "cudaMallocAsync");
        check(cudaMemcpyAsync(f.device_tiles[i], source, t->bytes(), cudaMemcpyDeviceToDevice,
                              stage_in_stream_), "stage-in copy on the GPU");
        cache_.release(t.get());  // freed, if ever, on this stream, after the copy
      }
      if (f.device_tiles[i]) f.copies[i] = SlotCopy::owned;
    }
    task->make_writable_slots_exclusive();
    for (std::size_t i = 0; i < slots; ++i) {
      const TilePtr& t = task->tiles[i];
      if (!t || f.device_tiles[i]) continue;
      const bool read_through_cache = !(task->writable >> i & 1U) && cached_slot(*task, i);
      if (read_through_cache) {
        if (void* d = cache_.acquire(t.get())) {
          f.device_tiles[i] = static_cast<double*>(d);
          f.copies[i] = SlotCopy::cached_read;
          continue;
        }
      }
      if (host_stale(*t)) throw std::logic_error("CUDA device: a host-stale tile is not in GPU memory");
      double* d = nullptr;
      check(cudaMallocAsync(reinterpret_cast<void**>(&d), t->bytes(), stage_in_stream_), "cudaMallocAsync");
      check(cudaMemcpyAsync(d, t->data(), t->bytes(), cudaMemcpyHostToDevice, stage_in_stream_),
            "stage-in copy");
      f.copied_bytes += t->bytes();
      f.device_tiles[i] = d;
      if (read_through_cache) {
        cache_.insert_in_use(t, d, t->bytes());
        f.copies[i] = SlotCopy::cached_read;
      } else {
        f.copies[i] = SlotCopy::owned;
      }
    }
    f.task = std::move(task);
    check(cudaEventCreateWithFlags(&f.done, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(f.done, stage_in_stream_), "cudaEventRecord");
    return f;
  }

  void execute(InFlight& f) {
    check(cudaStreamWaitEvent(exec_stream_, f.done, 0), "cudaStreamWaitEvent");
    std::vector<Tile*> hosts;
    for (auto& t : f.task->tiles) hosts.push_back(t.get());
    CudaTaskContext ctx;
    ctx.stream = exec_stream_;
    ctx.cublas = cublas_;
    ctx.cusolver = cusolver_;
    ctx.device_tiles = f.device_tiles;
    ctx.host_tiles = hosts;
    ctx.workspace = static_cast<double*>(workspace_);
    ctx.workspace_bytes = kWorkspaceBytes;
    ctx.device_info = device_info_;
    f.task->task_class->execute_cuda(f.task->key, ctx);
    check(cudaGetLastError(), "task body launch");
    check(cudaEventRecord(f.done, exec_stream_), "cudaEventRecord");
  }

  void stage_out(InFlight& f) {
    check(cudaStreamWaitEvent(stage_out_stream_, f.done, 0), "cudaStreamWaitEvent");
    for (std::size_t i = 0; i < f.device_tiles.size(); ++i) {
      auto& t = f.task->tiles[i];
      const bool written = t && (f.task->writable >> i & 1U);
      // A written tile's GPU copy goes to the cache when the task retires.
      const bool kept = written && cached_slot(*f.task, i);
      if (kept && !(f.task->leaving >> i & 1U)) {
        t->set_residency(Tile::kOnDevice);  // its next readers are all on this device
      } else if (written) {
        check(cudaMemcpyAsync(t->data(), f.device_tiles[i], t->bytes(), cudaMemcpyDeviceToHost,
                              stage_out_stream_), "stage-out copy");
        f.copied_bytes += t->bytes();
        t->set_residency(Tile::kOnHost | Tile::kOnDevice);
      }
      if (f.copies[i] == SlotCopy::owned && !kept) {
        cudaFreeAsync(f.device_tiles[i], stage_out_stream_);
        f.device_tiles[i] = nullptr;
      }
    }
    check(cudaEventRecord(f.done, stage_out_stream_), "cudaEventRecord");
  }

  static bool finished(const InFlight& f) { return cudaEventQuery(f.done) == cudaSuccess; }

  /// After the task's last copy: its reads go back to the cache, its writes stay there.
  void retire(InFlight& f) {
    for (std::size_t i = 0; i < f.copies.size(); ++i) {
      if (f.copies[i] == SlotCopy::cached_read) {
        cache_.release(f.task->tiles[i].get());
      } else if (f.copies[i] == SlotCopy::owned && f.device_tiles[i]) {
        const TilePtr& t = f.task->tiles[i];
        cache_.insert_written(t, f.device_tiles[i], t->bytes(), !host_stale(*t));
      }
    }
  }

  void manage() {
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    UnitStats unit;
    std::deque<InFlight> staging, executing, staging_out;
    Clock::time_point last_retired{};
    for (;;) {
      bool progressed = false;
      while (staging.size() < kMaxStagedIn) {
        auto task = try_pop();
        if (!task) break;
        staging.push_back(stage_in(std::move(task)));
        progressed = true;
      }
      while (!staging.empty() && finished(staging.front())) {
        execute(staging.front());
        executing.push_back(std::move(staging.front()));
        staging.pop_front();
        progressed = true;
      }
      while (!executing.empty() && finished(executing.front())) {
        stage_out(executing.front());
        staging_out.push_back(std::move(executing.front()));
        executing.pop_front();
        progressed = true;
      }
      while (!staging_out.empty() && finished(staging_out.front())) {
        InFlight f = std::move(staging_out.front());
        staging_out.pop_front();
        cudaEventDestroy(f.done);
        retire(f);
        unit.totals.tasks_on_device += 1;
        unit.totals.link_bytes += f.copied_bytes;
        // A task's own start-to-end time counts the tasks ahead of it in the streams: about
        // 12 tasks' time for GEMM tiles of 512 on an H100, with the tile cache.
        const Clock::time_point now = Clock::now();
        const double seconds = overlapped_task_seconds(f.started, last_retired, now);
        last_retired = now;
        finish(std::move(f.task), unit, seconds);
        progressed = true;
      }
      const bool idle = staging.empty() && executing.empty() && staging_out.empty();
      if (idle) {
        auto task = pop_or_wait(unit);
        if (!task) break;
        staging.push_back(stage_in(std::move(task)));
      } else if (!progressed) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
    // The application may change its collections in place between iterations.
    cache_.clear();
    merge_stats(unit);
  }

  int ordinal_;
  bool pin_tiles_;
  cudaStream_t stage_in_stream_ = nullptr;
  cudaStream_t exec_stream_ = nullptr;
  cudaStream_t stage_out_stream_ = nullptr;
  const CudaMathLibraries& math_ = cuda_math_libraries();
  cublasHandle_t cublas_ = nullptr;
  cusolverDnHandle_t cusolver_ = nullptr;
  void* workspace_ = nullptr;
  int* device_info_ = nullptr;
  DeviceTileCache cache_;  // after the streams it frees on
  std::thread manager_;
};

}  // namespace

std::unique_ptr<Device> make_cuda_device(DeviceOwner& owner, int ordinal, bool pin_tiles,
                                         std::size_t cache_bytes) {
  return std::make_unique<CudaDevice>(owner, ordinal, pin_tiles, cache_bytes);
}

}  // namespace bellows::runtime
