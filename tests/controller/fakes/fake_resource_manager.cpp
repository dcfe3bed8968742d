#include "fake_resource_manager.hpp"

#include <algorithm>

namespace bellows::controller::testing {

FakeResourceManager::FakeResourceManager(const Clock& clock, std::size_t pool_size, std::string prefix)
    : clock_(clock), pool_(pool_size, std::move(prefix)) {}

RmRequestId FakeResourceManager::request_expand(const ExpandRequest& request, ExpandCallback done) {
  expand_requests_.push_back(request);
  Pending p;
  p.id = next_id_++;
  p.request = request;
  if (!expand_scripts_.empty()) {
    p.expand = std::move(expand_scripts_.front());
    expand_scripts_.pop_front();
  }
  p.never = p.expand.kind == ExpandScript::Kind::never;
  p.due = clock_.now() + p.expand.delay;
  p.expand_done = std::move(done);
  pending_.push_back(std::move(p));
  return pending_.back().id;
}

bool FakeResourceManager::cancel_expand(RmRequestId id) {
  cancel_calls_.push_back(id);
  auto it = std::find_if(pending_.begin(), pending_.end(),
                         [id](const Pending& p) { return p.id == id && !p.cancelled; });
  if (it == pending_.end()) return false;
  if (it->expand.ignore_cancel) {
    it->cancelled = true;  // answers anyway, as a broken resource manager would
  } else {
    pending_.erase(it);
  }
  return true;
}

void FakeResourceManager::release_nodes(const std::string& job, const std::vector<std::string>& nodes,
                                        ReleaseCallback done) {
  releases_.push_back({job, nodes});
  Pending p;
  p.release = {job, nodes};
  if (!release_scripts_.empty()) {
    p.release_script = std::move(release_scripts_.front());
    release_scripts_.pop_front();
  }
  p.never = p.release_script.kind == ReleaseScript::Kind::never;
  p.due = clock_.now() + p.release_script.delay;
  p.release_done = std::move(done);
  pending_.push_back(std::move(p));
}

RmResult<std::vector<std::string>> FakeResourceManager::idle_nodes() {
  if (!idle_status_.ok()) return {idle_status_, {}};
  return {{RmCode::ok, ""}, pool_.idle_nodes()};
}

RmResult<std::vector<PendingJob>> FakeResourceManager::pending_jobs() {
  if (!pending_status_.ok()) return {pending_status_, {}};
  return {{RmCode::ok, ""}, pending_jobs_};
}

RmResult<std::vector<std::string>> FakeResourceManager::nodes_of(const std::string& job) {
  auto nodes = pool_.nodes_of(job);
  if (nodes.empty()) return {{RmCode::unknown_job, "no job " + job}, {}};
  return {{RmCode::ok, ""}, std::move(nodes)};
}

void FakeResourceManager::progress() {
  const auto now = clock_.now();
  std::deque<Pending> due;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (!it->never && it->due <= now) {
      due.push_back(std::move(*it));
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  for (Pending& p : due) {
    if (p.expand_done) {
      ExpandAnswer answer;
      switch (p.expand.kind) {
        case ExpandScript::Kind::grant: {
          const unsigned count = p.expand.partial != 0 ? p.expand.partial : p.request.count;
          answer = pool_.allocate(p.request.job, count, count);
          break;
        }
        case ExpandScript::Kind::deny:
          answer.status = {RmCode::denied, p.expand.text};
          break;
        case ExpandScript::Kind::answer_timeout:
          answer.status = {RmCode::timeout, p.expand.text};
          break;
        case ExpandScript::Kind::never:
          break;
      }
      p.expand_done(std::move(answer));
    } else if (p.release_script.kind == ReleaseScript::Kind::fail) {
      p.release_done({p.release_script.code, p.release_script.text});
    } else {
      p.release_done(pool_.release(p.release.job, p.release.nodes));
    }
  }
}

}  // namespace bellows::controller::testing
