#pragma once
// Whether the host of the job's controller answers at all: what tells a controller whose
// process is gone (its host refuses the connection) from a controller this node cannot reach
// (cut off from the network, or the controller's host gone). See
// bellows/runtime/controller_loss.hpp for what the daemon does with the answer.

#include <chrono>
#include <string>

namespace bellows::daemon {

enum class HostAnswer {
  answered,  ///< the connection was accepted or refused: the host and the path to it are up
  silent,    ///< no answer within the timeout, or no route to the host
};

/// Tries one TCP connection to the host and port of `endpoint` ("tcp://HOST:PORT") for at
/// most `timeout`, and closes it. An ipc:// endpoint is on this host: answered. A host name
/// that does not resolve counts as silent. Blocks for at most `timeout` (plus the name's
/// lookup, from /etc/hosts on the clusters Bellows runs on).
[[nodiscard]] HostAnswer probe_controller_host(const std::string& endpoint,
                                               std::chrono::milliseconds timeout);

/// "answered" or "silent".
[[nodiscard]] const char* to_string(HostAnswer answer) noexcept;

}  // namespace bellows::daemon
