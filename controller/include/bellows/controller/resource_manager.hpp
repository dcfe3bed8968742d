#pragma once
// The resource manager as the controller sees it: the system that owns the nodes (Slurm, or
// the local backend of emulated nodes on one host). This is a process boundary, so every
// answer carries a code and a readable text instead of throwing.
//
// Completion model. Asking for nodes or giving them back takes time (a Slurm expansion takes
// about 0.6-0.9 s), so request_expand() and release_nodes() return at once and report their
// answer later through the callback they were given. Callbacks run only from inside
// progress(), on the thread that calls progress() (the controller's loop), never from inside
// the call that started the operation and never from another thread. An implementation that
// talks to its system from a thread of its own queues the answers and hands them over in
// progress(). This keeps the controller single-threaded and lets tests run deterministically.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace bellows::controller {

/// What an answer of the resource manager means.
enum class RmCode {
  ok,            ///< granted / released / query answered
  denied,        ///< the resource manager will not grant this request now (text says why)
  timeout,       ///< nothing could be granted before the request's timeout
  cancelled,     ///< the request was withdrawn with cancel_expand()
  bad_request,   ///< the request itself is malformed (zero nodes, empty job id, ...)
  unknown_job,   ///< the resource manager does not know the job
  unknown_node,  ///< a named node does not exist
  not_owner,     ///< a named node is not allocated to the job
  unavailable,   ///< the resource manager could not be reached
};

/// The code's name as written in logs: "ok", "denied", "not_owner", ...
[[nodiscard]] std::string_view to_string(RmCode code) noexcept;
/// The inverse of to_string(RmCode); false when text names no code.
[[nodiscard]] bool parse_rm_code(std::string_view text, RmCode& code) noexcept;

/// An answer of the resource manager: a code and a text for people.
struct RmStatus {
  RmCode code = RmCode::ok;
  std::string text;
  [[nodiscard]] bool ok() const noexcept { return code == RmCode::ok; }
};

/// The answer to an expansion request. nodes is filled only when status.ok().
struct ExpandAnswer {
  RmStatus status;
  std::vector<std::string> nodes;
};

/// An answer to a query: value is meaningful only when status.ok().
template <typename T>
struct RmResult {
  RmStatus status;
  T value{};
};

/// A job waiting in the resource manager's queue (what the policy weighs a shrink against).
struct PendingJob {
  std::string id;
  unsigned nodes = 0;  ///< nodes it waits for
};

/// What a policy tick weighs of the partition: the nodes nobody holds and the jobs waiting.
struct PartitionLoad {
  int idle_nodes = 0;
  int pending_jobs = 0;
};

/// A request for more nodes for a running job.
struct ExpandRequest {
  std::string job;          ///< the job to grow (Slurm job id, or the local job name)
  unsigned count = 0;       ///< nodes wanted, at least 1
  unsigned min_count = 1;   ///< the fewest nodes worth granting, 1 <= min_count <= count
  std::chrono::milliseconds timeout{0};  ///< give up this long after the call
  /// Nodes the grant must not include: those the job lost (a replacement asks for a node
  /// elsewhere). Slurm: the allocation's excluded nodes (ExcNodeList, sbatch --exclude). The
  /// local backend, whose nodes are emulated on one host, grants as if it were empty.
  std::vector<std::string> exclude{};
};

/// An allocation besides the job itself that holds some of the job's nodes (Slurm: a
/// companion allocation, slurm_expand_strategy.hpp). The job record keeps them, so that a
/// controller taking the job over knows which allocation holds which node.
struct CompanionAllocation {
  std::string id;                  ///< the allocation's id (a Slurm job id: "43")
  std::vector<std::string> nodes;  ///< the job's nodes it holds, in the order they were granted
  bool operator==(const CompanionAllocation&) const = default;
};

/// Identifies one expansion request to cancel_expand(); 0 is never a valid id.
using RmRequestId = std::uint64_t;

/// The resource manager, as the controller uses it.
///
/// Thread safety: one thread (the controller's loop) calls every method; implementations
/// need not be callable from several threads at once.
/// Errors: methods do not throw for anything the resource manager answers; they report it as
/// an RmStatus. They may throw std::bad_alloc.
class ResourceManager {
 public:
  using ExpandCallback = std::function<void(ExpandAnswer)>;
  using ReleaseCallback = std::function<void(RmStatus)>;

  virtual ~ResourceManager() = default;

  /// A short name for logs: "slurm", "local", "fake".
  [[nodiscard]] virtual std::string name() const = 0;

  /// Asks for request.count more nodes for request.job. Returns at once.
  ///
  /// Promises: `done` is called exactly once from a later progress() (unless
  /// cancel_expand() returned true first) with one of
  /// - ok: between min_count and count distinct nodes, none of them already the job's,
  ///   none in request.exclude (but for the local backend);
  ///   from then on nodes_of(job) includes them;
  /// - denied (text says why, e.g. "2 nodes requested, 1 idle"), timeout (nothing could be
  ///   granted within request.timeout), bad_request, unknown_job or unavailable.
  /// Timing: an implementation answers within request.timeout plus its own processing time
  /// (Slurm: about 0.6-0.9 s for a grant). A caller must still guard itself with a timer
  /// of its own, since a resource manager that stopped answering cannot keep this promise.
  virtual RmRequestId request_expand(const ExpandRequest& request, ExpandCallback done) = 0;

  /// Withdraws a request that has not been answered yet. Returns true when the request was
  /// still pending: its callback will never be called and any node the resource manager had
  /// set aside for it goes back to the pool without ever belonging to the job. Returns
  /// false for an unknown id or a request already answered (its answer stands). Immediate.
  virtual bool cancel_expand(RmRequestId id) = 0;

  /// Gives nodes of a job back. Returns at once.
  ///
  /// Promises: `done` is called exactly once from a later progress(), with ok once every
  /// listed node has left the job (processes the job still had there are ended by the
  /// resource manager), or an error naming the first offending node (not_owner,
  /// unknown_node), or unavailable. On an error no node changes hands (all or nothing). A
  /// node that failed and that the resource manager took out of the job itself (Slurm: a node
  /// gone DOWN under no-kill) has left the job already: it counts as released, not as
  /// not_owner.
  /// Timing: Slurm answers in well under a second; a caller guards itself with a timer.
  virtual void release_nodes(const std::string& job, const std::vector<std::string>& nodes,
                             ReleaseCallback done) = 0;

  /// The nodes nobody holds now. Synchronous: may block for one round trip to the resource
  /// manager (Slurm: one slurmctld RPC, tens of milliseconds).
  [[nodiscard]] virtual RmResult<std::vector<std::string>> idle_nodes() = 0;

  /// The jobs waiting for nodes, oldest first. Synchronous, like idle_nodes().
  [[nodiscard]] virtual RmResult<std::vector<PendingJob>> pending_jobs() = 0;

  /// The nodes the job holds now, in allocation order (its first node first). Synchronous,
  /// like idle_nodes(). unknown_job when the resource manager does not know the job.
  [[nodiscard]] virtual RmResult<std::vector<std::string>> nodes_of(const std::string& job) = 0;

  /// Delivers the answers that arrived since the last call, by calling their callbacks on
  /// this thread. Never blocks.
  virtual void progress() = 0;

  /// The allocations besides the job itself that hold some of its nodes now, in the order
  /// they were granted (Slurm companions); none by default. Immediate: what the answers
  /// progress() delivered left, without asking the resource manager.
  [[nodiscard]] virtual std::vector<CompanionAllocation> companion_allocations(const std::string& /*job*/) const {
    return {};
  }
};

/// Asks rm for its idle nodes and its pending jobs. When either question is not answered,
/// the status names it and the resource manager's words ("pending jobs: slurm_load_jobs:
/// Socket timed out ..."): a policy tick on a guess of 0 would take nodes a waiting job is
/// about to get, or keep nodes it waits for.
[[nodiscard]] RmResult<PartitionLoad> partition_load(ResourceManager& rm);

}  // namespace bellows::controller
