#include "bellows/runtime/bag_rerun.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace bellows::runtime {
namespace {

std::string text(IndexRange range) {
  return "[" + std::to_string(range.begin) + ", " + std::to_string(range.end) + ")";
}

// Appends `range` to ascending `ranges`, merged with the last one when they touch.
void append(std::vector<IndexRange>& ranges, IndexRange range) {
  if (range.empty()) return;
  if (!ranges.empty() && ranges.back().end == range.begin) {
    ranges.back().end = range.end;
  } else {
    ranges.push_back(range);
  }
}

}  // namespace

void BagFinishedRanges::add(IndexRange range) {
  if (range.end < range.begin) {
    throw std::invalid_argument("bag finished ranges: " + text(range) + " ends before it begins");
  }
  if (range.empty()) return;
  const auto after = std::lower_bound(
      ranges_.begin(), ranges_.end(), range,
      [](const IndexRange& a, const IndexRange& b) { return a.begin < b.begin; });
  if ((after != ranges_.end() && after->begin < range.end) ||
      (after != ranges_.begin() && std::prev(after)->end > range.begin)) {
    throw std::invalid_argument("bag finished ranges: " + text(range) +
                                " overlaps a range already finished on this rank");
  }
  auto at = ranges_.insert(after, range);
  tasks_ += range.size();
  if (auto next = std::next(at); next != ranges_.end() && next->begin == at->end) {
    at->end = next->end;
    ranges_.erase(next);
  }
  if (at != ranges_.begin()) {
    if (auto prev = std::prev(at); prev->end == at->begin) {
      prev->end = at->end;
      ranges_.erase(at);
    }
  }
}

BagRerun plan_bag_rerun(std::span<const IndexRange> bag, std::span<const BagFinished> finished) {
  for (std::size_t i = 0; i < bag.size(); ++i) {
    if (bag[i].end < bag[i].begin || (i > 0 && bag[i].begin < bag[i - 1].end)) {
      throw std::invalid_argument("bag rerun: the bag's range " + text(bag[i]) +
                                  " ends before it begins or is not after the one before it");
    }
  }
  std::vector<BagFinished> sorted;
  for (const BagFinished& f : finished) {
    if (f.range.end < f.range.begin) {
      throw std::invalid_argument("bag rerun: rank " + std::to_string(f.rank) + " finished " +
                                  text(f.range) + ", which ends before it begins");
    }
    if (!f.range.empty()) sorted.push_back(f);
  }
  std::sort(sorted.begin(), sorted.end(), [](const BagFinished& a, const BagFinished& b) {
    return a.range.begin < b.range.begin;
  });
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].range.begin < sorted[i - 1].range.end) {
      throw std::invalid_argument("bag rerun: ranks " + std::to_string(sorted[i - 1].rank) + " and " +
                                  std::to_string(sorted[i].rank) + " both finished index " +
                                  std::to_string(sorted[i].range.begin) + " (" +
                                  text(sorted[i - 1].range) + " and " + text(sorted[i].range) + ")");
    }
  }
  BagRerun rerun;
  auto next = sorted.begin();
  for (const IndexRange& range : bag) {
    std::int64_t at = range.begin;
    for (; next != sorted.end() && next->range.begin < range.end; ++next) {
      if (next->range.begin < at || next->range.end > range.end) break;  // not inside: below
      append(rerun.ranges, {at, next->range.begin});
      rerun.kept += next->range.size();
      at = next->range.end;
    }
    if (next != sorted.end() && next->range.begin < range.end) break;
    append(rerun.ranges, {at, range.end});
  }
  if (next != sorted.end()) {
    throw std::invalid_argument("bag rerun: rank " + std::to_string(next->rank) + " finished " +
                                text(next->range) + ", which is not inside the bag's ranges");
  }
  for (const IndexRange& r : rerun.ranges) rerun.tasks += r.size();
  return rerun;
}

}  // namespace bellows::runtime
