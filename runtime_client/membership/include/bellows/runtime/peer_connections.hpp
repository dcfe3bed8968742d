#pragma once
// Ending this process's connections to hosts the job has lost, so that MPI_Finalize does not
// wait for them.
//
// MPICH 4.0.2 ch3 (src/mpid/ch3/src/ch3u_handle_connection.c, mpidi_pg.c): MPI_Finalize sends
// a CLOSE packet on every virtual connection still active (MPIDI_PG_Close_VCs) and waits in
// MPIDI_CH3U_VC_WaitForClose until each one was acknowledged by its peer or its connection
// terminated. A peer that died closed its sockets, so its connection terminates (the nemesis
// tcp netmod reads end of file and reports MPIDI_VC_EVENT_TERMINATED) and the survivor's
// finalize takes milliseconds. A peer on a node cut from the network answers nothing and
// closes nothing: no acknowledgement, no reset, and the survivor waits until TCP gives up
// retransmitting (tcp_retries2, about 15 minutes) or the node comes back. Shutting the
// survivor's own socket down (shutdown(2), both ways) makes the netmod read that same end of
// file at once: the connection terminates as if the peer had died, which it has as far as the
// job is concerned.

#include <string>
#include <vector>

namespace bellows::runtime {

/// What shut_down_connections_to() did.
struct ShutConnections {
  std::size_t sockets = 0;               ///< TCP sockets shut down
  std::vector<std::string> unresolved;  ///< hosts whose name resolved to no address
};

/// Shuts down, both ways, every TCP socket of this process whose peer is an address of one of
/// `hosts` (names resolved by getaddrinfo) that is not an address of this host (a lost host
/// that shares this host's addresses, as the local backend's nodes do, is left alone: its
/// peers' deaths close their sockets themselves). The sockets stay open: whoever owns one
/// reads end of file from it and closes it. Call it only once nothing of the job talks to
/// those hosts any more (the survivors rebuilt without them).
ShutConnections shut_down_connections_to(const std::vector<std::string>& hosts);

}  // namespace bellows::runtime
