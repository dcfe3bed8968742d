#include "bellows/controller/node_list.hpp"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <stdexcept>
#include <unordered_set>

namespace bellows::controller {
namespace {

[[noreturn]] void fail(std::string_view hostlist, const std::string& why) {
  throw std::invalid_argument("hostlist '" + std::string(hostlist) + "': " + why);
}

/// Splits at commas outside brackets.
std::vector<std::string_view> top_level_items(std::string_view text) {
  std::vector<std::string_view> items;
  int depth = 0;
  std::size_t begin = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '[') {
      if (++depth > 1) fail(text, "nested '['");
    } else if (text[i] == ']') {
      if (--depth < 0) fail(text, "']' without '['");
    } else if (text[i] == ',' && depth == 0) {
      items.push_back(text.substr(begin, i - begin));
      begin = i + 1;
    }
  }
  if (depth != 0) fail(text, "'[' without ']'");
  items.push_back(text.substr(begin));
  return items;
}

unsigned long parse_number(std::string_view whole, std::string_view digits) {
  unsigned long value = 0;
  const auto* end = digits.data() + digits.size();
  auto [ptr, ec] = std::from_chars(digits.data(), end, value);
  if (digits.empty() || ec != std::errc() || ptr != end) {
    fail(whole, "'" + std::string(digits) + "' is not a number");
  }
  return value;
}

std::string padded(unsigned long value, std::size_t width) {
  std::string digits = std::to_string(value);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

/// A name split into prefix, number and width: "n07" is ("n", 7, 2); no trailing digits
/// gives width 0.
struct NumberedName {
  std::string prefix;
  unsigned long number = 0;
  std::size_t width = 0;
};

NumberedName split_name(const std::string& name) {
  std::size_t i = name.size();
  while (i > 0 && name[i - 1] >= '0' && name[i - 1] <= '9') --i;
  NumberedName n;
  n.prefix = name.substr(0, i);
  n.width = name.size() - i;
  // Widths past 18 digits do not fit: treat such a name as one without a number.
  if (n.width == 0 || n.width > 18) {
    n.prefix = name;
    n.width = 0;
    return n;
  }
  std::from_chars(name.data() + i, name.data() + name.size(), n.number);
  return n;
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view hostlist) {
  std::vector<std::string> nodes;
  if (hostlist.empty()) return nodes;
  for (std::string_view item : top_level_items(hostlist)) {
    if (item.empty()) fail(hostlist, "empty name");
    const auto open = item.find('[');
    if (open == std::string_view::npos) {
      nodes.emplace_back(item);
      continue;
    }
    const auto close = item.find(']', open);
    const std::string_view prefix = item.substr(0, open);
    const std::string_view suffix = item.substr(close + 1);
    if (suffix.find('[') != std::string_view::npos) fail(hostlist, "more than one '[' in a name");
    std::string_view ranges = item.substr(open + 1, close - open - 1);
    if (ranges.empty()) fail(hostlist, "empty brackets");
    std::size_t begin = 0;
    while (begin <= ranges.size()) {
      auto comma = ranges.find(',', begin);
      if (comma == std::string_view::npos) comma = ranges.size();
      const std::string_view range = ranges.substr(begin, comma - begin);
      const auto dash = range.find('-');
      const std::string_view first = range.substr(0, dash);
      const std::string_view last = dash == std::string_view::npos ? first : range.substr(dash + 1);
      const unsigned long lo = parse_number(hostlist, first);
      const unsigned long hi = parse_number(hostlist, last);
      if (hi < lo) fail(hostlist, "range " + std::string(range) + " runs backwards");
      if (hi - lo > 1'000'000) fail(hostlist, "range " + std::string(range) + " is too long");
      for (unsigned long v = lo; v <= hi; ++v) {
        nodes.push_back(std::string(prefix) + padded(v, first.size()) + std::string(suffix));
      }
      begin = comma + 1;
    }
  }
  return nodes;
}

std::string compress_hostlist(const std::vector<std::string>& nodes) {
  // Groups by (prefix, width) in order of first appearance; each group's numbers are
  // folded into runs in the order given.
  struct Group {
    std::string prefix;
    std::size_t width = 0;
    std::vector<unsigned long> numbers;
  };
  std::vector<Group> groups;
  for (const std::string& name : nodes) {
    NumberedName n = split_name(name);
    if (n.width == 0) {
      groups.push_back({n.prefix, 0, {}});
      continue;
    }
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
      return g.width == n.width && g.prefix == n.prefix;
    });
    if (it == groups.end()) {
      groups.push_back({n.prefix, n.width, {n.number}});
    } else {
      it->numbers.push_back(n.number);
    }
  }
  std::string out;
  for (const Group& g : groups) {
    if (!out.empty()) out += ',';
    if (g.width == 0) {
      out += g.prefix;
      continue;
    }
    if (g.numbers.size() == 1) {
      out += g.prefix + padded(g.numbers[0], g.width);
      continue;
    }
    out += g.prefix + '[';
    for (std::size_t i = 0; i < g.numbers.size();) {
      std::size_t j = i;
      while (j + 1 < g.numbers.size() && g.numbers[j + 1] == g.numbers[j] + 1) ++j;
      if (i > 0) out += ',';
      out += padded(g.numbers[i], g.width);
      if (j > i) out += '-' + padded(g.numbers[j], g.width);
      i = j + 1;
    }
    out += ']';
  }
  return out;
}

std::string join_nodes(const std::vector<std::string>& nodes) {
  std::string out;
  for (const std::string& n : nodes) {
    if (!out.empty()) out += ',';
    out += n;
  }
  return out;
}

ReleasePlan plan_release(const std::string& job, const std::vector<std::string>& held,
                         const std::string& batch_host, const std::vector<std::string>& leaving,
                         const std::vector<std::string>& known) {
  ReleasePlan plan;
  const std::string what = "release by job " + job + ": ";
  if (leaving.empty()) {
    plan.status = {RmCode::bad_request, what + "no node listed"};
    return plan;
  }
  std::unordered_set<std::string> seen;
  for (const std::string& node : leaving) {
    if (!seen.insert(node).second) {
      plan.status = {RmCode::bad_request, what + node + " is listed twice"};
      return plan;
    }
    if (std::find(held.begin(), held.end(), node) == held.end()) {
      if (std::find(known.begin(), known.end(), node) == known.end()) {
        plan.status = {RmCode::unknown_node, what + node + " is no node of the cluster"};
      } else {
        plan.status = {RmCode::not_owner, what + node + " is not allocated to job " + job};
      }
      return plan;
    }
    if (node == batch_host) {
      plan.status = {RmCode::bad_request,
                     what + node + " is the batch host of job " + job +
                         " (its batch script runs there): Slurm cannot take it away"};
      return plan;
    }
  }
  for (const std::string& node : held) {
    if (!seen.contains(node)) plan.remaining.push_back(node);
  }
  plan.status = {RmCode::ok, ""};
  return plan;
}

std::vector<std::string> taken_out_on_failure(const std::vector<std::string>& leaving,
                                              const std::vector<std::string>& held_now,
                                              const std::vector<std::string>& failed) {
  std::vector<std::string> taken;
  for (const std::string& node : leaving) {
    const bool held = std::find(held_now.begin(), held_now.end(), node) != held_now.end();
    const bool down = std::find(failed.begin(), failed.end(), node) != failed.end();
    if (!held && down) taken.push_back(node);
  }
  return taken;
}

std::vector<std::string> allocation_order(const std::vector<std::string>& held,
                                          const std::string& batch_host,
                                          const std::vector<std::string>& granted) {
  std::vector<std::string> order;
  auto holds = [&](const std::string& n) {
    return std::find(held.begin(), held.end(), n) != held.end();
  };
  auto was_granted = [&](const std::string& n) {
    return std::find(granted.begin(), granted.end(), n) != granted.end();
  };
  if (!batch_host.empty() && holds(batch_host)) order.push_back(batch_host);
  for (const std::string& n : held) {
    if (n != batch_host && !was_granted(n)) order.push_back(n);
  }
  for (const std::string& n : granted) {
    if (n != batch_host && holds(n) &&
        std::find(order.begin(), order.end(), n) == order.end()) {
      order.push_back(n);
    }
  }
  return order;
}

}  // namespace bellows::controller
