// Growth by the ranks that nodes' daemons start: each connects to the port the job opened
// (MPI_Open_port on the job's first rank), and the job accepts them one at a time.
//
// Round k (0-based) of a grow by `count`: the job's communicator C_k (the caller's at k = 0)
// accepts one connection on the port and merges with it into C_{k+1}, the new process
// last; rank 0 then broadcasts over C_{k+1} how many processes the grow takes, how many have
// joined, and the payload (what a joining process must know, such as the iteration it
// starts at), so that the process that just joined takes part in the remaining rounds like
// any member. The intermediate communicators (C_1 .. C_{count-1} and every
// intercommunicator) are disconnected as soon as the next one exists, as in the grow by
// spawn (membership.hpp says why ch3 needs that).

#include "bellows/runtime/membership.hpp"

#include "membership_support.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>

namespace bellows::runtime {
namespace {

using namespace membership_detail;

/// What rank 0 broadcasts after each round.
struct RoundHeader {
  int count = 0;   ///< processes the grow takes
  int joined = 0;  ///< processes that joined so far
  int payload_size = 0;
  std::array<int, kJoinPayloadInts> payload{};
};

void share_header(RoundHeader& header, MPI_Comm comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ibcast(&header, sizeof header, MPI_BYTE, 0, comm, &request), "MPI_Ibcast");
  await(request, "MPI_Test");
}

/// The remaining rounds, on every member of `grown` (which `header.joined` processes have
/// joined); `grown` is an intermediate communicator unless no round remains.
Communicator finish_rounds(Communicator grown, RoundHeader& header, const std::string& port,
                           GrowReport& report) {
  while (header.joined < header.count) {
    const auto t = Clock::now();
    Communicator next = join_job(grown.get(), port.c_str(), false);
    report.merge_seconds.push_back(seconds_since(t));
    const auto d = Clock::now();
    grown.disconnect();
    report.disconnect_seconds.push_back(seconds_since(d));
    grown = std::move(next);
    ++header.joined;
    share_header(header, grown.get());
  }
  return grown;
}

}  // namespace

MPI_Comm grow_by_accept(MPI_Comm current, int count, const std::string& port,
                        std::span<const int> payload, GrowReport* report) {
  const auto start = Clock::now();
  GrowReport local;
  GrowReport& r = report ? *report : local;
  r = GrowReport{};
  check(MPI_Comm_size(current, &r.old_size), "MPI_Comm_size");
  if (count < 0) throw std::invalid_argument("grow: count must not be negative, got " + std::to_string(count));
  if (payload.size() > kJoinPayloadInts)
    throw std::invalid_argument("grow: a payload of " + std::to_string(payload.size()) + " ints exceeds " +
                                std::to_string(kJoinPayloadInts));
  ReturnErrors errors(current);
  if (count == 0) {
    MPI_Comm copy = MPI_COMM_NULL;
    check(MPI_Comm_dup(current, &copy), "MPI_Comm_dup");
    Communicator grown = adopt(copy);
    finish_report(r, grown.get(), start);
    return hand_out(std::move(grown));
  }
  RoundHeader header;
  header.count = count;
  header.payload_size = static_cast<int>(payload.size());
  std::copy(payload.begin(), payload.end(), header.payload.begin());
  // The first round on the caller's communicator, which stays the caller's.
  const auto t = Clock::now();
  Communicator grown = join_job(current, port.c_str(), false);
  r.merge_seconds.push_back(seconds_since(t));
  header.joined = 1;
  share_header(header, grown.get());
  grown = finish_rounds(std::move(grown), header, port, r);
  finish_report(r, grown.get(), start);
  return hand_out(std::move(grown));
}

MPI_Comm join_by_connect(const std::string& port, std::vector<int>& payload, GrowReport* report) {
  const auto start = Clock::now();
  GrowReport local;
  GrowReport& r = report ? *report : local;
  r = GrowReport{};
  Communicator grown;
  {
    ReturnErrors errors(MPI_COMM_SELF);
    grown = join_job(MPI_COMM_SELF, port.c_str(), true);
  }
  r.merge_seconds.push_back(seconds_since(start));
  RoundHeader header;
  share_header(header, grown.get());
  // The job's size before the grow: this process is its last rank, number old_size + joined - 1.
  check(MPI_Comm_size(grown.get(), &r.old_size), "MPI_Comm_size");
  r.old_size -= header.joined;
  r.spawn_ordinal = header.joined - 1;
  payload.assign(header.payload.begin(), header.payload.begin() + header.payload_size);
  grown = finish_rounds(std::move(grown), header, port, r);
  finish_report(r, grown.get(), start);
  return hand_out(std::move(grown));
}

}  // namespace bellows::runtime
