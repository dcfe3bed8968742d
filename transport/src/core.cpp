#include "core.hpp"
#include "bellows/transport/socket_directory.hpp"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <iostream>

namespace bellows::transport::detail {
namespace {

constexpr const char* kZapDomain = "bellows";
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
constexpr const char* kMonitorEndpoint = "inproc://bellows.transport.monitor";
constexpr std::size_t kMaxLoggedKeys = 4096;
constexpr int kMaxBatch = 256;
/// How long a client holds a notification while it has no connection to the controller.
constexpr std::chrono::milliseconds kHoldNotification{2000};
/// How often it tries again meanwhile.
constexpr std::chrono::milliseconds kHeldRetry{5};

std::string describe_address(const char* address) {
  if (address == nullptr || *address == '\0') return "unknown";
  if (const auto c = parse_ipc_peer_address(address)) {
    return "pid " + std::to_string(c->pid) + " uid " + std::to_string(c->uid);
  }
  return address;
}

std::string ms_text(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

std::string handshake_detail(int value) {
  switch (value) {
    case ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
      return "curve cryptographic error (the peer does not use the job's server key)";
    case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
      return "security mechanism mismatch (a plain peer on a curve endpoint or the reverse)";
    default: break;
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%x", static_cast<unsigned>(value));
  return std::string("zmtp protocol error ") + hex;
}

void check_key(const std::string& key, const char* what) {
  if (key.size() != 40) {
    throw TransportError(std::string("curve ") + what + " key has " + std::to_string(key.size()) +
                         " characters, expected 40 (Z85)");
  }
}

}  // namespace

Core::Core(CoreOptions options, Handlers handlers)
    : options_(std::move(options)), handlers_(std::move(handlers)), context_(1) {
  if (!options_.log) {
    options_.log = [](LogLevel level, const std::string& text) {
      std::cerr << "bellows-transport: " << to_string(level) << ": " << text << std::endl;
    };
  }
  const std::string& ep = options_.endpoint;
  const bool ipc = ep.rfind("ipc://", 0) == 0;
  const bool tcp = ep.rfind("tcp://", 0) == 0;
  if (!ipc && !tcp) {
    throw TransportError("endpoint '" + ep + "': expected ipc://PATH or tcp://ADDRESS:PORT");
  }
  if (ipc) {
    if (const std::string problem = socket_path_problem(ep.substr(6)); !problem.empty())
      throw TransportError("endpoint " + ep + ": " + problem);
  }
  if (tcp && !options_.curve) {
    throw TransportError("endpoint " + ep +
                         ": tcp needs the job's curve keys (plain tcp is not authenticated)");
  }
  if (options_.curve) {
    check_key(options_.curve->public_key, "public");
    check_key(options_.curve->secret_key, "secret");
  }
  if (options_.curve_server_key) check_key(*options_.curve_server_key, "server");
  const bool server = options_.role == Role::server;
  if (ipc && server) {
    const std::filesystem::path path(ep.substr(6));
    const std::string problem = private_directory_problem(path.parent_path(), ::geteuid());
    if (!problem.empty()) throw TransportError("endpoint " + ep + ": " + problem);
  }
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw TransportError(std::string("eventfd: ") + std::strerror(errno));
  try {
    socket_ = zmq::socket_t(context_, server ? zmq::socket_type::router : zmq::socket_type::dealer);
    socket_.set(zmq::sockopt::linger, 100);
    socket_.set(zmq::sockopt::maxmsgsize,
                static_cast<std::int64_t>(protocol::kHeaderBytes + protocol::kMaxBodyBytes));
    if (server) {
      socket_.set(zmq::sockopt::router_mandatory, 1);
      // The ZAP handler must be bound before the socket that uses it.
      zap_ = zmq::socket_t(context_, zmq::socket_type::router);
      zap_.set(zmq::sockopt::linger, 0);
      zap_.bind(kZapEndpoint);
      socket_.set(zmq::sockopt::zap_domain, kZapDomain);
      if (options_.curve) {
        socket_.set(zmq::sockopt::curve_server, 1);
        socket_.set(zmq::sockopt::curve_secretkey, options_.curve->secret_key);
      }
    } else if (options_.curve) {
      socket_.set(zmq::sockopt::curve_serverkey,
                  options_.curve_server_key.value_or(options_.curve->public_key));
      socket_.set(zmq::sockopt::curve_publickey, options_.curve->public_key);
      socket_.set(zmq::sockopt::curve_secretkey, options_.curve->secret_key);
    }
    if (options_.heartbeat_interval.count() > 0) {
      socket_.set(zmq::sockopt::heartbeat_ivl, static_cast<int>(options_.heartbeat_interval.count()));
      socket_.set(zmq::sockopt::heartbeat_timeout, static_cast<int>(options_.heartbeat_timeout.count()));
    }
    const int events = server ? (ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
                              : (ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                                 ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    if (zmq_socket_monitor(socket_.handle(), kMonitorEndpoint, events) != 0) {
      throw zmq::error_t();
    }
    monitor_ = zmq::socket_t(context_, zmq::socket_type::pair);
    monitor_.set(zmq::sockopt::linger, 0);
    monitor_.connect(kMonitorEndpoint);
    if (server) {
      socket_.bind(ep);
      endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
    } else {
      socket_.connect(ep);
      endpoint_ = ep;
    }
  } catch (const zmq::error_t& e) {
    ::close(wake_fd_);
    throw TransportError("endpoint " + ep + ": cannot " + (server ? "bind" : "connect") + ": " +
                         e.what());
  }
}

Core::~Core() {
  stop();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void Core::start() {
  // The thread waits until its id is recorded, so that on_loop_thread() is right from the
  // first handler on.
  std::promise<void> ready;
  thread_ = std::thread([this, started = ready.get_future()]() mutable {
    started.wait();
    run();
  });
  loop_thread_id_ = thread_.get_id();
  ready.set_value();
}

void Core::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(wake_fd_, &one, sizeof one);
  // From a handler the loop ends once the handler returns; the owner joins it later.
  if (on_loop_thread()) return;
  std::lock_guard lock(join_mutex_);
  if (thread_.joinable()) thread_.join();
}

// ---------------------------------------------------------------- sending

void Core::enqueue(Outgoing out) {
  bool queued = false;
  {
    std::lock_guard lock(mutex_);
    if (!stopping_) {
      queue_.push_back(std::move(out));
      queued = true;
    }
  }
  if (!queued) {
    if (out.done) out.done({Status::closed, "the endpoint is stopped", protocol::Ack{}});
    return;
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(wake_fd_, &one, sizeof one);
}

void Core::notify(const PeerId& peer, protocol::Message message) {
  Outgoing out;
  out.peer = peer;
  out.type = protocol::type_of(message);
  out.bytes = protocol::encode(message);
  if (on_loop_thread()) return send_now(std::move(out));
  enqueue(std::move(out));
}

void Core::reply(const PeerId& peer, std::uint64_t correlation_id, protocol::Message message) {
  Outgoing out;
  out.peer = peer;
  out.type = protocol::type_of(message);
  out.bytes = protocol::encode(protocol::Envelope{protocol::Kind::reply, correlation_id, message});
  if (on_loop_thread()) return send_now(std::move(out));
  enqueue(std::move(out));
}

void Core::request_async(const PeerId& peer, protocol::Message message,
                         std::chrono::milliseconds timeout, std::function<void(RequestResult)> done) {
  Outgoing out;
  out.peer = peer;
  out.correlation_id = next_correlation_++;
  out.type = protocol::type_of(message);
  out.timeout = timeout;
  out.done = done ? std::move(done) : [](RequestResult) {};
  out.bytes = protocol::encode(
      protocol::Envelope{protocol::Kind::request, out.correlation_id, std::move(message)});
  if (on_loop_thread()) return send_now(std::move(out));
  enqueue(std::move(out));
}

RequestResult Core::request(const PeerId& peer, protocol::Message message,
                            std::chrono::milliseconds timeout) {
  if (on_loop_thread()) {
    return {Status::would_block,
            "request() called from a handler would block the receive thread: use request_async()",
            protocol::Ack{}};
  }
  auto promise = std::make_shared<std::promise<RequestResult>>();
  auto future = promise->get_future();
  request_async(peer, std::move(message), timeout,
                [promise](RequestResult r) { promise->set_value(std::move(r)); });
  return future.get();
}

int Core::send_bytes(const PeerId& peer, const std::vector<std::uint8_t>& bytes,
                     std::string& error) {
  if (options_.role == Role::server) {
    // A peer whose disconnection was seen is gone, even while the ROUTER socket still holds
    // its pipe for a moment (zmq tears it down on its I/O thread): a send would be queued
    // there and lost, and a request would wait for its timeout.
    if (!peers_.contains(peer)) {
      error = "no connected peer " + peer.to_string();
      return EHOSTUNREACH;
    }
    if (zmq_send(socket_.handle(), peer.routing_id.data(), peer.routing_id.size(),
                 ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
      const int code = zmq_errno();
      error = code == EHOSTUNREACH ? "no connected peer " + peer.to_string()
                                   : std::string(zmq_strerror(code));
      return code;
    }
  }
  if (zmq_send(socket_.handle(), bytes.data(), bytes.size(), ZMQ_DONTWAIT) < 0) {
    const int code = zmq_errno();
    error = zmq_strerror(code);
    return code;
  }
  return 0;
}

void Core::send_now(Outgoing out) {
  if (!held_.empty()) {  // nothing overtakes what waits for the connection
    hold(std::move(out));
    return;
  }
  std::string error;
  const int code = send_bytes(out.peer, out.bytes, error);
  if (code == EAGAIN && options_.role == Role::client) {
    hold(std::move(out));
    return;
  }
  finish_send(std::move(out), code, error);
}

void Core::hold(Outgoing out) {
  // No connection at this moment (the first one is not up yet, or ZeroMQ is reconnecting
  // after the controller dropped it): the message waits, in order, until it can go. A
  // request waits no longer than its timeout, a notification no longer than
  // kHoldNotification.
  if (!out.deadline) out.deadline = Clock::now() + (out.done ? out.timeout : kHoldNotification);
  held_.push_back(std::move(out));
}

void Core::finish_send(Outgoing out, int code, const std::string& error) {
  const std::string name(protocol::to_string(out.type));
  if (code != 0) {
    const bool unknown = error.rfind("no connected peer", 0) == 0;
    if (out.done) {
      out.done({unknown ? Status::unknown_peer : Status::send_failed,
                "cannot send " + name + ": " + error, protocol::Ack{}});
    } else {
      // A notification to a peer that is gone: its going was reported (on_peer_gone), and
      // what it was told no longer matters to it. Anything else is worth a warning.
      log(unknown ? LogLevel::info : LogLevel::warning, "dropped " + name + ": " + error);
    }
    return;
  }
  if (out.correlation_id != 0) {
    const auto deadline = out.deadline.value_or(Clock::now() + out.timeout);
    pending_.emplace(out.correlation_id,
                     Pending{out.peer, out.type, out.timeout, deadline, std::move(out.done)});
  }
}

void Core::retry_held(Clock::time_point now) {
  while (!held_.empty()) {
    std::string error;
    const int code = send_bytes(held_.front().peer, held_.front().bytes, error);
    if (code == EAGAIN && *held_.front().deadline > now) return;  // nothing may overtake it
    Outgoing out = std::move(held_.front());
    held_.pop_front();
    if (code != EAGAIN) {
      finish_send(std::move(out), code, error);
      continue;
    }
    const std::string name(protocol::to_string(out.type));
    if (out.done) {
      out.done({Status::timeout,
                "no reply to " + name + " within " + ms_text(out.timeout) +
                    " (no connection to the controller)",
                protocol::Ack{}});
    } else {
      log(LogLevel::warning, "dropped " + name + ": no connection to the controller within " +
                                 ms_text(kHoldNotification));
    }
  }
}

void Core::reconnect(std::string endpoint) {
  {
    std::lock_guard lock(mutex_);
    reconnect_to_ = std::move(endpoint);
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(wake_fd_, &one, sizeof one);
}

bool Core::take_commands() {
  std::deque<Outgoing> batch;
  bool stopping = false;
  std::optional<std::string> reconnect_to;
  {
    std::lock_guard lock(mutex_);
    batch.swap(queue_);
    stopping = stopping_;
    reconnect_to.swap(reconnect_to_);
  }
  if (reconnect_to && *reconnect_to != endpoint_) {
    try {
      socket_.disconnect(endpoint_);
    } catch (const zmq::error_t&) {
      // Not connected there any more: nothing to undo.
    }
    try {
      socket_.connect(*reconnect_to);
      log(LogLevel::info, "reconnecting from the controller at " + endpoint_ + " to " + *reconnect_to);
      logged_.erase("lost the connection to the controller at " + endpoint_);
      endpoint_ = *reconnect_to;
    } catch (const zmq::error_t& e) {
      log(LogLevel::error, "cannot connect to the controller at " + *reconnect_to + ": " + e.what() +
                               "; staying with " + endpoint_);
    }
  }
  for (auto& out : batch) send_now(std::move(out));
  return stopping;
}

// ---------------------------------------------------------------- the receive thread

long Core::poll_timeout_ms() const {
  auto next = Clock::time_point::max();
  for (const auto& [id, p] : pending_) next = std::min(next, p.deadline);
  for (const auto& d : drops_) next = std::min(next, d.at);
  if (!held_.empty()) next = std::min(next, Clock::now() + kHeldRetry);
  if (next == Clock::time_point::max()) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now()).count();
  return left < 0 ? 0 : static_cast<long>(left);
}

void Core::run() {
  zmq_pollitem_t items[4] = {
      {socket_.handle(), 0, ZMQ_POLLIN, 0},
      {nullptr, wake_fd_, ZMQ_POLLIN, 0},
      {monitor_.handle(), 0, ZMQ_POLLIN, 0},
      {zap_.handle(), 0, ZMQ_POLLIN, 0},
  };
  const int count = options_.role == Role::server ? 4 : 3;
  std::string why = "the endpoint is stopped";
  for (;;) {
    if (zmq_poll(items, count, poll_timeout_ms()) < 0) {
      if (zmq_errno() == EINTR) continue;
      why = std::string("poll failed: ") + zmq_strerror(zmq_errno());
      log(LogLevel::error, why);
      break;
    }
    if (items[1].revents != 0) {
      std::uint64_t value = 0;
      [[maybe_unused]] const auto n = ::read(wake_fd_, &value, sizeof value);
    }
    retry_held(Clock::now());
    const bool stopping = take_commands();
    if (count == 4 && items[3].revents != 0) handle_zap();
    drain_monitor();
    receive_all();
    const auto now = Clock::now();
    expire(now);
    run_drops(now);
    if (stopping) break;
  }
  finish(why);
}

void Core::finish(const std::string& why) {
  auto pending = std::move(pending_);
  pending_.clear();
  for (auto& [id, p] : pending) {
    p.done({Status::closed, "no reply to " + std::string(protocol::to_string(p.type)) + ": " + why,
            protocol::Ack{}});
  }
  // Requests held for the connection, then those queued after the last pass.
  std::deque<Outgoing> left = std::move(held_);
  held_.clear();
  {
    std::lock_guard lock(mutex_);
    for (auto& out : queue_) left.push_back(std::move(out));
    queue_.clear();
  }
  for (auto& out : left) {
    if (out.done) out.done({Status::closed, why, protocol::Ack{}});
  }
}

void Core::receive_all() {
  for (int n = 0; n < kMaxBatch; ++n) {
    std::vector<zmq::message_t> frames;
    for (;;) {
      zmq::message_t frame;
      if (zmq_msg_recv(frame.handle(), socket_.handle(), ZMQ_DONTWAIT) < 0) {
        if (frames.empty()) return;  // EAGAIN: nothing more now
        break;
      }
      const bool more = frame.more();
      frames.push_back(std::move(frame));
      if (!more) break;
    }
    // Connection events that came before this message (a closed connection whose file
    // descriptor the sender now reuses) are applied first.
    drain_monitor();
    PeerId peer;
    if (options_.role == Role::server) {
      peer.routing_id = frames.front().to_string();
      frames.erase(frames.begin());
    }
    handle_message(peer, frames);
  }
}

void Core::handle_message(const PeerId& peer, std::vector<zmq::message_t>& frames) {
  PeerState local;
  PeerState* state = &local;
  if (options_.role == Role::server) {
    auto [it, added] = peers_.try_emplace(peer);
    state = &it->second;
    if (added && !frames.empty()) {
      auto& first = frames.front();
      state->fd = zmq_msg_get(first.handle(), ZMQ_SRCFD);
      state->address = describe_address(first.gets("Peer-Address"));
      const char* user = first.gets("User-Id");
      state->user_id = user != nullptr ? user : "";
      if (state->fd >= 0) fd_peers_[state->fd] = peer;
    }
  } else {
    local.address = "controller";
  }
  if (state->refused) return;  // dropped: already logged once
  if (frames.size() != 1) {
    return refuse(peer, *state,
                  "a message of " + std::to_string(frames.size()) + " frames, expected 1", nullptr);
  }
  const auto& body = frames.front();
  auto decoded = protocol::decode(
      std::span<const std::uint8_t>(static_cast<const std::uint8_t*>(body.data()), body.size()));
  if (!decoded.ok()) return refuse(peer, *state, decoded.text, &decoded);
  dispatch(peer, *state, std::move(decoded.envelope));
}

void Core::dispatch(const PeerId& peer, const PeerState& state, protocol::Envelope envelope) {
  const std::string name(protocol::to_string(protocol::type_of(envelope.message)));
  const std::string from =
      options_.role == Role::server ? "peer " + state.address : std::string("the controller");
  if (envelope.kind == protocol::Kind::reply) {
    const auto it = pending_.find(envelope.correlation_id);
    if (it == pending_.end() || it->second.peer != peer) {
      log(LogLevel::info, "dropped " + name + " reply " + std::to_string(envelope.correlation_id) +
                              " from " + from + ": no request waits for it (timed out?)");
      return;
    }
    auto done = std::move(it->second.done);
    pending_.erase(it);
    done({Status::ok, {}, std::move(envelope.message)});
    return;
  }
  Incoming in{peer, state.address, state.user_id, std::move(envelope)};
  if (in.envelope.kind == protocol::Kind::request) {
    Responder responder(weak_from_this(), peer, in.envelope.correlation_id,
                        protocol::type_of(in.envelope.message));
    if (!handlers_.on_request) {
      responder.reply(protocol::Ack{protocol::AckCode::unsupported, "no handler for " + name});
      return;
    }
    try {
      handlers_.on_request(in, std::move(responder));
    } catch (const std::exception& e) {
      log(LogLevel::error, "handler for " + name + " from " + from + " threw: " + e.what());
    }
    return;
  }
  if (options_.role == Role::client) {
    if (const auto* ack = std::get_if<protocol::Ack>(&in.envelope.message);
        ack != nullptr && ack->code == protocol::AckCode::refused) {
      log(LogLevel::warning, "the controller refused a message: " + ack->text);
    }
  }
  if (!handlers_.on_notification) return;
  try {
    handlers_.on_notification(in);
  } catch (const std::exception& e) {
    log(LogLevel::error, "handler for " + name + " from " + from + " threw: " + e.what());
  }
}

void Core::refuse(const PeerId& peer, PeerState& state, const std::string& cause,
                  const protocol::DecodeResult* decoded) {
  const bool server = options_.role == Role::server;
  log(LogLevel::warning, server ? "refused message from peer " + state.address + ": " + cause +
                                      "; dropping the peer"
                                : "refused message from the controller: " + cause);
  // Tell the sender why, correlated when its header could be read.
  protocol::Envelope answer{protocol::Kind::notification, 0,
                            protocol::Ack{protocol::AckCode::refused, cause}};
  if (decoded != nullptr && decoded->envelope.kind == protocol::Kind::request &&
      decoded->envelope.correlation_id != 0) {
    answer.kind = protocol::Kind::reply;
    answer.correlation_id = decoded->envelope.correlation_id;
  }
  std::string error;
  if (send_bytes(peer, protocol::encode(answer), error) != 0) {
    log(LogLevel::info, "could not tell " + (server ? "peer " + state.address : "the controller") +
                            " about the refusal: " + error);
  }
  if (!server) return;
  state.refused = true;
  if (state.fd >= 0) drops_.push_back({state.fd, peer, Clock::now() + options_.drop_delay});
}

void Core::run_drops(Clock::time_point now) {
  if (drops_.empty()) return;
  drain_monitor();
  for (auto it = drops_.begin(); it != drops_.end();) {
    if (it->at > now) {
      ++it;
      continue;
    }
    // Only while that descriptor is still this peer's connection (the monitor reports a
    // close before the descriptor can be reused).
    const auto owner = fd_peers_.find(it->fd);
    if (owner != fd_peers_.end() && owner->second == it->peer) {
      ::shutdown(it->fd, SHUT_RDWR);
    }
    it = drops_.erase(it);
  }
}

void Core::expire(Clock::time_point now) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    auto p = std::move(it->second);
    it = pending_.erase(it);
    p.done({Status::timeout,
            "no reply to " + std::string(protocol::to_string(p.type)) + " within " +
                ms_text(p.timeout),
            protocol::Ack{}});
  }
}

// ---------------------------------------------------------------- ZAP and monitor

void Core::handle_zap() {
  for (;;) {
    std::vector<zmq::message_t> frames;
    for (;;) {
      zmq::message_t frame;
      if (zmq_msg_recv(frame.handle(), zap_.handle(), ZMQ_DONTWAIT) < 0) break;
      const bool more = frame.more();
      frames.push_back(std::move(frame));
      if (!more) break;
    }
    if (frames.empty()) return;
    // ROUTER envelope: [sender id][empty][version][request id][domain][address][identity]
    // [mechanism][credentials...]
    if (frames.size() < 8) continue;
    ZapRequest request;
    request.domain = frames[4].to_string();
    request.address = frames[5].to_string();
    request.mechanism = frames[7].to_string();
    for (std::size_t i = 8; i < frames.size(); ++i) request.credentials.push_back(frames[i].to_string());
    AuthPolicy policy;
    policy.owner_uid = options_.owner_uid;
    if (options_.curve) policy.curve_client_key = options_.curve->public_key;
    const AuthDecision decision = authorize(request, policy);
    if (!decision.allowed) log_once(LogLevel::warning, "refused connection: " + decision.reason);
    const std::string status = decision.allowed ? "200" : "400";
    const std::string text = decision.allowed ? "OK" : decision.reason;
    zap_.send(frames[0], zmq::send_flags::sndmore);
    zap_.send(zmq::message_t(), zmq::send_flags::sndmore);
    zap_.send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
    zap_.send(frames[3], zmq::send_flags::sndmore);
    zap_.send(zmq::buffer(status), zmq::send_flags::sndmore);
    zap_.send(zmq::buffer(text), zmq::send_flags::sndmore);
    zap_.send(zmq::buffer(decision.user_id), zmq::send_flags::sndmore);
    zap_.send(zmq::message_t(), zmq::send_flags::none);
  }
}

void Core::drain_monitor() {
  for (;;) {
    zmq::message_t event;
    if (zmq_msg_recv(event.handle(), monitor_.handle(), ZMQ_DONTWAIT) < 0) return;
    zmq::message_t address;
    if (event.more()) (void)zmq_msg_recv(address.handle(), monitor_.handle(), 0);
    if (event.size() < 6) continue;
    std::uint16_t id = 0;
    std::int32_t value = 0;
    std::memcpy(&id, event.data(), 2);
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, 4);
    const bool server = options_.role == Role::server;
    switch (id) {
      case ZMQ_EVENT_ACCEPTED:
        peer_disconnected(value);  // a new connection on this descriptor: the old one is gone
        break;
      case ZMQ_EVENT_DISCONNECTED:
        if (server) {
          peer_disconnected(value);
        } else {
          log_once(LogLevel::info, "lost the connection to the controller at " + endpoint_);
          connection_changed(false);
        }
        break;
      case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        logged_.erase("lost the connection to the controller at " + endpoint_);
        connection_changed(true);
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        // The server's ZAP handler already logged why.
        if (!server) {
          log_once(LogLevel::warning, "the controller at " + endpoint_ +
                                          " refused this connection (authentication failed)");
        }
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        log_once(LogLevel::warning,
                 std::string(server ? "refused connection on " : "connection to the controller at ") +
                     endpoint_ + (server ? ": handshake failed: " : " failed: ") +
                     (id == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ? handshake_detail(value)
                                                                : std::string("handshake failed")));
        break;
      default: break;
    }
  }
}

void Core::peer_disconnected(int fd) {
  const auto it = fd_peers_.find(fd);
  if (it == fd_peers_.end()) return;  // never sent a message
  const PeerId peer = it->second;
  fd_peers_.erase(it);
  const auto state = peers_.find(peer);
  const std::string address = state != peers_.end() ? state->second.address : "unknown";
  if (state != peers_.end()) peers_.erase(state);
  for (auto p = pending_.begin(); p != pending_.end();) {
    if (p->second.peer != peer) {
      ++p;
      continue;
    }
    auto pending = std::move(p->second);
    p = pending_.erase(p);
    pending.done({Status::peer_gone,
                  "peer " + address + " disconnected before replying to " +
                      std::string(protocol::to_string(pending.type)),
                  protocol::Ack{}});
  }
  if (handlers_.on_peer_gone) {
    try {
      handlers_.on_peer_gone(peer);
    } catch (const std::exception& e) {
      log(LogLevel::error, "handler for a lost peer threw: " + std::string(e.what()));
    }
  }
}

void Core::connection_changed(bool connected) {
  if (!handlers_.on_connection) return;
  try {
    handlers_.on_connection(connected);
  } catch (const std::exception& e) {
    log(LogLevel::error, "handler for the connection's state threw: " + std::string(e.what()));
  }
}

void Core::log(LogLevel level, const std::string& text) {
  try {
    options_.log(level, text);
  } catch (...) {
    // A log sink that throws must not end the receive thread.
  }
}

void Core::log_once(LogLevel level, const std::string& text) {
  if (logged_.size() >= kMaxLoggedKeys) logged_.clear();
  if (logged_.insert(text).second) log(level, text);
}

}  // namespace bellows::transport::detail
