// What a PMIx_Job_control asks, as the daemon reads it (bellows/daemon/job_control.hpp): the
// directives and targets Bellows carries out, and every refusal with its status and text. No
// PMIx server: PMIx's info macros need none.

#include <bellows/daemon/job_control.hpp>

#include <gtest/gtest.h>

#include <pmix.h>

#include <string>
#include <vector>

namespace bellows::daemon {
namespace {

namespace pr = bellows::protocol;

const ProcId kTool{"bellowsd.tool.3", 0};

/// pmix_info_t entries built one by one, freed with the object.
class Directives {
 public:
  Directives& add(const char* key, const void* value, pmix_data_type_t type) {
    info_.emplace_back();
    PMIX_INFO_LOAD(&info_.back(), key, value, type);
    return *this;
  }
  ~Directives() {
    for (auto& i : info_) PMIX_INFO_DESTRUCT(&i);
  }
  const pmix_info_t* data() const { return info_.data(); }
  std::size_t size() const { return info_.size(); }

 private:
  std::vector<pmix_info_t> info_;
};

pmix_proc_t proc(const char* nspace, pmix_rank_t rank) {
  pmix_proc_t p;
  PMIX_PROC_LOAD(&p, nspace, rank);
  return p;
}

JobControlReading read(const Directives& d, std::vector<pmix_proc_t> targets) {
  return read_job_control(kTool, targets.data(), targets.size(), d.data(), d.size(), "local-7");
}

TEST(JobControl, ASignalToARankIsReadWithItsTarget) {
  const int sig = 19;
  Directives d;
  d.add(PMIX_JOB_CTRL_ID, "stop-1", PMIX_STRING).add(PMIX_JOB_CTRL_SIGNAL, &sig, PMIX_INT);
  const JobControlReading r = read(d, {proc("local-7", 2)});
  ASSERT_EQ(r.status, PMIX_SUCCESS) << r.error;
  EXPECT_EQ(r.order.requester, kTool);
  EXPECT_EQ(r.order.action, pr::JobControlAction::signal);
  EXPECT_EQ(r.order.signal, 19);
  EXPECT_EQ(r.order.target_rank, 2u);
  EXPECT_EQ(describe(r.order, "local-7"), "signal 19 to local-7:2");
}

TEST(JobControl, TerminatingTheJobNamesEveryRank) {
  const bool yes = true;
  Directives d;
  d.add(PMIX_JOB_CTRL_TERMINATE, &yes, PMIX_BOOL);
  const JobControlReading r = read(d, {proc("local-7", PMIX_RANK_WILDCARD)});
  ASSERT_EQ(r.status, PMIX_SUCCESS) << r.error;
  EXPECT_EQ(r.order.action, pr::JobControlAction::terminate);
  EXPECT_EQ(r.order.target_rank, pr::kAllRanks);
  EXPECT_EQ(describe(r.order, "local-7"), "terminate local-7:*");
}

TEST(JobControl, EveryRefusalSaysWhatWasWrong) {
  const int sig = 15;
  const int bad_sig = 99;
  const bool yes = true;
  const pmix_proc_t rank1 = proc("local-7", 1);
  {
    Directives d;
    d.add(PMIX_JOB_CTRL_PAUSE, &yes, PMIX_BOOL);
    const JobControlReading r = read(d, {rank1});
    EXPECT_EQ(r.status, PMIX_ERR_NOT_SUPPORTED);
    EXPECT_EQ(r.error, "job control directive pmix.jctrl.pause is not supported (only pmix.jctrl.sig and pmix.jctrl.term)");
  }
  {
    Directives d;
    EXPECT_EQ(read(d, {rank1}).error,
              "no job control directive Bellows carries out (pmix.jctrl.sig or pmix.jctrl.term)");
  }
  {
    Directives d;
    d.add(PMIX_JOB_CTRL_SIGNAL, &bad_sig, PMIX_INT);
    const JobControlReading r = read(d, {rank1});
    EXPECT_EQ(r.status, PMIX_ERR_BAD_PARAM);
    EXPECT_EQ(r.error, "pmix.jctrl.sig must be a signal number (1 to 64)");
  }
  {
    Directives d;
    d.add(PMIX_JOB_CTRL_SIGNAL, &sig, PMIX_INT).add(PMIX_JOB_CTRL_TERMINATE, &yes, PMIX_BOOL);
    EXPECT_EQ(read(d, {rank1}).error, "more than one directive (one of pmix.jctrl.sig, pmix.jctrl.term)");
  }
  Directives d;
  d.add(PMIX_JOB_CTRL_SIGNAL, &sig, PMIX_INT);
  const JobControlReading none = read(d, {});
  EXPECT_EQ(none.status, PMIX_ERR_BAD_PARAM);
  EXPECT_EQ(none.error, "no target (name a rank of the job, or the job with PMIX_RANK_WILDCARD)");
  const JobControlReading two = read(d, {rank1, proc("local-7", 2)});
  EXPECT_EQ(two.status, PMIX_ERR_NOT_SUPPORTED);
  EXPECT_EQ(two.error, "2 targets: one per call (a rank, or the job)");
  const JobControlReading other = read(d, {proc("local-9", 1)});
  EXPECT_EQ(other.status, PMIX_ERR_BAD_PARAM);
  EXPECT_EQ(other.order.requester, kTool);  // a refusal names who asked, for the daemon's log
  EXPECT_EQ(other.error, "target local-9:1 is not of job local-7");
  const pmix_proc_t target = rank1;
  const JobControlReading no_job = read_job_control(kTool, &target, 1, d.data(), d.size(), "");
  EXPECT_EQ(no_job.status, PMIX_ERR_NOT_FOUND);
  EXPECT_EQ(no_job.error, "this daemon knows no job yet");
}

}  // namespace
}  // namespace bellows::daemon
