// bellows-sim-join: a grow of a running job by k nodes on a simulated machine (SimGrid), with
// ranks that know their ordinals and trade files, the join tree with a rendezvous at rank 0, or
// one accept and merge per new rank. docs/sim.md, "Joins".
//   bellows-sim-join --job-ranks 64 --join 256 --protocol ordinals

#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "bellows/sim/join.hpp"
#include "command_line.hpp"

namespace bs = bellows::sim;

namespace {

constexpr const char* kProgram = "bellows-sim-join";

int fail(const std::string& message) { return bs::fail(kProgram, message); }

}  // namespace

int main(int argc, char** argv) {
  bs::JoinOptions o;
  std::string protocol = "ordinals";
  double accept_us = o.accept_seconds * 1e6, merge_us = o.merge_seconds * 1e6;
  double file_us = o.file_seconds * 1e6, fixed_us = o.fixed_seconds * 1e6;
  CLI::App cli{"A grow of a running job by k nodes on a simulated machine (SimGrid 3.32): from every "
               "new rank waiting to join to the job being one communicator, and from the request to the "
               "last new rank's first task"};
  cli.add_option("--job-ranks", o.job_ranks, "ranks before the grow (default 1)");
  cli.add_option("--join", o.new_ranks, "new ranks, one per node (default 8)");
  cli.add_option("--protocol", protocol,
                 "ordinals (each new rank knows its place; ports traded through files, log2 k rounds, one "
                 "merge), tree (the join tree after a rendezvous at rank 0) or sequential (one accept and "
                 "merge over the job per new rank); default ordinals");
  cli.add_option("--accept-us", accept_us,
                 "fixed cost of a one-to-one accept, microseconds (default measured: docs/sim.md)");
  cli.add_option("--merge-us", merge_us, "fixed cost of a merge, microseconds (default measured)");
  cli.add_option("--file-us", file_us,
                 "a file of the exchange, from its writing to its reader having it, microseconds (default "
                 "measured: docs/sim.md)");
  cli.add_option("--fixed-us", fixed_us,
                 "the part of the time from the request to a new rank's first task that does not depend on "
                 "k (bench/join.py's +1 less its grow), microseconds (default 0)");
  cli.add_option("--card-bytes", o.card_bytes, "bytes of one process's description in a merge (default 256)");
  cli.add_option("--latency-us", o.platform.latency_us, "one-way latency between two nodes, microseconds (default 5)");
  cli.add_option("--bandwidth-gbps", o.platform.bandwidth_gbps, "each node's link, GB/s (default 5)");
  if (auto code = bs::parse_command_line(cli, argc, argv, kProgram)) return *code;
  if (protocol == "ordinals") {
    o.protocol = bs::JoinProtocol::ordinals;
  } else if (protocol == "tree") {
    o.protocol = bs::JoinProtocol::tree;
  } else if (protocol == "sequential") {
    o.protocol = bs::JoinProtocol::sequential;
  } else {
    return fail("--protocol must be ordinals, tree or sequential, got '" + protocol + "'");
  }
  o.accept_seconds = accept_us * 1e-6;
  o.merge_seconds = merge_us * 1e-6;
  o.file_seconds = file_us * 1e-6;
  o.fixed_seconds = fixed_us * 1e-6;
  if (auto error = bs::validate(o); !error.empty()) return fail(error);
  try {
    std::printf("%s\n", bs::simulate_join(o).dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bellows-sim-join: %s\n", e.what());
    return 1;
  }
  return 0;
}
