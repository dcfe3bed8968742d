// Uses an installed libbellows through its public headers: a runtime on one rank (its engine,
// devices and communicator) and a decision (plan_shrink).
#include <bellows/runtime/runtime.hpp>
#include <bellows/runtime/shrink_plan.hpp>
#include <mpi.h>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int result = 0;
  {
    bellows::runtime::Runtime runtime(MPI_COMM_WORLD, bellows::runtime::RuntimeOptions{});
    const std::vector<long> held{4, 1, 4};
    const auto plan = bellows::runtime::plan_shrink(held, std::vector<int>{2});
    std::printf("consumer: a runtime on %d rank(s); backup of rank 2: rank %d\n", runtime.size(),
                plan.backup[2]);
    result = plan.backup[2] == 1 ? 0 : 1;
  }
  MPI_Finalize();
  return result;
}
