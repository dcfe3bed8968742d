#include "bellows/controller/local_resource_manager.hpp"

#include <algorithm>
#include <utility>

namespace bellows::controller {

LocalResourceManager::LocalResourceManager(LocalNodePool& pool, const Clock& clock,
                                           std::chrono::milliseconds latency)
    : pool_(pool), clock_(clock), latency_(latency) {}

RmRequestId LocalResourceManager::request_expand(const ExpandRequest& request,
                                                 ExpandCallback done) {
  Pending p;
  p.id = next_id_++;
  p.due = clock_.now() + latency_;
  p.expand = request;
  p.expand_done = std::move(done);
  pending_.push_back(std::move(p));
  return pending_.back().id;
}

bool LocalResourceManager::cancel_expand(RmRequestId id) {
  if (id == 0) return false;
  auto it = std::find_if(pending_.begin(), pending_.end(),
                         [id](const Pending& p) { return p.id == id; });
  if (it == pending_.end()) return false;
  pending_.erase(it);
  return true;
}

void LocalResourceManager::release_nodes(const std::string& job,
                                         const std::vector<std::string>& nodes,
                                         ReleaseCallback done) {
  Pending p;
  p.due = clock_.now() + latency_;
  p.job = job;
  p.nodes = nodes;
  p.release_done = std::move(done);
  pending_.push_back(std::move(p));
}

RmResult<std::vector<std::string>> LocalResourceManager::idle_nodes() {
  return {{RmCode::ok, ""}, pool_.idle_nodes()};
}

RmResult<std::vector<PendingJob>> LocalResourceManager::pending_jobs() {
  return {{RmCode::ok, ""}, pool_.waiting_jobs()};
}

RmResult<std::vector<std::string>> LocalResourceManager::nodes_of(const std::string& job) {
  auto nodes = pool_.nodes_of(job);
  if (nodes.empty()) {
    return {{RmCode::unknown_job, "job " + job + " holds no node of the local pool"}, {}};
  }
  return {{RmCode::ok, ""}, std::move(nodes)};
}

void LocalResourceManager::progress() {
  // Take the due answers out first: a callback may start new requests.
  const auto now = clock_.now();
  std::deque<Pending> due;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->due <= now) {
      due.push_back(std::move(*it));
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  for (Pending& p : due) {
    if (p.expand_done) {
      p.expand_done(pool_.allocate(p.expand.job, p.expand.count, p.expand.min_count));
    } else {
      p.release_done(pool_.release(p.job, p.nodes));
    }
  }
}

}  // namespace bellows::controller
