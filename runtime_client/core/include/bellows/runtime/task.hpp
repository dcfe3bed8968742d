#pragma once
// Task classes: the parameterized task graph (PTG) an application hands to the runtime.
//
// As in PaRSEC (John & Milthorpe, "Elasticity in a Task-based Dataflow Runtime Through
// Inter-node GPU Work Stealing", sections III and IV-B), every rank knows every task
// class, a task is named by a unique key, and its inputs, successors and owner are
// computed from that key. No rank stores the global DAG, and any rank can re-create a
// task from its key plus its input tiles.

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "bellows/runtime/tile.hpp"

// CUDA handle types, forward-declared so that this header does not need CUDA.
struct CUstream_st;
struct cublasContext;
struct cusolverDnContext;

namespace bellows::runtime {

using TaskClassId = std::uint16_t;
/// Not a valid task class id: the wire protocol uses it to mark collection targets.
inline constexpr TaskClassId kReservedTaskClassId = 0xFFFF;
using CollectionId = std::uint16_t;

/// The unique name of a task: its class and up to three indices.
struct TaskKey {
  TaskClassId task_class = 0;
  std::array<std::int32_t, 3> index{};

  friend bool operator==(const TaskKey&, const TaskKey&) = default;
};

/// Tile (m, n) of a registered collection.
struct TileIndex {
  CollectionId collection = 0;
  std::int32_t m = 0;
  std::int32_t n = 0;

  friend bool operator==(const TileIndex&, const TileIndex&) = default;
};

enum class Access : std::uint8_t { read, read_write };

/// Where one input slot of a task gets its tile.
struct InputSource {
  enum class Kind : std::uint8_t {
    collection,  ///< tile of a collection as it is when the task is instantiated (do not
                 ///< write back, in the same iteration, to a collection that tasks read)
    task,        ///< a slot of a predecessor task, after that task ran
    scratch,     ///< a fresh, uninitialised tile of the given shape (an output buffer)
    control,     ///< a predecessor with no data: the slot stays empty (nullptr)
  };
  Kind kind = Kind::control;
  Access access = Access::read;
  TileIndex tile{};             ///< collection
  TaskKey producer{};           ///< task, control
  std::uint8_t producer_slot = 0;
  std::int32_t rows = 0;        ///< scratch
  std::int32_t cols = 0;        ///< scratch

  static InputSource from_collection(TileIndex t, Access a) {
    InputSource s; s.kind = Kind::collection; s.access = a; s.tile = t; return s;
  }
  static InputSource from_task(TaskKey producer, std::uint8_t slot, Access a) {
    InputSource s; s.kind = Kind::task; s.access = a; s.producer = producer;
    s.producer_slot = slot; return s;
  }
  static InputSource scratch_tile(std::int32_t rows, std::int32_t cols) {
    InputSource s; s.kind = Kind::scratch; s.access = Access::read_write; s.rows = rows;
    s.cols = cols; return s;
  }
  static InputSource control_from(TaskKey producer, std::uint8_t slot) {
    InputSource s; s.kind = Kind::control; s.producer = producer; s.producer_slot = slot;
    return s;
  }
  /// True when the slot is filled by a predecessor task (data or control).
  [[nodiscard]] bool from_predecessor() const noexcept {
    return kind == Kind::task || kind == Kind::control;
  }
};

/// Where the tile of a slot goes after its task ran.
struct Successor {
  enum class Kind : std::uint8_t { task, collection };
  Kind kind = Kind::task;
  TaskKey consumer{};            ///< task
  std::uint8_t consumer_slot = 0;
  TileIndex tile{};              ///< collection: the tile is written back there

  static Successor to_task(TaskKey consumer, std::uint8_t slot) {
    Successor s; s.kind = Kind::task; s.consumer = consumer; s.consumer_slot = slot; return s;
  }
  static Successor to_collection(TileIndex t) {
    Successor s; s.kind = Kind::collection; s.tile = t; return s;
  }
};

/// What a CUDA task body receives: device copies of its slots (same order as the
/// inputs, nullptr for empty slots), and handles bound to the execution stream.
struct CudaTaskContext {
  CUstream_st* stream = nullptr;
  cublasContext* cublas = nullptr;
  cusolverDnContext* cusolver = nullptr;
  std::span<double* const> device_tiles;
  std::span<Tile* const> host_tiles;  ///< shapes only: contents may be stale on the host
  double* workspace = nullptr;        ///< device scratch for cuSOLVER
  std::size_t workspace_bytes = 0;
  int* device_info = nullptr;         ///< device int for cuSOLVER's info
};

/// A family of tasks sharing code. Implementations must be pure functions of the key
/// (and of construction parameters), callable concurrently from any thread: the
/// runtime calls them on worker and communication threads alike.
class TaskClass {
 public:
  explicit TaskClass(TaskClassId id) : id_(id) {}
  virtual ~TaskClass() = default;
  TaskClass(const TaskClass&) = delete;
  TaskClass& operator=(const TaskClass&) = delete;

  [[nodiscard]] TaskClassId id() const noexcept { return id_; }
  [[nodiscard]] TaskKey key(std::int32_t a, std::int32_t b = 0, std::int32_t c = 0) const {
    return TaskKey{id_, {a, b, c}};
  }

  [[nodiscard]] virtual std::string_view name() const = 0;
  /// Calls fn for every task of the class (the whole domain, every rank's tasks).
  virtual void for_each_task(const std::function<void(const TaskKey&)>& fn) const = 0;
  /// The fixed owner mapping: rank (in the runtime's communicator) that runs the task.
  [[nodiscard]] virtual int owner(const TaskKey& key) const = 0;
  /// The task's input slots, in slot order (appended to out).
  virtual void inputs(const TaskKey& key, std::vector<InputSource>& out) const = 0;
  /// Where slot `slot` goes after the task ran (appended to out). Must mirror inputs():
  /// consumer C lists (P, s) as its input exactly when P lists C among successors of s.
  /// A task with no inputs is asked for slot 0, which then carries a control token.
  virtual void successors(const TaskKey& key, int slot, std::vector<Successor>& out) const = 0;
  /// Floating-point operations, for GFLOP/s and for the emulated device's time model.
  [[nodiscard]] virtual double flops(const TaskKey& /*key*/) const { return 0.0; }
  /// Larger runs earlier among ready tasks of a device.
  [[nodiscard]] virtual std::int64_t priority(const TaskKey& /*key*/) const { return 0; }

  /// The CPU body. tiles[i] is slot i (nullptr for control slots); read_write slots may
  /// be modified in place, read slots must not be.
  virtual void execute_cpu(const TaskKey& key, std::span<Tile* const> tiles) const = 0;
  [[nodiscard]] virtual bool has_cuda_body() const { return false; }
  /// The CUDA body, enqueued on ctx.stream (must not synchronise the device).
  virtual void execute_cuda(const TaskKey& /*key*/, const CudaTaskContext& /*ctx*/) const {}

 private:
  TaskClassId id_;
};

}  // namespace bellows::runtime

template <>
struct std::hash<bellows::runtime::TaskKey> {
  std::size_t operator()(const bellows::runtime::TaskKey& k) const noexcept {
    // splitmix64 over the packed key: distinct keys of realistic domains do not collide.
    const auto mix = [](std::uint64_t x) {
      x += 0x9e3779b97f4a7c15ULL;
      x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
      x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
      return x ^ (x >> 31);
    };
    const std::uint64_t lo = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(k.index[0])) << 32) |
                             static_cast<std::uint32_t>(k.index[1]);
    const std::uint64_t hi = (static_cast<std::uint64_t>(k.task_class) << 32) |
                             static_cast<std::uint32_t>(k.index[2]);
    const std::uint64_t h = mix(lo ^ mix(hi));
    return static_cast<std::size_t>(h);
  }
};

template <>
struct std::hash<bellows::runtime::TileIndex> {
  std::size_t operator()(const bellows::runtime::TileIndex& t) const noexcept {
    std::uint64_t h = (static_cast<std::uint64_t>(t.collection) << 48) ^
                      (static_cast<std::uint64_t>(static_cast<std::uint32_t>(t.m)) << 24) ^
                      static_cast<std::uint32_t>(t.n);
    return static_cast<std::size_t>(h * 0x9e3779b97f4a7c15ULL);
  }
};
