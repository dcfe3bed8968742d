#pragma once
// A controller's end for tests of what talks to it (a daemon's ControllerLink, a rank's
// ControlPlaneLink behind its daemon): a real transport server that records every message it
// receives, remembers the peer that said Hello, and answers each request with what the test's
// `answer` says (nullopt: the request stays unanswered until the test ends).

#include <bellows/protocol/messages.hpp>
#include <bellows/transport/endpoint.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace bellows::testing {

class RecordingController {
 public:
  using Answer = std::function<std::optional<protocol::Ack>(const protocol::Message&)>;

  /// Binds `endpoint` (its directory must be private) and serves until destroyed.
  RecordingController(std::string endpoint, transport::LogSink log, Answer answer) : answer_(std::move(answer)) {
    transport::Handlers handlers;
    handlers.on_request = [this](const transport::Incoming& in, transport::Responder responder) {
      std::optional<protocol::Ack> reply;
      {
        std::lock_guard lock(mutex_);
        received_.push_back(in.envelope.message);
        if (std::holds_alternative<protocol::Hello>(in.envelope.message)) peer_ = in.peer;
        reply = answer_(in.envelope.message);
        if (!reply) kept_.push_back(std::make_shared<transport::Responder>(std::move(responder)));
      }
      arrived_.notify_all();
      if (reply) responder.reply(*reply);
    };
    handlers.on_notification = [this](const transport::Incoming& in) {
      {
        std::lock_guard lock(mutex_);
        received_.push_back(in.envelope.message);
      }
      arrived_.notify_all();
    };
    transport::ServerOptions options;
    options.endpoint = std::move(endpoint);
    options.log = std::move(log);
    server_ = std::make_unique<transport::Server>(options, handlers);
  }

  [[nodiscard]] transport::Server& server() { return *server_; }
  [[nodiscard]] const std::string& endpoint() const { return server_->endpoint(); }

  /// Everything received so far, once at least `count` messages arrived or 20 s passed.
  std::vector<protocol::Message> received(std::size_t count) {
    std::unique_lock lock(mutex_);
    arrived_.wait_for(lock, std::chrono::seconds(20), [&] { return received_.size() >= count; });
    return received_;
  }
  /// How many messages arrived, now.
  [[nodiscard]] std::size_t count() {
    std::lock_guard lock(mutex_);
    return received_.size();
  }
  /// The peer that said Hello last.
  [[nodiscard]] transport::PeerId peer() {
    std::lock_guard lock(mutex_);
    return peer_;
  }

 private:
  Answer answer_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<protocol::Message> received_;
  std::vector<std::shared_ptr<transport::Responder>> kept_;
  transport::PeerId peer_;
  std::unique_ptr<transport::Server> server_;  // last: it stops before what its handlers use
};

}  // namespace bellows::testing
