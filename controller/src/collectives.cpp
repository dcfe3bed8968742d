// PMIx fences and direct modex across the job's nodes, as the controller relays them between
// the daemons (docs/daemon.md): the bookkeeping is FenceBook's and ModexBook's; this file sends
// what they decide.

#include "bellows/controller/controller_service.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace bellows::controller {

void ControllerService::on_fence_contribution(const std::string& node, const protocol::FenceContribution& contribution) {
  for (const FenceReleaseFor& release : fences_.contribute(node, contribution)) {
    if (release.release.status == protocol::CollectiveStatus::refused)
      std::fprintf(stderr, "bellows run: warning: %s\n", release.release.text.c_str());
    if (!send(release.node, release.release))
      std::fprintf(stderr, "bellows run: info: fence release %llu not sent: the daemon of %s is gone\n",
                   static_cast<unsigned long long>(release.release.contribution_id), release.node.c_str());
  }
}

void ControllerService::on_modex_request(const std::string& node, const protocol::ModexRequest& request) {
  std::vector<std::string> nodes;
  for (const auto& [name, peer] : daemons_) nodes.push_back(name);
  for (const ModexMessageFor& out : modex_.ask(node, request, nodes)) send(out.node, out.message);
}

void ControllerService::on_modex_reply(const std::string& node, const protocol::ModexReply& reply) {
  for (const ModexMessageFor& out : modex_.answered(node, reply)) send(out.node, out.message);
}

void ControllerService::collectives_lost(const protocol::RanksLost& lost) {
  if (!failures_seen_by_collectives_.insert(lost.failure_id).second) return;
  for (const FenceReleaseFor& release : fences_.lost(lost.lost_ranks, lost.lost_nodes, lost.reason)) {
    std::fprintf(stderr, "bellows run: info: %s\n", release.release.text.c_str());
    send(release.node, release.release);
  }
  for (const ModexMessageFor& out : modex_.lost(lost.lost_nodes, lost.reason)) send(out.node, out.message);
}

}  // namespace bellows::controller
