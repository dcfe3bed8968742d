#include "bellows/runtime/elastic_session.hpp"

#include <bellows/protocol/job_file.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "rank_set_text.hpp"

namespace bellows::runtime {
namespace {

namespace env = protocol::job_environment;
using protocol::job_environment::value_of;

/// The value of variable `name` as a number of at least `least`, or nullopt when it is
/// unset or empty. Throws std::invalid_argument naming the variable and the value.
std::optional<int> number_variable(const char* name, int least, const char* what) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  int value = least - 1;
  try {
    std::size_t used = 0;
    value = std::stoi(text, &used);
    if (text[used] != '\0') value = least - 1;
  } catch (const std::exception&) {
    value = least - 1;
  }
  if (value < least)
    throw std::invalid_argument(std::string(name) + "=" + text + ": expected " + what);
  return value;
}

/// The job's MPI port from the file its first rank wrote; waits up to a minute for it (a rank
/// a daemon started at the job's start may come before the first rank opened the port).
/// Where the job's first rank writes the job's MPI port.
std::filesystem::path job_port_file() {
  return protocol::JobDirectory{value_of(env::kJobDir)}.job_port_file();
}

/// The port the job's port file names now; "" when there is none.
std::string current_job_port(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string port;
  std::getline(in, port);
  return port;
}

std::string read_job_port(const std::filesystem::path& file) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  for (;;) {
    std::ifstream in(file);
    std::string port;
    if (std::getline(in, port) && !port.empty()) return port;
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("the job's port " + file.string() +
                               " did not appear within a minute: has the job's first rank started?");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

int ElasticSession::initial_grid_ranks() {
  if (auto grid = number_variable(kGridRanksVariable, 1, "a positive rank count")) return *grid;
  if (auto initial = number_variable(kInitialRanksVariable, 1, "a positive rank count")) return *initial;
  int world_size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  return world_size;
}

ElasticSession::ElasticSession(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) args_.emplace_back(argv[i]);
  grid_ranks_ = initial_grid_ranks();
  auto spawn = [this](int join_iteration) { return spawn_spec(join_iteration); };
  ElasticJob::Grow accept = [this](Membership& m, int count, int join_iteration,
                                   std::uint64_t resize_id) -> const GrowReport& {
    return accept_ranks(m, count, join_iteration, resize_id);
  };

  if (const std::string join = value_of(env::kJoin); !join.empty()) {
    // Started by a node's daemon: connect to the job's port, at the job's start or an expand.
    if (join != "port")
      throw std::invalid_argument(std::string(env::kJoin) + "=" + join + ": expected port");
    const std::string node = value_of(env::kNode);
    if (node.empty() || value_of(env::kJobDir).empty())
      throw std::invalid_argument(std::string(env::kJoin) + "=port needs " + env::kNode + " and " +
                                  env::kJobDir);
    const auto resize = number_variable(env::kJoinResize, 0, "a resize id (0 or more)");
    const auto ordinal = number_variable(env::kJoinOrdinal, 0, "an ordinal (0 or more)");
    const auto count = number_variable(env::kJoinCount, 1, "a rank count (1 or more)");
    if (!resize || !ordinal || !count)
      throw std::invalid_argument(std::string(env::kJoin) + "=port needs " + env::kJoinResize + ", " +
                                  env::kJoinOrdinal + " and " + env::kJoinCount + " (the controller sets them)");
    if (*ordinal >= *count)
      throw std::invalid_argument(std::string(env::kJoinOrdinal) + "=" + std::to_string(*ordinal) +
                                  " is not below " + env::kJoinCount + "=" + std::to_string(*count));
    // The port named now: when the file names another, the job dropped the resize this rank
    // was started for (rotate_job_port) or ended.
    const auto port_file = job_port_file();
    port_ = read_job_port(port_file);
    JoinExchange exchange;
    exchange.directory = protocol::JobDirectory{value_of(env::kJobDir)}.join_dir(static_cast<std::uint64_t>(*resize));
    exchange.called_off = [port_file, port = port_] { return current_job_port(port_file) != port; };
    std::vector<int> payload;
    std::optional<Membership> connected;
    try {
      connected.emplace(Membership::join_by_ordinal(*ordinal, *count, exchange, payload));
    } catch (const GrowCalledOff& e) {
      throw JoinCalledOff(std::string(e.what()) + ": the job's port changed, so its resize was called off or the job ended");
    } catch (const MpiError& e) {
      if (current_job_port(port_file) == port_) throw;
      throw JoinCalledOff("the job stopped accepting ranks on the port this one was started for (" +
                          std::string(e.what()) + "): its resize was called off or the job ended");
    }
    Membership joined = std::move(*connected);
    if (payload.size() != 2) throw std::runtime_error("the job sent no join iteration and grid size");
    first_iteration_ = payload[0];
    grid_ranks_ = payload[1];
    try {
      job_.emplace(std::move(joined), accept, first_iteration_);
    } catch (const ExpandGivenUp& e) {
      throw JoinCalledOff(e.what());  // a member lost before the expand was confirmed: the job goes on without it
    }
    // Once the grown communicator is confirmed, as the ranks from before do (on_expand_confirmed).
    (void)ControlPlaneLink::gather_nodes(job_->communicator(), node);
    link_ = ControlPlaneLink::from_environment(job_->rank());
    if (link_) link_->attach(*job_);
    job_->on_expand_confirmed(
        [this, node](const ResizeEvent&) { learn_nodes(job_->communicator(), job_->rank(), node); });
    return;
  }

  if (auto join = number_variable(kJoinIterationVariable, 0, "an iteration (0 or more)")) {
    // Spawned by a resize (or by the first process's grow to the initial size).
    auto joined = Membership::join();
    if (!joined) {
      throw std::invalid_argument(std::string(kJoinIterationVariable) +
                                  " is set in a process that no resize spawned");
    }
    first_iteration_ = *join;
    try {
      job_.emplace(std::move(*joined), spawn, first_iteration_);
    } catch (const ExpandGivenUp& e) {
      throw JoinCalledOff(e.what());
    }
    link_ = ControlPlaneLink::from_environment(job_->rank());
    if (link_) link_->attach(*job_);
    return;
  }
  int world_size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const auto initial = number_variable(kInitialRanksVariable, 1, "a positive rank count");
  if (!initial && world_size > 1) {
    // mpiexec -n N: the ranks share one MPI world, so none can leave it.
    ranks_can_leave_ = false;
    job_.emplace(Membership(MPI_COMM_WORLD), spawn);
    return;
  }
  if (initial && world_size != 1) {
    throw std::invalid_argument(std::string(kInitialRanksVariable) + "=" + std::to_string(*initial) +
                                " asks one started process to grow the job, but mpiexec started " +
                                std::to_string(world_size));
  }
  link_ = ControlPlaneLink::from_environment(0);
  Membership membership(MPI_COMM_WORLD);
  if (link_) {
    // Under the control plane the nodes' daemons start the other ranks; they connect here.
    open_job_port();
    if (initial.value_or(1) > 1) {
      accept_ranks(membership, *initial - 1, 0, 0);
      learn_nodes(membership.communicator(), membership.rank(), link_->node());
    }
    job_.emplace(std::move(membership), accept);
    link_->attach(*job_);
    job_->on_expand_confirmed(
        [this](const ResizeEvent&) { learn_nodes(job_->communicator(), job_->rank(), link_->node()); });
    // The ranks of an expand dropped before the job carried it out wait for each other or
    // for the job: a fresh port in the port file tells them they are not waited for.
    link_->on_expand_dropped([this] { rotate_job_port(); });
    return;
  }
  if (initial.value_or(1) > 1) membership.grow(*initial - 1, spawn_spec(0));
  job_.emplace(std::move(membership), spawn);
}

ElasticSession::~ElasticSession() {
  if (recovery_unreported_ && link_) {
    try {
      report_recovery(std::chrono::seconds(5));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bellows: the job's recovery was not reported to the controller: %s\n", e.what());
    }
  }
  if (!opened_port_) return;
  std::error_code ignored;
  std::filesystem::remove(job_port_file(), ignored);
  close_job_port();
}

void ElasticSession::close_job_port() noexcept { close_port(port_); }

void ElasticSession::close_port(const std::string& port) noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!opened_port_ || finalized) return;
  // A process that connected and was then stopped (the expand it came for was called off)
  // leaves a dead connection in the port's queue, which ch3 reports when the port closes:
  // nothing to do about it, and no reason to end the job.
  MPI_Errhandler saved = MPI_ERRHANDLER_NULL;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &saved);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Close_port(port.c_str());
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, saved);
  if (saved != MPI_ERRORS_ARE_FATAL && saved != MPI_ERRORS_RETURN) MPI_Errhandler_free(&saved);
}

void ElasticSession::rotate_job_port() {
  // The new port is in the file before the old one closes: a process that waits for a file of
  // its grow, or whose connect fails, then finds another port there and knows it was not
  // waited for (JoinCalledOff).
  const std::string old = port_;
  open_job_port();
  close_port(old);
}

void ElasticSession::open_job_port() {
  char name[MPI_MAX_PORT_NAME] = {};
  if (const int rc = MPI_Open_port(MPI_INFO_NULL, name); rc != MPI_SUCCESS) throw MpiError("MPI_Open_port", rc);
  port_ = name;
  opened_port_ = true;
  protocol::write_line_atomically(job_port_file(), port_);
}

const GrowReport& ElasticSession::accept_ranks(Membership& membership, int count, int join_iteration,
                                               std::uint64_t resize_id) {
  const int payload[] = {join_iteration, grid_ranks_};
  JoinExchange exchange;
  exchange.directory = protocol::JobDirectory{value_of(env::kJobDir)}.join_dir(resize_id);
  exchange.job_port = port_;
  // The port stays: ranks connect to it only after `accepting` in their own grow's directory,
  // which the job writes for the grow it carries out, so none can come through it out of turn.
  return membership.grow_by_ordinals(count, exchange, payload);
}

void ElasticSession::learn_nodes(MPI_Comm comm, int rank, const std::string& node) {
  auto nodes = ControlPlaneLink::gather_nodes(comm, node);
  if (rank == 0 && link_) link_->set_nodes_by_rank(std::move(nodes));
}

SpawnSpec ElasticSession::spawn_spec(int join_iteration) const {
  SpawnSpec spec;
  spec.command = current_executable();
  spec.args = args_;
  // Rank 0 spawns: at the first grow the new ranks start at 1, at an expand at the size now.
  if (link_) spec.env = link_->spawn_environment(job_ ? job_->size() : 1);
  spec.env.emplace_back(kJoinIterationVariable, std::to_string(join_iteration));
  spec.env.emplace_back(kGridRanksVariable, std::to_string(grid_ranks_));
  return spec;
}

bool ElasticSession::before_iteration(int it) {
  if (link_) link_->poll();
  return job_->apply_pending(it) != ElasticJob::Outcome::left;
}

int ElasticSession::recover(int it, const IterationReport& report) {
  const RecoveryReport recovery = job_->recover(report);
  // The runtime counts its own iterations (report.iteration, from 1); the loop's `it` may
  // have started later (a rank that joined), so resume as far back from `it` as the runtime
  // rolls back from the abandoned iteration.
  const int resume = it - (report.iteration - 1 - static_cast<int>(recovery.iteration));
  // Per failure, what rolled back and how much work it redoes (docs/teams.md): with a team
  // roll-back, the bytes the ranks that kept their state hold in their logs for the replay,
  // summed over them (collective, as the nodes' gather report_survived() does).
  std::string replay;
  const bool by_teams = static_cast<int>(recovery.ranks_rolled_back.size()) < recovery.old_size &&
                        !recovery.ranks_rolled_back.empty();
  if (link_ && !recovery.rolled_back_globally_because.empty()) {
    replay = "; every rank rolled back: " + recovery.rolled_back_globally_because;
  } else if (link_ && by_teams) {
    unsigned long long mine = recovery.log_bytes_for_replay, summed = 0;
    MPI_Allreduce(&mine, &summed, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, communicator());
    if (summed > 0) replay = ", " + std::to_string(summed) + " log bytes kept for the replay";
  }
  std::string detail = "rolled back to iteration " + std::to_string(recovery.iteration) + " on " +
                       std::to_string(size()) + " ranks: ranks " + rank_set_text(recovery.ranks_rolled_back) +
                       " of teams " + rank_set_text(recovery.teams_rolled_back) + " rolled back, " +
                       std::to_string(recovery.iterations_redone) + " completed iterations redone" + replay;
  if (link_ && by_teams && recovery.iterations_redone > 0) {
    // What the replay serves is known once it is over: reported after the interrupted
    // iteration ran again (after_iteration).
    replay_unreported_ = std::move(detail);
  } else {
    replay_unreported_.reset();
    report_survived(std::move(detail));
  }
  return resume;
}

void ElasticSession::report_replayed() {
  // The bytes the logs of the ranks that kept their state served the replay, summed over them
  // (collective: every rank completes the interrupted iteration and gets here).
  unsigned long long mine = 0, summed = 0;
  if (const Runtime* runtime = job_->runtime(); runtime != nullptr && !runtime->recoveries().empty()) {
    mine = runtime->recoveries().back().bytes_replayed;
  }
  MPI_Allreduce(&mine, &summed, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, communicator());
  std::string detail = std::move(*replay_unreported_) + ", " + std::to_string(summed) + " bytes served by the replay";
  replay_unreported_.reset();
  report_survived(std::move(detail));
}

void ElasticSession::adopt_survivors(MPI_Comm survivors, std::span<const int> lost) {
  (void)job_->adopt_survivors(survivors, lost);
  std::string ranks;
  for (const int r : lost) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  report_survived("carried on without ranks {" + ranks + "} on " + std::to_string(size()) +
                  " ranks, nothing rolled back");
}

void ElasticSession::report_survived(std::string detail) {
  if (!link_) return;
  auto nodes = ControlPlaneLink::gather_nodes(communicator(), link_->node());
  if (rank() != 0) return;
  link_->set_nodes_by_rank(std::move(nodes));
  if (!opened_port_) {
    // The job's first rank was lost and this survivor is rank 0 now: new ranks of an expand
    // connect here, on a port of its own.
    open_job_port();
    link_->on_expand_dropped([this] { rotate_job_port(); });
  }
  recovery_unreported_ = UnreportedRecovery{static_cast<std::uint32_t>(size()), std::move(detail)};
  report_recovery(std::chrono::milliseconds(0));
}

void ElasticSession::report_recovery(std::chrono::milliseconds wait) {
  // The ranks notice a loss through MPI within milliseconds; the controller's word of it
  // (kRanksLost, about 0.25 s after a rank's death) may still be on its way. The job goes on
  // meanwhile: the recovery is reported after a later iteration, or at the session's end.
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    link_->poll();
    if (link_->failures().size() > failures_reported_) break;
    if (std::chrono::steady_clock::now() >= deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  failures_reported_ = link_->failures().size();
  link_->report_recovered(link_->failures().back().failure_id, recovery_unreported_->ranks,
                          recovery_unreported_->detail);
  recovery_unreported_.reset();
}

void ElasticSession::after_iteration(int it, const IterationReport& report) {
  job_->after_iteration(report);
  if (replay_unreported_ && report.replaying_ranks.empty()) report_replayed();
  if (!link_) return;
  std::optional<ControlPlaneLink::JobShape> shape;
  if (rank() == 0 && job_->runtime() != nullptr) {
    // Reweighting the graph is linear in its tasks: at most once a second, which is still
    // more often than the controller's fastest tick reads it.
    const auto now = std::chrono::steady_clock::now();
    if (!job_shape_ || now - job_shape_at_ >= std::chrono::seconds(1)) {
      job_shape_ = ControlPlaneLink::JobShape{job_->runtime()->graph_profile(), job_->runtime()->lanes()};
      job_shape_at_ = now;
    }
    shape = job_shape_;
  }
  const bool message_log_on = job_->runtime() != nullptr && !job_->runtime()->teams().empty();
  link_->publish(report, it + 1, shape, message_log_on);
  if (recovery_unreported_) report_recovery(std::chrono::milliseconds(0));
}

}  // namespace bellows::runtime
