#pragma once
// The files of one job, in its job directory, and the environment its processes find: the one
// description that `bellows run`, the controller, the daemon launchers, the `bellows` commands
// and the ranks all use.
//
//   JOB_DIR/                      0700, owned by the job's user; any length of path
//     controller.endpoint         where the controller listens (one line, "ipc://..." or
//                                 "tcp://..."); its ipc socket lives in a short socket
//                                 directory of the controller's host, never here
//                                 (transport/socket_directory.hpp)
//     controller.key              tcp only: the job's CURVE key pair (0600), which the
//                                 daemons and the `bellows` commands present
//                                 (transport/controller_contact.hpp)
//     job.port                    the MPI port the job's first rank opened: where the ranks
//                                 that daemons start connect to join the job
//     joins/RESIZE/               the files the ranks of one grow trade while they join
//                                 (runtime::JoinExchange); the job's first rank removes it
//                                 once they joined
//     job.json                    the job's nodes, ranks, policy and daemons now, for a
//                                 controller that takes the job over (bellows run --attach)
//     controller.lock             held by the job's controller: one per job
//     events.jsonl                the event log: one line per resize transition
//     metrics.jsonl               every node report the controller received, with its time
//     nodes/NODE/uri              the PMIx URI of NODE's bellowsd (ranks attach to it)
//     nodes/NODE/bellowsd.log     what that daemon logged
//     nodes/NODE/pmix/            PMIx's rendezvous files of that daemon (no sockets)
//     nodes/NODE/rank.env         the PMIx client variables of the job's first rank, which
//                                 NODE's daemon registered and `bellows run` starts
//
// Header-only, no I/O: paths and names only.

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace bellows::protocol {

struct JobDirectory {
  std::filesystem::path root;

  [[nodiscard]] std::filesystem::path controller_endpoint_file() const { return root / "controller.endpoint"; }
  [[nodiscard]] std::filesystem::path controller_key_file() const { return root / "controller.key"; }
  [[nodiscard]] std::filesystem::path job_port_file() const { return root / "job.port"; }
  /// Where the ranks of resize `resize_id` (0: the job's start) trade their join files.
  [[nodiscard]] std::filesystem::path join_dir(std::uint64_t resize_id) const {
    return root / "joins" / std::to_string(resize_id);
  }
  [[nodiscard]] std::filesystem::path job_record() const { return root / "job.json"; }
  [[nodiscard]] std::filesystem::path event_log() const { return root / "events.jsonl"; }
  [[nodiscard]] std::filesystem::path metrics_log() const { return root / "metrics.jsonl"; }
  [[nodiscard]] std::filesystem::path node_dir(const std::string& node) const { return root / "nodes" / node; }
  [[nodiscard]] std::filesystem::path daemon_uri_file(const std::string& node) const { return node_dir(node) / "uri"; }
  [[nodiscard]] std::filesystem::path daemon_log(const std::string& node) const { return node_dir(node) / "bellowsd.log"; }
  [[nodiscard]] std::filesystem::path pmix_tmpdir(const std::string& node) const { return node_dir(node) / "pmix"; }
  /// "NAME=VALUE" a line: what a rank of NODE that the controller starts itself must add to
  /// its environment to be the PMIx client its daemon registered (StartRank).
  [[nodiscard]] std::filesystem::path rank_environment_file(const std::string& node) const {
    return node_dir(node) / "rank.env";
  }
  /// The pid of that rank's process (its launcher), one line, written by whoever started it
  /// once it runs: its node's daemon, which did not start it, watches it by this while the
  /// controller is gone.
  [[nodiscard]] std::filesystem::path rank_pid_file(const std::string& node) const {
    return node_dir(node) / "rank.pid";
  }
};

/// What a job's processes find in their environment.
namespace job_environment {
/// The job directory (set by `bellows run` for the program it starts).
inline constexpr const char* kJobDir = "BELLOWS_JOB_DIR";
/// The job's nodes at start, comma-separated, rank r on node r.
inline constexpr const char* kNodes = "BELLOWS_NODES";
/// The job's initial size: its first process grows it to that many ranks (bellows run,
/// scripts/bellows-local).
inline constexpr const char* kInitialRanks = "BELLOWS_LOCAL_RANKS";
/// In processes an expand spawns: their nodes in rank order, and the rank of the first.
inline constexpr const char* kExpandNodes = "BELLOWS_EXPAND_NODES";
inline constexpr const char* kExpandFirstRank = "BELLOWS_EXPAND_FIRST_RANK";
/// In processes a resize spawns: the iteration they join at, and the ranks the job's fixed
/// mapping is over.
inline constexpr const char* kJoinIteration = "BELLOWS_JOIN_ITERATION";
inline constexpr const char* kGridRanks = "BELLOWS_GRID_RANKS";
/// In a rank a daemon started (StartRank): the node it runs on, whose daemon it attaches to.
inline constexpr const char* kNode = "BELLOWS_NODE";
/// In a rank a daemon started: how it joins the running job. "port": with the other ranks of
/// its grow, through the files of JobDirectory::join_dir(), and then the port the job's first
/// rank opened and wrote to JobDirectory::job_port_file().
inline constexpr const char* kJoin = "BELLOWS_JOIN";
/// In a rank a daemon started (set by the controller in StartRank's environment): the resize
/// it was started for (0: the job's start), its ordinal among the ranks that resize adds
/// (0..count-1, in the order of the resize's nodes) and their count.
inline constexpr const char* kJoinResize = "BELLOWS_JOIN_RESIZE";
inline constexpr const char* kJoinOrdinal = "BELLOWS_JOIN_ORDINAL";
inline constexpr const char* kJoinCount = "BELLOWS_JOIN_COUNT";
/// The PMIx URI of a rank's daemon ("file:PATH" or the URI itself), for a rank started
/// without a job directory.
inline constexpr const char* kDaemonUri = "BELLOWS_DAEMON_URI";

/// The value of variable `name` in this process's environment, "" when it is unset.
inline std::string value_of(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

/// The variables only a spawn sets: a program that starts a new job drops them.
inline constexpr const char* kSpawnOnly[] = {kExpandNodes, kExpandFirstRank, kJoinIteration, kGridRanks};
}  // namespace job_environment

}  // namespace bellows::protocol
