#pragma once
// TCP_NODELAY for PMIx's connections, on both ends (bellowsd and the ranks). PMIx 4.2.2 leaves
// Nagle's algorithm on for its TCP sockets and has no setting for it: a small message sent right
// after another waits for the peer's delayed ACK (~40 ms on Linux). The sockets are PMIx's, so
// they are found by port among this process's open descriptors (/proc/self/fd).

namespace bellows::protocol {

/// Which end of a connection the port names.
enum class PortSide {
  local,  ///< a server's accepted connections: their local port is the listening port
  peer,   ///< a client's connections to a server listening on that port
};

/// Sets TCP_NODELAY on every connected TCP socket of this process whose `side` port is `port`.
/// Returns how many sockets it set.
int set_nodelay_on_port(int port, PortSide side) noexcept;

}  // namespace bellows::protocol
