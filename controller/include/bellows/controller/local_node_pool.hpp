#pragma once
// The bookkeeping of the local backend: a fixed pool of emulated nodes on this host, named
// <prefix>0 .. <prefix>N-1 ("local0", "local1", ...), each idle or allocated to one job.
// The pool only records who holds what; starting a bellowsd for an emulated node belongs to a
// NodeLauncher, so that the pool stays free of process management.

#include "bellows/controller/resource_manager.hpp"

#include <cstddef>
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
};

/// A fixed set of emulated nodes and which job holds each.
///
/// Allocation takes the lowest-numbered idle nodes, so that a run is reproducible.
/// Errors are answered as RmStatus with a text that names the node and the job.
/// Thread safety: every method may be called from any thread (one mutex).
class LocalNodePool {
 public:
  /// size nodes named prefix + index. Throws std::invalid_argument when size is 0 or the
  /// prefix is empty.
  explicit LocalNodePool(std::size_t size, std::string prefix = "local");

  /// The number of nodes, idle or not.
  [[nodiscard]] std::size_t size() const noexcept { return owners_.size(); }
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

  /// Releases every node of the job (when the job ends); returns how many.
  std::size_t release_all(const std::string& job);

  /// The job's nodes in index order.
  [[nodiscard]] std::vector<std::string> nodes_of(const std::string& job) const;
  /// The idle nodes in index order.
  [[nodiscard]] std::vector<std::string> idle_nodes() const;

 private:
  [[nodiscard]] std::optional<std::size_t> index_of(const std::string& node) const;
  [[nodiscard]] std::string range_text() const;

  std::string prefix_;
  mutable std::mutex mutex_;
  std::vector<std::string> owners_;  ///< per node index: the job holding it, "" when idle
};

}  // namespace bellows::controller
