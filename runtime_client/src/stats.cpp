#include "bellows/runtime/stats.hpp"

#include <nlohmann/json.hpp>

namespace bellows::runtime {

void RankStats::add(const RankStats& o) {
  for (const auto& [name, count] : o.tasks_by_class) tasks_by_class[name] += count;
  tasks_executed += o.tasks_executed;
  bytes_sent += o.bytes_sent;
  bytes_received += o.bytes_received;
  messages_sent += o.messages_sent;
  messages_received += o.messages_received;
  busy_seconds += o.busy_seconds;
  idle_seconds += o.idle_seconds;
  modeled_seconds += o.modeled_seconds;
  flops += o.flops;
  comm_cpu_seconds += o.comm_cpu_seconds;
}

void to_json(nlohmann::json& j, const RankStats& s) {
  j = nlohmann::json{{"rank", s.rank},
                     {"tasks", s.tasks_executed},
                     {"tasks_by_class", s.tasks_by_class},
                     {"bytes_sent", s.bytes_sent},
                     {"bytes_received", s.bytes_received},
                     {"messages_sent", s.messages_sent},
                     {"messages_received", s.messages_received},
                     {"busy_seconds", s.busy_seconds},
                     {"idle_seconds", s.idle_seconds},
                     {"modeled_seconds", s.modeled_seconds},
                     {"comm_cpu_seconds", s.comm_cpu_seconds}};
}

}  // namespace bellows::runtime
