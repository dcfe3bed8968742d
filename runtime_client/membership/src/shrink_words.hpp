#pragma once
// The words of a watched shrink's confirmation (Membership::shrink with a ShrinkLossWatch).
// Each rank that stays tells every other rank, before the barrier over every rank that
// confirms the survivors' communicator, whether it passed the barrier that ends the survivors'
// first checkpoint (the shrink's point of no return). A rank whose confirming barrier failed
// (or that did not post it) learns from them what every rank alive does about the shrink
// (confirm_or_give_up_shrink, resize_loss.hpp): a rank lost inside that barrier may let some
// ranks pass it and not others, and those that passed have gone on. Internal to libbellows.

#include <mpi.h>

#include <chrono>
#include <memory>
#include <vector>

#include "bellows/runtime/membership.hpp"
#include "bellows/runtime/resize_loss.hpp"

namespace bellows::runtime::membership_detail {

/// Tag of the words on the job's communicator.
constexpr int kShrinkWordTag = 0x5349;
/// How long a rank whose confirming barrier failed waits for the word of a rank that stays
/// that is not found lost: the controller's default heartbeat timeout and as long again, as
/// for a loss's verdict (docs/recovery.md).
constexpr std::chrono::seconds kShrinkWordLimit{10};

/// Sends this rank's word (it passed the survivors' checkpoint barrier, or not) to every other
/// rank of `comm`. Never waits: the sends are freed, their buffer kept until the process exits.
void tell_shrink_word(MPI_Comm comm, int rank, int size, bool passed);

/// The words this rank receives: one from every rank that stays but itself.
class ShrinkWords {
 public:
  /// Posts the receives on `comm` (errors returned) from each of `stayers` but `rank`.
  ShrinkWords(MPI_Comm comm, int rank, const std::vector<int>& stayers);
  /// Receives still pending (from ranks lost) are left to MPI with their buffers.
  ~ShrinkWords();
  ShrinkWords(const ShrinkWords&) = delete;
  ShrinkWords& operator=(const ShrinkWords&) = delete;

  /// Waits, asleep between tests, until `confirm_or_give_up_shrink` decides with what this
  /// rank knows (`own`: its own barriers) and the words come so far, a rank that stays found
  /// lost by `watch` or by its receive failing counted as lost. With `every_word`, until each
  /// word came or its rank was found lost (the barrier passed: every word was sent). Throws
  /// std::runtime_error once kShrinkWordLimit passed with a word missing from a rank not
  /// found lost.
  ShrinkConfirmationDecision settle(const ShrinkConfirmationFacts& own, const ShrinkLossWatch& watch, bool every_word);
  /// Ranks that stay found lost while the words were awaited (ranks of `comm`, ascending).
  [[nodiscard]] const std::vector<int>& lost() const noexcept { return lost_; }

 private:
  struct Word {
    int from = -1;
    MPI_Request request = MPI_REQUEST_NULL;
    enum class State { awaited, passed, not_passed, lost } state = State::awaited;
  };
  std::vector<Word> words_;
  std::unique_ptr<std::vector<int>> values_;  // one per word, written by MPI
  std::vector<int> lost_;
};

}  // namespace bellows::runtime::membership_detail
