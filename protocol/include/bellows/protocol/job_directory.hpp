#pragma once
// The files of one job, in its job directory: the one description that `bellows run`, the
// controller, the daemon launchers, the `bellows` commands and the ranks all use.
//
//   JOB_DIR/                      0700, owned by the job's user; any length of path
//     controller.endpoint         where the controller listens (one line, "ipc://..." or
//                                 "tcp://..."); its ipc socket lives in a short socket
//                                 directory of the controller's host, never here
//                                 (transport/socket_directory.hpp)
//     events.jsonl                the event log: one line per resize transition
//     metrics.jsonl               every node report the controller received, with its time
//     nodes/NODE/uri              the PMIx URI of NODE's bellowsd (ranks attach to it)
//     nodes/NODE/bellowsd.log     what that daemon logged
//     nodes/NODE/pmix/            PMIx's rendezvous files of that daemon (no sockets)
//
// Header-only, no I/O: paths only.

#include <filesystem>
#include <string>

namespace bellows::protocol {

struct JobDirectory {
  std::filesystem::path root;

  [[nodiscard]] std::filesystem::path controller_endpoint_file() const { return root / "controller.endpoint"; }
  [[nodiscard]] std::filesystem::path event_log() const { return root / "events.jsonl"; }
  [[nodiscard]] std::filesystem::path metrics_log() const { return root / "metrics.jsonl"; }
  [[nodiscard]] std::filesystem::path node_dir(const std::string& node) const { return root / "nodes" / node; }
  [[nodiscard]] std::filesystem::path daemon_uri_file(const std::string& node) const { return node_dir(node) / "uri"; }
  [[nodiscard]] std::filesystem::path daemon_log(const std::string& node) const { return node_dir(node) / "bellowsd.log"; }
  [[nodiscard]] std::filesystem::path pmix_tmpdir(const std::string& node) const { return node_dir(node) / "pmix"; }
};

}  // namespace bellows::protocol
