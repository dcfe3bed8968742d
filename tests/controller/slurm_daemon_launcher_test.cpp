// SlurmDaemonLauncher with a stand-in srun (a shell script): the command line it runs for a
// node, the job's stale sizes left out of srun's environment, and stop() ending srun (SIGINT,
// which srun forwards to bellowsd) or cancelling it (SIGTERM) when that is ignored. The launcher against a real Slurm: slurm.run_slurm.

#include "bellows/controller/slurm_daemon_launcher.hpp"

#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace bellows::controller {
namespace {

namespace fs = std::filesystem;

class SlurmDaemonLauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/bellows-srun-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// A stand-in srun that writes its arguments and environment next to it, then runs `tail`.
  fs::path fake_srun(const std::string& tail) {
    const fs::path path = dir_ / "srun";
    std::ofstream(path) << "#!/bin/sh\n"
                        << "printf '%s\\n' \"$@\" > " << (dir_ / "args").string() << "\n"
                        << "env > " << (dir_ / "env").string() << "\n"
                        << tail << "\n";
    fs::permissions(path, fs::perms::owner_all);
    return path;
  }

  std::string read(const std::string& name, std::chrono::seconds wait = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (!fs::exists(dir_ / name) || fs::file_size(dir_ / name) == 0) {
      if (std::chrono::steady_clock::now() > deadline) return {};
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(dir_ / name);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }

  SlurmDaemonLauncher::Options options(const fs::path& srun) const {
    SlurmDaemonLauncher::Options o;
    o.srun = srun;
    o.job = "41";
    o.bellowsd = "/opt/bellows/bin/bellowsd";
    o.job_dir = dir_ / "job";
    o.stop_grace = std::chrono::milliseconds(500);
    return o;
  }

  fs::path dir_;
};

TEST_F(SlurmDaemonLauncherTest, StartsTheDaemonAsAStepOnTheNode) {
  ::setenv("SLURM_NNODES", "1", 1);
  ::setenv("SLURM_JOB_NODELIST", "n1", 1);
  ::setenv("SLURM_JOB_ID", "41", 1);
  SlurmDaemonLauncher launcher(options(fake_srun("exec sleep 30")));
  ASSERT_TRUE(launcher.launch("n3", "41").ok());
  EXPECT_NE(launcher.pid_of("n3"), 0);
  EXPECT_FALSE(launcher.launch("n3", "41").ok()) << "a second daemon on the same node";
  const std::string job_dir = (dir_ / "job").string();
  EXPECT_EQ(read("args"), "--jobid=41\n--overlap\n-N1\n-n1\n-w\nn3\n--quiet\n--disable-status\n"
                          "--job-name=bellowsd\n--kill-on-bad-exit=1\n/opt/bellows/bin/bellowsd\n"
                          "--tmpdir\n" + job_dir + "/nodes/n3/pmix\n--uri-file\n" + job_dir +
                          "/nodes/n3/uri\n--node-name\nn3\n--job-dir\n" + job_dir +
                          "\n--heartbeat-timeout\n5\n");
  const std::string env = read("env");
  EXPECT_EQ(env.find("SLURM_NNODES="), std::string::npos) << env;
  EXPECT_EQ(env.find("SLURM_JOB_NODELIST="), std::string::npos) << env;
  EXPECT_NE(env.find("SLURM_JOB_ID=41"), std::string::npos) << env;
  EXPECT_TRUE(fs::is_directory(dir_ / "job" / "nodes" / "n3"));
  const auto began = std::chrono::steady_clock::now();
  EXPECT_TRUE(launcher.stop("n3").ok());
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::milliseconds(400));
  EXPECT_EQ(launcher.pid_of("n3"), 0);
  EXPECT_FALSE(launcher.stop("n3").ok()) << "no daemon runs any more";
  ::unsetenv("SLURM_NNODES");
  ::unsetenv("SLURM_JOB_NODELIST");
  ::unsetenv("SLURM_JOB_ID");
}

TEST_F(SlurmDaemonLauncherTest, ADaemonOnACompanionsNodeRunsAsAStepOfTheCompanion) {
  auto o = options(fake_srun("exec sleep 30"));
  o.slurm_job_of = [](const std::string& node) { return node == "n3" || node == "n4" ? std::string("57") : std::string(); };
  SlurmDaemonLauncher launcher(o);
  EXPECT_EQ(launcher.slurm_job("n1"), "41");
  EXPECT_EQ(launcher.slurm_job("n3"), "57");
  EXPECT_EQ(launcher.command("n1")[1], "--jobid=41");
  const auto command = launcher.command("n4");
  EXPECT_EQ(command[1], "--jobid=57");
  EXPECT_EQ(std::vector<std::string>(command.begin() + 2, command.begin() + 7),
            (std::vector<std::string>{"--overlap", "-N1", "-n1", "-w", "n4"}));
  ASSERT_TRUE(launcher.launch("n3", "41").ok());
  const std::string args = read("args");
  EXPECT_EQ(args.rfind("--jobid=57\n--overlap\n-N1\n-n1\n-w\nn3\n", 0), 0u) << args;
  EXPECT_TRUE(launcher.stop("n3").ok());
}

// The job's recovery.heartbeat_timeout reaches each daemon in seconds, without trailing zeros.
TEST_F(SlurmDaemonLauncherTest, PassesTheHeartbeatTimeoutInSeconds) {
  const auto last_two = [](const std::vector<std::string>& command) {
    return std::vector<std::string>(command.end() - 2, command.end());
  };
  auto o = options(fake_srun("exec sleep 30"));
  o.heartbeat_timeout = std::chrono::milliseconds(2000);
  EXPECT_EQ(last_two(SlurmDaemonLauncher(o).command("n2")),
            (std::vector<std::string>{"--heartbeat-timeout", "2"}));
  o.heartbeat_timeout = std::chrono::milliseconds(2500);
  EXPECT_EQ(last_two(SlurmDaemonLauncher(o).command("n2")),
            (std::vector<std::string>{"--heartbeat-timeout", "2.5"}));
  o.heartbeat_timeout = std::chrono::milliseconds(750);
  EXPECT_EQ(last_two(SlurmDaemonLauncher(o).command("n2")),
            (std::vector<std::string>{"--heartbeat-timeout", "0.75"}));
  o.heartbeat_timeout = std::chrono::milliseconds(60'005);
  EXPECT_EQ(last_two(SlurmDaemonLauncher(o).command("n2")),
            (std::vector<std::string>{"--heartbeat-timeout", "60.005"}));
}

TEST_F(SlurmDaemonLauncherTest, CancelsAStepThatIgnoresSigint) {
  SlurmDaemonLauncher launcher(options(fake_srun("trap '' INT; while :; do sleep 0.05; done")));
  ASSERT_TRUE(launcher.launch("n2", "41").ok());
  ASSERT_FALSE(read("env").empty());
  const pid_t pid = launcher.pid_of("n2");
  const auto stopped = launcher.stop("n2");
  EXPECT_FALSE(stopped.ok());
  EXPECT_NE(stopped.text.find("did not stop within 500 ms of SIGINT: its step was cancelled"), std::string::npos) << stopped.text;
  EXPECT_NE(::kill(pid, 0), 0) << "the srun is gone and reaped";
}

TEST_F(SlurmDaemonLauncherTest, AMissingSrunIsReported) {
  SlurmDaemonLauncher launcher(options(dir_ / "no-such-srun"));
  const auto started = launcher.launch("n1", "41");
  EXPECT_FALSE(started.ok());
  EXPECT_NE(started.text.find("cannot start"), std::string::npos) << started.text;
}

}  // namespace
}  // namespace bellows::controller
