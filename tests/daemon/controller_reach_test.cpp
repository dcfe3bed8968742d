// probe_controller_host: a host that answers (a connection accepted or refused) against one that
// answers nothing (no route, a timeout, a name that does not resolve).
#include <bellows/daemon/controller_reach.hpp>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace {

using bellows::daemon::HostAnswer;
using bellows::daemon::probe_controller_host;
using namespace std::chrono_literals;

/// A TCP socket bound to a free port of 127.0.0.1, listening or not.
class LocalPort {
 public:
  explicit LocalPort(bool listening) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    socklen_t length = sizeof address;
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length), 0);
    port_ = ntohs(address.sin_port);
    if (listening) EXPECT_EQ(::listen(fd_, 4), 0);
  }
  ~LocalPort() { ::close(fd_); }
  LocalPort(const LocalPort&) = delete;
  LocalPort& operator=(const LocalPort&) = delete;
  std::string endpoint() const { return "tcp://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_;
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

TEST(ControllerReach, AnAddressNothingAnswersIsSilentWithinTheTimeout) {
  // TEST-NET-1 (RFC 5737): never assigned; no route, or a connection attempt nothing answers.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(probe_controller_host("tcp://192.0.2.1:5555", 300ms), HostAnswer::silent);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

TEST(ControllerReach, AnswersHaveNames) {
  EXPECT_STREQ(to_string(HostAnswer::answered), "answered");
  EXPECT_STREQ(to_string(HostAnswer::silent), "silent");
}

}  // namespace
