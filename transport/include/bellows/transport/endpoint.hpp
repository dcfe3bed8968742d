#pragma once
// The controller <-> daemon transport over ZeroMQ: the controller's Server binds a ROUTER
// socket, each daemon's Client connects a DEALER to it. Both sides can send one-way
// notifications and requests that get exactly one reply (matched by correlation id, with a
// timeout). Messages are bellows::protocol messages; who may connect is decided as
// described in security.hpp.
//
// Threading: each Server and Client owns one receive thread that does all socket work.
// Handlers run on that thread, one at a time, in arrival order; they must not block (a
// handler that needs time keeps its Responder and replies later from any thread). Every
// public method is thread-safe, except that request() must not be called from a handler
// (it would wait for the thread it blocks): there, use request_async().
//
// Refusals: a peer that fails authentication, a malformed message and a message of another
// protocol version are refused, logged once where detected (lowercase, with the exact
// cause), and the sending peer is dropped; nothing else is disturbed.

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "bellows/protocol/messages.hpp"
#include "bellows/transport/security.hpp"

namespace bellows::transport {

namespace detail {
class Core;
}

enum class LogLevel { info, warning, error };

/// Where the transport's log lines go. Called from the receive thread. The default writes
/// "bellows-transport: LEVEL: TEXT" to stderr.
using LogSink = std::function<void(LogLevel, const std::string&)>;

/// The lowercase name of a level ("warning").
const char* to_string(LogLevel level);

/// A connected daemon as the server knows it: the ZeroMQ routing id of its connection.
/// A daemon that reconnects gets a new one.
struct PeerId {
  std::string routing_id;
  bool operator==(const PeerId&) const = default;
  bool operator<(const PeerId& other) const { return routing_id < other.routing_id; }
  /// The routing id in hex, for logs.
  std::string to_string() const;
};

/// A message as it arrived.
struct Incoming {
  PeerId peer;               ///< the sender (server side; empty on the client side)
  std::string peer_address;  ///< "pid 812 uid 1000" for ipc, the IP address for tcp
  std::string user_id;       ///< what authentication established ("uid:1000", "curve:job-key")
  protocol::Envelope envelope;
};

/// How a request ended.
enum class Status {
  ok,           ///< a reply arrived (it may be an Ack with an error code)
  timeout,      ///< no reply within the timeout
  unknown_peer, ///< the server has no connection with that peer id
  peer_gone,    ///< the peer's connection closed before it replied
  closed,       ///< the endpoint was stopped before a reply arrived
  send_failed,  ///< ZeroMQ would not take the message (queue full)
  would_block,  ///< request() was called from a handler
};

/// The lowercase name of a status ("unknown_peer").
const char* to_string(Status status);

/// The outcome of a request: a status, a text that says what happened
/// ("no reply to resize_decided within 200 ms"), and the reply when status is ok.
struct RequestResult {
  Status status = Status::closed;
  std::string text;
  protocol::Message reply;
  bool ok() const { return status == Status::ok; }
};

/// The one reply owed to a request. Move-only; reply() may be called from any thread, once.
/// Destroyed unanswered, it replies Ack{unanswered} so that the requester learns at once.
class Responder {
 public:
  Responder(Responder&&) noexcept;
  Responder& operator=(Responder&&) noexcept;
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;
  ~Responder();

  /// Sends the reply; false when it was already sent or the endpoint is gone.
  bool reply(protocol::Message message);

 private:
  friend class detail::Core;
  Responder(std::weak_ptr<detail::Core> core, PeerId peer, std::uint64_t correlation_id,
            protocol::MessageType request_type);
  std::weak_ptr<detail::Core> core_;
  PeerId peer_;
  std::uint64_t correlation_id_ = 0;
  protocol::MessageType request_type_{};
};

/// What an endpoint does with what arrives. Unset handlers: requests are answered
/// Ack{unsupported}, notifications are dropped.
struct Handlers {
  std::function<void(const Incoming&, Responder)> on_request;
  std::function<void(const Incoming&)> on_notification;
  /// Server only: a peer's connection closed (its daemon exited, crashed or was dropped).
  std::function<void(const PeerId&)> on_peer_gone;
  /// Client only: the connection to the controller was established (true: its handshake
  /// succeeded) or lost (false: the controller closed it, its process ended, or no heartbeat
  /// came back within ClientOptions::heartbeat_timeout). The client goes on reconnecting.
  std::function<void(bool connected)> on_connection;
};

/// Server (controller side) settings.
struct ServerOptions {
  /// "ipc:///DIR/controller.sock" (DIR must be a private directory, see
  /// prepare_private_directory) or "tcp://ADDRESS:PORT" (PORT "*" picks a free one; needs
  /// `curve`).
  std::string endpoint;
  /// The job's key pair: the server's key, and the one client key accepted. Required for
  /// tcp, optional for ipc.
  std::optional<CurveKeyPair> curve;
  /// The only uid accepted over ipc.
  uid_t owner_uid = ::geteuid();
  LogSink log;
  /// How long a refused peer keeps its connection, so that the refusal reaches it.
  std::chrono::milliseconds drop_delay{100};
  /// ZeroMQ heartbeats on every peer's connection (ZMTP PING/PONG), as the client sends its
  /// own: a peer whose process is stopped or whose host went silent answers none, and its
  /// connection is closed as gone (Handlers::on_peer_gone) after heartbeat_timeout. 0: none.
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds heartbeat_timeout{5000};
};

/// The controller's end: binds, authenticates every peer, serves until destroyed.
class Server {
 public:
  /// Binds and starts the receive thread. Throws TransportError naming the endpoint and
  /// the problem (a directory others can enter, tcp without CURVE keys, address in use).
  Server(ServerOptions options, Handlers handlers);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  /// The bound endpoint, with the port resolved ("tcp://127.0.0.1:41234").
  const std::string& endpoint() const;

  /// Sends a one-way message to a peer. A peer that is gone is logged and skipped.
  void notify(const PeerId& peer, protocol::Message message);

  /// Sends a request and waits for its reply or the timeout.
  RequestResult request(const PeerId& peer, protocol::Message message,
                        std::chrono::milliseconds timeout);

  /// Sends a request; `done` runs on the receive thread with the reply or the failure.
  void request_async(const PeerId& peer, protocol::Message message,
                     std::chrono::milliseconds timeout, std::function<void(RequestResult)> done);

  /// Connects to `endpoint` in place of the controller's endpoint it was given (the same
  /// keys): a controller that took the job over on another host publishes its own endpoint.
  /// What is sent from then on goes there; a message ZeroMQ had queued for the old endpoint
  /// may be lost with it (a daemon says hello again on the new connection). Thread-safe.
  void reconnect(std::string endpoint);

  /// Stops the receive thread; pending requests end with Status::closed. Idempotent.
  void stop();

 private:
  std::shared_ptr<detail::Core> core_;
};

/// The heartbeat interval that goes with a heartbeat timeout: a fifth of it, so that a
/// connection is closed only after several PINGs in a row brought nothing back (1 s for the
/// default 5 s).
[[nodiscard]] constexpr std::chrono::milliseconds heartbeat_interval_for(std::chrono::milliseconds timeout) {
  return timeout / 5;
}

/// Client (daemon side) settings.
struct ClientOptions {
  /// The controller's endpoint as Server::endpoint() reports it.
  std::string endpoint;
  /// The job's key pair: required for tcp (the client presents its public key and expects
  /// the server to hold it), unused for ipc.
  std::optional<CurveKeyPair> curve;
  /// The server key to expect, when it is not curve->public_key.
  std::optional<std::string> curve_server_key;
  LogSink log;
  /// ZeroMQ heartbeats on the connection (ZMTP PING/PONG): one every heartbeat_interval, and
  /// a connection that brings nothing back within heartbeat_timeout is closed as lost (a
  /// controller whose host or network went away closes nothing itself).
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds heartbeat_timeout{5000};
};

/// A daemon's end: connects (and reconnects) to the controller.
class Client {
 public:
  /// Starts connecting in the background and starts the receive thread. Throws
  /// TransportError for bad options (tcp without keys, a malformed endpoint).
  Client(ClientOptions options, Handlers handlers);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  /// Sends a one-way message to the controller (queued until connected).
  void notify(protocol::Message message);

  /// Sends a request and waits for its reply or the timeout.
  RequestResult request(protocol::Message message, std::chrono::milliseconds timeout);

  /// Sends a request; `done` runs on the receive thread with the reply or the failure.
  void request_async(protocol::Message message, std::chrono::milliseconds timeout,
                     std::function<void(RequestResult)> done);

  /// Connects to `endpoint` in place of the controller's endpoint it was given (the same
  /// keys): a controller that took the job over on another host publishes its own endpoint.
  /// What is sent from then on goes there; a message ZeroMQ had queued for the old endpoint
  /// may be lost with it (a daemon says hello again on the new connection). Thread-safe.
  void reconnect(std::string endpoint);

  /// Stops the receive thread; pending requests end with Status::closed. Idempotent.
  void stop();

 private:
  std::shared_ptr<detail::Core> core_;
};

}  // namespace bellows::transport
