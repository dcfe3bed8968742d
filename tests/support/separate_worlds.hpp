#pragma once
// What the tests that run a job as separate worlds (one `mpiexec -n 1` per member, started by
// a launcher in the same binary, joined by connect/accept) share: the files the launcher and
// its members pass each other in the test's directory, how a member's mpiexec is started
// (the launcher's record of them: LaunchedMembers, spawned_processes.hpp), and how the members
// form their job (a communicator, or a Membership for ElasticJob).

#include "bellows/runtime/membership.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace bellows::testing {

/// Seconds since the epoch (CLOCK_REALTIME), comparable between the test's processes.
inline double wall_seconds() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

/// The seed a launcher draws its moments from: BELLOWS_TEST_SEED when set, a random one
/// otherwise (the launcher prints it with its result, so that a run can be repeated).
inline unsigned test_seed() {
  const char* text = std::getenv("BELLOWS_TEST_SEED");
  return text != nullptr ? static_cast<unsigned>(std::strtoul(text, nullptr, 10)) : std::random_device{}();
}

/// Writes `text` to `path` at once (a temporary file renamed): a reader sees all or nothing.
inline void write_file(const std::filesystem::path& path, const std::string& text) {
  {
    std::ofstream out(path.string() + ".tmp");
    out << text;
  }
  std::filesystem::rename(path.string() + ".tmp", path);
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline int read_int(const std::filesystem::path& path) { return std::atoi(read_file(path).c_str()); }

/// This process's environment less the process manager's variables (PMI_*, HYDI_*, HYDRA_*),
/// null-terminated, for a process that belongs to an mpiexec of its own: a launcher started
/// under a process manager must not pass its variables on.
inline std::vector<char*> environment_for_own_world() {
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (entry.rfind("PMI_", 0) == 0 || entry.rfind("HYDI_", 0) == 0 || entry.rfind("HYDRA_", 0) == 0) continue;
    env.push_back(*e);
  }
  env.push_back(nullptr);
  return env;
}

/// Starts `MPIEXEC -n 1 ARGS...` as a member: a world of its own (environment_for_own_world),
/// leader of its own process group (so that the launcher can kill hydra's proxy and the rank
/// with it), its stdout and stderr in `log`. Returns mpiexec's pid, -1 when it did not start.
inline pid_t start_member_world(const std::string& mpiexec, const std::vector<std::string>& args,
                                const std::filesystem::path& log) {
  std::vector<std::string> all{mpiexec, "-n", "1"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> env = environment_for_own_world();
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&files, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, mpiexec.c_str(), &files, &attr, argv.data(), env.data());
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  return rc == 0 ? pid : -1;
}

/// A member's side of forming the job of `count` member worlds: member 0 opens a port, writes
/// it to DIR/port and accepts the others (grow_by_accept); each other member waits for that
/// file and connects (join_by_connect). Collective over the members; returns the job's
/// communicator.
inline MPI_Comm join_member_worlds(const std::filesystem::path& dir, int index, int count) {
  std::vector<int> payload;
  if (index == 0) {
    char port[MPI_MAX_PORT_NAME] = {};
    MPI_Open_port(MPI_INFO_NULL, port);
    write_file(dir / "port", port);
    MPI_Comm self = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &self);
    MPI_Comm job = bellows::runtime::grow_by_accept(self, count - 1, port, payload);
    MPI_Comm_disconnect(&self);
    return job;
  }
  while (!std::filesystem::exists(dir / "port")) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return bellows::runtime::join_by_connect(read_file(dir / "port"), payload);
}

/// The same for a job that runs under bellows::runtime::Membership (ElasticJob): member 0 opens
/// a port, writes it to DIR/port and accepts `count` - 1 others (Membership::grow_by_accept);
/// each other member waits for `wait_for` (DIR/port when empty: a member that joins later, by
/// an expand, waits for the file the first rank writes when it carries the expand out), then
/// connects to DIR/port (Membership::join_by_connect), receiving rank 0's payload in `payload`.
/// Collective over the `count` members. Returns this member's membership of the job.
inline bellows::runtime::Membership join_member_job(const std::filesystem::path& dir, int index, int count,
                                                    std::vector<int>& payload,
                                                    const std::filesystem::path& wait_for = {}) {
  if (index != 0) {
    const std::filesystem::path ready = wait_for.empty() ? dir / "port" : wait_for;
    while (!std::filesystem::exists(ready)) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return bellows::runtime::Membership::join_by_connect(read_file(dir / "port"), payload);
  }
  char port[MPI_MAX_PORT_NAME] = {};
  MPI_Open_port(MPI_INFO_NULL, port);
  write_file(dir / "port", port);
  bellows::runtime::Membership first(MPI_COMM_WORLD);
  first.grow_by_accept(count - 1, port, payload);
  return first;
}

}  // namespace bellows::testing
