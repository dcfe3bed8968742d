// The Runtime over several ranks (run under mpiexec -n 1..4): GEMM and Cholesky results
// against OpenBLAS/LAPACK, exact task counts, reproducibility across iterations, and a
// control-dependency chain that crosses ranks at every link.

#include <cblas.h>
#include <gtest/gtest.h>

#include <optional>
#include <lapacke.h>
#include <mpi.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "bellows/examples/app.hpp"
#include "bellows/examples/verify.hpp"
#include "bellows/runtime/runtime.hpp"
#include "cholesky_tasks.hpp"
#include "gemm_tasks.hpp"
#include "mpi_test_support.hpp"
#include "test_task_classes.hpp"

namespace br = bellows::runtime;
namespace be = bellows::examples;
namespace bt = bellows::testing;
using bt::MpiTest;

namespace {

constexpr unsigned kSeed = 42;

br::RuntimeOptions cpu_options(int workers = 1) {
  br::RuntimeOptions o;
  o.device = br::DeviceKind::cpu;
  o.cpu_workers = workers;
  o.comm_max_sleep_us = 100;
  return o;
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

/// Tasks of `cls` owned by `rank`.
std::uint64_t owned_by(const br::TaskClass& cls, int rank) {
  std::uint64_t n = 0;
  cls.for_each_task([&](const br::TaskKey& k) { n += cls.owner(k) == rank ? 1 : 0; });
  return n;
}

// ---------------------------------------------------------------- GEMM

struct GemmResult {
  std::vector<std::vector<double>> c;  ///< per iteration, rank 0 only
  std::vector<br::IterationReport> reports;
  br::RankStats stats;                 ///< this rank, all iterations
  std::uint64_t owned = 0;             ///< GEMM tasks this rank owns
};

/// C (m x n) = A (m x k) * B (k x n), tiled by `tile` on `grid`.
GemmResult run_gemm(int m, int n, int k, int tile, br::BlockCyclic2D grid, int iterations,
                    int workers = 1, std::optional<br::RuntimeOptions> options = std::nullopt) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  br::TiledMatrix a(0, m, k, tile, grid, rank), b(1, k, n, tile, grid, rank),
      c(2, m, n, tile, grid, rank);
  be::fill_random(a, kSeed);
  be::fill_random(b, kSeed + 1);
  br::Runtime runtime(MPI_COMM_WORLD, options ? *options : cpu_options(workers));
  runtime.add_collection(a);
  runtime.add_collection(b);
  runtime.add_collection(c);
  auto gemm = std::make_unique<be::GemmTasks>(0, a, b, c);
  GemmResult out;
  out.owned = owned_by(*gemm, rank);
  runtime.add_task_class(std::move(gemm));
  for (int it = 0; it < iterations; ++it) {
    out.reports.push_back(runtime.run_iteration());
    out.c.push_back(c.gather_to_root(runtime.communicator()));
  }
  out.stats = runtime.stats();
  return out;
}

void check_gemm(const GemmResult& r, int m, int n, int k, int tile, int rank, int iterations) {
  const auto expected_tasks =
      static_cast<std::uint64_t>(ceil_div(m, tile)) * ceil_div(n, tile) * ceil_div(k, tile);
  // Every task ran exactly once, on its owner.
  EXPECT_EQ(bt::sum_over_ranks(bt::class_count(r.stats, "GEMM")), expected_tasks * iterations);
  EXPECT_EQ(bt::class_count(r.stats, "GEMM"), r.owned * iterations) << "rank " << rank;
  EXPECT_EQ(r.stats.tasks_executed, r.owned * iterations) << "rank " << rank;
  // Every byte and message sent was received.
  EXPECT_EQ(bt::sum_over_ranks(r.stats.bytes_sent), bt::sum_over_ranks(r.stats.bytes_received));
  EXPECT_EQ(bt::sum_over_ranks(r.stats.messages_sent),
            bt::sum_over_ranks(r.stats.messages_received));
  const double flops = 2.0 * m * static_cast<double>(n) * k;
  for (const auto& rep : r.reports) {
    EXPECT_EQ(rep.total_flops, flops);
    EXPECT_GT(rep.seconds, 0.0);
  }
  if (rank == 0) {
    ASSERT_EQ(r.c.size(), static_cast<std::size_t>(iterations));
    ASSERT_EQ(r.c[0].size(), static_cast<std::size_t>(m) * n);
    const double error = be::gemm_max_relative_error(r.c[0], m, n, k, kSeed);
    EXPECT_LE(error, 16.0 * k * DBL_EPSILON) << "C differs from OpenBLAS";
  }
}

// ---------------------------------------------------------------- Cholesky

struct CholeskyResult {
  std::vector<std::vector<double>> l;  ///< per iteration, rank 0 only
  std::vector<br::IterationReport> reports;
  br::RankStats stats;
  std::map<std::string, std::uint64_t> owned;  ///< per class, this rank
  std::vector<double> a_after;                 ///< A gathered after the last iteration
};

CholeskyResult run_cholesky(int n, int tile, br::BlockCyclic2D grid, int iterations,
                            int workers = 1,
                            std::optional<br::RuntimeOptions> options = std::nullopt) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const auto lower = [](int m, int k) { return m >= k; };
  br::TiledMatrix a(0, n, n, tile, grid, rank, lower), l(1, n, n, tile, grid, rank, lower);
  be::fill_spd(a, kSeed);
  br::Runtime runtime(MPI_COMM_WORLD, options ? *options : cpu_options(workers));
  runtime.add_collection(a);
  runtime.add_collection(l);
  CholeskyResult out;
  for (auto& cls : be::make_cholesky_tasks(a, l)) {
    out.owned[std::string(cls->name())] = owned_by(*cls, rank);
    runtime.add_task_class(std::move(cls));
  }
  for (int it = 0; it < iterations; ++it) {
    out.reports.push_back(runtime.run_iteration());
    out.l.push_back(l.gather_to_root(runtime.communicator()));
  }
  out.a_after = a.gather_to_root(runtime.communicator());
  out.stats = runtime.stats();
  return out;
}

/// max |L - L_lapack| / max |L_lapack| with LAPACK's dpotrf on the whole matrix.
double cholesky_difference(const std::vector<double>& l, int n) {
  std::vector<double> ref(static_cast<std::size_t>(n) * n, 0.0);
  for (long j = 0; j < n; ++j) {
    for (long i = j; i < n; ++i) ref[static_cast<std::size_t>(j * n + i)] = be::spd_entry(kSeed, n, i, j);
  }
  if (LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', n, ref.data(), n) != 0) return INFINITY;
  double diff = 0.0, scale = 0.0;
  for (long j = 0; j < n; ++j) {
    for (long i = j; i < n; ++i) {
      const auto at = static_cast<std::size_t>(j * n + i);
      diff = std::max(diff, std::abs(l[at] - ref[at]));
      scale = std::max(scale, std::abs(ref[at]));
    }
  }
  return diff / scale;
}

void check_cholesky(const CholeskyResult& r, int n, int tile, int rank, int iterations) {
  const int nt = ceil_div(n, tile);
  const std::map<std::string, std::uint64_t> expected = {
      {"POTRF", static_cast<std::uint64_t>(nt)},
      {"TRSM", static_cast<std::uint64_t>(nt * (nt - 1) / 2)},
      {"SYRK", static_cast<std::uint64_t>(nt * (nt - 1) / 2)},
      {"GEMM", static_cast<std::uint64_t>(nt * (nt - 1) * (nt - 2) / 6)}};
  const auto totals = bt::class_totals(r.stats, {"POTRF", "TRSM", "SYRK", "GEMM"});
  for (const auto& [name, count] : expected) {
    EXPECT_EQ(totals.at(name), count * iterations) << name;
    EXPECT_EQ(bt::class_count(r.stats, name), r.owned.at(name) * iterations)
        << name << " on rank " << rank;
  }
  EXPECT_EQ(bt::sum_over_ranks(r.stats.bytes_sent), bt::sum_over_ranks(r.stats.bytes_received));
  EXPECT_EQ(bt::sum_over_ranks(r.stats.messages_sent),
            bt::sum_over_ranks(r.stats.messages_received));
  if (rank != 0) return;
  ASSERT_EQ(r.l.size(), static_cast<std::size_t>(iterations));
  const auto& l = r.l.back();
  ASSERT_EQ(l.size(), static_cast<std::size_t>(n) * n);
  const double residual = be::cholesky_scaled_residual(l, n, kSeed);
  EXPECT_LT(residual, 30.0);
  EXPECT_LE(cholesky_difference(l, n), 1e-12) << "L differs from LAPACK's dpotrf";
  int upper_nonzero = 0;
  for (long j = 0; j < n; ++j) {
    for (long i = 0; i < j; ++i) upper_nonzero += l[static_cast<std::size_t>(j * n + i)] != 0.0;
  }
  EXPECT_EQ(upper_nonzero, 0) << "L has entries above the diagonal";
  // The input collection A is left unchanged.
  int changed = 0;
  for (long j = 0; j < n; ++j) {
    for (long i = j; i < n; ++i) {
      changed += r.a_after[static_cast<std::size_t>(j * n + i)] != be::spd_entry(kSeed, n, i, j);
    }
  }
  EXPECT_EQ(changed, 0) << "the factorisation modified its input A";
}

bool bitwise_equal(const std::vector<double>& x, const std::vector<double>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
}

}  // namespace

// ---------------------------------------------------------------- tests

TEST_F(MpiTest, GemmOnSquareGrid) {
  const auto grid = br::BlockCyclic2D::square_for(size());
  const auto r = run_gemm(300, 300, 300, 64, grid, 1);
  check_gemm(r, 300, 300, 300, 64, rank(), 1);
}

TEST_F(MpiTest, GemmOnOneRowGrid) {
  const auto r = run_gemm(300, 300, 300, 64, br::BlockCyclic2D{1, size()}, 1);
  check_gemm(r, 300, 300, 300, 64, rank(), 1);
}

TEST_F(MpiTest, GemmOnOneColumnGridWithRectangularOperandsAndTwoWorkers) {
  // C (200 x 130) = A (200 x 300) * B (300 x 130): 4 x 3 tiles of C, 5 steps of k.
  const auto r = run_gemm(200, 130, 300, 64, br::BlockCyclic2D{size(), 1}, 1, 2);
  check_gemm(r, 200, 130, 300, 64, rank(), 1);
}

TEST_F(MpiTest, GemmIterationsAreBitIdentical) {
  const auto r = run_gemm(300, 300, 300, 64, br::BlockCyclic2D::square_for(size()), 2, 2);
  check_gemm(r, 300, 300, 300, 64, rank(), 2);
  ASSERT_EQ(r.reports.size(), 2U);
  EXPECT_EQ(r.reports[0].iteration, 1);
  EXPECT_EQ(r.reports[1].iteration, 2);
  EXPECT_EQ(r.reports[1].local.tasks_executed, r.owned) << "per-iteration count";
  // Every rank computed part of each iteration; the busiest share bounds the mean.
  for (const auto& report : r.reports) {
    EXPECT_GT(report.mean_compute_share, 0.0);
    EXPECT_LE(report.mean_compute_share, report.busiest_compute_share);
    EXPECT_LE(report.busiest_compute_share, 1.0);
  }
  if (rank() == 0) {
    ASSERT_EQ(r.c.size(), 2U);
    EXPECT_TRUE(bitwise_equal(r.c[0], r.c[1])) << "the second iteration computed another C";
  }
}

TEST_F(MpiTest, GemmInHybridModeRunsEveryTaskOnceOnOneDeviceAndVerifies) {
  // CPU workers and a computing emulated device with a 12 GB/s link: each task goes where it
  // is predicted to finish first (which place wins is DeviceChoice's unit tests' subject).
  auto options = cpu_options(1);
  options.device = br::DeviceKind::hybrid;
  options.emulated_gflops = 2.0;
  options.emulated_compute = true;
  options.emulated_link_gbps = 12.0;
  const int m = 256, n = 192, k = 320, tile = 64;
  const auto r =
      run_gemm(m, n, k, tile, br::BlockCyclic2D::square_for(size()), 2, 1, options);
  check_gemm(r, m, n, k, tile, rank(), 2);
  // Each execution counts once, on the device or on a CPU worker.
  EXPECT_LE(r.stats.tasks_on_device, r.stats.tasks_executed);
  // The device's tasks moved their inputs in (collections start each iteration on the host).
  if (r.stats.tasks_on_device > 0) {
    EXPECT_GT(r.stats.link_bytes, 0U);
  }
}

TEST_F(MpiTest, CholeskyOnSquareGrid) {
  const auto r = run_cholesky(350, 64, br::BlockCyclic2D::square_for(size()), 1);
  check_cholesky(r, 350, 64, rank(), 1);
}

TEST_F(MpiTest, CholeskyOnOneRowGridWithTwoWorkers) {
  const auto r = run_cholesky(350, 64, br::BlockCyclic2D{1, size()}, 1, 2);
  check_cholesky(r, 350, 64, rank(), 1);
}

TEST_F(MpiTest, CholeskyOnOneColumnGrid) {
  const auto r = run_cholesky(350, 64, br::BlockCyclic2D{size(), 1}, 1);
  check_cholesky(r, 350, 64, rank(), 1);
}

TEST_F(MpiTest, CholeskyIterationsAreBitIdentical) {
  const auto r = run_cholesky(350, 64, br::BlockCyclic2D::square_for(size()), 2, 2);
  check_cholesky(r, 350, 64, rank(), 2);
  if (rank() == 0) {
    ASSERT_EQ(r.l.size(), 2U);
    EXPECT_TRUE(bitwise_equal(r.l[0], r.l[1])) << "the second iteration computed another L";
  }
}

// Tiles of 16 x 16 doubles (2 KiB): with the default eager limit (4 KiB) each travels in its
// activation, with a limit of 0 each is fetched (or read on the same host and answered with
// Fetched). Cholesky moves nothing but task outputs between ranks, so every byte received
// comes in an activation, and each activation saves exactly the one answer it needs no more.
TEST_F(MpiTest, SmallTilesTravelInTheirActivationsWithTheSameResultAndHalfTheAnswers) {
  constexpr int kOrder = 96, kSmallTile = 16;
  constexpr std::uint64_t kTileBytes = kSmallTile * kSmallTile * sizeof(double);
  ASSERT_LE(kTileBytes, br::RuntimeOptions{}.eager_tile_bytes);
  for (const bool same_host : {true, false}) {
    SCOPED_TRACE(same_host ? "same-host transport" : "MPI alone");
    auto eager = cpu_options(1);
    eager.same_host_transport = same_host;
    auto fetched = eager;
    fetched.eager_tile_bytes = 0;
    const auto grid = br::BlockCyclic2D::square_for(size());
    const auto carried = run_cholesky(kOrder, kSmallTile, grid, 2, 1, eager);
    const auto handshake = run_cholesky(kOrder, kSmallTile, grid, 2, 1, fetched);
    check_cholesky(carried, kOrder, kSmallTile, rank(), 2);
    check_cholesky(handshake, kOrder, kSmallTile, rank(), 2);
    const auto received = bt::sum_over_ranks(carried.stats.bytes_received);
    EXPECT_EQ(bt::sum_over_ranks(carried.stats.bytes_received_in_activations), received);
    EXPECT_EQ(bt::sum_over_ranks(carried.stats.bytes_sent_in_activations), received);
    EXPECT_EQ(bt::sum_over_ranks(handshake.stats.bytes_received_in_activations), 0U);
    EXPECT_EQ(bt::sum_over_ranks(handshake.stats.bytes_received), received);
    EXPECT_EQ(carried.stats.bytes_received_same_host, 0U) << "nothing was left to read";
    EXPECT_EQ(bt::sum_over_ranks(handshake.stats.bytes_received_same_host),
              same_host ? received : 0U);
    EXPECT_EQ(bt::sum_over_ranks(handshake.stats.messages_sent) -
                  bt::sum_over_ranks(carried.stats.messages_sent),
              received / kTileBytes);
    if (size() > 1) {
      EXPECT_GT(received, 0U);
    }
    if (rank() == 0) {
      EXPECT_TRUE(bitwise_equal(carried.l.back(), handshake.l.back()))
          << "a tile carried in its activation gave another L";
    }
  }
}

// The same small tiles, written by the workers into the mailboxes of same-host peers
// (RuntimeOptions::same_host_mailboxes) or handed to the communication thread and MPI: the
// same L, the same messages and bytes, and every activation through a mailbox when the
// mailboxes are on and the ranks share a host (on one rank, and with MPI alone, none).
TEST_F(MpiTest, WorkersWriteSmallActivationsIntoSameHostMailboxesWithTheSameResult) {
  constexpr int kOrder = 96, kSmallTile = 16;
  for (const bool same_host : {true, false}) {
    SCOPED_TRACE(same_host ? "same-host transport" : "MPI alone");
    auto mailboxes = cpu_options(1);
    mailboxes.same_host_transport = same_host;
    auto through_mpi = mailboxes;
    through_mpi.same_host_mailboxes = false;
    const auto grid = br::BlockCyclic2D::square_for(size());
    const auto by_mail = run_cholesky(kOrder, kSmallTile, grid, 2, 1, mailboxes);
    const auto by_mpi = run_cholesky(kOrder, kSmallTile, grid, 2, 1, through_mpi);
    check_cholesky(by_mail, kOrder, kSmallTile, rank(), 2);
    check_cholesky(by_mpi, kOrder, kSmallTile, rank(), 2);
    const auto sent = bt::sum_over_ranks(by_mail.stats.messages_sent);
    EXPECT_EQ(sent, bt::sum_over_ranks(by_mpi.stats.messages_sent));
    EXPECT_EQ(sent, bt::sum_over_ranks(by_mail.stats.messages_received));
    EXPECT_EQ(bt::sum_over_ranks(by_mail.stats.bytes_received_in_activations),
              bt::sum_over_ranks(by_mpi.stats.bytes_received_in_activations));
    EXPECT_EQ(bt::sum_over_ranks(by_mail.stats.bytes_sent_in_activations),
              bt::sum_over_ranks(by_mail.stats.bytes_received_in_activations));
    EXPECT_EQ(bt::sum_over_ranks(by_mpi.stats.activations_by_mailbox), 0U);
    // Cholesky sends nothing but activations between ranks: all of them by mailbox.
    EXPECT_EQ(bt::sum_over_ranks(by_mail.stats.activations_by_mailbox),
              same_host && size() > 1 ? sent : 0U);
    if (size() > 1) {
      EXPECT_GT(sent, 0U);
    }
    if (rank() == 0) {
      EXPECT_TRUE(bitwise_equal(by_mail.l.back(), by_mpi.l.back()))
          << "activations by mailbox gave another L";
    }
  }
}

// Workers that read their rank's mailboxes themselves (RuntimeOptions::workers_read_mail),
// looking once or polling before they sleep: the same L as when only the communication thread
// reads them, the same messages, each received once, and no more read by workers than came by
// mailbox (none with the option off).
TEST_F(MpiTest, WorkersThatReadTheirMailboxesComputeTheSameResult) {
  constexpr int kOrder = 96, kSmallTile = 16;
  const auto grid = br::BlockCyclic2D::square_for(size());
  auto comm_thread_only = cpu_options(1);
  comm_thread_only.workers_read_mail = false;
  const auto by_comm_thread = run_cholesky(kOrder, kSmallTile, grid, 2, 1, comm_thread_only);
  check_cholesky(by_comm_thread, kOrder, kSmallTile, rank(), 2);
  EXPECT_EQ(bt::sum_over_ranks(by_comm_thread.stats.activations_read_by_workers), 0U);
  for (const int poll_us : {0, 200}) {
    SCOPED_TRACE("worker_poll_us " + std::to_string(poll_us));
    auto options = cpu_options(1);
    options.workers_read_mail = true;
    options.worker_poll_us = poll_us;
    const auto by_workers = run_cholesky(kOrder, kSmallTile, grid, 2, 1, options);
    check_cholesky(by_workers, kOrder, kSmallTile, rank(), 2);
    const auto sent = bt::sum_over_ranks(by_workers.stats.messages_sent);
    EXPECT_EQ(sent, bt::sum_over_ranks(by_comm_thread.stats.messages_sent));
    EXPECT_EQ(sent, bt::sum_over_ranks(by_workers.stats.messages_received));
    EXPECT_EQ(bt::sum_over_ranks(by_workers.stats.bytes_received_in_activations),
              bt::sum_over_ranks(by_comm_thread.stats.bytes_received_in_activations));
    const auto read_by_workers = bt::sum_over_ranks(by_workers.stats.activations_read_by_workers);
    EXPECT_LE(read_by_workers, bt::sum_over_ranks(by_workers.stats.activations_by_mailbox));
    if (rank() == 0) {
      EXPECT_TRUE(bitwise_equal(by_workers.l.back(), by_comm_thread.l.back()))
          << "workers reading the mailboxes gave another L";
    }
  }
}

// A chain whose every link crosses ranks, with workers that read their mailboxes and poll for
// a millisecond: every task runs once, in order, over two iterations, and on ranks of one host
// some of the 400 activations are read by the worker that polls for them (each comes within
// the poll unless its rank lost its core for that long).
TEST_F(MpiTest, AChainAcrossRanksRunsInOrderWhenWorkersReadTheirMailboxes) {
  constexpr int kLength = 200;
  auto chain = std::make_unique<bt::ChainTasks>(0, kLength, 1.0, size());
  auto* probe = chain.get();
  auto options = cpu_options(1);
  options.workers_read_mail = true;
  options.worker_poll_us = br::kMaxWorkerPollUs;
  br::Runtime runtime(MPI_COMM_WORLD, options);
  runtime.add_task_class(std::move(chain));
  for (int it = 1; it <= 2; ++it) {
    probe->clear();
    (void)runtime.run_iteration();
    std::vector<int> mine;
    for (int i = rank(); i < kLength; i += size()) mine.push_back(i);
    EXPECT_EQ(probe->order(), mine) << "rank " << rank() << ", iteration " << it;
    EXPECT_EQ(probe->bad_slots(), 0);
  }
  EXPECT_EQ(bt::sum_over_ranks(runtime.stats().tasks_executed), 2U * kLength);
  EXPECT_EQ(bt::sum_over_ranks(runtime.stats().messages_sent),
            bt::sum_over_ranks(runtime.stats().messages_received));
  const auto read_by_workers = bt::sum_over_ranks(runtime.stats().activations_read_by_workers);
  EXPECT_LE(read_by_workers, bt::sum_over_ranks(runtime.stats().activations_by_mailbox));
  if (size() > 1 && bt::sum_over_ranks(runtime.stats().activations_by_mailbox) > 0) {
    EXPECT_GT(read_by_workers, 0U) << "no worker read an activation itself";
  }
}

TEST_F(MpiTest, GemmWithSmallTilesAndStealingVerifies) {
  // A stolen task's inputs are fetched from its victim; its output goes back to the owner of
  // its successor in an activation that carries it.
  auto options = cpu_options(1);
  options.steal.enabled = true;
  const int m = 96, n = 80, k = 112, tile = 16;
  const auto r = run_gemm(m, n, k, tile, br::BlockCyclic2D::square_for(size()), 2, 1, options);
  // Every task ran exactly once somewhere (stolen ones away from their owner).
  const auto tasks = static_cast<std::uint64_t>((m / tile) * (n / tile) * (k / tile));
  EXPECT_EQ(bt::sum_over_ranks(bt::class_count(r.stats, "GEMM")), 2 * tasks);
  EXPECT_EQ(bt::sum_over_ranks(r.stats.bytes_sent), bt::sum_over_ranks(r.stats.bytes_received));
  EXPECT_EQ(bt::sum_over_ranks(r.stats.messages_sent),
            bt::sum_over_ranks(r.stats.messages_received));
  if (rank() == 0) {
    ASSERT_EQ(r.c.size(), 2U);
    EXPECT_LE(be::gemm_max_relative_error(r.c[0], m, n, k, kSeed), 16.0 * k * DBL_EPSILON);
    EXPECT_TRUE(bitwise_equal(r.c[0], r.c[1])) << "the second iteration computed another C";
  }
}

// A chain whose every link crosses ranks, one worker per rank: each task is made ready by a
// message while the rank's worker sleeps, so once a task has run on a rank (its length known)
// the communication thread runs the next ones itself, unless RuntimeOptions::comm_thread_task_us
// is 0. Either way every task runs once, in order, and none twice.
TEST_F(MpiTest, TheCommunicationThreadRunsShortTasksThatArriveWhileTheWorkersSleep) {
  constexpr int kLength = 200;
  for (const int limit_us : {0, br::RuntimeOptions{}.comm_thread_task_us}) {
    SCOPED_TRACE("comm_thread_task_us " + std::to_string(limit_us));
    auto chain = std::make_unique<bt::ChainTasks>(0, kLength, 1.0, size());
    auto* probe = chain.get();
    auto options = cpu_options(1);
    options.comm_thread_task_us = limit_us;
    br::Runtime runtime(MPI_COMM_WORLD, options);
    runtime.add_task_class(std::move(chain));
    for (int it = 1; it <= 2; ++it) {
      probe->clear();
      (void)runtime.run_iteration();
      std::vector<int> mine;
      for (int i = rank(); i < kLength; i += size()) mine.push_back(i);
      EXPECT_EQ(probe->order(), mine) << "rank " << rank() << ", iteration " << it;
      EXPECT_EQ(probe->bad_slots(), 0);
    }
    const auto on_comm_thread = bt::sum_over_ranks(runtime.stats().tasks_on_comm_thread);
    EXPECT_EQ(bt::sum_over_ranks(runtime.stats().tasks_executed), 2U * kLength);
    if (limit_us == 0 || size() == 1) {
      EXPECT_EQ(on_comm_thread, 0U) << "no message makes a task ready on one rank";
    } else {
      EXPECT_GT(on_comm_thread, 0U);
      EXPECT_LE(on_comm_thread, 2U * kLength);
    }
  }
}

TEST_F(MpiTest, ControlChainAlternatesRanks) {
  constexpr int kLength = 41;
  auto chain = std::make_unique<bt::ChainTasks>(0, kLength, 1.0, size());
  auto* probe = chain.get();
  br::Runtime runtime(MPI_COMM_WORLD, cpu_options(2));
  runtime.add_task_class(std::move(chain));
  for (int it = 1; it <= 2; ++it) {
    probe->clear();
    const auto report = runtime.run_iteration();
    std::vector<int> mine;
    for (int i = rank(); i < kLength; i += size()) mine.push_back(i);
    EXPECT_EQ(probe->order(), mine) << "rank " << rank() << ", iteration " << it;
    EXPECT_EQ(probe->bad_slots(), 0);
    EXPECT_EQ(bt::sum_over_ranks(bt::class_count(report.local, "CHAIN")),
              static_cast<std::uint64_t>(kLength));
    EXPECT_EQ(report.total_flops, kLength * 1.0);
    // With more than one rank every link crosses ranks: one control activation per
    // link, and no tile data at all.
    const std::uint64_t messages = size() > 1 ? kLength - 1 : 0;
    EXPECT_EQ(bt::sum_over_ranks(report.local.messages_sent), messages);
    EXPECT_EQ(bt::sum_over_ranks(report.local.messages_received), messages);
    EXPECT_EQ(bt::sum_over_ranks(report.local.bytes_sent), 0U);
    EXPECT_EQ(bt::sum_over_ranks(report.local.bytes_received), 0U);
  }
  EXPECT_EQ(bt::sum_over_ranks(runtime.stats().tasks_executed), 2U * kLength);
}

TEST_F(MpiTest, EmulatedChainAcrossRanksIsNoFasterThanItsModel) {
  // 40 links of 1 MFLOP at 10 GFLOP/s: 0.1 ms each, 4 ms of strictly sequential work.
  br::RuntimeOptions options;
  options.device = br::DeviceKind::emulated;
  options.emulated_gflops = 10.0;
  br::Runtime runtime(MPI_COMM_WORLD, options);
  runtime.add_task_class(std::make_unique<bt::ChainTasks>(0, 40, 1e6, size()));
  const auto report = runtime.run_iteration();
  const double modeled = 40 * 1e6 / 10e9;
  EXPECT_NEAR(bt::sum_over_ranks_d(report.local.modeled_seconds), modeled, modeled * 1e-9);
  EXPECT_GE(report.seconds, modeled * (1.0 - 1e-6));
  EXPECT_EQ(bt::sum_over_ranks(report.local.tasks_executed), 40U);
  const auto gathered = runtime.gather_stats();
  if (rank() == 0) {
    ASSERT_EQ(gathered.size(), static_cast<std::size_t>(size()));
    std::uint64_t total = 0;
    for (int r = 0; r < size(); ++r) {
      EXPECT_EQ(gathered[static_cast<std::size_t>(r)].rank, r);
      // Ranks own 40 / size tasks, the first 40 % size of them one more.
      const std::uint64_t owned = 40 / size() + (r < 40 % size() ? 1 : 0);
      EXPECT_EQ(gathered[static_cast<std::size_t>(r)].tasks_by_class.at("CHAIN"), owned);
      total += gathered[static_cast<std::size_t>(r)].tasks_executed;
    }
    EXPECT_EQ(total, 40U);
  }
}

TEST_F(MpiTest, GatherToRootAssemblesEveryRanksTiles) {
  const auto grid = br::BlockCyclic2D::square_for(size());
  br::TiledMatrix m(0, 130, 70, 32, grid, rank());
  m.for_each_local_tile([&](int tm, int tn, br::Tile& t) {
    for (int j = 0; j < t.cols(); ++j) {
      for (int i = 0; i < t.rows(); ++i) t.at(i, j) = (tm * 32 + i) * 1000.0 + (tn * 32 + j);
    }
  });
  const auto full = m.gather_to_root(MPI_COMM_WORLD);
  if (rank() == 0) {
    ASSERT_EQ(full.size(), 130U * 70U);
    int wrong = 0;
    for (int j = 0; j < 70; ++j) {
      for (int i = 0; i < 130; ++i) wrong += full[static_cast<std::size_t>(j) * 130 + i] != i * 1000.0 + j;
    }
    EXPECT_EQ(wrong, 0);
  } else {
    EXPECT_TRUE(full.empty());
  }
}
