#include "bellows/controller/resource_manager.hpp"

#include <array>
#include <cstddef>

namespace bellows::controller {

namespace {
constexpr std::array<std::string_view, 9> kRmCodeNames{
    "ok", "denied", "timeout", "cancelled", "bad_request", "unknown_job", "unknown_node",
    "not_owner", "unavailable"};
}  // namespace

std::string_view to_string(RmCode code) noexcept {
  const auto index = static_cast<std::size_t>(code);
  return index < kRmCodeNames.size() ? kRmCodeNames[index] : std::string_view("?");
}

bool parse_rm_code(std::string_view text, RmCode& code) noexcept {
  for (std::size_t i = 0; i < kRmCodeNames.size(); ++i) {
    if (kRmCodeNames[i] == text) {
      code = static_cast<RmCode>(i);
      return true;
    }
  }
  return false;
}

RmResult<PartitionLoad> partition_load(ResourceManager& rm) {
  RmResult<PartitionLoad> load;
  auto idle = rm.idle_nodes();
  if (!idle.status.ok()) {
    load.status = {idle.status.code, "idle nodes: " + idle.status.text};
    return load;
  }
  auto pending = rm.pending_jobs();
  if (!pending.status.ok()) {
    load.status = {pending.status.code, "pending jobs: " + pending.status.text};
    return load;
  }
  load.value.idle_nodes = static_cast<int>(idle.value.size());
  load.value.pending_jobs = static_cast<int>(pending.value.size());
  return load;
}

}  // namespace bellows::controller
