#include "bellows/examples/elastic.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace bellows::examples {
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

ScheduledResizes::ScheduledResizes(const AppOptions& options, runtime::ElasticSession& session)
    : session_(session) {
  std::string error;
  auto schedule = parse_resize_schedule(options.resize, options.iterations, error);
  if (!schedule) throw std::invalid_argument(error);
  schedule_ = std::move(*schedule);
  asks_ = *parse_resize_schedule(options.ask_controller, options.iterations, error);
  if (session.control_plane() != nullptr && !schedule_.empty()) {
    throw std::invalid_argument("--resize cannot be used under bellows run: the controller "
                                "decides the resizes (bellows resize +K|-K asks it for one)");
  }
  if (!asks_.empty() && std::getenv(runtime::ControlPlaneLink::kJobDirVariable) == nullptr) {
    throw std::invalid_argument("--ask-controller needs the job started by bellows run");
  }
  const bool shrinks = std::any_of(schedule_.begin(), schedule_.end(),
                                   [](const ResizeStep& s) { return s.delta < 0; });
  if (!session.ranks_can_leave()) {
    if (shrinks) {
      throw std::invalid_argument("--resize shrinks the job, which needs it started by "
                                  "scripts/bellows-local (ranks of one mpiexec -n N cannot leave)");
    }
    if (!schedule_.empty()) {
      throw std::invalid_argument("--resize needs the job started by scripts/bellows-local");
    }
  }
  if (session.first_iteration() > 0) return;  // checked by the first process already
  int size = session.size();
  for (const auto& s : schedule_) {
    size += s.delta;
    if (size < 1) {
      throw std::invalid_argument("--resize item iter=" + std::to_string(s.iteration) + ":" +
                                  std::to_string(s.delta) + " leaves no rank");
    }
  }
}

void ScheduledResizes::post_before(int it) {
  if (session_.rank() != 0) return;
  auto& job = session_.job();
  const auto step = std::find_if(schedule_.begin(), schedule_.end(),
                                 [&](const ResizeStep& s) { return s.iteration - 1 == it; });
  if (step != schedule_.end()) {
    const std::string reason = "--resize iter=" + std::to_string(step->iteration);
    if (step->delta > 0) {
      job.request_expand(step->delta, reason);
    } else {
      std::vector<int> leaving;
      for (int r = session_.size() + step->delta; r < session_.size(); ++r) leaving.push_back(r);
      job.request_shrink(std::move(leaving), reason);
    }
  }
  const auto ask = std::find_if(asks_.begin(), asks_.end(),
                                [&](const ResizeStep& s) { return s.iteration - 1 == it; });
  if (ask != asks_.end()) {
    // The application's own request: the controller decides, and its decision comes back
    // as an event like any other.
    const auto answer = runtime::request_resize(ask->delta);
    std::printf("  asked the controller for %+d node(s) before iteration %d: %s (%s)\n", ask->delta,
                ask->iteration, answer.granted() ? "accepted" : "refused", answer.text.c_str());
    std::fflush(stdout);
  }
}

std::optional<runtime::JobEnd> run_elastic_iterations(const AppOptions& options, runtime::ElasticSession& session,
                                                      runtime::Runtime& runtime, ScheduledResizes& resizes,
                                                      std::span<const runtime::TiledMatrix* const> gather,
                                                      double flops, std::vector<IterationResult>& iterations) {
  for (int it = session.first_iteration();; ++it) {
    if (it >= options.iterations) {
      runtime::JobEnd end = runtime.finish(gather);
      if (end.completed()) return end;
      it = session.recover(it, end.report) - 1;
      forget_iterations_from(iterations, it + 1 - session.first_iteration());
      continue;
    }
    resizes.post_before(it);
    if (!session.before_iteration(it)) return std::nullopt;  // this rank left the job
    const auto report = runtime.run_iteration();
    if (!report.completed()) {  // ranks were lost: roll back to the buddies' checkpoint
      it = session.recover(it, report) - 1;
      forget_iterations_from(iterations, it + 1 - session.first_iteration());
      continue;
    }
    session.after_iteration(it, report);
    iterations.push_back(iteration_result(report, flops));
  }
}

}  // namespace bellows::examples
