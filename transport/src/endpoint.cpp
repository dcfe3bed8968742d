#include "bellows/transport/endpoint.hpp"

#include <utility>

#include "core.hpp"

namespace bellows::transport {

const char* to_string(LogLevel level) {
  switch (level) {
    case LogLevel::info: return "info";
    case LogLevel::warning: return "warning";
    case LogLevel::error: return "error";
  }
  return "unknown";
}

const char* to_string(Status status) {
  switch (status) {
    case Status::ok: return "ok";
    case Status::timeout: return "timeout";
    case Status::unknown_peer: return "unknown_peer";
    case Status::peer_gone: return "peer_gone";
    case Status::closed: return "closed";
    case Status::send_failed: return "send_failed";
    case Status::would_block: return "would_block";
  }
  return "unknown";
}

std::string PeerId::to_string() const {
  static const char* digits = "0123456789abcdef";
  std::string text;
  for (const char c : routing_id) {
    const auto b = static_cast<unsigned char>(c);
    text += digits[b >> 4];
    text += digits[b & 0xfu];
  }
  return text;
}

// ---------------------------------------------------------------- Responder

Responder::Responder(std::weak_ptr<detail::Core> core, PeerId peer, std::uint64_t correlation_id,
                     protocol::MessageType request_type)
    : core_(std::move(core)),
      peer_(std::move(peer)),
      correlation_id_(correlation_id),
      request_type_(request_type) {}

Responder::Responder(Responder&& other) noexcept
    : core_(std::move(other.core_)),
      peer_(std::move(other.peer_)),
      correlation_id_(std::exchange(other.correlation_id_, 0)),
      request_type_(other.request_type_) {}

Responder& Responder::operator=(Responder&& other) noexcept {
  if (this != &other) {
    if (correlation_id_ != 0) {
      reply(protocol::Ack{protocol::AckCode::unanswered,
                          "the receiver dropped the " + std::string(protocol::to_string(request_type_)) +
                              " request without answering"});
    }
    core_ = std::move(other.core_);
    peer_ = std::move(other.peer_);
    correlation_id_ = std::exchange(other.correlation_id_, 0);
    request_type_ = other.request_type_;
  }
  return *this;
}

Responder::~Responder() {
  if (correlation_id_ == 0) return;
  try {
    reply(protocol::Ack{protocol::AckCode::unanswered,
                        "the receiver dropped the " + std::string(protocol::to_string(request_type_)) +
                            " request without answering"});
  } catch (...) {
    // Destructors never throw; the requester then sees its timeout.
  }
}

bool Responder::reply(protocol::Message message) {
  if (correlation_id_ == 0) return false;
  const std::uint64_t id = std::exchange(correlation_id_, 0);
  const auto core = core_.lock();
  if (!core) return false;
  core->reply(peer_, id, std::move(message));
  return true;
}

// ---------------------------------------------------------------- Server

Server::Server(ServerOptions options, Handlers handlers) {
  detail::CoreOptions o;
  o.role = detail::Role::server;
  o.endpoint = std::move(options.endpoint);
  o.curve = std::move(options.curve);
  o.owner_uid = options.owner_uid;
  o.log = std::move(options.log);
  o.drop_delay = options.drop_delay;
  o.heartbeat_interval = options.heartbeat_interval;
  o.heartbeat_timeout = options.heartbeat_timeout;
  core_ = std::make_shared<detail::Core>(std::move(o), std::move(handlers));
  core_->start();
}

Server::~Server() { stop(); }

const std::string& Server::endpoint() const { return core_->endpoint(); }

void Server::notify(const PeerId& peer, protocol::Message message) {
  core_->notify(peer, std::move(message));
}

RequestResult Server::request(const PeerId& peer, protocol::Message message,
                              std::chrono::milliseconds timeout) {
  return core_->request(peer, std::move(message), timeout);
}

void Server::request_async(const PeerId& peer, protocol::Message message,
                           std::chrono::milliseconds timeout,
                           std::function<void(RequestResult)> done) {
  core_->request_async(peer, std::move(message), timeout, std::move(done));
}

void Server::stop() { core_->stop(); }

// ---------------------------------------------------------------- Client

Client::Client(ClientOptions options, Handlers handlers) {
  detail::CoreOptions o;
  o.role = detail::Role::client;
  o.endpoint = std::move(options.endpoint);
  o.curve = std::move(options.curve);
  o.curve_server_key = std::move(options.curve_server_key);
  o.log = std::move(options.log);
  o.heartbeat_interval = options.heartbeat_interval;
  o.heartbeat_timeout = options.heartbeat_timeout;
  core_ = std::make_shared<detail::Core>(std::move(o), std::move(handlers));
  core_->start();
}

Client::~Client() { stop(); }

void Client::notify(protocol::Message message) { core_->notify(PeerId{}, std::move(message)); }

RequestResult Client::request(protocol::Message message, std::chrono::milliseconds timeout) {
  return core_->request(PeerId{}, std::move(message), timeout);
}

void Client::request_async(protocol::Message message, std::chrono::milliseconds timeout,
                           std::function<void(RequestResult)> done) {
  core_->request_async(PeerId{}, std::move(message), timeout, std::move(done));
}

void Client::reconnect(std::string endpoint) { core_->reconnect(std::move(endpoint)); }

void Client::stop() { core_->stop(); }

}  // namespace bellows::transport
