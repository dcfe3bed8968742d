// `bellows status`, `bellows resize +K|-K`, `bellows events` and `bellows wait`: talk to the controller of a
// job started by `bellows run` (over its private socket: only the job owner may) or read the
// job's event log.

#include <bellows/controller/controller_lock.hpp>
#include <bellows/controller/event_log.hpp>
#include <bellows/controller/job_record.hpp>
#include <bellows/protocol/job_directory.hpp>
#include <bellows/transport/controller_contact.hpp>
#include <bellows/transport/endpoint.hpp>

#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "commands.hpp"
#include "job_dir.hpp"
#include "timeline.hpp"

namespace bellows::cli {
namespace {

using namespace std::chrono_literals;

/// How long a command waits for its controller's reply.
constexpr auto kReplyBound = 5s;
/// How often, while it waits, it looks whether the job directory names another endpoint: a
/// controller that took the job over on another host (its first node lost) publishes its own
/// there, and the old endpoint answers nothing (docs/slurm.md, "The job's first node").
constexpr auto kContactCheck = 200ms;

/// The endpoint the job directory `dir` names now, or "" when it names none that can be read.
std::string published_endpoint(const std::filesystem::path& dir) {
  try {
    return transport::read_controller_contact(dir).endpoint;
  } catch (const transport::TransportError&) {
    return {};
  }
}

/// Asks the controller of `job` and waits up to kReplyBound for its reply. When the job
/// directory names another endpoint meanwhile, the request goes there again: the controller it
/// was sent to is gone (a takeover publishes its endpoint only once it has the job), and a
/// request sent before that would otherwise wait out the whole bound.
transport::RequestResult ask_controller(const std::string& job, const protocol::Message& message) {
  const auto dir = find_job_dir(job);
  transport::ClientOptions options;
  try {
    options = transport::read_controller_contact(dir).client_options();
  } catch (const transport::TransportError& e) {
    throw std::runtime_error("the controller of " + dir.filename().string() + ": " + e.what() +
                             "; has the job started?");
  }
  options.log = [](transport::LogLevel, const std::string&) {};
  std::string endpoint = options.endpoint;
  transport::Client client(options, {});
  const auto deadline = std::chrono::steady_clock::now() + kReplyBound;
  transport::RequestResult result;
  for (;;) {
    // Shared with the receive thread: a request left for another endpoint still ends there.
    auto reply = std::make_shared<std::promise<transport::RequestResult>>();
    auto answered = reply->get_future();
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    client.request_async(message, std::max(left, 1ms),
                         [reply](transport::RequestResult r) { reply->set_value(std::move(r)); });
    std::string moved_to;
    while (answered.wait_for(kContactCheck) != std::future_status::ready) {
      const std::string now_published = published_endpoint(dir);
      if (!now_published.empty() && now_published != endpoint) {
        moved_to = now_published;
        break;
      }
    }
    if (moved_to.empty() || std::chrono::steady_clock::now() >= deadline) {
      result = answered.get();
      break;
    }
    client.reconnect(moved_to);
    endpoint = moved_to;
  }
  client.stop();
  if (!result.ok()) {
    throw std::runtime_error("the controller of " + dir.filename().string() + " did not answer (" +
                             result.text + "); has the job ended?");
  }
  return result;
}

int status(const std::string& job, bool json) {
  const auto result = ask_controller(job, protocol::StatusRequest{});
  const auto* reply = std::get_if<protocol::StatusReply>(&result.reply);
  if (reply == nullptr) throw std::runtime_error("the controller answered with no status");
  const auto s = nlohmann::json::parse(reply->json);
  if (json) {
    std::printf("%s\n", s.dump(2).c_str());
    return exit_ok;
  }
  std::string nodes;
  for (const auto& n : s["nodes"]) nodes += (nodes.empty() ? "" : ", ") + n.get<std::string>();
  std::printf("job %s (%s backend)\n", s["job"].get<std::string>().c_str(),
              s["backend"].get<std::string>().c_str());
  std::printf("  nodes      %zu [%s], range %d:%d\n", s["nodes"].size(), nodes.c_str(),
              s["node_range"][0].get<int>(), s["node_range"][1].get<int>());
  std::printf("  ranks      %d\n", s["ranks"].get<int>());
  // With message logging: each rank's log as its last metrics gave it, in the event log's words.
  for (const auto& p : s["processes"]) {
    if (!p.contains("message_log") || p["message_log"].is_null()) continue;
    const auto& log = p["message_log"];
    const std::string rank = p["rank"].is_null() ? "rank unknown" : "rank " + std::to_string(p["rank"].get<long>());
    std::printf("  message log on %s: %s, iteration %llu: %llu bytes in %llu entries held\n",
                p["node"].get<std::string>().c_str(), rank.c_str(),
                static_cast<unsigned long long>(log["iteration"].get<std::uint64_t>()),
                static_cast<unsigned long long>(log["bytes_held"].get<std::uint64_t>()),
                static_cast<unsigned long long>(log["entries_held"].get<std::uint64_t>()));
  }
  std::printf("  iteration  %llu (%.3f s, %.1f GFLOP/s)\n",
              static_cast<unsigned long long>(s["iteration"].get<std::uint64_t>()),
              s["iteration_seconds"].get<double>(), s["gflops"].get<double>());
  std::printf("  policy     %s\n", s["policy"].get<std::string>().empty()
                                       ? "(none: resizes on request only)"
                                       : s["policy"].get<std::string>().c_str());
  if (s.contains("policy_paused") && !s["policy_paused"].is_null()) {
    std::printf("  paused     %s\n", s["policy_paused"].get<std::string>().c_str());
  }
  if (s.contains("policy_holds") && !s["policy_holds"].is_null()) {
    std::printf("  holding    %s\n", s["policy_holds"].get<std::string>().c_str());
  }
  if (!s["active_resize"].is_null()) {
    const auto& a = s["active_resize"];
    std::printf("  resizing   #%d %s by %d, %s (asked by %s: %s)\n", a["id"].get<int>(),
                a["kind"].get<std::string>().c_str(), a["count"].get<int>(),
                a["state"].get<std::string>().c_str(), a["requester"].get<std::string>().c_str(),
                a["reason"].get<std::string>().c_str());
  }
  std::printf("  resizes    %zu finished\n", s["finished_resizes"].size());
  if (s.contains("degraded") && !s["degraded"].is_null()) {
    const auto& d = s["degraded"];
    std::string lost_nodes, lost_ranks, failures;
    for (const auto& n : d["lost_nodes"]) lost_nodes += (lost_nodes.empty() ? "" : ", ") + n.get<std::string>();
    for (const auto& r : d["lost_ranks"]) {
      if (!lost_ranks.empty()) lost_ranks += ", ";
      lost_ranks += std::to_string(r.get<unsigned>());
    }
    for (const auto& f : d["failures"]) {
      failures += failures.empty() ? "#" : ", #";
      failures += std::to_string(f.get<unsigned>());
    }
    std::printf("  degraded   lost nodes [%s], lost ranks [%s] (failure %s, not recovered)\n", lost_nodes.c_str(),
                lost_ranks.empty() ? "unknown" : lost_ranks.c_str(), failures.c_str());
  }
  if (s.contains("failures")) std::printf("  failures   %zu\n", s["failures"].size());
  if (s.contains("attached") && !s["attached"].is_null())
    std::printf("  controller took the job over (%s)\n", s["attached"].get<std::string>().c_str());
  std::printf("  events     %s\n", s["event_log"].get<std::string>().c_str());
  return exit_ok;
}

int resize(const std::string& job, const std::string& change, const std::string& reason) {
  int delta = 0;
  try {
    std::size_t used = 0;
    delta = std::stoi(change, &used);
    if (used != change.size() || (change[0] != '+' && change[0] != '-')) delta = 0;
  } catch (const std::exception&) {
    delta = 0;
  }
  if (delta == 0) {
    std::fprintf(stderr, "bellows resize: '%s' is not +K or -K (K > 0)\n", change.c_str());
    return exit_bad_input;
  }
  const auto result = ask_controller(job, protocol::OperatorResize{delta, reason});
  const auto* ack = std::get_if<protocol::Ack>(&result.reply);
  if (ack == nullptr) throw std::runtime_error("the controller answered with no acknowledgement");
  std::printf("%s\n", ack->text.c_str());
  return ack->code == protocol::AckCode::ok ? exit_ok : exit_failed;
}

int plot(const std::string& job, std::string out) {
  const auto dir = find_job_dir(job);
  if (out.empty()) out = (dir / "timeline.png").string();
  const char* script_env = std::getenv("BELLOWS_PLOT_SCRIPT");
  const std::string script = script_env != nullptr && *script_env != '\0' ? script_env : BELLOWS_PLOT_SCRIPT;
  // Debian's python3 carries Debian's matplotlib; another python3 first in PATH may not.
  const std::string python = std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  const pid_t child = ::fork();
  if (child == 0) {
    ::execlp(python.c_str(), python.c_str(), script.c_str(), dir.c_str(), "--out", out.c_str(),
             static_cast<char*>(nullptr));
    std::fprintf(stderr, "bellows plot: cannot run %s: %s\n", python.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? exit_ok : exit_failed;
}

int events(const std::string& job, bool json) {
  const auto path = protocol::JobDirectory{find_job_dir(job)}.event_log();
  if (json) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot read " + path.string());
    std::string line;
    while (std::getline(in, line)) std::printf("%s\n", line.c_str());
    return exit_ok;
  }
  print_timeline(stdout, controller::read_event_log(path));
  return exit_ok;
}

/// Waits until job `job` has ended: its record (job.json) says when and how, and no
/// controller holds its lock any more (the controller that wrote the end has exited). Polls
/// every 0.5 s. A job whose controller died goes on, and so does the wait, until a controller
/// that took it over (`bellows run --attach`) records the end. Returns the job's exit status as
/// its controller recorded it (the program's under `bellows run`), so that a batch script's
/// `bellows run ... || bellows wait JOB` fails when the program failed; 0 for a record of an
/// older `bellows`, which kept no exit status (said so).
int wait_for_end(const std::string& job) {
  const auto dir = find_job_dir(job);
  const auto record_path = protocol::JobDirectory{dir}.job_record();
  while (true) {
    std::error_code ec;
    if (std::filesystem::exists(record_path, ec)) {
      const controller::JobRecord record = controller::read_job_record(record_path);
      if (!record.ended_at.empty() && !controller::ControllerLock::held(dir)) {
        if (!record.exit_status) {
          std::fprintf(stderr, "bellows wait: job %s ended at %s (%s); its exit status was not recorded (%s "
                       "was written by an older bellows): returning 0\n", record.job.c_str(),
                       record.ended_at.c_str(), record.end.c_str(), record_path.c_str());
          return exit_ok;
        }
        std::fprintf(stderr, "bellows wait: job %s ended at %s (%s): exit status %d\n", record.job.c_str(),
                     record.ended_at.c_str(), record.end.c_str(), *record.exit_status);
        return *record.exit_status;
      }
    }
    std::this_thread::sleep_for(500ms);
  }
}

}  // namespace

void add_job_commands(CLI::App& app, Outcome& outcome) {
  auto job = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  CLI::App* status_cmd = app.add_subcommand("status", "show a running job: nodes, iteration, resizes");
  status_cmd->add_option("job", *job, "job id (default: the job started last)");
  status_cmd->add_flag("--json", *json, "print the controller's status object");
  status_cmd->callback([job, json, &outcome] {
    try {
      outcome.status = status(*job, *json);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bellows status: %s\n", e.what());
      outcome.status = exit_failed;
    }
  });

  auto change = std::make_shared<std::string>();
  auto reason = std::make_shared<std::string>();
  CLI::App* resize_cmd =
      app.add_subcommand("resize", "ask a running job's controller to grow (+K) or shrink (-K)");
  resize_cmd->add_option("change", *change, "+K or -K nodes")->required();
  resize_cmd->add_option("--job", *job, "job id (default: the job started last)");
  resize_cmd->add_option("--reason", *reason, "why, for the event log");
  resize_cmd->callback([job, change, reason, &outcome] {
    try {
      outcome.status = resize(*job, *change, *reason);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bellows resize: %s\n", e.what());
      outcome.status = exit_failed;
    }
  });

  auto out = std::make_shared<std::string>();
  CLI::App* plot_cmd = app.add_subcommand(
      "plot", "draw a job's GFLOP/s, ready tasks, nodes and resizes on one timeline (PNG)");
  plot_cmd->add_option("job", *job, "job id (default: the job started last)");
  plot_cmd->add_option("--out,-o", *out, "the PNG to write (default: JOB_DIR/timeline.png)");
  plot_cmd->callback([job, out, &outcome] {
    try {
      outcome.status = plot(*job, *out);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bellows plot: %s\n", e.what());
      outcome.status = exit_failed;
    }
  });

  CLI::App* wait_cmd = app.add_subcommand(
      "wait", "wait until a job has ended, also when its controller died and another took it over "
              "(bellows run --attach), and return its exit status: for the rest of a batch script whose "
              "bellows run was killed");
  wait_cmd->add_option("job", *job, "job id (default: the job started last)");
  wait_cmd->callback([job, &outcome] {
    try {
      outcome.status = wait_for_end(*job);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bellows wait: %s\n", e.what());
      outcome.status = exit_failed;
    }
  });

  CLI::App* events_cmd = app.add_subcommand("events", "print a job's resize event log");
  events_cmd->add_option("job", *job, "job id (default: the job started last)");
  events_cmd->add_flag("--json", *json, "print the JSON lines as they are");
  events_cmd->callback([job, json, &outcome] {
    try {
      outcome.status = events(*job, *json);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bellows events: %s\n", e.what());
      outcome.status = exit_failed;
    }
  });
}

}  // namespace bellows::cli
