// The transport between real processes: the controller's Server in this process, daemons
// (or raw ZeroMQ peers, or a controller) in child processes started from
// transport_test_peer and stopped by PID.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <condition_variable>
#include <future>
#include <filesystem>
#include <mutex>

#include "bellows/transport/endpoint.hpp"
#include "child_process.hpp"
#include "log_check.hpp"

namespace bellows::transport {
namespace {

using namespace std::chrono_literals;
using bellows::testing::ChildProcess;

std::string hex(const std::vector<std::uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string text;
  for (const auto b : bytes) {
    text += digits[b >> 4];
    text += digits[b & 0xfu];
  }
  return text;
}

/// Collects what arrives on the receive thread, for the test thread to wait on.
template <class T>
class Inbox {
 public:
  void push(T value) {
    std::lock_guard lock(mutex_);
    items_.push_back(std::move(value));
    cv_.notify_all();
  }
  /// Waits until `n` items arrived; false after `limit`.
  bool wait(std::size_t n, std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, limit, [&] { return items_.size() >= n; });
  }
  std::vector<T> items() {
    std::lock_guard lock(mutex_);
    return items_;
  }
  std::size_t count_containing(const std::string& text) {
    std::lock_guard lock(mutex_);
    std::size_t n = 0;
    for (const auto& item : items_) n += item.find(text) != std::string::npos ? 1 : 0;
    return n;
  }
  bool wait_containing(const std::string& text, std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, limit, [&] {
      for (const auto& item : items_) {
        if (item.find(text) != std::string::npos) return true;
      }
      return false;
    });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<T> items_;
};

// The server's log lines are the test's (logs_ and the fixture's check): a warning or error
// the test does not allow fails it.
class TransportProcesses : public testing::LoggedTest {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/bellows-transport-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    ipc_endpoint_ = "ipc://" + dir_ + "/controller.sock";
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  /// Starts the server: hello requests are answered "welcome NODE", every message and
  /// lost peer is recorded.
  void start_server(std::string endpoint, std::optional<CurveKeyPair> curve = std::nullopt) {
    Handlers h;
    h.on_request = [this](const Incoming& in, Responder responder) {
      requests_.push(in);
      if (const auto* hello = std::get_if<protocol::Hello>(&in.envelope.message)) {
        responder.reply(protocol::Ack{protocol::AckCode::ok, "welcome " + hello->node_name});
      }
    };
    h.on_notification = [this](const Incoming& in) { notifications_.push(in); };
    h.on_peer_gone = [this](const PeerId& peer) { gone_.push(peer); };
    ServerOptions o;
    o.endpoint = std::move(endpoint);
    o.curve = std::move(curve);
    o.log = [this](LogLevel level, const std::string& text) {
      logs_.push(std::string(to_string(level)) + ": " + text);
      record_log(std::string(to_string(level)) + ": " + text);
    };
    server_ = std::make_unique<Server>(std::move(o), std::move(h));
  }

  std::unique_ptr<ChildProcess> peer(std::vector<std::string> args) {
    args.insert(args.begin(), BELLOWS_TRANSPORT_TEST_PEER);
    return std::make_unique<ChildProcess>(args);
  }

  std::string dir_;
  std::string ipc_endpoint_;
  std::unique_ptr<Server> server_;
  Inbox<Incoming> requests_;
  Inbox<Incoming> notifications_;
  Inbox<PeerId> gone_;
  Inbox<std::string> logs_;
};

TEST_F(TransportProcesses, RequestReplyAndNotificationsBothWaysOverIpc) {
  start_server(ipc_endpoint_);
  auto daemon = peer({"daemon", "--endpoint", server_->endpoint(), "--node", "node-7"});
  ASSERT_EQ(daemon->wait_for("hello", 5s), "hello ok ack 0 welcome node-7") << daemon->transcript();

  ASSERT_TRUE(requests_.wait(1, 1s));
  const Incoming hello = requests_.items().front();
  EXPECT_EQ(hello.envelope.kind, protocol::Kind::request);
  EXPECT_EQ(hello.envelope.message,
            protocol::Message(protocol::Hello{"node-7", daemon->pid(), protocol::kProtocolVersion}));
  EXPECT_EQ(hello.peer_address, "pid " + std::to_string(daemon->pid()) + " uid " +
                                    std::to_string(::geteuid()));
  EXPECT_EQ(hello.user_id, "uid:" + std::to_string(::geteuid()));

  // daemon -> controller notification.
  ASSERT_TRUE(notifications_.wait(1, 5s));
  const Incoming metrics = notifications_.items().front();
  EXPECT_EQ(metrics.peer, hello.peer);
  EXPECT_EQ(metrics.envelope.kind, protocol::Kind::notification);
  EXPECT_EQ(metrics.envelope.message,
            protocol::Message(protocol::NodeMetrics{"node-7", {4, 0.25, 17, 0.5, 3, 1}}));

  // controller -> daemon request with its exact reply.
  const RequestResult r = server_->request(
      hello.peer, protocol::ResizeDecided{3, protocol::ResizeKind::expand, 2, {"n5", "n6"}, {}},
      2s);
  ASSERT_TRUE(r.ok()) << r.text;
  EXPECT_EQ(r.reply, protocol::Message(protocol::ResizeAck{{3, protocol::ResizeOutcome::committed, 9, {8, 9}, ""}}));
  EXPECT_EQ(daemon->wait_for("request", 2s), "request resize_decided 3 2");

  // controller -> daemon notifications.
  server_->notify(hello.peer, protocol::Abort{3, "slurm said no"});
  EXPECT_EQ(daemon->wait_for("notification", 2s), "notification abort");
  server_->notify(hello.peer, protocol::Stop{"job done", 500});
  EXPECT_EQ(daemon->wait_for("stop", 2s), "stop job done 500");
  EXPECT_EQ(daemon->wait_exit(5s), 0) << daemon->transcript();

  // The daemon's exit is seen as its connection closing.
  ASSERT_TRUE(gone_.wait(1, 5s));
  EXPECT_EQ(gone_.items().front(), hello.peer);
  EXPECT_TRUE(logs_.items().empty()) << logs_.items().front();
}

TEST_F(TransportProcesses, AnotherUserCannotReachThePrivateDirectory) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to start a peer as another user";
  start_server(ipc_endpoint_);
  auto stranger = peer({"daemon", "--endpoint", server_->endpoint(), "--uid", "65534",
                        "--timeout-ms", "400"});
  EXPECT_EQ(stranger->wait_for("hello", 5s), "hello timeout no reply to hello within 400 ms")
      << stranger->transcript();
  EXPECT_EQ(stranger->wait_exit(5s), 3);
  EXPECT_TRUE(requests_.items().empty());
  EXPECT_TRUE(logs_.items().empty());  // the kernel refused it before ZeroMQ saw it
}

TEST_F(TransportProcesses, AnotherUserIsRefusedByItsKernelCredentials) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to start a peer as another user";
  start_server(ipc_endpoint_);
  // Open the directory and the socket to everyone: the credential check alone must hold.
  ASSERT_EQ(::chmod(dir_.c_str(), 0711), 0);
  ASSERT_EQ(::chmod((dir_ + "/controller.sock").c_str(), 0777), 0);
  auto stranger = peer({"daemon", "--endpoint", server_->endpoint(), "--uid", "65534",
                        "--timeout-ms", "1000"});
  const pid_t pid = stranger->pid();
  EXPECT_EQ(stranger->wait_for("log", 5s),
            "log warning: the controller at " + server_->endpoint() +
                " refused this connection (authentication failed)")
      << stranger->transcript();
  EXPECT_EQ(stranger->wait_for("hello", 5s), "hello timeout no reply to hello within 1000 ms");
  EXPECT_EQ(stranger->wait_exit(5s), 3);
  EXPECT_TRUE(requests_.items().empty());
  // Refused at every reconnection within that second, logged once.
  const auto logs = logs_.items();
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_EQ(logs.front(), allow_log("warning: refused connection: peer uid 65534 (pid " +
                                        std::to_string(pid) + ") is not the job owner (uid 0)"));
}

TEST_F(TransportProcesses, MalformedMessageIsRefusedLoggedAndItsPeerDropped) {
  start_server(ipc_endpoint_);
  const std::string text = "hello world!";
  auto raw = peer({"raw", "--endpoint", server_->endpoint(), "--timeout-ms", "3000", "--send-hex",
                   hex(std::vector<std::uint8_t>(text.begin(), text.end()))});
  const std::string cause = "wrong magic 0x68656c6c, expected 0x424c5753 (\"BLWS\")";
  EXPECT_EQ(raw->wait_for("received", 5s), "received version " + std::to_string(protocol::kProtocolVersion) +
                                              " correlation 0 ack 1 " + cause)
      << raw->transcript();
  ASSERT_TRUE(logs_.wait(1, 2s));
  EXPECT_EQ(logs_.items().front(), allow_log("warning: refused message from peer pid " +
                                                 std::to_string(raw->pid()) + " uid 0: " + cause +
                                                 "; dropping the peer"));
  // Dropped: its connection is closed by the server while the peer still runs.
  ASSERT_TRUE(gone_.wait(1, 2s));
  EXPECT_EQ(raw->wait_exit(0ms), -1);

  // The server still serves.
  auto daemon = peer({"daemon", "--endpoint", server_->endpoint()});
  EXPECT_EQ(daemon->wait_for("hello", 5s), "hello ok ack 0 welcome node-1") << daemon->transcript();
  ASSERT_TRUE(requests_.wait(1, 1s));
  server_->notify(requests_.items().front().peer, protocol::Stop{"bye", 0});
  EXPECT_EQ(daemon->wait_exit(5s), 0);
  EXPECT_EQ(logs_.items().size(), 1u);
}

TEST_F(TransportProcesses, WrongVersionIsRefusedNamingBothVersions) {
  start_server(ipc_endpoint_);
  auto bytes = protocol::encode(protocol::Envelope{protocol::Kind::request, 5, protocol::StatusRequest{}});
  const int other = protocol::kProtocolVersion + 1;
  bytes[4] = static_cast<std::uint8_t>(other);  // the next version
  auto raw = peer({"raw", "--endpoint", server_->endpoint(), "--timeout-ms", "500", "--send-hex",
                   hex(bytes)});
  const std::string cause = "protocol version " + std::to_string(other) + " refused: this side speaks version " +
                            std::to_string(protocol::kProtocolVersion);
  EXPECT_EQ(raw->wait_for("received", 5s), "received version " + std::to_string(protocol::kProtocolVersion) +
                                              " correlation 0 ack 1 " + cause)
      << raw->transcript();
  ASSERT_TRUE(logs_.wait(1, 2s));
  EXPECT_EQ(logs_.items().front(), allow_log("warning: refused message from peer pid " +
                                                 std::to_string(raw->pid()) + " uid 0: " + cause +
                                                 "; dropping the peer"));
  EXPECT_EQ(raw->wait_exit(5s), 0);
  EXPECT_TRUE(requests_.items().empty());
}

TEST_F(TransportProcesses, BadFieldInARequestGetsACorrelatedRefusal) {
  start_server(ipc_endpoint_);
  const auto bytes = protocol::encode(
      protocol::Envelope{protocol::Kind::request, 9, protocol::Hello{"", 1, protocol::kProtocolVersion}});
  auto raw = peer({"raw", "--endpoint", server_->endpoint(), "--timeout-ms", "500", "--send-hex",
                   hex(bytes)});
  EXPECT_EQ(raw->wait_for("received", 5s),
            "received version " + std::to_string(protocol::kProtocolVersion) +
                " correlation 9 ack 1 bad field hello.node_name: empty")
      << raw->transcript();
  EXPECT_EQ(raw->wait_exit(5s), 0);
  EXPECT_EQ(logs_.count_containing(allow_log("bad field hello.node_name: empty; dropping the peer")),
            1u);
}

TEST_F(TransportProcesses, ServerRequestsTimeOutOrFailWhenThePeerIsSilentOrGone) {
  start_server(ipc_endpoint_);
  const auto hello =
      protocol::encode(protocol::Hello{"node-3", 77, protocol::kProtocolVersion});
  auto raw = peer({"raw", "--endpoint", server_->endpoint(), "--timeout-ms", "20000",
                   "--send-hex", hex(hello)});
  ASSERT_TRUE(notifications_.wait(1, 5s));
  const PeerId silent = notifications_.items().front().peer;

  RequestResult r = server_->request(silent, protocol::StatusRequest{}, 200ms);
  EXPECT_EQ(r.status, Status::timeout);
  EXPECT_EQ(r.text, "no reply to status_request within 200 ms");

  // A request still waiting when the peer dies ends at once, not at its timeout.
  std::promise<RequestResult> waiting;
  server_->request_async(silent, protocol::StatusRequest{}, 20s,
                         [&](RequestResult result) { waiting.set_value(std::move(result)); });
  std::this_thread::sleep_for(50ms);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = raw->pid();
  raw->kill();
  auto future = waiting.get_future();
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready);
  r = future.get();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_EQ(r.status, Status::peer_gone);
  EXPECT_EQ(r.text, "peer pid " + std::to_string(pid) + " uid 0 disconnected before replying to status_request");
  ASSERT_TRUE(gone_.wait(1, 2s));

  r = server_->request(silent, protocol::StatusRequest{}, 200ms);
  EXPECT_EQ(r.status, Status::unknown_peer);
  EXPECT_EQ(r.text, "cannot send status_request: no connected peer " + silent.to_string());
}

TEST_F(TransportProcesses, ClientRequestTimesOutWhenTheControllerIsGone) {
  auto controller = peer({"controller", "--endpoint", ipc_endpoint_});
  ASSERT_EQ(controller->wait_for("endpoint", 5s), "endpoint " + ipc_endpoint_)
      << controller->transcript();
  Inbox<std::string> client_logs;
  ClientOptions o;
  o.endpoint = ipc_endpoint_;
  o.log = [&](LogLevel level, const std::string& text) {
    client_logs.push(std::string(to_string(level)) + ": " + text);
    record_log(std::string(to_string(level)) + ": " + text);
  };
  Client client(std::move(o), Handlers{});
  RequestResult r = client.request(protocol::Hello{"node-2", 55, protocol::kProtocolVersion}, 5s);
  ASSERT_TRUE(r.ok()) << r.text;
  EXPECT_EQ(r.reply, protocol::Message(protocol::Ack{protocol::AckCode::ok, "welcome hello"}));

  controller->kill();
  r = client.request(protocol::StatusRequest{}, 300ms);
  EXPECT_EQ(r.status, Status::timeout);
  EXPECT_EQ(r.text, "no reply to status_request within 300 ms");
  EXPECT_TRUE(client_logs.wait_containing(
      "info: lost the connection to the controller at " + ipc_endpoint_, 1s));
}

// ---------------------------------------------------------------- tcp with CURVE

class TransportCurve : public TransportProcesses {
 protected:
  void SetUp() override {
    TransportProcesses::SetUp();
    keys_ = generate_curve_key_pair();
    key_file_ = dir_ + "/job.key";
    write_key_file(key_file_, keys_);
    start_server("tcp://127.0.0.1:*", keys_);
  }
  CurveKeyPair keys_;
  std::string key_file_;
};

TEST_F(TransportCurve, JobKeyHolderTalks) {
  auto daemon = peer({"daemon", "--endpoint", server_->endpoint(), "--key-file", key_file_});
  ASSERT_EQ(daemon->wait_for("hello", 5s), "hello ok ack 0 welcome node-1") << daemon->transcript();
  ASSERT_TRUE(requests_.wait(1, 1s));
  const Incoming hello = requests_.items().front();
  EXPECT_EQ(hello.user_id, "curve:job-key");
  EXPECT_EQ(hello.peer_address, "127.0.0.1");
  const RequestResult r = server_->request(
      hello.peer, protocol::ResizeDecided{4, protocol::ResizeKind::expand, 1, {"n9"}, {}}, 2s);
  ASSERT_TRUE(r.ok()) << r.text;
  EXPECT_EQ(r.reply, protocol::Message(protocol::ResizeAck{{4, protocol::ResizeOutcome::committed, 9, {8, 9}, ""}}));
  server_->notify(hello.peer, protocol::Stop{"done", 0});
  EXPECT_EQ(daemon->wait_exit(5s), 0);
  EXPECT_TRUE(logs_.items().empty());
}

TEST_F(TransportCurve, ClientKeyThatIsNotTheJobsIsRefused) {
  auto stranger = peer({"daemon", "--endpoint", server_->endpoint(), "--key-file", key_file_,
                        "--own-key", "--timeout-ms", "600"});
  const std::string key = stranger->wait_for("key ", 5s);
  ASSERT_EQ(key.size(), 44u) << stranger->transcript();
  EXPECT_EQ(stranger->wait_for("hello", 5s), "hello timeout no reply to hello within 600 ms");
  EXPECT_EQ(stranger->wait_exit(5s), 3);
  const auto logs = logs_.items();
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_EQ(logs.front(), allow_log("warning: refused connection: peer 127.0.0.1 presented curve "
                                    "key " + key.substr(4, 8) + "..., not the job's key"));
  EXPECT_TRUE(requests_.items().empty());
}

TEST_F(TransportCurve, PeerWithoutTheServerKeyFailsTheHandshake) {
  auto stranger = peer({"daemon", "--endpoint", server_->endpoint(), "--key-file", key_file_,
                        "--wrong-server-key", "--timeout-ms", "600"});
  EXPECT_EQ(stranger->wait_for("hello", 5s), "hello timeout no reply to hello within 600 ms")
      << stranger->transcript();
  EXPECT_EQ(stranger->wait_exit(5s), 3);
  const auto logs = logs_.items();
  ASSERT_EQ(logs.size(), 1u);
  EXPECT_EQ(logs.front(), allow_log("warning: refused connection on " + server_->endpoint() +
                                    ": handshake failed: curve cryptographic error (the peer "
                                    "does not use the job's server key)"));
  EXPECT_TRUE(requests_.items().empty());
}

}  // namespace
}  // namespace bellows::transport
