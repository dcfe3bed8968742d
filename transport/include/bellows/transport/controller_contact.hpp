#pragma once
// How a process of a job reaches the job's controller: what the job directory says.
//
//   JOB_DIR/controller.endpoint   "ipc://SOCKET_DIR/controller.sock" or "tcp://ADDRESS:PORT"
//   JOB_DIR/controller.key        tcp only: the job's CURVE key pair, mode 0600
//
// The controller publishes both once it has bound; the daemons of the job's nodes and the
// `bellows` commands read them. On a cluster the job directory lives where every node of the
// job sees it (a shared home or project directory, mode 0700), so a daemon on any node, and
// `bellows status` on any node or on the submit host, finds the controller and proves it
// belongs to the job's user by holding the key. An ipc endpoint serves one host only.
//
// Thread safety: free functions without shared state.

#include <filesystem>
#include <optional>
#include <string>

#include "bellows/transport/endpoint.hpp"
#include "bellows/transport/security.hpp"

namespace bellows::transport {

/// Where the controller listens and, for tcp, the key that opens it.
struct ControllerContact {
  std::string endpoint;
  std::optional<CurveKeyPair> curve;  ///< set exactly when endpoint is tcp://

  /// Client options that reach this controller (endpoint and keys; the log is the caller's).
  [[nodiscard]] ClientOptions client_options() const;
};

/// True for "tcp://..." endpoints.
[[nodiscard]] bool is_tcp_endpoint(const std::string& endpoint);

/// The first IPv4 address this host's name resolves to (where a controller here listens for
/// other hosts). Throws TransportError naming the host when its name resolves to none.
[[nodiscard]] std::string this_host_address();

/// "tcp://ADDRESS:*": this_host_address(), any free port.
[[nodiscard]] std::string this_host_tcp_endpoint();

/// Writes contact into job_dir: the key file first (replacing one a previous run of the same
/// job id left), then the endpoint, so that whoever finds the endpoint finds the key. Throws
/// TransportError naming the file that could not be written.
void publish_controller_contact(const std::filesystem::path& job_dir, const ControllerContact& contact);

/// Reads what publish_controller_contact wrote. Throws TransportError naming the file and
/// the problem: no endpoint yet, a tcp endpoint without its key file, a key file others can
/// read (read_key_file's checks).
[[nodiscard]] ControllerContact read_controller_contact(const std::filesystem::path& job_dir);

}  // namespace bellows::transport
