// rebuild_without: the survivors' communicator after ranks died (rebuild.hpp says which MPICH
// behaviour each step is built on).

#include "bellows/runtime/rebuild.hpp"

#include "bellows/runtime/survivors.hpp"
#include "membership_support.hpp"

#include <string>
#include <thread>
#include <vector>

namespace bellows::runtime {

namespace {

using namespace membership_detail;
using Deadline = std::chrono::steady_clock::time_point;

constexpr int kCheckInTag = 0x4250;
constexpr int kVerdictTag = 0x4251;
constexpr int kCreateTag = 0x4252;

/// The first survivor's answer to the others.
enum Verdict : int { kGo = 1, kOtherDeadSet = 2, kGaveUp = 3 };

void pause() { std::this_thread::sleep_for(std::chrono::microseconds(200)); }

/// Tests `request` until it completes (true) or the deadline passes (false), sleeping between
/// tests. A failed test throws MpiError.
bool complete_by(MPI_Request& request, Deadline deadline) {
  for (;;) {
    int done = 0;
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    pause();
  }
}

/// Lets go of a request that did not complete in time: cancels it and gives it a moment to
/// finish; a request that still has not is freed (MPI completes or drops it later). Never waits
/// on the peer.
void abandon(MPI_Request& request) noexcept {
  if (request == MPI_REQUEST_NULL) return;
  MPI_Cancel(&request);
  const Deadline until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (request != MPI_REQUEST_NULL && std::chrono::steady_clock::now() < until) {
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done) return;
    pause();
  }
  if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
}

/// Per old rank: 1 when dead. What the survivors compare.
std::vector<int> dead_marks(int size, std::span<const int> dead) {
  std::vector<int> marks(static_cast<std::size_t>(size), 0);
  for (const int rank : dead) marks[static_cast<std::size_t>(rank)] = 1;
  return marks;
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string text = "{";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  return text + "}";
}

std::string marked_text(const std::vector<int>& marks) {
  std::vector<int> ranks;
  for (std::size_t r = 0; r < marks.size(); ++r) {
    if (marks[r] != 0) ranks.push_back(static_cast<int>(r));
  }
  return ranks_text(ranks);
}

/// Sends `verdict` to each of `to` and waits for the sends until the deadline (small messages:
/// they complete locally); the ones still pending then are abandoned.
void send_verdicts(MPI_Comm job, const std::vector<int>& to, int verdict, Deadline deadline) {
  std::vector<MPI_Request> sends(to.size(), MPI_REQUEST_NULL);
  for (std::size_t i = 0; i < to.size(); ++i) {
    check(MPI_Isend(&verdict, 1, MPI_INT, to[i], kVerdictTag, job, &sends[i]), "MPI_Isend");
  }
  for (MPI_Request& send : sends) {
    if (!complete_by(send, deadline)) abandon(send);
  }
}

/// The first survivor: collects every other survivor's dead set, then answers all of them.
void coordinate(MPI_Comm job, const std::vector<int>& survivors, const std::vector<int>& marks,
                Deadline deadline) {
  const int size = static_cast<int>(marks.size());
  const std::size_t others = survivors.size() - 1;
  std::vector<std::vector<int>> theirs(others, std::vector<int>(marks.size(), 0));
  std::vector<MPI_Request> receives(others, MPI_REQUEST_NULL);
  for (std::size_t i = 0; i < others; ++i) {
    check(MPI_Irecv(theirs[i].data(), size, MPI_INT, survivors[i + 1], kCheckInTag, job,
                    &receives[i]),
          "MPI_Irecv");
  }
  std::vector<int> checked_in, missing;
  for (std::size_t i = 0; i < others; ++i) {
    // Past the deadline each receive is still tested once: one that arrived counts.
    if (complete_by(receives[i], deadline)) {
      checked_in.push_back(survivors[i + 1]);
    } else {
      abandon(receives[i]);
      missing.push_back(survivors[i + 1]);
    }
  }
  const Deadline answer_by = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  if (!missing.empty()) {
    send_verdicts(job, checked_in, kGaveUp, answer_by);
    throw RebuildError("rebuild_without: survivors (old ranks) " + ranks_text(missing) +
                       " did not check in before the deadline; old rank " +
                       std::to_string(survivors.front()) + " of " + std::to_string(size) +
                       " gave up, dead set " + marked_text(marks));
  }
  for (std::size_t i = 0; i < others; ++i) {
    if (theirs[i] != marks) {
      send_verdicts(job, checked_in, kOtherDeadSet, answer_by);
      throw RebuildError("rebuild_without: old rank " + std::to_string(survivors[i + 1]) +
                         " named dead ranks " + marked_text(theirs[i]) + ", old rank " +
                         std::to_string(survivors.front()) + " " + marked_text(marks));
    }
  }
  send_verdicts(job, checked_in, kGo, deadline);
}

/// Any other survivor: checks in with the first survivor and waits for its answer.
void check_in(MPI_Comm job, int first, const std::vector<int>& marks, Deadline deadline) {
  const int size = static_cast<int>(marks.size());
  MPI_Request send = MPI_REQUEST_NULL, receive = MPI_REQUEST_NULL;
  int verdict = 0;
  check(MPI_Irecv(&verdict, 1, MPI_INT, first, kVerdictTag, job, &receive), "MPI_Irecv");
  check(MPI_Isend(marks.data(), size, MPI_INT, first, kCheckInTag, job, &send), "MPI_Isend");
  const bool answered = complete_by(receive, deadline);
  if (!complete_by(send, answered ? Deadline::max() : deadline)) abandon(send);
  if (!answered) {
    abandon(receive);
    throw RebuildError("rebuild_without: no answer from the first survivor (old rank " +
                       std::to_string(first) + ") before the deadline; dead set " +
                       marked_text(marks));
  }
  if (verdict == kOtherDeadSet) {
    throw RebuildError("rebuild_without: the first survivor (old rank " + std::to_string(first) +
                       ") found that a survivor named another dead set than " +
                       marked_text(marks));
  }
  if (verdict == kGaveUp) {
    throw RebuildError("rebuild_without: the first survivor (old rank " + std::to_string(first) +
                       ") gave up: not every survivor checked in before its deadline");
  }
  if (verdict != kGo) {
    throw RebuildError("rebuild_without: unknown answer " + std::to_string(verdict) +
                       " from the first survivor (old rank " + std::to_string(first) + ")");
  }
}

}  // namespace

MPI_Comm rebuild_without(MPI_Comm job, std::span<const int> dead, Deadline deadline,
                         RebuildReport* report) {
  const auto start = Clock::now();
  RebuildReport local;
  RebuildReport& r = report != nullptr ? *report : local;
  r = RebuildReport{};
  check(MPI_Comm_size(job, &r.old_size), "MPI_Comm_size");
  check(MPI_Comm_rank(job, &r.old_rank), "MPI_Comm_rank");
  const std::vector<int> survivors = survivors_without(r.old_size, dead);
  r.new_rank = survivor_rank(survivors, r.old_rank);
  if (r.new_rank < 0) {
    throw std::invalid_argument("rebuild_without: this rank (" + std::to_string(r.old_rank) +
                                ") is in the dead set " + ranks_text(std::vector<int>(dead.begin(), dead.end())) +
                                "; only survivors call it");
  }
  const std::vector<int> marks = dead_marks(r.old_size, dead);

  ReturnErrors errors(job);
  if (r.new_rank == 0) {
    coordinate(job, survivors, marks, deadline);
  } else {
    check_in(job, survivors.front(), marks, deadline);
  }
  r.check_in_seconds = seconds_since(start);

  auto t = Clock::now();
  MPI_Group old_group = MPI_GROUP_NULL, survivor_group = MPI_GROUP_NULL;
  check(MPI_Comm_group(job, &old_group), "MPI_Comm_group");
  const int included = MPI_Group_incl(old_group, static_cast<int>(survivors.size()),
                                      survivors.data(), &survivor_group);
  MPI_Group_free(&old_group);
  check(included, "MPI_Group_incl");
  MPI_Comm created = MPI_COMM_NULL;
  const int rc = MPI_Comm_create_group(job, survivor_group, kCreateTag, &created);
  MPI_Group_free(&survivor_group);
  check(rc, "MPI_Comm_create_group");
  Communicator rebuilt = adopt(created);
  r.create_seconds = seconds_since(t);
  check(MPI_Comm_size(rebuilt.get(), &r.new_size), "MPI_Comm_size");

  // Freed, not disconnected: MPI_Comm_disconnect waits for a dead peer that is silent.
  check(MPI_Comm_free(&job), "MPI_Comm_free");
  errors.consumed();
  r.total_seconds = seconds_since(start);
  return hand_out(std::move(rebuilt));
}

}  // namespace bellows::runtime
