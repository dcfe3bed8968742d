#include "join_tree.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace bellows::runtime::membership_detail {

char* port_row(PortTable& table, int row) {
  return table.data() + static_cast<std::size_t>(row) * MPI_MAX_PORT_NAME;
}
std::size_t table_bytes(int count) {
  return (static_cast<std::size_t>(count) * join_round_count(count) + 1) * MPI_MAX_PORT_NAME;
}
int job_port_row(int count) { return count * join_round_count(count); }

Communicator form_new_group(int ordinal, int count, const RoundPort& port_of_round) {
  Communicator group;  // empty: MPI_COMM_SELF
  for (const JoinRound& round : join_rounds(ordinal, count)) {
    const MPI_Comm local = group ? group.get() : MPI_COMM_SELF;
    const std::string port = port_of_round(round, local);
    MPI_Comm inter_raw = MPI_COMM_NULL;
    if (round.accepts) {
      check(MPI_Comm_accept(port.c_str(), MPI_INFO_NULL, 0, local, &inter_raw), "MPI_Comm_accept");
    } else {
      check(MPI_Comm_connect(port.c_str(), MPI_INFO_NULL, 0, local, &inter_raw), "MPI_Comm_connect");
    }
    Communicator inter = adopt(inter_raw);
    MPI_Comm merged_raw = MPI_COMM_NULL;
    check(MPI_Intercomm_merge(inter.get(), round.accepts ? 0 : 1, &merged_raw), "MPI_Intercomm_merge");
    Communicator merged = adopt(merged_raw);
    inter.disconnect();
    group.disconnect();
    group = std::move(merged);
  }
  return group;
}

Communicator form_new_group(int ordinal, int count, PortTable& table) {
  const int rounds = join_round_count(count);
  return form_new_group(ordinal, count, [&table, rounds](const JoinRound& round, MPI_Comm) {
    return std::string(port_row(table, round.accepting_leader * rounds + round.round));
  });
}

Communicator join_as_newcomer(Communicator& link, GrowReport& report, std::vector<int>* payload) {
  JoinPlan plan;
  plan.magic = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  check(MPI_Irecv(&plan, sizeof plan, MPI_BYTE, 0, kPlanTag, link.get(), &request), "MPI_Irecv");
  await(request, "MPI_Test");
  if (plan.magic != kStepMagic || plan.version != kStepVersion) {
    throw std::runtime_error("join: the job speaks another grow protocol (magic " +
                             std::to_string(plan.magic) + ", version " +
                             std::to_string(plan.version) + "; expected version " +
                             std::to_string(kStepVersion) + ")");
  }
  report.old_size = plan.old_size;
  report.spawn_ordinal = plan.ordinal;
  if (payload != nullptr) {
    const int used = std::clamp(plan.payload_size, 0, static_cast<int>(kJoinPayloadInts));
    payload->assign(plan.payload.begin(), plan.payload.begin() + used);
  }

  // This process's ports, one per round in which it accepts; then the whole table.
  const int rounds = join_round_count(plan.count);
  PortTable own(static_cast<std::size_t>(rounds) * MPI_MAX_PORT_NAME, '\0');
  for (int round = 0; round < rounds; ++round) {
    if (leads_accept_in_round(plan.ordinal, plan.count, round)) {
      check(MPI_Open_port(MPI_INFO_NULL, port_row(own, round)), "MPI_Open_port");
    }
  }
  if (rounds > 0) {
    check(MPI_Send(own.data(), static_cast<int>(own.size()), MPI_CHAR, 0, kPortTag, link.get()),
          "MPI_Send");
  }
  PortTable table(table_bytes(plan.count), '\0');
  check(MPI_Irecv(table.data(), static_cast<int>(table.size()), MPI_CHAR, 0, kTableTag,
                  link.get(), &request),
        "MPI_Irecv");
  await(request, "MPI_Test");

  // One group of new processes.
  auto t = Clock::now();
  Communicator group = form_new_group(plan.ordinal, plan.count, table);
  for (int round = 0; round < rounds; ++round) {
    if (leads_accept_in_round(plan.ordinal, plan.count, round)) {
      check(MPI_Close_port(port_row(own, round)), "MPI_Close_port");
    }
  }
  report.group_seconds = seconds_since(t);
  if (plan.ordinal == 0) {
    GroupReady ready{report.group_seconds};
    check(MPI_Send(&ready, sizeof ready, MPI_BYTE, 0, kReadyTag, link.get()), "MPI_Send");
  }

  // Join the job.
  t = Clock::now();
  Communicator grown =
      join_job(group ? group.get() : MPI_COMM_SELF, port_row(table, job_port_row(plan.count)), true);
  report.merge_seconds.push_back(seconds_since(t));

  // The grown communicator holds the connections now.
  t = Clock::now();
  group.disconnect();
  link.disconnect();
  report.disconnect_seconds.push_back(seconds_since(t));
  return grown;
}

}  // namespace bellows::runtime::membership_detail
