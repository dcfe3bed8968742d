// ScaLAPACK reference benchmark: times PDGEMM (C = A*B) or PDPOTRF (lower
// Cholesky of an SPD matrix) on an N x N matrix distributed block-cyclically
// (NB x NB blocks) over a P x Q BLACS process grid, one OpenBLAS thread per
// rank. Each rank fills its own blocks from global indices, so the input is
// identical for every grid and tile size.
//
//   mpiexec -n 2 ./bellows_scalapack_reference --op gemm --n 4096 --tile 256
//   mpiexec -n 2 ./bellows_scalapack_reference --op potrf --n 1024 --check
//
// Options: --op gemm|potrf (gemm), --n N (4096), --tile NB (256),
// --grid PxQ (most square with P <= Q), --repeat R (3), --check (n <= 1024:
// compare the last run with a serial OpenBLAS/LAPACKE result).
// Each run regenerates the input outside the timed region; the time of a run
// is the maximum over ranks of MPI_Wtime around the call, after a barrier.
// Rank 0 prints one line per run and, as the last line of stdout, a JSON
// summary. Exit status: 0 success, 1 failed factorisation or check, 2 bad
// options.
//
// Use the mpiexec of the MPICH the binary was linked with (see
// bench/reference/CMakeLists.txt).

#include <cblas.h>
#include <lapacke.h>
#include <mpi.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "reference_common.hpp"

extern "C" {
// OpenBLAS thread control.
void openblas_set_num_threads(int num_threads);

// BLACS C interface.
void Cblacs_pinfo(int* my_process, int* process_count);
void Cblacs_get(int context, int what, int* value);
void Cblacs_gridinit(int* context, const char* order, int process_rows, int process_cols);
void Cblacs_gridinfo(int context, int* process_rows, int* process_cols, int* my_row,
                     int* my_col);
void Cblacs_gridexit(int context);
void Cblacs_exit(int not_done);

// ScaLAPACK tools (Fortran).
int numroc_(const int* n, const int* nb, const int* iproc, const int* isrcproc,
            const int* nprocs);
void descinit_(int* desc, const int* m, const int* n, const int* mb, const int* nb,
               const int* irsrc, const int* icsrc, const int* context, const int* lld,
               int* info);

// PBLAS (implemented in C: no hidden string lengths).
void pdgemm_(const char* transa, const char* transb, const int* m, const int* n,
             const int* k, const double* alpha, const double* a, const int* ia,
             const int* ja, const int* desca, const double* b, const int* ib, const int* jb,
             const int* descb, const double* beta, double* c, const int* ic, const int* jc,
             const int* descc);

// ScaLAPACK (Fortran: gfortran passes the length of `uplo` as a trailing
// hidden argument).
void pdpotrf_(const char* uplo, const int* n, double* a, const int* ia, const int* ja,
              const int* desca, int* info, std::size_t uplo_length);
}

namespace {

using bellows::bench::Operation;
using bellows::bench::RunResult;
using bellows::bench::UsageError;

constexpr int kDescriptorLength = 9;
constexpr std::int64_t kMaxCheckN = 1024;

struct Options {
  Operation op = Operation::kGemm;
  int n = 4096;
  int tile = 256;
  int grid_rows = 0;  // 0: choose from the number of ranks
  int grid_cols = 0;
  int repeat = 3;
  bool check = false;
};

Options parse_options(int argc, char** argv, int ranks) {
  using bellows::bench::parse_integer;
  Options options;
  bellows::bench::OptionParser parser;
  parser.add_option("--op", [&](std::string_view v) {
    options.op = bellows::bench::parse_operation("--op", v);
  });
  parser.add_option("--n", [&](std::string_view v) {
    options.n = static_cast<int>(parse_integer("--n", v, 1, 1 << 20));
  });
  parser.add_option("--tile", [&](std::string_view v) {
    options.tile = static_cast<int>(parse_integer("--tile", v, 1, 1 << 16));
  });
  parser.add_option("--repeat", [&](std::string_view v) {
    options.repeat = static_cast<int>(parse_integer("--repeat", v, 1, 1000));
  });
  parser.add_option("--grid", [&](std::string_view v) {
    const auto x = v.find('x');
    if (x == std::string_view::npos) {
      throw UsageError("option '--grid': expected PxQ, got '" + std::string(v) + "'");
    }
    options.grid_rows = static_cast<int>(parse_integer("--grid", v.substr(0, x), 1, 1 << 20));
    options.grid_cols = static_cast<int>(parse_integer("--grid", v.substr(x + 1), 1, 1 << 20));
  });
  parser.add_flag("--check", [&] { options.check = true; });
  parser.parse(argc, argv);

  if (options.grid_rows == 0) {
    // Most square grid with P <= Q.
    int rows = 1;
    for (int p = 1; p * p <= ranks; ++p) {
      if (ranks % p == 0) rows = p;
    }
    options.grid_rows = rows;
    options.grid_cols = ranks / rows;
  } else if (options.grid_rows * options.grid_cols != ranks) {
    throw UsageError("option '--grid': " + std::to_string(options.grid_rows) + "x" +
                     std::to_string(options.grid_cols) + " does not match " +
                     std::to_string(ranks) + " MPI ranks");
  }
  if (options.check && options.n > kMaxCheckN) {
    throw UsageError("option '--check' needs --n <= " + std::to_string(kMaxCheckN));
  }
  return options;
}

// Block-cyclic local-to-global index map (source process 0).
int global_index(int local, int block, int my_coord, int coord_count) {
  return ((local / block) * coord_count + my_coord) * block + local % block;
}

// This rank's part of the distributed matrices and grid coordinates.
struct LocalLayout {
  int grid_rows, grid_cols, my_row, my_col;
  int local_rows, local_cols, leading_dim;
  int n, tile;

  std::size_t size() const {
    return static_cast<std::size_t>(leading_dim) * static_cast<std::size_t>(local_cols);
  }
  int global_row(int local_row) const { return global_index(local_row, tile, my_row, grid_rows); }
  int global_col(int local_col) const { return global_index(local_col, tile, my_col, grid_cols); }

  template <typename EntryFn>
  void fill(std::vector<double>& local, EntryFn&& entry) const {
    for (int jl = 0; jl < local_cols; ++jl) {
      const int gj = global_col(jl);
      double* column = local.data() + static_cast<std::size_t>(jl) * leading_dim;
      for (int il = 0; il < local_rows; ++il) column[il] = entry(global_row(il), gj);
    }
  }
};

struct Matrices {
  std::vector<double> a, b, c;
};

void generate_input(const Options& options, const LocalLayout& layout, Matrices& m) {
  using namespace bellows::bench;
  if (options.op == Operation::kGemm) {
    layout.fill(m.a, [](int i, int j) { return uniform_entry(kMatrixA, i, j); });
    layout.fill(m.b, [](int i, int j) { return uniform_entry(kMatrixB, i, j); });
    std::fill(m.c.begin(), m.c.end(), 0.0);
  } else {
    const std::int64_t n = options.n;
    layout.fill(m.a, [n](int i, int j) { return spd_entry(kMatrixA, n, i, j); });
  }
}

// Serial reference for --check: returns max |distributed - reference| over
// the entries this rank holds (lower triangle for potrf) and max |reference|.
struct CheckResult {
  double max_error = 0.0;
  double max_reference = 0.0;
};

CheckResult compare_with_serial(const Options& options, const LocalLayout& layout,
                                const Matrices& m) {
  using namespace bellows::bench;
  const int n = options.n;
  const std::size_t nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  std::vector<double> a(nn), reference(nn);
  const auto at = [n](int i, int j) {
    return static_cast<std::size_t>(j) * static_cast<std::size_t>(n) + static_cast<std::size_t>(i);
  };
  if (options.op == Operation::kGemm) {
    std::vector<double> b(nn);
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < n; ++i) {
        a[at(i, j)] = uniform_entry(kMatrixA, i, j);
        b[at(i, j)] = uniform_entry(kMatrixB, i, j);
      }
    }
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a.data(), n, b.data(),
                n, 0.0, reference.data(), n);
  } else {
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < n; ++i) reference[at(i, j)] = spd_entry(kMatrixA, n, i, j);
    }
    const lapack_int info = LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', n, reference.data(), n);
    if (info != 0) {
      std::fprintf(stderr, "check: serial LAPACKE_dpotrf failed, info=%d\n",
                   static_cast<int>(info));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }

  const std::vector<double>& result = options.op == Operation::kGemm ? m.c : m.a;
  CheckResult check;
  for (int jl = 0; jl < layout.local_cols; ++jl) {
    const int gj = layout.global_col(jl);
    for (int il = 0; il < layout.local_rows; ++il) {
      const int gi = layout.global_row(il);
      if (options.op == Operation::kPotrf && gi < gj) continue;  // upper part is not referenced
      const double expected = reference[at(gi, gj)];
      const double actual = result[static_cast<std::size_t>(jl) * layout.leading_dim + il];
      check.max_error = std::max(check.max_error, std::abs(actual - expected));
      check.max_reference = std::max(check.max_reference, std::abs(expected));
    }
  }
  return check;
}

int run(int argc, char** argv) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);

  Options options;
  try {
    options = parse_options(argc, argv, ranks);
  } catch (const UsageError& error) {
    if (rank == 0) std::fprintf(stderr, "scalapack_reference: %s\n", error.what());
    return bellows::bench::kUsageExitCode;
  }

  int blacs_rank = 0, blacs_size = 0, context = 0;
  Cblacs_pinfo(&blacs_rank, &blacs_size);
  Cblacs_get(-1, 0, &context);
  Cblacs_gridinit(&context, "Row", options.grid_rows, options.grid_cols);

  LocalLayout layout{};
  Cblacs_gridinfo(context, &layout.grid_rows, &layout.grid_cols, &layout.my_row, &layout.my_col);
  layout.n = options.n;
  layout.tile = options.tile;
  const int zero = 0;
  layout.local_rows = numroc_(&options.n, &options.tile, &layout.my_row, &zero, &layout.grid_rows);
  layout.local_cols = numroc_(&options.n, &options.tile, &layout.my_col, &zero, &layout.grid_cols);
  layout.leading_dim = std::max(1, layout.local_rows);

  int descriptor[kDescriptorLength];
  int info = 0;
  descinit_(descriptor, &options.n, &options.n, &options.tile, &options.tile, &zero, &zero,
            &context, &layout.leading_dim, &info);
  if (info != 0) {
    if (rank == 0) std::fprintf(stderr, "scalapack_reference: descinit failed, info=%d\n", info);
    Cblacs_gridexit(context);
    return 1;
  }

  Matrices matrices;
  matrices.a.resize(layout.size());
  if (options.op == Operation::kGemm) {
    matrices.b.resize(layout.size());
    matrices.c.resize(layout.size());
  }

  const char* op_name = bellows::bench::operation_name(options.op);
  if (rank == 0) {
    std::printf("scalapack %s: n=%d tile=%d ranks=%d grid=%dx%d, 1 OpenBLAS thread per rank\n",
                op_name, options.n, options.tile, ranks, layout.grid_rows, layout.grid_cols);
  }

  const double flops = bellows::bench::operation_flops(options.op, options.n);
  const int one_index = 1;
  std::vector<RunResult> runs;
  for (int r = 0; r < options.repeat; ++r) {
    generate_input(options, layout, matrices);

    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    if (options.op == Operation::kGemm) {
      const double alpha = 1.0, beta = 0.0;
      pdgemm_("N", "N", &options.n, &options.n, &options.n, &alpha, matrices.a.data(),
              &one_index, &one_index, descriptor, matrices.b.data(), &one_index, &one_index,
              descriptor, &beta, matrices.c.data(), &one_index, &one_index, descriptor);
    } else {
      pdpotrf_("L", &options.n, matrices.a.data(), &one_index, &one_index, descriptor, &info, 1);
    }
    const double local_seconds = MPI_Wtime() - start;

    double seconds = 0.0;
    MPI_Allreduce(&local_seconds, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

    if (options.op == Operation::kPotrf) {
      int infos[2] = {info, -info}, extremes[2] = {0, 0};
      MPI_Allreduce(infos, extremes, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      const int global_info = extremes[0] != 0 ? extremes[0] : -extremes[1];
      if (global_info != 0) {
        if (rank == 0) {
          std::fprintf(stderr, "scalapack_reference: pdpotrf failed, info=%d\n", global_info);
        }
        Cblacs_gridexit(context);
        return 1;
      }
    }

    const RunResult result{seconds, flops / seconds * 1e-9};
    runs.push_back(result);
    if (rank == 0) {
      std::printf("run %d/%d: %.6f s, %.3f GFLOP/s\n", r + 1, options.repeat, result.seconds,
                  result.gflops);
    }
  }

  int status = 0;
  if (options.check) {
    const CheckResult local = compare_with_serial(options, layout, matrices);
    double local_values[2] = {local.max_error, local.max_reference}, global_values[2] = {0, 0};
    MPI_Allreduce(local_values, global_values, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const double error = global_values[1] > 0 ? global_values[0] / global_values[1]
                                              : global_values[0];
    const double tolerance = 64.0 * options.n * DBL_EPSILON;
    if (rank == 0) {
      if (error <= tolerance) {
        std::printf("check: ok (err=%.3e)\n", error);
      } else {
        std::fprintf(stderr, "check: FAILED (err=%.3e > tolerance %.3e)\n", error, tolerance);
      }
    }
    if (!(error <= tolerance)) status = 1;
  }

  if (rank == 0 && status == 0) {
    std::printf(
        "{\"app\":\"scalapack\",\"op\":\"%s\",\"n\":%d,\"tile\":%d,\"ranks\":%d,"
        "\"grid\":[%d,%d],\"runs\":%s,\"best_gflops\":%.3f,\"median_gflops\":%.3f}\n",
        op_name, options.n, options.tile, ranks, layout.grid_rows, layout.grid_cols,
        bellows::bench::runs_json(runs).c_str(), bellows::bench::best_gflops(runs),
        bellows::bench::median_gflops(runs));
  }
  std::fflush(stdout);
  Cblacs_gridexit(context);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  openblas_set_num_threads(1);  // one BLAS thread per rank
  MPI_Init(&argc, &argv);
  const int status = run(argc, argv);
  Cblacs_exit(1);  // release BLACS, leave MPI to us
  MPI_Finalize();
  return status;
}
