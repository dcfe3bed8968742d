#pragma once
// The examples' task graphs (examples/gemm, cholesky, bspgemm), built for the simulator by
// the examples' own task classes: the same keys, owners, inputs, successors, flops and
// priorities a real run of `gemm`, `cholesky` or `bspgemm` executes.
//
// The task classes live in libraries that link the whole runtime (and so libmpi); nothing
// here calls MPI: the collections are made with no local rank and hold no tile.

#include <string>

#include <nlohmann/json.hpp>

#include "bellows/sim/graph.hpp"

namespace bellows::sim {

/// Which example and at what size (the examples' own options of the same names).
struct WorkloadOptions {
  std::string app = "gemm";  ///< gemm, cholesky or bspgemm
  int n = 2048;              ///< matrix order
  int tile = 256;            ///< tile size
  std::string pattern = "skewed";  ///< bspgemm: random, banded or skewed
  double density = 0.5;      ///< bspgemm: mean fraction of nonzero tiles of A and B
  int k = 0;                 ///< bspgemm: inner dimension (0: n)
  unsigned seed = 42;        ///< bspgemm: the sparsity pattern's seed (the examples' --seed and its default)
};

/// An empty string when the options are usable, else what is wrong (naming the option).
[[nodiscard]] std::string validate(const WorkloadOptions& options);

struct Workload {
  SimGraph graph;
  nlohmann::json description;  ///< app, n, tile, tasks, flops and the app's own fields
};

/// Builds the example's task graph for `ranks` ranks on the square-most block-cyclic grid
/// (as the examples choose it). Throws std::invalid_argument on bad options.
[[nodiscard]] Workload make_workload(const WorkloadOptions& options, int ranks);

}  // namespace bellows::sim
