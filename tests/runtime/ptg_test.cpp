// Consistency of the GEMM and Cholesky task graphs, checked on the task classes alone:
// both ends of every dependency agree, counts per class match the closed forms, every
// output tile is written back exactly once, and owners follow the tile they update.

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "bellows/runtime/collection.hpp"
#include "cholesky_tasks.hpp"
#include "gemm_tasks.hpp"
#include "ptg_check.hpp"
#include "test_task_classes.hpp"

namespace br = bellows::runtime;
namespace be = bellows::examples;
using bellows::testing::check_ptg;
using bellows::testing::PtgReport;

namespace {

std::string first_errors(const PtgReport& r) {
  std::string out;
  for (std::size_t i = 0; i < r.errors.size() && i < 5; ++i) out += r.errors[i] + "\n";
  return out;
}

std::vector<const br::TaskClass*> raw(const std::vector<std::unique_ptr<br::TaskClass>>& v) {
  std::vector<const br::TaskClass*> out;
  for (const auto& c : v) out.push_back(c.get());
  return out;
}

struct GemmSetup {
  br::TiledMatrix a, b, c;
  be::GemmTasks tasks;
  GemmSetup(int m, int n, int k, int tile, br::BlockCyclic2D grid)
      : a(0, m, k, tile, grid, 0), b(1, k, n, tile, grid, 0), c(2, m, n, tile, grid, 0),
        tasks(0, a, b, c) {}
};

struct CholeskySetup {
  br::TiledMatrix a, l;
  std::vector<std::unique_ptr<br::TaskClass>> classes;
  CholeskySetup(int n, int tile, br::BlockCyclic2D grid)
      : a(0, n, n, tile, grid, 0, lower), l(1, n, n, tile, grid, 0, lower),
        classes(be::make_cholesky_tasks(a, l)) {}
  static bool lower(int m, int n) { return m >= n; }
};

}  // namespace

TEST(GemmPtg, DependenciesAreMirroredAndCountsMatch) {
  GemmSetup s(450, 450, 450, 100, br::BlockCyclic2D{1, 1});
  const auto r = check_ptg({&s.tasks}, 1);
  EXPECT_TRUE(r.errors.empty()) << first_errors(r);
  EXPECT_EQ(r.total_tasks, 125U);
  EXPECT_EQ(r.tasks_per_class.at("GEMM"), 5U * 5U * 5U);
  EXPECT_EQ(r.topologically_ordered, 125U);

  double flops = 0.0;
  s.tasks.for_each_task([&](const br::TaskKey& key) {
    const int k = key.index[2];
    EXPECT_EQ(r.predecessor_inputs.at(key), k == 0 ? 0 : 1) << "GEMM k=" << k;
    std::vector<br::InputSource> in;
    s.tasks.inputs(key, in);
    ASSERT_EQ(in.size(), 3U);
    EXPECT_EQ(in[0].kind, br::InputSource::Kind::collection);
    EXPECT_EQ(in[0].tile, s.a.index(key.index[0], k));
    EXPECT_EQ(in[1].tile, s.b.index(k, key.index[1]));
    if (k == 0) {
      EXPECT_EQ(in[2].kind, br::InputSource::Kind::scratch);
      EXPECT_EQ(in[2].rows, s.c.rows_of_tile(key.index[0]));
      EXPECT_EQ(in[2].cols, s.c.cols_of_tile(key.index[1]));
    }
    flops += s.tasks.flops(key);
  });
  EXPECT_EQ(flops, 2.0 * 450.0 * 450.0 * 450.0);

  // Every tile of C, and nothing else, is written back exactly once.
  EXPECT_EQ(r.write_backs.size(), 25U);
  for (const auto& [tile, count] : r.write_backs) {
    EXPECT_EQ(std::get<0>(tile), 2) << "write-back to a collection other than C";
    EXPECT_EQ(count, 1) << "C(" << std::get<1>(tile) << "," << std::get<2>(tile) << ")";
  }
}

TEST(GemmPtg, RectangularOperandsOnTwoByThreeGrid) {
  // C (250 x 130) = A (250 x 450) * B (450 x 130): 3 x 2 tiles of C, 5 steps of k.
  GemmSetup s(250, 130, 450, 100, br::BlockCyclic2D{2, 3});
  const auto r = check_ptg({&s.tasks}, 6);
  EXPECT_TRUE(r.errors.empty()) << first_errors(r);
  EXPECT_EQ(r.tasks_per_class.at("GEMM"), 3U * 2U * 5U);
  EXPECT_EQ(r.write_backs.size(), 6U);
  EXPECT_TRUE(r.moving_read_write_flows.empty()) << r.moving_read_write_flows.front();
  double flops = 0.0;
  s.tasks.for_each_task([&](const br::TaskKey& key) {
    const int i = key.index[0], j = key.index[1];
    EXPECT_EQ(s.tasks.owner(key), (i % 2) * 3 + (j % 3));
    flops += s.tasks.flops(key);
  });
  EXPECT_EQ(flops, 2.0 * 250.0 * 130.0 * 450.0);
  EXPECT_EQ(s.tasks.priority(s.tasks.key(0, 0, 3)), 3);
}

TEST(GemmPtg, RejectsMismatchedOperands) {
  const br::BlockCyclic2D g{1, 1};
  br::TiledMatrix a(0, 100, 200, 50, g, 0), b(1, 150, 100, 50, g, 0), c(2, 100, 100, 50, g, 0);
  EXPECT_THROW(be::GemmTasks(0, a, b, c), std::invalid_argument);
  br::TiledMatrix b2(1, 200, 100, 40, g, 0);
  EXPECT_THROW(be::GemmTasks(0, a, b2, c), std::invalid_argument);
}

TEST(CholeskyPtg, DependenciesAreMirroredAndCountsMatch) {
  CholeskySetup s(450, 100, br::BlockCyclic2D{1, 1});
  const int nt = 5;
  ASSERT_EQ(s.classes.size(), 4U);
  const auto r = check_ptg(raw(s.classes), 1);
  EXPECT_TRUE(r.errors.empty()) << first_errors(r);
  EXPECT_EQ(r.tasks_per_class.at("POTRF"), static_cast<std::size_t>(nt));
  EXPECT_EQ(r.tasks_per_class.at("TRSM"), static_cast<std::size_t>(nt * (nt - 1) / 2));
  EXPECT_EQ(r.tasks_per_class.at("SYRK"), static_cast<std::size_t>(nt * (nt - 1) / 2));
  EXPECT_EQ(r.tasks_per_class.at("GEMM"), static_cast<std::size_t>(nt * (nt - 1) * (nt - 2) / 6));
  EXPECT_EQ(r.total_tasks, 5U + 10U + 10U + 10U);
  EXPECT_EQ(r.topologically_ordered, r.total_tasks);

  // Predecessor inputs per task.
  for (const auto& [key, count] : r.predecessor_inputs) {
    const auto& name = s.classes[key.task_class]->name();
    int expected = -1;
    if (name == "POTRF") expected = key.index[0] == 0 ? 0 : 1;
    if (name == "TRSM") expected = key.index[1] == 0 ? 1 : 2;
    if (name == "SYRK") expected = key.index[1] == 0 ? 1 : 2;
    if (name == "GEMM") expected = key.index[2] == 0 ? 2 : 3;
    EXPECT_EQ(count, expected) << bellows::testing::describe_key(raw(s.classes), key);
  }

  // Every tile of L's lower triangle is written back exactly once; A is never written.
  EXPECT_EQ(r.write_backs.size(), static_cast<std::size_t>(nt * (nt + 1) / 2));
  for (const auto& [tile, count] : r.write_backs) {
    const auto [coll, m, n] = tile;
    EXPECT_EQ(coll, 1) << "write-back to A";
    EXPECT_GE(m, n) << "write-back above the diagonal";
    EXPECT_EQ(count, 1) << "L(" << m << "," << n << ")";
  }

  // Every tile of A's lower triangle is read from the collection exactly once.
  std::map<std::tuple<int, int, int>, int> reads;
  std::vector<br::InputSource> in;
  for (const auto& cls : s.classes) {
    cls->for_each_task([&](const br::TaskKey& key) {
      in.clear();
      cls->inputs(key, in);
      for (const auto& src : in) {
        if (src.kind == br::InputSource::Kind::collection) {
          ++reads[{src.tile.collection, src.tile.m, src.tile.n}];
          EXPECT_EQ(src.access, br::Access::read_write);
        }
        EXPECT_NE(src.kind, br::InputSource::Kind::scratch);
      }
    });
  }
  EXPECT_EQ(reads.size(), static_cast<std::size_t>(nt * (nt + 1) / 2));
  for (const auto& [tile, count] : reads) {
    EXPECT_EQ(std::get<0>(tile), 0) << "collection read from L";
    EXPECT_GE(std::get<1>(tile), std::get<2>(tile));
    EXPECT_EQ(count, 1);
  }
}

TEST(CholeskyPtg, CountsForOtherTileCounts) {
  for (const int nt : {1, 2, 3, 7}) {
    CholeskySetup s(nt * 10 - 3, 10, br::BlockCyclic2D{1, 1});
    const auto r = check_ptg(raw(s.classes), 1);
    EXPECT_TRUE(r.errors.empty()) << "NT=" << nt << "\n" << first_errors(r);
    const auto count = [&](const char* name) {
      const auto it = r.tasks_per_class.find(name);
      return it == r.tasks_per_class.end() ? 0 : static_cast<int>(it->second);
    };
    EXPECT_EQ(count("POTRF"), nt);
    EXPECT_EQ(count("TRSM"), nt * (nt - 1) / 2);
    EXPECT_EQ(count("SYRK"), nt * (nt - 1) / 2);
    EXPECT_EQ(count("GEMM"), nt * (nt - 1) * (nt - 2) / 6);
    EXPECT_EQ(r.write_backs.size(), static_cast<std::size_t>(nt * (nt + 1) / 2));
    EXPECT_EQ(r.topologically_ordered, r.total_tasks);
  }
}

TEST(CholeskyPtg, OwnersFollowTheUpdatedTileOnTwoByThreeGrid) {
  const br::BlockCyclic2D grid{2, 3};
  CholeskySetup s(450, 100, grid);
  const auto r = check_ptg(raw(s.classes), 6);
  EXPECT_TRUE(r.errors.empty()) << first_errors(r);
  EXPECT_TRUE(r.moving_read_write_flows.empty()) << r.moving_read_write_flows.front();
  std::vector<int> per_rank(6, 0);
  for (const auto& cls : s.classes) {
    cls->for_each_task([&](const br::TaskKey& key) {
      const int i = key.index[0], j = key.index[1];
      int expected = -1;
      if (cls->name() == "POTRF") expected = grid.owner(i, i);
      if (cls->name() == "TRSM") expected = grid.owner(i, j);
      if (cls->name() == "SYRK") expected = grid.owner(i, i);
      if (cls->name() == "GEMM") expected = grid.owner(i, j);
      EXPECT_EQ(cls->owner(key), expected) << bellows::testing::describe_key(raw(s.classes), key);
      ++per_rank[static_cast<std::size_t>(cls->owner(key))];
    });
  }
  int total = 0;
  for (int c : per_rank) total += c;
  EXPECT_EQ(total, 35);
  // POTRF(k) runs on the owner of A(k,k): ranks 0, 4, 2, 3, 1 for k = 0..4.
  const std::vector<int> diagonal = {0, 4, 2, 3, 1};
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(s.classes[0]->owner(s.classes[0]->key(k)), diagonal[static_cast<std::size_t>(k)]);
  }
  for (int q = 0; q < 6; ++q) EXPECT_GT(per_rank[static_cast<std::size_t>(q)], 0) << "rank " << q;
}

TEST(CholeskyPtg, FlopsSumToTheTiledOperationCount) {
  CholeskySetup s(500, 100, br::BlockCyclic2D{1, 1});
  double flops = 0.0;
  for (const auto& cls : s.classes) {
    cls->for_each_task([&](const br::TaskKey& key) { flops += cls->flops(key); });
  }
  const double b = 100.0;
  const double expected = 5 * b * b * b / 3.0 + 10 * b * b * b + 10 * b * (b + 1) * b +
                          10 * 2.0 * b * b * b;
  EXPECT_NEAR(flops, expected, expected * 1e-12);
  const double n = 500.0;
  EXPECT_NEAR(flops, n * n * n / 3.0, n * n * n / 3.0 * 0.01);
}

// The schedule of cholesky_tasks.cpp: panel k at step k, an update of column n at step k at
// step min(n - 1, k + 2). Ten tile columns, so every case below occurs.
TEST(CholeskyPtg, PrioritiesPutPanelsAheadOfTheTrailingUpdateWithinTheLookahead) {
  constexpr int nt = 10;
  CholeskySetup s(nt * 100, 100, br::BlockCyclic2D{1, 1});
  const auto& potrf = *s.classes[0];
  const auto& trsm = *s.classes[1];
  const auto& syrk = *s.classes[2];
  const auto& gemm = *s.classes[3];
  ASSERT_EQ(potrf.name(), "POTRF");
  ASSERT_EQ(gemm.name(), "GEMM");
  // The tasks of panel j and the updates of column n at step k (SYRK(n, k), GEMM(m, n, k)).
  const auto panel = [&](int j) {
    std::vector<std::pair<std::string, std::int64_t>> out{
        {"POTRF(" + std::to_string(j) + ")", potrf.priority(potrf.key(j))}};
    for (int m = j + 1; m < nt; ++m) {
      out.emplace_back("TRSM(" + std::to_string(m) + "," + std::to_string(j) + ")",
                       trsm.priority(trsm.key(m, j)));
    }
    return out;
  };
  const auto updates = [&](int n, int k) {
    std::vector<std::pair<std::string, std::int64_t>> out{
        {"SYRK(" + std::to_string(n) + "," + std::to_string(k) + ")",
         syrk.priority(syrk.key(n, k))}};
    for (int m = n + 1; m < nt; ++m) {
      out.emplace_back("GEMM(" + std::to_string(m) + "," + std::to_string(n) + "," +
                           std::to_string(k) + ")",
                       gemm.priority(gemm.key(m, n, k)));
    }
    return out;
  };
  const auto expect_ahead = [](const auto& first, const auto& then) {
    for (const auto& [a, pa] : first) {
      for (const auto& [b, pb] : then) EXPECT_GT(pa, pb) << a << " should run before " << b;
    }
  };
  int pairs = 0;
  for (int j = 1; j < nt; ++j) {
    expect_ahead(panel(j - 1), panel(j));
    // Panel j runs before the updates of steps j-2 and j-1 into columns past j: a rank that
    // fell behind does not leave the other ranks waiting for panel j.
    for (int k = std::max(0, j - 2); k < j; ++k) {
      for (int n = j + 1; n < nt; ++n, ++pairs) expect_ahead(panel(j), updates(n, k));
    }
    // The updates that feed panel j+1, from any step, run before the other updates of the
    // steps since j-1.
    for (int k = 0; k <= j && j + 1 < nt; ++k) {
      for (int later = std::max(0, j - 1); later <= j; ++later) {
        for (int n = j + 2; n < nt; ++n, ++pairs) expect_ahead(updates(j + 1, k), updates(n, later));
      }
    }
    // The lookahead is bounded: the update of step k into a column past k+3 runs before panel
    // k+3, so the trailing update is not all put off until its own column's panel.
    const int k = j - 1;
    for (int n = k + 4; n < nt && k + 3 < nt; ++n, ++pairs) expect_ahead(updates(n, k), panel(k + 3));
  }
  EXPECT_GT(pairs, 100);
}

TEST(CholeskyPtg, RejectsNonSquareInput) {
  const br::BlockCyclic2D g{1, 1};
  br::TiledMatrix a(0, 100, 120, 50, g, 0), l(1, 100, 120, 50, g, 0);
  EXPECT_THROW((void)be::make_cholesky_tasks(a, l), std::invalid_argument);
}

namespace {

// A chain whose successors forget the last link: the checker must notice.
class ForgetfulChain final : public br::TaskClass {
 public:
  ForgetfulChain(int length, bool cycle) : TaskClass(0), length_(length), cycle_(cycle) {}
  std::string_view name() const override { return "CHAIN"; }
  void for_each_task(const std::function<void(const br::TaskKey&)>& fn) const override {
    for (int i = 0; i < length_; ++i) fn(key(i));
  }
  int owner(const br::TaskKey&) const override { return 0; }
  void inputs(const br::TaskKey& k, std::vector<br::InputSource>& out) const override {
    const int i = k.index[0];
    if (i > 0) {
      out.push_back(br::InputSource::control_from(key(i - 1), 0));
    } else if (cycle_) {
      out.push_back(br::InputSource::control_from(key(length_ - 1), 0));
    } else {
      out.push_back(br::InputSource::scratch_tile(1, 1));
    }
  }
  void successors(const br::TaskKey& k, int, std::vector<br::Successor>& out) const override {
    const int i = k.index[0];
    if (i + 1 < length_ - 1) out.push_back(br::Successor::to_task(key(i + 1), 0));
    if (cycle_ && i == length_ - 1) out.push_back(br::Successor::to_task(key(0), 0));
    if (cycle_ && i == length_ - 2) out.push_back(br::Successor::to_task(key(i + 1), 0));
  }
  void execute_cpu(const br::TaskKey&, std::span<br::Tile* const>) const override {}

 private:
  int length_;
  bool cycle_;
};

}  // namespace

TEST(PtgChecker, ReportsMissingSuccessorsAndCycles) {
  const ForgetfulChain broken(4, false);
  const auto r = check_ptg({&broken}, 1);
  ASSERT_EQ(r.errors.size(), 2U) << first_errors(r);
  EXPECT_EQ(r.errors[0], "CHAIN(3,0,0) slot 0 expects CHAIN(2,0,0) slot 0, which lists it 0 times");
  EXPECT_EQ(r.errors[1], "only 3 of 4 tasks can ever run (cycle or missing producer)");

  const ForgetfulChain cyclic(4, true);
  const auto c = check_ptg({&cyclic}, 1);
  ASSERT_EQ(c.errors.size(), 1U) << first_errors(c);
  EXPECT_EQ(c.errors[0], "only 0 of 4 tasks can ever run (cycle or missing producer)");
}

TEST(PtgChecker, AcceptsTheControlChainOfTheRuntimeTests) {
  const bellows::testing::ChainTasks chain(0, 10, 1.0, 3);
  const auto r = check_ptg({&chain}, 3);
  EXPECT_TRUE(r.errors.empty()) << first_errors(r);
  EXPECT_EQ(r.total_tasks, 10U);
  EXPECT_EQ(r.topologically_ordered, 10U);
  EXPECT_EQ(r.predecessor_inputs.at(chain.key(0)), 0);
  EXPECT_EQ(r.predecessor_inputs.at(chain.key(9)), 1);
  EXPECT_EQ(r.owner.at(chain.key(7)), 1);
  EXPECT_TRUE(r.write_backs.empty());
}
