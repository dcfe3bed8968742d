// Shared helpers for the reference-library benchmarks (scalapack_reference,
// blas_reference): command-line parsing with "--name value" / "--name=value",
// deterministic input generation from global matrix indices, run statistics
// and the one-line JSON summary that every benchmark prints last.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace bellows::bench {

// Exit status for malformed command lines (distinct from a failed run, 1).
inline constexpr int kUsageExitCode = 2;

// A command-line error; the message names the offending option.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Minimal long-option parser. Each option is registered with a handler that
// receives the option's value; flags take no value.
class OptionParser {
 public:
  using ValueHandler = std::function<void(std::string_view value)>;
  using FlagHandler = std::function<void()>;

  void add_option(std::string name, ValueHandler handler) {
    options_[std::move(name)] = Entry{std::move(handler), {}};
  }
  void add_flag(std::string name, FlagHandler handler) {
    options_[std::move(name)] = Entry{{}, std::move(handler)};
  }

  // Throws UsageError for an unknown option, a missing value or a value the
  // handler rejects.
  void parse(int argc, char** argv) const {
    for (int i = 1; i < argc; ++i) {
      std::string_view arg = argv[i];
      if (!arg.starts_with("--")) {
        throw UsageError("unexpected argument '" + std::string(arg) + "'");
      }
      std::optional<std::string_view> inline_value;
      std::string name(arg);
      if (const auto eq = arg.find('='); eq != std::string_view::npos) {
        name = std::string(arg.substr(0, eq));
        inline_value = arg.substr(eq + 1);
      }
      const auto it = options_.find(name);
      if (it == options_.end()) {
        throw UsageError("unknown option '" + name + "'");
      }
      const Entry& entry = it->second;
      if (entry.flag) {
        if (inline_value) {
          throw UsageError("option '" + name + "' takes no value");
        }
        entry.flag();
        continue;
      }
      std::string_view value;
      if (inline_value) {
        value = *inline_value;
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        throw UsageError("option '" + name + "' needs a value");
      }
      entry.value(value);
    }
  }

 private:
  struct Entry {
    ValueHandler value;
    FlagHandler flag;
  };
  std::map<std::string, Entry, std::less<>> options_;
};

// Parses a whole string as an integer in [min_value, max_value].
inline std::int64_t parse_integer(std::string_view option, std::string_view text,
                                  std::int64_t min_value, std::int64_t max_value) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) {
    throw UsageError("option '" + std::string(option) + "': '" + std::string(text) +
                     "' is not an integer");
  }
  if (value < min_value || value > max_value) {
    throw UsageError("option '" + std::string(option) + "': " + std::to_string(value) +
                     " is out of range [" + std::to_string(min_value) + ", " +
                     std::to_string(max_value) + "]");
  }
  return value;
}

// The two measured operations.
enum class Operation { kGemm, kPotrf };

inline Operation parse_operation(std::string_view option, std::string_view text) {
  if (text == "gemm") return Operation::kGemm;
  if (text == "potrf") return Operation::kPotrf;
  throw UsageError("option '" + std::string(option) + "': expected 'gemm' or 'potrf', got '" +
                   std::string(text) + "'");
}

inline const char* operation_name(Operation op) {
  return op == Operation::kGemm ? "gemm" : "potrf";
}

// Floating-point operation count: 2N^3 for C = A*B, N^3/3 for Cholesky.
inline double operation_flops(Operation op, std::int64_t n) {
  const auto nd = static_cast<double>(n);
  return op == Operation::kGemm ? 2.0 * nd * nd * nd : nd * nd * nd / 3.0;
}

// Deterministic pseudo-random matrix entries as a pure function of
// (matrix id, global row, global column), so any process can produce any
// part of a matrix without communication.
inline std::uint64_t mix64(std::uint64_t x) {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Uniform in [-0.5, 0.5).
inline double uniform_entry(std::uint64_t matrix_id, std::int64_t row, std::int64_t col) {
  const std::uint64_t h = mix64(mix64(matrix_id ^ (static_cast<std::uint64_t>(row) << 32)) ^
                                static_cast<std::uint64_t>(col));
  return static_cast<double>(h >> 11) * 0x1.0p-53 - 0.5;
}

// Symmetric positive definite: symmetric uniform part plus n on the diagonal
// (strictly diagonally dominant).
inline double spd_entry(std::uint64_t matrix_id, std::int64_t n, std::int64_t row,
                        std::int64_t col) {
  const double value = uniform_entry(matrix_id, std::min(row, col), std::max(row, col));
  return row == col ? value + static_cast<double>(n) : value;
}

inline constexpr std::uint64_t kMatrixA = 0xA11CE;
inline constexpr std::uint64_t kMatrixB = 0xB0B;

struct RunResult {
  double seconds = 0.0;
  double gflops = 0.0;
};

inline double median_gflops(const std::vector<RunResult>& runs) {
  std::vector<double> rates;
  rates.reserve(runs.size());
  for (const auto& r : runs) rates.push_back(r.gflops);
  std::sort(rates.begin(), rates.end());
  const std::size_t mid = rates.size() / 2;
  return rates.size() % 2 == 1 ? rates[mid] : 0.5 * (rates[mid - 1] + rates[mid]);
}

inline double best_gflops(const std::vector<RunResult>& runs) {
  double best = 0.0;
  for (const auto& r : runs) best = std::max(best, r.gflops);
  return best;
}

// JSON array body for the "runs" field.
inline std::string runs_json(const std::vector<RunResult>& runs) {
  std::string out = "[";
  char buffer[96];
  for (std::size_t i = 0; i < runs.size(); ++i) {
    std::snprintf(buffer, sizeof buffer, "%s{\"seconds\":%.6f,\"gflops\":%.3f}", i ? "," : "",
                  runs[i].seconds, runs[i].gflops);
    out += buffer;
  }
  return out + "]";
}

}  // namespace bellows::bench
