// Growth by processes that know their place: whoever started them (under `bellows run`, the
// controller through the nodes' daemons) told each its ordinal in the grow and the grow's size,
// so no process needs the job to learn it, and the job meets the new processes once.
//
// A grow by k over a job of n ranks (JoinExchange: a directory all of them share):
//  1. The new processes form one communicator in ceil(log2 k) rounds (join_tree.hpp). Before
//     each round, the leader of each of the two groups writes round-R-LEADER (the accepting
//     one with the port it opened for the round) and waits for the other's; its group waits,
//     sleeping, on a broadcast of what it found. Both sides are then at the rendezvous before
//     either enters the blocking accept or connect, and a process whose partner never comes
//     notices a called-off grow (JoinExchange::called_off) instead of hanging in MPI.
//  2. New process 0 writes `group`; the job's rank 0, which waits for it (sleeping, as the rest
//     of the job waits on a broadcast from rank 0), writes `accepting`; the new processes wait
//     for that, then one MPI_Comm_accept over the job on the job's port and MPI_Comm_connect
//     over the new group, and one MPI_Intercomm_merge: new process i becomes rank n + i.
//  3. Rank 0 broadcasts the payload over the grown communicator and removes the directory.
// Files on the critical path: one exchange per round and two for the final join, O(log k).

#include "bellows/runtime/membership.hpp"

#include "join_tree.hpp"
#include "membership_support.hpp"

#include <algorithm>
#include <array>
#include <fstream>
#include <stdexcept>
#include <system_error>

namespace bellows::runtime {
namespace {

using namespace membership_detail;

constexpr const char* kGroupFile = "group";
constexpr const char* kAcceptingFile = "accepting";
/// What a process that connects writes for the port of its round.
constexpr const char* kConnects = "-";
/// How often a waiting process asks JoinExchange::called_off.
constexpr auto kCalledOffEvery = std::chrono::milliseconds(20);

/// Broadcast over the grown communicator by the job's rank 0 after the merge.
struct JoinNote {
  int magic = kStepMagic;
  int version = kStepVersion;
  int old_size = 0;
  int payload_size = 0;
  std::array<int, kJoinPayloadInts> payload{};
};

/// What a group's leader found before a round, broadcast to its group.
enum class Verdict : int { go = 0, called_off = 1, timed_out = 2 };

std::string round_file(int round, int leader) {
  return "round-" + std::to_string(round) + "-" + std::to_string(leader);
}

std::int64_t steady_stamp_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

/// Writes `line` and this process's steady clock to `name` in the exchange's directory, through
/// a partial file and a rename. Throws std::runtime_error naming the file.
void write_file(const JoinExchange& exchange, const std::string& name, const std::string& line) {
  std::error_code error;
  std::filesystem::create_directories(exchange.directory, error);
  const auto path = exchange.directory / name;
  const auto partial = exchange.directory / (name + ".partial");
  {
    std::ofstream out(partial, std::ios::trunc);
    out << line << '\n' << steady_stamp_ns() << '\n';
    out.flush();
    if (!out) throw std::runtime_error("join: cannot write " + partial.string());
  }
  std::filesystem::rename(partial, path, error);
  if (error) {
    throw std::runtime_error("join: cannot rename " + partial.string() + " to " + path.string() + ": " +
                             error.message());
  }
}

/// A file of the exchange as its reader found it.
struct Found {
  Verdict verdict = Verdict::go;
  std::string line;  ///< its first line
};

/// Waits, sleeping, for `name` in the exchange's directory (at most exchange.file_timeout,
/// asking called_off every kCalledOffEvery) and records the hand-off in the report.
Found wait_for_file(const JoinExchange& exchange, const std::string& name, GrowReport& report) {
  const auto path = exchange.directory / name;
  const auto start = Clock::now();
  auto next_ask = start + kCalledOffEvery;
  for (;;) {
    std::ifstream in(path);
    std::string line, stamp;
    if (in && std::getline(in, line) && std::getline(in, stamp)) {
      try {
        // From the writing, or from this process starting to wait if it came later.
        const std::int64_t waited_from =
            std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count();
        const std::int64_t from = std::max(std::stoll(stamp), static_cast<long long>(waited_from));
        report.handoff_seconds.push_back(std::max(0.0, static_cast<double>(steady_stamp_ns() - from) * 1e-9));
      } catch (const std::exception&) {
        // a stamp that does not read: the file still counts
      }
      return {Verdict::go, line};
    }
    const auto now = Clock::now();
    if (now - start > exchange.file_timeout) return {Verdict::timed_out, {}};
    if (now >= next_ask) {
      if (exchange.called_off && exchange.called_off()) return {Verdict::called_off, {}};
      next_ask = now + kCalledOffEvery;
    }
    std::this_thread::sleep_for(exchange.poll_interval);
  }
}

/// The leader's verdict reaches its whole group (a broadcast waited for sleeping); every
/// process then throws alike unless it is `go`.
void share_verdict(Verdict& verdict, MPI_Comm group, const JoinExchange& exchange, const std::string& file,
                   int ordinal) {
  int value = static_cast<int>(verdict);
  if (group != MPI_COMM_SELF) {
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibcast(&value, 1, MPI_INT, 0, group, &request), "MPI_Ibcast");
    await(request, "MPI_Test");
  }
  verdict = static_cast<Verdict>(value);
  const auto path = (exchange.directory / file).string();
  if (verdict == Verdict::called_off) {
    throw GrowCalledOff("join: new process " + std::to_string(ordinal) + " stopped waiting for " + path +
                        ": the grow was called off");
  }
  if (verdict == Verdict::timed_out) {
    const auto ms = exchange.file_timeout.count();
    throw std::runtime_error("join: new process " + std::to_string(ordinal) + "'s group waited " +
                             std::to_string(ms) + " ms for " + path + ", which did not appear");
  }
}

}  // namespace

MPI_Comm join_by_ordinal(int ordinal, int count, const JoinExchange& exchange, std::vector<int>& payload,
                         GrowReport* report) {
  if (count < 1) throw std::invalid_argument("join: the grow's count must be at least 1, got " + std::to_string(count));
  if (ordinal < 0 || ordinal >= count) {
    throw std::invalid_argument("join: ordinal " + std::to_string(ordinal) + " is out of range [0, " +
                                std::to_string(count) + ")");
  }
  const auto start = Clock::now();
  GrowReport local;
  GrowReport& r = report ? *report : local;
  r = GrowReport{};
  r.spawn_ordinal = ordinal;
  ReturnErrors errors(MPI_COMM_SELF);

  // 1. The join tree, each round's ports through the exchange.
  std::vector<std::string> opened;
  const auto port_of_round = [&](const JoinRound& joint, MPI_Comm group) {
    const int round = joint.round;
    const bool accepts = joint.accepts;
    const int mine = joint.own_leader();
    const int partner = joint.partner_leader();
    std::string port;
    Verdict verdict = Verdict::go;
    if (ordinal == mine) {
      if (accepts) {
        std::array<char, MPI_MAX_PORT_NAME> name{};
        check(MPI_Open_port(MPI_INFO_NULL, name.data()), "MPI_Open_port");
        port = name.data();
        opened.push_back(port);
      }
      write_file(exchange, round_file(round, mine), accepts ? port : kConnects);
      const Found found = wait_for_file(exchange, round_file(round, partner), r);
      verdict = found.verdict;
      if (!accepts) port = found.line;
    }
    share_verdict(verdict, group, exchange, round_file(round, partner), ordinal);
    return port;
  };
  const auto t_group = Clock::now();
  Communicator group = form_new_group(ordinal, count, port_of_round);
  for (const auto& port : opened) check(MPI_Close_port(port.c_str()), "MPI_Close_port");
  r.group_seconds = seconds_since(t_group);

  // 2. One join of the job, once its rank 0 says it accepts.
  const MPI_Comm local_group = group ? group.get() : MPI_COMM_SELF;
  Verdict verdict = Verdict::go;
  std::string job_port;  // the one the job's rank 0 names: it matters at new process 0 alone
  if (ordinal == 0) {
    write_file(exchange, kGroupFile, std::to_string(r.group_seconds));
    const Found found = wait_for_file(exchange, kAcceptingFile, r);
    verdict = found.verdict;
    job_port = found.line;
  }
  share_verdict(verdict, local_group, exchange, kAcceptingFile, ordinal);
  auto t = Clock::now();
  Communicator grown = join_job(local_group, job_port.c_str(), true);
  r.merge_seconds.push_back(seconds_since(t));
  t = Clock::now();
  group.disconnect();
  r.disconnect_seconds.push_back(seconds_since(t));

  // 3. What the job's rank 0 says.
  JoinNote note;
  note.magic = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ibcast(&note, sizeof note, MPI_BYTE, 0, grown.get(), &request), "MPI_Ibcast");
  await(request, "MPI_Test");
  if (note.magic != kStepMagic || note.version != kStepVersion) {
    throw std::runtime_error("join: the job speaks another grow protocol (magic " + std::to_string(note.magic) +
                             ", version " + std::to_string(note.version) + "; expected version " +
                             std::to_string(kStepVersion) + ")");
  }
  r.old_size = note.old_size;
  const int used = std::clamp(note.payload_size, 0, static_cast<int>(kJoinPayloadInts));
  payload.assign(note.payload.begin(), note.payload.begin() + used);
  finish_report(r, grown.get(), start);
  return hand_out(std::move(grown));
}

MPI_Comm grow_by_ordinals(MPI_Comm current, int count, const JoinExchange& exchange, std::span<const int> payload,
                          GrowReport* report) {
  const auto start = Clock::now();
  GrowReport local;
  GrowReport& r = report ? *report : local;
  const int rank = open_grow(current, r);
  check_grow_request(count, payload.size());
  ReturnErrors errors(current);
  if (count == 0) return grow_by_none(current, r, start);

  // 2. Rank 0 waits for the new processes' group; the job waits, sleeping, on its word.
  struct Ready {
    int found = 0;
    double group_seconds = 0.0;
  } ready;
  if (rank == 0) {
    JoinExchange no_calling_off = exchange;
    no_calling_off.called_off = nullptr;  // the job carries the grow out; only a timeout stops it
    const Found found = wait_for_file(no_calling_off, kGroupFile, r);
    ready.found = found.verdict == Verdict::go ? 1 : 0;
    if (ready.found != 0) {
      try {
        ready.group_seconds = std::stod(found.line);
      } catch (const std::exception&) {
        ready.group_seconds = 0.0;
      }
      write_file(exchange, kAcceptingFile, exchange.job_port);
    }
  }
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ibcast(&ready, sizeof ready, MPI_BYTE, 0, current, &request), "MPI_Ibcast");
  await(request, "MPI_Test");
  if (ready.found == 0) {
    throw std::runtime_error("grow: the " + std::to_string(count) + " new processes were not one group within " +
                             std::to_string(exchange.file_timeout.count()) + " ms (no " +
                             (exchange.directory / kGroupFile).string() + ")");
  }
  r.wait_seconds = seconds_since(start);
  r.group_seconds = ready.group_seconds;

  // One accept over the job, one merge.
  auto t = Clock::now();
  char no_port[1] = {'\0'};  // the port matters at the root alone
  std::string port = exchange.job_port;
  Communicator grown = join_job(current, rank == 0 ? port.data() : no_port, false);
  r.merge_seconds.push_back(seconds_since(t));

  // 3. The payload, and the exchange's files gone.
  JoinNote note;
  note.old_size = r.old_size;
  note.payload_size = static_cast<int>(payload.size());
  std::copy(payload.begin(), payload.end(), note.payload.begin());
  check(MPI_Ibcast(&note, sizeof note, MPI_BYTE, 0, grown.get(), &request), "MPI_Ibcast");
  await(request, "MPI_Test");
  if (rank == 0) {
    std::error_code ignored;
    std::filesystem::remove_all(exchange.directory, ignored);
  }
  finish_report(r, grown.get(), start);
  return hand_out(std::move(grown));
}

}  // namespace bellows::runtime
