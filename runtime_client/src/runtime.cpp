#include "bellows/runtime/runtime.hpp"

#include <cstring>

#include "engine.hpp"

namespace bellows::runtime {

Runtime::Runtime(MPI_Comm comm, RuntimeOptions options)
    : engine_(std::make_unique<Engine>(comm, std::move(options))) {}

Runtime::~Runtime() = default;

int Runtime::rank() const noexcept { return engine_->rank(); }
int Runtime::size() const noexcept { return engine_->size(); }
MPI_Comm Runtime::communicator() const noexcept { return engine_->communicator(); }
const RuntimeOptions& Runtime::options() const noexcept { return engine_->options(); }

void Runtime::add_task_class(std::unique_ptr<TaskClass> task_class) {
  engine_->add_task_class(std::move(task_class));
}

void Runtime::add_collection(TiledMatrix& collection) { engine_->add_collection(collection); }

IterationReport Runtime::run_iteration() { return engine_->run_iteration(); }

const RankStats& Runtime::stats() const noexcept { return engine_->stats(); }

std::vector<RankStats> Runtime::gather_stats() const {
  // Fixed numeric fields travel as doubles; per-class counts follow the class order,
  // which every rank shares.
  const RankStats& s = engine_->stats();
  const MPI_Comm comm = engine_->communicator();
  std::vector<std::string> names;
  for (std::size_t id = 0; id < engine_->class_count(); ++id) {
    names.push_back(engine_->class_name(static_cast<TaskClassId>(id)));
  }
  std::vector<double> mine = {static_cast<double>(s.tasks_executed),
                              static_cast<double>(s.bytes_sent),
                              static_cast<double>(s.bytes_received),
                              static_cast<double>(s.messages_sent),
                              static_cast<double>(s.messages_received),
                              s.busy_seconds,
                              s.idle_seconds,
                              s.modeled_seconds,
                              s.flops,
                              s.comm_cpu_seconds};
  for (const auto& name : names) {
    auto it = s.tasks_by_class.find(name);
    mine.push_back(it == s.tasks_by_class.end() ? 0.0 : static_cast<double>(it->second));
  }
  const int width = static_cast<int>(mine.size());
  std::vector<double> all(static_cast<std::size_t>(width) * engine_->size());
  MPI_Gather(mine.data(), width, MPI_DOUBLE, all.data(), width, MPI_DOUBLE, 0, comm);
  std::vector<RankStats> out;
  if (engine_->rank() != 0) return out;
  for (int r = 0; r < engine_->size(); ++r) {
    const double* v = all.data() + static_cast<std::size_t>(r) * width;
    RankStats rs;
    rs.rank = r;
    rs.tasks_executed = static_cast<std::uint64_t>(v[0]);
    rs.bytes_sent = static_cast<std::uint64_t>(v[1]);
    rs.bytes_received = static_cast<std::uint64_t>(v[2]);
    rs.messages_sent = static_cast<std::uint64_t>(v[3]);
    rs.messages_received = static_cast<std::uint64_t>(v[4]);
    rs.busy_seconds = v[5];
    rs.idle_seconds = v[6];
    rs.modeled_seconds = v[7];
    rs.flops = v[8];
    rs.comm_cpu_seconds = v[9];
    for (std::size_t c = 0; c < names.size(); ++c) {
      const auto count = static_cast<std::uint64_t>(v[10 + c]);
      if (count != 0) rs.tasks_by_class[names[c]] = count;
    }
    out.push_back(std::move(rs));
  }
  return out;
}

}  // namespace bellows::runtime
