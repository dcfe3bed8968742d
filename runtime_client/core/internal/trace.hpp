#pragma once
// Optional trace of ready tasks and completed tasks per rank over time, as JSON lines.
// Resize events go to the same file (ElasticJob writes them with Trace::append).

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace bellows::runtime {

/// Samples (time, ready tasks, completed tasks) of one rank. Samples closer than
/// kMinInterval to the previous one are dropped, except when the ready count drops
/// to zero. Thread-safe.
class Trace {
 public:
  Trace(std::string path, int rank);

  void begin_iteration(int iteration);
  void sample(double seconds, std::size_t ready, std::uint64_t completed);
  /// Appends this iteration's lines to the file in a single write (O_APPEND), so that
  /// ranks sharing the file never interleave inside a line. Returns false on I/O error.
  bool flush();

  static constexpr double kMinInterval = 200e-6;

  /// Appends `text` (whole lines) to the trace file at `path` in one write (O_APPEND).
  /// Reports a failure on stderr, naming `rank`, and returns false.
  static bool append(const std::string& path, int rank, const std::string& text);

 private:
  struct Sample {
    double seconds;
    std::size_t ready;
    std::uint64_t completed;
  };
  std::string path_;
  int rank_;
  int iteration_ = 0;
  std::mutex mutex_;
  std::vector<Sample> samples_;
  double last_seconds_ = -1.0;
};

}  // namespace bellows::runtime
