#include <bellows/runtime/first_node_takeover.hpp>

#include <algorithm>

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

}  // namespace bellows::runtime
