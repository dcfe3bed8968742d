#pragma once
// A grow of a running job by k nodes, simulated (SimGrid 3.32, S4U): how long from the grow's
// start, every new rank started and waiting to connect, until the job is one communicator
// again. Two protocols, after runtime_client/membership:
//
//   sequential  the job accepts and merges each new rank over the whole job, one after the
//               other (the grow by accept before the join tree): k accepts and merges of
//               n + 1, n + 2, ..., n + k ranks;
//   tree        the job's rank 0 accepts each new rank one to one and hands it its place and
//               the port table; the new ranks form one group in ceil(log2 k) rounds of
//               accept/connect and merge; the job accepts and merges that group once
//               (membership_port.cpp, join_tree.cpp).
//
// Each rank is an actor on a host of the platform (platform.hpp). The protocol's own messages
// (connects, plans, port tables, the ready note) travel through SimGrid's network model. An MPI
// step costs its callers a fixed time measured on the development machine (docs/sim.md,
// "Joins": a one-to-one accept, a merge) plus what MPICH's merge exchanges: the two leaders
// swap their groups' process descriptions, each group broadcasts them, and the merged
// communicator agrees on a context id (an allreduce): ceil(log2 p) rounds of one-way latency
// each for the broadcast and twice for the allreduce, and p descriptions over the link.

#include <nlohmann/json.hpp>

#include "bellows/sim/platform.hpp"

namespace bellows::sim {

enum class JoinProtocol { sequential, tree };

struct JoinOptions {
  int job_ranks = 1;  ///< n: ranks before the grow
  int new_ranks = 8;  ///< k
  JoinProtocol protocol = JoinProtocol::tree;
  PlatformOptions platform;
  /// Fixed cost of a one-to-one MPI_Comm_accept / MPI_Comm_connect, the other side already
  /// waiting, seconds.
  double accept_seconds = 0.001;
  /// Fixed cost of an MPI_Intercomm_merge, seconds (the rounds and bytes come on top).
  double merge_seconds = 0.035;
  /// Bytes of one process's description in a merge (MPICH's business card and ids).
  std::uint64_t card_bytes = 256;
  /// Bytes of a control message (a plan, a port name, the ready note).
  std::uint64_t control_bytes = 256;
};

/// An empty string when the options are usable, else what is wrong (naming the option).
[[nodiscard]] std::string validate(const JoinOptions& options);

/// Simulates one grow and returns {"protocol", "job_ranks", "new_ranks", "seconds" (the grow,
/// simulated), "rendezvous_seconds", "tree_seconds", "final_merge_seconds", "rounds",
/// "messages"}. One simulation per process (SimGrid's engine starts once).
[[nodiscard]] nlohmann::json simulate_join(const JoinOptions& options);

[[nodiscard]] const char* to_string(JoinProtocol protocol) noexcept;

}  // namespace bellows::sim
