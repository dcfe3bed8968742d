#pragma once
// What a fuzz target of tests/fuzz exports, for the two programs that run it:
//
//   fuzz_driver.cpp       our own mutator and main (GCC builds, CTest): it calls
//                         LLVMFuzzerTestOneInput on mutations of seeds() and reads last_outcome
//   libFuzzer             clang -fsanitize=fuzzer (BELLOWS_LIBFUZZER=ON): it calls
//                         LLVMFuzzerTestOneInput; libfuzzer_seeds.cpp puts seeds() in the corpus
//
// A target decodes its input with one codec and checks the codec's properties; a violated
// property prints what was violated and aborts (both programs keep the input that did it).
// Thread safety: none; both programs run one input at a time.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

/// libFuzzer's entry point: runs the codec's checks on data[0, size). Returns 0.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace bellows::fuzz {

using Bytes = std::vector<std::uint8_t>;

/// Valid encoded messages, at least one of every message type of the codec: where mutation
/// starts from.
std::vector<Bytes> seeds();

/// A length or count field of an input, little-endian unsigned, for the driver to set to
/// lengths that fit the input, nearly fit, or are absurd.
struct LengthField {
  std::size_t offset = 0;  ///< where it starts in the input
  std::size_t width = 4;   ///< 1, 2, 4 or 8 bytes
  std::uint64_t fits = 0;  ///< the value that would agree with the input's size
};

/// The length fields of this input as far as its header tells (none when it is too short).
std::vector<LengthField> length_fields(std::span<const std::uint8_t> input);

enum class Outcome { accepted, refused };

/// What the last LLVMFuzzerTestOneInput call made of its input, and the codec's error text
/// when it refused it (for the driver's counts and --reproduce).
inline Outcome last_outcome = Outcome::refused;
inline std::string last_error;

/// Reports a violated property of the codec on `input` and aborts: libFuzzer and the
/// driver both write the input to a file on the abort.
[[noreturn]] inline void violated(const char* property, std::span<const std::uint8_t> input,
                                  const std::string& detail = {}) {
  std::fprintf(stderr, "fuzz: property violated: %s\n", property);
  if (!detail.empty()) std::fprintf(stderr, "fuzz:   %s\n", detail.c_str());
  std::fprintf(stderr, "fuzz:   input of %zu bytes:", input.size());
  for (std::size_t i = 0; i < input.size() && i < 96; ++i) std::fprintf(stderr, " %02x", input[i]);
  std::fprintf(stderr, "%s\n", input.size() > 96 ? " ..." : "");
  std::fflush(stderr);
  std::abort();
}

/// `hex(bytes)` for the detail of a violation: the first 96 bytes in hexadecimal.
inline std::string hex(std::span<const std::uint8_t> bytes) {
  static const char* digits = "0123456789abcdef";
  std::string text;
  for (std::size_t i = 0; i < bytes.size() && i < 96; ++i) {
    if (i != 0) text += ' ';
    text += digits[bytes[i] >> 4];
    text += digits[bytes[i] & 0xfu];
  }
  if (bytes.size() > 96) text += " ...";
  return text;
}

}  // namespace bellows::fuzz
