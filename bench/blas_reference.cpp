// OpenBLAS reference benchmark: times DGEMM (C = A*B, cblas_dgemm) or the
// lower Cholesky factorisation of an SPD matrix (LAPACKE_dpotrf) on one
// N x N column-major matrix in a single process, with T OpenBLAS threads.
// The input is the same as scalapack_reference's (entries are a function of
// global indices).
//
//   ./bellows_blas_reference --op gemm --n 4096 --threads 2
//   ./bellows_blas_reference --op potrf --n 4096 --threads 2
//
// Options: --op gemm|potrf (gemm), --n N (4096), --threads T (number of
// online CPUs), --repeat R (3). Each run regenerates the input outside the
// timed region and is timed with a steady clock around the call. Prints one
// line per run and, as the last line of stdout, a JSON summary. Exit status:
// 0 success, 1 failed factorisation, 2 bad options.

#include <cblas.h>
#include <lapacke.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string_view>
#include <thread>
#include <vector>

#include "reference_common.hpp"

extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
}

namespace {

using bellows::bench::Operation;
using bellows::bench::RunResult;
using bellows::bench::UsageError;

struct Options {
  Operation op = Operation::kGemm;
  int n = 4096;
  int threads = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  int repeat = 3;
};

Options parse_options(int argc, char** argv) {
  using bellows::bench::parse_integer;
  Options options;
  bellows::bench::OptionParser parser;
  parser.add_option("--op", [&](std::string_view v) {
    options.op = bellows::bench::parse_operation("--op", v);
  });
  parser.add_option("--n", [&](std::string_view v) {
    options.n = static_cast<int>(parse_integer("--n", v, 1, 1 << 17));
  });
  parser.add_option("--threads", [&](std::string_view v) {
    options.threads = static_cast<int>(parse_integer("--threads", v, 1, 4096));
  });
  parser.add_option("--repeat", [&](std::string_view v) {
    options.repeat = static_cast<int>(parse_integer("--repeat", v, 1, 1000));
  });
  parser.parse(argc, argv);
  return options;
}

void generate_input(const Options& options, std::vector<double>& a, std::vector<double>& b,
                    std::vector<double>& c) {
  using namespace bellows::bench;
  const int n = options.n;
  for (int j = 0; j < n; ++j) {
    const std::size_t column = static_cast<std::size_t>(j) * static_cast<std::size_t>(n);
    for (int i = 0; i < n; ++i) {
      if (options.op == Operation::kGemm) {
        a[column + i] = uniform_entry(kMatrixA, i, j);
        b[column + i] = uniform_entry(kMatrixB, i, j);
        c[column + i] = 0.0;
      } else {
        a[column + i] = spd_entry(kMatrixA, n, i, j);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const UsageError& error) {
    std::fprintf(stderr, "blas_reference: %s\n", error.what());
    return bellows::bench::kUsageExitCode;
  }

  openblas_set_num_threads(options.threads);
  const int threads = openblas_get_num_threads();
  const char* op_name = bellows::bench::operation_name(options.op);
  std::printf("openblas %s: n=%d threads=%d (requested %d)\n", op_name, options.n, threads,
              options.threads);

  const int n = options.n;
  const std::size_t elements = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  std::vector<double> a(elements), b, c;
  if (options.op == Operation::kGemm) {
    b.resize(elements);
    c.resize(elements);
  }

  const double flops = bellows::bench::operation_flops(options.op, n);
  std::vector<RunResult> runs;
  for (int r = 0; r < options.repeat; ++r) {
    generate_input(options, a, b, c);

    const auto start = std::chrono::steady_clock::now();
    lapack_int info = 0;
    if (options.op == Operation::kGemm) {
      cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a.data(), n,
                  b.data(), n, 0.0, c.data(), n);
    } else {
      info = LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', n, a.data(), n);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (info != 0) {
      std::fprintf(stderr, "blas_reference: LAPACKE_dpotrf failed, info=%d\n",
                   static_cast<int>(info));
      return 1;
    }

    const RunResult result{seconds, flops / seconds * 1e-9};
    runs.push_back(result);
    std::printf("run %d/%d: %.6f s, %.3f GFLOP/s\n", r + 1, options.repeat, result.seconds,
                result.gflops);
  }

  std::printf(
      "{\"app\":\"openblas\",\"op\":\"%s\",\"n\":%d,\"threads\":%d,\"runs\":%s,"
      "\"best_gflops\":%.3f,\"median_gflops\":%.3f}\n",
      op_name, n, threads, bellows::bench::runs_json(runs).c_str(),
      bellows::bench::best_gflops(runs), bellows::bench::median_gflops(runs));
  return 0;
}
