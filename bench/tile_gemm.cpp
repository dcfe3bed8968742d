// Tile products on one core: OpenBLAS's DGEMM against the micro-kernel over operands packed
// once per tile (examples/kernels/src/packed_gemm.cpp), on the same tiles, interleaved.
//
//   OPENBLAS_NUM_THREADS=1 build/default/bench/bellows_tile_gemm --tile 256 --tiles 64 --rounds 5
//
// Each round multiplies pairs of operand tiles drawn from a set of --tiles tiles into C tiles
// of another set as large (64 tiles of 256 are 32 MiB each: the tiles arrive from memory, as in
// a task graph), C -= A * B^T as Cholesky's updates do, once with OpenBLAS and once with the
// packed kernel. Before its packed round every operand tile drops its packed forms, so that
// each round pays for packing every operand it reads once, as a task graph does for a tile
// that a task has just written and several tasks then read. Prints GFLOP/s per round, the ratio
// packed / OpenBLAS and the forms packed; the last line is a JSON object of the medians.
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "bellows/kernels/packed_gemm.hpp"
#include "bellows/runtime/tile.hpp"

namespace {

using bellows::runtime::Tile;
namespace packed = bellows::kernels::packed;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tile products on one core: OpenBLAS against operands packed once per tile"};
  int tile = 256, tiles = 64, products = 0, rounds = 5;
  app.add_option("--tile", tile, "tile order")->check(CLI::Range(1, 4096));
  app.add_option("--tiles", tiles, "tiles in the set the operands are drawn from")->check(CLI::Range(3, 4096));
  app.add_option("--products", products, "products per round (default: 6 per tile)")->check(CLI::Range(0, 1 << 20));
  app.add_option("--rounds", rounds, "interleaved rounds")->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  if (!packed::available()) {
    std::fprintf(stderr, "bellows_tile_gemm: the packed kernel does not run here (no AVX-512F and FMA, or BELLOWS_TILE_GEMM=openblas)\n");
    return 1;
  }
  if (products == 0) products = 6 * tiles;

  std::mt19937 gen(1);
  std::uniform_real_distribution<double> value(-1.0, 1.0);
  auto random_set = [&] {
    std::vector<std::shared_ptr<Tile>> set;
    for (int t = 0; t < tiles; ++t) {
      set.push_back(std::make_shared<Tile>(tile, tile));
      double* v = set.back()->data();
      for (std::size_t i = 0; i < set.back()->elements(); ++i) v[i] = value(gen);
    }
    return set;
  };
  const auto operands = random_set();
  const auto results = random_set();
  struct Product {
    int a, b, c;
  };
  std::vector<Product> plan;
  std::uniform_int_distribution<int> pick(0, tiles - 1);
  while (static_cast<int>(plan.size()) < products) plan.push_back({pick(gen), pick(gen), pick(gen)});
  const double flops = 2.0 * tile * tile * static_cast<double>(tile) * products;

  std::vector<double> blas, mine, ratio;
  for (int r = 0; r < rounds; ++r) {
    auto start = std::chrono::steady_clock::now();
    for (const auto& p : plan) {
      const Tile& a = *operands[p.a];
      const Tile& b = *operands[p.b];
      cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, tile, tile, tile, -1.0, a.data(), tile, b.data(), tile,
                  1.0, results[p.c]->data(), tile);
    }
    blas.push_back(flops / seconds_since(start) / 1e9);
    for (const auto& t : operands) (void)t->data();  // an access that may write: drops the forms
    const auto built_before = packed::forms_built();
    start = std::chrono::steady_clock::now();
    for (const auto& p : plan) packed::gemm(*operands[p.a], *operands[p.b], true, -1.0, 1.0, *results[p.c]);
    const double packed_seconds = seconds_since(start);
    mine.push_back(flops / packed_seconds / 1e9);
    ratio.push_back(mine.back() / blas.back());
    const auto forms = packed::forms_built() - built_before;
    std::printf("round %d: OpenBLAS %.1f GFLOP/s, packed %.1f GFLOP/s, packed / OpenBLAS %.3f, forms packed %llu\n",
                r + 1, blas.back(), mine.back(), ratio.back(), static_cast<unsigned long long>(forms));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("{\"tile\":%d,\"tiles\":%d,\"products\":%d,\"rounds\":%d,\"openblas_gflops\":%.2f,"
              "\"packed_gflops\":%.2f,\"packed_over_openblas\":%.3f}\n",
              tile, tiles, products, rounds, median(blas), median(mine), median(ratio));
}
