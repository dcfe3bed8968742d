#pragma once
// The controller's bookkeeping of PMIx direct modex requests across the job's nodes: a client's
// PMIx_Get of a key of a rank that its node does not host reaches its daemon's direct_modex
// upcall, which asks the controller (ModexRequest). The controller does not know where every
// rank of a namespace runs, so it asks the daemons of the job's other nodes; the one hosting the
// rank answers with its blob (PMIx_server_dmodex_request), the others answer not_found. The
// first blob ends the request; not_found from every node asked ends it with not_found (a rank
// not in the job); a node lost before it answered counts as unreachable, and the request ends
// with unreachable when no node had the blob and one was lost. A decision unit: no I/O,
// threads or clock.

#include <bellows/protocol/messages.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace bellows::controller {

/// A protocol message for the daemon of `node`.
struct ModexMessageFor {
  std::string node;
  protocol::Message message;
  bool operator==(const ModexMessageFor&) const = default;
};

/// Thread safety: none; one thread (the controller's loop) uses it.
class ModexBook {
 public:
  /// `origin`'s daemon asks for a rank's data (its request); `nodes`: the job's nodes whose
  /// daemons are registered. Returns the ModexRequests to send (under ids of the book's), or
  /// at once the origin's not_found ModexReply when there is no other node to ask.
  std::vector<ModexMessageFor> ask(const std::string& origin, const protocol::ModexRequest& request,
                                   const std::vector<std::string>& nodes);

  /// `node` answered the book's request (reply.request_id is the book's id). Returns the origin's
  /// ModexReply once the request ends; none while others are still to answer, or for an answer
  /// to no request pending (late, or from a node not asked).
  std::vector<ModexMessageFor> answered(const std::string& node, const protocol::ModexReply& reply);

  /// The nodes are lost: they count as unreachable in every request that waits for them, and
  /// requests they made are dropped. Returns the origins' replies of the requests that end.
  std::vector<ModexMessageFor> lost(const std::vector<std::string>& lost_nodes, const std::string& reason);

  [[nodiscard]] std::size_t pending() const { return requests_.size(); }

 private:
  struct Pending {
    std::string origin;
    protocol::ModexRequest request;  ///< as the origin sent it (its id)
    std::set<std::string> waiting;   ///< nodes still to answer
    std::string unreachable;         ///< why a node asked was lost, "" when none was
  };
  std::vector<ModexMessageFor> end(std::uint64_t id, protocol::CollectiveStatus status, std::string text,
                                   std::string data);

  std::map<std::uint64_t, Pending> requests_;
  std::uint64_t next_id_ = 1;
};

}  // namespace bellows::controller
