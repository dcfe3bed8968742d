// The rank side of the daemon tests: a process that attaches to bellowsd through libbellows'
// ControlChannel (as an MPI rank would) and prints what it sees, one line per fact.
//
//   control_channel_probe roundtrip   request +2, publish metrics, print the events until an
//                                     abort event, send a request without a node count,
//                                     request -1
//   control_channel_probe ask N       request N nodes, print the answer
//   control_channel_probe link        request +2 and -1, publish metrics, report a resize
//                                     committed, refused and cancelled, print the events
//                                     until an abort event (for the ControllerLink tests)
//   control_channel_probe leave       publish metrics as rank 6, report that it left without
//                                     naming itself (a report the daemon drops), then that
//                                     it left, stay attached until killed
//   control_channel_probe hold        publish metrics as rank 7, stay attached until killed
//   control_channel_probe finish      publish metrics as rank 7, stay attached until SIGTERM,
//                                     then detach and exit 0 (a rank whose program ended)
//   control_channel_probe client FILE as a PMIx client started by the daemon: write
//                                     "nspace:rank size N" to FILE.rank
//   control_channel_probe flood N [E] publish N metrics back to back while the daemon's
//                                     events arrive, then wait for an abort event; print how
//                                     many publications failed and how many expands came;
//                                     with E, exit 1 unless all went out and E expands came
//   control_channel_probe stall DIR   once DIR/stopped exists (the daemon is stopped), publish
//                                     metrics until one is refused and once more, print how
//                                     many went out and each refusal; once DIR/resumed exists,
//                                     publish until one goes out (10 s at most)
//   control_channel_probe survive DIR SECONDS
//                                     a rank of a `bellows run` job that only attaches and
//                                     waits: attaches to its node's daemon ($BELLOWS_NODE,
//                                     else the first of $BELLOWS_NODES) through the job
//                                     directory, publishes metrics as rank R (its node's place
//                                     in $BELLOWS_NODES), writes "attached rank R node N" to
//                                     DIR/rank-R, then one line per failure it is told of
//                                     ("lost failure=ID ranks=.. nodes=.. reason=.."); rank 0
//                                     reports the last one recovered once DIR/recover exists.
//                                     Exits 0 (detached) once DIR/stop exists, 1 after
//                                     SECONDS without it

#include <bellows/protocol/job_directory.hpp>
#include <bellows/runtime/control_channel.hpp>

#include <pmix.h>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace {

using bellows::runtime::ControlChannel;

std::string joined(const auto& items) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += ',';
    if constexpr (std::is_same_v<std::decay_t<decltype(item)>, std::string>)
      out += item;
    else
      out += std::to_string(item);
  }
  return out;
}

void print_answer(const char* what, const bellows::runtime::ResizeAnswer& a) {
  std::printf("%s status=%d name=%s text=%s\n", what, a.status, a.status_name.c_str(),
              a.text.c_str());
  std::fflush(stdout);
}

/// Prints each expand, shrink and abort event as it is polled; an abort sets `aborted`.
void print_events(ControlChannel& channel, bool& aborted) {
  channel.on_expand([](const bellows::runtime::ExpandEvent& e) {
    std::printf("expand id=%llu count=%llu hosts=%s\n", static_cast<unsigned long long>(e.resize_id),
                static_cast<unsigned long long>(e.count), joined(e.hosts).c_str());
  });
  channel.on_shrink([](const bellows::runtime::ShrinkEvent& e) {
    std::printf("shrink id=%llu nodes=%s\n", static_cast<unsigned long long>(e.resize_id),
                joined(e.nodes).c_str());
  });
  channel.on_abort([&aborted](const bellows::runtime::AbortEvent& e) {
    std::printf("abort id=%llu reason=%s\n", static_cast<unsigned long long>(e.resize_id),
                e.reason.c_str());
    aborted = true;
  });
  channel.on_ranks_lost([](const bellows::runtime::RanksLostEvent& e) {
    std::printf("ranks_lost id=%llu ranks=%s nodes=%s reason=%s\n",
                static_cast<unsigned long long>(e.failure_id), joined(e.ranks).c_str(),
                joined(e.nodes).c_str(), e.reason.c_str());
  });
}

/// Runs the channel's events until the abort event came (`aborted`) or 30 s passed.
void wait_for_abort(ControlChannel& channel, const bool& aborted) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!aborted && std::chrono::steady_clock::now() < deadline) {
    channel.poll_events(std::chrono::milliseconds(100));
    std::fflush(stdout);
  }
}

int roundtrip(ControlChannel& channel) {
  bool aborted = false;
  print_events(channel, aborted);

  print_answer("answer", channel.request_resize(2));
  bellows::runtime::RankMetrics m;
  m.rank = 3;
  m.metrics = {.iteration = 6,
               .iteration_seconds = 0.125,
               .ready_tasks = 17,
               .busy_fraction = 0.625,
               .steals_sent = 9,
               .steals_failed = 4,
               .job_gflops = 41.5,
               .message_log_on = 1,
               .message_log_bytes_held = 589824,
               .message_log_entries_held = 12};
  channel.publish_metrics(m);
  std::printf("published\n");
  std::fflush(stdout);

  wait_for_abort(channel, aborted);
  if (!aborted) {
    std::printf("no abort event within 30 s\n");
    return 1;
  }
  std::printf("dropped=%llu reason=%s\n", static_cast<unsigned long long>(channel.dropped_events()),
              channel.last_drop_reason().c_str());

  // A request the daemon must refuse: PMIX_ALLOC_EXTEND without PMIX_ALLOC_NUM_NODES.
  pmix_info_t* results = nullptr;
  size_t nresults = 0;
  const pmix_status_t rc = PMIx_Allocation_request(PMIX_ALLOC_EXTEND, nullptr, 0, &results, &nresults);
  std::string text;
  for (size_t i = 0; i < nresults; ++i)
    if (PMIX_CHECK_KEY(&results[i], "bellows.reply.text") && results[i].value.type == PMIX_STRING)
      text = results[i].value.data.string;
  if (results != nullptr) PMIX_INFO_FREE(results, nresults);
  std::printf("malformed status=%d name=%s text=%s\n", rc, PMIx_Error_string(rc), text.c_str());

  print_answer("release", channel.request_resize(-1));
  std::printf("done\n");
  std::fflush(stdout);
  return 0;
}

int link(ControlChannel& channel) {
  bool aborted = false;
  print_events(channel, aborted);
  print_answer("extend", channel.request_resize(2));
  print_answer("release", channel.request_resize(-1));
  bellows::runtime::RankMetrics m;
  m.rank = 5;
  m.metrics = {.iteration = 12,
               .iteration_seconds = 0.25,
               .ready_tasks = 3,
               .busy_fraction = 0.5,
               .steals_sent = 2,
               .steals_failed = 1,
               .job_gflops = 8.0};
  channel.publish_metrics(m);
  using Outcome = bellows::protocol::ResizeOutcome;
  channel.report_resize({11, Outcome::committed, 4, {2, 3}, ""});
  channel.report_resize({12, Outcome::refused, 2, {}, "the job is at its maximum size"});
  channel.report_resize({13, Outcome::cancelled, 2, {}, ""});
  std::printf("reported\n");
  std::fflush(stdout);

  wait_for_abort(channel, aborted);
  std::printf(aborted ? "done\n" : "no abort event within 30 s\n");
  return aborted ? 0 : 1;
}

int leave(ControlChannel& channel) {
  bellows::runtime::RankMetrics m;
  m.rank = 6;
  channel.publish_metrics(m);
  channel.report_resize({14, bellows::protocol::ResizeOutcome::left, 3, {}, ""});
  channel.report_resize({14, bellows::protocol::ResizeOutcome::left, 3, {6}, ""});
  std::printf("left\n");
  std::fflush(stdout);
  while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
}

/// A rank that publishes its metrics every few milliseconds while the daemon's events come:
/// PMIx 4.2.2 keeps both in one cache of the process (512 entries), the events from its
/// progress thread and the metrics from this one; nothing the daemon sends may be cached.
int flood(ControlChannel& channel, int count, long long expected_expands) {
  bool aborted = false;
  unsigned long long expands = 0;
  channel.on_expand([&expands](const bellows::runtime::ExpandEvent&) { ++expands; });
  channel.on_abort([&aborted](const bellows::runtime::AbortEvent&) { aborted = true; });
  std::printf("flooding\n");
  int failed = 0;
  std::string first_failure;
  bellows::runtime::RankMetrics m;
  m.rank = 1;
  for (int i = 0; i < count; ++i) {
    m.metrics.iteration = static_cast<std::uint64_t>(i);
    try {
      channel.publish_metrics(m);
    } catch (const std::exception& e) {
      if (failed++ == 0) first_failure = e.what();
    }
    channel.poll_events(std::chrono::milliseconds(0));
  }
  wait_for_abort(channel, aborted);
  std::printf("flood published=%d failed=%d expands=%llu aborted=%d%s%s\n", count - failed, failed, expands,
              aborted ? 1 : 0, failed ? " first failure: " : "", first_failure.c_str());
  if (expected_expands < 0) return 0;
  return failed == 0 && aborted && expands == static_cast<unsigned long long>(expected_expands) ? 0 : 1;
}

bool wait_for_file(const std::filesystem::path& file) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!std::filesystem::exists(file)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

/// A rank whose daemon stops reading: the notifications it has on their way are bounded, a
/// publication beyond them waits, is refused, and the next is refused at once until the
/// daemon acknowledges again.
int stall(ControlChannel& channel, const std::filesystem::path& dir) {
  std::printf("waiting\n");
  if (!wait_for_file(dir / "stopped")) return 1;
  bellows::runtime::RankMetrics m;
  m.rank = 2;
  int published = 0;
  int refusals = 0;
  while (refusals < 2 && published < 100) {
    const auto started = std::chrono::steady_clock::now();
    try {
      channel.publish_metrics(m);
      ++published;
    } catch (const bellows::runtime::ControlChannelError& e) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
      if (refusals++ == 0) std::printf("published %d\n", published);
      std::printf("refused after %lld ms: %s\n", static_cast<long long>(waited.count()), e.what());
    }
  }
  if (refusals == 0) std::printf("published %d\n", published);
  if (!wait_for_file(dir / "resumed")) return 1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    try {
      channel.publish_metrics(m);
      std::printf("published again\n");
      return 0;
    } catch (const bellows::runtime::ControlChannelError& e) {
      if (std::chrono::steady_clock::now() >= deadline) {
        std::printf("still refused: %s\n", e.what());
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

int client(const std::string& file) {
  pmix_proc_t self;
  pmix_status_t rc = PMIx_Init(&self, nullptr, 0);
  if (rc != PMIX_SUCCESS) {
    std::fprintf(stderr, "PMIx_Init failed: %s\n", PMIx_Error_string(rc));
    return 2;
  }
  pmix_proc_t job;
  PMIX_LOAD_PROCID(&job, self.nspace, PMIX_RANK_WILDCARD);
  pmix_value_t* value = nullptr;
  unsigned size = 0;
  rc = PMIx_Get(&job, PMIX_JOB_SIZE, nullptr, 0, &value);
  if (rc == PMIX_SUCCESS && value != nullptr && value->type == PMIX_UINT32) size = value->data.uint32;
  if (value != nullptr) PMIX_VALUE_RELEASE(value);
  {
    std::ofstream out(file + "." + std::to_string(self.rank));
    out << self.nspace << ':' << self.rank << " size " << size << '\n';
  }
  PMIx_Finalize(nullptr, 0);
  return 0;
}

int survive(const std::filesystem::path& dir, int seconds) {
  namespace env = bellows::protocol::job_environment;
  const char* job_dir = std::getenv(env::kJobDir);
  const char* nodes_text = std::getenv(env::kNodes);
  if (job_dir == nullptr || nodes_text == nullptr) {
    std::printf("survive: %s and %s must be set\n", env::kJobDir, env::kNodes);
    return 3;
  }
  std::vector<std::string> nodes;
  std::stringstream in(nodes_text);
  for (std::string node; std::getline(in, node, ',');) nodes.push_back(node);
  const char* own = std::getenv(env::kNode);
  const std::string node = own != nullptr && *own != '\0' ? own : nodes.front();
  std::uint32_t rank = 0;
  while (rank < nodes.size() && nodes[rank] != node) ++rank;
  const auto uri_file = bellows::protocol::JobDirectory{job_dir}.daemon_uri_file(node);
  auto channel = ControlChannel::connect("file:" + uri_file.string());
  bellows::runtime::RankMetrics m;
  m.rank = rank;
  channel.publish_metrics(m);
  const auto file = dir / ("rank-" + std::to_string(rank));
  {
    std::ofstream out(file);
    out << "attached rank " << rank << " node " << node << '\n';
  }
  auto size = static_cast<std::uint32_t>(nodes.size());
  std::uint64_t last_failure = 0;
  bool reported = true;
  channel.on_ranks_lost([&](const bellows::runtime::RanksLostEvent& e) {
    std::ofstream out(file, std::ios::app);
    out << "lost failure=" << e.failure_id << " ranks=" << joined(e.ranks) << " nodes=" << joined(e.nodes)
        << " reason=" << e.reason << '\n';
    size -= static_cast<std::uint32_t>(e.nodes.size());
    last_failure = e.failure_id;
    reported = false;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!std::filesystem::exists(dir / "stop")) {
    if (std::chrono::steady_clock::now() >= deadline) return 1;
    channel.poll_events(std::chrono::milliseconds(50));
    if (rank == 0 && !reported && std::filesystem::exists(dir / "recover")) {
      channel.report_resize({last_failure, bellows::protocol::ResizeOutcome::recovered, size, {}, ""});
      reported = true;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line reaches the test at once
  const std::string mode = argc > 1 ? argv[1] : "";
  // "finish" takes SIGTERM with sigwait: blocked before PMIx starts its threads.
  sigset_t finish_signal;
  sigemptyset(&finish_signal);
  sigaddset(&finish_signal, SIGTERM);
  if (mode == "finish") pthread_sigmask(SIG_BLOCK, &finish_signal, nullptr);
  try {
    if (mode == "client" && argc == 3) return client(argv[2]);
    if (mode == "survive" && argc == 4) return survive(argv[2], std::stoi(argv[3]));
    auto channel = ControlChannel::connect_from_environment();
    if (!channel) {
      std::printf("no daemon configured\n");
      return 3;
    }
    std::printf("attached %s\n", channel->name().c_str());
    std::fflush(stdout);
    if (mode == "roundtrip") return roundtrip(*channel);
    if (mode == "link") return link(*channel);
    if (mode == "leave") return leave(*channel);
    if (mode == "hold") {  // publishes metrics as rank 7, stays attached until killed
      bellows::runtime::RankMetrics m;
      m.rank = 7;
      channel->publish_metrics(m);
      std::printf("published\n");
      std::fflush(stdout);
      while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    if (mode == "finish") {
      bellows::runtime::RankMetrics m;
      m.rank = 7;
      channel->publish_metrics(m);
      std::printf("published\n");
      std::fflush(stdout);
      int taken = 0;
      sigwait(&finish_signal, &taken);
      channel.reset();  // detaches
      std::printf("detached\n");
      return 0;
    }
    if (mode == "flood" && (argc == 3 || argc == 4))
      return flood(*channel, std::stoi(argv[2]), argc == 4 ? std::stoll(argv[3]) : -1);
    if (mode == "stall" && argc == 3) return stall(*channel, argv[2]);
    if (mode == "ask" && argc == 3) {
      print_answer("answer", channel->request_resize(std::stoi(argv[2])));
      return 0;
    }
    std::fprintf(stderr,
                 "usage: control_channel_probe roundtrip | ask N | link | leave | hold | finish | flood N [E] | "
                 "stall DIR | client FILE | survive DIR SECONDS\n");
    return 2;
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
}
