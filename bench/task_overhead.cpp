// Runtime overhead: tasks per second per rank for tasks with empty bodies.
//
// Each rank runs `--chains` independent chains of control-dependent empty tasks
// (task p of a chain waits for task p-1), so every task goes through the whole
// path: instantiation from its key, dependency counting, the ready queue, a worker,
// completion and successor activation. Nothing crosses ranks.
//
//   mpiexec -n 2 ./bellows_task_overhead --tasks-per-rank 1000000 --chains 64
//
// Prints a summary and, as the last line, a JSON object with tasks_per_second_per_rank.

#include <CLI/CLI.hpp>
#include <mpi.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "bellows/runtime/runtime.hpp"

namespace br = bellows::runtime;

namespace {

class EmptyChains final : public br::TaskClass {
 public:
  EmptyChains(int ranks, int chains, int length)
      : TaskClass(0), ranks_(ranks), chains_(chains), length_(length) {}
  std::string_view name() const override { return "EMPTY"; }
  void for_each_task(const std::function<void(const br::TaskKey&)>& fn) const override {
    for (int r = 0; r < ranks_; ++r) {
      for (int c = 0; c < chains_; ++c) {
        for (int p = 0; p < length_; ++p) fn(key(r, c, p));
      }
    }
  }
  int owner(const br::TaskKey& k) const override { return k.index[0]; }
  void inputs(const br::TaskKey& k, std::vector<br::InputSource>& out) const override {
    if (k.index[2] > 0) out.push_back(br::InputSource::control_from(key(k.index[0], k.index[1], k.index[2] - 1), 0));
  }
  void successors(const br::TaskKey& k, int slot, std::vector<br::Successor>& out) const override {
    if (slot == 0 && k.index[2] + 1 < length_) {
      out.push_back(br::Successor::to_task(key(k.index[0], k.index[1], k.index[2] + 1), 0));
    }
  }
  void execute_cpu(const br::TaskKey&, std::span<br::Tile* const>) const override {}

 private:
  int ranks_, chains_, length_;
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long tasks_per_rank = 1'000'000;
  int chains = 64;
  int repeat = 3;
  CLI::App cli("Empty-task throughput of libbellows", "bellows_task_overhead");
  cli.add_option("--tasks-per-rank", tasks_per_rank, "tasks per rank per iteration")->check(CLI::PositiveNumber);
  cli.add_option("--chains", chains, "independent chains per rank")->check(CLI::PositiveNumber);
  cli.add_option("--repeat", repeat, "iterations")->check(CLI::PositiveNumber);
  br::RuntimeOptions options;
  cli.add_option("--comm-poll-us", options.comm_poll_us,
                 "microseconds the communication thread polls after a message")
      ->check(CLI::Range(0, br::kMaxCommPollUs));
  std::string workers_read_mail = options.workers_read_mail ? "on" : "off";
  cli.add_option("--workers-read-mail", workers_read_mail,
                 "workers read the same-host mailboxes themselves between tasks and before they sleep")
      ->check(CLI::IsMember({"on", "off"}));
  cli.add_option("--worker-poll-us", options.worker_poll_us,
                 "with --workers-read-mail on: microseconds an idle worker polls the mailboxes")
      ->check(CLI::Range(0, br::kMaxWorkerPollUs));
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (rank == 0) std::fprintf(stderr, "bellows_task_overhead: error: %s\n", e.what());
    MPI_Finalize();
    return e.get_exit_code() == 0 ? 0 : 2;
  }
  options.workers_read_mail = workers_read_mail == "on";
  const int length = static_cast<int>(tasks_per_rank / chains);
  const double tasks = static_cast<double>(length) * chains;
  nlohmann::json runs = nlohmann::json::array();
  double best = 0.0;
  {
    br::Runtime runtime(MPI_COMM_WORLD, options);
    runtime.add_task_class(std::make_unique<EmptyChains>(size, chains, length));
    for (int i = 0; i < repeat; ++i) {
      const auto report = runtime.run_iteration();
      const double rate = tasks / report.seconds;
      best = std::max(best, rate);
      runs.push_back({{"seconds", report.seconds}, {"tasks_per_second_per_rank", rate}});
      if (rank == 0) {
        std::printf("iteration %d: %.0f tasks per rank in %.3f s: %.0f tasks/s per rank\n", i + 1,
                    tasks, report.seconds, rate);
      }
    }
  }
  if (rank == 0) {
    nlohmann::json j{{"app", "task_overhead"}, {"ranks", size}, {"tasks_per_rank", tasks},
                     {"chains", chains}, {"runs", runs}, {"best_tasks_per_second_per_rank", best}};
    std::printf("%s\n", j.dump().c_str());
  }
  MPI_Finalize();
  return 0;
}
