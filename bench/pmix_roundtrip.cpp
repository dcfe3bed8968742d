// The PMIx hop between a rank and bellowsd, measured on real processes: this program runs the
// daemon's PmixServer and starts a copy of itself that attaches through libbellows'
// ControlChannel, as an MPI rank does.
//
//   bellows_pmix_roundtrip [--n 2000] [--nodelay on|off]
//
// Phases (each --n times, medians and 99th percentiles in microseconds):
//   request      request_resize(+1) -> daemon answers at once -> answer back in the rank
//   request+event request_resize(+2) -> daemon answers, then at once notifies an expand
//                event: the answer's round trip, and the event's latency from the daemon's
//                PMIx_Notify_event to the rank's poll_events() (CLOCK_MONOTONIC is shared)
//   metrics      publish_metrics() call time in the rank, and the time until the daemon's
//                handler has them
// --nodelay off leaves Nagle's algorithm on both ends of the connection, as PMIx 4.2.2 does.

#include <bellows/daemon/pmix_server.hpp>
#include <bellows/protocol/pmix_events.hpp>
#include <bellows/runtime/control_channel.hpp>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

namespace {

namespace d = bellows::daemon;
namespace proto = bellows::protocol::pmix;
using Clock = std::chrono::steady_clock;

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

struct Summary {
  double median_us = 0;
  double p99_us = 0;
};

Summary summarize(std::vector<double> us) {
  if (us.empty()) return {};
  std::sort(us.begin(), us.end());
  const auto at = [&](double q) {
    return us[std::min(us.size() - 1, static_cast<std::size_t>(q * static_cast<double>(us.size())))];
  };
  return {at(0.5), at(0.99)};
}

void print(const char* what, const std::vector<double>& us) {
  const Summary s = summarize(us);
  std::printf("  %-34s median %9.1f us   p99 %9.1f us   (n=%zu)\n", what, s.median_us, s.p99_us,
              us.size());
}

int rank_side(int n) {
  auto channel = bellows::runtime::ControlChannel::connect_from_environment();
  if (!channel) {
    std::fprintf(stderr, "pmix_roundtrip: BELLOWS_DAEMON_URI is not set\n");
    return 2;
  }
  std::vector<double> request_us;
  std::vector<double> paired_request_us;
  std::vector<double> event_us;
  std::vector<double> metrics_call_us;
  std::uint64_t sent_ns = 0;
  bool got = false;
  channel->on_expand([&](const bellows::runtime::ExpandEvent& e) {
    sent_ns = e.resize_id;  // the daemon's send time
    got = true;
  });
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    const auto answer = channel->request_resize(+1);
    request_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (!answer.granted()) {
      std::fprintf(stderr, "pmix_roundtrip: request refused: %s\n", answer.text.c_str());
      return 1;
    }
  }
  for (int i = 0; i < n; ++i) {
    got = false;
    const auto t0 = Clock::now();
    channel->request_resize(+2);
    paired_request_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    while (!got) channel->poll_events(std::chrono::milliseconds(1000));
    event_us.push_back(static_cast<double>(now_ns() - sent_ns) / 1000.0);
  }
  bellows::runtime::RankMetrics m;
  for (int i = 0; i < n; ++i) {
    m.metrics.iteration = now_ns();  // the daemon computes the arrival latency from it
    const auto t0 = Clock::now();
    channel->publish_metrics(m);
    metrics_call_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // one at a time at the daemon
  }
  print("request (answer only)", request_us);
  print("request followed by an event", paired_request_us);
  print("event latency (daemon -> rank)", event_us);
  print("publish_metrics call", metrics_call_us);
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"PMIx round trips between bellowsd's server and a rank", "bellows_pmix_roundtrip"};
  int n = 2000;
  std::string nodelay = "on";
  bool child = false;
  app.add_option("--n", n, "samples per phase")->check(CLI::PositiveNumber);
  app.add_option("--nodelay", nodelay, "TCP_NODELAY on the connection")->check(CLI::IsMember({"on", "off"}));
  app.add_flag("--rank-side", child, "(internal) the rank's side");
  CLI11_PARSE(app, argc, argv);
  if (child) return rank_side(n);

  spdlog::set_level(spdlog::level::warn);
  const auto dir = std::filesystem::temp_directory_path() /
                   ("bellows-pmix-roundtrip-" + std::to_string(::getpid()));
  d::PmixServer::Options options;
  options.tmpdir = dir;
  options.tcp_nodelay = nodelay == "on";
  d::PmixServer server(options);

  std::mutex mutex;
  std::condition_variable done;
  std::vector<double> metrics_arrival_us;
  server.on_allocate([&server](const d::AllocationRequest& r, d::AllocationResponder responder) {
    responder.reply(PMIX_SUCCESS, "granted");
    if (r.num_nodes == 2)
      server.notify(proto::kExpandDecided, {{proto::kResizeId, now_ns()},
                                            {proto::kExpandCount, std::uint64_t{2}},
                                            {proto::kExpandHosts, std::string("n2,n3")}});
  });
  server.on_metrics([&](const d::ReceivedMetrics& m) {
    std::lock_guard lock(mutex);
    metrics_arrival_us.push_back(static_cast<double>(now_ns() - m.metrics.iteration) / 1000.0);
    done.notify_all();
  });

  std::printf("pmix_roundtrip: n=%d, TCP_NODELAY %s, server %s\n", n, nodelay.c_str(),
              server.uri().c_str());
  std::fflush(stdout);
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string uri = "BELLOWS_DAEMON_URI=" + server.uri();
  const std::string rank_nodelay = std::string("BELLOWS_TCP_NODELAY=") + (nodelay == "on" ? "1" : "0");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::putenv(const_cast<char*>(uri.c_str()));
    ::putenv(const_cast<char*>(rank_nodelay.c_str()));
    const std::string count = std::to_string(n);
    ::execl(self.c_str(), self.c_str(), "--rank-side", "--n", count.c_str(), nullptr);
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  {
    std::unique_lock lock(mutex);
    done.wait_for(lock, std::chrono::seconds(5),
                  [&] { return metrics_arrival_us.size() >= static_cast<std::size_t>(n); });
    print("metrics arrival (rank -> handler)", metrics_arrival_us);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "pmix_roundtrip: the rank side failed (status %d)\n", status);
    return 1;
  }
  return 0;
}
