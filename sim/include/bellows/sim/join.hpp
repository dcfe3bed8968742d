#pragma once
// A grow of a running job by k nodes, simulated (SimGrid 3.32, S4U): how long from the grow's
// start, every new rank started and waiting to connect, until the job is one communicator
// again, and from the request to the last new rank's first task. Three protocols, after
// runtime_client/membership:
//
//   ordinals    every new rank knows its ordinal from its start (the controller gives it); the
//               new ranks form one group in ceil(log2 k) rounds, the two groups' leaders of a
//               round trading files in a shared directory (the accepting one's port) before
//               their accept/connect and merge; new rank 0 writes `group`, the job's rank 0
//               answers `accepting`, and the job accepts and merges that group once
//               (join_by_ordinal.cpp). Nobody meets rank 0 one to one;
//   sequential  the job accepts and merges each new rank over the whole job, one after the
//               other (the grow by accept before the join tree): k accepts and merges of
//               n + 1, n + 2, ..., n + k ranks;
//   tree        the job's rank 0 accepts each new rank one to one and hands it its place and
//               the port table; the new ranks form one group in ceil(log2 k) rounds of
//               accept/connect and merge; the job accepts and merges that group once
//               (membership_port.cpp, join_tree.cpp).
//
// Each rank is an actor on a host of the platform (platform.hpp). The protocol's own messages
// (connects, plans, port tables, the ready note) travel through SimGrid's network model; a file
// of the exchange is there for its reader a measured hand-off after its writing (write, rename,
// the reader's next look), or a network latency if that is longer. An MPI
// step costs its callers a fixed time measured on the development machine (docs/sim.md,
// "Joins": a one-to-one accept, a merge) plus what MPICH's merge exchanges: the two leaders
// swap their groups' process descriptions, each group broadcasts them, and the merged
// communicator agrees on a context id (an allreduce): ceil(log2 p) rounds of one-way latency
// each for the broadcast and twice for the allreduce, and p descriptions over the link.
// From the request to the first task adds, to the grow, what does not depend on k (a new
// rank's start, on every new node at once; the job reaching its iteration's end; expand_onto and
// the first task), measured by bench/join.py at k = 1.

#include <nlohmann/json.hpp>

#include "bellows/sim/platform.hpp"

namespace bellows::sim {

enum class JoinProtocol { sequential, tree, ordinals };

struct JoinOptions {
  int job_ranks = 1;  ///< n: ranks before the grow
  int new_ranks = 8;  ///< k
  JoinProtocol protocol = JoinProtocol::ordinals;
  PlatformOptions platform;
  /// Fixed cost of a one-to-one MPI_Comm_accept / MPI_Comm_connect, the other side already
  /// waiting, seconds.
  double accept_seconds = 0.001;
  /// Fixed cost of an MPI_Intercomm_merge, seconds (the rounds and bytes come on top).
  double merge_seconds = 0.035;
  /// A file of the exchange, from its writing to its reader having it (the writer's steady
  /// clock to the reader's, measured by membership_join_ordinals), seconds.
  double file_seconds = 0.0003;
  /// The part of the time from the request to a new rank's first task that does not depend on
  /// k, seconds: bench/join.py's +1 time less its grow (the rank's start, under the job's
  /// running iteration; the wait for that iteration's end; expand_onto; the first task).
  double fixed_seconds = 0.0;
  /// Bytes of one process's description in a merge (MPICH's business card and ids).
  std::uint64_t card_bytes = 256;
  /// Bytes of a control message (a plan, a port name, the ready note).
  std::uint64_t control_bytes = 256;
};

/// An empty string when the options are usable, else what is wrong (naming the option).
[[nodiscard]] std::string validate(const JoinOptions& options);

/// Simulates one grow and returns {"protocol", "job_ranks", "new_ranks", "seconds" (the grow,
/// simulated), "rendezvous_seconds", "tree_seconds" (ordinals: until the job's rank 0 has the
/// `group` file), "final_merge_seconds", "rounds", "messages" (through the network), "files"
/// (of the exchange), "request_to_first_task_seconds" (fixed_seconds + the grow)}. One
/// simulation per process (SimGrid's engine starts once).
[[nodiscard]] nlohmann::json simulate_join(const JoinOptions& options);

[[nodiscard]] const char* to_string(JoinProtocol protocol) noexcept;

}  // namespace bellows::sim
