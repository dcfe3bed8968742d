#include "bellows/runtime/membership.hpp"

#include "join_tree.hpp"
#include "membership_support.hpp"
#include "shrink_words.hpp"
#include "sleeping_wait.hpp"

#include <thread>

#include <netdb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>

namespace bellows::runtime {

namespace {

using namespace membership_detail;

std::string mpi_error_text(int code) {
  std::array<char, MPI_MAX_ERROR_STRING> text{};
  int length = 0;
  if (MPI_Error_string(code, text.data(), &length) != MPI_SUCCESS) {
    return "MPI error code " + std::to_string(code);
  }
  return std::string(text.data(), static_cast<std::size_t>(length));
}


class Info {
 public:
  Info() { check(MPI_Info_create(&info_), "MPI_Info_create"); }
  ~Info() {
    if (info_ != MPI_INFO_NULL && !mpi_finalized()) MPI_Info_free(&info_);
  }
  Info(const Info&) = delete;
  Info& operator=(const Info&) = delete;
  void set(const char* key, const std::string& value) {
    check(MPI_Info_set(info_, key, value.c_str()), "MPI_Info_set");
  }
  [[nodiscard]] MPI_Info get() const noexcept { return info_; }

 private:
  MPI_Info info_ = MPI_INFO_NULL;
};

class Group {
 public:
  Group() = default;
  ~Group() {
    if (group_ != MPI_GROUP_NULL && group_ != MPI_GROUP_EMPTY && !mpi_finalized()) {
      MPI_Group_free(&group_);
    }
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  MPI_Group* out() noexcept { return &group_; }
  [[nodiscard]] MPI_Group get() const noexcept { return group_; }

 private:
  MPI_Group group_ = MPI_GROUP_NULL;
};

// ------------------------------------------------------------------ spawn preparation

bool is_executable_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
         ::access(path.c_str(), X_OK) == 0;
}

/// The command as an absolute path, or empty when it is not an executable file.
std::string resolve_command(const std::string& command) {
  std::string found;
  if (command.find('/') != std::string::npos) {
    if (is_executable_file(command)) found = command;
  } else if (const char* path = std::getenv("PATH")) {
    std::string_view rest(path);
    while (found.empty()) {
      const auto colon = rest.find(':');
      std::string candidate(rest.substr(0, colon));
      if (candidate.empty()) candidate.push_back('.');  // an empty PATH entry: the cwd
      candidate.push_back('/');
      candidate.append(command);
      if (is_executable_file(candidate)) found = candidate;
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  if (found.empty()) return {};
  char* absolute = ::realpath(found.c_str(), nullptr);
  if (absolute == nullptr) return {};
  std::string result(absolute);
  std::free(absolute);
  return result;
}

constexpr const char* kEnvProgram = "/usr/bin/env";

/// What rank 0 passes to MPI_Comm_spawn: the program, its NULL-terminated argv and the
/// info object.
struct PreparedSpawn {
  std::string program;
  std::vector<std::string> args;
  std::vector<char*> argv;
  Info info;
};

/// Checks spec on rank 0 and fills `out`; returns what is wrong, or an empty string.
std::string prepare_spawn(const SpawnSpec& spec, PreparedSpawn& out) {
  if (spec.command.empty()) return "spawn spec: empty command";
  const std::string command = resolve_command(spec.command);
  if (command.empty()) {
    return "spawn spec: command '" + spec.command + "' is not an executable file";
  }
  for (const auto& arg : spec.args) {
    if (arg.find('\n') != std::string::npos) {
      return "spawn spec: argument '" + arg + "' contains a newline";
    }
  }
  out.args.clear();
  if (spec.env.empty()) {
    out.program = command;
  } else {
    if (!is_executable_file(kEnvProgram)) {
      return std::string("spawn spec: environment variables need ") + kEnvProgram +
             ", which is not an executable file";
    }
    if (command.find('=') != std::string::npos) {
      return "spawn spec: with environment variables the command path may not contain '=': " +
             command;
    }
    out.program = kEnvProgram;
    for (const auto& [name, value] : spec.env) {
      if (name.empty() || name.find('=') != std::string::npos ||
          name.find('\n') != std::string::npos || value.find('\n') != std::string::npos) {
        return "spawn spec: bad environment variable '" + name +
               "' (empty, or holds '=' or a "
               "newline)";
      }
      out.args.push_back(name + "=" + value);
    }
    out.args.push_back(command);
  }
  out.args.insert(out.args.end(), spec.args.begin(), spec.args.end());
  out.argv.clear();
  for (auto& arg : out.args) out.argv.push_back(arg.data());
  out.argv.push_back(nullptr);
  if (!spec.host.empty()) {
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(spec.host.c_str(), nullptr, nullptr, &found);
    if (rc != 0) {
      return "spawn spec: host '" + spec.host + "' does not resolve: " + ::gai_strerror(rc);
    }
    ::freeaddrinfo(found);
    out.info.set("host", spec.host);
  }
  return {};
}

// ------------------------------------------------------------------ the grow protocol
//
// A grow by k over a job of n ranks, with one join of the job however large k is:
//  1. Rank 0 checks the spec and broadcasts the count and what to spawn.
//  2. Spawns in parallel: rank r starts new process i for every i with i mod n == r, one
//     MPI_Comm_spawn on MPI_COMM_SELF each (each new process is an MPI world of its own),
//     and sends it its JoinPlan (ordinal, count, old size) over the spawn intercomm.
//  3. Ports: each new process opens a port for every round of step 5 in which its group
//     accepts another, and sends their names to its spawner; rank 0 opens the job's port. One allreduce over the job gathers the
//     table of ports (and every spawn's duration); each spawner sends it to its processes.
//  4. The job waits, sleeping, until new process 0 says the new processes are one group.
//  5. The new processes join pairwise in ceil(log2 k) rounds (a tree of accept/connect
//     and merge, ordered by ordinal), so that they form one communicator.
//  6. One MPI_Comm_accept over the job and MPI_Comm_connect over the new processes'
//     communicator, then one MPI_Intercomm_merge: the job's ranks keep their numbers and
//     new process i becomes rank n + i.
//  7. Every intermediate communicator (spawn intercomms, the new processes' group
//     communicators, the accept intercomm) is disconnected, and the ports closed.
// The job's ranks wait without spinning (nonblocking calls polled with sleeps) wherever
// they wait for the new processes, so that those get the cores; only the accept itself
// is a blocking collective.

/// Broadcast by rank 0 over the caller's communicator when a grow starts.
struct GrowStart {
  int count = 0;
  int error_length = 0;
  int spawn_bytes = 0;  ///< length of the serialized PreparedSpawn that follows
  std::array<char, 512> error{};
};

/// What rank 0 decided to spawn, as bytes for a broadcast: program, host, then the
/// arguments, each as a 4-byte length and its bytes.
std::vector<char> serialize_spawn(const PreparedSpawn& spawn, const std::string& host) {
  std::vector<char> out;
  const auto put = [&out](const std::string& s) {
    const auto length = static_cast<std::uint32_t>(s.size());
    const auto* p = reinterpret_cast<const char*>(&length);
    out.insert(out.end(), p, p + sizeof length);
    out.insert(out.end(), s.begin(), s.end());
  };
  put(spawn.program);
  put(host);
  for (const auto& arg : spawn.args) put(arg);
  return out;
}

void deserialize_spawn(const std::vector<char>& bytes, PreparedSpawn& out) {
  std::size_t at = 0;
  const auto get = [&]() {
    std::uint32_t length = 0;
    if (at + sizeof length > bytes.size()) throw std::logic_error("grow: truncated spawn spec");
    std::memcpy(&length, bytes.data() + at, sizeof length);
    at += sizeof length;
    if (at + length > bytes.size()) throw std::logic_error("grow: truncated spawn spec");
    std::string s(bytes.data() + at, length);
    at += length;
    return s;
  };
  out.program = get();
  const std::string host = get();
  out.args.clear();
  while (at < bytes.size()) out.args.push_back(get());
  out.argv.clear();
  for (auto& arg : out.args) out.argv.push_back(arg.data());
  out.argv.push_back(nullptr);
  if (!host.empty()) out.info.set("host", host);
}

/// Steps 2-7 on the ranks of the job. `spawn` is what to start (the same on every rank).
Communicator grow_members(MPI_Comm current, int count, PreparedSpawn& spawn, GrowReport& report) {
  int rank = 0, size = 1;
  check(MPI_Comm_rank(current, &rank), "MPI_Comm_rank");
  check(MPI_Comm_size(current, &size), "MPI_Comm_size");

  // 2. This rank's spawns.
  std::vector<int> mine;
  for (int i = rank; i < count; i += size) mine.push_back(i);
  std::vector<Communicator> children;
  std::vector<double> spawn_seconds(static_cast<std::size_t>(count), 0.0);
  std::vector<JoinPlan> plans(mine.size());
  std::vector<MPI_Request> requests;
  for (std::size_t c = 0; c < mine.size(); ++c) {
    const auto t = Clock::now();
    MPI_Comm inter_raw = MPI_COMM_NULL;
    int process_error = MPI_SUCCESS;
    check(MPI_Comm_spawn(spawn.program.c_str(), spawn.argv.data(), 1, spawn.info.get(), 0,
                         MPI_COMM_SELF, &inter_raw, &process_error),
          "MPI_Comm_spawn");
    children.push_back(adopt(inter_raw));
    if (process_error != MPI_SUCCESS) throw MpiError("MPI_Comm_spawn (the process)", process_error);
    spawn_seconds[static_cast<std::size_t>(mine[c])] = seconds_since(t);
    plans[c].ordinal = mine[c];
    plans[c].count = count;
    plans[c].old_size = size;
    requests.emplace_back();
    check(MPI_Isend(&plans[c], sizeof(JoinPlan), MPI_BYTE, 0, kPlanTag, children.back().get(),
                    &requests.back()),
          "MPI_Isend");
  }

  // 3. The port table.
  const auto t_wait = Clock::now();
  PortTable table(table_bytes(count), '\0');
  const int rounds = join_round_count(count);
  for (std::size_t c = 0; c < mine.size(); ++c) {
    if (rounds == 0) break;
    requests.emplace_back();
    check(MPI_Irecv(port_row(table, mine[c] * rounds), rounds * MPI_MAX_PORT_NAME, MPI_CHAR, 0,
                    kPortTag, children[c].get(), &requests.back()),
          "MPI_Irecv");
  }
  for (auto& request : requests) await(request, "MPI_Test");
  requests.clear();
  const int job_port = job_port_row(count);
  if (rank == 0) check(MPI_Open_port(MPI_INFO_NULL, port_row(table, job_port)), "MPI_Open_port");
  std::array<MPI_Request, 2> gathers{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  check(MPI_Iallreduce(MPI_IN_PLACE, table.data(), static_cast<int>(table.size()), MPI_BYTE,
                       MPI_BOR, current, &gathers[0]),
        "MPI_Iallreduce");
  check(MPI_Iallreduce(MPI_IN_PLACE, spawn_seconds.data(), count, MPI_DOUBLE, MPI_MAX, current,
                       &gathers[1]),
        "MPI_Iallreduce");
  for (auto& request : gathers) await(request, "MPI_Test");
  report.spawn_seconds = spawn_seconds;
  for (auto& child : children) {
    requests.emplace_back();
    check(MPI_Isend(table.data(), static_cast<int>(table.size()), MPI_CHAR, 0, kTableTag,
                    child.get(), &requests.back()),
          "MPI_Isend");
  }
  for (auto& request : requests) await(request, "MPI_Test");
  requests.clear();

  // 4. New process 0 (spawned by rank 0) says when the new processes are one group.
  GroupReady ready;
  MPI_Request request = MPI_REQUEST_NULL;
  if (rank == 0) {
    check(MPI_Irecv(&ready, sizeof ready, MPI_BYTE, 0, kReadyTag, children.front().get(), &request),
          "MPI_Irecv");
    await(request, "MPI_Test");
  }
  check(MPI_Ibcast(&ready, sizeof ready, MPI_BYTE, 0, current, &request), "MPI_Ibcast");
  await(request, "MPI_Test");
  report.wait_seconds = seconds_since(t_wait);
  report.group_seconds = ready.group_seconds;

  // 6. One accept over the job, one merge.
  auto t = Clock::now();
  Communicator grown = join_job(current, port_row(table, job_port), false);
  report.merge_seconds.push_back(seconds_since(t));
  if (rank == 0) check(MPI_Close_port(port_row(table, job_port)), "MPI_Close_port");

  // 7. The grown communicator holds the connections now.
  t = Clock::now();
  for (auto& child : children) child.disconnect();
  report.disconnect_seconds.push_back(seconds_since(t));
  return grown;
}

/// FNV-1a over the size and the sorted leaving ranks.
std::uint64_t fingerprint(int size, const std::vector<int>& sorted) {
  std::uint64_t hash = 1469598103934665603ULL;
  const auto mix = [&hash](int value) {
    for (int byte = 0; byte < 4; ++byte) {
      hash ^= static_cast<std::uint64_t>((static_cast<unsigned>(value) >> (8 * byte)) & 0xffU);
      hash *= 1099511628211ULL;
    }
  };
  mix(size);
  for (const int rank : sorted) mix(rank);
  return hash;
}

/// The smallest leaving rank that shares this process's MPI_COMM_WORLD with a rank that
/// stays, as far as this process can tell (it knows only its own world); -1 if none.
int world_conflict(MPI_Comm current, const std::vector<int>& sorted) {
  int world_size = 1;
  check(MPI_Comm_size(MPI_COMM_WORLD, &world_size), "MPI_Comm_size");
  if (world_size == 1) return -1;
  Group world, job;
  check(MPI_Comm_group(MPI_COMM_WORLD, world.out()), "MPI_Comm_group");
  check(MPI_Comm_group(current, job.out()), "MPI_Comm_group");
  std::vector<int> in_world(static_cast<std::size_t>(world_size));
  std::vector<int> in_job(in_world.size());
  for (int r = 0; r < world_size; ++r) in_world[static_cast<std::size_t>(r)] = r;
  check(
      MPI_Group_translate_ranks(world.get(), world_size, in_world.data(), job.get(), in_job.data()),
      "MPI_Group_translate_ranks");
  std::vector<int> mates;
  for (const int r : in_job) {
    if (r != MPI_UNDEFINED) mates.push_back(r);
  }
  const auto leaves = [&sorted](int r) {
    return std::binary_search(sorted.begin(), sorted.end(), r);
  };
  const bool any_leaves = std::any_of(mates.begin(), mates.end(), leaves);
  const bool all_leave = std::all_of(mates.begin(), mates.end(), leaves);
  if (!any_leaves || all_leave) return -1;
  int first = -1;
  for (const int r : mates) {
    if (leaves(r) && (first < 0 || r < first)) first = r;
  }
  return first;
}

/// shrink() with a rank possibly lost while it runs (Membership::shrink with a watch): a
/// LostDuringShrink naming the ranks `watch` found lost when `call` did not complete.
LostDuringShrink lost_during_shrink(const ShrinkLossWatch& watch, const std::string& call) {
  std::vector<int> lost = watch.lost();
  std::string names;
  for (const int r : lost) names += (names.empty() ? "" : ", ") + std::to_string(r);
  return LostDuringShrink("shrink: ranks {" + names + "} were lost during " + call +
                              ", before every rank held the survivors' communicator; the job's communicator is "
                              "untouched",
                          std::move(lost));
}

/// Buffers and communicators a shrink given up by a loss leaves to MPI: kept until the
/// process exits (a pending collective may still write them; a communicator that may hold
/// the dead is never freed).
struct LeftToMpi {
  std::vector<std::unique_ptr<std::array<unsigned long long, 3>>> values;
  std::vector<MPI_Comm> communicators;
};
LeftToMpi& left_to_mpi() {
  static LeftToMpi left;
  return left;
}

/// Tag of the survivors' MPI_Comm_create_group in a watched shrink.
constexpr int kShrinkCreateGroupTag = 0x5348;

MPI_Comm shrink_owned(Communicator& current, std::span<const int> leaving, ShrinkReport& report,
                      const ShrinkLossWatch* watch) {
  const auto start = Clock::now();
  int size = 0, my_rank = -1;
  check(MPI_Comm_size(current.get(), &size), "MPI_Comm_size");
  check(MPI_Comm_rank(current.get(), &my_rank), "MPI_Comm_rank");
  validate_leaving(size, leaving);
  std::vector<int> sorted(leaving.begin(), leaving.end());
  std::sort(sorted.begin(), sorted.end());
  report = ShrinkReport{};
  report.old_size = size;

  ReturnErrors errors(current.get());
  const bool leaves_here = std::binary_search(sorted.begin(), sorted.end(), my_rank);
  // A rank that stays and gives the shrink up tells every rank so first: a rank whose barrier
  // that confirms the survivors' communicator failed waits for that word (shrink_words.hpp).
  const auto given_up = [&](const std::string& step) {
    if (!leaves_here) tell_shrink_word(current.get(), my_rank, size, false);
    return lost_during_shrink(*watch, step);
  };
  // One allreduce checks that all ranks agree (max of h and of ~h equal the local ones
  // only if every rank has the same h) and finds the smallest leaver that shares its MPI
  // world with a rank that stays.
  auto t = Clock::now();
  const std::uint64_t hash = fingerprint(size, sorted);
  const int conflict = world_conflict(current.get(), sorted);
  auto values = std::make_unique<std::array<unsigned long long, 3>>(std::array<unsigned long long, 3>{
      hash, ~hash, conflict < 0 ? 0ULL : static_cast<unsigned long long>(size - conflict)});
  if (watch != nullptr) {
    MPI_Request request = MPI_REQUEST_NULL;
    const int posted =
        MPI_Iallreduce(MPI_IN_PLACE, values->data(), 3, MPI_UNSIGNED_LONG_LONG, MPI_MAX, current.get(), &request);
    if (!watch->complete(posted, request, "MPI_Iallreduce")) {
      if (request != MPI_REQUEST_NULL) left_to_mpi().values.push_back(std::move(values));
      throw given_up("its check that every rank names the same leavers (MPI_Iallreduce)");
    }
  } else {
    check(MPI_Allreduce(MPI_IN_PLACE, values->data(), 3, MPI_UNSIGNED_LONG_LONG, MPI_MAX, current.get()),
          "MPI_Allreduce");
  }
  report.check_seconds = seconds_since(t);
  if ((*values)[0] != hash || (*values)[1] != ~hash) {
    throw std::invalid_argument("shrink: the ranks passed different lists of leaving ranks");
  }
  if ((*values)[2] != 0) {
    throw std::invalid_argument(
        "shrink: rank " + std::to_string(size - static_cast<int>((*values)[2])) +
        " cannot leave: it shares its MPI_COMM_WORLD (one mpiexec or one MPI_Comm_spawn call) "
        "with ranks that stay, and its MPI_Finalize would wait for them");
  }

  // The survivors' communicator. MPICH ch3 gives a communicator made from a group its
  // own table of connections, except when the group's ranks are those of the old
  // communicator 0..n-1 in order: then it reuses the old communicator's table
  // (dup_vcrt in ch3u_comm.c does not compare the sizes), leavers included, and that
  // table keeps the connections to the leavers open until the survivors release the new
  // communicator, so a leaver's disconnect below waits for the end of the job. That is
  // the case whenever the leavers are the highest ranks. So the survivors first form a
  // communicator in rotated order (rank 0 last: never the prefix order), which gets a
  // table of its own, and put it back in order from there.
  t = Clock::now();
  const int staying = size - static_cast<int>(sorted.size());
  const bool prefix = !sorted.empty() && sorted.front() == staying;
  std::vector<int> order;
  for (int r = 0; r < size; ++r) {
    if (!std::binary_search(sorted.begin(), sorted.end(), r)) order.push_back(r);
  }
  if (prefix && staying > 1) std::rotate(order.begin(), order.begin() + 1, order.end());
  Group all, survivors_group;
  check(MPI_Comm_group(current.get(), all.out()), "MPI_Comm_group");
  check(MPI_Group_incl(all.get(), staying, order.data(), survivors_group.out()), "MPI_Group_incl");
  MPI_Comm survivors_raw = MPI_COMM_NULL;
  if (watch == nullptr) {
    check(MPI_Comm_create(current.get(), survivors_group.get(), &survivors_raw), "MPI_Comm_create");
  } else if (!leaves_here) {
    // Collective over the survivors alone (a leaver lost cannot hold it up); a survivor lost
    // fails it (MPIX_ERR_PROC_FAILED), which the watch then names.
    const int created =
        MPI_Comm_create_group(current.get(), survivors_group.get(), kShrinkCreateGroupTag, &survivors_raw);
    MPI_Request none = MPI_REQUEST_NULL;
    if (!watch->complete(created, none, "MPI_Comm_create_group")) {
      throw given_up("the survivors' MPI_Comm_create_group");
    }
  }
  Communicator survivors = adopt(survivors_raw);
  const auto put_in_order = [&] {
    // Back to the old order: new rank i is rank i - 1 (mod n) of the rotated one.
    std::vector<int> back(static_cast<std::size_t>(staying));
    for (int i = 0; i < staying; ++i) {
      back[static_cast<std::size_t>(i)] = (i + staying - 1) % staying;
    }
    Group rotated, ordered;
    check(MPI_Comm_group(survivors.get(), rotated.out()), "MPI_Comm_group");
    check(MPI_Group_incl(rotated.get(), staying, back.data(), ordered.out()), "MPI_Group_incl");
    MPI_Comm ordered_raw = MPI_COMM_NULL;
    const int created = MPI_Comm_create(survivors.get(), ordered.get(), &ordered_raw);
    if (watch == nullptr) {
      check(created, "MPI_Comm_create");
    } else {
      MPI_Request none = MPI_REQUEST_NULL;
      if (!watch->complete(created, none, "MPI_Comm_create")) {
        left_to_mpi().communicators.push_back(survivors.release());  // may hold the dead
        throw given_up("the survivors' MPI_Comm_create that puts them in order");
      }
    }
    Communicator in_order = adopt(ordered_raw);
    survivors.disconnect();
    survivors = std::move(in_order);
  };
  bool peers_lost = false;  // around the confirmation, the shrink standing: the old communicator is freed
  if (watch != nullptr) {
    // In order before anything is let go of; then the survivors' first checkpoint on their
    // communicator (before_confirming), whose last barrier is the shrink's point of no return;
    // then the words and a barrier over every rank, leavers too. Past that barrier every rank
    // that stays passed the point of no return, and no rank has disconnected yet.
    if (survivors && prefix && staying > 1) put_in_order();
    std::vector<int> stayers(order);
    std::sort(stayers.begin(), stayers.end());
    ShrinkWords words(current.get(), my_rank, stayers);
    ShrinkConfirmationFacts own;
    if (!leaves_here) {
      own.passed_survivors_checkpoint = !watch->before_confirming || watch->before_confirming(survivors.get());
      tell_shrink_word(current.get(), my_rank, size, own.passed_survivors_checkpoint);
    } else if (watch->before_confirming) {
      (void)watch->before_confirming(MPI_COMM_NULL);
    }
    // A rank that stays and did not pass the point of no return posts no barrier: it found a
    // rank lost, so the barrier fails everywhere, and it waits for the others' words.
    if (leaves_here || own.passed_survivors_checkpoint) {
      MPI_Request barrier = MPI_REQUEST_NULL;
      const int posted = MPI_Ibarrier(current.get(), &barrier);
      own.confirming_barrier_passed = watch->complete(posted, barrier, "MPI_Ibarrier");
    }
    // Passed: every word was sent before it, and they are received before the old
    // communicator is let go of. Failed: the words tell the outcome.
    const ShrinkConfirmationDecision decision = words.settle(own, *watch, own.confirming_barrier_passed);
    std::vector<int> lost = watch->lost();
    lost.insert(lost.end(), words.lost().begin(), words.lost().end());
    std::sort(lost.begin(), lost.end());
    lost.erase(std::unique(lost.begin(), lost.end()), lost.end());
    if (decision.action == ShrinkConfirmation::give_up) {
      if (survivors) left_to_mpi().communicators.push_back(survivors.release());  // may hold the dead
      throw lost_during_shrink(*watch, own.confirming_barrier_passed || leaves_here
                                           ? "the barrier that confirms the survivors' communicator (MPI_Ibarrier)"
                                           : "the survivors' first checkpoint on their communicator");
    }
    if (!own.passed_survivors_checkpoint && !leaves_here) {
      report.confirmed_by_word = true;
      if (watch->confirmed_by_word) watch->confirmed_by_word();
    }
    peers_lost = !own.confirming_barrier_passed || !lost.empty();
    report.lost_while_confirming = std::move(lost);
    if (watch->before_disconnect) watch->before_disconnect(peers_lost);
  }
  report.create_seconds = seconds_since(t);

  // Every rank, leavers included, disconnects the old communicator: it was the last user
  // of the connections between leavers and survivors, so ch3 closes them now (close
  // message, acknowledgement) and nothing ties a leaver to the job any more.
  t = Clock::now();
  errors.consumed();
  if (peers_lost) {
    // A rank was lost around the confirmation: freed, never disconnected (a dead peer would
    // make that wait), and the ranks that passed the barrier disconnect their side.
    MPI_Comm old = current.release();
    MPI_Comm_free(&old);
  } else {
    current.disconnect();
  }
  report.disconnect_seconds = seconds_since(t);

  if (watch == nullptr && survivors && prefix && staying > 1) {
    t = Clock::now();
    put_in_order();
    report.create_seconds += seconds_since(t);
  }

  report.left = !survivors;
  report.new_size = size - static_cast<int>(sorted.size());
  report.total_seconds = seconds_since(start);
  return hand_out(std::move(survivors));
}

}  // namespace

// ------------------------------------------------------------------ public functions

std::string current_executable() {
  std::array<char, 4096> buffer{};
  const auto length = ::readlink("/proc/self/exe", buffer.data(), buffer.size() - 1);
  return length > 0 ? std::string(buffer.data(), static_cast<std::size_t>(length)) : std::string();
}

MpiError::MpiError(std::string call, int code)
    : std::runtime_error(call + " failed: " + mpi_error_text(code)),
      call_(std::move(call)),
      code_(code) {}

Communicator::~Communicator() {
  if (!predefined(comm_) && !mpi_finalized()) MPI_Comm_free(&comm_);
}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    Communicator old(std::exchange(comm_, std::exchange(other.comm_, MPI_COMM_NULL)));
  }
  return *this;
}

void Communicator::disconnect() {
  MPI_Comm comm = std::exchange(comm_, MPI_COMM_NULL);
  if (predefined(comm)) return;
  check(MPI_Comm_disconnect(&comm), "MPI_Comm_disconnect");
}

void validate_leaving(int size, std::span<const int> leaving) {
  std::vector<int> seen;
  for (const int rank : leaving) {
    if (rank == 0) throw std::invalid_argument("shrink: rank 0 may not leave the job");
    if (rank < 0 || rank >= size) {
      throw std::invalid_argument("shrink: leaving rank " + std::to_string(rank) +
                                  " is out of range [1, " + std::to_string(size) + ")");
    }
    if (std::find(seen.begin(), seen.end(), rank) != seen.end()) {
      throw std::invalid_argument("shrink: leaving rank " + std::to_string(rank) +
                                  " is listed twice");
    }
    seen.push_back(rank);
  }
}

MPI_Comm grow_by_spawn(MPI_Comm current, int count, const SpawnSpec& spec, GrowReport* report) {
  const auto start = Clock::now();
  GrowReport local;
  GrowReport& r = report ? *report : local;
  const int rank = open_grow(current, r);
  ReturnErrors errors(current);

  // Rank 0 checks the request and tells everyone (with what to spawn, since every rank
  // spawns), so that all ranks throw alike.
  GrowStart header;
  PreparedSpawn spawn;
  std::vector<char> spawn_bytes;
  if (rank == 0) {
    header.count = count;
    std::string error = count < 0 ? "grow: count must not be negative, got " + std::to_string(count)
                        : count > 0 ? prepare_spawn(spec, spawn)
                                    : std::string();
    error.resize(std::min(error.size(), header.error.size()));
    header.error_length = static_cast<int>(error.size());
    std::copy(error.begin(), error.end(), header.error.begin());
    if (error.empty() && count > 0) spawn_bytes = serialize_spawn(spawn, spec.host);
    header.spawn_bytes = static_cast<int>(spawn_bytes.size());
  }
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ibcast(&header, sizeof header, MPI_BYTE, 0, current, &request), "MPI_Ibcast");
  await(request, "MPI_Test");
  if (header.error_length > 0) {
    throw std::invalid_argument(
        std::string(header.error.data(), static_cast<std::size_t>(header.error_length)));
  }

  Communicator grown;
  if (header.count == 0) {
    MPI_Comm copy = MPI_COMM_NULL;
    check(MPI_Comm_dup(current, &copy), "MPI_Comm_dup");
    grown = adopt(copy);
  } else {
    spawn_bytes.resize(static_cast<std::size_t>(header.spawn_bytes));
    check(MPI_Ibcast(spawn_bytes.data(), header.spawn_bytes, MPI_CHAR, 0, current, &request),
          "MPI_Ibcast");
    await(request, "MPI_Test");
    if (rank != 0) deserialize_spawn(spawn_bytes, spawn);
    grown = grow_members(current, header.count, spawn, r);
  }
  finish_report(r, grown.get(), start);
  return hand_out(std::move(grown));
}

std::optional<MPI_Comm> join_parent(GrowReport* report) {
  const auto start = Clock::now();
  MPI_Comm parent_raw = MPI_COMM_NULL;
  check(MPI_Comm_get_parent(&parent_raw), "MPI_Comm_get_parent");
  if (parent_raw == MPI_COMM_NULL) return std::nullopt;
  GrowReport local;
  GrowReport& r = report ? *report : local;
  r = GrowReport{};
  Communicator parent = adopt(parent_raw);
  Communicator grown = join_as_newcomer(parent, r, nullptr);
  finish_report(r, grown.get(), start);
  return hand_out(std::move(grown));
}

MPI_Comm shrink(MPI_Comm current, std::span<const int> leaving, ShrinkReport* report) {
  ShrinkReport local;
  Communicator borrowed(current);
  try {
    return shrink_owned(borrowed, leaving, report ? *report : local, nullptr);
  } catch (...) {
    // Thrown before the disconnect: the caller still owns current.
    (void)borrowed.release();
    throw;
  }
}

// ------------------------------------------------------------------ Membership

Membership::Membership(MPI_Comm initial) {
  ReturnErrors errors(initial);
  MPI_Comm copy = MPI_COMM_NULL;
  check(MPI_Comm_dup(initial, &copy), "MPI_Comm_dup");
  job_ = Communicator(hand_out(adopt(copy)));
  refresh();
}

Membership::Membership(Communicator job, GrowReport joined) : job_(std::move(job)) {
  grows_.push_back(std::move(joined));
  refresh();
}

std::optional<Membership> Membership::join() {
  GrowReport report;
  auto job = join_parent(&report);
  if (!job) return std::nullopt;
  return Membership(Communicator(*job), std::move(report));
}

const GrowReport& Membership::grow(int count, const SpawnSpec& spec) {
  if (!job_) throw std::logic_error("membership: grow called on a rank that left");
  GrowReport report;
  Communicator grown(grow_by_spawn(job_.get(), count, spec, &report));
  return adopt_grown(std::move(grown), std::move(report));
}

const GrowReport& Membership::grow_by_accept(int count, const std::string& port,
                                             std::span<const int> payload) {
  if (!job_) throw std::logic_error("membership: grow called on a rank that left");
  GrowReport report;
  Communicator grown(runtime::grow_by_accept(job_.get(), count, port, payload, &report));
  return adopt_grown(std::move(grown), std::move(report));
}

Membership Membership::join_by_connect(const std::string& port, std::vector<int>& payload) {
  GrowReport report;
  Communicator job(runtime::join_by_connect(port, payload, &report));
  return Membership(std::move(job), std::move(report));
}

const GrowReport& Membership::grow_by_ordinals(int count, const JoinExchange& exchange,
                                               std::span<const int> payload) {
  if (!job_) throw std::logic_error("membership: grow called on a rank that left");
  GrowReport report;
  Communicator grown(runtime::grow_by_ordinals(job_.get(), count, exchange, payload, &report));
  return adopt_grown(std::move(grown), std::move(report));
}

Membership Membership::join_by_ordinal(int ordinal, int count, const JoinExchange& exchange,
                                       std::vector<int>& payload) {
  GrowReport report;
  Communicator job(runtime::join_by_ordinal(ordinal, count, exchange, payload, &report));
  return Membership(std::move(job), std::move(report));
}

const GrowReport& Membership::adopt_grown(Communicator grown, GrowReport report) {
  if (previous_) throw std::logic_error("membership: a grow before the previous grow was confirmed or given up");
  if (keep_previous_) {
    previous_ = std::move(job_);
  } else {
    // The old communicator's connections live on in the grown one: this releases nothing
    // but the handle, but it must be a disconnect so that a later one can close them.
    ReturnErrors errors(job_.get());
    errors.consumed();
    job_.disconnect();
  }
  job_ = std::move(grown);
  refresh();
  grows_.push_back(std::move(report));
  return grows_.back();
}

void Membership::confirm_grow() {
  if (!previous_) return;
  ReturnErrors errors(previous_.get());
  errors.consumed();
  previous_.disconnect();
}

void Membership::give_up_grow() {
  job_ = std::move(previous_);  // frees the grown communicator; none on a rank the grow added
  refresh();
  if (!grows_.empty()) grows_.pop_back();
}

void Membership::adopt_survivors(Communicator survivors) {
  if (previous_) throw std::logic_error("membership: adopt_survivors before the latest grow was confirmed or given up");
  (void)job_.release();  // rebuild_without freed it; never disconnect a communicator with dead ranks
  job_ = std::move(survivors);
  refresh();
}

const ShrinkReport& Membership::shrink(std::span<const int> leaving) {
  if (!job_) throw std::logic_error("membership: shrink called on a rank that left");
  ShrinkReport report;
  job_ = Communicator(shrink_owned(job_, leaving, report, nullptr));
  refresh();
  shrinks_.push_back(report);
  return shrinks_.back();
}

const ShrinkReport& Membership::shrink(std::span<const int> leaving, const ShrinkLossWatch& watch) {
  if (!job_) throw std::logic_error("membership: shrink called on a rank that left");
  if (!watch.complete || !watch.lost) {
    throw std::invalid_argument("membership: shrink's watch needs both complete and lost");
  }
  ShrinkReport report;
  job_ = Communicator(shrink_owned(job_, leaving, report, &watch));
  refresh();
  shrinks_.push_back(report);
  return shrinks_.back();
}

void Membership::refresh() noexcept {
  rank_ = -1;
  size_ = 0;
  if (job_) {
    MPI_Comm_rank(job_.get(), &rank_);
    MPI_Comm_size(job_.get(), &size_);
  }
}

}  // namespace bellows::runtime
