// Fuzz target of the controller <-> daemon codec (bellows/protocol/messages.hpp).
//
// Properties checked on every input:
//   - decode never crashes or reads outside its input (the sanitizers of the build see that);
//   - it succeeds with error ok and an empty text, or fails with another error and a text;
//   - peer_version is set whenever the magic matched and six bytes could be read;
//   - what it accepts encodes back to the very same bytes: the codec is canonical (every
//     field is read whole, enums and flags are checked against their values, the body
//     length must match and nothing may follow the last field), so any accepted input is
//     the one encoding of its envelope; and those bytes decode to the same envelope.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "bellows/protocol/messages.hpp"
#include "fuzz_target.hpp"
#include "protocol_samples.hpp"

namespace protocol = bellows::protocol;
namespace fuzz = bellows::fuzz;

namespace bellows::fuzz {

std::vector<Bytes> seeds() {
  std::vector<Bytes> out;
  std::vector<bool> covered(std::variant_size_v<protocol::Message>, false);
  std::uint64_t id = 1;
  for (const auto& message : protocol::sample::one_of_each()) {
    covered[message.index()] = true;
    for (auto kind : {protocol::Kind::notification, protocol::Kind::request,
                      protocol::Kind::reply}) {
      const protocol::Envelope envelope{kind, kind == protocol::Kind::notification ? 0 : id++,
                                        message};
      Bytes bytes = protocol::encode(envelope);
      const auto decoded = protocol::decode(bytes);
      if (!decoded.ok()) {
        violated("every sample of tests/support/protocol_samples.hpp decodes", bytes,
                 std::string(protocol::to_string(protocol::type_of(message))) + ": " +
                     decoded.text);
      }
      out.push_back(std::move(bytes));
    }
  }
  for (std::size_t i = 0; i < covered.size(); ++i) {
    if (!covered[i]) {
      violated("the samples hold every message type", {},
               "no sample of alternative " + std::to_string(i) + " of protocol::Message");
    }
  }
  return out;
}

std::vector<LengthField> length_fields(std::span<const std::uint8_t> input) {
  if (input.size() < 16) return {};
  return {LengthField{12, 4, input.size() - protocol::kHeaderBytes}};  // the body length
}

}  // namespace bellows::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> input(data, size);
  const protocol::DecodeResult result = protocol::decode(input);

  if (size >= 6 && std::memcmp(data, protocol::kMagic, 4) == 0) {
    std::uint16_t version = 0;
    std::memcpy(&version, data + 4, 2);
    if (result.peer_version != version) {
      fuzz::violated("peer_version is set once the magic and the version could be read", input);
    }
  }
  if (!result.ok()) {
    if (result.text.empty()) {
      fuzz::violated("a refusal names what is wrong", input,
                     "decode error " + std::string(protocol::to_string(result.error)) +
                         " without a text");
    }
    fuzz::last_outcome = fuzz::Outcome::refused;
    fuzz::last_error = result.text;
    return 0;
  }
  if (!result.text.empty()) {
    fuzz::violated("an accepted message comes without an error text", input, result.text);
  }
  const auto again = protocol::encode(result.envelope);
  if (!std::equal(again.begin(), again.end(), input.begin(), input.end())) {
    fuzz::violated("an accepted message encodes back to the same bytes", input,
                   "encoded again: " + fuzz::hex(again));
  }
  const protocol::DecodeResult twice = protocol::decode(again);
  if (!twice.ok() || !(twice.envelope == result.envelope)) {
    fuzz::violated("an accepted message, encoded again, decodes to the same envelope", input,
                   twice.text);
  }
  fuzz::last_outcome = fuzz::Outcome::accepted;
  fuzz::last_error.clear();
  return 0;
}
