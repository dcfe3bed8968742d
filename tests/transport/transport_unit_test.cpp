// The transport's parts that need no second process: who is authorized, key files and
// private directories, option checks, and the request/reply contract within one process.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <csignal>

#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include <zmq.h>

#include "bellows/transport/controller_contact.hpp"
#include "bellows/transport/endpoint.hpp"
#include "bellows/transport/socket_directory.hpp"
#include "log_check.hpp"

namespace bellows::transport {
namespace {

using namespace std::chrono_literals;

std::string thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const TransportError& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

ServerOptions server_at(std::string endpoint) {
  ServerOptions o;
  o.endpoint = std::move(endpoint);
  return o;
}

ClientOptions client_at(std::string endpoint) {
  ClientOptions o;
  o.endpoint = std::move(endpoint);
  return o;
}

class Inbox {
 public:
  void push(std::string line) {
    std::lock_guard lock(mutex_);
    lines_.push_back(std::move(line));
  }
  std::vector<std::string> items() {
    std::lock_guard lock(mutex_);
    return lines_;
  }
  bool wait(std::size_t n, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (items().size() < n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

// Servers and clients log through the default sink (stderr) unless a test gives its own:
// any warning or error a test does not allow fails it.
class PrivateDir : public testing::LoggedTest {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/bellows-transport-unit-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST(Authorize, IpcPeerOfTheOwnerIsAllowedOthersRefused) {
  const AuthPolicy policy{1000, std::nullopt};
  AuthDecision d = authorize({"bellows", "localhost:1000:1000:4242", "NULL", {}}, policy);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.user_id, "uid:1000");
  d = authorize({"bellows", "localhost:1001:1000:4243", "NULL", {}}, policy);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "peer uid 1001 (pid 4243) is not the job owner (uid 1000)");
  d = authorize({"bellows", "127.0.0.1", "NULL", {}}, policy);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason,
            "peer 127.0.0.1 has no kernel credentials (plain tcp is not authenticated: use curve)");
  d = authorize({"bellows", "127.0.0.1", "PLAIN", {"user", "pw"}}, policy);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "peer 127.0.0.1 uses mechanism PLAIN, which this endpoint does not accept");
}

TEST(Authorize, CurvePeerMustPresentTheJobKey) {
  const CurveKeyPair job = generate_curve_key_pair();
  const CurveKeyPair other = generate_curve_key_pair();
  auto raw = [](const std::string& z85) {
    std::string bytes(32, '\0');
    zmq_z85_decode(reinterpret_cast<std::uint8_t*>(bytes.data()), z85.c_str());
    return bytes;
  };
  const AuthPolicy policy{0, job.public_key};
  AuthDecision d = authorize({"bellows", "10.0.0.5", "CURVE", {raw(job.public_key)}}, policy);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.user_id, "curve:job-key");
  d = authorize({"bellows", "10.0.0.5", "CURVE", {raw(other.public_key)}}, policy);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.reason, "peer 10.0.0.5 presented curve key " + other.public_key.substr(0, 8) +
                          "..., not the job's key");
  d = authorize({"bellows", "10.0.0.5", "CURVE", {}}, policy);
  EXPECT_EQ(d.reason, "peer 10.0.0.5 sent no curve public key");
  d = authorize({"bellows", "10.0.0.5", "CURVE", {raw(job.public_key)}}, AuthPolicy{0, std::nullopt});
  EXPECT_EQ(d.reason, "peer 10.0.0.5 offered a curve key, but this endpoint has none");
  // The job key over ipc from another uid is still refused.
  d = authorize({"bellows", "localhost:7:7:70", "CURVE", {raw(job.public_key)}}, policy);
  EXPECT_EQ(d.reason, "peer uid 7 (pid 70) is not the job owner (uid 0)");
}

TEST(Authorize, ParsesIpcPeerAddresses) {
  const auto c = parse_ipc_peer_address("localhost:1000:100:31337");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->uid, 1000u);
  EXPECT_EQ(c->gid, 100u);
  EXPECT_EQ(c->pid, 31337);
  for (const char* bad : {"", "127.0.0.1", "localhost:1:2", "localhost:a:2:3", "localhost:1:2:3x",
                          "localhost:1:2:", "otherhost:1:2:3"}) {
    EXPECT_FALSE(parse_ipc_peer_address(bad)) << bad;
  }
}

TEST_F(PrivateDir, KeyFileRoundTripAndPermissionChecks) {
  const auto keys = generate_curve_key_pair();
  EXPECT_EQ(keys.public_key.size(), 40u);
  const std::string file = dir_ + "/job.key";
  write_key_file(file, keys);
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(read_key_file(file), keys);
  EXPECT_EQ(thrown([&] { write_key_file(file, keys); }),
            "cannot create key file " + file + ": File exists");
  ASSERT_EQ(::chmod(file.c_str(), 0640), 0);
  EXPECT_EQ(thrown([&] { read_key_file(file); }),
            "key file " + file + " has mode 0640: group and others must have no access (0600)");
  const std::string bad = dir_ + "/bad.key";
  std::ofstream(bad) << "public=short\n";
  ASSERT_EQ(::chmod(bad.c_str(), 0600), 0);
  EXPECT_EQ(thrown([&] { read_key_file(bad); }),
            "key file " + bad +
                " line 1: expected public=<40 Z85 characters> or secret=<40 Z85 characters>");
  std::ofstream(bad) << "public=" << keys.public_key << "\n";
  EXPECT_EQ(thrown([&] { read_key_file(bad); }), "key file " + bad + " lacks its secret key");
  EXPECT_EQ(thrown([&] { read_key_file(dir_ + "/none"); }),
            "cannot read key file " + dir_ + "/none: No such file or directory");
}

TEST_F(PrivateDir, AControllerContactRoundTripsThroughTheJobDirectory) {
  const ControllerContact ipc{"ipc://" + dir_ + "/controller.sock", std::nullopt};
  publish_controller_contact(dir_, ipc);
  EXPECT_EQ(read_controller_contact(dir_).endpoint, ipc.endpoint);
  EXPECT_FALSE(read_controller_contact(dir_).curve.has_value());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/controller.key"));
  // A second run of the same job id replaces what the first left.
  for (int run = 0; run < 2; ++run) {
    const ControllerContact tcp{"tcp://127.0.0.1:4" + std::to_string(run), generate_curve_key_pair()};
    publish_controller_contact(dir_, tcp);
    const auto read = read_controller_contact(dir_);
    EXPECT_EQ(read.endpoint, tcp.endpoint);
    EXPECT_EQ(read.curve, tcp.curve);
    EXPECT_EQ(read.client_options().curve, tcp.curve);
  }
  ASSERT_EQ(::chmod((dir_ + "/controller.key").c_str(), 0644), 0);
  EXPECT_EQ(thrown([&] { (void)read_controller_contact(dir_); }),
            "key file " + dir_ + "/controller.key has mode 0644: group and others must have no access (0600)");
  std::filesystem::remove(dir_ + "/controller.endpoint");
  EXPECT_EQ(thrown([&] { (void)read_controller_contact(dir_); }),
            "the controller has not said where it listens (no " + dir_ + "/controller.endpoint)");
}

TEST(ControllerContact, ThisHostsTcpEndpointIsAnAddressWithAnyPort) {
  const auto endpoint = this_host_tcp_endpoint();
  EXPECT_TRUE(endpoint.starts_with("tcp://")) << endpoint;
  EXPECT_TRUE(endpoint.ends_with(":*")) << endpoint;
  EXPECT_TRUE(is_tcp_endpoint(endpoint));
  EXPECT_FALSE(is_tcp_endpoint("ipc:///tmp/x"));
}

TEST_F(PrivateDir, PrivateDirectoryChecks) {
  EXPECT_EQ(private_directory_problem(dir_, ::geteuid()), "");
  EXPECT_EQ(private_directory_problem(dir_, ::geteuid() + 1),
            "directory " + dir_ + " is owned by uid " + std::to_string(::geteuid()) +
                ", not by uid " + std::to_string(::geteuid() + 1));
  const std::string sub = dir_ + "/job";
  prepare_private_directory(sub);
  prepare_private_directory(sub);  // an existing private one is fine
  ASSERT_EQ(::chmod(sub.c_str(), 0750), 0);
  EXPECT_EQ(thrown([&] { prepare_private_directory(sub); }),
            "directory " + sub + " has mode 0750: group and others must have no access (0700)");
  const std::string link = dir_ + "/link";
  std::filesystem::create_directory_symlink(sub, link);
  EXPECT_EQ(private_directory_problem(link, ::geteuid()),
            link + " is a symbolic link, not a directory");
}

TEST_F(PrivateDir, ServerRefusesUnsafeEndpoints) {
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  EXPECT_EQ(thrown([&] { Server(server_at("ipc://" + dir_ + "/c.sock"), {}); }),
            "endpoint ipc://" + dir_ + "/c.sock: directory " + dir_ +
                " has mode 0755: group and others must have no access (0700)");
  EXPECT_EQ(thrown([&] { Server(server_at("tcp://127.0.0.1:*"), {}); }),
            "endpoint tcp://127.0.0.1:*: tcp needs the job's curve keys (plain tcp is not "
            "authenticated)");
  EXPECT_EQ(thrown([&] { Client(client_at("tcp://127.0.0.1:5555"), {}); }),
            "endpoint tcp://127.0.0.1:5555: tcp needs the job's curve keys (plain tcp is not "
            "authenticated)");
  EXPECT_EQ(thrown([&] { Server(server_at("udp://x"), {}); }),
            "endpoint 'udp://x': expected ipc://PATH or tcp://ADDRESS:PORT");
  ServerOptions o = server_at("tcp://127.0.0.1:*");
  o.curve = CurveKeyPair{"short", "short"};
  EXPECT_EQ(thrown([&] { Server(o, {}); }), "curve public key has 5 characters, expected 40 (Z85)");
}

// ------------------------------------------------------------------ socket directories

TEST_F(PrivateDir, IpcEndpointsLongerThanASocketAddressAreRefusedWithWhatToSet) {
  std::string deep = dir_;
  while (deep.size() < 120) deep += "/deep";
  std::filesystem::create_directories(deep);
  ASSERT_EQ(::chmod(deep.c_str(), 0700), 0);
  const std::string socket = deep + "/c.sock";
  const std::string why = "the socket path " + socket + " has " + std::to_string(socket.size()) +
                          " characters, more than the 107 a Unix socket allows; set "
                          "BELLOWS_SOCKET_DIR to a shorter private directory of this host (such as "
                          "/tmp/bellows-" + std::to_string(::geteuid()) + ")";
  EXPECT_EQ(socket_path_problem(socket), why);
  EXPECT_EQ(thrown([&] { Server(server_at("ipc://" + socket), {}); }), "endpoint ipc://" + socket + ": " + why);
  EXPECT_EQ(thrown([&] { Client(client_at("ipc://" + socket), {}); }), "endpoint ipc://" + socket + ": " + why);
  EXPECT_EQ(socket_path_problem(dir_ + "/c.sock"), "");
}

TEST_F(PrivateDir, ASocketDirectoryIsShortPrivateOwnedAndRemovedWhateverTheJobDirectory) {
  const std::string root = dir_ + "/sockets";
  std::string job_dir = dir_;
  while (job_dir.size() < 200) job_dir += "/a-project-directory-of-a-site";
  std::string path;
  {
    SocketDirectory sockets("local-42", job_dir, root);
    path = sockets.path().string();
    EXPECT_EQ(sockets.path().parent_path().string(), root);
    EXPECT_EQ(sockets.path().filename().string().rfind("local-42-", 0), 0u);
    EXPECT_EQ(sockets.path().filename().string().size(), std::string("local-42-").size() + 8);
    EXPECT_EQ(private_directory_problem(sockets.path(), ::geteuid()), "");
    EXPECT_EQ(private_directory_problem(root, ::geteuid()), "");
    const std::string endpoint = sockets.ipc_endpoint("controller.sock");
    EXPECT_EQ(endpoint, "ipc://" + path + "/controller.sock");
    Server server(server_at(endpoint), {});  // binds: the path fits
    EXPECT_TRUE(std::filesystem::exists(path + "/controller.sock"));
    // The same job directory again while its owner lives: refused, and left alone.
    EXPECT_EQ(thrown([&] { SocketDirectory twice("local-42", job_dir, root); }),
              "socket directory " + path + " belongs to process " + std::to_string(::getpid()) +
                  ", which is still running (the same job twice?)");
    EXPECT_TRUE(std::filesystem::exists(path));
    // The running job is found by its id, wherever its directory is.
    EXPECT_EQ(SocketDirectory::find_job_dir("local-42", root).string(), job_dir);
    EXPECT_EQ(SocketDirectory::find_job_dir("local-4", root).string(), "");
    // Another job directory of the same job name: another directory.
    SocketDirectory other("local-42", job_dir + "/other", root);
    EXPECT_NE(other.path(), sockets.path());
    // Names that are no file names are made so.
    SocketDirectory odd("a/b c", job_dir, root);
    EXPECT_EQ(odd.path().filename().string().rfind("a_b_c-", 0), 0u);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(root));
  EXPECT_EQ(SocketDirectory::find_job_dir("local-42", root).string(), "");
}

TEST_F(PrivateDir, ASocketDirectoryWhoseOwnerWasKilledIsRemovedByTheNextOne) {
  const std::string root = dir_ + "/sockets";
  const pid_t child = ::fork();
  if (child == 0) {
    SocketDirectory sockets("killed", dir_ + "/job", root);
    ::pause();
    ::_exit(0);
  }
  ASSERT_GT(child, 0);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  std::string left;
  while (left.empty() && std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(root, ec))
      if (std::filesystem::exists(e.path() / "owner")) left = e.path().string();
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_FALSE(left.empty());
  EXPECT_EQ(SocketDirectory::remove_stale(root), 0u);  // its owner lives
  EXPECT_EQ(SocketDirectory::find_job_dir("killed", root).string(), dir_ + "/job");
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(std::filesystem::exists(left));
  EXPECT_EQ(SocketDirectory::find_job_dir("killed", root).string(), "");  // not running
  {
    SocketDirectory next("next", dir_ + "/job2", root);
    EXPECT_FALSE(std::filesystem::exists(left));
  }
  // A directory with no owner file is not judged.
  std::filesystem::create_directory(root + "/foreign");
  EXPECT_EQ(SocketDirectory::remove_stale(root), 0u);
  EXPECT_TRUE(std::filesystem::exists(root + "/foreign"));
}

TEST_F(PrivateDir, ASocketRootTooLongIsRefusedBeforeAnythingIsMade) {
  std::string root = dir_;
  while (root.size() < 80) root += "/r";
  const std::string why = socket_root_problem(root);
  EXPECT_EQ(why.rfind("the socket directory " + root + " (BELLOWS_SOCKET_DIR, XDG_RUNTIME_DIR or /tmp) is "
                      "too long: a job's sockets under it would have up to " +
                          std::to_string(root.size() + 58) + " characters, more than the 107",
                      0),
            0u)
      << why;
  EXPECT_EQ(thrown([&] { SocketDirectory sockets("j", dir_ + "/job", root); }), why);
  EXPECT_FALSE(std::filesystem::exists(root));
  EXPECT_EQ(socket_root_problem("/tmp/bellows-0/sockets"), "");
}

class InProcess : public PrivateDir {};

TEST_F(InProcess, RepliesLaterUnansweredThrowingAndBlockingHandlers) {
  std::atomic<Server*> server{nullptr};
  std::vector<std::jthread> repliers;  // joined however the test ends
  Inbox logs;
  Handlers h;
  h.on_request = [&](const Incoming& in, Responder responder) {
    const auto& m = in.envelope.message;
    if (std::holds_alternative<protocol::StatusRequest>(m)) return;  // dropped unanswered
    if (std::holds_alternative<protocol::Stop>(m)) throw std::runtime_error("boom");
    if (std::holds_alternative<protocol::Abort>(m)) {
      const RequestResult r = server.load()->request(in.peer, protocol::StatusRequest{}, 1s);
      responder.reply(protocol::Ack{protocol::AckCode::failed,
                                    std::string(to_string(r.status)) + ": " + r.text});
      return;
    }
    // Anything else: answered later from another thread.
    repliers.emplace_back([r = std::move(responder)]() mutable {
      std::this_thread::sleep_for(20ms);
      r.reply(protocol::Ack{protocol::AckCode::ok, "later"});
    });
  };
  ServerOptions o = server_at("ipc://" + dir_ + "/c.sock");
  o.log = [&](LogLevel level, const std::string& text) {
    logs.push(std::string(to_string(level)) + ": " + text);
    record_log(std::string(to_string(level)) + ": " + text);
  };
  Server s(std::move(o), std::move(h));
  server = &s;
  Client client(client_at(s.endpoint()), {});

  RequestResult r = client.request(protocol::Hello{"n", 1, protocol::kProtocolVersion}, 2s);
  ASSERT_TRUE(r.ok()) << r.text;
  EXPECT_EQ(r.reply, protocol::Message(protocol::Ack{protocol::AckCode::ok, "later"}));

  r = client.request(protocol::StatusRequest{}, 2s);
  ASSERT_TRUE(r.ok()) << r.text;
  EXPECT_EQ(r.reply, protocol::Message(protocol::Ack{
                         protocol::AckCode::unanswered,
                         "the receiver dropped the status_request request without answering"}));

  r = client.request(protocol::Abort{5, "x"}, 2s);
  ASSERT_TRUE(r.ok()) << r.text;
  EXPECT_EQ(r.reply, protocol::Message(protocol::Ack{
                         protocol::AckCode::failed,
                         "would_block: request() called from a handler would block the receive "
                         "thread: use request_async()"}));

  r = client.request(protocol::Stop{"x", 0}, 2s);
  ASSERT_TRUE(r.ok()) << r.text;
  EXPECT_EQ(std::get<protocol::Ack>(r.reply).code, protocol::AckCode::unanswered);
  // The reply leaves while the handler unwinds; the log line follows it.
  ASSERT_TRUE(logs.wait(1, 2s));
  EXPECT_EQ(logs.items().front(), allow_log("error: handler for stop from peer pid " +
                                                std::to_string(::getpid()) + " uid " +
                                                std::to_string(::geteuid()) + " threw: boom"));
}

TEST_F(InProcess, PeerWithoutARequestHandlerAnswersUnsupported) {
  std::promise<PeerId> peer;
  Handlers h;
  h.on_notification = [&](const Incoming& in) { peer.set_value(in.peer); };
  Server s(server_at("ipc://" + dir_ + "/c.sock"), std::move(h));
  Client client(client_at(s.endpoint()), {});
  client.notify(protocol::Hello{"n", 1, protocol::kProtocolVersion});
  auto f = peer.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  const RequestResult r = s.request(f.get(), protocol::StatusRequest{}, 2s);
  ASSERT_TRUE(r.ok()) << r.text;
  EXPECT_EQ(r.reply, protocol::Message(protocol::Ack{protocol::AckCode::unsupported,
                                                     "no handler for status_request"}));
}

TEST_F(InProcess, StoppedEndpointsEndRequestsAsClosed) {
  Server s(server_at("ipc://" + dir_ + "/c.sock"), {});
  Client client(client_at(s.endpoint()), {});
  std::promise<RequestResult> pending;
  s.stop();
  // Nothing answers: the client's request is pending when the client stops.
  client.request_async(protocol::StatusRequest{}, 10s,
                       [&](RequestResult r) { pending.set_value(std::move(r)); });
  client.stop();
  auto f = pending.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  const RequestResult r = f.get();
  EXPECT_EQ(r.status, Status::closed);
  EXPECT_EQ(r.text, "no reply to status_request: the endpoint is stopped");
  const RequestResult after = client.request(protocol::StatusRequest{}, 1s);
  EXPECT_EQ(after.status, Status::closed);
  EXPECT_EQ(after.text, "the endpoint is stopped");
}

// A controller that took the job over on another host listens elsewhere: the client, told
// the new endpoint, moves its connection there and what it sends from then on arrives there.
TEST_F(InProcess, AClientReconnectedToAnotherEndpointReachesTheControllerThere) {
  Inbox inbox;
  const auto hellos_into = [&inbox](const std::string& where) {
    Handlers h;
    h.on_notification = [&inbox, where](const Incoming& in) {
      if (const auto* hello = std::get_if<protocol::Hello>(&in.envelope.message))
        inbox.push(where + ": " + hello->node_name);
    };
    return h;
  };
  auto first = std::make_unique<Server>(server_at("ipc://" + dir_ + "/first.sock"), hellos_into("first"));
  Client client(client_at(first->endpoint()), {});
  client.notify(protocol::Hello{"n2", 7, protocol::kProtocolVersion});
  ASSERT_TRUE(inbox.wait(1, 5s)) << "no hello at the first endpoint";
  first.reset();  // the controller died with its host
  Server second(server_at("ipc://" + dir_ + "/second.sock"), hellos_into("second"));
  client.reconnect(second.endpoint());
  client.notify(protocol::Hello{"n2", 7, protocol::kProtocolVersion});
  ASSERT_TRUE(inbox.wait(2, 5s)) << "no hello at the new endpoint";
  EXPECT_EQ(inbox.items(), (std::vector<std::string>{"first: n2", "second: n2"}));
}

// The heartbeat interval is a fifth of the timeout: the default 1 s for 5 s, and for the
// shortest timeout a job may set (recovery.heartbeat_timeout: 500ms) 100 ms.
TEST(Heartbeats, IntervalIsAFifthOfTheTimeout) {
  EXPECT_EQ(heartbeat_interval_for(std::chrono::milliseconds(5000)), std::chrono::milliseconds(1000));
  EXPECT_EQ(heartbeat_interval_for(ServerOptions{}.heartbeat_timeout), ServerOptions{}.heartbeat_interval);
  EXPECT_EQ(heartbeat_interval_for(ClientOptions{}.heartbeat_timeout), ClientOptions{}.heartbeat_interval);
  EXPECT_EQ(heartbeat_interval_for(std::chrono::milliseconds(2000)), std::chrono::milliseconds(400));
  EXPECT_EQ(heartbeat_interval_for(std::chrono::milliseconds(500)), std::chrono::milliseconds(100));
}

}  // namespace
}  // namespace bellows::transport
