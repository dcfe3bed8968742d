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

void Runtime::expand_onto(MPI_Comm comm) { engine_->expand_onto(comm); }

void Runtime::join_expansion(int first_new_rank) { engine_->join_expansion(first_new_rank); }

ShrinkHandoff Runtime::prepare_shrink(std::span<const int> leaving) {
  return engine_->prepare_shrink(leaving);
}

void Runtime::attach_shrunk(MPI_Comm survivors) { engine_->attach_shrunk(survivors); }

const std::unordered_map<TaskKey, int>& Runtime::pinned() const noexcept {
  return engine_->pinned();
}

const RankStats& Runtime::stats() const noexcept { return engine_->stats(); }

std::unordered_map<TaskKey, int> Runtime::migrations() const { return engine_->migrations(); }

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
                              s.comm_cpu_seconds,
                              static_cast<double>(s.steal.requests_sent),
                              static_cast<double>(s.steal.requests_failed),
                              static_cast<double>(s.steal.requests_received),
                              static_cast<double>(s.steal.requests_served),
                              static_cast<double>(s.steal.requests_forwarded),
                              static_cast<double>(s.steal.tasks_stolen),
                              static_cast<double>(s.steal.tasks_given),
                              static_cast<double>(s.steal.bytes_stolen),
                              static_cast<double>(s.steal.max_hops_seen),
                              static_cast<double>(s.steal.max_outstanding),
                              static_cast<double>(s.steal.min_ready_after_serve)};
  constexpr std::size_t kFixedFields = 21;
  for (const auto& name : names) {
    auto it = s.tasks_by_class.find(name);
    mine.push_back(it == s.tasks_by_class.end() ? 0.0 : static_cast<double>(it->second));
  }
  const int width = static_cast<int>(mine.size());
  std::vector<double> all(static_cast<std::size_t>(width) * engine_->size());
  MPI_Gather(mine.data(), width, MPI_DOUBLE, all.data(), width, MPI_DOUBLE, 0, comm);
  // The steal round trips, one vector per rank.
  const int my_round_trips = static_cast<int>(s.steal.round_trip_seconds.size());
  std::vector<int> round_trips_counts(static_cast<std::size_t>(engine_->size()));
  MPI_Gather(&my_round_trips, 1, MPI_INT, round_trips_counts.data(), 1, MPI_INT, 0, comm);
  std::vector<int> round_trips_displacements(round_trips_counts.size());
  int total_round_trips = 0;
  for (std::size_t r = 0; r < round_trips_counts.size(); ++r) {
    round_trips_displacements[r] = total_round_trips;
    total_round_trips += round_trips_counts[r];
  }
  std::vector<double> all_round_trips(static_cast<std::size_t>(total_round_trips));
  MPI_Gatherv(s.steal.round_trip_seconds.data(), my_round_trips, MPI_DOUBLE,
              all_round_trips.data(), round_trips_counts.data(),
              round_trips_displacements.data(), MPI_DOUBLE, 0, comm);
  std::vector<int> all_forwards(static_cast<std::size_t>(total_round_trips));
  MPI_Gatherv(s.steal.round_trip_forwards.data(), my_round_trips, MPI_INT, all_forwards.data(),
              round_trips_counts.data(), round_trips_displacements.data(), MPI_INT, 0, comm);
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
    rs.steal.requests_sent = static_cast<std::uint64_t>(v[10]);
    rs.steal.requests_failed = static_cast<std::uint64_t>(v[11]);
    rs.steal.requests_received = static_cast<std::uint64_t>(v[12]);
    rs.steal.requests_served = static_cast<std::uint64_t>(v[13]);
    rs.steal.requests_forwarded = static_cast<std::uint64_t>(v[14]);
    rs.steal.tasks_stolen = static_cast<std::uint64_t>(v[15]);
    rs.steal.tasks_given = static_cast<std::uint64_t>(v[16]);
    rs.steal.bytes_stolen = static_cast<std::uint64_t>(v[17]);
    rs.steal.max_hops_seen = static_cast<std::uint64_t>(v[18]);
    rs.steal.max_outstanding = static_cast<std::uint64_t>(v[19]);
    rs.steal.min_ready_after_serve = static_cast<std::int64_t>(v[20]);
    const auto first = round_trips_displacements[static_cast<std::size_t>(r)];
    const auto samples = round_trips_counts[static_cast<std::size_t>(r)];
    rs.steal.round_trip_seconds.assign(all_round_trips.begin() + first,
                                       all_round_trips.begin() + first + samples);
    rs.steal.round_trip_forwards.assign(all_forwards.begin() + first,
                                        all_forwards.begin() + first + samples);
    for (std::size_t c = 0; c < names.size(); ++c) {
      const auto count = static_cast<std::uint64_t>(v[kFixedFields + c]);
      if (count != 0) rs.tasks_by_class[names[c]] = count;
    }
    out.push_back(std::move(rs));
  }
  return out;
}

}  // namespace bellows::runtime
