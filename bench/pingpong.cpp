// MPI ping-pong between ranks 0 and 1 with Bellows' MPICH: the latency of a small
// message and the one-way transfer time of one tile, the yardstick the stealing
// benchmark compares a steal's round trip with.
//
//   mpiexec -n 2 ./bellows_pingpong --tile 256 --repeat 200
//
// Prints one JSON object: {"latency_us", "tile_bytes", "tile_transfer_us"} (one-way,
// median over the repeats).

#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <vector>

namespace {

/// Median one-way time of `bytes` between ranks 0 and 1, in seconds.
double one_way_seconds(std::vector<char>& buffer, int repeat, int rank) {
  std::vector<double> samples;
  const int count = static_cast<int>(buffer.size());
  for (int r = 0; r < repeat; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    if (rank == 0) {
      MPI_Send(buffer.data(), count, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
      MPI_Recv(buffer.data(), count, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
      MPI_Recv(buffer.data(), count, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buffer.data(), count, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
    }
    samples.push_back((MPI_Wtime() - start) / 2.0);
  }
  std::nth_element(samples.begin(), samples.begin() + repeat / 2, samples.end());
  return samples[static_cast<std::size_t>(repeat / 2)];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int tile = 256;
  int repeat = 200;
  CLI::App cli("MPI ping-pong: small-message latency and one tile's transfer time",
               "bellows_pingpong");
  cli.add_option("--tile", tile, "tile order (doubles per side)")->check(CLI::PositiveNumber);
  cli.add_option("--repeat", repeat, "round trips per measurement")->check(CLI::PositiveNumber);
  try {
    cli.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = rank == 0 ? cli.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
    MPI_Finalize();
    return code == 0 ? 0 : 2;
  }
  if (size < 2) {
    if (rank == 0) std::fprintf(stderr, "bellows_pingpong: needs at least 2 ranks, got %d\n", size);
    MPI_Finalize();
    return 2;
  }
  std::vector<char> small(8);
  std::vector<char> big(static_cast<std::size_t>(tile) * tile * sizeof(double), 1);
  one_way_seconds(big, 10, rank);  // warm up the shared-memory path
  const double latency = one_way_seconds(small, repeat, rank);
  const double transfer = one_way_seconds(big, repeat, rank);
  if (rank == 0) {
    std::printf("{\"latency_us\": %.3f, \"tile\": %d, \"tile_bytes\": %zu, \"tile_transfer_us\": %.3f}\n",
                latency * 1e6, tile, big.size(), transfer * 1e6);
  }
  MPI_Finalize();
  return 0;
}
