#include <bellows/daemon/controller_reach.hpp>

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

namespace bellows::daemon {
namespace {

/// A socket closed when it goes out of scope.
class Socket {
 public:
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

/// The outcome of a connect() that ended with `error` (0: accepted).
HostAnswer answer_of(int error) {
  // Accepted, or refused (a host that sends a reset is up, and so is the path to it).
  return error == 0 || error == ECONNREFUSED ? HostAnswer::answered : HostAnswer::silent;
}

HostAnswer probe_address(const addrinfo& address, std::chrono::milliseconds timeout) {
  Socket socket(::socket(address.ai_family, address.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                         address.ai_protocol));
  if (socket.fd() < 0) return HostAnswer::silent;
  if (::connect(socket.fd(), address.ai_addr, address.ai_addrlen) == 0) return HostAnswer::answered;
  if (errno != EINPROGRESS) return answer_of(errno);
  pollfd waiting{socket.fd(), POLLOUT, 0};
  const int ready = ::poll(&waiting, 1, static_cast<int>(timeout.count()));
  if (ready <= 0) return HostAnswer::silent;
  int error = 0;
  socklen_t length = sizeof error;
  if (::getsockopt(socket.fd(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) return HostAnswer::silent;
  return answer_of(error);
}

}  // namespace

HostAnswer probe_controller_host(const std::string& endpoint, std::chrono::milliseconds timeout) {
  constexpr std::string_view kTcp = "tcp://";
  if (!endpoint.starts_with(kTcp)) return HostAnswer::answered;
  const std::string address = endpoint.substr(kTcp.size());
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) return HostAnswer::silent;
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr)
    return HostAnswer::silent;
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addresses(found, &::freeaddrinfo);
  return probe_address(*addresses, timeout);
}

const char* to_string(HostAnswer answer) noexcept {
  return answer == HostAnswer::answered ? "answered" : "silent";
}

}  // namespace bellows::daemon
