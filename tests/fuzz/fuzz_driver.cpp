// A small mutation fuzzer for the targets of tests/fuzz, for builds without libFuzzer (GCC)
// and for CTest: it runs LLVMFuzzerTestOneInput on mutations of the target's seeds() with a
// seeded PRNG, for a bounded time or number of runs, and prints one line:
//
//   <program>: 123456 runs in 5.0 s (24691 per s), 40000 accepted, 83456 refused, seed 7
//
// Mutations: bit flips; bytes set to 0, 0xff, 0x7f, 0x80 or at random; truncation; insertion,
// erasure and duplication of chunks; splicing with another input of the pool; the target's
// length fields (fuzz_target.hpp) set to the value that fits the input, one off it, or an
// absurd one; the same for four bytes anywhere. Inputs the codec accepts join the pool
// (at most kPoolSize), so that mutation also goes on from valid messages it made.
//
// A crash or a violated property (the target aborts) writes the input to
// <crash-dir>/<program>-crash-<seed>-<run>.bin and prints its path; the process then dies of
// the same signal (non-zero exit). --reproduce FILE runs that one input.
//
// Only the C++ standard library: <csignal> for the crash handler.

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_target.hpp"

namespace {

using bellows::fuzz::Bytes;

constexpr std::size_t kPoolSize = 4096;
constexpr std::size_t kMaxInputBytes = 1u << 16;

struct Options {
  double seconds = 5.0;
  bool seconds_given = false;
  std::uint64_t runs = 0;  ///< 0: bounded by seconds only
  std::uint64_t seed = 0;
  bool seed_given = false;
  std::string crash_dir = ".";
  std::string reproduce;
};

// What the crash handler writes: the input being run, and where.
const Bytes* g_current = nullptr;
const char* g_crash_dir = ".";
const char* g_program = "fuzz";
std::uint64_t g_seed = 0;
std::uint64_t g_run = 0;
char g_crash_path[4096];

extern "C" void on_crash(int signal) {
  // Not strictly async-signal-safe (stdio), as libFuzzer's own handler: good enough to keep
  // the input of a crash, which is all that is left to do.
  if (g_current != nullptr) {
    std::snprintf(g_crash_path, sizeof g_crash_path, "%s/%s-crash-%llu-%llu.bin", g_crash_dir,
                  g_program, static_cast<unsigned long long>(g_seed),
                  static_cast<unsigned long long>(g_run));
    if (std::FILE* file = std::fopen(g_crash_path, "wb")) {
      if (!g_current->empty()) std::fwrite(g_current->data(), 1, g_current->size(), file);
      std::fclose(file);
      std::fprintf(stderr, "fuzz_driver: the input (%zu bytes) is in %s; run it again with "
                   "--reproduce %s\n", g_current->size(), g_crash_path, g_crash_path);
    } else {
      std::fprintf(stderr, "fuzz_driver: could not write the input to %s\n", g_crash_path);
    }
  }
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

void install_crash_handler() {
  for (int signal : {SIGABRT, SIGSEGV, SIGFPE, SIGILL}) std::signal(signal, on_crash);
}

[[noreturn]] void usage(const char* program, const std::string& problem) {
  if (!problem.empty()) std::fprintf(stderr, "%s: %s\n", program, problem.c_str());
  std::fprintf(problem.empty() ? stdout : stderr,
               "Usage: %s [--seconds S] [--runs N] [--seed N] [--crash-dir DIR]\n"
               "       %s --reproduce FILE\n"
               "  --seconds S      stop after S seconds (default 5)\n"
               "  --runs N         stop after N inputs (with --seconds: whichever comes first)\n"
               "  --seed N         seed of the mutations (default: a random one, printed)\n"
               "  --crash-dir DIR  where the input of a crash is written (default .)\n"
               "  --reproduce FILE run the input in FILE once\n",
               program, program);
  std::exit(problem.empty() ? 0 : 2);
}

Options parse(int argc, char** argv) {
  Options o;
  const auto number = [&](int& i, std::string_view flag) -> std::string {
    if (i + 1 >= argc) usage(argv[0], std::string(flag) + " needs a value");
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    try {
      if (arg == "--seconds") {
        o.seconds = std::stod(number(i, arg));
        o.seconds_given = true;
        if (!(o.seconds >= 0.0)) usage(argv[0], "--seconds must be >= 0");
      } else if (arg == "--runs") {
        o.runs = std::stoull(number(i, arg));
      } else if (arg == "--seed") {
        o.seed = std::stoull(number(i, arg));
        o.seed_given = true;
      } else if (arg == "--crash-dir") {
        o.crash_dir = number(i, arg);
      } else if (arg == "--reproduce") {
        o.reproduce = number(i, arg);
      } else if (arg == "--help" || arg == "-h") {
        usage(argv[0], "");
      } else {
        usage(argv[0], "unknown option " + std::string(arg));
      }
    } catch (const std::logic_error&) {
      usage(argv[0], std::string(arg) + " needs a number, got '" + argv[i] + "'");
    }
  }
  return o;
}

std::string base_name(const char* path) {
  const std::string_view p = path;
  const auto slash = p.find_last_of('/');
  return std::string(slash == std::string_view::npos ? p : p.substr(slash + 1));
}

class Mutator {
 public:
  explicit Mutator(std::uint64_t seed) : rng_(seed) {}

  /// One to four mutations of `input`, with `other` at hand for splicing.
  void mutate(Bytes& input, const Bytes& other) {
    const int count = 1 + static_cast<int>(below(4));
    for (int i = 0; i < count; ++i) mutate_once(input, other);
    if (input.size() > kMaxInputBytes) input.resize(kMaxInputBytes);
  }

  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : rng_() % n; }

 private:
  std::uint8_t byte() { return static_cast<std::uint8_t>(rng_()); }

  void mutate_once(Bytes& b, const Bytes& other) {
    switch (below(11)) {
      case 0:  // flip a bit
        if (!b.empty()) b[below(b.size())] ^= static_cast<std::uint8_t>(1u << below(8));
        break;
      case 1: {  // a byte to a boundary value
        static constexpr std::uint8_t kBoundary[] = {0x00, 0xff, 0x7f, 0x80, 0x01, 0xfe};
        if (!b.empty()) b[below(b.size())] = kBoundary[below(std::size(kBoundary))];
        break;
      }
      case 2:  // a byte at random
        if (!b.empty()) b[below(b.size())] = byte();
        break;
      case 3:  // truncate
        b.resize(below(b.size() + 1));
        break;
      case 4: {  // insert random bytes
        const auto at = static_cast<std::ptrdiff_t>(below(b.size() + 1));
        Bytes chunk(1 + below(8));
        for (auto& x : chunk) x = byte();
        b.insert(b.begin() + at, chunk.begin(), chunk.end());
        break;
      }
      case 5: {  // erase a chunk
        if (b.empty()) break;
        const std::size_t at = below(b.size());
        const std::size_t n = 1 + below(std::min<std::size_t>(b.size() - at, 16));
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
                b.begin() + static_cast<std::ptrdiff_t>(at + n));
        break;
      }
      case 6: {  // duplicate a chunk somewhere
        if (b.empty()) break;
        const std::size_t from = below(b.size());
        const std::size_t n = 1 + below(std::min<std::size_t>(b.size() - from, 32));
        const Bytes chunk(b.begin() + static_cast<std::ptrdiff_t>(from),
                          b.begin() + static_cast<std::ptrdiff_t>(from + n));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(below(b.size() + 1)), chunk.begin(),
                 chunk.end());
        break;
      }
      case 7: {  // splice: a prefix of this input, a part of the other one
        const std::size_t keep = below(b.size() + 1);
        const std::size_t from = below(other.size() + 1);
        b.resize(keep);
        b.insert(b.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
        break;
      }
      case 8:
      case 9: {  // a length field of the target
        const auto fields = bellows::fuzz::length_fields(b);
        if (fields.empty()) break;
        const auto& f = fields[below(fields.size())];
        set_length(b, f.offset, f.width, f.fits);
        break;
      }
      default: {  // four bytes anywhere read as a length
        if (b.size() < 4) break;
        const std::size_t at = below(b.size() - 3);
        set_length(b, at, 4, b.size() - at - 4);
        break;
      }
    }
  }

  // Sets the little-endian field of `width` bytes at `offset` to a length near `fits` or an
  // absurd one.
  void set_length(Bytes& b, std::size_t offset, std::size_t width, std::uint64_t fits) {
    if (offset + width > b.size()) return;
    const std::uint64_t max = width >= 8 ? ~std::uint64_t{0} : (std::uint64_t{1} << (8 * width)) - 1;
    std::uint64_t value = 0;
    switch (below(8)) {
      case 0:
      case 1: value = fits; break;
      case 2: value = fits + 1; break;
      case 3: value = fits - 1; break;  // 0 - 1: the largest value
      case 4: value = 0; break;
      case 5: value = max; break;
      case 6: value = max / 2 + below(2); break;  // 0x7f..ff, 0x80..00
      default: value = below(std::min<std::uint64_t>(max, 4 * fits + 64) + 1); break;
    }
    for (std::size_t i = 0; i < width; ++i) b[offset + i] = static_cast<std::uint8_t>(value >> (8 * i));
  }

  std::mt19937_64 rng_;
};

bool run_one(const Bytes& input) {
  g_current = &input;
  LLVMFuzzerTestOneInput(input.data(), input.size());
  g_current = nullptr;
  return bellows::fuzz::last_outcome == bellows::fuzz::Outcome::accepted;
}

int reproduce(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    std::fprintf(stderr, "fuzz_driver: cannot read %s\n", path.c_str());
    return 2;
  }
  const Bytes input{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  const bool accepted = run_one(input);
  std::printf("%s: %zu bytes %s%s%s\n", path.c_str(), input.size(),
              accepted ? "accepted" : "refused: ",
              accepted ? "" : bellows::fuzz::last_error.c_str(), ", properties hold");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  if (!options.reproduce.empty()) return reproduce(options.reproduce);
  install_crash_handler();

  const std::string program = base_name(argv[0]);
  const std::uint64_t seed = options.seed_given ? options.seed : std::random_device{}();
  std::vector<Bytes> pool = bellows::fuzz::seeds();
  if (pool.empty()) {
    std::fprintf(stderr, "%s: the target has no seeds\n", program.c_str());
    return 2;
  }
  const std::size_t seed_count = pool.size();
  g_crash_dir = options.crash_dir.c_str();
  g_program = program.c_str();
  g_seed = seed;
  Mutator mutator(seed);
  std::uint64_t runs = 0, accepted = 0, refused = 0;

  // The seeds themselves first, then mutations of the pool.
  Bytes input;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(options.seconds));
  for (;;) {
    if (options.runs != 0 && runs >= options.runs) break;
    if ((runs & 0xff) == 0 && (options.runs == 0 || options.seconds_given) &&
        runs >= seed_count && std::chrono::steady_clock::now() >= deadline) {
      break;
    }
    if (runs < seed_count) {
      input = pool[runs];
    } else {
      input = pool[mutator.below(pool.size())];
      mutator.mutate(input, pool[mutator.below(pool.size())]);
    }
    g_run = runs;
    ++runs;
    if (run_one(input)) {
      ++accepted;
      if (runs > seed_count) {
        if (pool.size() < kPoolSize) {
          pool.push_back(input);
        } else {
          pool[seed_count + mutator.below(kPoolSize - seed_count)] = input;
        }
      }
    } else {
      ++refused;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %llu runs in %.1f s (%.0f per s), %llu accepted, %llu refused, seed %llu\n",
              program.c_str(), static_cast<unsigned long long>(runs), seconds,
              seconds > 0.0 ? static_cast<double>(runs) / seconds : 0.0,
              static_cast<unsigned long long>(accepted), static_cast<unsigned long long>(refused),
              static_cast<unsigned long long>(seed));
  return 0;
}
