// Growth by the ranks that nodes' daemons start: each connects to the port the job opened
// (MPI_Open_port on the job's first rank), and they join in O(log k) rounds.
//
// A grow by k over a job of n ranks:
//  1. Rendezvous: the job's rank 0 accepts each new process on the job's port, one to one
//     (MPI_COMM_SELF on both sides, so that an accept costs the same however large the job
//     is), in the order they connect, and sends it its JoinPlan (ordinal, count, old size,
//     the payload); the process answers with the ports it opens for the join tree.
//  2. Rank 0 opens a port for the final join and sends every new process the table of
//     ports. The other ranks of the job wait, sleeping.
//  3. The new processes form one communicator in ceil(log2 k) rounds (join_tree.hpp).
//  4. One MPI_Comm_accept over the job and MPI_Comm_connect over the new processes'
//     communicator, then one MPI_Intercomm_merge: the job's ranks keep their numbers and
//     new process i becomes rank n + i.
//  5. The one-to-one intercommunicators are disconnected and the ports closed.
// Before, the job accepted and merged each new process over the whole job, one after the
// other, each costing more than the last as the communicator grew; now the job takes part
// in one accept and merge per grow, and only rank 0's cheap one-to-one accepts remain one
// per process.

#include "bellows/runtime/membership.hpp"

#include "join_tree.hpp"
#include "membership_support.hpp"

#include <algorithm>
#include <stdexcept>

namespace bellows::runtime {
namespace {

using namespace membership_detail;

/// Steps 1, 2 and 5 on the job's rank 0, as far as the new processes being one group:
/// returns the one-to-one links, the table (with the final port) and new process 0's report.
struct Rendezvous {
  std::vector<Communicator> links;
  PortTable table;
  GroupReady ready;
};

Rendezvous meet_new_processes(int count, int old_size, const std::string& port,
                              std::span<const int> payload, GrowReport& report) {
  Rendezvous out;
  const int rounds = join_round_count(count);
  out.table.assign(table_bytes(count), '\0');
  std::vector<JoinPlan> plans(static_cast<std::size_t>(count));
  std::vector<MPI_Request> requests;
  for (int i = 0; i < count; ++i) {
    MPI_Comm link_raw = MPI_COMM_NULL;
    const auto t = Clock::now();
    check(MPI_Comm_accept(port.c_str(), MPI_INFO_NULL, 0, MPI_COMM_SELF, &link_raw),
          "MPI_Comm_accept");
    report.accept_seconds.push_back(seconds_since(t));
    out.links.push_back(adopt(link_raw));
    auto& plan = plans[static_cast<std::size_t>(i)];
    plan.ordinal = i;
    plan.count = count;
    plan.old_size = old_size;
    plan.payload_size = static_cast<int>(payload.size());
    std::copy(payload.begin(), payload.end(), plan.payload.begin());
    requests.emplace_back();
    check(MPI_Isend(&plan, sizeof(JoinPlan), MPI_BYTE, 0, kPlanTag, out.links.back().get(),
                    &requests.back()),
          "MPI_Isend");
    if (rounds > 0) {
      requests.emplace_back();
      check(MPI_Irecv(port_row(out.table, i * rounds), rounds * MPI_MAX_PORT_NAME, MPI_CHAR, 0,
                      kPortTag, out.links.back().get(), &requests.back()),
            "MPI_Irecv");
    }
  }
  for (auto& request : requests) await(request, "MPI_Test");
  requests.clear();
  check(MPI_Open_port(MPI_INFO_NULL, port_row(out.table, job_port_row(count))), "MPI_Open_port");
  for (auto& link : out.links) {
    requests.emplace_back();
    check(MPI_Isend(out.table.data(), static_cast<int>(out.table.size()), MPI_CHAR, 0, kTableTag,
                    link.get(), &requests.back()),
          "MPI_Isend");
  }
  for (auto& request : requests) await(request, "MPI_Test");
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Irecv(&out.ready, sizeof out.ready, MPI_BYTE, 0, kReadyTag, out.links.front().get(),
                  &request),
        "MPI_Irecv");
  await(request, "MPI_Test");
  return out;
}

}  // namespace

MPI_Comm grow_by_accept(MPI_Comm current, int count, const std::string& port,
                        std::span<const int> payload, GrowReport* report) {
  const auto start = Clock::now();
  GrowReport local;
  GrowReport& r = report ? *report : local;
  const int rank = open_grow(current, r);
  check_grow_request(count, payload.size());
  ReturnErrors errors(current);
  if (count == 0) return grow_by_none(current, r, start);
  Rendezvous met;
  if (rank == 0) met = meet_new_processes(count, r.old_size, port, payload, r);
  // Every rank of the job waits, sleeping, until the new processes are one group.
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Ibcast(&met.ready, sizeof met.ready, MPI_BYTE, 0, current, &request), "MPI_Ibcast");
  await(request, "MPI_Test");
  r.wait_seconds = seconds_since(start);
  r.group_seconds = met.ready.group_seconds;

  const auto t = Clock::now();
  // The port matters at the root alone.
  char no_port[1] = {'\0'};
  Communicator grown =
      join_job(current, rank == 0 ? port_row(met.table, job_port_row(count)) : no_port, false);
  r.merge_seconds.push_back(seconds_since(t));
  const auto d = Clock::now();
  if (rank == 0) check(MPI_Close_port(port_row(met.table, job_port_row(count))), "MPI_Close_port");
  for (auto& link : met.links) link.disconnect();
  r.disconnect_seconds.push_back(seconds_since(d));
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
    MPI_Comm link_raw = MPI_COMM_NULL;
    check(MPI_Comm_connect(port.c_str(), MPI_INFO_NULL, 0, MPI_COMM_SELF, &link_raw),
          "MPI_Comm_connect");
    Communicator link = adopt(link_raw);
    grown = join_as_newcomer(link, r, &payload);
  }
  finish_report(r, grown.get(), start);
  return hand_out(std::move(grown));
}

}  // namespace bellows::runtime
