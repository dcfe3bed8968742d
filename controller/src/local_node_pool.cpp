#include "bellows/controller/local_node_pool.hpp"

#include <algorithm>
#include <charconv>
#include <stdexcept>
#include <unordered_set>

namespace bellows::controller {

namespace {

std::string plural(std::size_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

}  // namespace

LocalNodePool::LocalNodePool(std::size_t size, std::string prefix) : prefix_(std::move(prefix)) {
  if (size == 0) throw std::invalid_argument("local node pool: needs at least 1 node, got 0");
  if (prefix_.empty()) throw std::invalid_argument("local node pool: the node name prefix is empty");
  owners_.assign(size, std::string());
}

std::vector<std::string> LocalNodePool::names() const {
  std::vector<std::string> out;
  out.reserve(owners_.size());
  for (std::size_t i = 0; i < owners_.size(); ++i) out.push_back(prefix_ + std::to_string(i));
  return out;
}

std::optional<std::size_t> LocalNodePool::index_of(const std::string& node) const {
  if (node.size() <= prefix_.size() || node.compare(0, prefix_.size(), prefix_) != 0) {
    return std::nullopt;
  }
  const char* first = node.data() + prefix_.size();
  const char* last = node.data() + node.size();
  // "local01" is not "local1": only the canonical spelling names a node.
  if (*first == '0' && last - first > 1) return std::nullopt;
  std::size_t index = 0;
  auto [end, error] = std::from_chars(first, last, index);
  if (error != std::errc() || end != last || index >= owners_.size()) return std::nullopt;
  return index;
}

std::string LocalNodePool::range_text() const {
  return prefix_ + "0.." + prefix_ + std::to_string(owners_.size() - 1);
}

bool LocalNodePool::contains(const std::string& node) const { return index_of(node).has_value(); }

std::optional<std::string> LocalNodePool::owner_of(const std::string& node) const {
  auto index = index_of(node);
  if (!index) return std::nullopt;
  std::lock_guard lock(mutex_);
  if (owners_[*index].empty()) return std::nullopt;
  return owners_[*index];
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
  std::lock_guard lock(mutex_);
  std::vector<std::size_t> idle;
  for (std::size_t i = 0; i < owners_.size() && idle.size() < count; ++i) {
    if (owners_[i].empty()) idle.push_back(i);
  }
  if (idle.size() < min_count) {
    answer.status = {RmCode::denied, "allocation for job " + job + ": " + plural(count, "node") +
                                         " requested, " + std::to_string(idle.size()) + " idle in " +
                                         range_text()};
    return answer;
  }
  for (std::size_t i : idle) {
    owners_[i] = job;
    answer.nodes.push_back(prefix_ + std::to_string(i));
  }
  answer.status = {RmCode::ok, "granted " + std::to_string(idle.size()) + " of " +
                                   plural(count, "node") + " requested"};
  return answer;
}

RmStatus LocalNodePool::release(const std::string& job, const std::vector<std::string>& nodes) {
  if (job.empty()) return {RmCode::bad_request, "release without a job id"};
  if (nodes.empty()) return {RmCode::bad_request, "release by job " + job + ": no nodes listed"};
  std::lock_guard lock(mutex_);
  std::vector<std::size_t> indices;
  std::unordered_set<std::string> seen;
  for (const std::string& node : nodes) {
    const std::string what = "release of " + node + " by job " + job + ": ";
    if (!seen.insert(node).second) return {RmCode::bad_request, what + "node listed twice"};
    auto index = index_of(node);
    if (!index) return {RmCode::unknown_node, what + "no such node in " + range_text()};
    if (owners_[*index].empty()) return {RmCode::not_owner, what + "node is idle"};
    if (owners_[*index] != job) {
      return {RmCode::not_owner, what + "node is allocated to job " + owners_[*index]};
    }
    indices.push_back(*index);
  }
  for (std::size_t i : indices) owners_[i].clear();
  return {RmCode::ok, "released " + plural(indices.size(), "node") + " of job " + job};
}

std::size_t LocalNodePool::release_all(const std::string& job) {
  std::lock_guard lock(mutex_);
  std::size_t released = 0;
  for (std::string& owner : owners_) {
    if (!job.empty() && owner == job) {
      owner.clear();
      ++released;
    }
  }
  return released;
}

std::vector<std::string> LocalNodePool::nodes_of(const std::string& job) const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < owners_.size(); ++i) {
    if (!job.empty() && owners_[i] == job) out.push_back(prefix_ + std::to_string(i));
  }
  return out;
}

std::vector<std::string> LocalNodePool::idle_nodes() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (std::size_t i = 0; i < owners_.size(); ++i) {
    if (owners_[i].empty()) out.push_back(prefix_ + std::to_string(i));
  }
  return out;
}

}  // namespace bellows::controller
