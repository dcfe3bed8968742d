// `bellows doctor`'s diagnosis on canned facts: each check's verdict and its text, for a
// cluster that can run elastic jobs and for each way one cannot.

#include "doctor.hpp"

#include <gtest/gtest.h>

namespace bellows::cli {
namespace {

const char* kGoodConfig = R"(Configuration data as of 2026-11-24T16:20:00
AccountingStorageType   = accounting_storage/slurmdbd
AuthInfo                = socket=/tmp/s/munge.socket.2
AuthType                = auth/munge
ClusterName             = bellows
PlugStackConfig         = /etc/slurm/plugstack.conf
PrologFlags             = (null)
SchedulerParameters     = permit_job_expansion,batch_sched_delay=0
SelectType              = select/linear
SlurmctldHost[0]        = vm(127.0.0.1)
SlurmdTimeout           = 300 sec
SLURM_VERSION           = 22.05.8
)";

SiteFacts good() {
  SiteFacts f;
  f.config = parse_scontrol_config(kGoodConfig);
  f.plugstack_text = "# plugins\nrequired /opt/bellows/lib/spank_bellows.so\n";
  f.host_name = "login1";
  f.host_address = "10.1.0.5";
  return f;
}

const Finding& find(const std::vector<Finding>& all, const std::string& check) {
  for (const Finding& f : all) {
    if (f.check == check) return f;
  }
  static const Finding none{"(missing)", Verdict::problem, "", ""};
  return none;
}

TEST(Doctor, ParsesScontrolShowConfig) {
  const auto c = parse_scontrol_config(kGoodConfig);
  EXPECT_EQ(c.at("SchedulerParameters"), "permit_job_expansion,batch_sched_delay=0");
  EXPECT_EQ(c.at("SlurmctldHost[0]"), "vm(127.0.0.1)");
  EXPECT_EQ(c.at("PrologFlags"), "(null)");
  EXPECT_EQ(c.count("Configuration data as of 2026-11-24T16:20:00"), 0u);
}

TEST(Doctor, AClusterThatCanRunElasticJobsHasNoProblem) {
  const auto all = diagnose(good());
  std::vector<std::string> checks;
  for (const Finding& f : all) {
    checks.push_back(f.check);
    EXPECT_NE(f.verdict, Verdict::problem) << f.check << ": " << f.what;
  }
  EXPECT_EQ(checks, (std::vector<std::string>{"slurmctld", "expand strategy", "accounting", "SPANK plugin",
                                              "node loss", "select plugin", "extern step", "munge",
                                              "control plane"}));
  EXPECT_EQ(find(all, "slurmctld").what, "answers (cluster bellows, Slurm 22.05.8)");
  EXPECT_EQ(find(all, "expand strategy").what,
            "merge: Slurm permits job expansion (SchedulerParameters=permit_job_expansion,batch_sched_delay=0, "
            "PrologFlags=(none)): a job grows under its own job id (helper jobs bellows-expand-JOBID merged "
            "into it)");
  EXPECT_EQ(find(all, "SPANK plugin").what,
            "loaded by /etc/slurm/plugstack.conf: required /opt/bellows/lib/spank_bellows.so");
  EXPECT_EQ(find(all, "munge").what, "reachable (socket=/tmp/s/munge.socket.2)");
  EXPECT_EQ(find(all, "select plugin").verdict, Verdict::warning);
  EXPECT_EQ(find(all, "control plane").what,
            "a job's controller on this host listens on tcp on login1 (10.1.0.5), with the job's key; its "
            "daemons and ranks reach it over the network");
  EXPECT_EQ(find(all, "control plane").verdict, Verdict::ok);
}

TEST(Doctor, AHostNameOnLoopbackIsAWarningAndNoAddressAProblem) {
  SiteFacts f = good();
  f.host_address = "127.0.1.1";
  EXPECT_EQ(find(diagnose(f), "control plane").verdict, Verdict::warning);
  EXPECT_EQ(find(diagnose(f), "control plane").what,
            "this host's name resolves to a loopback address, login1 (127.0.1.1): a job's controller or "
            "rank here is reachable from this host only");
  f.host_address.clear();
  EXPECT_EQ(find(diagnose(f), "control plane").verdict, Verdict::problem);
  EXPECT_EQ(find(diagnose(f), "control plane").what, "this host's name login1 resolves to no IPv4 address");
}

TEST(Doctor, EachProblemIsNamedWithItsFix) {
  SiteFacts f = good();
  f.config["SchedulerParameters"] = "batch_sched_delay=0";
  f.config["AccountingStorageType"] = "accounting_storage/none";
  f.config["PrologFlags"] = "Alloc,Contain";
  f.plugstack_text = "# required /opt/bellows/lib/spank_bellows.so\n";
  f.munge_error = "/tmp/s/munge.socket.2: Connection refused";
  const auto all = diagnose(f);
  EXPECT_EQ(find(all, "accounting").verdict, Verdict::problem);
  EXPECT_EQ(find(all, "accounting").fix, "run slurmdbd and set AccountingStorageType=accounting_storage/slurmdbd");
  EXPECT_EQ(find(all, "extern step").verdict, Verdict::ok) << "jobs grow by companion allocations there";
  EXPECT_EQ(find(all, "SPANK plugin").what,
            "/etc/slurm/plugstack.conf does not load spank_bellows.so: sbatch has no --elastic option");
  EXPECT_EQ(find(all, "SPANK plugin").fix,
            "add the line `required /PATH/TO/spank_bellows.so` to /etc/slurm/plugstack.conf");
  EXPECT_EQ(find(all, "munge").what, "unreachable: /tmp/s/munge.socket.2: Connection refused");
}

TEST(Doctor, SaysWhatALostNodeDoesToAnElasticJob) {
  const Finding with = find(diagnose(good()), "node loss");
  EXPECT_EQ(with.verdict, Verdict::ok);
  EXPECT_EQ(with.what,
            "elastic jobs run with Slurm's no-kill, which spank_bellows.so sets at submission: a node that goes "
            "DOWN leaves the job, which runs on (slurmctld sets a node that stops answering DOWN after "
            "SlurmdTimeout=300 sec; the job's controller finds a silent node lost within 5 s itself and gives "
            "it back)");
  SiteFacts f = good();
  f.plugstack_text = "# required /opt/bellows/lib/spank_bellows.so\n";
  f.config.erase("SlurmdTimeout");
  const Finding without = find(diagnose(f), "node loss");
  EXPECT_EQ(without.verdict, Verdict::warning);
  EXPECT_EQ(without.what,
            "without spank_bellows.so an elastic job runs without Slurm's no-kill: a node that goes DOWN ends "
            "the whole job (NODE_FAIL) (slurmctld sets a node that stops answering DOWN after "
            "SlurmdTimeout=(unknown))");
  EXPECT_EQ(without.fix, "load spank_bellows.so (above), or submit elastic jobs with --no-kill");
}

TEST(Doctor, SaysWhichExpandStrategyAJobUses) {
  SiteFacts f = good();
  f.config["SchedulerParameters"] = "batch_sched_delay=0";
  const Finding without = find(diagnose(f), "expand strategy");
  EXPECT_EQ(without.verdict, Verdict::ok);
  EXPECT_EQ(without.what,
            "companion: Slurm does not permit job expansion (SchedulerParameters=batch_sched_delay=0, "
            "PrologFlags=(none)): a job grows by companion allocations it spans (bellows-grow-JOBID, comment "
            "bellows:companion-of:JOBID, beside it in squeue and sacct)");
  f = good();
  f.config["PrologFlags"] = "Alloc,Contain";
  const Finding contained = find(diagnose(f), "expand strategy");
  EXPECT_EQ(contained.what.rfind("companion: Slurm refuses to merge a job with an extern step", 0), 0u)
      << contained.what;
}

TEST(Doctor, NoSlurmctldIsTheOneFinding) {
  SiteFacts f;
  f.config_error = "scontrol: error: Unable to contact slurm controller (connect failure)";
  const auto all = diagnose(f);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].verdict, Verdict::problem);
  EXPECT_EQ(all[0].what,
            "scontrol show config failed: scontrol: error: Unable to contact slurm controller (connect failure)");
}

TEST(Doctor, SharedNodeSelectAndAnUnreadablePlugstackAreSaid) {
  SiteFacts f = good();
  f.config["SelectType"] = "select/cons_tres";
  f.plugstack_text.clear();
  f.plugstack_error = "No such file or directory";
  const auto all = diagnose(f);
  EXPECT_EQ(find(all, "select plugin").verdict, Verdict::warning);
  EXPECT_EQ(find(all, "SPANK plugin").what,
            "cannot read PlugStackConfig /etc/slurm/plugstack.conf: No such file or directory");
}

}  // namespace
}  // namespace bellows::cli
