#include "bag_loss.hpp"
#include "rank_set_text.hpp"

#include <array>

namespace bellows::runtime::bag {

std::optional<std::vector<BagFinished>> gather_finished(MPI_Comm comm, int size,
                                                        const BagFinishedRanges& finished,
                                                        std::int64_t bag_tasks,
                                                        std::int64_t run_number,
                                                        Watched& watched) {
  struct Buffers {
    std::vector<std::int64_t> mine;
    std::array<std::int64_t, 2> head{};  ///< run number, bounds of finished ranges
    std::vector<std::int64_t> heads;
    int count = 0;
    std::vector<int> counts;
    std::vector<int> offsets;
    std::vector<std::int64_t> all;
  };
  auto b = std::make_unique<Buffers>();
  for (const IndexRange& r : finished.ranges()) {
    b->mine.push_back(r.begin);
    b->mine.push_back(r.end);
  }
  b->count = static_cast<int>(b->mine.size());
  b->head = {run_number, b->count};
  b->heads.assign(2 * static_cast<std::size_t>(size), 0);
  b->counts.assign(static_cast<std::size_t>(size), 0);
  const auto lost = [&] {
    keep_until_exit(std::move(b));
    return std::nullopt;
  };
  MPI_Request request = MPI_REQUEST_NULL;
  if (!watched.ok(MPI_Iallgather(b->head.data(), 2, MPI_INT64_T, b->heads.data(), 2, MPI_INT64_T,
                                 comm, &request),
                  "MPI_Iallgather") ||
      !watched.wait(request, "MPI_Iallgather") || watched.poll()) {
    return lost();
  }
  std::vector<int> behind, ahead;  // ranks of `comm` in another run than the first survivor
  for (int r = 0; r < size; ++r) {
    const std::int64_t theirs = b->heads[2 * static_cast<std::size_t>(r)];
    if (theirs != b->heads[0]) (theirs < b->heads[0] ? behind : ahead).push_back(r);
    b->counts[static_cast<std::size_t>(r)] = static_cast<int>(
        std::clamp<std::int64_t>(b->heads[2 * static_cast<std::size_t>(r) + 1], -1, 2 * bag_tasks + 2));
  }
  if (!behind.empty() || !ahead.empty()) {
    std::vector<int> in_first;
    for (int r = 0; r < size; ++r) {
      if (b->heads[2 * static_cast<std::size_t>(r)] == b->heads[0]) in_first.push_back(r);
    }
    throw std::runtime_error(
        "task bag: the survivors of a loss are not recovering the same run: ranks " +
        rank_set_text(in_first) + " of the survivors are in run " + std::to_string(b->heads[0]) +
        (behind.empty() ? "" : ", ranks " + rank_set_text(behind) + " in an earlier one") +
        (ahead.empty() ? "" : ", ranks " + rank_set_text(ahead) + " in a later one") +
        " (a rank died as a run ended, after some survivors had its end)");
  }
  // Each rank finished at most the whole bag, in disjoint non-empty ranges.
  b->offsets.assign(static_cast<std::size_t>(size), 0);
  std::int64_t total = 0;
  for (int r = 0; r < size; ++r) {
    const int c = b->counts[static_cast<std::size_t>(r)];
    if (c < 0 || c % 2 != 0 || c > 2 * bag_tasks) {
      watched.fail("rank " + std::to_string(r) + " reported " + std::to_string(c) +
                   " bounds of finished ranges");
      return lost();
    }
    b->offsets[static_cast<std::size_t>(r)] = static_cast<int>(total);
    total += c;
  }
  b->all.assign(static_cast<std::size_t>(total), 0);
  request = MPI_REQUEST_NULL;
  if (!watched.ok(MPI_Iallgatherv(b->mine.data(), b->count, MPI_INT64_T, b->all.data(),
                                  b->counts.data(), b->offsets.data(), MPI_INT64_T, comm, &request),
                  "MPI_Iallgatherv") ||
      !watched.wait(request, "MPI_Iallgatherv") || watched.poll()) {
    return lost();  // a collective over a dead peer may complete with garbage
  }
  std::vector<BagFinished> out;
  for (int r = 0; r < size; ++r) {
    const auto at = static_cast<std::size_t>(b->offsets[static_cast<std::size_t>(r)]);
    for (std::size_t i = 0; i + 1 < static_cast<std::size_t>(b->counts[static_cast<std::size_t>(r)]); i += 2) {
      out.push_back({r, {b->all[at + i], b->all[at + i + 1]}});
    }
  }
  return out;
}

}  // namespace bellows::runtime::bag
