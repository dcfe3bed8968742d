#pragma once
// A ResourceManager for tests: nodes come from a LocalNodePool, and every answer can be
// scripted (delay, denial with a text, timeout, no answer at all, a partial grant, a grant
// that ignores cancellation, a failed release). Time is the given clock's.

#include "bellows/controller/clock.hpp"
#include "bellows/controller/local_node_pool.hpp"
#include "bellows/controller/resource_manager.hpp"

#include <chrono>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace bellows::controller::testing {

/// How the fake answers one expansion request.
struct ExpandScript {
  enum class Kind { grant, deny, answer_timeout, never } kind = Kind::grant;
  std::chrono::milliseconds delay{700};
  unsigned partial = 0;       ///< grant: this many nodes instead of the count asked (0: all)
  std::string text;           ///< deny / answer_timeout: the answer's text
  bool ignore_cancel = false; ///< grant even after cancel_expand() (breaks the contract)

  static ExpandScript grant(std::chrono::milliseconds delay) { return {Kind::grant, delay, 0, "", false}; }
  static ExpandScript partial_grant(unsigned nodes, std::chrono::milliseconds delay) {
    return {Kind::grant, delay, nodes, "", false};
  }
  static ExpandScript deny(std::string text, std::chrono::milliseconds delay) {
    return {Kind::deny, delay, 0, std::move(text), false};
  }
  static ExpandScript answer_timeout(std::string text, std::chrono::milliseconds delay) {
    return {Kind::answer_timeout, delay, 0, std::move(text), false};
  }
  static ExpandScript never() { return {Kind::never, std::chrono::milliseconds(0), 0, "", false}; }
};

/// How the fake answers one release.
struct ReleaseScript {
  enum class Kind { pool, fail, never } kind = Kind::pool;
  std::chrono::milliseconds delay{100};
  RmCode code = RmCode::unavailable;  ///< fail: the answer's code
  std::string text;                   ///< fail: the answer's text

  /// Answers what the pool says (ok, or the pool's error).
  static ReleaseScript pool(std::chrono::milliseconds delay) { return {Kind::pool, delay, RmCode::ok, ""}; }
  static ReleaseScript fail(RmCode code, std::string text, std::chrono::milliseconds delay) {
    return {Kind::fail, delay, code, std::move(text)};
  }
  static ReleaseScript never() { return {Kind::never, std::chrono::milliseconds(0), RmCode::ok, ""}; }
};

/// A release the fake was asked for.
struct ReleaseCall {
  std::string job;
  std::vector<std::string> nodes;
  bool operator==(const ReleaseCall&) const = default;
};

class FakeResourceManager final : public ResourceManager {
 public:
  /// A pool of pool_size nodes named prefix0, prefix1, ...
  FakeResourceManager(const Clock& clock, std::size_t pool_size, std::string prefix = "node");

  LocalNodePool& pool() noexcept { return pool_; }

  /// The next requests are answered by these scripts, in order; once they are used up,
  /// by ExpandScript::grant(700 ms) and ReleaseScript::pool(100 ms).
  void script_expand(ExpandScript script) { expand_scripts_.push_back(std::move(script)); }
  void script_release(ReleaseScript script) { release_scripts_.push_back(std::move(script)); }
  void set_pending_jobs(std::vector<PendingJob> jobs) { pending_jobs_ = std::move(jobs); }
  /// idle_nodes() / pending_jobs() answer this status (ok again: they answer the pool's and
  /// set_pending_jobs()' values).
  void set_idle_nodes_status(RmStatus status) { idle_status_ = std::move(status); }
  void set_pending_jobs_status(RmStatus status) { pending_status_ = std::move(status); }

  /// What the fake was asked.
  [[nodiscard]] const std::vector<ExpandRequest>& expand_requests() const noexcept { return expand_requests_; }
  [[nodiscard]] const std::vector<RmRequestId>& cancel_calls() const noexcept { return cancel_calls_; }
  [[nodiscard]] const std::vector<ReleaseCall>& releases() const noexcept { return releases_; }
  /// Answers not delivered yet (including those that never come).
  [[nodiscard]] std::size_t unanswered() const noexcept { return pending_.size(); }

  [[nodiscard]] std::string name() const override { return "fake"; }
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
    bool never = false;
    bool cancelled = false;
    Clock::time_point due;
    ExpandRequest request;
    ExpandScript expand;
    ExpandCallback expand_done;
    ReleaseCall release;
    ReleaseScript release_script;
    ReleaseCallback release_done;
  };

  const Clock& clock_;
  LocalNodePool pool_;
  RmRequestId next_id_ = 1;
  std::deque<ExpandScript> expand_scripts_;
  std::deque<ReleaseScript> release_scripts_;
  std::vector<PendingJob> pending_jobs_;
  RmStatus idle_status_;
  RmStatus pending_status_;
  std::vector<ExpandRequest> expand_requests_;
  std::vector<RmRequestId> cancel_calls_;
  std::vector<ReleaseCall> releases_;
  std::deque<Pending> pending_;
};

}  // namespace bellows::controller::testing
