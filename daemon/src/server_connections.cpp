#include "server_connections.hpp"

#include <bellows/protocol/tcp_nodelay.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <thread>
#include <vector>

namespace bellows::daemon {
namespace {

using Clock = std::chrono::steady_clock;
using protocol::PortSocket;

constexpr std::chrono::milliseconds kPoll{5};

/// Waits until none of `sockets` is open any more, or `deadline`; returns those still open.
std::vector<PortSocket> wait_closed(std::vector<PortSocket> sockets, Clock::time_point deadline) {
  for (;;) {
    std::erase_if(sockets, [](const PortSocket& s) { return !protocol::still_open(s); });
    if (sockets.empty() || Clock::now() >= deadline) return sockets;
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace

std::string ClosedConnections::describe() const {
  std::ostringstream text;
  text << open_at_stop << " connection(s) open";
  if (open_at_stop > 0) {
    text << ": " << left_by_peers << " closed by their peers";
    if (shut > 0) text << ", " << shut << " shut after the limit";
    if (still_open > 0) text << " (" << still_open << " not yet closed by PMIx)";
  }
  text << " in " << std::fixed << std::setprecision(3) << seconds << " s";
  if (!stopped_listening) text << "; no listening socket found";
  return text.str();
}

ClosedConnections close_server_connections(int port, std::chrono::milliseconds limit,
                                           std::chrono::milliseconds close_wait) {
  const auto started = Clock::now();
  ClosedConnections result;
  for (const PortSocket& socket : protocol::sockets_on_port(port, protocol::PortSide::local)) {
    // Linux wakes the listener's select, and its accept fails with EINVAL: PMIx 4.2.2's
    // listener thread takes that for a finalize and ends. New connections are refused.
    if (socket.listening && ::shutdown(socket.fd, SHUT_RD) == 0) result.stopped_listening = true;
  }
  // Listed after the listener stopped: a connection it accepted just before is among them.
  std::vector<PortSocket> connections = protocol::sockets_on_port(port, protocol::PortSide::local);
  std::erase_if(connections, [](const PortSocket& s) { return s.listening; });
  result.open_at_stop = connections.size();
  std::vector<PortSocket> left = wait_closed(connections, started + limit);
  result.left_by_peers = result.open_at_stop - left.size();
  for (const PortSocket& socket : left) {
    if (protocol::still_open(socket) && ::shutdown(socket.fd, SHUT_RDWR) == 0) ++result.shut;
  }
  result.still_open = wait_closed(left, Clock::now() + close_wait).size();
  result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return result;
}

}  // namespace bellows::daemon
