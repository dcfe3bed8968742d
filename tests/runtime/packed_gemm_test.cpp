// Tile products over packed operands (examples/kernels/src/packed_gemm.cpp) against a plain
// triple loop, and the derived forms a tile keeps (Tile::derived_form).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "bellows/kernels/packed_gemm.hpp"
#include "bellows/kernels/tile_kernels.hpp"
#include "bellows/runtime/tile.hpp"

namespace {

using bellows::runtime::Tile;
namespace packed = bellows::kernels::packed;

std::shared_ptr<Tile> random_tile(int rows, int cols, unsigned seed) {
  auto t = std::make_shared<Tile>(rows, cols);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  for (int j = 0; j < cols; ++j) {
    for (int i = 0; i < rows; ++i) t->at(i, j) = value(gen);
  }
  return t;
}

/// alpha * A * op(B) + beta * C by the definition (C not read with beta 0).
std::shared_ptr<Tile> reference(const Tile& a, const Tile& b, bool b_transposed, double alpha, double beta,
                                const Tile& c) {
  auto out = std::make_shared<Tile>(c.rows(), c.cols());
  for (int j = 0; j < c.cols(); ++j) {
    for (int i = 0; i < c.rows(); ++i) {
      double sum = 0.0;
      for (int p = 0; p < a.cols(); ++p) sum += a.at(i, p) * (b_transposed ? b.at(j, p) : b.at(p, j));
      out->at(i, j) = alpha * sum + (beta == 0.0 ? 0.0 : beta * c.at(i, j));
    }
  }
  return out;
}

double largest_difference(const Tile& x, const Tile& y) {
  double worst = 0.0;
  for (int j = 0; j < x.cols(); ++j) {
    for (int i = 0; i < x.rows(); ++i) worst = std::max(worst, std::fabs(x.at(i, j) - y.at(i, j)));
  }
  return worst;
}

class PackedGemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!packed::available()) GTEST_SKIP() << "this CPU has no AVX-512F and FMA (or BELLOWS_TILE_GEMM=openblas)";
  }
};

struct Shape {
  int m, n, k;
};

TEST_F(PackedGemm, MatchesTheDefinitionOnEveryShapeAndUpdate) {
  // Multiples of the micro-kernel's 16 x 8 block, edges cut on both sides, more than one step
  // of k (256), and a single element.
  const Shape shapes[] = {{256, 256, 256}, {64, 64, 64}, {37, 53, 29}, {300, 41, 520}, {1, 1, 1}, {17, 9, 257}};
  unsigned seed = 1;
  for (const auto& s : shapes) {
    for (const bool transposed : {false, true}) {
      for (const auto& [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{1.0, 1.0}, std::pair{-1.0, 1.0},
                                        std::pair{-1.0, 0.5}}) {
        const auto a = random_tile(s.m, s.k, seed++);
        const auto b = transposed ? random_tile(s.n, s.k, seed++) : random_tile(s.k, s.n, seed++);
        auto c = random_tile(s.m, s.n, seed++);
        const auto expected = reference(*a, *b, transposed, alpha, beta, *c);
        packed::gemm(*a, *b, transposed, alpha, beta, *c);
        EXPECT_LT(largest_difference(*c, *expected), 1e-12 * s.k)
            << s.m << "x" << s.n << "x" << s.k << (transposed ? " B^T" : " B") << " alpha " << alpha << " beta " << beta;
      }
    }
  }
}

TEST_F(PackedGemm, BetaZeroDoesNotReadC) {
  const auto a = random_tile(48, 32, 7), b = random_tile(32, 24, 8);
  auto c = std::make_shared<Tile>(48, 24);
  for (int j = 0; j < 24; ++j) {
    for (int i = 0; i < 48; ++i) c->at(i, j) = std::nan("");
  }
  packed::gemm(*a, *b, false, 1.0, 0.0, *c);
  const auto expected = reference(*a, *b, false, 1.0, 0.0, *c);
  EXPECT_LT(largest_difference(*c, *expected), 1e-12);
}

TEST_F(PackedGemm, SyrkWritesTheLowerTriangleOnly) {
  for (const int n : {256, 45}) {
    const auto a = random_tile(n, 70, 11);
    auto c = random_tile(n, n, 12);
    const auto before = c->clone();
    const auto full = reference(*a, *a, true, -1.0, 1.0, *c);
    packed::syrk_lower_minus(*a, *c);
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < n; ++i) {
        if (i >= j) {
          EXPECT_NEAR(c->at(i, j), full->at(i, j), 1e-12 * 70) << i << "," << j;
        } else {
          EXPECT_EQ(c->at(i, j), before->at(i, j)) << "upper element " << i << "," << j << " was written";
        }
      }
    }
  }
}

TEST_F(PackedGemm, AFormIsBuiltOnceAndReusedUntilTheTileIsWritten) {
  const auto a = random_tile(64, 64, 21), b = random_tile(64, 64, 22);
  auto c = random_tile(64, 64, 23);
  const auto first = packed::forms_built();
  packed::gemm(*a, *b, true, -1.0, 1.0, *c);
  EXPECT_EQ(packed::forms_built() - first, 2U);  // A as the left operand, B as the transposed right
  packed::gemm(*a, *b, true, -1.0, 1.0, *c);
  EXPECT_EQ(packed::forms_built() - first, 2U) << "the second product must reuse both forms";

  // Writing A drops its forms: the next product sees the new contents.
  a->at(3, 5) = 100.0;
  auto c2 = random_tile(64, 64, 24);
  const auto expected = reference(*a, *b, true, -1.0, 1.0, *c2);
  packed::gemm(*a, *b, true, -1.0, 1.0, *c2);
  EXPECT_EQ(packed::forms_built() - first, 3U);
  EXPECT_LT(largest_difference(*c2, *expected), 1e-12 * 64);
}

TEST_F(PackedGemm, ATileReadAsTheLeftOperandAndAsTheTransposedRightIsPackedOnce) {
  const auto a = random_tile(40, 24, 41), b = random_tile(24, 24, 42);  // edges: 40 = 2 x 16 + 8
  auto c = random_tile(40, 40, 43);
  const auto expected = reference(*a, *a, true, -1.0, 1.0, *c);
  const auto first = packed::forms_built();
  packed::gemm(*a, *a, true, -1.0, 1.0, *c);
  EXPECT_EQ(packed::forms_built() - first, 1U) << "A as the left operand and as B^T is one form";
  EXPECT_LT(largest_difference(*c, *expected), 1e-12 * 24);
  auto lower = random_tile(40, 40, 44);
  packed::syrk_lower_minus(*a, *lower);
  EXPECT_EQ(packed::forms_built() - first, 1U) << "SYRK reuses the same form";
  packed::gemm(*b, *a, true, 1.0, 0.0, *random_tile(24, 40, 45));
  EXPECT_EQ(packed::forms_built() - first, 2U) << "only B's form is new";
}

/// A well-conditioned lower triangular L (diagonal 2..3, off-diagonal within +-1/order).
std::shared_ptr<Tile> lower_triangular(int order, unsigned seed) {
  auto l = random_tile(order, order, seed);
  for (int j = 0; j < order; ++j) {
    for (int i = 0; i < order; ++i) {
      if (i < j) l->at(i, j) = 0.0;
      else if (i == j) l->at(i, j) = 2.5 + 0.5 * l->at(i, j);
      else l->at(i, j) /= order;
    }
  }
  return l;
}

TEST_F(PackedGemm, TheTriangularSolveMeetsItsDefinitionAndKeepsTheResultsForm) {
  for (const auto& [m, n] : {std::pair{16, 8}, std::pair{48, 24}, std::pair{256, 256}, std::pair{64, 512}}) {
    SCOPED_TRACE(std::to_string(m) + " x " + std::to_string(n));
    ASSERT_TRUE(packed::suits_trsm(m, n));
    const auto l = lower_triangular(n, 51);
    const auto b = random_tile(m, n, 52);
    auto x = b->clone();
    const auto first = packed::forms_built();
    packed::trsm_right_lower_trans(*l, *x);
    EXPECT_EQ(packed::forms_built() - first, 2U) << "L's form and the result's";
    // X L^T gives B back.
    const auto product = reference(*x, *l, true, 1.0, 0.0, *x);
    EXPECT_LT(largest_difference(*product, *b), 1e-12 * n);
    // The form kept with X is what packing X afresh gives: a product reads the same bits.
    const auto other = random_tile(24, n, 53);
    auto from_kept = random_tile(m, 24, 54);
    auto from_fresh = from_kept->clone();
    packed::gemm(*x, *other, true, -1.0, 1.0, *from_kept);
    EXPECT_EQ(packed::forms_built() - first, 3U) << "X's form was reused, only the other operand's is new";
    packed::gemm(*x->clone(), *other, true, -1.0, 1.0, *from_fresh);
    EXPECT_EQ(largest_difference(*from_kept, *from_fresh), 0.0);
  }
  EXPECT_FALSE(packed::suits_trsm(40, 24)) << "rows not a multiple of 16";
  EXPECT_FALSE(packed::suits_trsm(48, 20)) << "columns not a multiple of 8";
  EXPECT_FALSE(packed::suits_trsm(1024, 1024)) << "above the largest packed order";
}

TEST_F(PackedGemm, TheTileKernelsGiveTheSameBitsWhicheverTaskPackedTheOperands) {
  const auto a = random_tile(256, 256, 31), b = random_tile(256, 256, 32);
  auto c1 = random_tile(256, 256, 33);
  auto c2 = c1->clone();
  bellows::kernels::gemm_nt_minus(*a, *b, *c1);                        // packs A and B
  bellows::kernels::gemm_nt_minus(*a->clone(), *b->clone(), *c2);      // packs fresh copies
  EXPECT_EQ(largest_difference(*c1, *c2), 0.0);
}

TEST(TileDerivedForms, KeptOnceDroppedOnWriteAndSlotsChecked) {
  Tile t(4, 4);
  EXPECT_EQ(t.derived_form(0), nullptr);
  auto one = std::make_shared<int>(1), two = std::make_shared<int>(2);
  EXPECT_EQ(t.keep_derived_form(1, one), one);
  EXPECT_EQ(t.keep_derived_form(1, two), one) << "the first form kept stays";
  EXPECT_EQ(t.derived_form(1), one);
  const Tile& reader = t;
  (void)reader.data();  // reading keeps the forms
  EXPECT_EQ(t.derived_form(1), one);
  (void)t.data();  // an access that may write drops them
  EXPECT_EQ(t.derived_form(1), nullptr);
  EXPECT_EQ(t.keep_derived_form(1, two), two);
  t.at(0, 0) = 1.0;
  EXPECT_EQ(t.derived_form(1), nullptr);
  EXPECT_EQ(t.clone()->derived_form(1), nullptr);
  try {
    (void)t.derived_form(Tile::kDerivedForms);
    FAIL() << "slot out of range accepted";
  } catch (const std::out_of_range& e) {
    EXPECT_EQ(std::string(e.what()), "derived form slot 4 is not in 0..3");
  }
}

}  // namespace
