#include "bellows/controller/controller_service.hpp"

#include "bellows/controller/takeover.hpp"

#include <bellows/protocol/job_directory.hpp>
#include <bellows/protocol/process_identity.hpp>
#include <bellows/runtime/first_node_takeover.hpp>
#include <bellows/transport/controller_contact.hpp>
#include <bellows/transport/security.hpp>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <set>
#include <cstdio>
#include <cstring>

#include <signal.h>

namespace bellows::controller {
namespace {

std::string signed_count(int delta) {
  std::string text = std::to_string(delta);
  if (delta > 0) text.insert(text.begin(), '+');
  return text;
}

/// The detail of a message_log line of the event log: "rank 2, iteration 5: 589824 bytes in
/// 12 entries held" (docs/controller.md, "The event log").
std::string message_log_detail(std::uint32_t rank, const protocol::Metrics& m) {
  const std::string who = rank == protocol::kNoRank ? std::string("rank unknown") : "rank " + std::to_string(rank);
  return who + ", iteration " + std::to_string(m.iteration) + ": " + std::to_string(m.message_log_bytes_held) +
         " bytes in " + std::to_string(m.message_log_entries_held) + " entries held";
}

/// A process's message log in `bellows status --json`: null when its rank does not log.
nlohmann::json message_log_json(const protocol::Metrics& m) {
  if (m.message_log_on == 0) return nullptr;
  return {{"iteration", m.iteration},
          {"bytes_held", m.message_log_bytes_held},
          {"entries_held", m.message_log_entries_held}};
}

transport::LogSink controller_log() {
  return [](transport::LogLevel level, const std::string& text) {
    std::fprintf(stderr, "bellows run: %s: %s\n", transport::to_string(level), text.c_str());
  };
}

}  // namespace

ControllerService::ControllerService(ControllerOptions options, ResourceManager& rm,
                                     NodeLauncher& launcher, const Clock& clock)
    : options_(std::move(options)),
      lock_(options_.job_dir),
      rm_(rm),
      clock_(clock),
      log_(protocol::JobDirectory{options_.job_dir}.event_log()),
      metrics_log_(protocol::JobDirectory{options_.job_dir}.metrics_log(), std::ios::app),
      job_control_(options_.job, options_.nodes.empty() ? std::string() : options_.nodes.front(),
                   launcher,
                   [this](const std::string& node, const protocol::Message& message) {
                     if (const auto* lost = std::get_if<protocol::RanksLost>(&message)) collectives_lost(*lost);
                     return send(node, message);
                   }),
      fences_(options_.job) {
  if (options_.nodes.empty()) throw std::invalid_argument("a job needs at least one node");
  if (options_.policy) {
    // The policy's limit on a resize is the controller's deadline.
    options_.limits.resize_deadline = options_.policy->resize_timeout;
    engine_.emplace(*options_.policy);
  }
  job_control_.set_rank_launch(options_.rank_launch);
  resizes_ = std::make_unique<ResizeController>(options_.job, options_.nodes, rm_, job_control_,
                                                clock_, log_, options_.limits);
  for (const auto& node : options_.nodes) joined_order_[node] = next_join_++;

  transport::prepare_private_directory(options_.job_dir);
  transport::ServerOptions server_options;
  server_options.endpoint = options_.endpoint;
  if (options_.attach) {
    // The daemons keep reconnecting to where the controller that died listened, with its key.
    const transport::ControllerContact contact = transport::read_controller_contact(options_.job_dir);
    server_options.endpoint = options_.attach->listen_endpoint.empty() ? contact.endpoint
                                                                        : options_.attach->listen_endpoint;
    server_options.curve = contact.curve;
    options_.endpoint = server_options.endpoint;
  } else if (transport::is_tcp_endpoint(options_.endpoint)) {
    // Over tcp the daemons on other hosts prove they belong to the job by holding its key.
    server_options.curve = transport::generate_curve_key_pair();
  }
  server_options.log = controller_log();
  if (options_.policy) {
    // The daemons' launchers pass the same timeout to each daemon (bellowsd --heartbeat-timeout).
    server_options.heartbeat_timeout = options_.policy->recovery.heartbeat_timeout;
    server_options.heartbeat_interval = transport::heartbeat_interval_for(server_options.heartbeat_timeout);
  }
  transport::Handlers handlers;
  handlers.on_request = [this](const transport::Incoming& in, transport::Responder responder) {
    auto shared = std::make_shared<transport::Responder>(std::move(responder));
    post([this, in, shared] { on_request(in, std::move(*shared)); });
  };
  handlers.on_notification = [this](const transport::Incoming& in) {
    post([this, in] { on_notification(in); });
  };
  handlers.on_peer_gone = [this](const transport::PeerId& peer) {
    {
      std::lock_guard lock(inbox_mutex_);
      gone_peers_.insert(peer);
    }
    post([this, peer] { on_peer_gone(peer); });
  };
  if (options_.attach) {
    // Before the daemons come back: what the controller that died left open is closed, and
    // the resizes and failures from here on continue its ids.
    const TakeoverPlan plan = plan_takeover(read_event_log(event_log_path()), options_.job,
                                            format_utc(clock_.wall_now()), options_.attach->who);
    for (const EventRecord& record : plan.closing) log_.write(record);
    log_.write(plan.attached);
    resizes_->continue_ids_after(plan.last_id);
    // The policy waits out the cooldown of the job's last resize, as the controller that died would have.
    if (engine_ && plan.since_last_resize) engine_->resize_finished_earlier(clock_.now(), *plan.since_last_resize);
    job_control_.set_job_size(options_.attach->ranks);
    job_control_.take_over_job_map(options_.attach->pmix_job_map, options_.attach->pmix_rank_nodes);
    first_rank_pid_ = options_.attach->first_rank_pid;
    awaiting_return_.insert(options_.nodes.begin(), options_.nodes.end());
    return_deadline_ = clock_.now() + options_.attach->return_window;
  }
  server_ = std::make_unique<transport::Server>(server_options, handlers);
  // The daemons and the `bellows` commands find the controller here, whatever the job
  // directory's length and on whichever node they run.
  if (!options_.attach || !options_.attach->listen_endpoint.empty())
    transport::publish_controller_contact(options_.job_dir, {server_->endpoint(), server_options.curve});
  write_job_record_if_changed();
  next_tick_ = clock_.now();
}

JobRecord ControllerService::job_record() const {
  JobRecord record;
  record.job = options_.job;
  record.backend = options_.backend;
  record.nodes = resizes_->nodes();
  record.ranks = job_control_.job_size();
  record.min_nodes = options_.min_nodes;
  record.max_nodes = options_.max_nodes;
  record.policy_file = options_.policy ? options_.policy_file : std::string();
  record.policy_text = options_.policy ? options_.policy_text : std::string();
  record.rank_command = options_.rank_launch.command;
  record.rank_environment = options_.rank_launch.environment;
  record.pmix_native = options_.rank_launch.pmix_native;
  record.pmix_job_map = job_control_.job_map();
  record.pmix_rank_nodes = job_control_.numbered_nodes();
  record.first_rank_pid = first_rank_pid_;
  record.daemon_pids = daemon_pids_;
  record.companions = rm_.companion_allocations(options_.job);
  record.expand_strategy = options_.expand_strategy;
  static const std::string self = protocol::ProcessIdentity::self().text();  // read once, not every step
  record.controller = self;
  return record;
}

void ControllerService::write_job_record_if_changed() {
  JobRecord record = job_record();
  if (record == written_record_) return;
  try {
    write_job_record(protocol::JobDirectory{options_.job_dir}.job_record(), record);
    written_record_ = std::move(record);
  } catch (const std::exception& e) {
    // The job goes on; only a takeover would miss the change.
    std::fprintf(stderr, "bellows run: warning: %s\n", e.what());
    written_record_ = std::move(record);
  }
}

bool ControllerService::ranks_known() const {
  if (options_.rank_launch.pmix_native) {
    return std::ranges::all_of(resizes_->nodes(), [this](const std::string& node) {
      return job_control_.registered(node) && job_control_.job_map().contains(node);
    });
  }
  return std::ranges::all_of(resizes_->nodes(), [this](const std::string& node) {
    const auto it = node_state_.find(node);
    return it != node_state_.end() && it->second.rank != protocol::kNoRank;
  });
}

void ControllerService::give_up_on_missing_daemons() {
  if (awaiting_return_.empty() || clock_.now() < return_deadline_) return;
  const auto seconds = std::chrono::duration<double>(options_.attach->return_window).count();
  for (const std::string& node : awaiting_return_) {
    if (job_control_.registered(node)) continue;
    char why[256];
    std::snprintf(why, sizeof why, "the daemon of %s did not come back within %.1f s of the takeover",
                  node.c_str(), seconds);
    std::fprintf(stderr, "bellows run: warning: %s: %s counts as lost\n", why, node.c_str());
    job_control_.daemon_not_back(node, why);
  }
  awaiting_return_.clear();
  resizes_->poll();
}

void ControllerService::declare_lost_first_node() {
  if (!options_.attach || options_.attach->lost_first_node.empty() || first_node_loss_decided_) return;
  runtime::TakeoverLossFacts facts;
  facts.lost_node = options_.attach->lost_first_node;
  facts.lost_node_ranks = options_.attach->lost_first_node_ranks;
  facts.every_survivor_reported = awaiting_return_.empty();
  for (const std::string& node : resizes_->nodes()) {
    const auto it = node_state_.find(node);
    if (job_control_.registered(node) && it != node_state_.end() && it->second.rank != protocol::kNoRank) {
      facts.survivor_ranks.push_back(it->second.rank);
    } else {
      facts.every_survivor_reported = false;
    }
  }
  facts.return_window_over = clock_.now() >= return_deadline_;
  facts.size_counts_them_out = true;  // AttachOptions::ranks counts the lost node's ranks out
  const runtime::TakeoverLossDeclaration declared = runtime::lost_ranks_after_takeover(facts);
  if (declared.action == runtime::TakeoverLossAction::wait) return;
  first_node_loss_decided_ = true;
  if (declared.action == runtime::TakeoverLossAction::nothing) {
    std::fprintf(stderr, "bellows run: info: no rank declared lost with %s: %s\n", facts.lost_node.c_str(),
                 declared.why.c_str());
    return;
  }
  std::fprintf(stderr, "bellows run: info: declaring %s\n", declared.why.c_str());
  resizes_->declare_lost(facts.lost_node, declared.ranks, declared.why, declared.lower_job_size);
  resizes_->poll();
}

ControllerService::~ControllerService() { shutdown(); }

const std::string& ControllerService::endpoint() const { return server_->endpoint(); }

std::filesystem::path ControllerService::event_log_path() const {
  return protocol::JobDirectory{options_.job_dir}.event_log();
}

void ControllerService::start_daemons() { job_control_.start_initial_daemons(options_.nodes); }

void ControllerService::start_initial_ranks() {
  if (options_.nodes.size() > 1)
    job_control_.start_ranks(0, std::vector<std::string>(options_.nodes.begin() + 1, options_.nodes.end()));
}

bool ControllerService::register_first_rank() { return job_control_.register_first_rank(); }

bool ControllerService::daemons_registered() const {
  return std::ranges::all_of(resizes_->nodes(),
                             [this](const std::string& node) { return job_control_.registered(node); });
}

void ControllerService::post(std::function<void()> work) {
  {
    std::lock_guard lock(inbox_mutex_);
    inbox_.push_back(std::move(work));
  }
  inbox_ready_.notify_one();
}

void ControllerService::step(std::chrono::milliseconds wait) {
  std::deque<std::function<void()>> work;
  {
    std::unique_lock lock(inbox_mutex_);
    if (inbox_.empty() && wait.count() > 0)
      inbox_ready_.wait_for(lock, wait, [this] { return !inbox_.empty(); });
    work.swap(inbox_);
  }
  for (auto& item : work) item();
  resizes_->poll();
  give_up_on_missing_daemons();
  declare_lost_first_node();
  track_finished();
  replace_lost_nodes();
  // A job taken over: no tick on the metrics of some nodes while the others come back.
  if (engine_ && clock_.now() >= next_tick_ && awaiting_return_.empty()) {
    tick_policy();
    next_tick_ = clock_.now() + options_.policy->tick;
  }
  publish_job_view();
  write_job_record_if_changed();
}

void ControllerService::publish_job_view() {
  protocol::JobView view = job_view();
  if (view != published_view_) {
    published_view_ = std::move(view);
    nodes_with_view_.clear();
    if (!options_.rank_launch.command.empty()) fences_job_changed();
  }
  for (const auto& [node, peer] : daemons_) {
    if (nodes_with_view_.insert(node).second) server_->notify(peer, published_view_);
  }
}

void ControllerService::fences_job_changed() {
  // The view's ranks are the committed ones; a number no node of the job map holds any more left.
  std::vector<std::uint32_t> ranks;
  for (const std::uint32_t rank : published_view_.node_pmix_ranks)
    if (rank != protocol::kNoRank) ranks.push_back(rank);
  std::set<std::uint32_t> mapped;
  for (const auto& [node, rank] : job_control_.job_map()) mapped.insert(rank);
  std::vector<std::uint32_t> departed;
  for (std::uint32_t rank = 0; rank < published_view_.pmix_rank_nodes.size(); ++rank)
    if (!mapped.contains(rank)) departed.push_back(rank);
  for (const FenceReleaseFor& release : fences_.job_changed(ranks, departed)) {
    std::fprintf(stderr, "bellows run: info: %s\n", release.release.text.c_str());
    send(release.node, release.release);
  }
}

protocol::JobView ControllerService::job_view() const {
  protocol::JobView view;
  view.job = options_.job;
  view.nodes = resizes_->nodes();
  for (const auto& node : view.nodes) {
    const auto it = node_state_.find(node);
    view.node_ranks.push_back(it == node_state_.end() ? protocol::kNoRank : it->second.rank);
    view.node_pids.push_back(it == node_state_.end() ? 0 : it->second.pid);
    if (!options_.rank_launch.command.empty()) {
      const auto mapped = job_control_.job_map().find(node);
      view.node_pmix_ranks.push_back(mapped == job_control_.job_map().end() ? protocol::kNoRank : mapped->second);
    }
  }
  if (!options_.rank_launch.command.empty()) view.pmix_rank_nodes = job_control_.numbered_nodes();
  view.ranks = job_control_.job_size();
  view.min_nodes = options_.min_nodes;
  view.max_nodes = options_.max_nodes;
  view.policy = options_.policy_file;
  if (const auto active = resizes_->active()) {
    view.resize_id = active->id;
    view.resize_kind = active->kind == ResizeKind::expand ? protocol::ResizeKind::expand
                                                          : protocol::ResizeKind::shrink;
    view.resize_state = std::string(to_string(active->state));
    view.resize_count = active->count;
    view.resize_nodes = active->nodes;
  }
  return view;
}

bool ControllerService::send(const std::string& node, const protocol::Message& message) {
  const auto it = daemons_.find(node);
  if (it == daemons_.end()) return false;
  server_->notify(it->second, message);
  return true;
}

void ControllerService::on_request(const transport::Incoming& in, transport::Responder responder) {
  const protocol::Message& message = in.envelope.message;
  if (const auto* hello = std::get_if<protocol::Hello>(&message)) {
    const auto& nodes = resizes_->nodes();
    const bool ours = std::ranges::find(nodes, hello->node_name) != nodes.end();
    const bool starting = resizes_->active() &&
                          std::ranges::find(resizes_->active()->nodes, hello->node_name) !=
                              resizes_->active()->nodes.end();
    if (!ours && !starting) {
      responder.reply(protocol::Ack{protocol::AckCode::refused,
                                    hello->node_name + " is not a node of job " + options_.job});
      return;
    }
    daemons_[hello->node_name] = in.peer;
    daemon_pids_[hello->node_name] = hello->daemon_pid;
    ranks_ended_.erase(hello->node_name);  // a daemon of its own for each stay of a node
    responder.reply(protocol::Ack{protocol::AckCode::ok, "welcome " + hello->node_name});
    job_control_.daemon_registered(hello->node_name);
    if (awaiting_return_.erase(hello->node_name) != 0) {
      std::fprintf(stderr, "bellows run: info: the daemon of %s (pid %d) came back; %zu to come\n",
                   hello->node_name.c_str(), static_cast<int>(hello->daemon_pid), awaiting_return_.size());
    }
  } else if (const auto* request = std::get_if<protocol::AllocationRequest>(&message)) {
    responder.reply(on_allocation_request(node_of(in.peer), *request));
  } else if (const auto* control = std::get_if<protocol::JobControlRequest>(&message)) {
    responder.reply(on_job_control(node_of(in.peer), *control));
  } else if (const auto* order = std::get_if<protocol::OperatorResize>(&message)) {
    const Outcome outcome = resize(order->delta, Requester::operator_,
                                   order->reason.empty() ? "operator asked for " + signed_count(order->delta)
                                                         : order->reason);
    responder.reply(protocol::Ack{outcome.accepted ? protocol::AckCode::ok : protocol::AckCode::refused,
                                  outcome.text});
  } else if (std::holds_alternative<protocol::StatusRequest>(message)) {
    responder.reply(protocol::StatusReply{status().dump()});
  } else {
    responder.reply(protocol::Ack{protocol::AckCode::unsupported,
                                  "the controller does not handle " +
                                      std::string(protocol::to_string(protocol::type_of(message)))});
  }
}

void ControllerService::log_message_log(const std::string& node, const protocol::NodeMetrics& report) {
  EventRecord record;
  record.time = format_utc(clock_.wall_now());
  record.job = options_.job;
  record.event = ResizeEvent::message_log;
  record.nodes = {node};
  record.detail = message_log_detail(report.rank, report.metrics);
  log_.write(record);
}

std::string ControllerService::node_of(const transport::PeerId& peer) const {
  for (const auto& [name, daemon] : daemons_) {
    if (daemon == peer) return name;
  }
  return {};
}

void ControllerService::on_notification(const transport::Incoming& in) {
  const std::string node = node_of(in.peer);
  if (node.empty()) return;  // not registered: nothing it says counts
  if (const auto* m = std::get_if<protocol::NodeMetrics>(&in.envelope.message)) {
    const protocol::Metrics& reported = m->metrics;
    NodeState& state = node_state_[node];
    // The last report, with the steals of every report since the previous tick.
    const std::uint64_t steals_sent = state.node.metrics.steals_sent + reported.steals_sent;
    const std::uint64_t steals_failed =
        state.node.metrics.steals_failed + reported.steals_failed;
    state.reported = true;
    state.rank = m->rank;
    if (m->rank != protocol::kNoRank) job_control_.note_rank(node, m->rank);
    state.pid = m->pid;
    state.node.name = node;
    state.node.metrics = reported;
    state.node.metrics.steals_sent = steals_sent;
    state.node.metrics.steals_failed = steals_failed;
    if (reported.iteration >= iteration_) {
      iteration_ = reported.iteration;
      iteration_seconds_ = reported.iteration_seconds;
    }
    if (reported.job_gflops > 0.0) gflops_ = reported.job_gflops;
    metrics_log_ << nlohmann::json{{"time", format_utc(clock_.wall_now())},
                                   {"node", node},
                                   {"iteration", reported.iteration},
                                   {"iteration_seconds", reported.iteration_seconds},
                                   {"ready_tasks", reported.ready_tasks},
                                   {"busy_fraction", reported.busy_fraction},
                                   {"job_gflops", reported.job_gflops},
                                   {"message_log_on", reported.message_log_on},
                                   {"message_log_bytes_held", reported.message_log_bytes_held},
                                   {"message_log_entries_held", reported.message_log_entries_held},
                                   {"nodes", resizes_->nodes().size()},
                                   {"ranks", job_control_.job_size()}}
                        .dump()
                 << '\n'
                 << std::flush;
    if (reported.message_log_on != 0) log_message_log(node, *m);
  } else if (const auto* ack = std::get_if<protocol::ResizeAck>(&in.envelope.message)) {
    job_control_.resize_report(node, ack->report);
  } else if (const auto* contribution = std::get_if<protocol::FenceContribution>(&in.envelope.message)) {
    on_fence_contribution(node, *contribution);
  } else if (const auto* modex = std::get_if<protocol::ModexRequest>(&in.envelope.message)) {
    on_modex_request(node, *modex);
  } else if (const auto* answer = std::get_if<protocol::ModexReply>(&in.envelope.message)) {
    on_modex_reply(node, *answer);
  } else if (const auto* exited = std::get_if<protocol::RankExited>(&in.envelope.message)) {
    ranks_ended_.insert(node);
    // A job taken over learns from its first node's daemon how the job's first rank ended.
    if (options_.attach && node == options_.nodes.front() && !first_rank_end_) first_rank_end_ = *exited;
    // A rank that ended normally (it detached) is no failure; in a PMIx-native job, a leaving
    // rank's normal end is how it leaves.
    if (exited->crashed() || options_.rank_launch.pmix_native) job_control_.rank_exited(node, *exited);
  } else if (const auto* connected = std::get_if<protocol::RankConnected>(&in.envelope.message)) {
    job_control_.rank_connected(node, *connected);
  }
}

void ControllerService::on_peer_gone(const transport::PeerId& peer) {
  for (auto it = daemons_.begin(); it != daemons_.end(); ++it) {
    if (it->second == peer) {
      const std::string node = it->first;
      daemons_.erase(it);
      daemon_pids_.erase(node);
      const auto state = node_state_.find(node);
      const std::int32_t rank_pid = state == node_state_.end() ? 0 : state->second.pid;
      const bool on_its_own = job_control_.registered(node);
      node_state_.erase(node);
      nodes_with_view_.erase(node);
      job_control_.daemon_gone(node);
      if (on_its_own) fence_unmanaged_rank(node, rank_pid);
      return;
    }
  }
}

void ControllerService::first_rank_ended(std::int32_t pid, std::int32_t exit_code, std::int32_t signal) {
  const protocol::RankExited exited{protocol::kNoRank, pid, exit_code, signal};
  if (!exited.crashed()) return;
  job_control_.rank_exited(options_.nodes.front(), exited);
  resizes_->poll();
}

bool ControllerService::other_ranks_running() const {
  for (const std::string& node : resizes_->nodes()) {
    if (node == options_.nodes.front()) continue;  // the first node's rank is the caller's
    if (daemons_.contains(node) && !ranks_ended_.contains(node)) return true;
  }
  return false;
}

void ControllerService::fence_unmanaged_rank(const std::string& node, std::int32_t pid) {
  // The node counts as lost: its rank must not run on unmanaged, talking to survivors that
  // were told it is gone. On the local backend every rank is a process of this host.
  if (options_.backend != "local" || pid <= 0) return;
  if (::kill(pid, SIGKILL) == 0) {
    std::fprintf(stderr, "bellows run: info: the daemon of %s went away: killed its rank (pid %d), "
                 "which no daemon manages any more\n", node.c_str(), static_cast<int>(pid));
  } else if (errno != ESRCH) {
    std::fprintf(stderr, "bellows run: warning: the daemon of %s went away, and its rank (pid %d) "
                 "could not be killed: %s\n", node.c_str(), static_cast<int>(pid), std::strerror(errno));
  }
}

Outcome ControllerService::resize(int delta, Requester requester, const std::string& reason,
                                  const std::vector<std::string>& exclude) {
  const auto size = static_cast<int>(resizes_->nodes().size());
  if (delta == 0) return {false, 0, "a resize by 0 nodes changes nothing"};
  // A job just taken over: an order to a node whose daemon has not come back yet would count as
  // that node's death, so an operator's or the application's resize waits until every daemon is
  // back or counted lost (the policy does not tick until then either).
  if (requester != Requester::policy && !awaiting_return_.empty()) {
    std::string waiting;
    for (const std::string& node : awaiting_return_) waiting += (waiting.empty() ? "" : ", ") + node;
    const auto left = std::chrono::duration<double>(return_deadline_ - clock_.now()).count();
    char within[64];
    std::snprintf(within, sizeof within, "%.1f", left > 0 ? left : 0.0);
    return {false, 0, "job " + options_.job + " was just taken over and the daemons of " + waiting +
                          " have not come back yet: ask again once they have (at the latest in " + within +
                          " s, when those still missing count as lost)"};
  }
  if (size + delta < static_cast<int>(options_.min_nodes) ||
      size + delta > static_cast<int>(options_.max_nodes)) {
    return {false, 0, "job " + options_.job + " may hold " + std::to_string(options_.min_nodes) +
                          " to " + std::to_string(options_.max_nodes) + " nodes: " +
                          signed_count(delta) + " from " + std::to_string(size) + " would make " +
                          std::to_string(size + delta)};
  }
  nodes_before_resize_ = resizes_->nodes().size();
  Outcome outcome;
  if (delta > 0) {
    outcome = resizes_->request_expand({static_cast<unsigned>(delta), requester, reason, {}, exclude});
  } else {
    ShrinkOrder order;
    order.count = static_cast<unsigned>(-delta);
    order.requester = requester;
    order.reason = reason;
    outcome = resizes_->request_shrink(order);
  }
  if (outcome.accepted && engine_ && requester != Requester::policy)
    engine_->resize_started(clock_.now());
  return outcome;
}

void ControllerService::replace_lost_nodes() {
  if (!options_.policy || options_.policy->recovery.on_node_loss != policy::NodeLossAction::replace) return;
  for (const FailureView& f : resizes_->failures()) {
    if (f.state != ResizeState::recovered || !recoveries_seen_.insert(f.id).second) continue;
    std::vector<std::string> dropped;
    for (const std::string& node : f.nodes) {
      // The first node stays in the job (ResizeController::drop_lost): nothing to replace.
      if (node != options_.nodes.front()) dropped.push_back(node);
    }
    if (!dropped.empty()) replacements_due_.emplace_back(f.id, std::move(dropped));
  }
  if (replacements_due_.empty() || resizes_->active()) return;
  const auto [id, dropped] = replacements_due_.front();
  replacements_due_.pop_front();
  std::string names;
  for (const std::string& node : dropped) names += (names.empty() ? "" : ", ") + node;
  ExpandOrder order = replacement_order(id, dropped, resizes_->failures(), options_.nodes.front());
  // The local backend's nodes are names on this host: a lost one is as good as any once it is
  // back in the pool (a pool of the job's size has no other), and its grants ignore exclusions.
  if (options_.backend == "local") order.exclude.clear();
  nodes_before_resize_ = resizes_->nodes().size();
  const Outcome outcome = resize(static_cast<int>(order.count), order.requester, order.reason, order.exclude);
  if (outcome.accepted) {
    if (engine_) engine_->resize_started(clock_.now());
    return;
  }
  std::fprintf(stderr, "bellows run: info: %s not asked for: %s\n", names.c_str(), outcome.text.c_str());
}

void ControllerService::tick_policy() {
  std::vector<policy::NodeMetrics> metrics;
  const auto& nodes = resizes_->nodes();
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    auto it = node_state_.find(nodes[i]);
    if (it == node_state_.end() || !it->second.reported) continue;
    policy::NodeMetrics m = it->second.node;
    m.index = static_cast<int>(i);
    m.joined = joined_order_[nodes[i]];
    metrics.push_back(m);
    it->second.node.metrics.steals_sent = 0;  // steals count per tick
    it->second.node.metrics.steals_failed = 0;
  }
  policy::TickInput input;
  input.now = clock_.now();
  input.nodes = static_cast<int>(nodes.size());
  input.metrics = metrics;
  const auto load = partition_load(rm_);
  if (!load.status.ok()) {
    // No tick on a guess: the streaks stay as they are until the next answer.
    if (load.status.text != policy_paused_) {
      std::fprintf(stderr, "bellows run: warning: policy tick skipped, the %s resource "
                   "manager did not answer: %s\n", rm_.name().c_str(), load.status.text.c_str());
      policy_paused_ = load.status.text;
    }
    return;
  }
  if (!policy_paused_.empty()) {
    std::fprintf(stderr, "bellows run: info: policy ticks again, the %s resource manager "
                 "answers\n", rm_.name().c_str());
    policy_paused_.clear();
  }
  input.idle_nodes = load.value.idle_nodes;
  input.pending_jobs = load.value.pending_jobs;
  const policy::Decision decision = engine_->tick(input);
  if (decision.action == policy::Action::hold) {
    last_hold_ = decision.reason;
    return;
  }
  last_hold_.clear();
  last_decision_ = decision.reason;
  nodes_before_resize_ = nodes.size();
  Outcome outcome;
  if (decision.action == policy::Action::expand) {
    outcome = resizes_->request_expand(
        {static_cast<unsigned>(decision.nodes), Requester::policy, decision.reason, {}});
  } else {
    ShrinkOrder order;
    order.nodes = decision.release;
    order.requester = Requester::policy;
    order.reason = decision.reason;
    outcome = resizes_->request_shrink(order);
  }
  if (!outcome.accepted) engine_->resize_aborted(clock_.now());
}

void ControllerService::track_finished() {
  const auto& finished = resizes_->finished();
  for (; finished_seen_ < finished.size(); ++finished_seen_) {
    const ResizeView& view = finished[finished_seen_];
    if (view.kind == ResizeKind::expand && view.state == ResizeState::committed) {
      for (const auto& node : view.nodes) joined_order_[node] = next_join_++;
    }
    answer_allocation_request(view);
    if (!engine_) continue;
    if (view.state == ResizeState::committed) {
      engine_->resize_committed(clock_.now(), static_cast<int>(nodes_before_resize_),
                                static_cast<int>(resizes_->nodes().size()));
    } else {
      engine_->resize_aborted(clock_.now());
    }
  }
}

nlohmann::json ControllerService::status() const {
  nlohmann::json s;
  s["job"] = options_.job;
  s["backend"] = options_.backend;
  s["nodes"] = resizes_->nodes();
  s["node_range"] = {options_.min_nodes, options_.max_nodes};
  s["policy"] = options_.policy_file;
  s["ranks"] = job_control_.job_size();
  // Each node's rank and its process id as its daemon last reported them (null before).
  s["processes"] = nlohmann::json::array();
  for (const auto& node : resizes_->nodes()) {
    const auto it = node_state_.find(node);
    const bool known = it != node_state_.end() && it->second.rank != protocol::kNoRank;
    s["processes"].push_back(
        {{"node", node},
         {"rank", known ? nlohmann::json(it->second.rank) : nlohmann::json(nullptr)},
         {"pid", known && it->second.pid > 0 ? nlohmann::json(it->second.pid) : nlohmann::json(nullptr)},
         {"message_log", known ? message_log_json(it->second.node.metrics) : nlohmann::json(nullptr)}});
  }
  s["iteration"] = iteration_;
  s["iteration_seconds"] = iteration_seconds_;
  s["gflops"] = gflops_;
  s["last_policy_decision"] = last_decision_;
  s["policy_holds"] = last_hold_.empty() ? nlohmann::json(nullptr) : nlohmann::json(last_hold_);
  s["policy_paused"] = nullptr;
  if (!policy_paused_.empty()) s["policy_paused"] = "the resource manager did not answer: " + policy_paused_;
  const auto view_json = [](const ResizeView& v) {
    return nlohmann::json{{"id", v.id},
                          {"kind", std::string(to_string(v.kind))},
                          {"state", std::string(to_string(v.state))},
                          {"count", v.count},
                          {"requester", std::string(to_string(v.requester))},
                          {"reason", v.reason},
                          {"nodes", v.nodes}};
  };
  s["active_resize"] = nullptr;
  if (auto active = resizes_->active()) s["active_resize"] = view_json(*active);
  s["finished_resizes"] = nlohmann::json::array();
  for (const auto& v : resizes_->finished()) s["finished_resizes"].push_back(view_json(v));
  s["unreleased_nodes"] = resizes_->unreleased_nodes();
  // Each failure like a resize; degraded (the nodes and ranks lost) until the job reports
  // that it recovered from every one.
  s["failures"] = nlohmann::json::array();
  nlohmann::json lost_nodes = nlohmann::json::array();
  nlohmann::json lost_ranks = nlohmann::json::array();
  nlohmann::json open_failures = nlohmann::json::array();
  for (const FailureView& f : resizes_->failures()) {
    s["failures"].push_back({{"id", f.id},
                             {"kind", "failure"},
                             {"state", std::string(to_string(f.state))},
                             {"nodes", f.nodes},
                             {"ranks", f.ranks},
                             {"reason", f.reason},
                             {"detected_at", f.detected_at},
                             {"ended_at", f.ended_at.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.ended_at)},
                             {"seconds_to_end", f.seconds_to_end}});
    if (f.state == ResizeState::recovered) continue;
    open_failures.push_back(f.id);
    for (const auto& node : f.nodes) lost_nodes.push_back(node);
    for (const auto rank : f.ranks) lost_ranks.push_back(rank);
  }
  s["degraded"] = nullptr;
  if (resizes_->degraded()) {
    s["degraded"] = {{"lost_nodes", lost_nodes}, {"lost_ranks", lost_ranks}, {"failures", open_failures}};
  }
  // Who took the job over, when this controller did (bellows run --attach); null otherwise.
  s["attached"] = options_.attach ? nlohmann::json(options_.attach->who) : nlohmann::json(nullptr);
  s["event_log"] = event_log_path().string();
  return s;
}

void ControllerService::shutdown() {
  // The event log ends every resize it began: one still running ends with the job.
  if (resizes_ && resizes_->active()) {
    (void)resizes_->deliver(0, ResizeEvent::job_ended,
                            "the job ended before the resize finished; its nodes go back with the job");
  }
  if (resizes_) resizes_->end_failures("the job ended before it reported its recovery");
  if (!server_) return;
  // Stop goes as a request: a daemon answers once it acted on it (told the PMIx tools attached
  // to it that the job ended, and began to stop), so the SIGTERM of stop_started_daemons()
  // does not overtake it. A daemon that does not answer in time is stopped all the same.
  struct Answers {
    std::mutex mutex;
    std::condition_variable changed;
    std::size_t awaited = 0;
  };
  auto answers = std::make_shared<Answers>();
  answers->awaited = daemons_.size();
  for (const auto& [node, peer] : daemons_) {
    server_->request_async(peer, protocol::Stop{"the job ended", 2000}, kStopAnswerTimeout,
                           [answers](const transport::RequestResult&) {
                             std::lock_guard lock(answers->mutex);
                             --answers->awaited;
                             answers->changed.notify_all();
                           });
  }
  {
    std::unique_lock lock(answers->mutex);
    answers->changed.wait_for(lock, kStopAnswerTimeout + std::chrono::milliseconds(500),
                              [&answers] { return answers->awaited == 0; });
  }
  // A daemon this controller did not start (in a job taken over) has no launcher here that waits
  // for it to end: its connection closing says it has, so that nothing given back after the
  // job's end (Slurm: a companion completed) kills it while it stops.
  std::vector<transport::PeerId> not_started_here;
  for (const auto& [node, peer] : daemons_) {
    if (options_.attach && !job_control_.started_here(node)) not_started_here.push_back(peer);
  }
  {
    std::unique_lock lock(inbox_mutex_);
    inbox_ready_.wait_for(lock, kStopAnswerTimeout, [this, &not_started_here] {
      return std::ranges::all_of(not_started_here,
                                 [this](const transport::PeerId& peer) { return gone_peers_.contains(peer); });
    });
  }
  job_control_.stop_started_daemons();
  server_->stop();
  server_.reset();
  // The job record says that the job ended: a later --attach is refused with how.
  JobRecord record = job_record();
  record.ended_at = format_utc(clock_.wall_now());
  record.end = end_.empty() ? "the job ended" : end_;
  record.exit_status = exit_status_;
  try {
    write_job_record(protocol::JobDirectory{options_.job_dir}.job_record(), record);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bellows run: warning: %s\n", e.what());
  }
}

}  // namespace bellows::controller
