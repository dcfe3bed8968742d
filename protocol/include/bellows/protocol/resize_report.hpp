#pragma once
// The resize report: how a resize ended on the ranks that report it. Defined once, here, and
// walked field by field by visit_fields() wherever it is encoded or decoded:
//
//   rank -> daemon        PMIx payload of kResizeReport  runtime::ControlChannel::report_resize
//                                                         daemon::PmixServer (ReceivedResizeReport)
//   daemon -> controller  ResizeAck message              fields() in src/messages.cpp
//   controller            JobReport                      DaemonJobControl::resize_report
//
// The job's first rank reports committed, refused or cancelled; each rank that leaves in a
// shrink reports left (docs/glossary.md: the ranks leave, the controller's shrink drains).
// Each side wraps the record with what only it knows (the reporting process, the node)
// instead of repeating its fields.
//
// In a PMIx payload a field travels as payload_value() gives it (counts as uint64, the
// outcome by its name, the ranks as "8,9") and is read back by read_payload_value(): both
// sides use these two, so each form is written here only. A field is added in one place: a
// member below, its line in visit_fields() with its name and its PMIx key, the key's entry in
// pmix_events.hpp's kPayloadKeys (its type is checked there at compile time) and in
// docs/daemon.md. That changes the ResizeAck message: raise messages.hpp's kProtocolVersion.
//
// Nothing here needs PMIx or linking beyond bellows::protocol (src/resize_report.cpp).
// Thread safety: value types and pure functions.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace bellows::protocol {

namespace pmix {
// The PMIx keys of the report's fields (kResizeReport); pmix_events.hpp lists them with the
// rest of the vocabulary.

/// uint64: identifier of a resize, the same in its decided and aborted events and its reports.
inline constexpr const char* kResizeId = "bellows.resize.id";
/// string: the outcome's name (to_string(ResizeOutcome)).
inline constexpr const char* kReportOutcome = "bellows.report.outcome";
/// uint64: ranks in the job after the resize.
inline constexpr const char* kReportJobSize = "bellows.report.job_size";
/// string: the ranks concerned, comma-separated ("8,9"), may be empty.
inline constexpr const char* kReportRanks = "bellows.report.ranks";
/// string: readable detail (why a resize was refused or called off).
inline constexpr const char* kReportText = "bellows.report.text";

}  // namespace pmix

/// How a resize ended for the ranks that report it. The numbers are the wire's.
enum class ResizeOutcome : std::uint8_t {
  committed = 1,  ///< the job runs with its new membership (reported by the job's first rank)
  refused = 2,    ///< the job refused the resize and keeps its size (text says why)
  left = 3,       ///< the reporting ranks handed their work over and left the job (a shrink)
  cancelled = 4,  ///< the job dropped the resize, called off (Abort) before it carried it out
  /// the job runs on without the ranks a failure lost (reported by the job's first rank);
  /// resize_id is then the failure's id (protocol::RanksLost)
  recovered = 5,
};

/// An outcome and its name, in logs, texts and the PMIx payload.
struct ResizeOutcomeName {
  ResizeOutcome outcome;
  std::string_view name;
};

/// Every outcome, in the order of their numbers.
inline constexpr ResizeOutcomeName kResizeOutcomes[] = {
    {ResizeOutcome::committed, "committed"},
    {ResizeOutcome::refused, "refused"},
    {ResizeOutcome::left, "left"},
    {ResizeOutcome::cancelled, "cancelled"},
    {ResizeOutcome::recovered, "recovered"},
};

/// The name of an outcome ("left"), or "" for a number that is none.
constexpr std::string_view to_string(ResizeOutcome outcome) noexcept {
  for (const auto& o : kResizeOutcomes)
    if (o.outcome == outcome) return o.name;
  return "";
}

/// The outcome named name, or std::nullopt.
constexpr std::optional<ResizeOutcome> resize_outcome_named(std::string_view name) noexcept {
  for (const auto& o : kResizeOutcomes)
    if (o.name == name) return o.outcome;
  return std::nullopt;
}

/// How a resize ended on the ranks that report it.
struct ResizeReport {
  std::uint64_t resize_id = 0;
  ResizeOutcome outcome = ResizeOutcome::committed;
  std::uint32_t job_size = 0;  ///< ranks in the job after the resize (0 when unknown)
  /// The ranks concerned: committed, those that joined (an expand) or left (a shrink), in
  /// the job's numbering before it; left, the reporting ranks (not empty). Else empty.
  std::vector<std::uint32_t> ranks;
  std::string text;  ///< why the resize was refused or called off; may be empty
  bool operator==(const ResizeReport&) const = default;
};

/// Calls visit(name, pmix_key, value) for each field of r, in wire order: the one list the
/// transport codec, the ranks' PMIx payload and the daemon's decoding walk. name is the
/// field's name in the transport's texts, pmix_key its key in the kResizeReport payload.
template <class R, class Visit>
  requires std::is_same_v<std::remove_const_t<R>, ResizeReport>
constexpr void visit_fields(R& r, Visit&& visit) {
  visit("resize_id", pmix::kResizeId, r.resize_id);
  visit("outcome", pmix::kReportOutcome, r.outcome);
  visit("job_size", pmix::kReportJobSize, r.job_size);
  visit("ranks", pmix::kReportRanks, r.ranks);
  visit("text", pmix::kReportText, r.text);
}

/// The number of fields visit_fields() visits.
inline constexpr std::size_t kResizeReportFields = [] {
  std::size_t count = 0;
  ResizeReport r{};
  visit_fields(r, [&count](const char*, const char*, const auto&) { ++count; });
  return count;
}();

/// "" when r's values are possible, else the first field that is not, as "field: why"
/// ("ranks: empty although the outcome is left").
std::string check(const ResizeReport& r);

namespace pmix {

/// A report field's value as the kResizeReport payload carries it: counts and ids as
/// uint64, the outcome by its name, the ranks as "8,9" ("" for none), the text as it is.
std::uint64_t payload_value(std::uint64_t value);
std::uint64_t payload_value(std::uint32_t value);
std::string payload_value(ResizeOutcome outcome);
std::string payload_value(const std::vector<std::uint32_t>& ranks);
std::string payload_value(const std::string& text);

/// The type a field of type T travels as in a payload (std::uint64_t or std::string).
template <class T>
using PayloadValue = decltype(payload_value(std::declval<const T&>()));

/// Sets field from the value its payload carried; "" when it could, else why not, naming the
/// value ("'x' is not a rank", "'drained' is none of committed, refused, left, cancelled"),
/// and field is left as it was.
std::string read_payload_value(std::uint64_t carried, std::uint64_t& field);
std::string read_payload_value(std::uint64_t carried, std::uint32_t& field);
std::string read_payload_value(const std::string& carried, ResizeOutcome& field);
std::string read_payload_value(const std::string& carried, std::vector<std::uint32_t>& field);
std::string read_payload_value(const std::string& carried, std::string& field);

}  // namespace pmix

}  // namespace bellows::protocol
