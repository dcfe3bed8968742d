// shut_down_connections_to: the sockets of /proc/self/fd whose peer is a lost host.

#include "bellows/runtime/peer_connections.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>

namespace bellows::runtime {
namespace {

/// An IPv4 or IPv6 address as bytes (an IPv4-mapped IPv6 address as its IPv4 form).
std::string address_bytes(const sockaddr* address) {
  if (address == nullptr) return {};
  if (address->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
    return std::string(reinterpret_cast<const char*>(&v4->sin_addr), sizeof v4->sin_addr);
  }
  if (address->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address);
    if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr))
      return std::string(reinterpret_cast<const char*>(&v6->sin6_addr) + 12, 4);
    return std::string(reinterpret_cast<const char*>(&v6->sin6_addr), sizeof v6->sin6_addr);
  }
  return {};
}

std::vector<std::string> local_addresses() {
  std::vector<std::string> found;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return found;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (std::string bytes = address_bytes(a->ifa_addr); !bytes.empty()) found.push_back(std::move(bytes));
  }
  ::freeifaddrs(list);
  return found;
}

bool is_tcp_socket(int fd) {
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISSOCK(info.st_mode)) return false;
  int type = 0;
  socklen_t length = sizeof type;
  return ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) == 0 && type == SOCK_STREAM;
}

}  // namespace

ShutConnections shut_down_connections_to(const std::vector<std::string>& hosts) {
  ShutConnections done;
  const std::vector<std::string> ours = local_addresses();
  std::vector<std::string> theirs;
  for (const std::string& host : hosts) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) {
      done.unresolved.push_back(host);
      continue;
    }
    const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, &::freeaddrinfo);
    for (const addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
      std::string bytes = address_bytes(a->ai_addr);
      if (!bytes.empty() && std::find(ours.begin(), ours.end(), bytes) == ours.end()) theirs.push_back(std::move(bytes));
    }
  }
  if (theirs.empty()) return done;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", error)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    if (!is_tcp_socket(fd)) continue;
    sockaddr_storage peer{};
    socklen_t length = sizeof peer;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) continue;
    const std::string bytes = address_bytes(reinterpret_cast<const sockaddr*>(&peer));
    if (bytes.empty() || std::find(theirs.begin(), theirs.end(), bytes) == theirs.end()) continue;
    if (::shutdown(fd, SHUT_RDWR) == 0) ++done.sockets;
  }
  return done;
}

}  // namespace bellows::runtime
