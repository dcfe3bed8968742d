#pragma once
// What the ElasticJob tests share: the spawn spec that starts the test program again as a
// new rank, and main()'s body. `mpiexec -n 1 TEST` starts rank 0, which grows the job to
// its initial ranks; every rank (rank 0, the first ranks, and ranks added later, started
// with `child_flag ITERATION`) then runs the scenario under a watchdog.

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>

#include "bellows/runtime/elastic_job.hpp"
#include "bellows/runtime/membership.hpp"
#include "verdict.hpp"
#include "watchdog.hpp"

namespace bellows::test {

/// What a resize spawns: this test program again, told by `child_flag` that it joins the
/// job before iteration `join_iteration`.
inline runtime::SpawnSpec spawn_this_test(const char* child_flag, int join_iteration) {
  runtime::SpawnSpec spec;
  spec.command = runtime::current_executable();
  spec.args = {child_flag, std::to_string(join_iteration)};
  return spec;
}

/// main() of an ElasticJob test named `name`: builds the job (rank 0 grows it to
/// `initial_ranks`; a spawned rank joins it) and returns run(job, first iteration) of this
/// rank. An exception aborts the whole job; a non-zero result prints "FAILED" on stderr.
/// Every process, rank 0 and spawned ones alike, leaves its verdict for the test's wrapper
/// (verdict.hpp): a rank that left the job fails the test if its own checks failed.
inline int run_elastic_job_test(int argc, char** argv, const char* name, const char* child_flag,
                                int initial_ranks,
                                const std::function<int(runtime::ElasticJob&, int)>& run) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  const bool child = argc > 2 && std::string(argv[1]) == child_flag;
  const testing::ProcessVerdict verdict(std::string(name) + (child ? " child" : " rank 0"));
  testing::Watchdog dog(testing::limit_from_env("BELLOWS_TEST_WATCHDOG_S", 60.0),
                        std::string(name) + (child ? ": child" : ": scenario (rank 0)"));
  const auto spawn_spec = [child_flag](int join_iteration) {
    return spawn_this_test(child_flag, join_iteration);
  };
  int code = 1;
  try {
    if (child) {
      const int join_iteration = std::stoi(argv[2]);
      auto joined = runtime::Membership::join();
      if (!joined) throw std::runtime_error("started as a child but not spawned");
      runtime::ElasticJob job(std::move(*joined), spawn_spec, join_iteration);
      code = run(job, join_iteration);
    } else {
      runtime::Membership membership(MPI_COMM_WORLD);
      membership.grow(initial_ranks - 1, spawn_spec(0));
      runtime::ElasticJob job(std::move(membership), spawn_spec);
      code = run(job, 0);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: pid %d: %s; aborting the job\n", name, static_cast<int>(::getpid()),
                 error.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
  if (code != 0) std::fprintf(stderr, "%s: pid %d: FAILED\n", name, static_cast<int>(::getpid()));
  dog.disarm();
  MPI_Finalize();
  return verdict.record(code);
}

}  // namespace bellows::test
