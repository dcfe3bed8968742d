#include "bellows/runtime/elastic_session.hpp"

#include <cstdlib>
#include <stdexcept>

namespace bellows::runtime {
namespace {

/// The value of variable `name` as a number of at least `least`, or nullopt when it is
/// unset or empty. Throws std::invalid_argument naming the variable and the value.
std::optional<int> number_variable(const char* name, int least, const char* what) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  int value = least - 1;
  try {
    std::size_t used = 0;
    value = std::stoi(text, &used);
    if (text[used] != '\0') value = least - 1;
  } catch (const std::exception&) {
    value = least - 1;
  }
  if (value < least)
    throw std::invalid_argument(std::string(name) + "=" + text + ": expected " + what);
  return value;
}

}  // namespace

int ElasticSession::initial_grid_ranks() {
  if (auto grid = number_variable(kGridRanksVariable, 1, "a positive rank count")) return *grid;
  if (auto initial = number_variable(kInitialRanksVariable, 1, "a positive rank count")) return *initial;
  int world_size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  return world_size;
}

ElasticSession::ElasticSession(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) args_.emplace_back(argv[i]);
  grid_ranks_ = initial_grid_ranks();
  auto spawn = [this](int join_iteration) { return spawn_spec(join_iteration); };

  if (auto join = number_variable(kJoinIterationVariable, 0, "an iteration (0 or more)")) {
    // Spawned by a resize (or by the first process's grow to the initial size).
    auto joined = Membership::join();
    if (!joined) {
      throw std::invalid_argument(std::string(kJoinIterationVariable) +
                                  " is set in a process that no resize spawned");
    }
    first_iteration_ = *join;
    job_.emplace(std::move(*joined), spawn, first_iteration_);
    link_ = ControlPlaneLink::from_environment(job_->rank());
    if (link_) link_->attach(*job_);
    return;
  }
  int world_size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const auto initial = number_variable(kInitialRanksVariable, 1, "a positive rank count");
  if (!initial && world_size > 1) {
    // mpiexec -n N: the ranks share one MPI world, so none can leave it.
    ranks_can_leave_ = false;
    job_.emplace(Membership(MPI_COMM_WORLD), spawn);
    return;
  }
  if (initial && world_size != 1) {
    throw std::invalid_argument(std::string(kInitialRanksVariable) + "=" + std::to_string(*initial) +
                                " asks one started process to grow the job, but mpiexec started " +
                                std::to_string(world_size));
  }
  link_ = ControlPlaneLink::from_environment(0);
  Membership membership(MPI_COMM_WORLD);
  if (initial.value_or(1) > 1) membership.grow(*initial - 1, spawn_spec(0));
  job_.emplace(std::move(membership), spawn);
  if (link_) link_->attach(*job_);
}

SpawnSpec ElasticSession::spawn_spec(int join_iteration) const {
  SpawnSpec spec;
  spec.command = current_executable();
  spec.args = args_;
  // Rank 0 spawns: at the first grow the new ranks start at 1, at an expand at the size now.
  if (link_) spec.env = link_->spawn_environment(job_ ? job_->size() : 1);
  spec.env.emplace_back(kJoinIterationVariable, std::to_string(join_iteration));
  spec.env.emplace_back(kGridRanksVariable, std::to_string(grid_ranks_));
  return spec;
}

bool ElasticSession::before_iteration(int it) {
  if (link_) link_->poll();
  return job_->apply_pending(it) != ElasticJob::Outcome::left;
}

void ElasticSession::after_iteration(int it, const IterationReport& report) {
  job_->after_iteration(report);
  if (link_) link_->publish(report, it + 1);
}

}  // namespace bellows::runtime
