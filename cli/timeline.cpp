#include "timeline.hpp"

#include <map>
#include <string>

namespace bellows::cli {
namespace {

std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) {
    if (!text.empty()) text += ',';
    text += item;
  }
  return text;
}

}  // namespace

void print_timeline(std::FILE* out, const std::vector<controller::EventRecord>& records,
                    MessageLogLines message_log_lines) {
  using controller::to_string;
  if (records.empty()) {
    std::fprintf(out, "resize timeline: no resize\n");
    return;
  }
  std::fprintf(out, "resize timeline (%zu events):\n", records.size());
  struct Summary {
    std::string kind, requester, reason, nodes, state;
    unsigned count = 0;
    double seconds = 0.0;
  };
  std::map<controller::ResizeId, Summary> resizes;
  std::size_t message_log_reports = 0;
  for (const auto& r : records) {
    if (r.event == controller::ResizeEvent::job_control) {
      // No resize: who asked (its reason) and what was done or why not.
      std::fprintf(out, "  %s  job control%s: %s: %s\n", r.time.c_str(), r.refused ? " REFUSED" : "",
                   r.reason.c_str(), r.detail.c_str());
      continue;
    }
    if (r.event == controller::ResizeEvent::attached) {
      // No resize: a controller took the running job over.
      std::fprintf(out, "  %s  controller attached: %s: %s\n", r.time.c_str(), r.reason.c_str(), r.detail.c_str());
      continue;
    }
    if (r.event == controller::ResizeEvent::message_log) {
      // No resize: a rank's message log after an iteration (docs/teams.md).
      ++message_log_reports;
      if (message_log_lines == MessageLogLines::counted) continue;
      std::fprintf(out, "  %s  message log on %s: %s\n", r.time.c_str(), join(r.nodes).c_str(), r.detail.c_str());
      continue;
    }
    const std::string kind = r.kind ? std::string(to_string(*r.kind)) : std::string("-");
    std::fprintf(out, "  %s  #%llu %-6s %-15s %s -> %s%s (%.3f s in %s)%s%s\n", r.time.c_str(),
                 static_cast<unsigned long long>(r.resize), kind.c_str(),
                 std::string(to_string(r.event)).c_str(), std::string(to_string(r.from)).c_str(),
                 std::string(to_string(r.to)).c_str(), r.refused ? " REFUSED" : "", r.duration_s,
                 std::string(to_string(r.from)).c_str(), r.detail.empty() ? "" : ": ",
                 r.detail.c_str());
    if (r.resize == 0 || r.refused) continue;
    Summary& s = resizes[r.resize];
    s.kind = kind;
    s.count = r.count;
    if (r.requester) s.requester = std::string(to_string(*r.requester));
    if (!r.reason.empty()) s.reason = r.reason;
    if (!r.nodes.empty()) s.nodes = join(r.nodes);
    s.state = std::string(to_string(r.to));
    s.seconds += r.duration_s;
  }
  if (message_log_lines == MessageLogLines::counted && message_log_reports > 0) {
    std::fprintf(out, "  message log: %zu reports of the ranks' log sizes (bellows events shows them)\n",
                 message_log_reports);
  }
  for (const auto& [id, s] : resizes) {
    if (s.kind == "failure") {  // no resize: lost nodes, and how the job came through
      std::fprintf(out, "failure #%llu: lost %u node(s) [%s], %s after %.3f s; %s\n",
                   static_cast<unsigned long long>(id), s.count, s.nodes.c_str(), s.state.c_str(), s.seconds,
                   s.reason.c_str());
      continue;
    }
    std::fprintf(out, "resize #%llu: %s by %u node(s) [%s], asked by %s, %s after %.3f s; %s\n",
                 static_cast<unsigned long long>(id), s.kind.c_str(), s.count, s.nodes.c_str(),
                 s.requester.c_str(), s.state.c_str(), s.seconds, s.reason.c_str());
  }
}

}  // namespace bellows::cli
