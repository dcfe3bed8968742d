// The METG stencil as a libbellows task class: one task per (timestep, column), its three
// predecessors' 16-byte outputs as input slots, its own output as a scratch tile.

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <string_view>

#include "bellows/runtime/runtime.hpp"
#include "metg.hpp"

namespace bellows::bench {
namespace {

namespace br = bellows::runtime;

// Task key (step, column). Slots: the outputs of the predecessors in column order (read), then
// the task's own output (a 2 x 1 scratch tile, the slot its successors read).
class StencilTasks final : public br::TaskClass {
 public:
  StencilTasks(const StencilShape& shape, std::int64_t iterations, std::vector<double>& last_step)
      : TaskClass(0), shape_(shape), iterations_(iterations), last_step_(last_step) {}

  std::string_view name() const override { return "STENCIL"; }

  void for_each_task(const std::function<void(const br::TaskKey&)>& fn) const override {
    for (int step = 0; step < shape_.steps; ++step) {
      for (int column = 0; column < shape_.width; ++column) fn(key(step, column));
    }
  }

  int owner(const br::TaskKey& k) const override { return shape_.owner(k.index[1]); }

  void inputs(const br::TaskKey& k, std::vector<br::InputSource>& out) const override {
    const int step = k.index[0], column = k.index[1];
    if (step > 0) {
      for (int c = shape_.first_dependency(column); c <= shape_.last_dependency(column); ++c) {
        out.push_back(br::InputSource::from_task(key(step - 1, c), output_slot(step - 1, c),
                                                 br::Access::read));
      }
    }
    out.push_back(br::InputSource::scratch_tile(2, 1));
  }

  void successors(const br::TaskKey& k, int slot, std::vector<br::Successor>& out) const override {
    const int step = k.index[0], column = k.index[1];
    if (slot != output_slot(step, column) || step + 1 >= shape_.steps) return;
    for (int c = shape_.first_dependency(column); c <= shape_.last_dependency(column); ++c) {
      // Column `column` is slot column - first_dependency(c) of task (step+1, c).
      out.push_back(br::Successor::to_task(
          key(step + 1, c), static_cast<std::uint8_t>(column - shape_.first_dependency(c))));
    }
  }

  // Earlier timesteps first, and within one the columns other ranks wait for.
  std::int64_t priority(const br::TaskKey& k) const override {
    const int column = k.index[1];
    const bool boundary = shape_.ranks > 1 && (column % shape_.columns_per_rank() == 0 ||
                                               (column + 1) % shape_.columns_per_rank() == 0);
    return 2 * static_cast<std::int64_t>(shape_.steps - k.index[0]) + (boundary ? 1 : 0);
  }

  void execute_cpu(const br::TaskKey& k, std::span<br::Tile* const> tiles) const override {
    const int step = k.index[0], column = k.index[1];
    const std::size_t out_slot = tiles.size() - 1;
    const double seed =
        step == 0 ? first_seed(column) : stencil_seed(shape_, column, [&](int c) {
          return tiles[static_cast<std::size_t>(c - shape_.first_dependency(column))]->data()[0];
        });
    const StencilOutput output{busy_loop(seed, iterations_), static_cast<double>(step)};
    std::memcpy(tiles[out_slot]->data(), &output, sizeof output);
    if (step + 1 == shape_.steps) last_step_[static_cast<std::size_t>(column)] = output.value;
  }

 private:
  std::uint8_t output_slot(int step, int column) const {
    if (step == 0) return 0;
    return static_cast<std::uint8_t>(shape_.last_dependency(column) - shape_.first_dependency(column) + 1);
  }

  StencilShape shape_;
  std::int64_t iterations_;
  std::vector<double>& last_step_;  // each column written by its owner's task only
};

}  // namespace

PointTiming run_bellows_point(const StencilShape& shape, std::int64_t iterations, int repeat,
                              MPI_Comm comm, const runtime::RuntimeOptions& options) {
  PointTiming timing;
  std::vector<double> last_step(static_cast<std::size_t>(shape.width), 0.0);
  RuntimeCounters local;
  std::int64_t executed = 0;
  {
    br::Runtime runtime(comm, options);
    runtime.add_task_class(std::make_unique<StencilTasks>(shape, iterations, last_step));
    for (int r = 0; r <= repeat; ++r) {  // r == 0 warms up
      const auto report = runtime.run_iteration();
      if (r == 0) continue;
      timing.seconds.push_back(report.seconds);
      executed += static_cast<std::int64_t>(report.local.tasks_executed);
      local.busy_seconds += report.local.busy_seconds;
      local.idle_seconds += report.local.idle_seconds;
      local.comm_cpu_seconds += report.local.comm_cpu_seconds;
      local.messages_sent += report.local.messages_sent;
      local.bytes_sent += report.local.bytes_sent;
    }
  }
  std::array<double, 4> sums{}, mine{local.busy_seconds, local.idle_seconds,
                                     local.comm_cpu_seconds, static_cast<double>(executed)};
  MPI_Allreduce(mine.data(), sums.data(), 4, MPI_DOUBLE, MPI_SUM, comm);
  std::array<std::uint64_t, 2> counts{}, my_counts{local.messages_sent, local.bytes_sent};
  MPI_Allreduce(my_counts.data(), counts.data(), 2, MPI_UINT64_T, MPI_SUM, comm);
  timing.counters = RuntimeCounters{sums[0], sums[1], sums[2], counts[0], counts[1]};
  timing.tasks_executed = static_cast<std::int64_t>(sums[3]) / std::max(repeat, 1);
  timing.checksum = last_step_checksum(last_step, comm);
  return timing;
}

}  // namespace bellows::bench
