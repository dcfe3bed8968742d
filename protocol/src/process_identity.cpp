#include "bellows/protocol/process_identity.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace bellows::protocol {

ProcessIdentity ProcessIdentity::self() { return of(::getpid()); }

ProcessIdentity ProcessIdentity::of(pid_t pid) {
  ProcessIdentity id{pid, {}};
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return id;
  const auto close = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos || close + 2 > stat.size()) return id;
  std::istringstream fields(stat.substr(close + 2));  // from field 3 (state) on
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) id.start_time = field;
  }
  return id;
}

bool ProcessIdentity::alive() const {
  return pid > 0 && !start_time.empty() && of(pid).start_time == start_time;
}

std::string ProcessIdentity::text() const { return std::to_string(pid) + " " + start_time; }

ProcessIdentity ProcessIdentity::parse(const std::string& text) {
  std::istringstream in(text);
  ProcessIdentity id;
  long pid = 0;
  if (!(in >> pid >> id.start_time) || pid <= 0) return {};
  id.pid = static_cast<pid_t>(pid);
  return id;
}

}  // namespace bellows::protocol
