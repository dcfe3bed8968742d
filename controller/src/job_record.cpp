#include "bellows/controller/job_record.hpp"

#include "bellows/controller/slurm_expand_strategy.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace bellows::controller {

using nlohmann::json;

namespace {

json companions_json(const std::vector<CompanionAllocation>& companions) {
  json list = json::array();
  for (const CompanionAllocation& c : companions) list.push_back({{"id", c.id}, {"nodes", c.nodes}});
  return list;
}

}  // namespace

std::string to_json_text(const JobRecord& r) {
  json j{{"job", r.job},
         {"backend", r.backend},
         {"nodes", r.nodes},
         {"ranks", r.ranks},
         {"node_range", {r.min_nodes, r.max_nodes}},
         {"policy_file", r.policy_file},
         {"policy_text", r.policy_text},
         {"rank_command", r.rank_command},
         {"rank_environment", r.rank_environment},
         {"pmix_native", r.pmix_native},
         {"pmix_job_map", r.pmix_job_map},
         {"pmix_rank_nodes", r.pmix_rank_nodes},
         {"first_rank_pid", r.first_rank_pid},
         {"daemon_pids", r.daemon_pids},
         {"companions", companions_json(r.companions)},
         {"expand_strategy", r.expand_strategy},
         {"controller", r.controller},
         {"ended_at", r.ended_at},
         {"end", r.end},
         {"exit_status", r.exit_status ? json(*r.exit_status) : json(nullptr)}};
  return j.dump(1) + "\n";
}

namespace {

/// Reads the fields of the record, naming the source and the field in every error.
class RecordReader {
 public:
  RecordReader(const json& object, const std::string& source) : object_(object), source_(source) {}

  const json& field(const char* key) const {
    const auto it = object_.find(key);
    if (it == object_.end()) fail(key, "missing");
    return *it;
  }
  /// Whether the record has `key` (one of kOptionalJobRecordFields may be absent).
  bool has(const char* key) const { return object_.contains(key); }
  std::string string(const char* key) const {
    const json& value = field(key);
    if (!value.is_string()) fail(key, "expected a string, got " + value.dump());
    return value.get<std::string>();
  }
  unsigned count(const char* key) const {
    const json& value = field(key);
    if (!value.is_number_unsigned() || value.get<std::uint64_t>() > 1'000'000)
      fail(key, "expected a count, got " + value.dump());
    return value.get<unsigned>();
  }
  std::vector<std::string> strings(const char* key) const {
    const json& value = field(key);
    if (!value.is_array()) fail(key, "expected a list of strings, got " + value.dump());
    std::vector<std::string> out;
    for (const json& item : value) {
      if (!item.is_string()) fail(key, "expected a list of strings, got " + value.dump());
      out.push_back(item.get<std::string>());
    }
    return out;
  }
  bool flag(const char* key) const {
    const json& value = field(key);
    if (!value.is_boolean()) fail(key, "expected true or false, got " + value.dump());
    return value.get<bool>();
  }
  [[noreturn]] void fail(const char* key, const std::string& what) const {
    throw std::runtime_error(source_ + ": field '" + key + "': " + what);
  }

 private:
  const json& object_;
  const std::string& source_;
};

/// The companions of a record whose nodes are `nodes`: each an id of digits and a non-empty
/// list of nodes, the job's first node (its own) in none, no node in two. A companion may hold
/// a node that is not (yet, or any more) in `nodes`: the record is written while a resize
/// runs, between the grant and the commit.
std::vector<CompanionAllocation> read_companions(const RecordReader& read, const std::vector<std::string>& nodes) {
  const json& list = read.field("companions");
  const std::string expected = "expected a list of {\"id\": SLURM_JOB_ID, \"nodes\": [NODE, ...]}, got ";
  if (!list.is_array()) read.fail("companions", expected + list.dump());
  std::vector<CompanionAllocation> companions;
  std::map<std::string, std::string> holder;  // node -> companion
  for (const json& item : list) {
    if (!item.is_object() || !item.contains("id") || !item.contains("nodes") || !item["id"].is_string() ||
        !item["nodes"].is_array() || item["nodes"].empty())
      read.fail("companions", expected + item.dump());
    CompanionAllocation c;
    c.id = item["id"].get<std::string>();
    if (c.id.empty() || c.id.find_first_not_of("0123456789") != std::string::npos)
      read.fail("companions", "expected a Slurm job id, got \"" + c.id + "\"");
    for (const json& node : item["nodes"]) {
      if (!node.is_string()) read.fail("companions", expected + item.dump());
      const std::string name = node.get<std::string>();
      if (name == nodes.front())
        read.fail("companions", "companion " + c.id + " holds " + name + ", the job's first node (the job's own)");
      if (const auto [it, added] = holder.emplace(name, c.id); !added)
        read.fail("companions", name + " is held by companions " + it->second + " and " + c.id);
      c.nodes.push_back(name);
    }
    companions.push_back(std::move(c));
  }
  return companions;
}

/// The job map of a record whose numbers given are `rank_nodes`: node -> a number given on
/// that node, no number twice.
std::map<std::string, std::uint32_t> read_job_map(const RecordReader& read, const std::vector<std::string>& rank_nodes) {
  const json& map = read.field("pmix_job_map");
  if (!map.is_object()) read.fail("pmix_job_map", "expected an object of node: PMIx rank, got " + map.dump());
  std::map<std::string, std::uint32_t> out;
  for (const auto& [node, rank] : map.items()) {
    if (!rank.is_number_unsigned() || rank.get<std::uint64_t>() >= rank_nodes.size())
      read.fail("pmix_job_map", "expected for " + node + " one of the " + std::to_string(rank_nodes.size()) +
                                    " rank numbers of pmix_rank_nodes, got " + rank.dump());
    const auto number = rank.get<std::uint32_t>();
    if (rank_nodes[number] != node)
      read.fail("pmix_job_map", "rank " + std::to_string(number) + " is mapped to " + node +
                                    " but was given on " + rank_nodes[number]);
    out[node] = number;
  }
  return out;
}

}  // namespace

JobRecord parse_job_record(std::string_view text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw std::runtime_error(source + ": not JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw std::runtime_error(source + ": expected a JSON object, got " + j.dump());
  const RecordReader read(j, source);
  JobRecord r;
  r.job = read.string("job");
  if (r.job.empty()) read.fail("job", "expected the job's id, got \"\"");
  r.backend = read.string("backend");
  if (r.backend != "local" && r.backend != "slurm") read.fail("backend", "expected local or slurm, got \"" + r.backend + "\"");
  r.nodes = read.strings("nodes");
  if (r.nodes.empty()) read.fail("nodes", "expected a non-empty list of node names, got []");
  r.ranks = read.count("ranks");
  const json& range = read.field("node_range");
  if (!range.is_array() || range.size() != 2 || !range[0].is_number_unsigned() || !range[1].is_number_unsigned() ||
      range[0].get<unsigned>() < 1 || range[0].get<unsigned>() > range[1].get<unsigned>())
    read.fail("node_range", "expected [MIN, MAX] with 1 <= MIN <= MAX, got " + range.dump());
  r.min_nodes = range[0].get<unsigned>();
  r.max_nodes = range[1].get<unsigned>();
  r.policy_file = read.string("policy_file");
  r.policy_text = read.string("policy_text");
  r.rank_command = read.strings("rank_command");
  r.rank_environment = read.strings("rank_environment");
  // An older record knows nothing of PMIx: a libbellows job, no job map, the first rank's pid unknown.
  if (read.has("pmix_native")) r.pmix_native = read.flag("pmix_native");
  if (read.has("pmix_rank_nodes")) r.pmix_rank_nodes = read.strings("pmix_rank_nodes");
  if (read.has("pmix_job_map")) r.pmix_job_map = read_job_map(read, r.pmix_rank_nodes);
  if (read.has("first_rank_pid")) {
    const json& first = read.field("first_rank_pid");
    if (!first.is_number_integer() || first.get<std::int64_t>() < 0 || first.get<std::int64_t>() > INT32_MAX)
      read.fail("first_rank_pid", "expected a process id or 0, got " + first.dump());
    r.first_rank_pid = first.get<std::int32_t>();
  }
  const json& pids = read.field("daemon_pids");
  if (!pids.is_object()) read.fail("daemon_pids", "expected an object of node: pid, got " + pids.dump());
  for (const auto& [node, pid] : pids.items()) {
    if (!pid.is_number_integer() || pid.get<std::int64_t>() <= 0 || pid.get<std::int64_t>() > INT32_MAX)
      read.fail("daemon_pids", "expected a process id for " + node + ", got " + pid.dump());
    r.daemon_pids[node] = pid.get<std::int32_t>();
  }
  if (read.has("companions")) r.companions = read_companions(read, r.nodes);
  // An older record has no strategy: its job grows as the site's settings choose.
  r.expand_strategy = read.has("expand_strategy") ? read.string("expand_strategy")
                      : r.backend == "slurm"      ? std::string(to_string(ExpandStrategy::automatic))
                                                  : std::string();
  ExpandStrategy strategy = ExpandStrategy::automatic;
  if (r.backend == "slurm" && !parse_expand_strategy(r.expand_strategy, strategy))
    read.fail("expand_strategy", "expected auto, merge or companion for a Slurm job, got \"" + r.expand_strategy + "\"");
  if (r.backend == "local" && !r.expand_strategy.empty())
    read.fail("expand_strategy", "expected \"\" for a job of the local backend, got \"" + r.expand_strategy + "\"");
  r.controller = read.string("controller");
  r.ended_at = read.string("ended_at");
  r.end = read.string("end");
  if (read.has("exit_status") && !read.field("exit_status").is_null()) {
    const json& status = read.field("exit_status");
    if (!status.is_number_integer() || status.get<std::int64_t>() < 0 || status.get<std::int64_t>() > 255)
      read.fail("exit_status", "expected an exit status from 0 to 255 or null, got " + status.dump());
    r.exit_status = status.get<int>();
  }
  if (r.exit_status && r.ended_at.empty())
    read.fail("exit_status", "expected null while the job runs (ended_at is \"\"), got " +
                                 std::to_string(*r.exit_status));
  return r;
}

void write_job_record(const std::filesystem::path& path, const JobRecord& record) {
  const std::filesystem::path temporary = path.string() + ".tmp";
  const std::string text = to_json_text(record);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot write " + temporary.string() + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      const int error = errno;
      ::close(fd);
      throw std::runtime_error("cannot write " + temporary.string() + ": " + std::strerror(error));
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (::rename(temporary.c_str(), path.c_str()) != 0)
    throw std::runtime_error("cannot rename " + temporary.string() + " to " + path.string() + ": " +
                             std::strerror(errno));
}

JobRecord read_job_record(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string() + ": " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  return parse_job_record(text.str(), path.string());
}

}  // namespace bellows::controller
