// The far end for the transport tests, run as a child process. Prints one line per event
// on stdout so that the test can assert it, and exits on its own (or is killed by PID).
//
//   daemon      a bellows::transport::Client: hello request, node_metrics notification,
//               answers resize_decided with resize_ack, exits 0 on a stop notification
//   raw         a plain ZeroMQ DEALER: sends --send-hex bytes, prints what comes back
//   controller  a bellows::transport::Server: prints its endpoint, answers hello with ack
#include <grp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <zmq.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <thread>

#include "bellows/protocol/messages.hpp"
#include "bellows/transport/endpoint.hpp"

namespace {

using namespace bellows;
using namespace std::chrono_literals;

std::mutex out_mutex;

void say(const std::string& line) {
  std::lock_guard lock(out_mutex);
  std::cout << line << std::endl;
}

transport::LogSink stdout_log() {
  return [](transport::LogLevel level, const std::string& text) {
    say(std::string("log ") + transport::to_string(level) + ": " + text);
  };
}

std::string describe(const protocol::Message& message) {
  if (const auto* ack = std::get_if<protocol::Ack>(&message)) {
    return "ack " + std::to_string(static_cast<int>(ack->code)) + " " + ack->text;
  }
  return std::string(protocol::to_string(protocol::type_of(message)));
}

std::vector<std::uint8_t> from_hex(const std::string& hex) {
  std::vector<std::uint8_t> bytes;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes.push_back(static_cast<std::uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return bytes;
}

struct Options {
  std::string mode;
  std::string endpoint;
  std::string key_file;
  bool own_key = false;
  bool wrong_server_key = false;
  int uid = -1;
  int timeout_ms = 1000;
  std::string send_hex;
  std::string node = "node-1";
};

std::optional<transport::CurveKeyPair> keys_for(const Options& o,
                                                std::optional<std::string>& server_key) {
  if (o.key_file.empty()) return std::nullopt;
  auto job = transport::read_key_file(o.key_file);
  if (o.wrong_server_key) {
    auto other = transport::generate_curve_key_pair();
    say("key " + other.public_key);
    return other;  // a stranger: neither its own key nor the server key it expects is right
  }
  if (o.own_key) {
    auto mine = transport::generate_curve_key_pair();
    say("key " + mine.public_key);
    server_key = job.public_key;
    return mine;
  }
  return job;
}

int run_daemon(const Options& o) {
  std::mutex mutex;
  std::condition_variable cv;
  bool stop = false;
  transport::Handlers handlers;
  handlers.on_request = [&](const transport::Incoming& in, transport::Responder responder) {
    if (const auto* r = std::get_if<protocol::ResizeDecided>(&in.envelope.message)) {
      say("request resize_decided " + std::to_string(r->resize_id) + " " +
          std::to_string(r->new_nodes.size()));
      responder.reply(protocol::ResizeAck{{r->resize_id, protocol::ResizeOutcome::committed, 9, {8, 9}, ""}});
    }
  };
  handlers.on_notification = [&](const transport::Incoming& in) {
    if (const auto* s = std::get_if<protocol::Stop>(&in.envelope.message)) {
      say("stop " + s->reason + " " + std::to_string(s->grace_ms));
      std::lock_guard lock(mutex);
      stop = true;
      cv.notify_all();
    } else {
      say("notification " + describe(in.envelope.message));
    }
  };
  std::optional<std::string> server_key;
  transport::ClientOptions options;
  options.endpoint = o.endpoint;
  options.curve = keys_for(o, server_key);
  options.curve_server_key = server_key;
  options.log = stdout_log();
  transport::Client client(std::move(options), std::move(handlers));
  const auto result = client.request(
      protocol::Hello{o.node, static_cast<std::int32_t>(::getpid()), protocol::kProtocolVersion},
      std::chrono::milliseconds(o.timeout_ms));
  say(std::string("hello ") + transport::to_string(result.status) + " " +
      (result.ok() ? describe(result.reply) : result.text));
  if (!result.ok()) return 3;
  client.notify(protocol::NodeMetrics{o.node, {4, 0.25, 17, 0.5, 3, 1}});
  std::unique_lock lock(mutex);
  if (!cv.wait_for(lock, 20s, [&] { return stop; })) return 4;
  return 0;
}

int run_raw(const Options& o) {
  zmq::context_t context;
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::linger, 0);
  socket.connect(o.endpoint);
  const auto bytes = from_hex(o.send_hex);
  socket.send(zmq::buffer(bytes), zmq::send_flags::none);
  say("sent " + std::to_string(bytes.size()));
  // Print what comes back, until --timeout-ms passes without anything.
  socket.set(zmq::sockopt::rcvtimeo, o.timeout_ms);
  for (;;) {
    zmq::message_t reply;
    if (!socket.recv(reply)) break;
    const auto decoded = protocol::decode(
        std::span<const std::uint8_t>(static_cast<const std::uint8_t*>(reply.data()), reply.size()));
    if (decoded.ok()) {
      say("received version " + std::to_string(*decoded.peer_version) + " correlation " +
          std::to_string(decoded.envelope.correlation_id) + " " +
          describe(decoded.envelope.message));
    } else {
      say("received undecodable: " + decoded.text);
    }
  }
  say("quiet");
  return 0;
}

int run_controller(const Options& o) {
  transport::Handlers handlers;
  handlers.on_request = [](const transport::Incoming& in, transport::Responder responder) {
    responder.reply(protocol::Ack{protocol::AckCode::ok, "welcome " + describe(in.envelope.message)});
  };
  transport::ServerOptions options;
  options.endpoint = o.endpoint;
  options.log = stdout_log();
  transport::Server server(std::move(options), std::move(handlers));
  say("endpoint " + server.endpoint());
  std::this_thread::sleep_for(60s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("transport test peer");
  Options o;
  app.add_option("mode", o.mode)->required()->check(CLI::IsMember({"daemon", "raw", "controller"}));
  app.add_option("--endpoint", o.endpoint)->required();
  app.add_option("--key-file", o.key_file);
  app.add_flag("--own-key", o.own_key);
  app.add_flag("--wrong-server-key", o.wrong_server_key);
  app.add_option("--uid", o.uid);
  app.add_option("--timeout-ms", o.timeout_ms);
  app.add_option("--send-hex", o.send_hex);
  app.add_option("--node", o.node);
  CLI11_PARSE(app, argc, argv);
  if (o.uid >= 0) {
    const auto id = static_cast<uid_t>(o.uid);
    if (::setgroups(0, nullptr) != 0 || ::setgid(id) != 0 || ::setuid(id) != 0) {
      std::perror("transport_test_peer: cannot change user");
      return 5;
    }
  }
  try {
    if (o.mode == "daemon") return run_daemon(o);
    if (o.mode == "raw") return run_raw(o);
    return run_controller(o);
  } catch (const std::exception& e) {
    say(std::string("error ") + e.what());
    return 6;
  }
}
