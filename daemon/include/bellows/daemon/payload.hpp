#pragma once
// Values exchanged with PMIx: process names, statuses with readable text, and Bellows
// payloads (key -> uint64 | double | string) with their conversion to and from
// pmix_info_t arrays.

#include <bellows/protocol/resize_report.hpp>

#include <pmix_common.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>

namespace bellows::daemon {

/// A PMIx process name.
struct ProcId {
  std::string nspace;
  std::uint32_t rank = 0;
  friend bool operator==(const ProcId&, const ProcId&) = default;
};
/// "nspace:rank".
std::string to_string(const ProcId& proc);
/// The pmix_proc_t for proc; std::invalid_argument when the nspace is too long for PMIx.
pmix_proc_t to_pmix(const ProcId& proc);
ProcId from_pmix(const pmix_proc_t& proc);

/// A result at the PMIx boundary: a PMIx status and text saying what happened.
struct Status {
  pmix_status_t code = PMIX_SUCCESS;
  std::string text;
  [[nodiscard]] bool ok() const noexcept { return code == PMIX_SUCCESS; }
};

/// A failed PMIx call inside the daemon: what() reads "<call> failed: <PMIx error string>".
class PmixError : public std::runtime_error {
 public:
  PmixError(const std::string& call, pmix_status_t code);
  [[nodiscard]] pmix_status_t code() const noexcept { return code_; }

 private:
  pmix_status_t code_;
};

/// PMIx_Error_string(code) as a std::string.
std::string status_string(pmix_status_t code);

/// One value of a Bellows payload; the PMIx types are PMIX_UINT64, PMIX_DOUBLE, PMIX_STRING.
using Value = std::variant<std::uint64_t, double, std::string>;
/// A Bellows event payload, ordered by key.
using Payload = std::map<std::string, Value, std::less<>>;

/// Owns a pmix_info_t array made with PMIX_INFO_CREATE (freed with PMIX_INFO_FREE).
/// Not thread-safe; move-only.
class InfoArray {
 public:
  InfoArray() noexcept = default;
  /// n zeroed entries, to be filled with load().
  explicit InfoArray(std::size_t n);
  /// The entries of payload, in key order, then nothing else.
  explicit InfoArray(const Payload& payload);
  ~InfoArray();
  InfoArray(InfoArray&& other) noexcept;
  InfoArray& operator=(InfoArray&& other) noexcept;
  InfoArray(const InfoArray&) = delete;
  InfoArray& operator=(const InfoArray&) = delete;

  /// Copies data (of PMIx type type) into entry i under key.
  void load(std::size_t i, const char* key, const void* data, pmix_data_type_t type);
  /// Copies value (as PMIX_UINT64, PMIX_DOUBLE or PMIX_STRING) into entry i under key.
  void load(std::size_t i, const std::string& key, const Value& value);
  [[nodiscard]] pmix_info_t* data() noexcept { return info_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// Gives up ownership (for a PMIx release callback that frees it with PMIX_INFO_FREE).
  pmix_info_t* release() noexcept;

 private:
  pmix_info_t* info_ = nullptr;
  std::size_t size_ = 0;
};

/// The Bellows entries ("bellows." keys of type uint64, double or string) of a pmix_info_t
/// array; other entries are skipped.
Payload decode_payload(const pmix_info_t* info, std::size_t ninfo);

/// payload[key] as T; throws std::invalid_argument naming the
/// key when it is missing or of another type.
template <class T>
const T& get(const Payload& payload, std::string_view key) {
  const auto it = payload.find(key);
  if (it == payload.end())
    throw std::invalid_argument("payload has no '" + std::string(key) + "'");
  if (const T* value = std::get_if<T>(&it->second)) return *value;
  throw std::invalid_argument("payload entry '" + std::string(key) + "' has another type");
}

/// Sets each field of report from payload (a kResizeReport's): visit_fields() names its key,
/// and protocol::pmix::read_payload_value() reads it from the value it travels as. Throws
/// std::invalid_argument naming the key and what is wrong ("bellows.report.ranks: 'x' is not
/// a rank"); protocol::check(report) is the caller's.
void read_fields(const Payload& payload, protocol::ResizeReport& report);

}  // namespace bellows::daemon
