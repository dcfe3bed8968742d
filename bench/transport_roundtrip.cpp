// Round trip of one controller <-> daemon request over bellows::transport: a Client in this
// process, the Server in a child process that answers every request with an Ack. Prints the
// median, p99 and max over ipc (uid-checked) and over tcp loopback with CURVE.
//
//   bellows_transport_roundtrip [--iterations N] [--warmup N]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "bellows/transport/endpoint.hpp"

namespace {

using namespace bellows;
using Clock = std::chrono::steady_clock;

// The child: serves ipc and tcp until killed; writes both endpoints to `out`, one a line.
[[noreturn]] void serve(const std::string& dir, int out) {
  transport::Handlers h;
  h.on_request = [](const transport::Incoming&, transport::Responder r) {
    r.reply(protocol::Ack{protocol::AckCode::ok, "ok"});
  };
  transport::ServerOptions ipc;
  ipc.endpoint = "ipc://" + dir + "/controller.sock";
  transport::Server ipc_server(ipc, h);
  transport::ServerOptions tcp;
  tcp.endpoint = "tcp://127.0.0.1:*";
  tcp.curve = transport::read_key_file(dir + "/job.key");
  transport::Server tcp_server(tcp, h);
  const std::string text = ipc_server.endpoint() + "\n" + tcp_server.endpoint() + "\n";
  if (::write(out, text.data(), text.size()) != static_cast<ssize_t>(text.size())) ::_exit(1);
  ::close(out);
  for (;;) ::pause();
}

void measure(const std::string& name, transport::ClientOptions options, int warmup, int iterations) {
  transport::Client client(std::move(options), {});
  const protocol::NodeMetrics metrics{"node-001", {12, 0.8125, 64, 0.97, 10, 2}};
  for (int i = 0; i < warmup; ++i) {
    const auto r = client.request(metrics, std::chrono::seconds(5));
    if (!r.ok()) {
      std::fprintf(stderr, "transport_roundtrip: %s: %s\n", name.c_str(), r.text.c_str());
      std::exit(1);
    }
  }
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    const auto t0 = Clock::now();
    const auto r = client.request(metrics, std::chrono::seconds(5));
    const auto t1 = Clock::now();
    if (!r.ok()) {
      std::fprintf(stderr, "transport_roundtrip: %s: %s\n", name.c_str(), r.text.c_str());
      std::exit(1);
    }
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  auto at = [&](double q) { return us[static_cast<std::size_t>(q * static_cast<double>(us.size() - 1))]; };
  std::printf("%-22s n=%d  median %7.1f us  p99 %7.1f us  max %8.1f us\n", name.c_str(), iterations,
              at(0.5), at(0.99), us.back());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("round trip of a controller <-> daemon request over bellows::transport");
  int iterations = 5000;
  int warmup = 500;
  app.add_option("--iterations", iterations, "measured round trips per transport")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "round trips before measuring")->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  char pattern[] = "/tmp/bellows-bench-XXXXXX";
  if (::mkdtemp(pattern) == nullptr) return 1;
  const std::string dir = pattern;
  const auto keys = transport::generate_curve_key_pair();
  transport::write_key_file(dir + "/job.key", keys);

  int fds[2];
  if (::pipe(fds) != 0) return 1;
  const pid_t child = ::fork();  // before any thread exists in this process
  if (child == 0) {
    ::close(fds[0]);
    serve(dir, fds[1]);
  }
  ::close(fds[1]);
  std::string text;
  char chunk[512];
  for (ssize_t n; (n = ::read(fds[0], chunk, sizeof chunk)) > 0;) text.append(chunk, static_cast<std::size_t>(n));
  ::close(fds[0]);
  const auto nl = text.find('\n');
  if (nl == std::string::npos) {
    std::fprintf(stderr, "transport_roundtrip: the server did not start\n");
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    return 1;
  }
  const std::string ipc = text.substr(0, nl);
  const std::string tcp = text.substr(nl + 1, text.find('\n', nl + 1) - nl - 1);

  std::printf("request node_metrics -> reply ack, client and server in separate processes\n");
  transport::ClientOptions ipc_options;
  ipc_options.endpoint = ipc;
  transport::ClientOptions tcp_options;
  tcp_options.endpoint = tcp;
  tcp_options.curve = keys;
  for (int round = 0; round < 2; ++round) {  // interleaved: ipc tcp ipc tcp
    measure("ipc (uid checked)", ipc_options, warmup, iterations);
    measure("tcp loopback (curve)", tcp_options, warmup, iterations);
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  std::filesystem::remove_all(dir);
  return 0;
}
