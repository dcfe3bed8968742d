#pragma once
// PMIx's TCP sockets, found by port among this process's open descriptors (/proc/self/fd): PMIx
// 4.2.2 gives a host no handle on them. Two uses: TCP_NODELAY on both ends (bellowsd and the
// ranks), since PMIx leaves Nagle's algorithm on and has no setting for it (a small message
// sent right after another waits for the peer's delayed ACK, ~40 ms on Linux); and the
// daemon's stop, which shuts the server's listening socket and the connections left open
// before PMIx_server_finalize (docs/daemon.md, "Stopping").

#include <sys/types.h>

#include <vector>

namespace bellows::protocol {

/// Which end of a connection the port names.
enum class PortSide {
  local,  ///< a server's accepted connections: their local port is the listening port
  peer,   ///< a client's connections to a server listening on that port
};

/// One TCP socket of this process: its descriptor, the inode that names it (what
/// /proc/self/fd/FD links to: socket:[INODE]) and whether it is a listening socket.
struct PortSocket {
  int fd = -1;
  ino_t inode = 0;
  bool listening = false;
};

/// The TCP sockets of this process whose `side` port is `port`: the connected ones and, for
/// PortSide::local, the listening socket too.
std::vector<PortSocket> sockets_on_port(int port, PortSide side) noexcept;

/// Whether `socket.fd` is still open and still names the same socket (its owner may have
/// closed it, and the descriptor may have been reused since).
bool still_open(const PortSocket& socket) noexcept;

/// Sets TCP_NODELAY on every connected TCP socket of this process whose `side` port is `port`.
/// Returns how many sockets it set.
int set_nodelay_on_port(int port, PortSide side) noexcept;

}  // namespace bellows::protocol
