#include "bellows/runtime/collection.hpp"

#include <utility>
#include <cmath>
#include <stdexcept>
#include <string>

namespace bellows::runtime {

TiledMatrix::TiledMatrix(CollectionId id, int rows, int cols, int tile, BlockCyclic2D distribution,
                         int my_rank, TileFilter keep)
    : id_(id), rows_(rows), cols_(cols), tile_(tile), dist_(distribution), my_rank_(my_rank),
      keep_(std::move(keep)) {
  if (rows <= 0 || cols <= 0 || tile <= 0) {
    throw std::invalid_argument("matrix " + std::to_string(rows) + "x" + std::to_string(cols) +
                                " with tile " + std::to_string(tile) + ": sizes must be positive");
  }
  if (dist_.rows <= 0 || dist_.cols <= 0) {
    throw std::invalid_argument("process grid " + std::to_string(dist_.rows) + "x" +
                                std::to_string(dist_.cols) + " must be positive");
  }
  mt_ = (rows + tile - 1) / tile;
  nt_ = (cols + tile - 1) / tile;
  tiles_.resize(static_cast<std::size_t>(mt_) * static_cast<std::size_t>(nt_));
  for (int n = 0; n < nt_; ++n) {
    for (int m = 0; m < mt_; ++m) {
      if (is_local(m, n)) tiles_[slot(m, n)] = std::make_shared<Tile>(rows_of_tile(m), cols_of_tile(n));
    }
  }
}

int TiledMatrix::rows_of_tile(int m) const noexcept {
  return m == mt_ - 1 ? rows_ - m * tile_ : tile_;
}

int TiledMatrix::cols_of_tile(int n) const noexcept {
  return n == nt_ - 1 ? cols_ - n * tile_ : tile_;
}

const TilePtr& TiledMatrix::tile(int m, int n) const {
  if (m < 0 || m >= mt_ || n < 0 || n >= nt_ || !tiles_[slot(m, n)]) {
    throw std::out_of_range("tile (" + std::to_string(m) + "," + std::to_string(n) +
                            ") of collection " + std::to_string(id_) + " is not on rank " +
                            std::to_string(my_rank_));
  }
  return tiles_[slot(m, n)];
}

void TiledMatrix::set_tile(int m, int n, TilePtr t) {
  if (!is_local(m, n)) {
    throw std::out_of_range("write-back of tile (" + std::to_string(m) + "," + std::to_string(n) +
                            ") of collection " + std::to_string(id_) + " on rank " +
                            std::to_string(my_rank_) + ", which does not own it");
  }
  if (!t || t->rows() != rows_of_tile(m) || t->cols() != cols_of_tile(n)) {
    throw std::invalid_argument("write-back of tile (" + std::to_string(m) + "," +
                                std::to_string(n) + ") of collection " + std::to_string(id_) +
                                " with a tile of the wrong shape");
  }
  tiles_[slot(m, n)] = std::move(t);
}

void TiledMatrix::set_placement(std::vector<int> placement, int my_rank) {
  set_mapping(std::move(placement), tile_owners_, my_rank);
}

void TiledMatrix::set_mapping(std::vector<int> placement, std::vector<int> tile_owners,
                              int my_rank) {
  if (!placement.empty() && placement.size() != static_cast<std::size_t>(dist_.size())) {
    throw std::invalid_argument("placement of collection " + std::to_string(id_) + " has " +
                                std::to_string(placement.size()) + " entries for a grid of " +
                                std::to_string(dist_.size()) + " ranks");
  }
  if (!tile_owners.empty() && tile_owners.size() != tiles_.size()) {
    throw std::invalid_argument("tile owners of collection " + std::to_string(id_) + " have " +
                                std::to_string(tile_owners.size()) + " entries for " +
                                std::to_string(tiles_.size()) + " tiles");
  }
  placement_ = std::move(placement);
  tile_owners_ = std::move(tile_owners);
  my_rank_ = my_rank;
  for (int n = 0; n < nt_; ++n) {
    for (int m = 0; m < mt_; ++m) {
      if (!is_local(m, n)) tiles_[slot(m, n)].reset();
    }
  }
}

void TiledMatrix::start_probe(int base) {
  saved_tile_owners_ = tile_owners_;
  tile_owners_.resize(tiles_.size());
  for (std::size_t s = 0; s < tiles_.size(); ++s) tile_owners_[s] = -(2 + base + static_cast<int>(s));
}

void TiledMatrix::stop_probe() noexcept { tile_owners_.swap(saved_tile_owners_); saved_tile_owners_.clear(); }

void TiledMatrix::for_each_local_tile(const std::function<void(int, int, Tile&)>& fn) {
  for (int n = 0; n < nt_; ++n) {
    for (int m = 0; m < mt_; ++m) {
      if (auto& t = tiles_[slot(m, n)]) fn(m, n, *t);
    }
  }
}

std::vector<double> TiledMatrix::gather_to_root(MPI_Comm comm) const {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  constexpr int kTag = 7001;
  std::vector<double> full;
  if (rank == 0) full.assign(static_cast<std::size_t>(rows_) * cols_, 0.0);
  std::vector<double> buffer;
  for (int n = 0; n < nt_; ++n) {
    for (int m = 0; m < mt_; ++m) {
      if (!kept(m, n)) continue;
      const int owner = this->owner(m, n);
      const int tr = rows_of_tile(m);
      const int tc = cols_of_tile(n);
      if (rank == 0) {
        const double* src = nullptr;
        if (owner == 0) {
          src = std::as_const(*tiles_[slot(m, n)]).data();
        } else {
          buffer.resize(static_cast<std::size_t>(tr) * tc);
          MPI_Recv(buffer.data(), tr * tc, MPI_DOUBLE, owner, kTag, comm, MPI_STATUS_IGNORE);
          src = buffer.data();
        }
        for (int j = 0; j < tc; ++j) {
          for (int i = 0; i < tr; ++i) {
            full[static_cast<std::size_t>(n * tile_ + j) * rows_ + m * tile_ + i] =
                src[static_cast<std::size_t>(j) * tr + i];
          }
        }
      } else if (owner == rank) {
        MPI_Send(std::as_const(*tiles_[slot(m, n)]).data(), tr * tc, MPI_DOUBLE, 0, kTag, comm);
      }
    }
  }
  return full;
}

}  // namespace bellows::runtime
