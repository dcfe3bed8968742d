#pragma once
// One iteration's task graph in the compact form the simulator runs: every task of the
// application's task classes, walked once through the TaskClass interface (keys, owners,
// input slots, successors, flops, priorities), with the bytes each input slot moves.
//
// The graph is exactly the one the runtime executes: the same classes build it, with the
// collections' owners under the same block-cyclic grid. Nothing here touches MPI (the
// collections are made with no local rank, so they hold no tiles), SimGrid or a clock.
//
// Thread safety: immutable after build(); any thread may read it.

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "bellows/runtime/task.hpp"

namespace bellows::sim {

/// A tile of a collection: where it lives and how many bytes it holds.
struct SimTile {
  int owner = 0;
  std::uint64_t bytes = 0;
};

/// One input slot of a task.
struct SimInput {
  runtime::InputSource::Kind kind = runtime::InputSource::Kind::control;
  bool writable = false;       ///< read_write: the thief returns it (the cost rule's return)
  std::uint8_t producer_slot = 0;
  std::uint32_t ref = 0;       ///< collection: tile index; task, control: producer task index
  std::uint64_t bytes = 0;     ///< what the slot holds (0 for control slots)
};

/// Where one output slot of a task goes.
struct SimSuccessor {
  bool to_task = true;         ///< false: written back to a collection tile
  std::uint8_t slot = 0;       ///< the producer's slot
  std::uint8_t consumer_slot = 0;
  std::uint32_t ref = 0;       ///< consumer task index, or the collection tile's index
};

struct SimTask {
  runtime::TaskKey key{};
  std::uint32_t class_index = 0;  ///< position in SimGraph::class_names()
  int owner = 0;
  std::int64_t priority = 0;
  double flops = 0.0;
  std::uint32_t first_input = 0, input_count = 0;
  std::uint32_t first_successor = 0, successor_count = 0;
  std::uint32_t predecessor_slots = 0;  ///< inputs filled by a predecessor (task or control)
};

/// The tasks of one iteration, their dependencies and their data (see the file comment).
class SimGraph {
 public:
  /// Walks `classes` (whose owners are ranks below `ranks`). `tile_bytes(tile)` gives a
  /// collection tile's bytes and `tile_owner(tile)` its rank. Throws std::invalid_argument
  /// when a key is named twice, a slot names a task that does not exist, the successors do
  /// not mirror the inputs, an owner is out of range, or the dependencies form a cycle.
  static SimGraph build(std::span<const runtime::TaskClass* const> classes, int ranks,
                        const std::function<std::uint64_t(const runtime::TileIndex&)>& tile_bytes,
                        const std::function<int(const runtime::TileIndex&)>& tile_owner);

  [[nodiscard]] std::size_t size() const noexcept { return tasks_.size(); }
  [[nodiscard]] const SimTask& task(std::size_t i) const { return tasks_[i]; }
  [[nodiscard]] std::span<const SimInput> inputs(const SimTask& t) const {
    return {inputs_.data() + t.first_input, t.input_count};
  }
  [[nodiscard]] std::span<const SimSuccessor> successors(const SimTask& t) const {
    return {successors_.data() + t.first_successor, t.successor_count};
  }
  [[nodiscard]] const SimTile& tile(std::uint32_t i) const { return tiles_[i]; }
  [[nodiscard]] std::size_t tile_count() const noexcept { return tiles_.size(); }
  [[nodiscard]] const std::vector<std::string>& class_names() const noexcept { return class_names_; }
  [[nodiscard]] int ranks() const noexcept { return ranks_; }
  /// All tasks' flops together.
  [[nodiscard]] double total_flops() const noexcept { return total_flops_; }
  /// The longest chain of dependent tasks with each task taking overhead + flops / rate
  /// seconds (communication left out).
  [[nodiscard]] double critical_path_seconds(double seconds_per_flop, double overhead_seconds) const;
  /// The bytes a slot of a task leaves behind (what its successors receive).
  [[nodiscard]] std::uint64_t output_bytes(const SimTask& t, int slot) const;

 private:
  int ranks_ = 0;
  std::vector<SimTask> tasks_;
  std::vector<std::uint32_t> order_;   // the tasks in a topological order
  std::vector<SimInput> inputs_;
  std::vector<SimSuccessor> successors_;
  std::vector<SimTile> tiles_;
  std::vector<std::string> class_names_;
  double total_flops_ = 0.0;
};

}  // namespace bellows::sim
