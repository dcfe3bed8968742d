// probe_controller_host: a host that answers (a connection accepted or refused) against one that
// answers nothing (a connection attempt dropped, a name that does not resolve).
#include <bellows/daemon/controller_reach.hpp>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace {

using bellows::daemon::HostAnswer;
using bellows::daemon::probe_controller_host;
using namespace std::chrono_literals;

/// A TCP socket bound to a free port of 127.0.0.1, listening or not.
class LocalPort {
 public:
  explicit LocalPort(bool listening, int backlog = 4) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    address_.sin_family = AF_INET;
    address_.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&address_), sizeof address_), 0);
    socklen_t length = sizeof address_;
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&address_), &length), 0);
    port_ = ntohs(address_.sin_port);
    if (listening) {
      EXPECT_EQ(::listen(fd_, backlog), 0);
    }
  }
  ~LocalPort() { ::close(fd_); }
  LocalPort(const LocalPort&) = delete;
  LocalPort& operator=(const LocalPort&) = delete;
  std::string endpoint() const { return "tcp://127.0.0.1:" + std::to_string(port_); }
  sockaddr_in address() const { return address_; }

 private:
  int fd_;
  sockaddr_in address_{};
  int port_ = 0;
};

TEST(ControllerReach, AListeningPortAnswers) {
  LocalPort port(true);
  EXPECT_EQ(probe_controller_host(port.endpoint(), 1000ms), HostAnswer::answered);
}

TEST(ControllerReach, ARefusedConnectionAnswersToo) {
  // Bound but not listening: the host resets the connection, as one whose controller died.
  LocalPort port(false);
  EXPECT_EQ(probe_controller_host(port.endpoint(), 1000ms), HostAnswer::answered);
}

TEST(ControllerReach, AnIpcControllerIsOnThisHost) {
  EXPECT_EQ(probe_controller_host("ipc:///nonexistent/controller.sock", 10ms), HostAnswer::answered);
}

TEST(ControllerReach, ANameThatDoesNotResolveOrNoPortIsSilent) {
  EXPECT_EQ(probe_controller_host("tcp://no-such-host.invalid:5555", 200ms), HostAnswer::silent);
  EXPECT_EQ(probe_controller_host("tcp://127.0.0.1", 200ms), HostAnswer::silent);
}

TEST(ControllerReach, AHostThatDropsTheConnectionIsSilentWithinTheTimeout) {
  // A port whose accept queue is full: Linux drops further SYNs unanswered, as a host that
  // cannot be reached answers nothing.
  LocalPort port(true, 0);
  std::vector<int> queued;
  for (int i = 0; i < 4; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in address = port.address();
    (void)::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
    queued.push_back(fd);
  }
  std::this_thread::sleep_for(100ms);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(probe_controller_host(port.endpoint(), 300ms), HostAnswer::silent);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 250ms);
  EXPECT_LT(waited, 2s);
  for (const int fd : queued) ::close(fd);
}

TEST(ControllerReach, AnswersHaveNames) {
  EXPECT_STREQ(to_string(HostAnswer::answered), "answered");
  EXPECT_STREQ(to_string(HostAnswer::silent), "silent");
}

}  // namespace
