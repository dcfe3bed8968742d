// The whole control path of a resize request, on real processes: a rank (libbellows'
// ControlChannel, in a child process) asks its node's bellowsd for one more node
// (PMIx_Allocation_request); the daemon forwards it to the controller over the transport; the
// controller (ControllerService with the local backend, in this process) decides and its
// answer travels back the same way. Each request's decision is real: the resize is accepted
// and asks the resource manager, which has no idle node and denies it, so the job keeps its
// size and the next request starts from the same state.
//
//   bellows_control_path_bench [--n 500] [--bellowsd PATH]
//
// Prints the medians, 90th and 99th percentiles of the round trip (microseconds) and a JSON
// line. Target: under 5 ms.

#include <bellows/controller/controller_service.hpp>
#include <bellows/controller/local_daemon_launcher.hpp>
#include <bellows/controller/local_node_pool.hpp>
#include <bellows/controller/local_resource_manager.hpp>
#include <bellows/runtime/control_channel.hpp>
#include <bellows/transport/socket_directory.hpp>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace ctl = bellows::controller;
using Clock = std::chrono::steady_clock;

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

// The rank: n requests, one every few milliseconds (so that each finds no resize in flight).
int run_client(const std::string& uri_file, int n) {
  auto channel = bellows::runtime::ControlChannel::connect("file:" + uri_file);
  std::vector<double> us;
  int granted = 0;
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    const auto answer = channel.request_resize(+1);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    granted += answer.granted() ? 1 : 0;
    if (i == 0) std::printf("first answer: %s (%s)\n", answer.status_name.c_str(), answer.text.c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  const nlohmann::json out{{"bench", "control_path"},
                           {"requests", n},
                           {"accepted", granted},
                           {"round_trip_us", {{"p50", quantile(us, 0.5)},
                                              {"p90", quantile(us, 0.9)},
                                              {"p99", quantile(us, 0.99)},
                                              {"max", quantile(us, 1.0)}}},
                           {"target_us", 5000}};
  std::printf("rank -> bellowsd -> controller -> decision -> back: p50 %.0f us, p90 %.0f us, "
              "p99 %.0f us (target < 5000 us)\n%s\n",
              quantile(us, 0.5), quantile(us, 0.9), quantile(us, 0.99), out.dump().c_str());
  return granted == n ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"the control path of a resize request, rank to controller and back"};
  int n = 500;
  std::string bellowsd = BELLOWSD_PATH;
  std::string client_uri;
  app.add_option("--n", n, "requests")->check(CLI::PositiveNumber);
  app.add_option("--bellowsd", bellowsd, "the bellowsd executable");
  app.add_option("--client", client_uri, "(internal) run as the rank, attached to this URI file");
  CLI11_PARSE(app, argc, argv);
  if (!client_uri.empty()) return run_client(client_uri, n);

  namespace fs = std::filesystem;
  const fs::path job_dir = fs::temp_directory_path() / ("bellows-control-path-" + std::to_string(::getpid()));
  fs::create_directories(job_dir);
  fs::permissions(job_dir, fs::perms::owner_all, fs::perm_options::replace);

  ctl::SystemClock clock;
  ctl::LocalNodePool pool(1);
  ctl::LocalResourceManager rm(pool, clock);
  const auto first = pool.allocate("bench", 1);
  ctl::ControllerOptions options;
  options.job = "bench";
  options.job_dir = job_dir;
  options.nodes = first.nodes;
  options.min_nodes = 1;
  options.max_nodes = 2;
  const bellows::transport::SocketDirectory sockets(options.job, job_dir);
  options.endpoint = sockets.ipc_endpoint("controller.sock");
  ctl::LocalDaemonLauncher launcher({bellowsd, job_dir});
  int status = 1;
  {
    ctl::ControllerService service(options, rm, launcher, clock);
    service.start_daemons();
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (!service.daemons_registered() && Clock::now() < deadline)
      service.step(std::chrono::milliseconds(10));
    if (!service.daemons_registered()) {
      std::fprintf(stderr, "bellowsd did not register (log: %s)\n",
                   launcher.node_dir(first.nodes[0]).c_str());
      return 1;
    }
    const pid_t child = ::fork();
    if (child == 0) {
      const std::string uri = launcher.uri_file(first.nodes[0]).string();
      const std::string count = std::to_string(n);
      ::execl("/proc/self/exe", argv[0], "--client", uri.c_str(), "--n", count.c_str(),
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    while (::waitpid(child, &status, WNOHANG) == 0) service.step(std::chrono::milliseconds(5));
    std::printf("controller: %zu resizes decided (each denied by the resource manager: no idle node)\n",
                service.resizes().finished().size());
    service.shutdown();
  }
  std::error_code ec;
  if (status == 0) fs::remove_all(job_dir, ec);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
