#include "bellows/runtime/control_plane_link.hpp"
#include "bellows/runtime/loss_notices.hpp"

#include <bellows/protocol/job_directory.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "gather_strings.hpp"

namespace bellows::runtime {
namespace {

namespace env = protocol::job_environment;
using protocol::job_environment::value_of;
using protocol::ResizeOutcome;

// The process's attached link, for request_resize() (one per process, as its ControlChannel).
std::atomic<ControlPlaneLink*> g_attached{nullptr};

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    items.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  return items;
}

std::string join_list(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) {
    if (!text.empty()) text += ',';
    text += item;
  }
  return text;
}

}  // namespace

std::optional<ControlPlaneLink> ControlPlaneLink::from_environment(int rank) {
  const std::string job_dir = value_of(kJobDirVariable);
  if (job_dir.empty()) return std::nullopt;
  const std::vector<std::string> nodes = split_list(value_of(kNodesVariable));
  if (nodes.empty())
    throw std::invalid_argument(std::string(kNodesVariable) + " is empty although " +
                                kJobDirVariable + " is set");
  std::string node = value_of(env::kNode);
  const std::string expand_nodes = value_of(kExpandNodesVariable);
  if (!node.empty()) {
    // Started by its node's daemon, which said where.
  } else if (!expand_nodes.empty()) {
    const std::vector<std::string> hosts = split_list(expand_nodes);
    int first = -1;
    try {
      first = std::stoi(value_of(kExpandFirstRankVariable));
    } catch (const std::exception&) {
      first = -1;
    }
    if (first < 1 || rank < first || rank - first >= static_cast<int>(hosts.size())) {
      throw std::invalid_argument(std::string(kExpandNodesVariable) + "=" + expand_nodes + " and " +
                                  kExpandFirstRankVariable + "=" +
                                  value_of(kExpandFirstRankVariable) + " name no node for rank " +
                                  std::to_string(rank));
    }
    node = hosts[static_cast<std::size_t>(rank - first)];
  } else {
    if (rank < 0 || rank >= static_cast<int>(nodes.size()))
      throw std::invalid_argument(std::string(kNodesVariable) + "=" + join_list(nodes) +
                                  " names no node for rank " + std::to_string(rank));
    node = nodes[static_cast<std::size_t>(rank)];
  }
  const auto uri = protocol::JobDirectory{job_dir}.daemon_uri_file(node);
  ControlChannel channel = ControlChannel::connect("file:" + uri.string());
  return ControlPlaneLink(std::move(channel), node, nodes);
}

ControlPlaneLink::~ControlPlaneLink() {
  ControlPlaneLink* self = this;
  g_attached.compare_exchange_strong(self, nullptr);
}

ResizeAnswer request_resize(int delta_nodes) {
  ControlPlaneLink* link = g_attached.load();
  if (link == nullptr)
    throw std::logic_error("request_resize: this process is not attached to a control plane "
                           "(the job was not started by bellows run)");
  return link->request_resize(delta_nodes);
}

void ControlPlaneLink::attach(ElasticJob& job) {
  job_ = &job;
  g_attached.store(this);
  channel_.on_expand([this](const ExpandEvent& e) {
    if (job_->rank() != 0) return;
    expand_hosts_ = e.hosts;
    const std::string reason =
        "controller resize " + std::to_string(e.resize_id) + ": expand onto " + join_list(e.hosts);
    job_->request_expand(static_cast<int>(e.count), reason, e.resize_id);
  });
  channel_.on_shrink([this](const ShrinkEvent& e) {
    if (job_->rank() != 0) return;
    std::vector<int> ranks;
    for (const std::string& node : e.nodes) {
      const auto it = std::ranges::find(nodes_by_rank_, node);
      if (it == nodes_by_rank_.end()) {
        report({e.resize_id, ResizeOutcome::refused, static_cast<std::uint32_t>(job_->size()),
                {}, "node " + node + " runs no rank of this job"});
        return;
      }
      const int rank = static_cast<int>(it - nodes_by_rank_.begin());
      if (std::ranges::find(ranks, rank) == ranks.end()) ranks.push_back(rank);
    }
    const std::string reason =
        "controller resize " + std::to_string(e.resize_id) + ": release " + join_list(e.nodes);
    job_->request_shrink(std::move(ranks), reason, e.resize_id);
  });
  // The controller calls a resize off: the job drops it unless it has carried it out, and
  // says which (the controller follows the job's answer, so both agree on the membership).
  channel_.on_abort([this](const AbortEvent& e) {
    if (job_->rank() != 0) return;
    const auto id = static_cast<unsigned long long>(e.resize_id);
    if (job_->cancel(e.resize_id) || !settled_.contains(e.resize_id)) {
      const bool expand = !expand_hosts_.empty();
      expand_hosts_.clear();
      if (expand && on_expand_dropped_) on_expand_dropped_();
      std::fprintf(stderr, "bellows: resize %llu called off by the controller (%s): dropped\n", id,
                   e.reason.c_str());
      report({e.resize_id, ResizeOutcome::cancelled, static_cast<std::uint32_t>(job_->size()), {},
              e.reason});
      return;
    }
    std::fprintf(stderr, "bellows: resize %llu called off by the controller (%s) after the job carried "
                 "it out: it stands\n", id, e.reason.c_str());
  });
  // A failure reaches every rank: each keeps it; what the job does about it is the runtime's.
  channel_.on_ranks_lost([this](const RanksLostEvent& e) {
    failures_.push_back(e);
    if (on_ranks_lost_) on_ranks_lost_(e);
  });

  job.on_resize_start([this](const ResizeEvent&) { rank_before_ = job_->rank(); });
  job.on_resize_commit([this](const ResizeEvent& e) {
    if (e.left) {
      report({e.resize_id, ResizeOutcome::left, static_cast<std::uint32_t>(e.to_ranks),
              {static_cast<std::uint32_t>(rank_before_)}, ""});
      return;
    }
    if (job_->rank() != 0) return;
    settled_.insert(e.resize_id);
    protocol::ResizeReport r{e.resize_id, ResizeOutcome::committed,
                             static_cast<std::uint32_t>(e.to_ranks), {}, ""};
    if (e.kind == ResizeEvent::Kind::expand) {
      for (int i = 0; i < e.add; ++i) {
        // Ranks that connected to the job's port were named by gather_nodes(); spawned
        // ranks are on the expand's nodes in order.
        if (static_cast<int>(nodes_by_rank_.size()) < e.to_ranks)
          nodes_by_rank_.push_back(i < static_cast<int>(expand_hosts_.size())
                                       ? expand_hosts_[static_cast<std::size_t>(i)]
                                       : std::string("(unknown)"));
        r.ranks.push_back(static_cast<std::uint32_t>(e.from_ranks + i));
      }
      expand_hosts_.clear();
    } else {
      std::vector<int> leaving = e.remove;
      std::ranges::sort(leaving, std::greater<>());
      for (int rank : leaving) {
        if (rank < static_cast<int>(nodes_by_rank_.size()))
          nodes_by_rank_.erase(nodes_by_rank_.begin() + rank);
        r.ranks.push_back(static_cast<std::uint32_t>(rank));
      }
    }
    if (r.resize_id != 0) report(r);
  });
  job.on_resize_refused([this](const ResizeEvent& e) {
    if (job_->rank() != 0) return;
    expand_hosts_.clear();
    // An expand given up after its confirmation (in expand_onto) had the grown job's nodes
    // gathered already (on_expand_confirmed): the ranks it was adding, at the end, are gone.
    if (nodes_by_rank_.size() > static_cast<std::size_t>(job_->size())) {
      nodes_by_rank_.resize(static_cast<std::size_t>(job_->size()));
    }
    settled_.insert(e.resize_id);
    if (e.resize_id != 0)
      report({e.resize_id, ResizeOutcome::refused, static_cast<std::uint32_t>(e.from_ranks), {},
              e.reason});
  });
}

void ControlPlaneLink::poll() { channel_.poll_events(); }

std::vector<std::string> ControlPlaneLink::gather_nodes(MPI_Comm comm, const std::string& node) {
  constexpr std::size_t kWidth = 256;
  if (node.size() >= kWidth)
    throw std::invalid_argument("node name " + node + " is longer than " + std::to_string(kWidth - 1) +
                                " characters");
  return gather_strings(comm, node);
}

void ControlPlaneLink::publish(const IterationReport& report, int iterations_done,
                               const std::optional<JobShape>& shape, bool message_log_on) {
  RankMetrics r;
  r.rank = static_cast<std::uint64_t>(job_ != nullptr ? job_->rank() : 0);
  protocol::Metrics& m = r.metrics;
  m.ready_tasks = static_cast<std::uint64_t>(report.local.ready_tasks_mean + 0.5);
  const double busy = report.local.busy_seconds;
  const double total = busy + report.local.idle_seconds;
  m.busy_fraction = total > 0.0 ? std::clamp(busy / total, 0.0, 1.0) : 0.0;
  m.steals_sent = report.local.steal.requests_sent;
  m.steals_failed = std::min(report.local.steal.requests_failed, m.steals_sent);
  m.iteration_seconds = report.seconds;
  m.iteration = static_cast<std::uint64_t>(iterations_done);
  if (r.rank == 0) m.job_gflops = report.gflops();
  if (shape) {
    m.graph_work_seconds = shape->graph.work_seconds;
    m.graph_critical_path_seconds = std::min(shape->graph.critical_path_seconds, shape->graph.work_seconds);
    m.lanes_per_rank = static_cast<std::uint64_t>(std::max(shape->lanes_per_rank, 1));
  }
  if (message_log_on) {
    m.message_log_on = 1;
    m.message_log_bytes_held = report.local.message_log.bytes_held;
    m.message_log_entries_held = report.local.message_log.entries_held;
  }
  try {
    channel_.publish_metrics(r);
  } catch (const ControlChannelError& e) {
    std::fprintf(stderr, "bellows: rank %llu: %s\n", static_cast<unsigned long long>(r.rank),
                 e.what());
  }
}

std::vector<std::uint32_t> ControlPlaneLink::lost_ranks() const {
  std::set<std::uint32_t> lost;
  for (const RanksLostEvent& failure : failures_) lost.insert(failure.ranks.begin(), failure.ranks.end());
  return {lost.begin(), lost.end()};
}

void ControlPlaneLink::report_recovered(std::uint64_t failure_id, std::uint32_t job_size, const std::string& text) {
  loss_notices().settle_through(failure_id);  // told again later, it names old numbers
  report({failure_id, ResizeOutcome::recovered, job_size, {}, text});
}

std::vector<std::pair<std::string, std::string>> ControlPlaneLink::spawn_environment(
    int first_new_rank) const {
  std::vector<std::string> hosts = expand_hosts_;
  if (hosts.empty()) {  // the first grow: ranks 1.. on the job's first nodes
    for (std::size_t r = static_cast<std::size_t>(first_new_rank); r < nodes_by_rank_.size(); ++r)
      hosts.push_back(nodes_by_rank_[r]);
  }
  return {{kExpandNodesVariable, join_list(hosts)},
          {kExpandFirstRankVariable, std::to_string(first_new_rank)}};
}

void ControlPlaneLink::report(const protocol::ResizeReport& r) {
  try {
    channel_.report_resize(r);
  } catch (const ControlChannelError& e) {
    std::fprintf(stderr, "bellows: could not report resize %llu: %s\n",
                 static_cast<unsigned long long>(r.resize_id), e.what());
  }
}

}  // namespace bellows::runtime
