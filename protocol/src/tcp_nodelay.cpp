#include "bellows/protocol/tcp_nodelay.hpp"

#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>

namespace bellows::protocol {
namespace {

int port_of(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET)
    return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
  if (address.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  return -1;
}

bool is_listening(int fd) {
  int accepting = 0;
  socklen_t length = sizeof accepting;
  return ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &length) == 0 && accepting != 0;
}

}  // namespace

std::vector<PortSocket> sockets_on_port(int port, PortSide side) noexcept {
  std::vector<PortSocket> found;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return found;
  try {
    while (const dirent* entry = ::readdir(dir)) {
      char* end = nullptr;
      const long number = std::strtol(entry->d_name, &end, 10);
      if (end == entry->d_name || *end != '\0') continue;
      const int fd = static_cast<int>(number);
      struct stat info {};
      if (::fstat(fd, &info) != 0 || !S_ISSOCK(info.st_mode)) continue;
      sockaddr_storage local{}, peer{};
      socklen_t local_length = sizeof local, peer_length = sizeof peer;
      const bool listening = is_listening(fd);
      if (listening ? side != PortSide::local
                    : ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) != 0)
        continue;  // a listening socket has no peer; an unconnected one is neither
      if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) != 0) continue;
      if (port_of(side == PortSide::local ? local : peer) != port) continue;
      found.push_back({fd, info.st_ino, listening});
    }
  } catch (...) {
    // out of memory: what was found so far
  }
  ::closedir(dir);
  return found;
}

bool still_open(const PortSocket& socket) noexcept {
  struct stat info {};
  return ::fstat(socket.fd, &info) == 0 && S_ISSOCK(info.st_mode) && info.st_ino == socket.inode;
}

int set_nodelay_on_port(int port, PortSide side) noexcept {
  int set = 0;
  for (const PortSocket& socket : sockets_on_port(port, side)) {
    if (socket.listening) continue;
    const int on = 1;
    if (::setsockopt(socket.fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on) == 0) ++set;
  }
  return set;
}

}  // namespace bellows::protocol
