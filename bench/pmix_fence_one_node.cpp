// The baseline of bench/pmix_fence.py: a PMIx_Fence among the ranks of one node. This program
// runs bellowsd's PmixServer and starts --ranks copies of pmix_fence_client (a PMIx-native C
// client) as the ranks of one namespace, all on this node, in its `bench` mode: --rounds times
// Put --bytes bytes, Commit, PMIx_Fence with PMIX_COLLECT_DATA. Each rank writes the seconds of
// its fences to OUT/rank-R.json. PMIx completes such a fence in the server itself.
//
//   bellows_pmix_fence_one_node --client PATH --out DIR [--ranks 4] [--rounds 200] [--bytes 64]

#include <bellows/daemon/launcher.hpp>
#include <bellows/daemon/pmix_server.hpp>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  CLI::App app{"PMIx_Fence among the ranks of one node (pmix_fence_client under bellowsd's PMIx server)"};
  std::string client;
  std::string out;
  unsigned ranks = 4;
  unsigned rounds = 200;
  unsigned bytes = 64;
  app.add_option("--client", client, "pmix_fence_client")->required();
  app.add_option("--out", out, "directory for the ranks' results")->required();
  app.add_option("--ranks", ranks, "ranks on the node")->check(CLI::Range(1, 256));
  app.add_option("--rounds", rounds, "fences per rank")->check(CLI::Range(1, 100000));
  app.add_option("--bytes", bytes, "bytes each rank puts before each fence")->check(CLI::Range(1, 60000));
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  namespace d = bellows::daemon;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("bellows-fence-bench-" + std::to_string(::getpid()));
  std::atomic<unsigned> ended{0};
  std::atomic<unsigned> failed{0};
  {
    d::PmixServer server({.tmpdir = dir, .uri_file = {}, .node_name = "node0"});
    d::LocalLauncher launcher(server, [&](const d::ExitStatus& status) {
      if (!status.exited || status.code != 0) ++failed;
      ++ended;
    });
    d::LaunchSpec spec;
    spec.nspace = "fence-bench";
    spec.nprocs = ranks;
    spec.argv = {client, "bench", out, std::to_string(rounds), std::to_string(bytes)};
    launcher.launch(spec);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (ended.load() < ranks && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::filesystem::remove_all(dir);
  if (ended.load() < ranks || failed.load() > 0) {
    std::fprintf(stderr, "bellows_pmix_fence_one_node: %u of %u ranks ended, %u failed\n", ended.load(), ranks,
                 failed.load());
    return 1;
  }
  return 0;
}
