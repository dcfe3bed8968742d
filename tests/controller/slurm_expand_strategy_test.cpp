// The Slurm backend's expand strategy without Slurm: the choice from SchedulerParameters and
// PrologFlags, the time limit of a grant, and which Slurm job holds which node of a job that
// spans companion allocations (what a release does to each), and the check of a taken-over
// job's record against what Slurm says. The strategies against a real Slurm: slurm.run_slurm
// and slurm.companion.run_slurm; a takeover: slurm.attach and slurm.companion.attach.

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

TEST(ExpandStrategy, TheGrowthIsDescribedWithItsReason) {
  EXPECT_EQ(describe_growth(choose_expand_strategy(ExpandStrategy::companion, "permit_job_expansion", "")),
            "companion allocations it spans (bellows-grow-JOBID): forced (--expand-strategy companion)");
  EXPECT_EQ(describe_growth({ExpandStrategy::merge, "why"}), "merging helper jobs into it (same job id): why");
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

// A job on n1 (its own) grown by two companions: 43 holds n2, 44 holds n3 and n4.
const std::vector<CompanionAllocation> kCompanions = {{"43", {"n2"}}, {"44", {"n3", "n4"}}};
const Nodes kJobNodes = {"n1", "n2", "n3", "n4"};

std::vector<SlurmJobView> slurm_now() {
  return {{"41", "RUNNING", "bellows:/home/u/.bellows/jobs/41", {"n1"}, "n1"},
          {"43", "RUNNING", "bellows:companion-of:41", {"n2"}, ""},
          {"44", "RUNNING", "bellows:companion-of:41", {"n3", "n4"}, ""}};
}

TEST(SlurmTakeover, RebuildsTheCompanionBookFromTheRecord) {
  const SlurmTakeover t = check_slurm_takeover("41", kJobNodes, kCompanions, slurm_now());
  ASSERT_TRUE(t.status.ok()) << t.status.text;
  EXPECT_EQ(t.companions.companions(), (std::vector<std::uint32_t>{43, 44}));
  EXPECT_EQ(t.companions.holder_of("n2"), 43u);
  EXPECT_EQ(t.companions.nodes_of(44), (Nodes{"n3", "n4"}));
  EXPECT_EQ(t.companions.holder_of("n1"), std::nullopt);
}

TEST(SlurmTakeover, AMergedJobNeedsEveryNodeInTheJobItself) {
  std::vector<SlurmJobView> merged = {{"41", "RUNNING", "bellows:/j/41", {"n1", "n2", "n3"}, "n1"}};
  const SlurmTakeover ok = check_slurm_takeover("41", {"n1", "n3", "n2"}, {}, merged);
  ASSERT_TRUE(ok.status.ok()) << ok.status.text;
  EXPECT_TRUE(ok.companions.empty());
  merged[0].nodes = {"n1", "n2"};
  const SlurmTakeover lost = check_slurm_takeover("41", {"n1", "n3", "n2"}, {}, merged);
  EXPECT_EQ(lost.status.code, RmCode::denied);
  EXPECT_EQ(lost.status.text, "n3, a node of job 41 in its record, is no longer the job's: Slurm gives job 41 n1,n2");
}

TEST(SlurmTakeover, AFirstNodeThatWasTheBatchHostAndLeftTheJobIsLostNotRefused) {
  // n1 failed: Slurm took it out of the no-kill job, which names it as its batch host still.
  std::vector<SlurmJobView> views = {{"41", "RUNNING", "bellows:/j/41", {"n2", "n3"}, "n1"}};
  const SlurmTakeover t = check_slurm_takeover("41", {"n1", "n3", "n2"}, {}, views);
  ASSERT_TRUE(t.status.ok()) << t.status.text;
  EXPECT_EQ(t.first_node_lost, "n1");
  // Only the first node: another node gone is refused as before.
  views[0].nodes = {"n2"};
  EXPECT_EQ(check_slurm_takeover("41", {"n1", "n3", "n2"}, {}, views).status.text,
            "n3, a node of job 41 in its record, is no longer the job's: Slurm gives job 41 n2");
  // Only the batch host: a first node that is not is refused.
  views[0] = {"41", "RUNNING", "bellows:/j/41", {"n2", "n3"}, "n2"};
  EXPECT_EQ(check_slurm_takeover("41", {"n1", "n3", "n2"}, {}, views).status.text,
            "n1, a node of job 41 in its record, is no longer the job's: Slurm gives job 41 n2,n3");
  // A first node the job still holds is not lost.
  views[0] = {"41", "RUNNING", "bellows:/j/41", {"n1", "n2", "n3"}, "n1"};
  const SlurmTakeover kept = check_slurm_takeover("41", {"n1", "n3", "n2"}, {}, views);
  ASSERT_TRUE(kept.status.ok()) << kept.status.text;
  EXPECT_EQ(kept.first_node_lost, "");
}

TEST(SlurmTakeover, RefusesAJobThatNoLongerRuns) {
  auto views = slurm_now();
  views[0].state = "COMPLETED";
  EXPECT_EQ(check_slurm_takeover("41", kJobNodes, kCompanions, views).status.text,
            "Slurm job 41 is COMPLETED: nothing of it runs to take over");
  views.erase(views.begin());
  EXPECT_EQ(check_slurm_takeover("41", kJobNodes, kCompanions, views).status.text,
            "slurmctld does not know Slurm job 41 (any more): nothing to take over");
}

TEST(SlurmTakeover, RefusesACompanionNoLongerRunning) {
  auto views = slurm_now();
  views[2].state = "CANCELLED";
  const SlurmTakeover t = check_slurm_takeover("41", kJobNodes, kCompanions, views);
  EXPECT_EQ(t.status.code, RmCode::denied);
  EXPECT_EQ(t.status.text,
            "companion job 44 of job 41 (holding n3,n4) is CANCELLED: its nodes are no longer the job's");
  views.pop_back();
  EXPECT_EQ(check_slurm_takeover("41", kJobNodes, kCompanions, views).status.text,
            "companion job 44 of job 41 (holding n3,n4) is unknown to slurmctld: its nodes are no longer the job's");
}

TEST(SlurmTakeover, RefusesANodeSlurmNoLongerGivesTheCompanion) {
  auto views = slurm_now();
  views[2].nodes = {"n4"};  // n3 went DOWN and Slurm took it out of the companion (no-kill)
  EXPECT_EQ(check_slurm_takeover("41", kJobNodes, kCompanions, views).status.text,
            "n3, a node of job 41 held by its companion job 44, is no longer the companion's: Slurm gives job 44 n4");
}

TEST(SlurmTakeover, RefusesAJobThatIsNoCompanionOfTheJob) {
  auto views = slurm_now();
  views[1].comment = "bellows:companion-of:40";
  EXPECT_EQ(check_slurm_takeover("41", kJobNodes, kCompanions, views).status.text,
            "Slurm job 43 is no companion of job 41 (its comment is 'bellows:companion-of:40', expected "
            "'bellows:companion-of:41')");
}

}  // namespace
}  // namespace bellows::controller
