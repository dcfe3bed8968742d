#include "bellows/controller/slurm_expand_strategy.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace bellows::controller {
namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

bool same_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

/// True when the comma-separated `list` holds `item` (also as "item=..."); case as given.
bool list_has(std::string_view list, std::string_view item, bool ignore_case) {
  while (!list.empty()) {
    const auto comma = list.find(',');
    std::string_view entry = trim(list.substr(0, comma));
    entry = entry.substr(0, entry.find('='));
    if (ignore_case ? same_ignoring_case(entry, item) : entry == item) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

std::string shown(std::string_view value) { return value.empty() ? "(none)" : std::string(value); }

}  // namespace

std::string_view to_string(ExpandStrategy strategy) noexcept {
  switch (strategy) {
    case ExpandStrategy::automatic: return "auto";
    case ExpandStrategy::merge: return "merge";
    case ExpandStrategy::companion: return "companion";
  }
  return "?";
}

bool parse_expand_strategy(std::string_view text, ExpandStrategy& strategy) noexcept {
  for (ExpandStrategy s : {ExpandStrategy::automatic, ExpandStrategy::merge, ExpandStrategy::companion}) {
    if (text == to_string(s)) {
      strategy = s;
      return true;
    }
  }
  return false;
}

StrategyChoice choose_expand_strategy(ExpandStrategy requested, std::string_view scheduler_parameters,
                                      std::string_view prolog_flags) {
  const bool permitted = list_has(scheduler_parameters, "permit_job_expansion", false);
  const bool contain = list_has(prolog_flags, "Contain", true);
  const std::string site = "SchedulerParameters=" + shown(scheduler_parameters) +
                           ", PrologFlags=" + shown(prolog_flags);
  switch (requested) {
    case ExpandStrategy::merge:
      if (!permitted)
        return {ExpandStrategy::merge, "forced (--expand-strategy merge); Slurm will refuse it: no "
                                       "permit_job_expansion (" + site + ")"};
      if (contain)
        return {ExpandStrategy::merge, "forced (--expand-strategy merge); Slurm will refuse the merge: "
                                       "every job has an extern step (" + site + ")"};
      return {ExpandStrategy::merge, "forced (--expand-strategy merge)"};
    case ExpandStrategy::companion:
      return {ExpandStrategy::companion, "forced (--expand-strategy companion)"};
    case ExpandStrategy::automatic:
      break;
  }
  if (!permitted)
    return {ExpandStrategy::companion, "Slurm does not permit job expansion (" + site + ")"};
  if (contain)
    return {ExpandStrategy::companion,
            "Slurm refuses to merge a job with an extern step, which every job has here (" + site + ")"};
  return {ExpandStrategy::merge, "Slurm permits job expansion (" + site + ")"};
}

std::string describe_growth(const StrategyChoice& choice) {
  return std::string(choice.strategy == ExpandStrategy::merge ? "merging helper jobs into it (same job id)"
                                                              : "companion allocations it spans (bellows-grow-JOBID)") +
         ": " + choice.reason;
}

GrantMinutes grant_minutes(std::optional<std::uint32_t> time_limit_minutes, std::time_t end_time,
                           std::time_t now) {
  if (!time_limit_minutes) return {{RmCode::ok, ""}, std::nullopt};
  const std::time_t left = end_time - now;
  if (left < 60) {
    return {{RmCode::denied, "the job ends in " + std::to_string(std::max<std::time_t>(left, 0)) +
                                 " s (its time limit): too late to grow"},
            std::nullopt};
  }
  return {{RmCode::ok, ""}, static_cast<std::uint32_t>(left / 60)};
}

std::string companion_name(const std::string& job) { return std::string(kCompanionPrefix) + job; }

std::string companion_comment(const std::string& job) {
  return std::string(kCompanionCommentPrefix) + job;
}

void CompanionBook::add(std::uint32_t companion, std::vector<std::string> nodes) {
  if (!nodes_.contains(companion)) order_.push_back(companion);
  auto& held = nodes_[companion];
  held.insert(held.end(), nodes.begin(), nodes.end());
}

std::optional<std::uint32_t> CompanionBook::holder_of(const std::string& node) const {
  for (const auto& [companion, held] : nodes_) {
    if (std::find(held.begin(), held.end(), node) != held.end()) return companion;
  }
  return std::nullopt;
}

std::vector<std::string> CompanionBook::nodes() const {
  std::vector<std::string> all;
  for (std::uint32_t companion : order_) {
    const auto& held = nodes_.at(companion);
    all.insert(all.end(), held.begin(), held.end());
  }
  return all;
}

std::vector<std::uint32_t> CompanionBook::companions() const { return order_; }

std::vector<std::string> CompanionBook::nodes_of(std::uint32_t companion) const {
  const auto it = nodes_.find(companion);
  return it == nodes_.end() ? std::vector<std::string>{} : it->second;
}

ReleaseSplit CompanionBook::split(const std::vector<std::string>& leaving) const {
  ReleaseSplit out;
  for (const auto& node : leaving) {
    const auto holder = holder_of(node);
    if (!holder) {
      out.own.push_back(node);
      continue;
    }
    auto it = std::find_if(out.companions.begin(), out.companions.end(),
                           [&](const CompanionRelease& c) { return c.companion == *holder; });
    if (it == out.companions.end()) {
      out.companions.push_back({*holder, {}, {}});
      it = std::prev(out.companions.end());
    }
    it->leaving.push_back(node);
  }
  for (CompanionRelease& c : out.companions) {
    for (const auto& node : nodes_.at(c.companion)) {
      if (std::find(c.leaving.begin(), c.leaving.end(), node) == c.leaving.end())
        c.remaining.push_back(node);
    }
  }
  return out;
}

void CompanionBook::remove_nodes(const std::vector<std::string>& nodes) {
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    std::erase_if(it->second, [&](const std::string& n) {
      return std::find(nodes.begin(), nodes.end(), n) != nodes.end();
    });
    if (it->second.empty()) {
      std::erase(order_, it->first);
      it = nodes_.erase(it);
    } else {
      ++it;
    }
  }
}

void CompanionBook::remove(std::uint32_t companion) {
  nodes_.erase(companion);
  std::erase(order_, companion);
}

namespace {

std::string join_names(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ",") + name;
  return text.empty() ? "no node" : text;
}

bool holds(const std::vector<std::string>& nodes, const std::string& node) {
  return std::find(nodes.begin(), nodes.end(), node) != nodes.end();
}

}  // namespace

SlurmTakeover check_slurm_takeover(const std::string& job, const std::vector<std::string>& nodes,
                                   const std::vector<CompanionAllocation>& companions,
                                   const std::vector<SlurmJobView>& views) {
  const auto view_of = [&views](const std::string& id) -> const SlurmJobView* {
    const auto it = std::find_if(views.begin(), views.end(), [&id](const SlurmJobView& v) { return v.id == id; });
    return it == views.end() || it->state.empty() ? nullptr : &*it;
  };
  const auto denied = [](std::string text) { return SlurmTakeover{{RmCode::denied, std::move(text)}, {}, {}}; };
  const SlurmJobView* own = view_of(job);
  if (own == nullptr) return denied("slurmctld does not know Slurm job " + job + " (any more): nothing to take over");
  if (own->state != "RUNNING")
    return denied("Slurm job " + job + " is " + own->state + ": nothing of it runs to take over");
  SlurmTakeover out;
  for (const CompanionAllocation& c : companions) {
    std::uint32_t id = 0;
    const auto parsed = std::from_chars(c.id.data(), c.id.data() + c.id.size(), id);
    if (parsed.ec != std::errc() || parsed.ptr != c.id.data() + c.id.size() || id == 0)
      return denied("the companion of job " + job + " named \"" + c.id + "\" is no Slurm job id");
    const SlurmJobView* view = view_of(c.id);
    const std::string holding = " (holding " + join_names(c.nodes) + ")";
    if (view == nullptr)
      return denied("companion job " + c.id + " of job " + job + holding +
                    " is unknown to slurmctld: its nodes are no longer the job's");
    if (view->comment != companion_comment(job))
      return denied("Slurm job " + c.id + " is no companion of job " + job + " (its comment is '" + view->comment +
                    "', expected '" + companion_comment(job) + "')");
    if (view->state != "RUNNING")
      return denied("companion job " + c.id + " of job " + job + holding + " is " + view->state +
                    ": its nodes are no longer the job's");
    for (const std::string& node : c.nodes) {
      if (!holds(view->nodes, node))
        return denied(node + ", a node of job " + job + " held by its companion job " + c.id +
                      ", is no longer the companion's: Slurm gives job " + c.id + " " + join_names(view->nodes));
    }
    out.companions.add(id, c.nodes);
  }
  for (const std::string& node : nodes) {
    if (out.companions.holder_of(node)) continue;
    if (node == nodes.front() && node == own->batch_host && !holds(own->nodes, node) && nodes.size() > 1) {
      out.first_node_lost = node;
      continue;
    }
    if (!holds(own->nodes, node))
      return denied(node + ", a node of job " + job + " in its record, is no longer the job's: Slurm gives job " +
                    job + " " + join_names(own->nodes));
  }
  return out;
}

}  // namespace bellows::controller
