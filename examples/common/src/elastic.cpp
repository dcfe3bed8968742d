#include "bellows/examples/elastic.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace bellows::examples {
namespace {

constexpr const char* kLocalRanksVariable = "BELLOWS_LOCAL_RANKS";

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
  asks_ = *parse_resize_schedule(options.ask_controller, options.iterations, error);
  auto spawn = [this](int join_iteration) { return spawn_spec(join_iteration); };

  const auto attach_control_plane = [this] {
    if (!link_) return;
    if (!schedule_.empty()) {
      throw std::invalid_argument("--resize cannot be used under bellows run: the controller "
                                  "decides the resizes (bellows resize +K|-K asks it for one)");
    }
    link_->attach(*job_);
  };
  if (!asks_.empty() && std::getenv(runtime::ControlPlaneLink::kJobDirVariable) == nullptr) {
    throw std::invalid_argument("--ask-controller needs the job started by bellows run");
  }
  if (options.join_iteration >= 0) {  // spawned by a resize (or by the initial grow)
    auto joined = runtime::Membership::join();
    if (!joined) throw std::invalid_argument("--join-iteration given to a process that was not spawned");
    grid_ranks_ = options.join_grid_ranks;
    first_iteration_ = options.join_iteration;
    job_.emplace(std::move(*joined), spawn, first_iteration_);
    link_ = runtime::ControlPlaneLink::from_environment(job_->rank());
    attach_control_plane();
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
    grid_ranks_ = world_size;
    job_.emplace(runtime::Membership(MPI_COMM_WORLD), spawn);
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
  int size = initial;
  for (const auto& s : schedule_) {
    size += s.delta;
    if (size < 1) {
      throw std::invalid_argument("--resize item iter=" + std::to_string(s.iteration) + ":" +
                                  std::to_string(s.delta) + " leaves no rank");
    }
  }
  link_ = runtime::ControlPlaneLink::from_environment(0);
  runtime::Membership membership(MPI_COMM_WORLD);
  grid_ranks_ = initial;
  if (initial > 1) membership.grow(initial - 1, spawn_spec(0));
  job_.emplace(std::move(membership), spawn);
  attach_control_plane();
}

runtime::SpawnSpec ElasticSession::spawn_spec(int join_iteration) const {
  runtime::SpawnSpec spec;
  spec.command = bellows::runtime::current_executable();
  spec.args = args_;
  spec.args.insert(spec.args.end(), {"--join-iteration", std::to_string(join_iteration),
                                     "--join-grid-ranks", std::to_string(grid_ranks_)});
  // Rank 0 spawns: at the first grow the new ranks start at 1, at an expand at the size now.
  if (link_) spec.env = link_->spawn_environment(job_ ? job_->size() : 1);
  return spec;
}

bool ElasticSession::resize_before(int it) {
  const auto step = std::find_if(schedule_.begin(), schedule_.end(),
                                 [&](const ResizeStep& s) { return s.iteration - 1 == it; });
  if (step != schedule_.end() && rank() == 0) {
    const std::string reason = "--resize iter=" + std::to_string(step->iteration);
    if (step->delta > 0) {
      job_->request_expand(step->delta, reason);
    } else {
      std::vector<int> leaving;
      for (int r = size() + step->delta; r < size(); ++r) leaving.push_back(r);
      job_->request_shrink(std::move(leaving), reason);
    }
  }
  const auto ask = std::find_if(asks_.begin(), asks_.end(),
                                [&](const ResizeStep& s) { return s.iteration - 1 == it; });
  if (ask != asks_.end() && rank() == 0) {
    // The application's own request: the controller decides, and its decision comes back
    // as an event like any other.
    const auto answer = runtime::request_resize(ask->delta);
    std::printf("  asked the controller for %+d node(s) before iteration %d: %s (%s)\n", ask->delta,
                ask->iteration, answer.granted() ? "accepted" : "refused", answer.text.c_str());
    std::fflush(stdout);
  }
  if (link_) link_->poll();
  return job_->apply_pending(it) != runtime::ElasticJob::Outcome::left;
}

}  // namespace bellows::examples
