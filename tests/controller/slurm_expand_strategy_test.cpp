// The Slurm backend's expand strategy without Slurm: the choice from SchedulerParameters and
// PrologFlags, the time limit of a grant, and which Slurm job holds which node of a job that
// spans companion allocations (what a release does to each). The strategies against a real
// Slurm: slurm.run_slurm and slurm.companion.run_slurm.

#include "bellows/controller/slurm_expand_strategy.hpp"

#include <gtest/gtest.h>

namespace bellows::controller {
namespace {

using Nodes = std::vector<std::string>;

TEST(ExpandStrategy, NamesParseBack) {
  for (ExpandStrategy s : {ExpandStrategy::automatic, ExpandStrategy::merge, ExpandStrategy::companion}) {
    ExpandStrategy parsed = ExpandStrategy::merge;
    ASSERT_TRUE(parse_expand_strategy(to_string(s), parsed)) << to_string(s);
    EXPECT_EQ(parsed, s);
  }
  ExpandStrategy unchanged = ExpandStrategy::merge;
  EXPECT_FALSE(parse_expand_strategy("expand", unchanged));
  EXPECT_EQ(unchanged, ExpandStrategy::merge);
}

TEST(ExpandStrategy, AutomaticMergesWhereSlurmPermitsExpansion) {
  const auto choice =
      choose_expand_strategy(ExpandStrategy::automatic, "permit_job_expansion,batch_sched_delay=0", "");
  EXPECT_EQ(choice.strategy, ExpandStrategy::merge);
  EXPECT_EQ(choice.reason, "Slurm permits job expansion (SchedulerParameters=permit_job_expansion,"
                           "batch_sched_delay=0, PrologFlags=(none))");
}

TEST(ExpandStrategy, AutomaticSpansACompanionOnADefaultSlurm) {
  const auto choice = choose_expand_strategy(ExpandStrategy::automatic, "batch_sched_delay=0", "");
  EXPECT_EQ(choice.strategy, ExpandStrategy::companion);
  EXPECT_EQ(choice.reason, "Slurm does not permit job expansion (SchedulerParameters=batch_sched_delay=0, "
                           "PrologFlags=(none))");
  EXPECT_EQ(choose_expand_strategy(ExpandStrategy::automatic, "", "").strategy, ExpandStrategy::companion);
  // A longer name that merely starts with the option is not the option.
  EXPECT_EQ(choose_expand_strategy(ExpandStrategy::automatic, "permit_job_expansion_x", "").strategy,
            ExpandStrategy::companion);
}

TEST(ExpandStrategy, AutomaticSpansACompanionWhereJobsHaveAnExternStep) {
  const auto choice = choose_expand_strategy(ExpandStrategy::automatic, " permit_job_expansion", "Alloc,contain");
  EXPECT_EQ(choice.strategy, ExpandStrategy::companion);
  EXPECT_NE(choice.reason.find("extern step"), std::string::npos) << choice.reason;
}

TEST(ExpandStrategy, AForcedStrategyIsKeptAndSaysWhatSlurmWillAnswer) {
  const auto companion = choose_expand_strategy(ExpandStrategy::companion, "permit_job_expansion", "");
  EXPECT_EQ(companion.strategy, ExpandStrategy::companion);
  EXPECT_EQ(companion.reason, "forced (--expand-strategy companion)");
  const auto merge = choose_expand_strategy(ExpandStrategy::merge, "", "");
  EXPECT_EQ(merge.strategy, ExpandStrategy::merge);
  EXPECT_EQ(merge.reason, "forced (--expand-strategy merge); Slurm will refuse it: no permit_job_expansion "
                          "(SchedulerParameters=(none), PrologFlags=(none))");
  EXPECT_EQ(choose_expand_strategy(ExpandStrategy::merge, "permit_job_expansion", "").reason,
            "forced (--expand-strategy merge)");
}

TEST(GrantMinutes, TrimmedToWhatTheJobHasLeft) {
  const std::time_t now = 1'000'000;
  const auto unlimited = grant_minutes(std::nullopt, 0, now);
  EXPECT_TRUE(unlimited.status.ok());
  EXPECT_FALSE(unlimited.minutes.has_value());
  const auto left = grant_minutes(5, now + 4 * 60 + 59, now);
  ASSERT_TRUE(left.status.ok());
  EXPECT_EQ(left.minutes, 4u) << "whole minutes, rounded down: the grant ends before the job";
  EXPECT_EQ(grant_minutes(5, now + 60, now).minutes, 1u);
}

TEST(GrantMinutes, AJobInItsLastMinuteDoesNotGrow) {
  const std::time_t now = 1'000'000;
  const auto late = grant_minutes(5, now + 42, now);
  EXPECT_EQ(late.status.code, RmCode::denied);
  EXPECT_EQ(late.status.text, "the job ends in 42 s (its time limit): too late to grow");
  EXPECT_EQ(grant_minutes(5, now - 3, now).status.text, "the job ends in 0 s (its time limit): too late to grow");
}

TEST(Companion, NameAndComment) {
  EXPECT_EQ(companion_name("41"), "bellows-grow-41");
  EXPECT_EQ(companion_comment("41"), "bellows:companion-of:41");
  EXPECT_TRUE(companion_name("41").starts_with(kCompanionPrefix));
}

TEST(CompanionBook, KnowsWhichJobHoldsEachNode) {
  CompanionBook book;
  EXPECT_TRUE(book.empty());
  book.add(57, {"n3", "n4"});
  book.add(60, {"n2"});
  EXPECT_EQ(book.holder_of("n3"), 57u);
  EXPECT_EQ(book.holder_of("n2"), 60u);
  EXPECT_FALSE(book.holder_of("n1").has_value()) << "the job's own node";
  EXPECT_EQ(book.nodes(), (Nodes{"n3", "n4", "n2"}));
  EXPECT_EQ(book.companions(), (std::vector<std::uint32_t>{57, 60}));
  EXPECT_EQ(book.nodes_of(57), (Nodes{"n3", "n4"}));
  EXPECT_TRUE(book.nodes_of(99).empty());
}

TEST(CompanionBook, SplitsAReleaseByHolder) {
  CompanionBook book;
  book.add(57, {"n3", "n4"});
  book.add(60, {"n2"});
  const ReleaseSplit split = book.split({"n2", "n5", "n4"});
  EXPECT_EQ(split.own, (Nodes{"n5"}));
  ASSERT_EQ(split.companions.size(), 2u);
  EXPECT_EQ(split.companions[0].companion, 60u);
  EXPECT_EQ(split.companions[0].leaving, (Nodes{"n2"}));
  EXPECT_TRUE(split.companions[0].remaining.empty()) << "given back whole";
  EXPECT_EQ(split.companions[1].companion, 57u);
  EXPECT_EQ(split.companions[1].leaving, (Nodes{"n4"}));
  EXPECT_EQ(split.companions[1].remaining, (Nodes{"n3"})) << "shrunk to the node that stays";
}

TEST(CompanionBook, ForgetsNodesThatLeftAndEmptyCompanions) {
  CompanionBook book;
  book.add(57, {"n3", "n4"});
  book.add(60, {"n2"});
  book.remove_nodes({"n2", "n4"});
  EXPECT_EQ(book.companions(), (std::vector<std::uint32_t>{57}));
  EXPECT_EQ(book.nodes(), (Nodes{"n3"}));
  EXPECT_FALSE(book.holder_of("n2").has_value());
  book.remove(57);
  EXPECT_TRUE(book.empty());
}

}  // namespace
}  // namespace bellows::controller
