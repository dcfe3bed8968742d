#pragma once
// TCP_NODELAY for PMIx's connections. PMIx 4.2.2 leaves Nagle's algorithm on for its TCP
// sockets and has no setting for it: a small message sent right after another waits for
// the peer's delayed ACK (~40 ms on Linux). The sockets are PMIx's, so they are found by
// their port among this process's open descriptors.

namespace bellows::daemon {

/// Sets TCP_NODELAY on every connected TCP socket of this process whose local port (a
/// server's accepted connections) is port. Returns how many sockets it found.
int set_nodelay_on_local_port(int port) noexcept;

}  // namespace bellows::daemon
