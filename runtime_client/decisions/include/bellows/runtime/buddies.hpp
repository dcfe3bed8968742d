#pragma once
// Who holds each rank's checkpoint: its buddy, a rank on another node.
//
// Each rank keeps its own checkpoint and a copy in its buddy's memory, so that the loss of
// one node leaves a copy of every rank it ran (the double in-memory checkpoint of Zheng,
// Shi & Kale, "FTC-Charm++: an in-memory checkpoint-based fault tolerant runtime for
// Charm++ and MPI", Cluster 2004). A buddy is the backup a rank would have if it left
// alone (shrink_plan.hpp's rule, choose_backup), restricted to ranks of other nodes: at
// a recovery the lost rank's tiles are where a shrink's hand-off would have put them.
//
// Buddies follow the job's layout: the runtime chooses them again after every resize
// (grow or shrink) and takes a checkpoint under the new buddies at the next iteration
// boundary. Nothing here sends a message or reads a clock; every rank computes the same
// buddies from the same hosts and tile counts.

#include <span>
#include <string>
#include <vector>

namespace bellows::runtime {

/// Per rank: the rank that holds its checkpoint, or -1 for a rank no other node could hold
/// it for (every rank of the job runs on that rank's node). `hosts[r]` is the node rank r
/// runs on, `held[r]` the tiles (over all collections) it holds now. Ranks are taken in
/// rank order; each takes the rank of another node that holds the least, its own tiles
/// plus the copies it already holds counted, ties to the first after it in ring order. With
/// equal counts and one rank per node this is the ring r -> r + 1. A rank is never its own
/// buddy, and two ranks of one node never hold each other's only copy. Throws
/// std::invalid_argument naming the rank for a count that does not match `hosts`, an empty
/// host name or a negative tile count.
[[nodiscard]] std::vector<int> choose_buddies(std::span<const std::string> hosts,
                                              std::span<const long> held);

/// As above, for teams of message logging (`rank_team`, per rank; message_logging.hpp): a
/// rank's buddy is a rank of its own team on another node when its team has one, so that at
/// a recovery the lost rank's tiles go to a rank that rolls back with it and the other
/// teams keep their state (recovery_plan.hpp); otherwise (a team of one rank, or of one
/// node) a rank of another node as above, whose team then rolls back too. An empty
/// `rank_team` is one team. Throws std::invalid_argument as above, and naming the count for
/// a `rank_team` of another length than `hosts`.
[[nodiscard]] std::vector<int> choose_buddies(std::span<const std::string> hosts,
                                              std::span<const long> held,
                                              std::span<const int> rank_team);

/// The ranks whose checkpoints `rank` holds under `buddies`, in rank order.
[[nodiscard]] std::vector<int> wards_of(std::span<const int> buddies, int rank);

}  // namespace bellows::runtime
