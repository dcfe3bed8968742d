#include "bellows/examples/elastic.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>

namespace bellows::examples {
namespace {

constexpr const char* kLocalRanksVariable = "BELLOWS_LOCAL_RANKS";

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::optional<std::vector<ResizeStep>> parse_resize_schedule(const std::string& text,
                                                             int iterations, std::string& error) {
  std::vector<ResizeStep> steps;
  std::size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    const auto comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos
                                                                           : comma - start);
    const auto fail = [&](const std::string& why) {
      error = "--resize item '" + item + "': " + why;
      return std::nullopt;
    };
    const auto colon = item.find(':');
    if (item.rfind("iter=", 0) != 0 || colon == std::string::npos) {
      return fail("expected iter=K:+N or iter=K:-N");
    }
    ResizeStep step;
    try {
      std::size_t used = 0;
      const std::string k = item.substr(5, colon - 5);
      step.iteration = std::stoi(k, &used);
      if (used != k.size()) return fail("iteration '" + k + "' is not a number");
      const std::string d = item.substr(colon + 1);
      if (d.empty() || (d[0] != '+' && d[0] != '-')) return fail("the change must start with + or -");
      step.delta = std::stoi(d, &used);
      if (used != d.size()) return fail("change '" + d + "' is not a number");
    } catch (const std::exception&) {
      return fail("expected iter=K:+N or iter=K:-N");
    }
    if (step.delta == 0) return fail("the change must not be 0");
    if (step.iteration < 2 || step.iteration > iterations) {
      return fail("iteration " + std::to_string(step.iteration) + " is not between 2 and --iterations (" +
                  std::to_string(iterations) + ")");
    }
    if (!steps.empty() && step.iteration <= steps.back().iteration) {
      return fail("iterations must increase");
    }
    steps.push_back(step);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return steps;
}

ElasticSession::ElasticSession(const std::string& app, const AppOptions& options, int argc,
                               char** argv)
    : app_(app) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--join-iteration" || arg == "--join-grid-ranks") {
      ++i;  // drop the option and its value: a spawn sets its own
      continue;
    }
    args_.push_back(arg);
  }
  std::string error;
  auto schedule = parse_resize_schedule(options.resize, options.iterations, error);
  if (!schedule) throw std::invalid_argument(error);
  schedule_ = std::move(*schedule);

  if (options.join_iteration >= 0) {  // spawned by a resize (or by the initial grow)
    auto joined = runtime::Membership::join();
    if (!joined) throw std::invalid_argument("--join-iteration given to a process that was not spawned");
    job_.emplace(std::move(*joined));
    grid_ranks_ = options.join_grid_ranks;
    first_iteration_ = options.join_iteration;
    if (first_iteration_ > 0) {
      joined_after_size_ = job_->grows().empty() ? 0 : job_->grows().back().old_size;
      first_new_rank_ = joined_after_size_;
    }
    return;
  }
  int world_size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const char* local = std::getenv(kLocalRanksVariable);
  const bool shrinks = std::any_of(schedule_.begin(), schedule_.end(),
                                   [](const ResizeStep& s) { return s.delta < 0; });
  if (local == nullptr && world_size > 1) {
    // A plain mpiexec -n N job: its ranks share one MPI world, so none can leave.
    if (shrinks) {
      throw std::invalid_argument("--resize shrinks the job, which needs it started by "
                                  "scripts/bellows-local (ranks of one mpiexec -n N cannot leave)");
    }
    if (!schedule_.empty()) {
      throw std::invalid_argument("--resize needs the job started by scripts/bellows-local");
    }
    world_ = MPI_COMM_WORLD;
    grid_ranks_ = world_size;
    return;
  }
  int initial = 1;
  if (local != nullptr) {
    try {
      initial = std::stoi(local);
    } catch (const std::exception&) {
      initial = 0;
    }
    if (initial < 1 || world_size != 1) {
      throw std::invalid_argument(std::string(kLocalRanksVariable) + "=" + local +
                                  ": expected a positive rank count and one started process");
    }
  }
  job_.emplace(MPI_COMM_WORLD);
  grid_ranks_ = initial;
  if (initial > 1) job_->grow(initial - 1, spawn_spec(0));
  int size = initial;
  for (const auto& s : schedule_) {
    size += s.delta;
    if (size < 1) {
      throw std::invalid_argument("--resize item iter=" + std::to_string(s.iteration) + ":" +
                                  std::to_string(s.delta) + " leaves no rank");
    }
  }
}

MPI_Comm ElasticSession::communicator() const noexcept {
  return job_ ? job_->communicator() : world_;
}

int ElasticSession::rank() const noexcept {
  if (job_) return job_->rank();
  int r = 0;
  MPI_Comm_rank(world_, &r);
  return r;
}

int ElasticSession::size() const noexcept {
  if (job_) return job_->size();
  int s = 1;
  MPI_Comm_size(world_, &s);
  return s;
}

runtime::SpawnSpec ElasticSession::spawn_spec(int join_iteration) const {
  runtime::SpawnSpec spec;
  spec.command = bellows::runtime::current_executable();
  spec.args = args_;
  spec.args.insert(spec.args.end(), {"--join-iteration", std::to_string(join_iteration),
                                     "--join-grid-ranks", std::to_string(grid_ranks_)});
  return spec;
}

void ElasticSession::attach(runtime::Runtime& runtime) {
  runtime_ = &runtime;
  if (joined_after_size_ > 0) runtime.join_expansion(joined_after_size_);
}

bool ElasticSession::resize_before(int it) {
  if (it == first_iteration_ && joined_after_size_ > 0) return true;  // it just joined
  const auto step = std::find_if(schedule_.begin(), schedule_.end(),
                                 [&](const ResizeStep& s) { return s.iteration - 1 == it; });
  if (step == schedule_.end() || !job_) return true;
  const MPI_Comm before = job_->communicator();
  const int old_size = job_->size();
  nlohmann::json entry{{"before_iteration", step->iteration}, {"from_ranks", old_size}};
  if (step->delta > 0) {
    request_steady_ns_ = steady_ns();
    job_->grow(step->delta, spawn_spec(it));
    runtime_->expand_onto(job_->communicator());
    first_new_rank_ = old_size;
    entry["add"] = step->delta;
    const auto& grown = job_->grows().back();
    entry["grow_seconds"] = grown.total_seconds;
    entry["spawn_seconds"] = grown.spawn_seconds;
    entry["merge_seconds"] = grown.merge_seconds;
  } else {
    std::vector<int> leaving;
    for (int r = old_size + step->delta; r < old_size; ++r) leaving.push_back(r);
    const auto handoff = runtime_->prepare_shrink(leaving);
    unsigned long long bytes = handoff.bytes_moved, all_bytes = 0;
    double seconds = handoff.seconds, slowest = 0.0;
    MPI_Reduce(&bytes, &all_bytes, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, before);
    MPI_Reduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, before);
    // What the leavers ran stays counted: the final report lists only the ranks left.
    unsigned long long ran = handoff.leaving ? runtime_->stats().tasks_executed : 0, leavers_ran = 0;
    MPI_Reduce(&ran, &leavers_ran, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, before);
    job_->shrink(leaving);
    if (handoff.leaving) return false;
    runtime_->attach_shrunk(job_->communicator());
    entry["remove"] = leaving;
    entry["bytes_handed_to_backups"] = all_bytes / 2;  // each byte counted by sender and receiver
    entry["drain_seconds"] = slowest;
    entry["tasks_run_by_leaving_ranks"] = leavers_ran;
    entry["shrink_seconds"] = job_->shrinks().back().total_seconds;
  }
  entry["to_ranks"] = job_->size();
  if (job_->rank() == 0) telemetry_.push_back(entry);
  return true;
}

void ElasticSession::after_iteration(int /*it*/, const runtime::IterationReport& report) {
  if (first_new_rank_ < 0 || !job_) return;
  // Time from the expand request to the first task on each new rank. The ranks share
  // this host, whose steady clock all processes read alike.
  const std::int64_t mine = report.first_task_steady_ns;
  std::vector<std::int64_t> all(static_cast<std::size_t>(job_->size()));
  MPI_Gather(&mine, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, 0, job_->communicator());
  if (job_->rank() == 0 && !telemetry_.empty()) {
    nlohmann::json latencies = nlohmann::json::array();
    for (std::size_t r = static_cast<std::size_t>(first_new_rank_); r < all.size(); ++r) {
      latencies.push_back(all[r] == 0 ? nlohmann::json(nullptr)
                                      : nlohmann::json(static_cast<double>(all[r] - request_steady_ns_) * 1e-9));
    }
    telemetry_.back()["request_to_first_task_seconds"] = latencies;
  }
  first_new_rank_ = -1;
}

}  // namespace bellows::examples
