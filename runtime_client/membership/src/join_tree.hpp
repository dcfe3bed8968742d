#pragma once
// The join tree both grows share (membership.cpp: by spawn; membership_port.cpp: by the ranks
// nodes' daemons start): the new processes form one communicator among themselves in
// ceil(log2 k) rounds of pairwise accept/connect and merge, over ports they open and that the
// job hands to all of them in one table; the job then accepts that group once. Each new
// process has a link to the job (its spawn intercommunicator, or the one-to-one
// intercommunicator of the job's first rank's accept) over which it gets its JoinPlan and the
// port table. Internal to libbellows.

#include "membership_support.hpp"

#include "bellows/runtime/join_rounds.hpp"

#include <array>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace bellows::runtime::membership_detail {

/// Sent by the job to each new process. The magic number and version catch a job and a new
/// process built from different versions of this protocol.
constexpr int kStepMagic = 0x42474d53;  // "BGMS"
constexpr int kStepVersion = 4;

struct JoinPlan {
  int magic = kStepMagic;
  int version = kStepVersion;
  int ordinal = 0;   ///< of the process this is sent to
  int count = 0;     ///< processes this grow adds
  int old_size = 0;  ///< size of the communicator when the grow started
  int payload_size = 0;  ///< ints of `payload` in use (grow by accept)
  std::array<int, kJoinPayloadInts> payload{};
};

/// Sent by new process 0 to the job's rank that started or accepted it once the new
/// processes are one group.
struct GroupReady {
  double group_seconds = 0.0;
};

constexpr int kPlanTag = 0x4247;
constexpr int kPortTag = 0x4248;
constexpr int kTableTag = 0x4249;
constexpr int kReadyTag = 0x424a;

/// The port table: for each new process, one MPI_MAX_PORT_NAME row per round of the join
/// tree (empty where it accepts nobody; a port serves one round only, so that a process
/// that connects early cannot be taken by an earlier round's accept), then the job's port.
using PortTable = std::vector<char>;
char* port_row(PortTable& table, int row);
std::size_t table_bytes(int count);
int job_port_row(int count);

/// Before the accept or connect of one round of the join tree, on every process of a group:
/// the port of that round (read at the group's first process only: MPI_Comm_accept's and
/// MPI_Comm_connect's root). `local` is the group's communicator (MPI_COMM_SELF alone).
using RoundPort = std::function<std::string(const JoinRound& round, MPI_Comm local)>;

/// On new process `ordinal` of `count`: the pairwise rounds of the join tree (join_rounds.hpp)
/// that make the new processes one communicator, ordered by ordinal. In each round the
/// accepting group accepts on its leader's port and the connecting group connects; the merge
/// puts the accepting group first. Every intermediate communicator is disconnected. Returns an
/// empty Communicator (MPI_COMM_SELF) for k = 1.
Communicator form_new_group(int ordinal, int count, const RoundPort& port_of_round);
/// The same with the ports of a table every process holds.
Communicator form_new_group(int ordinal, int count, PortTable& table);

/// Everything a new process does to join, with `link` its intercommunicator to the job (the
/// job's side is remote rank 0): receives its JoinPlan, opens its ports and sends their
/// names, receives the table, forms the group, new process 0 tells the job when the group
/// is one, joins the job on the table's job port, and disconnects the group and `link`.
/// `payload`, when not null, receives the plan's payload.
Communicator join_as_newcomer(Communicator& link, GrowReport& report, std::vector<int>* payload);

}  // namespace bellows::runtime::membership_detail
