#include "bellows/runtime/dtree.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace bellows::runtime {
namespace {

std::string text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

void check_fraction(double value, const char* name) {
  if (!(value > 0.0 && value <= 1.0)) {
    throw std::invalid_argument(std::string("dtree: ") + name + " must be in (0, 1], got " +
                                text(value));
  }
}

// Ranks a tree of this fan-out and height holds at most, saturating at `cap`.
std::int64_t capacity(int fan_out, int height, std::int64_t cap) {
  std::int64_t total = 1;
  std::int64_t level = 1;
  for (int h = 1; h <= height && total < cap; ++h) {
    level = std::min(level * fan_out, cap);
    total = std::min(total + level, cap);
  }
  return total;
}

std::size_t at(int rank) { return static_cast<std::size_t>(rank); }

}  // namespace

void DtreeOptions::validate() const {
  if (fan_out < 1) {
    throw std::invalid_argument("dtree: fan_out must be at least 1, got " +
                                std::to_string(fan_out));
  }
  if (max_height < 1) {
    throw std::invalid_argument("dtree: max_height must be at least 1, got " +
                                std::to_string(max_height));
  }
  check_fraction(first, "first");
  check_fraction(rest, "rest");
}

// ---------------------------------------------------------------- DtreeShape

DtreeShape::DtreeShape(int ranks, const DtreeOptions& options)
    : fan_out_(options.fan_out), max_height_(options.max_height) {
  options.validate();
  if (ranks < 1) {
    throw std::invalid_argument("dtree: a tree needs at least 1 rank, got " +
                                std::to_string(ranks));
  }
  const std::int64_t most = capacity(fan_out_, max_height_, std::int64_t{ranks} + 1);
  if (ranks > most) {
    throw std::invalid_argument("dtree: " + std::to_string(ranks) +
                                " ranks do not fit a tree of fan-out " + std::to_string(fan_out_) +
                                " and height at most " + std::to_string(max_height_) +
                                " (at most " + std::to_string(most) + " ranks)");
  }
  parent_.assign(at(ranks), -1);
  children_.resize(at(ranks));
  member_.assign(at(ranks), true);
  size_ = ranks;
  // Each block [first, first + count) is a subtree rooted at `first`; the rest of it is split
  // evenly into at most fan_out contiguous blocks, the larger ones first.
  struct Block {
    int first;
    int count;
  };
  std::vector<Block> todo{{0, ranks}};
  while (!todo.empty()) {
    const Block block = todo.back();
    todo.pop_back();
    const int below = block.count - 1;
    if (below == 0) continue;
    const int parts = std::min(fan_out_, below);
    int next = block.first + 1;
    for (int i = 0; i < parts; ++i) {
      const int count = below / parts + (i < below % parts ? 1 : 0);
      parent_[at(next)] = block.first;
      children_[at(block.first)].push_back(next);
      todo.push_back({next, count});
      next += count;
    }
  }
}

DtreeShape DtreeShape::from_parents(std::span<const int> parents, const DtreeOptions& options) {
  DtreeShape shape(1, options);
  const auto ranks = static_cast<int>(parents.size());
  if (ranks < 1) throw std::invalid_argument("dtree: a list of parents needs at least rank 0");
  if (parents[0] != -1) {
    throw std::invalid_argument("dtree: rank 0 is the root and has no parent, got parent " +
                                std::to_string(parents[0]));
  }
  shape.parent_.assign(at(ranks), -1);
  shape.children_.assign(at(ranks), {});
  shape.member_.assign(at(ranks), true);
  shape.size_ = ranks;
  for (int r = 1; r < ranks; ++r) {
    const int p = parents[at(r)];
    if (p < 0 || p >= ranks || p == r) {
      throw std::invalid_argument("dtree: the parent of rank " + std::to_string(r) +
                                  " must be another rank below " + std::to_string(ranks) +
                                  ", got " + std::to_string(p));
    }
    shape.attach(r, p);
  }
  for (int r = 1; r < ranks; ++r) {
    if (shape.children_[at(r)].size() > static_cast<std::size_t>(shape.fan_out_)) {
      throw std::invalid_argument("dtree: rank " + std::to_string(r) + " has " +
                                  std::to_string(shape.children_[at(r)].size()) +
                                  " children, more than the fan-out " +
                                  std::to_string(shape.fan_out_));
    }
    int edges = 0;
    for (int a = r; a != 0; a = parents[at(a)]) {
      if (++edges > ranks) {
        throw std::invalid_argument("dtree: rank " + std::to_string(r) +
                                    " is on a cycle of parents, not below the root");
      }
    }
    if (edges > shape.max_height_) {
      throw std::invalid_argument("dtree: rank " + std::to_string(r) + " is " +
                                  std::to_string(edges) + " edges below the root, more than the height " +
                                  std::to_string(shape.max_height_));
    }
  }
  if (shape.children_[0].size() > static_cast<std::size_t>(shape.fan_out_)) {
    throw std::invalid_argument("dtree: rank 0 has " + std::to_string(shape.children_[0].size()) +
                                " children, more than the fan-out " +
                                std::to_string(shape.fan_out_));
  }
  return shape;
}

std::vector<int> DtreeShape::parents() const {
  int highest = 0;
  for (int r = 0; r < static_cast<int>(member_.size()); ++r) {
    if (member(r)) highest = r;
  }
  std::vector<int> out(at(highest + 1), -1);
  for (int r = 0; r <= highest; ++r) out[at(r)] = parent(r);
  return out;
}

bool DtreeShape::member(int rank) const noexcept {
  return rank >= 0 && at(rank) < member_.size() && member_[at(rank)];
}

int DtreeShape::parent(int rank) const noexcept { return member(rank) ? parent_[at(rank)] : -1; }

std::span<const int> DtreeShape::children(int rank) const noexcept {
  if (!member(rank)) return {};
  return children_[at(rank)];
}

int DtreeShape::depth(int rank) const noexcept {
  if (!member(rank)) return -1;
  int d = 0;
  for (int r = parent_[at(rank)]; r >= 0; r = parent_[at(r)]) ++d;
  return d;
}

int DtreeShape::height() const noexcept {
  int most = 0;
  for (int r = 0; r < static_cast<int>(member_.size()); ++r) {
    if (member(r) && children_[at(r)].empty()) most = std::max(most, depth(r));
  }
  return most;
}

std::vector<int> DtreeShape::subtree(int rank) const {
  std::vector<int> out;
  if (!member(rank)) return out;
  std::vector<int> todo{rank};
  while (!todo.empty()) {
    const int r = todo.back();
    todo.pop_back();
    out.push_back(r);
    for (const int c : children_[at(r)]) todo.push_back(c);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void DtreeShape::attach(int child, int parent) {
  parent_[at(child)] = parent;
  auto& kids = children_[at(parent)];
  kids.insert(std::lower_bound(kids.begin(), kids.end(), child), child);
}

void DtreeShape::detach(int child) {
  const int p = parent_[at(child)];
  if (p < 0) return;
  auto& kids = children_[at(p)];
  kids.erase(std::find(kids.begin(), kids.end(), child));
  parent_[at(child)] = -1;
}

int DtreeShape::join(int rank) {
  if (rank < 0 || member(rank)) {
    throw std::invalid_argument("dtree: rank " + std::to_string(rank) +
                                " cannot join: " + (rank < 0 ? "negative" : "already in the tree"));
  }
  int best = -1;
  int best_depth = 0;
  for (int r = 0; r < static_cast<int>(member_.size()); ++r) {
    if (!member(r)) continue;
    const int d = depth(r);
    const auto kids = children_[at(r)].size();
    if (d >= max_height_ || kids >= static_cast<std::size_t>(fan_out_)) continue;
    if (best < 0 || d < best_depth || (d == best_depth && kids < children_[at(best)].size())) {
      best = r;
      best_depth = d;
    }
  }
  if (best < 0) {
    throw std::invalid_argument("dtree: rank " + std::to_string(rank) +
                                " cannot join: " + std::to_string(size_) +
                                " ranks fill a tree of fan-out " + std::to_string(fan_out_) +
                                " and height at most " + std::to_string(max_height_));
  }
  if (at(rank) >= member_.size()) {
    parent_.resize(at(rank) + 1, -1);
    children_.resize(at(rank) + 1);
    member_.resize(at(rank) + 1, false);
  }
  member_[at(rank)] = true;
  ++size_;
  attach(rank, best);
  return best;
}

DtreeLeave DtreeShape::leave(int rank) {
  if (!member(rank) || rank == 0) {
    throw std::invalid_argument("dtree: rank " + std::to_string(rank) + " cannot leave: " +
                                (rank == 0 ? "it is the root" : "not in the tree"));
  }
  DtreeLeave out;
  out.returns_to = parent_[at(rank)];
  if (!children_[at(rank)].empty()) {
    int leaf = -1;
    int leaf_depth = -1;
    for (const int r : subtree(rank)) {
      if (!children_[at(r)].empty()) continue;
      const int d = depth(r);
      if (d >= leaf_depth) {  // ascending order: the last of the deepest is the highest
        leaf = r;
        leaf_depth = d;
      }
    }
    detach(leaf);
    const std::vector<int> orphans = children_[at(rank)];
    for (const int c : orphans) {
      detach(c);
      attach(c, leaf);
    }
    out.promoted = leaf;
  }
  detach(rank);
  if (out.promoted >= 0) attach(out.promoted, out.returns_to);
  member_[at(rank)] = false;
  --size_;
  return out;
}

// ---------------------------------------------------------------- shares

DtreeShares dtree_shares(const DtreeShape& shape, int parent, std::span<const double> speeds) {
  if (!shape.member(parent)) {
    throw std::invalid_argument("dtree shares: rank " + std::to_string(parent) +
                                " is not in the tree");
  }
  const auto known = [&](int rank) { return at(rank) < speeds.size() ? speeds[at(rank)] : 0.0; };
  double sum = 0.0;
  int measured = 0;
  for (const int r : shape.subtree(0)) {
    const double s = known(r);
    if (!std::isfinite(s) || s < 0.0) {
      throw std::invalid_argument("dtree shares: the speed of rank " + std::to_string(r) +
                                  " must be finite and not negative, got " + text(s));
    }
    if (s > 0.0) {
      sum += s;
      ++measured;
    }
  }
  const double fallback = measured > 0 ? sum / measured : 1.0;
  const auto speed = [&](int rank) {
    const double s = known(rank);
    return s > 0.0 ? s : fallback;
  };
  const auto weight = [&](int rank) {
    double w = 0.0;
    for (const int r : shape.subtree(rank)) w += speed(r);
    return w;
  };
  DtreeShares out;
  const double total = weight(parent);
  out.own = speed(parent) / total;
  for (const int c : shape.children(parent)) out.children.push_back({c, weight(c) / total});
  return out;
}

// ---------------------------------------------------------------- DtreeGrantor

std::vector<DtreeGrantor::Child> DtreeGrantor::checked(std::vector<DtreeChildShare> children) {
  std::vector<Child> out;
  for (const auto& c : children) {
    if (!std::isfinite(c.share) || c.share < 0.0) {
      throw std::invalid_argument("dtree grantor: the share of rank " + std::to_string(c.rank) +
                                  " must be finite and not negative, got " + text(c.share));
    }
    for (const auto& o : out) {
      if (o.rank == c.rank) {
        throw std::invalid_argument("dtree grantor: rank " + std::to_string(c.rank) +
                                    " is listed twice");
      }
    }
    out.push_back({c.rank, c.share, true});
  }
  return out;
}

DtreeGrantor::DtreeGrantor(IndexRange pool, std::vector<DtreeChildShare> children,
                           const DtreeOptions& options)
    : options_(options), start_size_(pool.size()) {
  options_.validate();
  children_ = checked(std::move(children));
  if (!pool.empty()) {
    pool_.push_back(pool);
    remaining_ = pool.size();
  }
}

DtreeGrantor DtreeGrantor::over_ranges(std::span<const IndexRange> pool,
                                       std::vector<DtreeChildShare> children,
                                       const DtreeOptions& options) {
  DtreeGrantor grantor(IndexRange{}, std::move(children), options);
  for (const IndexRange& range : pool) grantor.insert(range, "the pool's range");
  grantor.start_size_ = grantor.remaining_;
  return grantor;
}

IndexRange DtreeGrantor::cut(std::int64_t count) {
  if (pool_.empty() || count <= 0) return {};
  IndexRange& low = pool_.front();
  const std::int64_t n = std::min(count, low.size());
  const IndexRange out{low.begin, low.begin + n};
  low.begin += n;
  remaining_ -= n;
  if (low.empty()) pool_.erase(pool_.begin());
  return out;
}

IndexRange DtreeGrantor::grant(int child, std::int64_t min_ask) {
  if (min_ask < 0) {
    throw std::invalid_argument("dtree grantor: rank " + std::to_string(child) +
                                " asks for a negative count, " + std::to_string(min_ask));
  }
  const auto it = std::find_if(children_.begin(), children_.end(),
                               [&](const Child& c) { return c.rank == child; });
  if (it == children_.end()) {
    throw std::invalid_argument("dtree grantor: rank " + std::to_string(child) +
                                " is not a child of this parent");
  }
  if (remaining_ == 0) return {};
  const double base = it->first_pending ? options_.first * static_cast<double>(start_size_)
                                        : options_.rest * static_cast<double>(remaining_);
  it->first_pending = false;
  const auto size = static_cast<std::int64_t>(std::floor(base * it->share));
  return cut(std::max({size, min_ask, std::int64_t{1}}));
}

IndexRange DtreeGrantor::take_own(std::int64_t count) {
  if (count < 0) {
    throw std::invalid_argument("dtree grantor: the parent takes a negative count, " +
                                std::to_string(count));
  }
  return cut(count);
}

void DtreeGrantor::insert(IndexRange range, const char* what) {
  if (range.empty()) return;
  const auto after =
      std::lower_bound(pool_.begin(), pool_.end(), range,
                       [](const IndexRange& a, const IndexRange& b) { return a.begin < b.begin; });
  const bool overlaps_next = after != pool_.end() && after->begin < range.end;
  const bool overlaps_prev = after != pool_.begin() && std::prev(after)->end > range.begin;
  if (overlaps_next || overlaps_prev) {
    throw std::invalid_argument(std::string("dtree grantor: ") + what + " [" +
                                std::to_string(range.begin) + ", " + std::to_string(range.end) +
                                ") overlaps the pool");
  }
  auto at_pos = pool_.insert(after, range);
  remaining_ += range.size();
  // Coalesce with the neighbours it touches.
  if (auto next = std::next(at_pos); next != pool_.end() && next->begin == at_pos->end) {
    at_pos->end = next->end;
    pool_.erase(next);
  }
  if (at_pos != pool_.begin()) {
    if (auto prev = std::prev(at_pos); prev->end == at_pos->begin) {
      prev->end = at_pos->end;
      pool_.erase(at_pos);
    }
  }
}

void DtreeGrantor::give_back(IndexRange range) { insert(range, "the range given back"); }

void DtreeGrantor::refill(IndexRange range) {
  insert(range, "the refill");
  if (start_size_ == 0) start_size_ = range.size();
}

void DtreeGrantor::set_children(std::vector<DtreeChildShare> children) {
  std::vector<Child> next = checked(std::move(children));
  for (auto& c : next) {
    const auto old = std::find_if(children_.begin(), children_.end(),
                                  [&](const Child& o) { return o.rank == c.rank; });
    c.first_pending = old != children_.end() && old->first_pending;
  }
  children_ = std::move(next);
}

}  // namespace bellows::runtime
