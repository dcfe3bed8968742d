#include "doctor.hpp"

#include <bellows/controller/slurm_expand_strategy.hpp>

#include <sstream>

namespace bellows::cli {
namespace {

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return {};
  const auto last = text.find_last_not_of(" \t\r");
  return text.substr(first, last - first + 1);
}

std::string value_of(const SiteFacts& facts, const std::string& key) {
  const auto it = facts.config.find(key);
  return it == facts.config.end() || it->second == "(null)" ? std::string() : it->second;
}

/// True when `list` (comma-separated) holds `item`, also as "item=...".
bool list_has(const std::string& list, const std::string& item) {
  std::istringstream in(list);
  std::string entry;
  while (std::getline(in, entry, ',')) {
    entry = trim(entry);
    if (entry == item || entry.rfind(item + "=", 0) == 0) return true;
  }
  return false;
}

/// The non-comment lines of a plugstack file that load spank_bellows.so.
bool loads_bellows_plugin(const std::string& plugstack, std::string& line_found) {
  std::istringstream in(plugstack);
  std::string line;
  while (std::getline(in, line)) {
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    if (t.find("spank_bellows.so") != std::string::npos &&
        (t.rfind("required", 0) == 0 || t.rfind("optional", 0) == 0)) {
      line_found = t;
      return true;
    }
  }
  return false;
}

}  // namespace

const char* to_string(Verdict verdict) noexcept {
  switch (verdict) {
    case Verdict::ok: return "ok";
    case Verdict::warning: return "warning";
    case Verdict::problem: return "problem";
  }
  return "?";
}

std::map<std::string, std::string> parse_scontrol_config(const std::string& text) {
  std::map<std::string, std::string> config;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    const std::string key = trim(line.substr(0, eq));
    if (key.empty() || key.find(' ') != std::string::npos) continue;
    config[key] = trim(line.substr(eq + 3));
  }
  return config;
}

std::vector<Finding> diagnose(const SiteFacts& facts) {
  std::vector<Finding> out;
  if (!facts.config_error.empty()) {
    out.push_back({"slurmctld", Verdict::problem,
                   "scontrol show config failed: " + facts.config_error,
                   "start slurmctld, or point SLURM_CONF at the cluster's slurm.conf"});
    return out;
  }
  out.push_back({"slurmctld", Verdict::ok,
                 "answers (cluster " + value_of(facts, "ClusterName") + ", Slurm " +
                     value_of(facts, "SLURM_VERSION") + ")",
                 ""});

  // The strategy `bellows run --expand-strategy auto` picks on this cluster.
  const std::string scheduler = value_of(facts, "SchedulerParameters");
  const std::string prolog = value_of(facts, "PrologFlags");
  namespace ctl = bellows::controller;
  const ctl::StrategyChoice choice =
      ctl::choose_expand_strategy(ctl::ExpandStrategy::automatic, scheduler, prolog);
  if (choice.strategy == ctl::ExpandStrategy::merge) {
    out.push_back({"expand strategy", Verdict::ok,
                   "merge: " + choice.reason + ": a job grows under its own job id (helper jobs "
                   "bellows-expand-JOBID merged into it)", ""});
  } else {
    out.push_back({"expand strategy", Verdict::ok,
                   "companion: " + choice.reason + ": a job grows by companion allocations it spans "
                   "(bellows-grow-JOBID, comment bellows:companion-of:JOBID, beside it in squeue and sacct)",
                   ""});
  }

  const std::string accounting = value_of(facts, "AccountingStorageType");
  if (accounting == "accounting_storage/slurmdbd") {
    out.push_back({"accounting", Verdict::ok, "slurmdbd (" + accounting + ")", ""});
  } else {
    out.push_back({"accounting", Verdict::problem,
                   (accounting.empty() ? std::string("none") : accounting) +
                       ": a resized job can be resized once; every later update of it fails with \"Job "
                       "update not available right now, the DB index is being set\"",
                   "run slurmdbd and set AccountingStorageType=accounting_storage/slurmdbd"});
  }

  const std::string plugstack = value_of(facts, "PlugStackConfig");
  std::string plugin_line;
  if (!facts.plugstack_error.empty()) {
    out.push_back({"SPANK plugin", Verdict::problem,
                   "cannot read PlugStackConfig " + plugstack + ": " + facts.plugstack_error,
                   "add the line `required /PATH/TO/spank_bellows.so` to " +
                       (plugstack.empty() ? std::string("plugstack.conf (PlugStackConfig)") : plugstack)});
  } else if (loads_bellows_plugin(facts.plugstack_text, plugin_line)) {
    out.push_back({"SPANK plugin", Verdict::ok, "loaded by " + plugstack + ": " + plugin_line, ""});
  } else {
    out.push_back({"SPANK plugin", Verdict::problem,
                   plugstack + " does not load spank_bellows.so: sbatch has no --elastic option",
                   "add the line `required /PATH/TO/spank_bellows.so` to " + plugstack});
  }

  // What Slurm does with an elastic job whose node fails: kill_running_job_by_node_name in
  // Slurm 22.05's job_mgr.c takes a node that goes DOWN out of a no-kill job of more than one
  // node (and kills the job's steps there); any other job ends NODE_FAIL.
  const std::string slurmd_timeout = value_of(facts, "SlurmdTimeout");
  const std::string down_after =
      "slurmctld sets a node that stops answering DOWN after SlurmdTimeout=" +
      (slurmd_timeout.empty() ? std::string("(unknown)") : slurmd_timeout);
  if (loads_bellows_plugin(facts.plugstack_text, plugin_line)) {
    out.push_back({"node loss", Verdict::ok,
                   "elastic jobs run with Slurm's no-kill, which spank_bellows.so sets at submission: a "
                   "node that goes DOWN leaves the job, which runs on (" + down_after +
                       "; the job's controller finds a silent node lost within 5 s itself and gives it back)",
                   ""});
  } else {
    out.push_back({"node loss", Verdict::warning,
                   "without spank_bellows.so an elastic job runs without Slurm's no-kill: a node that goes "
                   "DOWN ends the whole job (NODE_FAIL) (" + down_after + ")",
                   "load spank_bellows.so (above), or submit elastic jobs with --no-kill"});
  }

  const std::string select = value_of(facts, "SelectType");
  if (select == "select/linear") {
    out.push_back({"select plugin", Verdict::warning,
                   "select/linear: it can lose count of a node that joined a job by expansion and left "
                   "it; the node then shows idle but takes no job",
                   "scontrol reconfigure rebuilds its books (docs/slurm.md, Troubleshooting)"});
  } else if (select == "select/cons_tres" || select == "select/cons_res") {
    out.push_back({"select plugin", Verdict::warning,
                   select + ": nodes are shared by default; an expansion's helper job may land on a node "
                            "the job already holds",
                   "give elastic jobs whole nodes (--exclusive) or OverSubscribe=EXCLUSIVE on their partition"});
  } else {
    out.push_back({"select plugin", Verdict::ok, select.empty() ? "(unknown)" : select, ""});
  }

  if (list_has(prolog, "Contain")) {
    out.push_back({"extern step", Verdict::ok,
                   "PrologFlags=" + prolog + ": every job gets an extern step, and Slurm refuses to merge a "
                   "helper job that has one (pam_slurm_adopt sites use Contain): jobs grow by companion "
                   "allocations",
                   ""});
  } else {
    out.push_back({"extern step", Verdict::ok, "no extern step (PrologFlags=" + (prolog.empty() ? "none" : prolog) + ")", ""});
  }

  const std::string auth = value_of(facts, "AuthType");
  if (auth != "auth/munge") {
    out.push_back({"munge", Verdict::warning, "AuthType=" + auth + ": not munge", ""});
  } else if (facts.munge_error.empty()) {
    out.push_back({"munge", Verdict::ok, "reachable (" + value_of(facts, "AuthInfo") + ")", ""});
  } else {
    out.push_back({"munge", Verdict::problem, "unreachable: " + facts.munge_error,
                   "start munged on this host with the cluster's key"});
  }

  const std::string where = facts.host_name + (facts.host_address.empty() ? "" : " (" + facts.host_address + ")");
  if (facts.host_address.empty()) {
    out.push_back({"control plane", Verdict::problem,
                   "this host's name " + facts.host_name + " resolves to no IPv4 address",
                   "name every node in DNS or /etc/hosts: a job's controller listens on its batch host's "
                   "address, and each rank's MPI port carries its node's"});
  } else if (facts.host_address.starts_with("127.")) {
    out.push_back({"control plane", Verdict::warning,
                   "this host's name resolves to a loopback address, " + where +
                       ": a job's controller or rank here is reachable from this host only",
                   "fine where every node of a job is this host (scripts/local-slurm); on a cluster, map "
                   "each node's name to its network address"});
  } else {
    out.push_back({"control plane", Verdict::ok,
                   "a job's controller on this host listens on tcp on " + where +
                       ", with the job's key; its daemons and ranks reach it over the network",
                   ""});
  }
  return out;
}

}  // namespace bellows::cli
