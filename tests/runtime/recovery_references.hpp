#pragma once
// The job the recovery tests' members run, as a run without failure computes it: its shape,
// what the application does to A after each iteration, and A and C (or L) at the end.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "bellows/runtime/collection.hpp"
#include "bspgemm_tasks.hpp"
#include "recovery_test.hpp"

namespace bellows::testing::recovery {

constexpr int kN = 384;
constexpr int kTile = 96;  // 4 x 4 tiles: 64 GEMM tasks per iteration
constexpr int kIterations = 30;
constexpr unsigned kSeed = 11;
constexpr double kBspgemmDensity = 0.5;  // the share of A's and B's tiles that are nonzero

/// The bspgemm job's nonzero tiles: a few dense rows of A and columns of B (the example's
/// `skewed` pattern), 4 x 4 tiles like the others.
const bellows::examples::TilePattern& bspgemm_pattern();

/// What the application does to A after iteration `iteration` (counted from 0), on this
/// rank's tiles of A.
void evolve(bellows::runtime::TiledMatrix& a, int iteration, Job job);

/// A and C (L for the Cholesky job) after kIterations iterations of `job` without failure,
/// column-major with ld = kN.
std::pair<std::vector<double>, std::vector<double>> reference(Job job);

/// A and L of the Cholesky job (A of order x order in tiles of `tile`, filled by fill_spd from
/// `seed`, evolved after each iteration) after `iterations` iterations without failure,
/// column-major with ld = order. L after one iteration is that of A as filled.
std::pair<std::vector<double>, std::vector<double>> cholesky_reference(int iterations, int order = kN,
                                                                       int tile = kTile, unsigned seed = kSeed);

/// How many elements of `x` and `y` differ bit for bit (the longer's size if the sizes differ).
std::size_t differing(const std::vector<double>& x, const std::vector<double>& y);

/// What a refusal must say: the phase it came from and the ranks.
bool names_phase_and_ranks(const std::string& text);

}  // namespace bellows::testing::recovery
