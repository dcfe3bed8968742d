#include "bellows/runtime/options.hpp"

namespace bellows::runtime {

std::string_view to_string(DeviceKind kind) noexcept {
  switch (kind) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::cuda: return "cuda";
    case DeviceKind::emulated: return "emulated";
  }
  return "unknown";
}

bool parse_device_kind(std::string_view text, DeviceKind& out) noexcept {
  for (auto kind : {DeviceKind::cpu, DeviceKind::cuda, DeviceKind::emulated}) {
    if (text == to_string(kind)) {
      out = kind;
      return true;
    }
  }
  return false;
}

}  // namespace bellows::runtime
