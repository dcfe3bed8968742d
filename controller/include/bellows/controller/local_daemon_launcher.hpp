#pragma once
// The local backend's NodeLauncher: one bellowsd process per emulated node, on this host,
// registered with the job's controller. Each node gets a directory JOB_DIR/nodes/NODE with
// the daemon's PMIx rendezvous files, its URI file (what the node's ranks connect to) and
// its log.

#include "bellows/controller/local_node_pool.hpp"

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>

namespace bellows::controller {

/// Thread safety: one thread (the controller's loop) calls every method.
class LocalDaemonLauncher final : public NodeLauncher {
 public:
  struct Options {
    std::filesystem::path bellowsd;     ///< the bellowsd executable
    /// The job's private directory: bellowsd --job-dir, where it finds the controller.
    std::filesystem::path job_dir;
    bool verbose = false;               ///< bellowsd --verbose
    /// bellowsd --heartbeat-timeout: the job's recovery.heartbeat_timeout.
    std::chrono::milliseconds heartbeat_timeout{5000};
    std::chrono::milliseconds stop_grace{5000};  ///< SIGTERM -> SIGKILL
  };

  explicit LocalDaemonLauncher(Options options);
  /// Stops every daemon still running.
  ~LocalDaemonLauncher() override;
  LocalDaemonLauncher(const LocalDaemonLauncher&) = delete;
  LocalDaemonLauncher& operator=(const LocalDaemonLauncher&) = delete;

  /// Starts bellowsd for the node; ok once the process runs (it registers with the
  /// controller on its own), or why it could not start.
  RmStatus launch(const std::string& node, const std::string& job) override;
  /// SIGTERM, waits up to stop_grace, then SIGKILL; reaps the process.
  RmStatus stop(const std::string& node) override;

  /// The directory of a node: JOB_DIR/nodes/NODE.
  [[nodiscard]] std::filesystem::path node_dir(const std::string& node) const;
  /// The file holding the URI of a node's daemon (BELLOWS_DAEMON_URI=file:...).
  [[nodiscard]] std::filesystem::path uri_file(const std::string& node) const;
  /// The pid of a node's daemon, 0 when none runs.
  [[nodiscard]] pid_t pid_of(const std::string& node) const;

 private:
  Options options_;
  std::map<std::string, pid_t> running_;
};

}  // namespace bellows::controller
