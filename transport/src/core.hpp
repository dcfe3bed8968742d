#pragma once
// The engine under Server and Client: one ZeroMQ socket (ROUTER or DEALER), its ZAP handler
// and monitor, and the receive thread that owns them all.

#include <sys/types.h>

#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bellows/transport/endpoint.hpp"

namespace bellows::transport::detail {

enum class Role { server, client };

struct CoreOptions {
  Role role = Role::server;
  std::string endpoint;
  std::optional<CurveKeyPair> curve;
  std::optional<std::string> curve_server_key;
  uid_t owner_uid = 0;
  LogSink log;
  std::chrono::milliseconds drop_delay{100};
  /// ZeroMQ heartbeats on the connections (0: none).
  std::chrono::milliseconds heartbeat_interval{0};
  std::chrono::milliseconds heartbeat_timeout{0};
};

class Core : public std::enable_shared_from_this<Core> {
 public:
  using Clock = std::chrono::steady_clock;

  /// Creates and binds (server) or connects (client) the sockets; throws TransportError.
  Core(CoreOptions options, Handlers handlers);
  ~Core();

  /// Starts the receive thread (once, after the Core is owned by a shared_ptr).
  void start();
  /// Stops and joins the receive thread; idempotent.
  void stop();

  const std::string& endpoint() const { return endpoint_; }

  /// Client: connects to `endpoint` in place of the one it connected to (on the receive thread,
  /// at its next pass); what is sent from then on goes to the new one.
  void reconnect(std::string endpoint);

  void notify(const PeerId& peer, protocol::Message message);
  RequestResult request(const PeerId& peer, protocol::Message message,
                        std::chrono::milliseconds timeout);
  void request_async(const PeerId& peer, protocol::Message message,
                     std::chrono::milliseconds timeout, std::function<void(RequestResult)> done);
  /// Sends the reply to a request (from a Responder).
  void reply(const PeerId& peer, std::uint64_t correlation_id, protocol::Message message);

 private:
  struct Outgoing {
    PeerId peer;
    std::vector<std::uint8_t> bytes;
    std::uint64_t correlation_id = 0;  // nonzero: a request that waits for its reply
    protocol::MessageType type{};
    std::chrono::milliseconds timeout{0};
    std::function<void(RequestResult)> done;
    /// Client: set when the first send found no connection (held until then; a request's
    /// reply is due by then too).
    std::optional<Clock::time_point> deadline;
  };
  struct Pending {
    PeerId peer;
    protocol::MessageType type{};
    std::chrono::milliseconds timeout{0};
    Clock::time_point deadline;
    std::function<void(RequestResult)> done;
  };
  struct PeerState {
    int fd = -1;
    std::string address;
    std::string user_id;
    bool refused = false;
  };
  struct Drop {
    int fd = -1;
    PeerId peer;
    Clock::time_point at;
  };

  void enqueue(Outgoing out);
  void run();
  long poll_timeout_ms() const;
  bool take_commands();
  /// Sends, or (client, no connection at the moment) holds the message until it can go or
  /// its deadline passes.
  void send_now(Outgoing out);
  void hold(Outgoing out);
  /// After a send: a failure answered or logged, a request's reply awaited.
  void finish_send(Outgoing out, int code, const std::string& error);
  /// Sends what is held, in order, while the connection takes it; fails what waited too long.
  void retry_held(Clock::time_point now);
  /// Returns 0, or the errno of the failed send with `error` set.
  int send_bytes(const PeerId& peer, const std::vector<std::uint8_t>& bytes, std::string& error);
  void receive_all();
  void handle_message(const PeerId& peer, std::vector<zmq::message_t>& frames);
  void dispatch(const PeerId& peer, const PeerState& state, protocol::Envelope envelope);
  void refuse(const PeerId& peer, PeerState& state, const std::string& cause,
              const protocol::DecodeResult* decoded);
  void handle_zap();
  void drain_monitor();
  void peer_disconnected(int fd);
  /// Client: tells handlers_.on_connection.
  void connection_changed(bool connected);
  void expire(Clock::time_point now);
  void run_drops(Clock::time_point now);
  void finish(const std::string& why);
  void log(LogLevel level, const std::string& text);
  void log_once(LogLevel level, const std::string& text);
  bool on_loop_thread() const { return std::this_thread::get_id() == loop_thread_id_; }

  CoreOptions options_;
  Handlers handlers_;
  std::string endpoint_;
  zmq::context_t context_;
  zmq::socket_t socket_;
  zmq::socket_t zap_;
  zmq::socket_t monitor_;
  int wake_fd_ = -1;

  std::mutex mutex_;
  std::deque<Outgoing> queue_;
  bool stopping_ = false;
  std::optional<std::string> reconnect_to_;  ///< client: the endpoint reconnect() asked for
  std::mutex join_mutex_;
  std::thread thread_;
  std::thread::id loop_thread_id_;
  std::atomic<std::uint64_t> next_correlation_{1};

  // Receive thread only.
  std::unordered_map<std::uint64_t, Pending> pending_;
  std::deque<Outgoing> held_;  ///< client: messages waiting for the connection, in order
  std::map<PeerId, PeerState> peers_;
  std::map<int, PeerId> fd_peers_;
  std::vector<Drop> drops_;
  std::set<std::string> logged_;
};

}  // namespace bellows::transport::detail
