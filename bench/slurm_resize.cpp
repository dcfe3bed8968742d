// Resize round trips through SlurmResourceManager against the same operations done raw with
// salloc and scontrol, interleaved in one run on one job (medians; ratios Bellows / raw).
//
//   expand: request_expand -> answer ok               vs  salloc --dependency=expand:JOB
//                                                          --no-shell; scontrol update
//                                                          JobId=HELPER NumNodes=0; until the
//                                                          job lists the nodes
//   shrink: release_nodes -> the nodes idle in Slurm  vs  scontrol update JobId=JOB
//                                                          NodeList=BATCHHOST; until idle
//
// Needs a Slurm cluster with permit_job_expansion: the one SLURM_CONF names, or one started
// here with scripts/local-slurm in a temporary directory (and stopped at the end).
//
//   bellows_slurm_resize_bench [--count 2] [--repeats 5]

#include "bellows/controller/slurm_resource_manager.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using bellows::controller::ExpandAnswer;
using bellows::controller::RmStatus;
using bellows::controller::SlurmResourceManager;

struct Output {
  int status = 0;
  std::string text;
};

/// Runs a shell command; its output (stdout and stderr) and exit status.
Output sh(const std::string& command) {
  Output out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed: " + command);
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe) != nullptr) out.text += buf.data();
  out.status = pclose(pipe);
  while (!out.text.empty() && out.text.back() == '\n') out.text.pop_back();
  return out;
}

std::string must(const std::string& command) {
  Output out = sh(command);
  if (out.status != 0) throw std::runtime_error(command + " failed: " + out.text);
  return out.text;
}

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

template <typename Ready>
void wait_for(Ready ready, const std::string& what, std::chrono::seconds timeout = 20s) {
  const auto deadline = Clock::now() + timeout;
  while (!ready()) {
    if (Clock::now() > deadline) throw std::runtime_error("timed out waiting for " + what);
    std::this_thread::sleep_for(2ms);
  }
}

/// A cluster started for this run, stopped when the run ends.
class OwnCluster {
 public:
  explicit OwnCluster(const std::string& local_slurm) : script_(local_slurm) {
    char dir_template[] = "/tmp/bellows-bench-XXXXXX";
    if (mkdtemp(dir_template) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = dir_template;
    std::cerr << "bellows_slurm_resize_bench: starting a cluster in " << dir_ << "\n";
    // --loopback: the raw side runs salloc and srun from this shell (docs/slurm.md).
    must(script_ + " start " + dir_ + " --nodes 4 --loopback");
    setenv("SLURM_CONF", (dir_ + "/etc/slurm.conf").c_str(), 1);
  }
  ~OwnCluster() {
    const Output out = sh(script_ + " stop " + dir_);
    if (out.status != 0) std::cerr << out.text << "\n";
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  OwnCluster(const OwnCluster&) = delete;
  OwnCluster& operator=(const OwnCluster&) = delete;

 private:
  std::string script_;
  std::string dir_;
};

bool all_idle(SlurmResourceManager& rm, const std::vector<std::string>& nodes) {
  auto idle = rm.idle_nodes();
  return idle.status.ok() && std::all_of(nodes.begin(), nodes.end(), [&](const std::string& n) {
           return std::find(idle.value.begin(), idle.value.end(), n) != idle.value.end();
         });
}

std::size_t node_count(SlurmResourceManager& rm, const std::string& job) {
  auto nodes = rm.nodes_of(job);
  return nodes.status.ok() ? nodes.value.size() : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Slurm expand and shrink: Bellows' SlurmResourceManager against raw salloc/scontrol"};
  unsigned count = 2;
  int repeats = 5;
  app.add_option("--count", count, "nodes added per expansion")->check(CLI::Range(1, 3));
  app.add_option("--repeats", repeats, "rounds (median reported)")->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);

  std::string job;
  std::unique_ptr<OwnCluster> cluster;
  try {
    if (std::getenv("SLURM_CONF") == nullptr) {
      cluster = std::make_unique<OwnCluster>(BELLOWS_LOCAL_SLURM);
    }
    nlohmann::json report;
    {
      SlurmResourceManager rm;
      job = must("sbatch --parsable -N1 -J bench-resize -o /dev/null --wrap 'sleep 600'");
      wait_for([&] { return node_count(rm, job) == 1; }, "job " + job + " to run");
      const std::string batch_host = rm.nodes_of(job).value.at(0);

      std::vector<double> expand_b, shrink_b, expand_raw, shrink_raw;
      std::vector<std::string> texts;
      for (int round = 0; round < repeats; ++round) {
        // Bellows: expand, then shrink back.
        std::optional<ExpandAnswer> grant;
        auto t = Clock::now();
        rm.request_expand({.job = job, .count = count, .min_count = count, .timeout = 10s},
                          [&](ExpandAnswer a) { grant = std::move(a); });
        wait_for([&] {
          rm.progress();
          return grant.has_value();
        }, "the expansion's answer");
        expand_b.push_back(since(t));
        if (!grant->status.ok()) throw std::runtime_error("expansion: " + grant->status.text);
        std::optional<RmStatus> released;
        t = Clock::now();
        rm.release_nodes(job, grant->nodes, [&](RmStatus s) { released = std::move(s); });
        wait_for([&] {
          rm.progress();
          return released.has_value();
        }, "the release's answer");
        if (!released->ok()) throw std::runtime_error("release: " + released->text);
        wait_for([&] { return all_idle(rm, grant->nodes); }, "released nodes idle");
        shrink_b.push_back(since(t));
        texts.push_back(grant->status.text + "; " + released->text);

        // Raw: salloc + scontrol, then scontrol.
        t = Clock::now();
        const std::string out = must("salloc -N" + std::to_string(count) + " --dependency=expand:" +
                                     job + " --no-shell -J bench-raw-expand");
        const auto at = out.find("allocation ");
        if (at == std::string::npos) throw std::runtime_error("salloc: " + out);
        std::istringstream rest(out.substr(at + 11));
        std::string helper;
        rest >> helper;
        must("scontrol update JobId=" + helper + " NumNodes=0");
        wait_for([&] { return node_count(rm, job) == 1 + count; }, "the raw merge");
        expand_raw.push_back(since(t));
        const auto now_held = rm.nodes_of(job).value;
        std::vector<std::string> added(now_held.begin() + 1, now_held.end());
        t = Clock::now();
        must("scontrol update JobId=" + job + " NodeList=" + batch_host);
        wait_for([&] { return all_idle(rm, added); }, "raw-released nodes idle");
        shrink_raw.push_back(since(t));
        if (rm.nodes_of(job).value != std::vector<std::string>{batch_host}) {
          throw std::runtime_error("job " + job + " is not back on " + batch_host);
        }
      }

      const double eb = median(expand_b), er = median(expand_raw);
      const double sb = median(shrink_b), sr = median(shrink_raw);
      std::printf("Slurm resize, %u node(s) per expansion, median of %d rounds (interleaved)\n",
                  count, repeats);
      std::printf("  %-38s %8s %8s %7s\n", "operation", "bellows", "raw", "ratio");
      std::printf("  %-38s %7.3fs %7.3fs %7.2fx\n", "expand (request -> answer ok)", eb, er, eb / er);
      std::printf("  %-38s %7.3fs %7.3fs %7.2fx\n", "shrink (release -> nodes idle)", sb, sr, sb / sr);
      std::printf("  targets: expand < 2 s: %s, shrink < 1 s: %s\n", eb < 2 ? "met" : "MISSED",
                  sb < 1 ? "met" : "MISSED");
      std::printf("  last answer: %s\n", texts.back().c_str());
      report = {{"bench", "slurm_resize"},
                {"count", count},
                {"repeats", repeats},
                {"expand_s", {{"bellows", eb}, {"raw", er}, {"ratio", eb / er}}},
                {"shrink_s", {{"bellows", sb}, {"raw", sr}, {"ratio", sb / sr}}},
                {"samples", {{"expand_bellows", expand_b}, {"expand_raw", expand_raw},
                             {"shrink_bellows", shrink_b}, {"shrink_raw", shrink_raw}}}};
    }
    sh("scancel " + job);
    std::cout << report.dump() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "bellows_slurm_resize_bench: error: " << e.what() << "\n";
    if (!job.empty()) sh("scancel " + job);
    return 1;
  }
  return 0;
}
