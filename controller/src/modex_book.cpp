#include "bellows/controller/modex_book.hpp"

#include <algorithm>

namespace bellows::controller {
namespace {

using protocol::CollectiveStatus;

std::string proc_text(const protocol::ModexRequest& request) {
  return "rank " + std::to_string(request.rank) + " of " + request.nspace;
}

}  // namespace

std::vector<ModexMessageFor> ModexBook::ask(const std::string& origin, const protocol::ModexRequest& request,
                                            const std::vector<std::string>& nodes) {
  std::set<std::string> others(nodes.begin(), nodes.end());
  others.erase(origin);
  if (others.empty()) {
    return {{origin, protocol::ModexReply{request.request_id, CollectiveStatus::not_found,
                                          "no other node of the job to host " + proc_text(request), ""}}};
  }
  const std::uint64_t id = next_id_++;
  std::vector<ModexMessageFor> asks;
  for (const std::string& node : others)
    asks.push_back({node, protocol::ModexRequest{id, request.nspace, request.rank}});
  requests_[id] = Pending{origin, request, std::move(others), {}};
  return asks;
}

std::vector<ModexMessageFor> ModexBook::answered(const std::string& node, const protocol::ModexReply& reply) {
  const auto it = requests_.find(reply.request_id);
  if (it == requests_.end() || it->second.waiting.erase(node) == 0) return {};
  Pending& pending = it->second;
  if (reply.status == CollectiveStatus::ok) return end(reply.request_id, CollectiveStatus::ok, "", reply.data);
  if (reply.status != CollectiveStatus::not_found) {
    // The host said why it cannot give the data (its rank is gone, PMIx failed).
    return end(reply.request_id, reply.status, node + ": " + reply.text, "");
  }
  if (!pending.waiting.empty()) return {};
  if (!pending.unreachable.empty()) return end(reply.request_id, CollectiveStatus::unreachable, pending.unreachable, "");
  return end(reply.request_id, CollectiveStatus::not_found, "no node of the job hosts " + proc_text(pending.request), "");
}

std::vector<ModexMessageFor> ModexBook::lost(const std::vector<std::string>& lost_nodes, const std::string& reason) {
  std::vector<ModexMessageFor> replies;
  for (auto it = requests_.begin(); it != requests_.end();) {
    Pending& pending = it->second;
    if (std::ranges::find(lost_nodes, pending.origin) != lost_nodes.end()) {
      it = requests_.erase(it);  // nobody to answer
      continue;
    }
    for (const std::string& node : lost_nodes) {
      if (pending.waiting.erase(node) != 0 && pending.unreachable.empty())
        pending.unreachable = "node " + node + ", which may host " + proc_text(pending.request) + ", is lost (" +
                              reason + ")";
    }
    const std::uint64_t id = it->first;
    ++it;
    if (pending.waiting.empty()) {
      for (auto& reply : end(id, CollectiveStatus::unreachable, pending.unreachable, "")) replies.push_back(std::move(reply));
    }
  }
  return replies;
}

std::vector<ModexMessageFor> ModexBook::end(std::uint64_t id, CollectiveStatus status, std::string text,
                                            std::string data) {
  const auto it = requests_.find(id);
  ModexMessageFor reply{it->second.origin,
                        protocol::ModexReply{it->second.request.request_id, status, std::move(text), std::move(data)}};
  requests_.erase(it);
  return {std::move(reply)};
}

}  // namespace bellows::controller
