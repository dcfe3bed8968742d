// What bellowsd makes of a Slurm job once it stopped without its controller: scontrol's one-line
// records, and whether the job's batch host failed (then the daemon cancels the job).
#include <bellows/daemon/slurm_orphan.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>

namespace {

using bellows::daemon::companion_left_behind;
using bellows::daemon::judge_orphaned_job;
using bellows::daemon::parse_scontrol_record;
using bellows::daemon::parse_slurmd_timeout;
using bellows::daemon::ScontrolRecord;
using bellows::daemon::start_takeover_if_first_node_lost;

/// Sets an environment variable for one test and puts back what it was.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const std::string& value) : name_(name) {
    if (const char* was = std::getenv(name)) was_ = was;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedVariable() {
    if (was_)
      ::setenv(name_, was_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  const char* name_;
  std::optional<std::string> was_;
};

// As `scontrol show job -o 23` printed it for a job whose batch host n1 was removed (shortened).
constexpr const char* kJob =
    "JobId=23 JobName=e2e-first UserId=root(0) JobState=RUNNING Reason=None Dependency=(null) "
    "Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 NodeList=n[2-3] BatchHost=n1 "
    "NumNodes=2 Comment=bellows:/w/runs/23 StdOut=/w/job.out Power=\n";

TEST(SlurmOrphan, ParsesTheKeyValueWordsOfARecord) {
  const ScontrolRecord job = parse_scontrol_record(kJob);
  EXPECT_EQ(job.at("JobId"), "23");
  EXPECT_EQ(job.at("JobState"), "RUNNING");
  EXPECT_EQ(job.at("BatchHost"), "n1");
  EXPECT_EQ(job.at("NodeList"), "n[2-3]");
  EXPECT_EQ(job.at("Comment"), "bellows:/w/runs/23");
  EXPECT_EQ(job.at("StdOut"), "/w/job.out");
  EXPECT_EQ(job.at("Power"), "");
  EXPECT_TRUE(parse_scontrol_record("").empty());
  EXPECT_TRUE(parse_scontrol_record("slurm_load_jobs error: Invalid job id specified\n").empty());
}

TEST(SlurmOrphan, CancelsARunningBatchJobWhoseBatchHostIsDown) {
  const auto verdict = judge_orphaned_job("23", parse_scontrol_record(kJob),
                                          parse_scontrol_record("NodeName=n1 Arch=x86_64 State=DOWN+NOT_RESPONDING"));
  EXPECT_TRUE(verdict.cancel);
  EXPECT_EQ(verdict.why, "the job's first node n1 (its batch host, where `bellows run` ran) is DOWN+NOT_RESPONDING: "
                         "Slurm took it out of job 23 (no-kill), and the batch script and the job's controller died "
                         "with it; nothing else would end the job before its time limit");
}

TEST(SlurmOrphan, LeavesAJobWhoseBatchHostLivesOrThatIsNoRunningBatchJob) {
  const ScontrolRecord job = parse_scontrol_record(kJob);
  auto verdict = judge_orphaned_job("23", job, parse_scontrol_record("NodeName=n1 State=ALLOCATED"));
  EXPECT_FALSE(verdict.cancel);
  EXPECT_EQ(verdict.why, "the batch host n1 of job 23 is ALLOCATED");
  verdict = judge_orphaned_job("23", job, {});
  EXPECT_FALSE(verdict.cancel);
  EXPECT_EQ(verdict.why, "the batch host n1 of job 23 is unknown");
  verdict = judge_orphaned_job("23", parse_scontrol_record("JobId=23 JobState=COMPLETING BatchFlag=1 BatchHost=n1"),
                               parse_scontrol_record("NodeName=n1 State=DOWN"));
  EXPECT_FALSE(verdict.cancel);
  EXPECT_EQ(verdict.why, "job 23 is COMPLETING");
  // A companion allocation: no batch script.
  verdict = judge_orphaned_job("24", parse_scontrol_record("JobId=24 JobState=RUNNING BatchFlag=0 BatchHost=n2"),
                               parse_scontrol_record("NodeName=n2 State=DOWN"));
  EXPECT_FALSE(verdict.cancel);
  EXPECT_EQ(verdict.why, "job 24 is not a batch job");
  verdict = judge_orphaned_job("25", parse_scontrol_record("JobId=25 JobState=RUNNING BatchFlag=1 BatchHost=(null)"), {});
  EXPECT_FALSE(verdict.cancel);
  EXPECT_EQ(verdict.why, "job 25 names no batch host");
  verdict = judge_orphaned_job("26", {}, {});
  EXPECT_FALSE(verdict.cancel);
  EXPECT_EQ(verdict.why, "job 26 is unknown");
}

TEST(SlurmOrphan, ACompanionIsLeftBehindOnceItsJobNoLongerRunsOrWaits) {
  for (const char* state : {"NODE_FAIL", "CANCELLED", "COMPLETED", "COMPLETING", "FAILED", "TIMEOUT", "PENDING",
                            "REQUEUED", ""})
    EXPECT_TRUE(companion_left_behind(state)) << state;
  for (const char* state : {"RUNNING", "SUSPENDED", "RESIZING"})
    EXPECT_FALSE(companion_left_behind(state)) << state;
}

// SlurmdTimeout out of `scontrol show config` (the grace a daemon keeps its ranks for a takeover).
TEST(SlurmOrphan, ReadsSlurmdTimeoutFromTheConfiguration) {
  const char* config =
      "Configuration data as of 2026-11-28T17:00:00\n"
      "SlurmdSpoolDir          = /w/spool/slurmd-%n\n"
      "SlurmdTimeout           = 300 sec\n"
      "SlurmdUser              = root(0)\n";
  EXPECT_EQ(parse_slurmd_timeout(config), 300.0);
  EXPECT_EQ(parse_slurmd_timeout("SlurmdTimeout = 20 sec\n"), 20.0);
  EXPECT_EQ(parse_slurmd_timeout("SlurmdSpoolDir = /x\nSlurmdUser = root(0)\n"), std::nullopt);
  EXPECT_EQ(parse_slurmd_timeout("SlurmdTimeout = (null)\n"), std::nullopt);
  EXPECT_EQ(parse_slurmd_timeout("MySlurmdTimeout = 5 sec\n"), std::nullopt);
  EXPECT_EQ(parse_slurmd_timeout(""), std::nullopt);
}

// A daemon that stops while it asks a slurmctld that does not answer (its node cut off): the
// question ends at once, not after its 5 s bound, and the scontrol it ran is gone.
TEST(SlurmOrphan, AQuestionToSlurmctldEndsWhenTheDaemonStops) {
  char pattern[] = "/tmp/bellows-orphan-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::filesystem::path dir = pattern;
  const std::filesystem::path pid_file = dir / "scontrol.pid";
  {
    std::ofstream fake(dir / "scontrol");
    fake << "#!/bin/sh\necho $$ > " << pid_file.string() << "\nexec sleep 30\n";
  }
  std::filesystem::permissions(dir / "scontrol", std::filesystem::perms::owner_all);
  const char* path = std::getenv("PATH");
  const ScopedVariable search("PATH", dir.string() + ":" + (path != nullptr ? path : "/usr/bin:/bin"));
  const ScopedVariable job("SLURM_JOB_ID", "7");
  const ScopedVariable served("BELLOWS_SLURM_JOB", "7");

  // As in bellowsd, whose threads all block its stop signals (it waits for them).
  sigset_t stop_signals;
  ::sigemptyset(&stop_signals);
  ::sigaddset(&stop_signals, SIGTERM);
  ::sigaddset(&stop_signals, SIGINT);
  sigset_t was;
  ::pthread_sigmask(SIG_BLOCK, &stop_signals, &was);
  std::stop_source stop;
  std::jthread stopper([&stop] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop.request_stop();
  });
  const auto began = std::chrono::steady_clock::now();
  const auto attempt = start_takeover_if_first_node_lost("n2", std::chrono::seconds(5), stop.get_token());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  ::pthread_sigmask(SIG_SETMASK, &was, nullptr);
  EXPECT_LT(seconds, 1.5) << "the question ran to its bound";
  EXPECT_GE(seconds, 0.25);
  EXPECT_FALSE(attempt.settled);
  EXPECT_EQ(attempt.said, "no answer from slurmctld about job 7");
  EXPECT_EQ(attempt.slurmctld_said, nullptr);
  int pid = 0;
  std::ifstream(pid_file) >> pid;
  ASSERT_GT(pid, 0) << "the fake scontrol did not run";
  EXPECT_EQ(::kill(pid, 0), -1) << "scontrol (pid " << pid << ") still runs";
  EXPECT_EQ(errno, ESRCH);
  std::filesystem::remove_all(dir);
}

}  // namespace
