// TaskGraph: summed work and critical path of a task graph on synthetic costs (no MPI).

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "bellows/runtime/task_graph.hpp"

using bellows::runtime::TaskGraph;

namespace {

double by_flops(std::uint32_t, double flops) { return flops; }

TEST(TaskGraph, IndependentTasksHaveTheLongestTaskAsCriticalPath) {
  TaskGraph g;
  for (int t = 1; t <= 4; ++t) g.add_task(0, t);
  const auto p = g.profile(by_flops);
  EXPECT_EQ(p.tasks, 4U);
  EXPECT_DOUBLE_EQ(p.work_seconds, 10.0);
  EXPECT_DOUBLE_EQ(p.critical_path_seconds, 4.0);
}

TEST(TaskGraph, AChainIsItsOwnCriticalPath) {
  TaskGraph g;
  const auto a = g.add_task(0, 1.0);
  const auto b = g.add_task(0, 2.0);
  const auto c = g.add_task(0, 3.0);
  g.add_dependency(b, c);  // added out of order on purpose
  g.add_dependency(a, b);
  const auto p = g.profile(by_flops);
  EXPECT_DOUBLE_EQ(p.work_seconds, 6.0);
  EXPECT_DOUBLE_EQ(p.critical_path_seconds, 6.0);
}

TEST(TaskGraph, ADiamondTakesItsLongerBranch) {
  TaskGraph g;
  const auto top = g.add_task(0, 1.0);
  const auto left = g.add_task(1, 5.0);
  const auto right = g.add_task(1, 2.0);
  const auto bottom = g.add_task(0, 1.0);
  g.add_dependency(top, left);
  g.add_dependency(top, right);
  g.add_dependency(left, bottom);
  g.add_dependency(right, bottom);
  const auto p = g.profile(by_flops);
  EXPECT_DOUBLE_EQ(p.work_seconds, 9.0);
  EXPECT_DOUBLE_EQ(p.critical_path_seconds, 7.0);
}

TEST(TaskGraph, CostsComeFromTheCallerPerClass) {
  TaskGraph g;
  const auto a = g.add_task(0, 100.0);
  const auto b = g.add_task(1, 100.0);
  g.add_dependency(a, b);
  // Class 1 runs ten times slower than class 0.
  const auto p = g.profile([](std::uint32_t cls, double flops) { return flops * (cls == 1 ? 0.1 : 0.01); });
  EXPECT_DOUBLE_EQ(p.work_seconds, 11.0);
  EXPECT_DOUBLE_EQ(p.critical_path_seconds, 11.0);
}

TEST(TaskGraph, ACycleIsNamed) {
  TaskGraph g;
  const auto a = g.add_task(0, 1.0);
  const auto b = g.add_task(0, 1.0);
  g.add_dependency(a, b);
  g.add_dependency(b, a);
  try {
    (void)g.profile(by_flops);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "TaskGraph: the dependencies form a cycle (task 0 never becomes ready)");
  }
}

TEST(TaskGraph, ADependencyOnATaskNotAddedIsNamed) {
  TaskGraph g;
  g.add_task(0, 1.0);
  try {
    g.add_dependency(0, 3);
    FAIL() << "no error";
  } catch (const std::out_of_range& e) {
    EXPECT_EQ(std::string(e.what()), "TaskGraph: dependency 0 -> 3 names a task not added (1 tasks)");
  }
}

}  // namespace
