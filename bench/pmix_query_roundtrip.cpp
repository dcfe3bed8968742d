// PMIx_Query_info round trips from a PMIx tool to bellowsd's PMIx server, on real processes:
// this program runs the daemon's PmixServer with a job view of --nodes nodes (one rank each,
// every rank reported), as the controller would have sent it, and starts bellows-pmix-query
// (a PMIx tool in C) against it with --repeat N. The tool prints one line per query: median and
// 99th percentile of the call's time in microseconds, from PMIx_Query_info's call to its return.
//
//   bellows_pmix_query_roundtrip [--n 2000] [--nodes 4]
//
// Queries: JOB_SIZE, PROC_TABLE (one entry per node), four keys in one call, JOB_SIZE and
// NAMESPACES without PMIX_QUERY_REFRESH_CACHE (the tool's library looks in its own store
// first), and a key the daemon does not answer (NOT-SUPPORTED). The last line says how many
// queries reached the daemon: fewer than asked means the tool answered some itself.

#include <bellows/daemon/pmix_server.hpp>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  CLI::App app{"PMIx_Query_info round trips from a PMIx tool to bellowsd's PMIx server"};
  int n = 2000;
  int nodes = 4;
  app.add_option("--n", n, "round trips per query")->check(CLI::Range(1, 1000000));
  app.add_option("--nodes", nodes, "nodes (and ranks) of the job the daemon describes")
      ->check(CLI::Range(1, 4096));
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  namespace d = bellows::daemon;
  namespace pr = bellows::protocol;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("bellows-query-bench-" + std::to_string(::getpid()));
  int status = 1;
  {
    d::PmixServer server({.tmpdir = dir, .uri_file = {}, .node_name = "node0"});
    pr::JobView view;
    view.job = "bench-1";
    view.min_nodes = 1;
    view.max_nodes = static_cast<std::uint32_t>(nodes);
    view.ranks = static_cast<std::uint32_t>(nodes);
    for (int i = 0; i < nodes; ++i) {
      view.nodes.push_back("node" + std::to_string(i));
      view.node_ranks.push_back(static_cast<std::uint32_t>(i));
      view.node_pids.push_back(100000 + i);
    }
    server.set_job_view(view);
    std::printf("PMIx_Query_info from a tool (bellows-pmix-query) to bellowsd's PMIx server, "
                "job of %d node(s), %d round trips each\n", nodes, n);
    std::fflush(stdout);
    const pid_t child = ::fork();
    if (child == 0) {
      const std::string count = std::to_string(n);
      ::execl(BELLOWS_PMIX_QUERY_PATH, BELLOWS_PMIX_QUERY_PATH, "--uri", server.uri().c_str(),
              "--repeat", count.c_str(), static_cast<char*>(nullptr));
      std::perror("exec bellows-pmix-query");
      ::_exit(127);
    }
    int wait_status = 0;
    if (child > 0 && ::waitpid(child, &wait_status, 0) == child && WIFEXITED(wait_status))
      status = WEXITSTATUS(wait_status);
    const auto counters = server.counters();
    std::printf("queries the daemon answered: %llu\n",
                static_cast<unsigned long long>(counters.queries));
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return status;
}
