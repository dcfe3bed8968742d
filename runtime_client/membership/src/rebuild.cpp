// rebuild_without: the survivors' communicator after ranks died (rebuild.hpp says which MPICH
// behaviour each step is built on).

#include "bellows/runtime/rebuild.hpp"

#include "bellows/runtime/loss_notices.hpp"
#include "bellows/runtime/peer_connections.hpp"
#include "bellows/runtime/survivors.hpp"
#include "cancelled_requests.hpp"
#include "membership_support.hpp"
#include "proc_failed.hpp"
#include "rank_set_text.hpp"

#include <string>
#include <thread>
#include <vector>

namespace bellows::runtime {

namespace {

using namespace membership_detail;
using Deadline = std::chrono::steady_clock::time_point;

/// The tags of one rebuild. A rebuild that failed may leave messages behind (a late survivor's
/// check-in, the go of a create that failed); rebuild_after_loss's next try names more dead
/// ranks, so tags that step with the agreed dead count keep them from matching that try's
/// receives. rebuild_without() called directly uses step 0: survivors that name different
/// sets must meet on the same tags, so that the first survivor can say so.
struct RebuildTags {
  int check_in, verdict, create;
};
RebuildTags tags_for(std::size_t step) {
  const int base = 0x4250 + 4 * static_cast<int>(step % 2048);
  return {base, base + 1, base + 2};
}

/// The first survivor's answer to the others.
enum Verdict : int { kGo = 1, kOtherDeadSet = 2, kGaveUp = 3, kSurvivorLost = 4 };

void pause() { std::this_thread::sleep_for(std::chrono::microseconds(200)); }

enum class Completion { done, peer_lost, timed_out };

/// Tests `request` until it completes, fails because its peer died (MPI freed it), or the
/// deadline passes, sleeping between tests. Another failure throws MpiError.
Completion complete_by(MPI_Request& request, Deadline deadline) {
  for (;;) {
    int done = 0;
    const int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      if (peer_failed(rc)) {
        request = MPI_REQUEST_NULL;
        return Completion::peer_lost;
      }
      check(rc, "MPI_Test");
    }
    if (done) return Completion::done;
    if (std::chrono::steady_clock::now() >= deadline) return Completion::timed_out;
    pause();
  }
}

/// Lets go of a request that did not complete in time: cancels it and gives it a moment to
/// finish; a request that still has not is freed (MPI completes or drops it later). Never waits
/// on the peer.
void abandon(MPI_Request& request) noexcept {
  (void)cancel_request(request, std::chrono::milliseconds(100));
}

/// Per old rank: 1 when dead. What the survivors compare.
std::vector<int> dead_marks(int size, std::span<const int> dead) {
  std::vector<int> marks(static_cast<std::size_t>(size), 0);
  for (const int rank : dead) marks[static_cast<std::size_t>(rank)] = 1;
  return marks;
}

std::string marked_text(const std::vector<int>& marks) {
  std::vector<int> ranks;
  for (std::size_t r = 0; r < marks.size(); ++r) {
    if (marks[r] != 0) ranks.push_back(static_cast<int>(r));
  }
  return rank_set_text(ranks);
}

/// Sends `verdict` to each of `to` and waits for the sends until the deadline (small messages:
/// they complete locally); the ones still pending then, or failed, are let go.
void send_verdicts(MPI_Comm job, const std::vector<int>& to, int verdict, int tag, Deadline deadline) {
  std::vector<MPI_Request> sends(to.size(), MPI_REQUEST_NULL);
  for (std::size_t i = 0; i < to.size(); ++i) {
    if (MPI_Isend(&verdict, 1, MPI_INT, to[i], tag, job, &sends[i]) != MPI_SUCCESS) {
      sends[i] = MPI_REQUEST_NULL;  // that survivor died too: its own failure tells the others
    }
  }
  for (MPI_Request& send : sends) {
    if (send != MPI_REQUEST_NULL && complete_by(send, deadline) == Completion::timed_out) abandon(send);
  }
}

/// The first survivor: collects every other survivor's dead set, then answers all of them.
void coordinate(MPI_Comm job, const std::vector<int>& survivors, const std::vector<int>& marks,
                const RebuildTags& tags, Deadline deadline) {
  const int size = static_cast<int>(marks.size());
  const std::size_t others = survivors.size() - 1;
  std::vector<std::vector<int>> theirs(others, std::vector<int>(marks.size(), 0));
  std::vector<MPI_Request> receives(others, MPI_REQUEST_NULL);
  for (std::size_t i = 0; i < others; ++i) {
    check(MPI_Irecv(theirs[i].data(), size, MPI_INT, survivors[i + 1], tags.check_in, job,
                    &receives[i]),
          "MPI_Irecv");
  }
  std::vector<int> checked_in, missing, lost, alive;
  for (std::size_t i = 0; i < others; ++i) {
    // Past the deadline each receive is still tested once: one that arrived counts.
    const Completion completion = complete_by(receives[i], deadline);
    if (completion == Completion::done) {
      checked_in.push_back(survivors[i + 1]);
    } else if (completion == Completion::peer_lost) {
      lost.push_back(survivors[i + 1]);
      continue;
    } else {
      abandon(receives[i]);
      missing.push_back(survivors[i + 1]);
    }
    alive.push_back(survivors[i + 1]);
  }
  const Deadline answer_by = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  if (!lost.empty()) {
    // Those still to check in get the answer too: their check-in is left unread, under tags
    // the next try does not use.
    send_verdicts(job, alive, kSurvivorLost, tags.verdict, answer_by);
    throw LostDuringRebuild("rebuild_without: survivors (old ranks) " + rank_set_text(lost) +
                            " were lost during the check-in; old rank " + std::to_string(survivors.front()) +
                            " of " + std::to_string(size) + " gave up, dead set " + marked_text(marks));
  }
  if (!missing.empty()) {
    send_verdicts(job, checked_in, kGaveUp, tags.verdict, answer_by);
    throw RebuildError("rebuild_without: survivors (old ranks) " + rank_set_text(missing) +
                       " did not check in before the deadline; old rank " +
                       std::to_string(survivors.front()) + " of " + std::to_string(size) +
                       " gave up, dead set " + marked_text(marks));
  }
  for (std::size_t i = 0; i < others; ++i) {
    if (theirs[i] != marks) {
      send_verdicts(job, checked_in, kOtherDeadSet, tags.verdict, answer_by);
      throw RebuildError("rebuild_without: old rank " + std::to_string(survivors[i + 1]) +
                         " named dead ranks " + marked_text(theirs[i]) + ", old rank " +
                         std::to_string(survivors.front()) + " " + marked_text(marks));
    }
  }
  send_verdicts(job, checked_in, kGo, tags.verdict, deadline);
}

/// Any other survivor: checks in with the first survivor and waits for its answer.
void check_in(MPI_Comm job, int first, const std::vector<int>& marks, const RebuildTags& tags,
              Deadline deadline) {
  const int size = static_cast<int>(marks.size());
  MPI_Request send = MPI_REQUEST_NULL, receive = MPI_REQUEST_NULL;
  int verdict = 0;
  check(MPI_Irecv(&verdict, 1, MPI_INT, first, tags.verdict, job, &receive), "MPI_Irecv");
  if (MPI_Isend(marks.data(), size, MPI_INT, first, tags.check_in, job, &send) != MPI_SUCCESS) {
    send = MPI_REQUEST_NULL;  // the first survivor died: the receive below fails too
  }
  const Completion answered = complete_by(receive, deadline);
  if (send != MPI_REQUEST_NULL &&
      complete_by(send, answered == Completion::done ? Deadline::max() : deadline) != Completion::done) {
    abandon(send);
  }
  if (answered == Completion::peer_lost) {
    throw LostDuringRebuild("rebuild_without: the first survivor (old rank " + std::to_string(first) +
                            ") was lost during the check-in; dead set " + marked_text(marks));
  }
  if (answered == Completion::timed_out) {
    abandon(receive);
    throw RebuildError("rebuild_without: no answer from the first survivor (old rank " +
                       std::to_string(first) + ") before the deadline; dead set " +
                       marked_text(marks));
  }
  if (verdict == kSurvivorLost) {
    throw LostDuringRebuild("rebuild_without: the first survivor (old rank " + std::to_string(first) +
                            ") found survivors lost during the check-in; dead set " + marked_text(marks));
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

std::vector<MPI_Comm>& kept_communicators() {
  static std::vector<MPI_Comm> kept;  // until the process exits
  return kept;
}

/// A survivor that dies during MPI_Comm_create_group, or right after it, can leave some
/// survivors with the new communicator and others with a failed create, who agree again on
/// the old one; those with it would wait there for good. So the survivors confirm the new
/// communicator with a barrier over it while watching each member (a zero-byte receive from
/// each, on a tag nobody sends on, fails once that member is dead): false when a member was
/// found lost; RebuildError when the deadline passes first.
bool confirmed(MPI_Comm created, Deadline deadline) {
  constexpr int kConfirmWatchTag = 32201;
  int size = 0, rank = -1;
  check(MPI_Comm_size(created, &size), "MPI_Comm_size");
  check(MPI_Comm_rank(created, &rank), "MPI_Comm_rank");
  static char sink = 0;  // what a watch receive would write: nobody sends
  std::vector<MPI_Request> watch(static_cast<std::size_t>(size), MPI_REQUEST_NULL);
  bool lost = false;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    if (MPI_Irecv(&sink, 1, MPI_CHAR, peer, kConfirmWatchTag, created, &watch[static_cast<std::size_t>(peer)]) !=
        MPI_SUCCESS) {
      watch[static_cast<std::size_t>(peer)] = MPI_REQUEST_NULL;
      lost = true;
    }
  }
  MPI_Request barrier = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(created, &barrier) != MPI_SUCCESS) lost = true;
  bool done = false;
  while (!lost && !done) {
    int flag = 0;
    if (MPI_Test(&barrier, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) lost = true;
    done = flag != 0;
    if (done && !lost) break;  // every member took part: a loss now is for the next step to find
    for (MPI_Request& request : watch) {
      if (request == MPI_REQUEST_NULL) continue;
      int arrived = 0;
      if (MPI_Test(&request, &arrived, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        request = MPI_REQUEST_NULL;  // that member died: MPI freed the request
        lost = true;
      }
    }
    if (!lost && !done) {
      if (std::chrono::steady_clock::now() >= deadline) {
        (void)cancel_requests(watch);  // nothing is ever sent to `sink`
        throw RebuildError("rebuild_without: the survivors did not all confirm the rebuilt communicator "
                           "before the deadline");
      }
      pause();
    }
  }
  (void)cancel_requests(watch);
  // A barrier left unfinished is left to MPI (a collective's request may be neither freed nor
  // cancelled); it has no buffer.
  return !lost;
}

}  // namespace

namespace {

/// rebuild_without() but for freeing `job`: the caller's to free or keep.
Communicator rebuild_keeping(MPI_Comm job, std::span<const int> dead, Deadline deadline, RebuildReport* report,
                             std::size_t tag_step);

}  // namespace

MPI_Comm rebuild_without(MPI_Comm job, std::span<const int> dead, Deadline deadline,
                         RebuildReport* report) {
  const auto start = Clock::now();
  Communicator rebuilt = rebuild_keeping(job, dead, deadline, report, 0);
  // Freed, not disconnected: MPI_Comm_disconnect waits for a dead peer that is silent.
  check(MPI_Comm_free(&job), "MPI_Comm_free");
  if (report != nullptr) report->total_seconds = seconds_since(start);
  return hand_out(std::move(rebuilt));
}

namespace {

Communicator rebuild_keeping(MPI_Comm job, std::span<const int> dead, Deadline deadline,
                             RebuildReport* report, std::size_t tag_step) {
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
                                ") is in the dead set " + rank_set_text(std::vector<int>(dead.begin(), dead.end())) +
                                "; only survivors call it");
  }
  const std::vector<int> marks = dead_marks(r.old_size, dead);

  const RebuildTags tags = tags_for(tag_step);
  ReturnErrors errors(job);
  if (r.new_rank == 0) {
    coordinate(job, survivors, marks, tags, deadline);
  } else {
    check_in(job, survivors.front(), marks, tags, deadline);
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
  const int rc = MPI_Comm_create_group(job, survivor_group, tags.create, &created);
  MPI_Group_free(&survivor_group);
  if (rc != MPI_SUCCESS && peer_failed(rc)) {
    throw LostDuringRebuild("rebuild_without: a survivor was lost during MPI_Comm_create_group (old rank " +
                            std::to_string(r.old_rank) + " of " + std::to_string(r.old_size) + ", dead set " +
                            marked_text(marks) + ")");
  }
  check(rc, "MPI_Comm_create_group");
  Communicator rebuilt = adopt(created);
  r.create_seconds = seconds_since(t);
  check(MPI_Comm_size(rebuilt.get(), &r.new_size), "MPI_Comm_size");
  if (!confirmed(rebuilt.get(), deadline)) {
    // Given up, not freed: messages of the confirmation may still arrive on it.
    kept_communicators().push_back(rebuilt.release());
    throw LostDuringRebuild("rebuild_without: a survivor was lost while the survivors confirmed the rebuilt "
                            "communicator (old rank " + std::to_string(r.old_rank) + " of " +
                            std::to_string(r.old_size) + ", dead set " + marked_text(marks) + ")");
  }
  r.total_seconds = seconds_since(start);
  return rebuilt;
}

}  // namespace

MPI_Comm rebuild_after_loss(MPI_Comm job, std::span<const int> seen, Deadline deadline,
                            std::vector<int>& lost, int* attempts, RebuildReport* report) {
  std::vector<int> known(seen.begin(), seen.end());
  std::string previous_failure;
  for (int attempt = 1;; ++attempt) {
    if (attempts != nullptr) *attempts = attempt;
    lost = agree_on_lost(job, known, deadline);
    if (!previous_failure.empty() && lost.size() <= known.size()) {
      // The tries' tags step with the dead count: the same set again cannot be rebuilt safely.
      throw RebuildError(previous_failure + "; agreeing again found no further loss (" + rank_set_text(lost) + ")");
    }
    try {
      MPI_Comm survivors = hand_out(rebuild_keeping(job, lost, deadline, report, lost.size()));
      loss_notices().renumber_without(lost);  // the notices named the old numbering
      // A node the control plane named lost may be cut off rather than dead: nothing of it
      // closes its connections, and MPI_Finalize would wait for them (peer_connections.hpp).
      const ShutConnections shut = shut_down_connections_to(loss_notices().nodes_lost());
      if (report != nullptr) report->connections_shut_down = shut.sockets;
      return survivors;
    } catch (const LostDuringRebuild& e) {
      if (std::chrono::steady_clock::now() >= deadline) {
        throw RebuildError(std::string(e.what()) + "; no time left to agree again");
      }
      previous_failure = e.what();
      known = lost;  // the next agreement finds who died during this try
    }
  }
}

}  // namespace bellows::runtime
