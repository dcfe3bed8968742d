#include "bellows/sim/workload.hpp"

#include <array>
#include <map>
#include <memory>
#include <stdexcept>

#include "bellows/runtime/block_cyclic.hpp"
#include "bellows/runtime/collection.hpp"
#include "bspgemm_tasks.hpp"
#include "cholesky_tasks.hpp"
#include "gemm_tasks.hpp"

namespace bellows::sim {

namespace br = bellows::runtime;
namespace be = bellows::examples;

std::string validate(const WorkloadOptions& o) {
  if (o.app != "gemm" && o.app != "cholesky" && o.app != "bspgemm") {
    return "--app must be gemm, cholesky or bspgemm, got '" + o.app + "'";
  }
  if (o.n <= 0) return "--n must be positive, got " + std::to_string(o.n);
  if (o.tile <= 0) return "--tile must be positive, got " + std::to_string(o.tile);
  if (o.app == "bspgemm") {
    be::SparsityPattern p{};
    if (!be::parse_sparsity_pattern(o.pattern, p)) {
      return "--pattern must be random, banded or skewed, got '" + o.pattern + "'";
    }
    if (!(o.density > 0.0 && o.density <= 1.0)) {
      return "--density must be in (0, 1], got " + std::to_string(o.density);
    }
    if (o.k < 0) return "--k must be positive, got " + std::to_string(o.k);
  }
  return {};
}

namespace {

constexpr int kNoRank = -1;  // the collections hold no tile: no rank is this process

Workload build(const std::vector<const br::TaskClass*>& classes,
               const std::vector<const br::TiledMatrix*>& matrices, int ranks,
               nlohmann::json description) {
  std::map<br::CollectionId, const br::TiledMatrix*> by_id;
  for (const auto* m : matrices) by_id[m->id()] = m;
  const auto matrix = [&](const br::TileIndex& t) -> const br::TiledMatrix& {
    const auto it = by_id.find(t.collection);
    if (it == by_id.end()) {
      throw std::invalid_argument("a task names collection " + std::to_string(t.collection) +
                                  ", which the workload does not have");
    }
    return *it->second;
  };
  Workload w{SimGraph::build(
                 classes, ranks,
                 [&](const br::TileIndex& t) {
                   const auto& m = matrix(t);
                   return static_cast<std::uint64_t>(m.rows_of_tile(t.m)) *
                          static_cast<std::uint64_t>(m.cols_of_tile(t.n)) * sizeof(double);
                 },
                 [&](const br::TileIndex& t) { return matrix(t).owner(t.m, t.n); }),
             std::move(description)};
  w.description["tasks"] = w.graph.size();
  w.description["flops"] = w.graph.total_flops();
  return w;
}

}  // namespace

Workload make_workload(const WorkloadOptions& o, int ranks) {
  if (const auto error = validate(o); !error.empty()) throw std::invalid_argument(error);
  const auto grid = br::BlockCyclic2D::square_for(ranks);
  const int n = o.n, tile = o.tile;
  nlohmann::json description = {{"app", o.app}, {"n", n}, {"tile", tile},
                                {"grid", std::to_string(grid.rows) + "x" + std::to_string(grid.cols)}};
  if (o.app == "gemm") {
    br::TiledMatrix a(0, n, n, tile, grid, kNoRank), b(1, n, n, tile, grid, kNoRank),
        c(2, n, n, tile, grid, kNoRank);
    const be::GemmTasks gemm(0, a, b, c);
    return build({&gemm}, {&a, &b, &c}, ranks, std::move(description));
  }
  if (o.app == "cholesky") {
    const auto lower = [](int m, int k) { return m >= k; };
    br::TiledMatrix a(0, n, n, tile, grid, kNoRank, lower), l(1, n, n, tile, grid, kNoRank, lower);
    const auto owned = be::make_cholesky_tasks(a, l);
    std::vector<const br::TaskClass*> classes;
    for (const auto& c : owned) classes.push_back(c.get());
    return build(classes, {&a, &l}, ranks, std::move(description));
  }
  be::SparsityPattern kind{};
  (void)be::parse_sparsity_pattern(o.pattern, kind);
  const int k = o.k > 0 ? o.k : n;
  const auto tiles = [tile](int order) { return (order + tile - 1) / tile; };
  const be::TilePattern pattern(tiles(n), tiles(k), tiles(n), kind, o.density, o.seed);
  br::TiledMatrix a(0, n, k, tile, grid, kNoRank, [&pattern](int i, int kk) { return pattern.a_nonzero(i, kk); });
  br::TiledMatrix b(1, k, n, tile, grid, kNoRank, [&pattern](int kk, int j) { return pattern.b_nonzero(kk, j); });
  br::TiledMatrix c(2, n, n, tile, grid, kNoRank, [&pattern](int i, int j) { return pattern.c_nonzero(i, j); });
  const be::BspgemmTasks tasks(0, pattern, a, b, c);
  description["pattern"] = o.pattern;
  description["density"] = o.density;
  description["k"] = k;
  description["seed"] = o.seed;
  description["a_nonzero_tiles"] = pattern.a_nonzeros();
  description["b_nonzero_tiles"] = pattern.b_nonzeros();
  return build({&tasks}, {&a, &b, &c}, ranks, std::move(description));
}

}  // namespace bellows::sim
