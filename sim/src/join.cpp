#include "bellows/sim/join.hpp"

#include <simgrid/s4u.hpp>

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "bellows/runtime/join_rounds.hpp"
#include "simgrid_engine.hpp"

namespace bellows::sim {

namespace s4u = simgrid::s4u;

namespace {

int ceil_log2(int p) {
  int rounds = 0;
  for (int step = 1; step < p; step *= 2) ++rounds;
  return rounds;
}

/// What the protocol's messages carry: the sender's ordinal (new ranks) or nothing.
struct Note {
  int ordinal = -1;
};

/// A file of the exchange (JoinExchange): when it was written.
struct FileNote {
  double written_at = 0.0;
};

s4u::Mailbox* box(const std::string& name) { return s4u::Mailbox::by_name(name); }

/// The grow as the actors see it; times in simulated seconds.
struct Grow {
  JoinOptions o;
  double rendezvous_end = 0.0;
  double tree_end = 0.0;
  double end = 0.0;
  std::uint64_t messages = 0;
  std::uint64_t files = 0;

  /// An accept and merge that `p` processes take part in (the fixed costs, then the
  /// exchange of process descriptions and the rounds of the broadcast and the allreduce).
  [[nodiscard]] double merge_cost(int p) const {
    const double one_way = o.platform.latency_us * 1e-6;
    const double bytes = static_cast<double>(o.card_bytes) * p;
    return o.accept_seconds + o.merge_seconds + 3.0 * ceil_log2(p) * one_way +
           one_way + bytes / (o.platform.bandwidth_gbps * 1e9);
  }

  void send(s4u::Mailbox* to, int ordinal) {
    ++messages;
    to->put(new Note{ordinal}, o.control_bytes);
  }
  s4u::CommPtr send_async(s4u::Mailbox* to, int ordinal) {
    ++messages;
    return to->put_async(new Note{ordinal}, o.control_bytes);
  }
  /// One-way latency times the rounds of a broadcast over `p` processes.
  [[nodiscard]] double broadcast_cost(int p) const { return ceil_log2(p) * o.platform.latency_us * 1e-6; }

  /// A file of the exchange written now (appears by rename in the shared directory).
  void write_file(const std::string& name) {
    ++files;
    box("file-" + name)->put_init(new FileNote{s4u::Engine::get_clock()}, 0)->detach();
  }
  /// Waits for a file of the exchange: it is there for its reader o.file_seconds after its
  /// writing (the measured hand-off: write, rename, the reader's next look), at the earliest.
  void wait_file(const std::string& name) const {
    auto* note = box("file-" + name)->get<FileNote>();
    const double visible = note->written_at + o.file_seconds;
    delete note;
    if (visible > s4u::Engine::get_clock()) s4u::this_actor::sleep_until(visible);
  }

  static int receive(s4u::Mailbox* from) {
    auto* note = from->get<Note>();
    const int ordinal = note->ordinal;
    delete note;
    return ordinal;
  }
};

s4u::Mailbox* new_rank_box(int ordinal) { return box("new-" + std::to_string(ordinal)); }
s4u::Mailbox* tree_port(int block, int round) {
  return box("tree-" + std::to_string(block) + "-" + std::to_string(round));
}

// ---------------------------------------------------------------- the join tree
void tree_root(Grow& g) {
  const int k = g.o.new_ranks;
  std::vector<s4u::CommPtr> sends;
  // Rendezvous: one one-to-one accept per new rank, in the order they connect; the plan goes
  // out at once (MPI_Isend) while the next accept waits.
  for (int i = 0; i < k; ++i) {
    const int ordinal = Grow::receive(box("job-port"));
    s4u::this_actor::sleep_for(g.o.accept_seconds);
    sends.push_back(g.send_async(new_rank_box(ordinal), i));
  }
  for (int i = 0; i < k; ++i) (void)Grow::receive(box("root-ports"));
  s4u::Comm::wait_all(sends);
  sends.clear();
  for (int i = 0; i < k; ++i) sends.push_back(g.send_async(box("table-" + std::to_string(i)), -1));
  s4u::Comm::wait_all(sends);
  g.rendezvous_end = s4u::Engine::get_clock();
  (void)Grow::receive(box("root-ready"));
  g.tree_end = s4u::Engine::get_clock();
  // The job accepts the new ranks' group once and merges with it.
  (void)Grow::receive(box("final-port"));
  s4u::this_actor::sleep_for(g.merge_cost(g.o.job_ranks + k));
  g.end = s4u::Engine::get_clock();
}

void tree_new_rank(Grow& g, int arrival) {
  const int k = g.o.new_ranks;
  g.send(box("job-port"), arrival);
  s4u::this_actor::sleep_for(g.o.accept_seconds);  // its side of the accept
  const int ordinal = Grow::receive(new_rank_box(arrival));
  g.send(box("root-ports"), ordinal);
  (void)Grow::receive(box("table-" + std::to_string(ordinal)));
  // The rounds of join_tree.cpp, as the group leaders play them: the group that starts at a
  // multiple of 2s accepts the group that starts s after it; a rank that connects as the
  // upper group's leader is a member from then on and its time follows its new leader's.
  for (const runtime::JoinRound& r : runtime::join_rounds(ordinal, k)) {
    if (r.accepts) {
      (void)Grow::receive(tree_port(r.accepting_leader, r.round));
    } else {
      g.send(tree_port(r.accepting_leader, r.round), ordinal);
    }
    s4u::this_actor::sleep_for(g.merge_cost(r.own_size + r.partner_size));
    if (!r.accepts) return;  // a member of the accepting group now
  }
  // The group is one: its leader tells the job and joins it.
  g.send(box("root-ready"), ordinal);
  g.send(box("final-port"), ordinal);
}

// ---------------------------------------------------------------- ordinals and files
// join_by_ordinal.cpp: every new rank knows its ordinal; before each round the two groups'
// leaders trade files (the accepting one's port), then their groups hear it by a broadcast and
// accept/connect and merge; new rank 0 writes `group`, the job's rank 0 answers `accepting`,
// and the job accepts the group once and broadcasts the payload over the grown communicator.
std::string round_file(int round, int leader) {
  return "round-" + std::to_string(round) + "-" + std::to_string(leader);
}

void ordinals_root(Grow& g) {
  const int n = g.o.job_ranks, k = g.o.new_ranks;
  g.wait_file("group");
  g.tree_end = s4u::Engine::get_clock();
  g.write_file("accepting");
  s4u::this_actor::sleep_for(g.broadcast_cost(n));  // the job hears it from rank 0
  (void)Grow::receive(box("final-port"));           // the new group's connect
  s4u::this_actor::sleep_for(g.merge_cost(n + k) + g.broadcast_cost(n + k));  // then the payload
  g.end = s4u::Engine::get_clock();
}

void ordinals_new_rank(Grow& g, int ordinal) {
  const int k = g.o.new_ranks;
  int size = 1;
  for (const runtime::JoinRound& r : runtime::join_rounds(ordinal, k)) {
    // A rank still playing here leads its group: the two leaders trade files.
    g.write_file(round_file(r.round, ordinal));
    g.wait_file(round_file(r.round, r.partner_leader()));
    s4u::this_actor::sleep_for(g.broadcast_cost(r.own_size) + g.merge_cost(r.own_size + r.partner_size));
    if (!r.accepts) return;  // a member of the accepting group now
    size = r.own_size + r.partner_size;
  }
  g.write_file("group");
  g.wait_file("accepting");
  s4u::this_actor::sleep_for(g.broadcast_cost(size));
  g.send(box("final-port"), ordinal);
}

// ---------------------------------------------------------------- one accept per rank
void sequential_root(Grow& g) {
  for (int i = 0; i < g.o.new_ranks; ++i) {
    const int arrival = Grow::receive(box("job-port"));
    // The accept and merge over the job so far and the new rank, then rank 0's broadcast of
    // how many have joined (one round per doubling of the communicator).
    const int p = g.o.job_ranks + i + 1;
    s4u::this_actor::sleep_for(g.merge_cost(p));
    g.send(new_rank_box(arrival), i);
    s4u::this_actor::sleep_for(ceil_log2(p) * g.o.platform.latency_us * 1e-6);
  }
  g.rendezvous_end = g.tree_end = g.end = s4u::Engine::get_clock();
}

void sequential_new_rank(Grow& g, int arrival) {
  g.send(box("job-port"), arrival);
  (void)Grow::receive(new_rank_box(arrival));
}


}  // namespace

const char* to_string(JoinProtocol protocol) noexcept {
  switch (protocol) {
    case JoinProtocol::ordinals: return "ordinals";
    case JoinProtocol::tree: return "tree";
    case JoinProtocol::sequential: return "sequential";
  }
  return "?";
}

std::string validate(const JoinOptions& o) {
  if (o.job_ranks < 1) return "--job-ranks must be at least 1, got " + std::to_string(o.job_ranks);
  if (o.new_ranks < 1) return "--join must be at least 1, got " + std::to_string(o.new_ranks);
  if (!(o.accept_seconds >= 0.0) || !std::isfinite(o.accept_seconds)) {
    return "--accept-us must be at least 0, got " + format_number(o.accept_seconds * 1e6);
  }
  if (!(o.merge_seconds >= 0.0) || !std::isfinite(o.merge_seconds)) {
    return "--merge-us must be at least 0, got " + format_number(o.merge_seconds * 1e6);
  }
  if (!(o.file_seconds >= 0.0) || !std::isfinite(o.file_seconds)) {
    return "--file-us must be at least 0, got " + format_number(o.file_seconds * 1e6);
  }
  if (!(o.fixed_seconds >= 0.0) || !std::isfinite(o.fixed_seconds)) {
    return "--fixed-us must be at least 0, got " + format_number(o.fixed_seconds * 1e6);
  }
  return validate(o.platform);
}

nlohmann::json simulate_join(const JoinOptions& options) {
  if (auto error = validate(options); !error.empty()) throw std::invalid_argument(error);
  const std::string platform = write_platform(options.platform, options.job_ranks + options.new_ranks);
  SimGridEngine engine("bellows-sim-join", platform);
  std::remove(platform.c_str());

  Grow grow{options};
  const JoinProtocol protocol = options.protocol;
  s4u::Actor::create("job-rank-0", s4u::Host::by_name(host_name(0)), [&grow, protocol] {
    switch (protocol) {
      case JoinProtocol::ordinals: ordinals_root(grow); break;
      case JoinProtocol::tree: tree_root(grow); break;
      case JoinProtocol::sequential: sequential_root(grow); break;
    }
  });
  for (int i = 0; i < options.new_ranks; ++i) {
    s4u::Actor::create("new-rank-" + std::to_string(i), s4u::Host::by_name(host_name(options.job_ranks + i)),
                       [&grow, protocol, i] {
                         switch (protocol) {
                           case JoinProtocol::ordinals: ordinals_new_rank(grow, i); break;
                           case JoinProtocol::tree: tree_new_rank(grow, i); break;
                           case JoinProtocol::sequential: sequential_new_rank(grow, i); break;
                         }
                       });
  }
  engine.get().run();
  const bool sequential = protocol == JoinProtocol::sequential;
  return {{"protocol", to_string(protocol)},
          {"job_ranks", options.job_ranks},
          {"new_ranks", options.new_ranks},
          {"seconds", grow.end},
          {"rendezvous_seconds", grow.rendezvous_end},
          {"tree_seconds", grow.tree_end - grow.rendezvous_end},
          {"final_merge_seconds", grow.end - grow.tree_end},
          {"rounds", sequential ? options.new_ranks : runtime::join_round_count(options.new_ranks)},
          {"messages", grow.messages},
          {"files", grow.files},
          {"request_to_first_task_seconds", options.fixed_seconds + grow.end}};
}

}  // namespace bellows::sim
