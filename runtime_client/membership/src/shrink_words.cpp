#include "shrink_words.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>

namespace bellows::runtime::membership_detail {
namespace {

/// Buffers MPI may still write or read: kept until the process exits.
struct KeptWordBuffers {
  std::vector<std::unique_ptr<int>> sent;
  std::vector<std::unique_ptr<std::vector<int>>> received;
};
KeptWordBuffers& kept_word_buffers() {
  static KeptWordBuffers kept;
  return kept;
}

/// Between two tests of the words: as the peer watch's pace (docs/recovery.md).
constexpr std::chrono::microseconds kWordPollPause{500};

std::string rank_list(const std::vector<int>& ranks) {
  std::string names;
  for (const int r : ranks) names += (names.empty() ? "" : ", ") + std::to_string(r);
  return "{" + names + "}";
}

}  // namespace

void tell_shrink_word(MPI_Comm comm, int rank, int size, bool passed) {
  auto& value = kept_word_buffers().sent.emplace_back(std::make_unique<int>(passed ? 1 : 0));
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    // A peer lost fails the send or never receives it: its receivers count it lost instead.
    if (MPI_Isend(value.get(), 1, MPI_INT, peer, kShrinkWordTag, comm, &request) == MPI_SUCCESS &&
        request != MPI_REQUEST_NULL) {
      MPI_Request_free(&request);
    }
  }
}

ShrinkWords::ShrinkWords(MPI_Comm comm, int rank, const std::vector<int>& stayers)
    : values_(std::make_unique<std::vector<int>>()) {
  for (const int r : stayers) {
    if (r != rank) words_.push_back(Word{r});
  }
  values_->assign(words_.size(), -1);
  for (std::size_t i = 0; i < words_.size(); ++i) {
    if (MPI_Irecv(&(*values_)[i], 1, MPI_INT, words_[i].from, kShrinkWordTag, comm, &words_[i].request) !=
        MPI_SUCCESS) {
      words_[i].request = MPI_REQUEST_NULL;
      words_[i].state = Word::State::lost;  // its peer is gone already
    }
  }
}

ShrinkWords::~ShrinkWords() {
  const bool pending = std::any_of(words_.begin(), words_.end(),
                                   [](const Word& w) { return w.request != MPI_REQUEST_NULL; });
  if (pending) kept_word_buffers().received.push_back(std::move(values_));
}

ShrinkConfirmationDecision ShrinkWords::settle(const ShrinkConfirmationFacts& own, const ShrinkLossWatch& watch,
                                               bool every_word) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (watch.poll) watch.poll();
    const std::vector<int> found = watch.lost();
    ShrinkConfirmationFacts facts = own;
    for (std::size_t i = 0; i < words_.size(); ++i) {
      Word& word = words_[i];
      if (word.state == Word::State::awaited) {
        int done = 0;
        MPI_Status status;
        if (MPI_Test(&word.request, &done, &status) != MPI_SUCCESS) {
          word.request = MPI_REQUEST_NULL;  // failed: MPI freed it
          word.state = Word::State::lost;
        } else if (done != 0) {
          word.state = (*values_)[i] != 0 ? Word::State::passed : Word::State::not_passed;
        } else if (std::binary_search(found.begin(), found.end(), word.from)) {
          word.state = Word::State::lost;  // its receive stays pending, left to MPI
        }
        if (word.state == Word::State::lost) lost_.insert(std::upper_bound(lost_.begin(), lost_.end(), word.from), word.from);
      }
      switch (word.state) {
        case Word::State::awaited:
          ++facts.stayers_unheard;
          break;
        case Word::State::passed:
          ++facts.stayers_passed;
          break;
        case Word::State::not_passed:
          ++facts.stayers_not_passed;
          break;
        case Word::State::lost:
          ++facts.stayers_lost_unheard;
          break;
      }
    }
    const ShrinkConfirmationDecision decision = confirm_or_give_up_shrink(facts);
    if (decision.action != ShrinkConfirmation::wait && (!every_word || facts.stayers_unheard == 0)) return decision;
    if (std::chrono::steady_clock::now() - start > kShrinkWordLimit) {
      std::vector<int> unheard;
      for (const Word& w : words_) {
        if (w.state == Word::State::awaited) unheard.push_back(w.from);
      }
      throw std::runtime_error("shrink: no word from ranks " + rank_list(unheard) + " that stay within " +
                               std::to_string(kShrinkWordLimit.count()) +
                               " s of the barrier that confirms the survivors' communicator, and none of them found "
                               "lost (" + decision.reason + ")");
    }
    std::this_thread::sleep_for(kWordPollPause);
  }
}

}  // namespace bellows::runtime::membership_detail
