// StealPolicy: when a rank asks for work, whom, how long it backs off, what a victim gives
// and where it forwards, without MPI or a clock. The random victims are the sequence the
// runtime drew before the policy was taken out of the communication engine (same seed,
// same rank, same draws).

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <set>
#include <vector>

#include "bellows/runtime/options.hpp"
#include "bellows/runtime/steal_policy.hpp"

using bellows::runtime::StealOptions;
using bellows::runtime::StealPolicy;
using bellows::runtime::VictimPolicy;
using std::chrono::microseconds;

namespace {

using Time = StealPolicy::Time;
using Forward = StealPolicy::Forward;

StealOptions steal_options(VictimPolicy policy = VictimPolicy::last_victim) {
  StealOptions o;
  o.enabled = true;
  o.policy = policy;
  return o;  // chunk 4, max_hops 2, thresholds 1 and 1, seed 1, backoff 50 to 2000 us
}

/// A rank that starves and may ask: nothing outstanding, roots queued, no ready task.
StealPolicy::ThiefView starving_view() {
  StealPolicy::ThiefView view;
  view.ready = 0;
  view.roots_queued = true;
  view.request_outstanding = false;
  view.iteration_over = false;
  return view;
}

std::vector<int> victims(StealPolicy& policy, int count) {
  std::vector<int> out;
  for (int i = 0; i < count; ++i) out.push_back(policy.choose_victim().value_or(-100));
  return out;
}

}  // namespace

// ---------------------------------------------------------------- starvation and giving

TEST(StealPolicy, StarvesBelowEitherThreshold) {
  StealOptions o = steal_options();
  EXPECT_TRUE(StealPolicy::starving(o, 0));
  EXPECT_FALSE(StealPolicy::starving(o, 1));

  o.device_threshold = 2;
  o.node_threshold = 5;
  EXPECT_TRUE(StealPolicy::starving(o, 4));  // the node starves, the device does not
  EXPECT_FALSE(StealPolicy::starving(o, 5));

  o.device_threshold = 6;
  EXPECT_TRUE(StealPolicy::starving(o, 5));  // the device starves, the node does not
  EXPECT_FALSE(StealPolicy::starving(o, 6));

  o.device_threshold = 0;
  o.node_threshold = 0;
  EXPECT_FALSE(StealPolicy::starving(o, 0));  // with both 0 a rank never starves
}

TEST(StealPolicy, VictimKeepsTheLargerThreshold) {
  StealOptions o = steal_options();
  o.device_threshold = 2;
  o.node_threshold = 3;
  EXPECT_EQ(StealPolicy::tasks_kept(o), 3U);
  EXPECT_FALSE(StealPolicy::has_tasks_to_spare(o, 3));
  EXPECT_TRUE(StealPolicy::has_tasks_to_spare(o, 4));

  o.node_threshold = 0;
  EXPECT_EQ(StealPolicy::tasks_kept(o), 2U);
  EXPECT_FALSE(StealPolicy::has_tasks_to_spare(o, 2));
  EXPECT_TRUE(StealPolicy::has_tasks_to_spare(o, 3));
}

TEST(StealPolicy, VictimGivesAtMostWantedAndNeverBelowItsThreshold) {
  StealOptions o = steal_options();
  o.device_threshold = 2;
  o.node_threshold = 1;
  EXPECT_EQ(StealPolicy::tasks_to_give(o, 10, 4), 4U);  // as many as wanted
  EXPECT_EQ(StealPolicy::tasks_to_give(o, 5, 4), 3U);   // 2 stay queued
  EXPECT_EQ(StealPolicy::tasks_to_give(o, 3, 4), 1U);
  EXPECT_EQ(StealPolicy::tasks_to_give(o, 2, 4), 0U);   // at the threshold: nothing
  EXPECT_EQ(StealPolicy::tasks_to_give(o, 1, 4), 0U);   // below it: nothing
  EXPECT_EQ(StealPolicy::tasks_to_give(o, 0, 4), 0U);
  EXPECT_EQ(StealPolicy::tasks_to_give(o, 10, 0), 0U);
  EXPECT_EQ(StealPolicy::tasks_to_give(o, 10, -3), 0U);  // a negative request asks for none

  o.device_threshold = 0;
  o.node_threshold = 0;
  EXPECT_EQ(StealPolicy::tasks_to_give(o, 3, 4), 3U);  // no threshold: everything queued
}

// ---------------------------------------------------------------- whether to ask

TEST(StealPolicy, AsksWhenStarvingWithRootsQueuedAndNothingOutstanding) {
  StealPolicy policy(steal_options(), 0, 4);
  EXPECT_EQ(policy.next_ask_at(), Time{0});
  EXPECT_TRUE(policy.should_ask(Time{0}, starving_view()));
  EXPECT_TRUE(policy.should_ask(Time{123456789}, starving_view()));
}

TEST(StealPolicy, NoRequestWhileOneIsOutstanding) {
  StealPolicy policy(steal_options(), 0, 4);
  auto view = starving_view();
  view.request_outstanding = true;
  EXPECT_FALSE(policy.should_ask(Time{1000}, view));
}

TEST(StealPolicy, NoRequestWhenNotStarving) {
  StealOptions o = steal_options();
  o.device_threshold = 2;
  o.node_threshold = 3;
  StealPolicy policy(o, 0, 4);
  auto view = starving_view();
  view.ready = 2;
  EXPECT_TRUE(policy.should_ask(Time{1000}, view));
  view.ready = 3;
  EXPECT_FALSE(policy.should_ask(Time{1000}, view));

  o.device_threshold = 0;
  o.node_threshold = 0;
  StealPolicy never(o, 0, 4);
  EXPECT_FALSE(never.should_ask(Time{1000}, starving_view()));
}

TEST(StealPolicy, NoRequestBeforeRootsAreQueuedOrAfterTheIteration) {
  StealPolicy policy(steal_options(), 0, 4);
  auto view = starving_view();
  view.roots_queued = false;
  EXPECT_FALSE(policy.should_ask(Time{1000}, view));
  view = starving_view();
  view.iteration_over = true;
  EXPECT_FALSE(policy.should_ask(Time{1000}, view));
}

TEST(StealPolicy, NoRequestBeforeTheBackoffRunsOut) {
  StealPolicy policy(steal_options(), 0, 4);
  const Time answered{std::chrono::milliseconds(5)};
  EXPECT_EQ(policy.request_answered(answered, 0), answered + microseconds(50));
  EXPECT_FALSE(policy.should_ask(answered, starving_view()));
  EXPECT_FALSE(policy.should_ask(answered + microseconds(50) - Time{1}, starving_view()));
  EXPECT_TRUE(policy.should_ask(answered + microseconds(50), starving_view()));
}

// ---------------------------------------------------------------- backoff

TEST(StealPolicy, BackoffDoublesFromMinToMaxOnEmptyAnswersAndEndsOnSuccess) {
  StealPolicy policy(steal_options(), 1, 4);
  EXPECT_EQ(policy.backoff_us(), 0);
  const std::vector<int> expected{50, 100, 200, 400, 800, 1600, 2000, 2000};
  Time now{std::chrono::seconds(1)};
  for (const int backoff : expected) {
    now += microseconds(10);
    EXPECT_EQ(policy.request_answered(now, 0), now + microseconds(backoff));
    EXPECT_EQ(policy.backoff_us(), backoff);
    EXPECT_EQ(policy.next_ask_at(), now + microseconds(backoff));
  }
  now += microseconds(10);
  EXPECT_EQ(policy.request_answered(now, 3), now);
  EXPECT_EQ(policy.backoff_us(), 0);
  EXPECT_TRUE(policy.should_ask(now, starving_view()));
  EXPECT_EQ(policy.request_answered(now, 0), now + microseconds(50));  // starts over at min
}

TEST(StealPolicy, BackoffFollowsTheOptions) {
  StealOptions o = steal_options();
  o.min_backoff_us = 7;
  o.max_backoff_us = 20;
  StealPolicy policy(o, 0, 2);
  std::vector<int> seen;
  for (int i = 0; i < 4; ++i) {
    policy.request_answered(Time{0}, 0);
    seen.push_back(policy.backoff_us());
  }
  EXPECT_EQ(seen, (std::vector<int>{7, 14, 20, 20}));
}

TEST(StealPolicy, ANewIterationForgetsTheBackoffButNotTheLastVictim) {
  StealPolicy policy(steal_options(), 0, 4);
  policy.request_answered(Time{1000}, 0);
  policy.reply_received(3, 1);  // a reply to the next request
  EXPECT_EQ(policy.backoff_us(), 50);
  EXPECT_EQ(policy.next_ask_at(), Time{1000} + microseconds(50));

  policy.start_iteration();
  EXPECT_EQ(policy.backoff_us(), 0);
  EXPECT_EQ(policy.next_ask_at(), Time{0});
  EXPECT_EQ(policy.last_victim(), 3);
  EXPECT_EQ(policy.request_answered(Time{2000}, 0), Time{2000} + microseconds(50));
}

// ---------------------------------------------------------------- whom to ask

TEST(StealPolicy, RandomVictimsAreTheRuntimesSequenceForTheSeed) {
  StealPolicy rank0(steal_options(), 0, 4);
  EXPECT_EQ(victims(rank0, 10), (std::vector<int>{2, 1, 1, 2, 2, 3, 2, 2, 2, 1}));

  StealPolicy rank2(steal_options(), 2, 8);
  EXPECT_EQ(victims(rank2, 10), (std::vector<int>{4, 6, 4, 7, 3, 0, 0, 3, 7, 6}));

  StealOptions seven = steal_options();
  seven.seed = 7;
  StealPolicy seeded(seven, 2, 8);
  EXPECT_EQ(victims(seeded, 10), (std::vector<int>{6, 3, 1, 3, 7, 0, 5, 6, 7, 4}));
}

TEST(StealPolicy, RandomVictimIsNeverSelfAndCoversEveryOtherRank) {
  StealPolicy policy(steal_options(VictimPolicy::random), 3, 6);
  std::set<int> seen;
  for (const int v : victims(policy, 600)) {
    EXPECT_NE(v, 3);
    seen.insert(v);
  }
  EXPECT_EQ(seen, (std::set<int>{0, 1, 2, 4, 5}));
}

TEST(StealPolicy, AsksTheLastSuccessfulVictimWithoutADraw) {
  StealPolicy policy(steal_options(), 0, 4);
  policy.reply_received(3, 2);
  policy.request_answered(Time{1000}, 2);
  EXPECT_EQ(policy.last_victim(), 3);
  EXPECT_EQ(victims(policy, 3), (std::vector<int>{3, 3, 3}));

  policy.request_answered(Time{2000}, 0);  // empty answer: back to random, the first draw
  EXPECT_EQ(policy.last_victim(), std::nullopt);
  EXPECT_EQ(victims(policy, 2), (std::vector<int>{2, 1}));
}

TEST(StealPolicy, AReplyWithoutTasksDoesNotChangeTheLastVictim) {
  StealPolicy policy(steal_options(), 0, 4);
  policy.reply_received(1, 0);
  EXPECT_EQ(policy.last_victim(), std::nullopt);
  policy.reply_received(2, 1);
  policy.reply_received(3, 0);  // a forward that found nothing more
  policy.request_answered(Time{0}, 1);
  EXPECT_EQ(policy.last_victim(), 2);
}

TEST(StealPolicy, TheLastRankToGiveBecomesTheLastVictim) {
  StealPolicy policy(steal_options(), 0, 4);
  policy.reply_received(1, 2);  // partial reply of the first victim
  policy.reply_received(3, 2);  // final reply of the victim it forwarded to
  policy.request_answered(Time{0}, 4);
  EXPECT_EQ(policy.last_victim(), 3);
}

TEST(StealPolicy, RandomPolicyIgnoresTheLastVictim) {
  StealPolicy policy(steal_options(VictimPolicy::random), 0, 4);
  policy.reply_received(3, 2);
  policy.request_answered(Time{0}, 2);
  EXPECT_EQ(policy.last_victim(), 3);  // remembered, not used
  EXPECT_EQ(victims(policy, 10), (std::vector<int>{2, 1, 1, 2, 2, 3, 2, 2, 2, 1}));
}

TEST(StealPolicy, TheFailedRequestForgetsTheLastVictim) {
  StealPolicy policy(steal_options(), 1, 4);
  policy.reply_received(2, 1);
  policy.request_answered(Time{0}, 1);
  EXPECT_EQ(policy.last_victim(), 2);
  policy.request_answered(Time{10}, 0);
  EXPECT_EQ(policy.last_victim(), std::nullopt);
}

// ---------------------------------------------------------------- forwarding

TEST(StealPolicy, NoForwardWhenTheVictimGaveAllThatWasWanted) {
  StealPolicy policy(steal_options(), 2, 8);
  EXPECT_EQ(policy.forward_to(5, 0, 4, 4), std::nullopt);
  EXPECT_EQ(policy.forward_to(5, 0, 3, 2), std::nullopt);
  // No draw was spent: the next victim is still the first of the sequence.
  EXPECT_EQ(policy.choose_victim(), 4);
}

TEST(StealPolicy, ForwardingStopsAtMaxHops) {
  StealOptions o = steal_options();
  o.max_hops = 2;
  StealPolicy policy(o, 2, 8);
  EXPECT_EQ(policy.forward_to(5, 0, 1, 4), (Forward{6, 3, 1}));
  EXPECT_EQ(policy.forward_to(5, 1, 0, 3), (Forward{6, 3, 2}));
  EXPECT_EQ(policy.forward_to(5, 2, 0, 3), std::nullopt);
  EXPECT_EQ(policy.forward_to(5, 3, 0, 3), std::nullopt);

  o.max_hops = 0;
  StealPolicy never(o, 2, 8);
  EXPECT_EQ(never.forward_to(5, 0, 0, 4), std::nullopt);
}

TEST(StealPolicy, ForwardsToARandomRankOtherThanSelfAndThief) {
  StealPolicy sequence(steal_options(), 2, 8);
  std::vector<int> first;
  for (int i = 0; i < 10; ++i) first.push_back(sequence.forward_to(5, 0, 0, 4)->victim);
  EXPECT_EQ(first, (std::vector<int>{6, 6, 4, 7, 7, 6, 1, 3, 6, 3}));

  StealPolicy policy(steal_options(VictimPolicy::random), 2, 8);
  std::set<int> seen;
  for (int i = 0; i < 800; ++i) {
    const auto f = policy.forward_to(5, 0, 1, 4);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->wanted, 3);
    EXPECT_EQ(f->hops, 1);
    seen.insert(f->victim);
  }
  EXPECT_EQ(seen, (std::set<int>{0, 1, 3, 4, 6, 7}));
}

TEST(StealPolicy, ForwardsToItsOwnLastVictimFirst) {
  StealPolicy policy(steal_options(), 2, 8);
  policy.reply_received(7, 1);
  policy.request_answered(Time{0}, 1);
  EXPECT_EQ(policy.forward_to(5, 0, 1, 4), (Forward{7, 3, 1}));
  EXPECT_EQ(policy.forward_to(5, 1, 0, 3), (Forward{7, 3, 2}));
  EXPECT_EQ(policy.choose_victim(), 7);

  // Its last victim is the thief: a random rank other than 2 and 7 (the first draw).
  EXPECT_EQ(policy.forward_to(7, 0, 0, 4), (Forward{5, 4, 1}));
}

TEST(StealPolicy, RandomPolicyForwardsAtRandomDespiteALastVictim) {
  StealPolicy policy(steal_options(VictimPolicy::random), 2, 8);
  policy.reply_received(7, 1);
  policy.request_answered(Time{0}, 1);
  EXPECT_EQ(policy.forward_to(5, 0, 0, 4), (Forward{6, 4, 1}));
}

TEST(StealPolicy, VictimChoicesAndForwardsDrawFromOneSequence) {
  StealPolicy policy(steal_options(), 2, 8);
  std::vector<int> drawn;
  for (int i = 0; i < 5; ++i) {
    drawn.push_back(policy.choose_victim().value_or(-1));
    drawn.push_back(policy.forward_to(5, 0, 0, 4).value_or(Forward{}).victim);
  }
  EXPECT_EQ(drawn, (std::vector<int>{4, 6, 4, 7, 3, 6, 0, 3, 7, 3}));
}

TEST(StealPolicy, SameSeedAndRankSameChoices) {
  StealPolicy a(steal_options(), 1, 16);
  StealPolicy b(steal_options(), 1, 16);
  StealPolicy other_rank(steal_options(), 2, 16);
  const auto from_a = victims(a, 50);
  EXPECT_EQ(from_a, victims(b, 50));
  EXPECT_NE(from_a, victims(other_rank, 50));
}

// ---------------------------------------------------------------- one or two ranks

TEST(StealPolicy, OneRankHasNoVictimAndNowhereToForward) {
  StealPolicy policy(steal_options(), 0, 1);
  EXPECT_EQ(policy.choose_victim(), std::nullopt);
  StealPolicy random_policy(steal_options(VictimPolicy::random), 0, 1);
  EXPECT_EQ(random_policy.choose_victim(), std::nullopt);
}

TEST(StealPolicy, TwoRanksAskEachOtherButNeverForward) {
  StealPolicy policy(steal_options(), 0, 2);
  EXPECT_EQ(victims(policy, 5), (std::vector<int>{1, 1, 1, 1, 1}));
  // A victim of two ranks has no third to forward to, whatever it remembers.
  StealPolicy victim(steal_options(), 1, 2);
  EXPECT_EQ(victim.forward_to(0, 0, 0, 4), std::nullopt);
  victim.reply_received(0, 2);
  victim.request_answered(Time{0}, 2);
  EXPECT_EQ(victim.forward_to(0, 0, 0, 4), std::nullopt);
}

// ---------------------------------------------------------------- a steal only when it pays

namespace {

using Gift = StealPolicy::GiftCandidate;
using GiftContext = StealPolicy::GiftContext;

/// `count` queued tasks of `run` seconds each, every input costing `fetch` to move.
std::vector<Gift> queue_of(std::size_t count, double run, double fetch, double back = 0.0) {
  std::vector<Gift> queue(count);
  for (auto& g : queue) {
    g.run_seconds = run;
    g.fetch_seconds = fetch;
    g.return_seconds = back;
  }
  return queue;
}

GiftContext loads(double victim, double thief, double reply = 10e-6) {
  GiftContext c;
  c.lanes = 1;
  c.victim_load_seconds = victim;
  c.thief_load_seconds = thief;
  c.reply_seconds = reply;
  return c;
}

}  // namespace

TEST(StealPolicy, RefusesAStealWhoseTransferExceedsTheGain) {
  // GPU-speed tiles: 0.3 ms to run, 1.5 ms to fetch; 4 queued, so the last would start
  // 0.9 ms from now on the victim, while the thief would finish it after 1.8 ms.
  const auto queue = queue_of(4, 0.3e-3, 1.5e-3, 0.5e-3);
  EXPECT_TRUE(StealPolicy::choose_gifts(steal_options(), queue, loads(1.2e-3, 0.0), 4).empty());
}

TEST(StealPolicy, GivesWhenTheThiefFinishesBeforeTheVictimWouldStart) {
  // Slow tiles (10 GFLOP/s): 30 ms to run, 0.05 ms to fetch, 20 queued.
  const auto queue = queue_of(20, 30e-3, 50e-6, 20e-6);
  const auto gifts = StealPolicy::choose_gifts(steal_options(), queue, loads(0.6, 0.0), 4);
  // From the back of the queue (lowest priority) first.
  EXPECT_EQ(gifts, (std::vector<std::size_t>{19, 18, 17, 16}));
}

TEST(StealPolicy, RefusesWhenTheThiefHasAsMuchWorkLeft) {
  // Balanced ranks: every task would finish sooner on the thief, but the thief has as
  // much work of its own left: the gift would only make it the later of the two.
  const auto queue = queue_of(20, 30e-3, 50e-6, 20e-6);
  EXPECT_TRUE(StealPolicy::choose_gifts(steal_options(), queue, loads(0.6, 0.6), 4).empty());
  // Less than one task's worth of difference is not enough either.
  EXPECT_TRUE(StealPolicy::choose_gifts(steal_options(), queue, loads(0.6, 0.58), 4).empty());
  // With a clear difference some go, until the loads would cross.
  const auto gifts = StealPolicy::choose_gifts(steal_options(), queue, loads(0.6, 0.45), 4);
  EXPECT_EQ(gifts.size(), 2U);
}

TEST(StealPolicy, StopsGivingWhereTheThiefWouldFinishLate) {
  // 6 queued tasks of 1 ms; fetching one costs 0.9 ms. The thief's k-th gift finishes
  // after k * 1.9 ms (+ reply); the task at position p would start after p ms here.
  const auto queue = queue_of(6, 1e-3, 0.9e-3);
  const auto gifts = StealPolicy::choose_gifts(steal_options(), queue, loads(1.0, 0.0), 4);
  // Positions 5 and 4 (start at 5 and 4 ms) go: the thief is done at 1.91 and 3.81 ms.
  // Then position 3 would start at 3 ms and be done on the thief at 5.71 ms: no.
  EXPECT_EQ(gifts, (std::vector<std::size_t>{5, 4}));
}

TEST(StealPolicy, RefusesATaskThatMovesLessComputeThanTransfer) {
  // GPU speed with a deep queue: 40 tasks of 0.3 ms, the last would start here after
  // 11.7 ms and the thief would be done with it after 0.66 ms. But fetching and returning
  // it costs 0.35 ms, more than the 0.3 ms of compute it takes off the victim.
  const auto queue = queue_of(40, 0.3e-3, 0.25e-3, 0.1e-3);
  EXPECT_TRUE(StealPolicy::choose_gifts(steal_options(), queue, loads(12e-3, 0.0), 4).empty());
  // Without the return it moves more compute (0.3 ms) than transfer (0.25 ms): it goes.
  const auto lighter = queue_of(40, 0.3e-3, 0.25e-3);
  EXPECT_EQ(StealPolicy::choose_gifts(steal_options(), lighter, loads(12e-3, 0.0), 1),
            (std::vector<std::size_t>{39}));
}

TEST(StealPolicy, MovesWeighFullyUnlessTheVictimWaitedLessThanTheAverageRank) {
  // Before the first iteration ends, and for any rank that waited for tiles at least as
  // much as the average rank, a gift's moves count in full.
  EXPECT_DOUBLE_EQ(StealPolicy::move_weight(0.0, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(StealPolicy::move_weight(0.8, 0.8), 1.0);  // balanced job
  EXPECT_DOUBLE_EQ(StealPolicy::move_weight(0.5, 0.6), 1.0);  // a rank below the average
  EXPECT_DOUBLE_EQ(StealPolicy::move_weight(1.0, 1.0), 1.0);  // no rank waited at all
  // An overloaded rank: it computed 90 % of the iteration and waited 10 %, where the
  // ranks waited 30 % on average: its moves weigh a third.
  EXPECT_NEAR(StealPolicy::move_weight(0.9, 0.7), 1.0 / 3.0, 1e-12);
  EXPECT_DOUBLE_EQ(StealPolicy::move_weight(1.0, 0.7), 0.0);  // it never waited
  // Shares outside [0, 1] are clamped.
  EXPECT_DOUBLE_EQ(StealPolicy::move_weight(1.5, -0.2), 0.0);
}

TEST(StealPolicy, AnOverloadedVictimGivesTasksThatMoveLessComputeThanTransfer) {
  // 100 GFLOP/s: 40 tasks of 0.34 ms, each moving 0.6 ms of tiles; the thief is idle.
  const auto queue = queue_of(40, 0.34e-3, 0.4e-3, 0.2e-3);
  auto context = loads(14e-3, 0.0);
  // As a balanced rank (computing as much as the average), rule 0 refuses every task.
  context.compute_share = 0.7;
  context.mean_compute_share = 0.7;
  EXPECT_TRUE(StealPolicy::choose_gifts(steal_options(), queue, context, 2).empty());
  // As the overloaded rank of a skewed job, the moves weigh a third (0.2 ms): two go.
  context.compute_share = 0.9;
  EXPECT_EQ(StealPolicy::choose_gifts(steal_options(), queue, context, 2),
            (std::vector<std::size_t>{39, 38}));
}

TEST(StealPolicy, AChainHeadAtTheBackStartsAfterTheWorkThatOutranksIt) {
  // 2 chain heads queued, 1 ms each, moving 0.9 ms of tiles: by the queue alone the head at
  // the back starts after 1 ms, before the thief would be done with it (1.91 ms): it stays.
  auto queue = queue_of(2, 1e-3, 0.5e-3, 0.4e-3);
  auto context = loads(20e-3, 0.0);
  context.compute_share = 0.9;  // an overloaded victim: moves weigh a third
  context.mean_compute_share = 0.7;
  EXPECT_TRUE(StealPolicy::choose_gifts(steal_options(), queue, context, 1).empty());
  // Each head leads a chain of 10 tasks that outrank it once ready (depth-first). The
  // victim reaches the head at the back after the chain ahead of it, 10 ms, of which the
  // 9 ms not yet queued count for two thirds: after 7 ms.
  queue[1].outranking_seconds = 10e-3;
  EXPECT_EQ(StealPolicy::choose_gifts(steal_options(), queue, context, 1),
            (std::vector<std::size_t>{1}));
  // A victim no busier than the average rank waits for its tiles as much as the others:
  // what is not queued may not be ready in time, and only the queue counts.
  context.compute_share = 0.7;
  EXPECT_TRUE(StealPolicy::choose_gifts(steal_options(), queue, context, 1).empty());
}

TEST(StealPolicy, ScalesTheThiefsRunTimeOnlyWhenTheSpeedsDifferClearly) {
  // Unknown on either side: as on the victim.
  EXPECT_DOUBLE_EQ(StealPolicy::thief_run_seconds(1e-3, 0.0, 2e-3), 1e-3);
  EXPECT_DOUBLE_EQ(StealPolicy::thief_run_seconds(1e-3, 6e-3, 0.0), 1e-3);
  // Within kSameSpeedWithin (2x) either way: the same speed.
  EXPECT_DOUBLE_EQ(StealPolicy::thief_run_seconds(1e-3, 3.4e-3, 2e-3), 1e-3);
  EXPECT_DOUBLE_EQ(StealPolicy::thief_run_seconds(1e-3, 1e-3, 2e-3), 1e-3);
  // A thief slowed 3x takes 3x as long; one 3x faster a third.
  EXPECT_DOUBLE_EQ(StealPolicy::thief_run_seconds(1e-3, 6e-3, 2e-3), 3e-3);
  EXPECT_DOUBLE_EQ(StealPolicy::thief_run_seconds(3e-3, 2e-3, 6e-3), 1e-3);
}

TEST(StealPolicy, ASlowThiefGetsOnlyWhatItStillFinishesFirst) {
  // 10 GFLOP/s tasks of 30 ms with cheap moves: an idle thief of the same speed gets 4.
  auto queue = queue_of(20, 30e-3, 50e-6, 20e-6);
  EXPECT_EQ(StealPolicy::choose_gifts(steal_options(), queue, loads(0.6, 0.0), 4).size(), 4U);
  // A thief 3x slower (a noisy neighbour) runs each in 90 ms: 4 of them would end it
  // 0.36 s from now, after the victim's 0.6 - 0.12 s. Still 4 go, but a victim with
  // 0.2 s left gives it only what it finishes before the victim would: 1 (90 ms against
  // the 0.17 s left after it), not 2 (0.18 s against 0.14 s).
  for (auto& g : queue) g.thief_run_seconds = 90e-3;
  EXPECT_EQ(StealPolicy::choose_gifts(steal_options(), queue, loads(0.6, 0.0), 4).size(), 4U);
  EXPECT_EQ(StealPolicy::choose_gifts(steal_options(), queue, loads(0.2, 0.0), 4).size(), 1U);
  // At the thief's own speed, 0.2 s left gives 3 (up to 90 ms of the thief's against 0.11 s).
  for (auto& g : queue) g.thief_run_seconds = -1.0;
  EXPECT_EQ(StealPolicy::choose_gifts(steal_options(), queue, loads(0.2, 0.0), 4).size(), 3U);
}

TEST(StealPolicy, AFastThiefGetsMoreOfASlowedVictimsWork) {
  // A slowed victim: 6 tasks of 90 ms; fetching one costs 50 ms. At the victim's speed the
  // thief is done with its k-th gift after k * 140 ms: 2 go (positions 5 and 4, which would
  // start here after 450 and 360 ms). At a third of the time, 80 ms each, 3 do.
  auto queue = queue_of(6, 90e-3, 50e-3);
  const auto same = StealPolicy::choose_gifts(steal_options(), queue, loads(0.54, 0.0), 4).size();
  for (auto& g : queue) g.thief_run_seconds = 30e-3;
  const auto faster = StealPolicy::choose_gifts(steal_options(), queue, loads(0.54, 0.0), 4).size();
  EXPECT_EQ(same, 2U);
  EXPECT_EQ(faster, 3U);
}

TEST(StealPolicy, PrefersTasksWhoseInputsTheThiefHolds) {
  auto queue = queue_of(10, 10e-3, 2e-3);
  queue[3].fetch_seconds = 0.0;  // the thief holds its inputs
  queue[6].fetch_seconds = 0.1e-3;
  const auto gifts = StealPolicy::choose_gifts(steal_options(), queue, loads(1.0, 0.0), 3);
  ASSERT_EQ(gifts.size(), 3U);
  EXPECT_EQ(gifts[0], 3U);
  EXPECT_EQ(gifts[1], 6U);
  EXPECT_EQ(gifts[2], 9U);
}

TEST(StealPolicy, NeverGivesUnmovableTasksNorBelowTheThreshold) {
  auto queue = queue_of(5, 10e-3, 1e-6);
  queue[4].movable = false;
  StealOptions o = steal_options();
  o.device_threshold = 3;  // keeps 3 of 5: two may go
  const auto gifts = StealPolicy::choose_gifts(o, queue, loads(1.0, 0.0), 4);
  // Position 3 starts here after 30 ms, on the thief it is done after 10 ms. Position 2
  // would then be done there after 20 ms, when it starts here: no gain, it stays.
  EXPECT_EQ(gifts, (std::vector<std::size_t>{3}));
}

TEST(StealPolicy, WithoutTheCostRuleAnySpareTaskGoesFromTheBack) {
  StealOptions o = steal_options();
  o.cost_rule = false;
  const auto queue = queue_of(6, 0.3e-3, 5e-3);  // the rule would refuse every one
  EXPECT_EQ(StealPolicy::choose_gifts(o, queue, loads(0.0, 1.0), 3),
            (std::vector<std::size_t>{5, 4, 3}));
}

TEST(StealPolicy, AsksOnlyWhenIdleLongerThanARoundTrip) {
  StealPolicy policy(steal_options(), 0, 4);
  auto view = starving_view();
  view.round_trip_seconds = 100e-6;
  view.expected_idle_seconds = 30e-6;  // a tile arrives before an answer would
  EXPECT_FALSE(policy.should_ask(Time{0}, view));
  view.expected_idle_seconds = 500e-6;
  EXPECT_TRUE(policy.should_ask(Time{0}, view));
  StealOptions o = steal_options();
  o.cost_rule = false;
  StealPolicy eager(o, 0, 4);
  view.expected_idle_seconds = 30e-6;
  EXPECT_TRUE(eager.should_ask(Time{0}, view));
}

TEST(StealPolicy, AsksOnlyWhenATaskRunsLongerThanItsTileMoves) {
  StealPolicy policy(steal_options(), 0, 4);
  auto view = starving_view();
  view.round_trip_seconds = 100e-6;
  view.task_seconds = 0.3e-3;  // GPU speed: a tile task of 0.3 ms ...
  view.tile_move_seconds = 0.5e-3;  // ... whose tile takes 0.5 ms to move: nothing would go
  EXPECT_FALSE(StealPolicy::asking_pays(policy.options(), view));
  EXPECT_FALSE(policy.should_ask(Time{0}, view));
  view.task_seconds = 30e-3;  // 10 GFLOP/s: the task outweighs its tile
  EXPECT_TRUE(StealPolicy::asking_pays(policy.options(), view));
  EXPECT_TRUE(policy.should_ask(Time{0}, view));
  // Before its first task ran (task_seconds unbounded) a rank asks: e.g. a new rank.
  EXPECT_TRUE(StealPolicy::asking_pays(policy.options(), starving_view()));
  StealOptions o = steal_options();
  o.cost_rule = false;
  view.task_seconds = 0.3e-3;
  EXPECT_TRUE(StealPolicy::asking_pays(o, view));
  EXPECT_TRUE(StealPolicy(o, 0, 4).should_ask(Time{0}, view));
}

TEST(StealPolicy, AsksForOneTaskWhereATaskRunsNoLongerThanItsChunksMoves) {
  StealOptions o = steal_options();
  o.chunk = 4;
  auto view = starving_view();
  view.tile_move_seconds = 35e-6;  // a 512 KiB tile
  view.task_seconds = 3.4e-3;      // 10 GFLOP/s: the chunk
  EXPECT_EQ(StealPolicy::tasks_to_ask(o, view), 4);
  view.task_seconds = 0.13e-3;     // under four moves: one
  EXPECT_EQ(StealPolicy::tasks_to_ask(o, view), 1);
  view.task_seconds = 34e-6;       // 1000 GFLOP/s: one
  EXPECT_EQ(StealPolicy::tasks_to_ask(o, view), 1);
  // Before its first task ran, or before any tile came, a rank asks for the chunk.
  EXPECT_EQ(StealPolicy::tasks_to_ask(o, starving_view()), 4);
  o.cost_rule = false;
  EXPECT_EQ(StealPolicy::tasks_to_ask(o, view), 4);
}

TEST(StealPolicy, AThiefWeighsItsTileMovesAsTheBusiestVictimWould) {
  StealPolicy policy(steal_options(), 0, 4);
  auto view = starving_view();
  view.round_trip_seconds = 100e-6;
  view.task_seconds = 0.34e-3;
  view.tile_move_seconds = 0.5e-3;
  EXPECT_FALSE(StealPolicy::asking_pays(policy.options(), view));
  // The busiest rank computed 90 % of the last iteration, the average 70 %: its gifts
  // weigh their moves at a third, and a task can outweigh its tile there.
  view.busiest_compute_share = 0.9;
  view.mean_compute_share = 0.7;
  EXPECT_TRUE(StealPolicy::asking_pays(policy.options(), view));
  EXPECT_TRUE(policy.should_ask(Time{0}, view));
}

TEST(StealPolicy, UnderTheCostRuleABackoffIsNeverShorterThanARoundTrip) {
  StealPolicy policy(steal_options(), 0, 4);  // backoff 50 to 2000 us
  const Time now{1'000'000};
  // Round trips of 100 us: the backoff starts at one round trip and doubles to 2000 us.
  for (const int backoff : {100, 200, 400, 800, 1600, 2000, 2000}) {
    EXPECT_EQ(policy.request_answered(now, 0, microseconds(100)), now + microseconds(backoff));
  }
  // Round trips of 3 ms (a loaded host): never sooner than one round trip.
  policy.request_answered(now, 1, microseconds(3000));
  EXPECT_EQ(policy.request_answered(now, 0, microseconds(3000)), now + microseconds(3000));
  EXPECT_EQ(policy.request_answered(now, 0, microseconds(3000)), now + microseconds(3000));
  // Without the rule the round trip is not consulted.
  StealOptions o = steal_options();
  o.cost_rule = false;
  StealPolicy eager(o, 0, 4);
  EXPECT_EQ(eager.request_answered(now, 0, microseconds(3000)), now + microseconds(50));
}

TEST(StealPolicy, RequestsThatBringLessThanTheyCostStretchTheBackoff) {
  StealPolicy policy(steal_options(), 0, 4);  // backoff 50 to 2000 us, a visit costs 40 us
  const Time now{1'000'000};
  const auto trip = microseconds(100);
  // Tasks of 60 us at GPU speed. Before any answer a request is expected to bring one
  // task, 60 us, from one victim, 40 us.
  EXPECT_DOUBLE_EQ(policy.tasks_per_request(), 1.0);
  EXPECT_DOUBLE_EQ(policy.request_cost_seconds(), 40e-6);
  EXPECT_EQ(policy.request_answered(now, 0, trip, 60e-6, 1), now + microseconds(100));
  EXPECT_DOUBLE_EQ(policy.tasks_per_request(), 0.875);  // 1 + (0 - 1) / 8
  // Empty answers pull the mean down until a request brings less than it costs:
  // 0.766 tasks (45.9 us), then 0.670 (40.2 us), then 0.586 tasks, 35.2 us < 40 us.
  EXPECT_EQ(policy.request_answered(now, 0, trip, 60e-6, 1), now + microseconds(200));
  EXPECT_EQ(policy.request_answered(now, 0, trip, 60e-6, 1), now + microseconds(400));
  const double yield = policy.tasks_per_request() * 7.0 / 8.0 * 60e-6;
  EXPECT_EQ(policy.request_answered(now, 0, trip, 60e-6, 1),
            now + microseconds(static_cast<int>(800 * (40e-6 / yield))));
  EXPECT_DOUBLE_EQ(policy.request_yield_seconds(60e-6), yield);
  // Long tasks (10 GFLOP/s) pay for the same requests: the backoff is the plain doubling.
  EXPECT_EQ(policy.request_answered(now, 0, trip, 4e-3, 1), now + microseconds(1600));
  // The stretch stops at kMaxBackoffStretch: tasks of 1 ns bring nothing.
  EXPECT_EQ(policy.request_answered(now, 0, trip, 1e-9, 1),
            now + microseconds(static_cast<int>(2000 * StealPolicy::kMaxBackoffStretch)));
  EXPECT_EQ(policy.backoff_us(), static_cast<int>(2000 * StealPolicy::kMaxBackoffStretch));
  // Served requests raise the mean again and end the backoff.
  for (int i = 0; i < 16; ++i) EXPECT_EQ(policy.request_answered(now, 4, trip, 60e-6, 1), now);
  EXPECT_GT(policy.tasks_per_request(), 3.5);
  EXPECT_EQ(policy.request_answered(now, 0, trip, 60e-6, 1), now + microseconds(100));
}

TEST(StealPolicy, ForwardedRequestsCostEveryVictimTheyVisit) {
  StealPolicy policy(steal_options(), 0, 4);
  // Requests forwarded twice visit 3 victims: the mean moves from 1 towards 3.
  policy.request_answered(Time{0}, 4, microseconds(100), 60e-6, 3);
  EXPECT_DOUBLE_EQ(policy.request_cost_seconds(), (1.0 + 2.0 / 8.0) * 40e-6);
  StealOptions o = steal_options();
  o.request_visit_cost_us = 0;  // requests cost nothing: never stretched
  StealPolicy free_requests(o, 0, 4);
  for (const int backoff : {100, 200, 400, 800, 1600, 2000}) {
    EXPECT_EQ(free_requests.request_answered(Time{0}, 0, microseconds(100), 1e-9, 3),
              Time{0} + microseconds(backoff));
  }
}

TEST(StealPolicy, WithoutTheCostRuleTheYieldDoesNotStretchTheBackoff) {
  StealOptions o = steal_options();
  o.cost_rule = false;
  StealPolicy policy(o, 0, 4);
  const Time now{0};
  for (const int backoff : {50, 100, 200, 400, 800, 1600, 2000, 2000}) {
    EXPECT_EQ(policy.request_answered(now, 0, microseconds(100), 1e-9), now + microseconds(backoff));
  }
}

TEST(StealPolicy, AStretchedBackoffRunsOnIntoTheNextIteration) {
  StealPolicy policy(steal_options(), 0, 4);
  const Time now{1'000'000};
  // Tasks of 1 ns: a request brings nothing, the backoff is stretched 64 times.
  const Time next = policy.request_answered(now, 0, microseconds(100), 1e-9, 1);
  EXPECT_EQ(next, now + microseconds(static_cast<int>(100 * StealPolicy::kMaxBackoffStretch)));
  policy.start_iteration();
  EXPECT_EQ(policy.next_ask_at(), next);
  // Requests that pay (tasks of 10 ms) leave an unstretched backoff, forgotten as before.
  policy.request_answered(now, 0, microseconds(100), 10e-3, 1);
  policy.start_iteration();
  EXPECT_EQ(policy.next_ask_at(), Time{0});
  EXPECT_EQ(policy.backoff_us(), 0);
}
