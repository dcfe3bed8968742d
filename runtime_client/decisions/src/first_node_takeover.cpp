#include <bellows/runtime/first_node_takeover.hpp>

#include <algorithm>
#include <vector>

namespace bellows::runtime {

FirstNodeTakeover plan_first_node_takeover(const FirstNodeLossFacts& facts) {
  const auto no = [](std::string why) { return FirstNodeTakeover{false, {}, std::move(why)}; };
  if (facts.job_state != "RUNNING") return no("the job is " + (facts.job_state.empty() ? "unknown" : facts.job_state));
  if (!facts.batch_job) return no("the job is not a batch job");
  if (facts.batch_host.empty() || facts.batch_host == "(null)") return no("the job names no batch host");
  if (facts.batch_host_state.find("DOWN") == std::string::npos) {
    return no("the job's batch host " + facts.batch_host + " is " +
              (facts.batch_host_state.empty() ? "unknown" : facts.batch_host_state));
  }
  if (std::ranges::find(facts.job_nodes, facts.batch_host) != facts.job_nodes.end())
    return no("the job's batch host " + facts.batch_host + " is DOWN but still one of its nodes");
  if (facts.job_nodes.empty()) return no("the job has no node left");
  return {true, facts.job_nodes.front(),
          "the job's first node " + facts.batch_host + " (its batch host, where `bellows run` ran) is " +
              facts.batch_host_state + ": Slurm took it out of the job (no-kill), and the batch script and the "
              "job's controller died with it; the job runs on " + std::to_string(facts.job_nodes.size()) +
              (facts.job_nodes.size() == 1 ? " node" : " nodes") + ", and the daemon of " + facts.job_nodes.front() +
              ", the first of them, starts a controller that takes it over"};
}

SilentControllerVerdict keep_ranks_for_takeover(const SilentControllerFacts& facts) {
  const auto end = [](std::string why) { return SilentControllerVerdict{false, std::move(why)}; };
  if (!facts.slurmctld_said) return end("slurmctld does not answer either: this node is cut off, no takeover to wait for");
  if (!facts.controller_on_batch_host)
    return end("the controller took the job over after its first node was lost: no takeover to wait for");
  const FirstNodeLossFacts& job = *facts.slurmctld_said;
  if (job.job_state != "RUNNING")
    return end("slurmctld says the job is " + (job.job_state.empty() ? std::string("unknown") : job.job_state));
  if (!job.batch_job) return end("the job is not a batch job: no takeover to wait for");
  if (job.batch_host.empty() || job.batch_host == "(null)") return end("the job names no batch host: no takeover to wait for");
  if (job.batch_host_state.find("DOWN") != std::string::npos)
    return {true, "slurmctld says the job's batch host " + job.batch_host + " is " + job.batch_host_state +
                      ": the ranks are kept for the controller that takes the job over"};
  const std::string state = job.batch_host_state.empty() ? "unknown" : job.batch_host_state;
  const auto seconds = [](double s) { return std::to_string(static_cast<long long>(s)) + " s"; };
  if (facts.silent_seconds < facts.grace_seconds)
    return {true, "slurmctld says the job's batch host " + job.batch_host + " is " + state +
                      " (it sets a silent node DOWN after SlurmdTimeout): the ranks are kept for a takeover for "
                      "at most the takeover grace of " + seconds(facts.grace_seconds)};
  return end("slurmctld still says the job's batch host " + job.batch_host + " is " + state + " after " +
             seconds(facts.silent_seconds) + " of silence, past the takeover grace of " +
             seconds(facts.grace_seconds) + ": only this node cannot reach it");
}

double takeover_grace_seconds(std::optional<double> configured, std::optional<double> slurmd_timeout_seconds) {
  constexpr double kSlurmDefaultSlurmdTimeout = 300.0;
  if (configured) return *configured > 0.0 ? *configured : 0.0;
  // A NaN timeout compares false: the default too.
  const double timeout = slurmd_timeout_seconds && *slurmd_timeout_seconds > 0.0 ? *slurmd_timeout_seconds
                                                                                  : kSlurmDefaultSlurmdTimeout;
  return 1.5 * timeout;
}

namespace {

std::string ranks_text(const std::vector<std::uint32_t>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

TakeoverLossDeclaration lost_ranks_after_takeover(const TakeoverLossFacts& facts) {
  const auto nothing = [](std::string why) {
    return TakeoverLossDeclaration{TakeoverLossAction::nothing, {}, false, std::move(why)};
  };
  if (facts.decided_already) return nothing("the loss of " + facts.lost_node + " was decided on already");
  if (facts.lost_node_ranks.empty()) return nothing(facts.lost_node + " held no rank of the job: no rank to declare lost");
  if (!facts.every_survivor_reported && !facts.return_window_over)
    return {TakeoverLossAction::wait, {}, false, "waiting for every surviving daemon to come back and report its rank"};
  std::vector<std::uint32_t> lost = facts.lost_node_ranks;
  std::ranges::sort(lost);
  const auto [first, last] = std::ranges::unique(lost);
  lost.erase(first, last);
  std::erase_if(lost, [&facts](std::uint32_t rank) {
    return std::ranges::find(facts.survivor_ranks, rank) != facts.survivor_ranks.end();
  });
  if (lost.empty())
    return nothing("every rank " + facts.lost_node + " held (" + ranks_text(facts.lost_node_ranks) +
                   ") is reported by a survivor as its own: the survivors found the loss and renumbered already");
  const std::string size = facts.size_counts_them_out ? "the job's size counts them out already"
                                                      : "the job's size is lowered by them";
  std::string why = ranks_text(lost) + " on " + facts.lost_node +
                    ", the job's first node, lost before this controller took the job over: no survivor reports " +
                    (lost.size() == 1 ? "it" : "them") + " as its own; " + size;
  if (!facts.every_survivor_reported) why += " (not every surviving daemon came back or reported its rank in time)";
  return {TakeoverLossAction::declare, std::move(lost), !facts.size_counts_them_out, std::move(why)};
}

}  // namespace bellows::runtime
