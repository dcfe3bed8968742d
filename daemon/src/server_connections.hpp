#pragma once
// The stop of a PMIx server's connections, before PMIx_server_finalize: PMIx 4.2.2 cannot
// finalize a server that a peer still talks to (docs/daemon.md, "Stopping"). The sockets are
// PMIx's; they are found by the server's port (bellows/protocol/tcp_nodelay.hpp).

#include <chrono>
#include <cstddef>
#include <string>

namespace bellows::daemon {

/// What closing a server's connections found and did.
struct ClosedConnections {
  /// Connections open (tools or ranks) when the stop began.
  std::size_t open_at_stop = 0;
  /// Of those, the ones their peers closed within the limit, and the ones shut after it.
  std::size_t left_by_peers = 0;
  std::size_t shut = 0;
  /// Shut connections that PMIx had not closed yet when closing gave up waiting.
  std::size_t still_open = 0;
  /// Whether the listening socket was found and shut (no new connection comes).
  bool stopped_listening = false;
  double seconds = 0.0;

  /// One line for the daemon's log, e.g. "2 connection(s) open: 2 closed by their peers in
  /// 0.012 s".
  [[nodiscard]] std::string describe() const;
};

/// Shuts the listening socket on `port` (PMIx's listener thread then ends: no new connection),
/// waits until the peers of the connections accepted on it closed them or `limit` passed,
/// shuts those left (their peers see the server gone, and PMIx's progress thread closes them),
/// and waits up to `close_wait` for PMIx to have closed them. Meanwhile the server answers
/// what its peers ask as ever. Not from PMIx's progress thread.
ClosedConnections close_server_connections(int port, std::chrono::milliseconds limit,
                                           std::chrono::milliseconds close_wait);

}  // namespace bellows::daemon
