#pragma once
// The local backend of the resource manager: grants and takes back emulated nodes of a
// LocalNodePool on this host, after an optional latency that imitates a batch system.

#include "bellows/controller/clock.hpp"
#include "bellows/controller/local_node_pool.hpp"
#include "bellows/controller/resource_manager.hpp"

#include <chrono>
#include <deque>

namespace bellows::controller {

/// ResourceManager over a LocalNodePool. Answers come from progress() once `latency` has
/// passed on the clock since the call; an expansion is decided when it is answered (so a
/// release answered earlier can make room for it). It never answers with timeout: the pool
/// decides at once. pending_jobs() are the jobs waiting in the pool's queue for their first
/// nodes (other `bellows run` of this host on a shared pool).
///
/// Thread safety: as ResourceManager (one thread). The pool may be shared with other
/// users, which it allows.
class LocalResourceManager final : public ResourceManager {
 public:
  /// pool and clock must outlive this object.
  LocalResourceManager(LocalNodePool& pool, const Clock& clock,
                       std::chrono::milliseconds latency = std::chrono::milliseconds(0));

  [[nodiscard]] std::string name() const override { return "local"; }
  RmRequestId request_expand(const ExpandRequest& request, ExpandCallback done) override;
  bool cancel_expand(RmRequestId id) override;
  void release_nodes(const std::string& job, const std::vector<std::string>& nodes,
                     ReleaseCallback done) override;
  [[nodiscard]] RmResult<std::vector<std::string>> idle_nodes() override;
  [[nodiscard]] RmResult<std::vector<PendingJob>> pending_jobs() override;
  [[nodiscard]] RmResult<std::vector<std::string>> nodes_of(const std::string& job) override;
  void progress() override;

 private:
  struct Pending {
    RmRequestId id = 0;  ///< 0 for a release
    Clock::time_point due;
    ExpandRequest expand;
    ExpandCallback expand_done;
    std::string job;
    std::vector<std::string> nodes;
    ReleaseCallback release_done;
  };

  LocalNodePool& pool_;
  const Clock& clock_;
  std::chrono::milliseconds latency_;
  RmRequestId next_id_ = 1;
  std::deque<Pending> pending_;
};

}  // namespace bellows::controller
