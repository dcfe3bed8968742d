// A tile version that readers still need when its next writer runs (run under mpiexec -n 1).
//
// FIRST writes T1 = A + B*B. SECOND updates T1 into Z = T1 + B*B, and READER(i) computes
// Y(i) += T1 * B, but each reader also waits for SECOND (a control slot): every reader holds
// T1 while SECOND writes it, so SECOND must write a copy and leave T1 as the readers' input.
// On the CUDA device T1 is kept only in GPU memory (none of its consumers leaves the rank),
// so SECOND's copy is made on the GPU from the cached one (cuda_device.cpp, stage_in): the
// only path of the tile cache that gemm, cholesky and bspgemm do not reach. The entries are
// small integers, so every product is exact and the results are compared for equality.
//
// The CPU test runs everywhere; the CUDA test is run by ctest only where a GPU is visible.

#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "bellows/kernels/tile_kernels.hpp"
#include "bellows/runtime/collection.hpp"
#include "bellows/runtime/runtime.hpp"
#include "mpi_test_support.hpp"

namespace br = bellows::runtime;
using bellows::testing::MpiTest;

namespace {

constexpr int kTile = 64;
constexpr int kReaders = 8;

/// FIRST = key(0), SECOND = key(1), READER(i) = key(2 + i); see the file comment.
class SharedVersionTasks final : public br::TaskClass {
 public:
  static constexpr int kFirst = 0;
  static constexpr int kSecond = 1;
  static constexpr int kFirstReader = 2;

  SharedVersionTasks(br::TaskClassId id, const br::TiledMatrix& a, const br::TiledMatrix& b,
                     const br::TiledMatrix& y, const br::TiledMatrix& z)
      : TaskClass(id), a_(a), b_(b), y_(y), z_(z) {}

  std::string_view name() const override { return "SHARED_VERSION"; }
  void for_each_task(const std::function<void(const br::TaskKey&)>& fn) const override {
    for (int t = 0; t < kFirstReader + kReaders; ++t) fn(key(t));
  }
  int owner(const br::TaskKey&) const override { return 0; }
  void inputs(const br::TaskKey& k, std::vector<br::InputSource>& out) const override {
    using br::Access;
    using br::InputSource;
    const int t = k.index[0];
    if (t == kFirst) {
      out.push_back(InputSource::from_collection(a_.index(0, 0), Access::read_write));
      out.push_back(InputSource::from_collection(b_.index(0, 0), Access::read));
    } else if (t == kSecond) {
      out.push_back(InputSource::from_task(key(kFirst), 0, Access::read_write));
      out.push_back(InputSource::from_collection(b_.index(0, 0), Access::read));
    } else {
      out.push_back(InputSource::from_task(key(kFirst), 0, Access::read));
      out.push_back(InputSource::from_collection(b_.index(0, 0), Access::read));
      out.push_back(InputSource::from_collection(y_.index(t - kFirstReader, 0), Access::read_write));
      out.push_back(InputSource::control_from(key(kSecond), 1));
    }
  }
  void successors(const br::TaskKey& k, int slot, std::vector<br::Successor>& out) const override {
    using br::Successor;
    const int t = k.index[0];
    if (t == kFirst && slot == 0) {
      out.push_back(Successor::to_task(key(kSecond), 0));
      for (int r = 0; r < kReaders; ++r) out.push_back(Successor::to_task(key(kFirstReader + r), 0));
    } else if (t == kSecond && slot == 0) {
      out.push_back(Successor::to_collection(z_.index(0, 0)));
    } else if (t == kSecond && slot == 1) {
      for (int r = 0; r < kReaders; ++r) out.push_back(Successor::to_task(key(kFirstReader + r), 3));
    } else if (t >= kFirstReader && slot == 2) {
      out.push_back(Successor::to_collection(y_.index(t - kFirstReader, 0)));
    }
  }
  double flops(const br::TaskKey&) const override { return 2.0 * kTile * kTile * kTile; }

  void execute_cpu(const br::TaskKey& k, std::span<br::Tile* const> tiles) const override {
    if (k.index[0] < kFirstReader) {
      bellows::kernels::gemm_nn(*tiles[1], *tiles[1], 1.0, *tiles[0]);  // T += B * B
    } else {
      bellows::kernels::gemm_nn(*tiles[0], *tiles[1], 1.0, *tiles[2]);  // Y += T * B
    }
  }
  bool has_cuda_body() const override { return bellows::kernels::cuda_available(); }
  void execute_cuda(const br::TaskKey& k, const br::CudaTaskContext& ctx) const override {
    if (k.index[0] < kFirstReader) {
      bellows::kernels::cuda_gemm_nn(ctx, 1, 1, 1.0, 0);
    } else {
      bellows::kernels::cuda_gemm_nn(ctx, 0, 1, 1.0, 2);
    }
  }

 private:
  const br::TiledMatrix& a_;
  const br::TiledMatrix& b_;
  const br::TiledMatrix& y_;
  const br::TiledMatrix& z_;
};

using Matrix = std::vector<double>;  // kTile x kTile, column-major

Matrix product(const Matrix& x, const Matrix& y) {
  Matrix out(kTile * kTile, 0.0);
  for (int j = 0; j < kTile; ++j) {
    for (int l = 0; l < kTile; ++l) {
      for (int i = 0; i < kTile; ++i) out[i + j * kTile] += x[i + l * kTile] * y[l + j * kTile];
    }
  }
  return out;
}

Matrix sum(const Matrix& x, const Matrix& y) {
  Matrix out(x);
  for (std::size_t e = 0; e < out.size(); ++e) out[e] += y[e];
  return out;
}

Matrix contents(const br::Tile& t) {
  Matrix out(kTile * kTile);
  for (int j = 0; j < kTile; ++j) {
    for (int i = 0; i < kTile; ++i) out[i + j * kTile] = t.at(i, j);
  }
  return out;
}

void fill(br::TiledMatrix& m, int seed) {
  m.for_each_local_tile([seed](int tm, int, br::Tile& t) {
    for (int j = 0; j < t.cols(); ++j) {
      for (int i = 0; i < t.rows(); ++i) t.at(i, j) = (i * 7 + j * 3 + tm * 5 + seed) % 3;
    }
  });
}

/// Runs two iterations of the graph on `device` and compares A, Y and Z with their values
/// computed here.
void runs_exactly(br::DeviceKind device) {
  br::RuntimeOptions options;
  options.device = device;
  options.cpu_workers = 2;
  const br::BlockCyclic2D one{1, 1};
  br::TiledMatrix a(0, kTile, kTile, kTile, one, 0);
  br::TiledMatrix b(1, kTile, kTile, kTile, one, 0);
  br::TiledMatrix y(2, kReaders * kTile, kTile, kTile, one, 0);
  br::TiledMatrix z(3, kTile, kTile, kTile, one, 0);
  fill(a, 1);
  fill(b, 2);
  fill(y, 0);
  const Matrix a0 = contents(*a.tile(0, 0));
  const Matrix bb = contents(*b.tile(0, 0));
  std::vector<Matrix> y0;
  for (int r = 0; r < kReaders; ++r) y0.push_back(contents(*y.tile(r, 0)));

  br::Runtime runtime(MPI_COMM_WORLD, options);
  runtime.add_collection(a);
  runtime.add_collection(b);
  runtime.add_collection(y);
  runtime.add_collection(z);
  runtime.add_task_class(std::make_unique<SharedVersionTasks>(0, a, b, y, z));

  const Matrix t1 = sum(a0, product(bb, bb));
  const Matrix reader_update = product(t1, bb);
  for (int iteration = 1; iteration <= 2; ++iteration) {
    const auto report = runtime.run_iteration();
    EXPECT_EQ(report.local.tasks_executed, static_cast<std::uint64_t>(SharedVersionTasks::kFirstReader + kReaders))
        << "iteration " << iteration;
    EXPECT_EQ(contents(*a.tile(0, 0)), a0) << "A is read, never written (iteration " << iteration << ")";
    EXPECT_EQ(contents(*z.tile(0, 0)), sum(t1, product(bb, bb))) << "iteration " << iteration;
    for (int r = 0; r < kReaders; ++r) {
      Matrix expected = y0[static_cast<std::size_t>(r)];
      for (int i = 0; i < iteration; ++i) expected = sum(expected, reader_update);
      EXPECT_EQ(contents(*y.tile(r, 0)), expected)
          << "reader " << r << " must see FIRST's version, not SECOND's (iteration " << iteration << ")";
    }
  }
}

class TileVersions : public MpiTest {
 protected:
  void SetUp() override {
    MpiTest::SetUp();
    ASSERT_EQ(size(), 1) << "run this binary under mpiexec -n 1";
  }
};

}  // namespace

TEST_F(TileVersions, CpuReadersKeepTheVersionTheirWriterReplaces) { runs_exactly(br::DeviceKind::cpu); }

// Run by ctest only where a GPU is visible (tests/examples/on_cuda_gpu.sh).
TEST_F(TileVersions, CudaWriterCopiesOnTheGpuAVersionReadersStillNeed) {
  if (!bellows::kernels::cuda_available()) GTEST_SKIP() << "built without CUDA";
  runs_exactly(br::DeviceKind::cuda);
}
