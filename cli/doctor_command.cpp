// `bellows doctor [--json]`: inspects the Slurm cluster this host talks to (SLURM_CONF, or
// the default configuration) and says, check by check, whether elastic jobs can run on it and
// what to change where they cannot (doctor.hpp decides; this file gathers the facts).

#include <bellows/transport/controller_contact.hpp>

#include <nlohmann/json.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "commands.hpp"
#include "doctor.hpp"

namespace bellows::cli {
namespace {

/// `command`'s output (stdout and stderr) and exit status.
std::pair<std::string, int> run_command(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {std::string("cannot run ") + command + ": " + std::strerror(errno), -1};
  std::array<char, 4096> buffer{};
  std::size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  return {output, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

std::string last_line(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

/// "" when a connection to the Unix socket at `path` succeeds, else why not.
std::string connect_problem(const std::string& path) {
  sockaddr_un address{};
  if (path.size() >= sizeof address.sun_path) return path + ": path too long for a socket";
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::string("socket: ") + std::strerror(errno);
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  const int error = errno;
  ::close(fd);
  return rc == 0 ? std::string() : path + ": " + std::strerror(error);
}

SiteFacts gather() {
  SiteFacts facts;
  // A SLURM_CONF that names no file: said at once (scontrol would first look for a
  // configless cluster in DNS, which can take a minute where DNS does not answer).
  if (const char* conf = std::getenv("SLURM_CONF"); conf != nullptr && *conf != '\0') {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(conf, ec)) {
      facts.config_error = std::string("SLURM_CONF=") + conf + " names no file";
      return facts;
    }
  }
  const auto [config_text, status] = run_command("scontrol show config");
  if (status != 0) {
    facts.config_error = last_line(config_text);
    if (facts.config_error.empty()) facts.config_error = "exit status " + std::to_string(status);
    return facts;
  }
  facts.config = parse_scontrol_config(config_text);
  const std::string plugstack = facts.config.count("PlugStackConfig") ? facts.config["PlugStackConfig"] : "";
  std::ifstream in(plugstack);
  if (plugstack.empty() || plugstack == "(null)") {
    facts.plugstack_error = "PlugStackConfig is not set";
  } else if (!in) {
    facts.plugstack_error = std::strerror(errno);
  } else {
    std::ostringstream text;
    text << in.rdbuf();
    facts.plugstack_text = text.str();
  }
  std::string socket = "/run/munge/munge.socket.2";
  const std::string auth_info = facts.config.count("AuthInfo") ? facts.config["AuthInfo"] : "";
  if (const auto at = auth_info.find("socket="); at != std::string::npos) {
    socket = auth_info.substr(at + 7, auth_info.find(',', at) == std::string::npos
                                          ? std::string::npos
                                          : auth_info.find(',', at) - at - 7);
  }
  facts.munge_error = connect_problem(socket);
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) == 0) facts.host_name = name.data();
  try {
    facts.host_address = transport::this_host_address();  // where a job's controller here listens
  } catch (const transport::TransportError&) {
    facts.host_address.clear();
  }
  return facts;
}

int doctor(bool json) {
  const auto findings = diagnose(gather());
  int problems = 0, warnings = 0;
  for (const Finding& f : findings) {
    problems += f.verdict == Verdict::problem;
    warnings += f.verdict == Verdict::warning;
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Finding& f : findings)
      out.push_back({{"check", f.check}, {"verdict", to_string(f.verdict)}, {"what", f.what}, {"fix", f.fix}});
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    for (const Finding& f : findings) {
      std::printf("%-8s %s: %s\n", to_string(f.verdict), f.check.c_str(), f.what.c_str());
      if (!f.fix.empty()) std::printf("%-8s   fix: %s\n", "", f.fix.c_str());
    }
    std::printf("bellows doctor: %d problem(s), %d warning(s)%s\n", problems, warnings,
                problems == 0 ? ": elastic jobs can run here" : ": elastic jobs cannot run here as is");
  }
  return problems == 0 ? exit_ok : exit_failed;
}

}  // namespace

void add_doctor_command(CLI::App& app, Outcome& outcome) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "doctor", "check whether the Slurm cluster (SLURM_CONF) can run elastic jobs, and what to fix");
  cmd->add_flag("--json", *json, "the findings as JSON");
  cmd->callback([json, &outcome] { outcome.status = doctor(*json); });
}

}  // namespace bellows::cli
