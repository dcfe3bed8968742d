// comm_thread_runs_it (task_on_arrival.hpp): the communication thread runs a task a message
// made ready only when every CPU worker sleeps, tasks lately were short, and it holds none yet.

#include <gtest/gtest.h>

#include "bellows/runtime/task_on_arrival.hpp"

namespace br = bellows::runtime;

namespace {

br::TaskOnArrival all_asleep_short_tasks() {
  br::TaskOnArrival facts;
  facts.device = br::DeviceKind::cpu;
  facts.workers = 2;
  facts.sleeping_workers = 2;
  facts.recent_task_seconds = 4e-6;
  facts.limit_seconds = 50e-6;
  return facts;
}

}  // namespace

TEST(TaskOnArrival, RunsAShortTaskWhenEveryWorkerSleeps) {
  EXPECT_TRUE(br::comm_thread_runs_it(all_asleep_short_tasks()));
  auto at_the_limit = all_asleep_short_tasks();
  at_the_limit.recent_task_seconds = 50e-6;
  EXPECT_TRUE(br::comm_thread_runs_it(at_the_limit));
}

TEST(TaskOnArrival, WakesAWorkerOtherwise) {
  auto one_awake = all_asleep_short_tasks();
  one_awake.sleeping_workers = 1;
  EXPECT_FALSE(br::comm_thread_runs_it(one_awake)) << "an awake worker takes it sooner";
  auto long_tasks = all_asleep_short_tasks();
  long_tasks.recent_task_seconds = 51e-6;
  EXPECT_FALSE(br::comm_thread_runs_it(long_tasks)) << "the messages would wait too long";
  auto unknown = all_asleep_short_tasks();
  unknown.recent_task_seconds.reset();
  EXPECT_FALSE(br::comm_thread_runs_it(unknown)) << "no task has run yet";
  auto off = all_asleep_short_tasks();
  off.limit_seconds = 0.0;
  EXPECT_FALSE(br::comm_thread_runs_it(off));
  auto holding = all_asleep_short_tasks();
  holding.holding = true;
  EXPECT_FALSE(br::comm_thread_runs_it(holding)) << "one task per pass";
  auto emulated = all_asleep_short_tasks();
  emulated.device = br::DeviceKind::emulated;
  EXPECT_FALSE(br::comm_thread_runs_it(emulated)) << "only CPU workers' tasks";
  auto no_workers = all_asleep_short_tasks();
  no_workers.workers = 0;
  no_workers.sleeping_workers = 0;
  EXPECT_FALSE(br::comm_thread_runs_it(no_workers));
}
