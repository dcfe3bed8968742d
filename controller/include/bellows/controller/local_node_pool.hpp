#pragma once
// The bookkeeping of the local backend: a pool of emulated nodes on this host, named
// <prefix>0 .. <prefix>N-1 ("local0", "local1", ...), each idle or allocated to one job, and
// the jobs waiting for nodes. The pool only records who holds what; starting a bellowsd for an
// emulated node belongs to a NodeLauncher, so that the pool stays free of process management.
//
// The local backend stands in for a batch system, so its nodes belong to the host, not to one
// job: a pool opened on a state file (every `bellows run` of the user opens the same one,
// BELLOWS_LOCAL_POOL, default /tmp/bellows-UID/local-pool.json) is shared by every process
// that opens it. Each operation locks the file (flock), reads it, applies, writes it back.
// The file records, per job, the process that holds its nodes (protocol::ProcessIdentity):
// nodes and waits of a job whose process is gone (killed) are given back at the next
// operation of anyone. A pool made without a file lives in one process (tests).

#include "bellows/controller/resource_manager.hpp"

#include <cstddef>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace bellows::controller {

/// Starts and stops what runs on one emulated node (its bellowsd) for a job. The local
/// backend's job control calls it when a resize starts daemons on newly granted nodes.
///
/// Thread safety: called from the controller's loop only.
class NodeLauncher {
 public:
  virtual ~NodeLauncher() = default;
  /// Starts the node's daemon for the job; returns at once. ok, or why it could not start.
  virtual RmStatus launch(const std::string& node, const std::string& job) = 0;
  /// Stops whatever launch() started on the node and waits until it is gone.
  virtual RmStatus stop(const std::string& node) = 0;
  /// Ends what is left of what launch() started on a node whose daemon went away on its own
  /// (it died, or its node did): nothing there is worth a clean stop, and a rank its daemon
  /// no longer watches must not run on. By default stop().
  virtual RmStatus stop_gone(const std::string& node) { return stop(node); }
};

/// A set of emulated nodes, which job holds each, and which jobs wait for nodes.
///
/// Allocation takes the lowest-numbered idle nodes, so that a run is reproducible; nodes
/// waited for go to the waiting jobs first, oldest first, as a batch system's queue would.
/// Errors are answered as RmStatus with a text that names the node and the job.
/// Thread safety: every method may be called from any thread (one mutex, and the file's
/// lock between processes).
class LocalNodePool {
 public:
  /// size nodes named prefix + index, in this process only. Throws std::invalid_argument
  /// when size is 0 or the prefix is empty.
  explicit LocalNodePool(std::size_t size, std::string prefix = "local");
  /// The pool kept in `state_file`, shared with every process that opens it; it grows to at
  /// least `at_least` nodes. Creates the file (0600) when missing. Throws
  /// std::invalid_argument for 0 nodes or an empty prefix, std::runtime_error naming the
  /// file when it cannot be opened, locked, read or written.
  LocalNodePool(std::filesystem::path state_file, std::size_t at_least, std::string prefix = "local");

  /// The number of nodes, idle or not.
  [[nodiscard]] std::size_t size() const;
  /// All node names in index order.
  [[nodiscard]] std::vector<std::string> names() const;
  /// True when the pool has a node of this name.
  [[nodiscard]] bool contains(const std::string& node) const;
  /// The job holding the node; std::nullopt when it is idle or no such node exists.
  [[nodiscard]] std::optional<std::string> owner_of(const std::string& node) const;

  /// Allocates nodes to the job: count when that many are idle; otherwise, when at least
  /// min_count are idle, all idle ones; otherwise nothing, with code denied. bad_request
  /// when job is empty, count is 0 or min_count is not in [1, count].
  [[nodiscard]] ExpandAnswer allocate(const std::string& job, unsigned count,
                                      unsigned min_count);
  /// Same as allocate(job, count, count): all or nothing.
  [[nodiscard]] ExpandAnswer allocate(const std::string& job, unsigned count) {
    return allocate(job, count, count);
  }

  /// Makes the listed nodes idle again. All or nothing: on any error no node changes.
  /// unknown_node for a name not in the pool, not_owner for a node idle or held by another
  /// job, bad_request for an empty list, an empty job or a node listed twice; the text names
  /// the node, e.g. "release of local3 by job 7: node is allocated to job 5".
  [[nodiscard]] RmStatus release(const std::string& job, const std::vector<std::string>& nodes);

  /// Records this process as the holder of job `job` and the listed nodes as the job's (a
  /// controller that takes a running job over: the nodes of a job whose process was killed
  /// went back to the pool at the next operation). All or nothing: unknown_node for a name not
  /// in the pool, not_owner for a node another job took meanwhile (the text names both),
  /// bad_request for an empty job or list.
  [[nodiscard]] RmStatus take_over(const std::string& job, const std::vector<std::string>& nodes);

  /// Releases every node of the job (when the job ends); returns how many.
  std::size_t release_all(const std::string& job);

  /// The job's nodes in index order.
  [[nodiscard]] std::vector<std::string> nodes_of(const std::string& job) const;
  /// The idle nodes in index order.
  [[nodiscard]] std::vector<std::string> idle_nodes() const;

  /// Puts the job in the queue of jobs waiting for `nodes` nodes (or updates its count);
  /// allocations of other jobs then leave the nodes it waits for. A job that gets its nodes
  /// from allocate() leaves the queue.
  void wait_for(const std::string& job, unsigned nodes);
  /// Takes the job out of the queue (it gave up).
  void stop_waiting(const std::string& job);
  /// The waiting jobs, oldest first.
  [[nodiscard]] std::vector<PendingJob> waiting_jobs() const;
  /// Who holds what now, one line: "local0 job-a, local1 idle, ...", for messages.
  [[nodiscard]] std::string holders_text() const;

 private:
  struct State {
    std::vector<std::string> owners;  ///< per node index: the job holding it, "" when idle
    std::vector<PendingJob> waiting;  ///< oldest first
    std::map<std::string, std::string> processes;  ///< job -> ProcessIdentity::text()
  };

  /// Runs f(state, changed) on the current state under the lock (and the file's), and saves
  /// the state when f set `changed`; returns what f returns.
  template <class F>
  auto update(F&& f) const;

  [[nodiscard]] std::optional<std::size_t> index_of(const State& state, const std::string& node) const;
  [[nodiscard]] std::string range_text(const State& state) const;

  std::string prefix_;
  std::filesystem::path state_file_;  ///< empty: this process only
  std::size_t at_least_ = 0;
  mutable std::mutex mutex_;
  mutable State state_;
};

}  // namespace bellows::controller
