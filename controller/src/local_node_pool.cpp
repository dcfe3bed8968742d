#include "bellows/controller/local_node_pool.hpp"

#include <bellows/protocol/process_identity.hpp>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <stdexcept>
#include <unordered_set>

namespace bellows::controller {

namespace {

std::string plural(std::size_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

/// An open, locked state file; unlocked and closed when it goes.
class LockedFile {
 public:
  explicit LockedFile(const std::filesystem::path& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0) fail("cannot open");
    if (::flock(fd_, LOCK_EX) != 0) fail("cannot lock");
  }
  ~LockedFile() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  LockedFile(const LockedFile&) = delete;
  LockedFile& operator=(const LockedFile&) = delete;

  [[nodiscard]] std::string read() {
    std::string text;
    char buffer[4096];
    if (::lseek(fd_, 0, SEEK_SET) < 0) fail("cannot read");
    for (;;) {
      const ssize_t n = ::read(fd_, buffer, sizeof buffer);
      if (n < 0) fail("cannot read");
      if (n == 0) break;
      text.append(buffer, static_cast<std::size_t>(n));
    }
    return text;
  }
  void write(const std::string& text) {
    if (::ftruncate(fd_, 0) != 0 || ::lseek(fd_, 0, SEEK_SET) < 0) fail("cannot write");
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
      if (n < 0) fail("cannot write");
      done += static_cast<std::size_t>(n);
    }
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw std::runtime_error(std::string("local node pool: ") + what + " " + path_.string() + ": " +
                             std::strerror(errno));
  }
  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace

LocalNodePool::LocalNodePool(std::size_t size, std::string prefix) : prefix_(std::move(prefix)), at_least_(size) {
  if (size == 0) throw std::invalid_argument("local node pool: needs at least 1 node, got 0");
  if (prefix_.empty()) throw std::invalid_argument("local node pool: the node name prefix is empty");
  state_.owners.assign(size, std::string());
}

template <class F>
auto LocalNodePool::update(F&& f) const {
  std::lock_guard lock(mutex_);
  bool changed = false;
  if (state_file_.empty()) return f(state_, changed);
  LockedFile file(state_file_);
  const std::string text = file.read();
  State state;
  if (!text.empty()) {
    try {
      const auto j = nlohmann::json::parse(text);
      state.owners = j.at("nodes").get<std::vector<std::string>>();
      for (const auto& w : j.at("waiting")) {
        state.waiting.push_back({w.at("job").get<std::string>(), w.at("nodes").get<unsigned>()});
      }
      state.processes = j.at("processes").get<std::map<std::string, std::string>>();
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error("local node pool: " + state_file_.string() + " is not a pool state (" +
                               e.what() + "); remove it when no job of the local backend runs");
    }
  }
  if (text.empty() || state.owners.size() < at_least_) {
    state.owners.resize(std::max(state.owners.size(), at_least_));
    changed = true;
  }
  // A job whose process is gone (killed) holds nothing and waits for nothing any more.
  for (auto it = state.processes.begin(); it != state.processes.end();) {
    if (protocol::ProcessIdentity::parse(it->second).alive()) {
      ++it;
      continue;
    }
    for (std::string& owner : state.owners) {
      if (owner == it->first) owner.clear();
    }
    std::erase_if(state.waiting, [&](const PendingJob& w) { return w.id == it->first; });
    it = state.processes.erase(it);
    changed = true;
  }
  state_ = std::move(state);
  const auto save = [&] {
    if (!changed) return;
    nlohmann::json j;
    j["nodes"] = state_.owners;
    j["waiting"] = nlohmann::json::array();
    for (const PendingJob& w : state_.waiting) j["waiting"].push_back({{"job", w.id}, {"nodes", w.nodes}});
    j["processes"] = state_.processes;
    file.write(j.dump(1) + "\n");
  };
  if constexpr (std::is_void_v<decltype(f(state_, changed))>) {
    f(state_, changed);
    save();
  } else {
    auto result = f(state_, changed);
    save();
    return result;
  }
}

LocalNodePool::LocalNodePool(std::filesystem::path state_file, std::size_t at_least, std::string prefix)
    : LocalNodePool(at_least, std::move(prefix)) {
  state_file_ = std::move(state_file);
  // The pool grows to what this job needs; the change is saved at once.
  update([](State&, bool&) {});
}

std::size_t LocalNodePool::size() const {
  return update([](State& s, bool&) { return s.owners.size(); });
}

std::vector<std::string> LocalNodePool::names() const {
  return update([this](State& s, bool&) {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < s.owners.size(); ++i) out.push_back(prefix_ + std::to_string(i));
    return out;
  });
}

std::optional<std::size_t> LocalNodePool::index_of(const State& state, const std::string& node) const {
  if (node.size() <= prefix_.size() || node.compare(0, prefix_.size(), prefix_) != 0) {
    return std::nullopt;
  }
  const char* first = node.data() + prefix_.size();
  const char* last = node.data() + node.size();
  // "local01" is not "local1": only the canonical spelling names a node.
  if (*first == '0' && last - first > 1) return std::nullopt;
  std::size_t index = 0;
  auto [end, error] = std::from_chars(first, last, index);
  if (error != std::errc() || end != last || index >= state.owners.size()) return std::nullopt;
  return index;
}

std::string LocalNodePool::range_text(const State& state) const {
  return prefix_ + "0.." + prefix_ + std::to_string(state.owners.size() - 1);
}

bool LocalNodePool::contains(const std::string& node) const {
  return update([&](State& s, bool&) { return index_of(s, node).has_value(); });
}

std::optional<std::string> LocalNodePool::owner_of(const std::string& node) const {
  return update([&](State& s, bool&) -> std::optional<std::string> {
    auto index = index_of(s, node);
    if (!index || s.owners[*index].empty()) return std::nullopt;
    return s.owners[*index];
  });
}

ExpandAnswer LocalNodePool::allocate(const std::string& job, unsigned count, unsigned min_count) {
  ExpandAnswer answer;
  if (job.empty()) {
    answer.status = {RmCode::bad_request, "allocation without a job id"};
    return answer;
  }
  if (count == 0) {
    answer.status = {RmCode::bad_request, "allocation for job " + job + ": count must be at least 1, got 0"};
    return answer;
  }
  if (min_count == 0 || min_count > count) {
    answer.status = {RmCode::bad_request, "allocation for job " + job + ": min_count must be in [1, " +
                                              std::to_string(count) + "], got " +
                                              std::to_string(min_count)};
    return answer;
  }
  update([&](State& s, bool& changed) {
    std::vector<std::size_t> idle;
    for (std::size_t i = 0; i < s.owners.size(); ++i) {
      if (s.owners[i].empty()) idle.push_back(i);
    }
    // Nodes waited for by jobs queued before this one (all of them, for a job not queued)
    // are theirs.
    std::size_t reserved = 0;
    for (const PendingJob& w : s.waiting) {
      if (w.id == job) break;
      reserved += w.nodes;
    }
    const std::size_t free = idle.size() > reserved ? idle.size() - reserved : 0;
    if (free < min_count) {
      answer.status = {RmCode::denied, "allocation for job " + job + ": " + plural(count, "node") +
                                           " requested, " + std::to_string(idle.size()) + " idle in " +
                                           range_text(s) +
                                           (reserved > 0 ? ", " + std::to_string(std::min(reserved, idle.size())) +
                                                               " of them waited for by queued jobs"
                                                         : "")};
      return;
    }
    idle.resize(std::min<std::size_t>(count, free));
    for (std::size_t i : idle) {
      s.owners[i] = job;
      answer.nodes.push_back(prefix_ + std::to_string(i));
    }
    std::erase_if(s.waiting, [&](const PendingJob& w) { return w.id == job; });
    if (!state_file_.empty()) s.processes[job] = protocol::ProcessIdentity::self().text();
    answer.status = {RmCode::ok, "granted " + std::to_string(idle.size()) + " of " +
                                     plural(count, "node") + " requested"};
    changed = true;
  });
  return answer;
}

RmStatus LocalNodePool::release(const std::string& job, const std::vector<std::string>& nodes) {
  if (job.empty()) return {RmCode::bad_request, "release without a job id"};
  if (nodes.empty()) return {RmCode::bad_request, "release by job " + job + ": no nodes listed"};
  RmStatus status;
  update([&](State& s, bool& changed) {
    std::vector<std::size_t> indices;
    std::unordered_set<std::string> seen;
    for (const std::string& node : nodes) {
      const std::string what = "release of " + node + " by job " + job + ": ";
      if (!seen.insert(node).second) {
        status = {RmCode::bad_request, what + "node listed twice"};
        return;
      }
      auto index = index_of(s, node);
      if (!index) {
        status = {RmCode::unknown_node, what + "no such node in " + range_text(s)};
        return;
      }
      if (s.owners[*index].empty()) {
        status = {RmCode::not_owner, what + "node is idle"};
        return;
      }
      if (s.owners[*index] != job) {
        status = {RmCode::not_owner, what + "node is allocated to job " + s.owners[*index]};
        return;
      }
      indices.push_back(*index);
    }
    for (std::size_t i : indices) s.owners[i].clear();
    status = {RmCode::ok, "released " + plural(indices.size(), "node") + " of job " + job};
    changed = true;
  });
  return status;
}

RmStatus LocalNodePool::take_over(const std::string& job, const std::vector<std::string>& nodes) {
  if (job.empty()) return {RmCode::bad_request, "take-over without a job id"};
  if (nodes.empty()) return {RmCode::bad_request, "take-over of job " + job + ": no nodes listed"};
  RmStatus status;
  update([&](State& s, bool& changed) {
    std::vector<std::size_t> indices;
    for (const std::string& node : nodes) {
      const auto index = index_of(s, node);
      if (!index) {
        status = {RmCode::unknown_node, "take-over of " + node + " by job " + job + ": no such node in " +
                                            range_text(s)};
        return;
      }
      if (!s.owners[*index].empty() && s.owners[*index] != job) {
        status = {RmCode::not_owner, "take-over of " + node + " by job " + job + ": node is allocated to job " +
                                         s.owners[*index] + " since the job's controller died"};
        return;
      }
      indices.push_back(*index);
    }
    for (std::size_t i : indices) s.owners[i] = job;
    if (!state_file_.empty()) s.processes[job] = protocol::ProcessIdentity::self().text();
    status = {RmCode::ok, "job " + job + " holds " + plural(indices.size(), "node") + " again"};
    changed = true;
  });
  return status;
}

std::size_t LocalNodePool::release_all(const std::string& job) {
  std::size_t released = 0;
  update([&](State& s, bool& changed) {
    for (std::string& owner : s.owners) {
      if (!job.empty() && owner == job) {
        owner.clear();
        ++released;
      }
    }
    const bool known = s.processes.erase(job) > 0;
    const auto waits = s.waiting.size();
    std::erase_if(s.waiting, [&](const PendingJob& w) { return w.id == job; });
    changed = released > 0 || known || waits != s.waiting.size();
  });
  return released;
}

std::vector<std::string> LocalNodePool::nodes_of(const std::string& job) const {
  return update([&](State& s, bool&) {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < s.owners.size(); ++i) {
      if (!job.empty() && s.owners[i] == job) out.push_back(prefix_ + std::to_string(i));
    }
    return out;
  });
}

std::vector<std::string> LocalNodePool::idle_nodes() const {
  return update([&](State& s, bool&) {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < s.owners.size(); ++i) {
      if (s.owners[i].empty()) out.push_back(prefix_ + std::to_string(i));
    }
    return out;
  });
}

void LocalNodePool::wait_for(const std::string& job, unsigned nodes) {
  update([&](State& s, bool& changed) {
    const auto it = std::find_if(s.waiting.begin(), s.waiting.end(),
                                 [&](const PendingJob& w) { return w.id == job; });
    if (it != s.waiting.end()) {
      if (it->nodes == nodes) return;
      it->nodes = nodes;
    } else {
      s.waiting.push_back({job, nodes});
    }
    if (!state_file_.empty()) s.processes[job] = protocol::ProcessIdentity::self().text();
    changed = true;
  });
}

void LocalNodePool::stop_waiting(const std::string& job) {
  update([&](State& s, bool& changed) {
    const auto before = s.waiting.size();
    std::erase_if(s.waiting, [&](const PendingJob& w) { return w.id == job; });
    changed = s.waiting.size() != before;
  });
}

std::vector<PendingJob> LocalNodePool::waiting_jobs() const {
  return update([](State& s, bool&) { return s.waiting; });
}

std::string LocalNodePool::holders_text() const {
  return update([this](State& s, bool&) {
    std::string text;
    for (std::size_t i = 0; i < s.owners.size(); ++i) {
      if (!text.empty()) text += ", ";
      text += prefix_ + std::to_string(i) + " " + (s.owners[i].empty() ? std::string("idle") : s.owners[i]);
    }
    return text;
  });
}

}  // namespace bellows::controller
