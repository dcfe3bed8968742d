// The cluster simulation's workload: SWF parsing, the synthetic generator, malleability.

#include "bellows/sim/cluster_workload.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace bellows::sim {
namespace {

constexpr int kSwfFields = 18;

// splitmix64 of (seed, stream, index): one uniform number in [0, 1) per triple.
double uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ULL + stream * 0xBF58476D1CE4E5B9ULL + index + 1;
  for (int round = 0; round < 2; ++round) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
  }
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

// The random streams of the generator and of make_malleable.
enum Stream : std::uint64_t { size_stream = 1, runtime_stream, estimate_stream, arrival_stream,
                              malleable_stream, serial_stream };

const char* swf_field_name(int field) {
  static const char* const kNames[kSwfFields] = {
      "job number", "submit time", "wait time", "run time", "allocated processors",
      "average CPU time", "used memory", "requested processors", "requested time",
      "requested memory", "status", "user id", "group id", "executable number",
      "queue number", "partition number", "preceding job number", "think time"};
  return kNames[field - 1];
}

std::string where(std::string_view name, int line) {
  return std::string(name) + ":" + std::to_string(line) + ": ";
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

}  // namespace

ClusterWorkload parse_swf(std::string_view text, std::string_view name, const SwfOptions& options) {
  require(options.cores_per_node >= 1, "cores per node must be at least 1, got " + std::to_string(options.cores_per_node));
  require(options.cluster_nodes >= 1, "cluster nodes must be at least 1, got " + std::to_string(options.cluster_nodes));
  ClusterWorkload out;
  std::istringstream lines{std::string(text)};
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    const auto start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos || line[start] == ';') continue;
    std::istringstream words(line);
    std::vector<std::string> fields;
    for (std::string word; words >> word;) fields.push_back(word);
    if (fields.size() != kSwfFields) {
      throw std::invalid_argument(where(name, number) + "expected " + std::to_string(kSwfFields) +
                                  " fields, found " + std::to_string(fields.size()));
    }
    double value[kSwfFields + 1] = {};
    for (int f = 1; f <= kSwfFields; ++f) {
      const std::string& word = fields[static_cast<std::size_t>(f - 1)];
      char* end = nullptr;
      errno = 0;
      const double v = std::strtod(word.c_str(), &end);
      if (end == word.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(v)) {
        throw std::invalid_argument(where(name, number) + "field " + std::to_string(f) + " (" +
                                    swf_field_name(f) + ") is not a number: '" + word + "'");
      }
      value[f] = v;
    }
    if (value[2] < 0) {
      throw std::invalid_argument(where(name, number) + "field 2 (submit time) is negative: '" + fields[1] + "'");
    }
    const double processors = value[5] > 0 ? value[5] : value[8];
    if (value[4] <= 0 || processors <= 0) {
      ++out.skipped_not_run;
      continue;
    }
    const int nodes = static_cast<int>(std::ceil(processors / options.cores_per_node));
    if (nodes > options.cluster_nodes) {
      ++out.skipped_too_large;
      continue;
    }
    ClusterJob job;
    job.id = static_cast<long long>(value[1]);
    job.submit = value[2];
    job.nodes = nodes;
    job.min_nodes = job.max_nodes = nodes;
    job.runtime = value[4];
    job.requested = std::max(value[9], job.runtime);
    out.jobs.push_back(job);
  }
  std::stable_sort(out.jobs.begin(), out.jobs.end(),
                   [](const ClusterJob& a, const ClusterJob& b) { return a.submit < b.submit; });
  if (!out.jobs.empty()) {
    const double first_submit = out.jobs.front().submit;
    for (ClusterJob& job : out.jobs) job.submit -= first_submit;
  }
  return out;
}

ClusterWorkload read_swf_file(const std::string& path, const SwfOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(path + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_swf(text.str(), path, options);
}

ClusterWorkload generate_workload(const SyntheticOptions& o) {
  require(o.jobs >= 1, "--jobs must be at least 1, got " + std::to_string(o.jobs));
  require(o.cluster_nodes >= 1, "--nodes must be at least 1, got " + std::to_string(o.cluster_nodes));
  require(o.load > 0.0 && o.load <= 10.0, "--load must be in (0, 10], got " + std::to_string(o.load));
  require(o.max_size_fraction > 0.0 && o.max_size_fraction <= 1.0,
          "--max-size-fraction must be in (0, 1], got " + std::to_string(o.max_size_fraction));
  require(o.min_runtime > 0.0 && o.max_runtime >= o.min_runtime,
          "--min-runtime must be positive and at most --max-runtime");
  require(o.max_overestimate >= 1.0, "--max-overestimate must be at least 1");
  const int largest = std::max(1, static_cast<int>(o.cluster_nodes * o.max_size_fraction));
  const int powers = static_cast<int>(std::floor(std::log2(static_cast<double>(largest)))) + 1;
  ClusterWorkload out;
  out.jobs.resize(static_cast<std::size_t>(o.jobs));
  double area = 0.0;
  for (std::size_t i = 0; i < out.jobs.size(); ++i) {
    ClusterJob& job = out.jobs[i];
    job.id = static_cast<long long>(i) + 1;
    const int power = std::min(powers - 1, static_cast<int>(uniform(o.seed, size_stream, i) * powers));
    job.nodes = job.min_nodes = job.max_nodes = 1 << power;
    job.runtime = std::round(o.min_runtime * std::pow(o.max_runtime / o.min_runtime, uniform(o.seed, runtime_stream, i)));
    job.requested = std::ceil(job.runtime * (1.0 + (o.max_overestimate - 1.0) * uniform(o.seed, estimate_stream, i)));
    area += job.nodes * job.runtime;
  }
  // Poisson arrivals: exponential gaps whose mean makes the offered load `load`.
  const double mean_gap = area / static_cast<double>(o.jobs) / (o.cluster_nodes * o.load);
  double t = 0.0;
  for (std::size_t i = 0; i < out.jobs.size(); ++i) {
    out.jobs[i].submit = std::round(t);
    t += -mean_gap * std::log1p(-uniform(o.seed, arrival_stream, i));
  }
  return out;
}

void make_malleable(ClusterWorkload& workload, const MalleableOptions& o) {
  require(o.fraction >= 0.0 && o.fraction <= 1.0, "--malleable-fraction must be in [0, 1], got " + std::to_string(o.fraction));
  require(o.range_factor >= 1, "--range-factor must be at least 1, got " + std::to_string(o.range_factor));
  require(o.serial_min >= 0.0 && o.serial_max < 1.0 && o.serial_min <= o.serial_max,
          "--serial-fraction must be MIN:MAX with 0 <= MIN <= MAX < 1");
  for (std::size_t i = 0; i < workload.jobs.size(); ++i) {
    ClusterJob& job = workload.jobs[i];
    job.malleable = uniform(o.seed, malleable_stream, i) < o.fraction;
    if (!job.malleable) {
      job.min_nodes = job.max_nodes = job.nodes;
      job.speedup = {};
      continue;
    }
    job.min_nodes = std::max(1, job.nodes / o.range_factor);
    job.max_nodes = std::max(job.nodes, std::min(o.cluster_nodes, job.nodes * o.range_factor));
    job.speedup.serial_fraction = o.serial_min + (o.serial_max - o.serial_min) * uniform(o.seed, serial_stream, i);
  }
}

}  // namespace bellows::sim
