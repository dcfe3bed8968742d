// The resize report record (resize_report.hpp): its field list, its check, the outcomes'
// names, and the PMIx payload form of each field (payload_value / read_payload_value) with a
// round trip of whole records and every refusal text. No PMIx here: a payload is modelled as
// the daemon decodes one, key -> uint64 or string.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "bellows/protocol/resize_report.hpp"

namespace bellows::protocol {
namespace {

using Ranks = std::vector<std::uint32_t>;

// Each field is visited once, with its transport name and its PMIx key, and can be written
// through the visitor.
TEST(ResizeReport, VisitFieldsNamesEachFieldWithItsKey) {
  ResizeReport r;
  std::vector<std::string> names, keys;
  visit_fields(r, [&](const char* name, const char* key, auto& value) {
    names.emplace_back(name);
    keys.emplace_back(key);
    using T = std::remove_reference_t<decltype(value)>;
    if constexpr (std::is_same_v<T, std::uint64_t>) value = 7;
    if constexpr (std::is_same_v<T, ResizeOutcome>) value = ResizeOutcome::left;
    if constexpr (std::is_same_v<T, std::uint32_t>) value = 3;
    if constexpr (std::is_same_v<T, Ranks>) value = {5, 6};
    if constexpr (std::is_same_v<T, std::string>) value = "why";
  });
  EXPECT_EQ(names, (std::vector<std::string>{"resize_id", "outcome", "job_size", "ranks", "text"}));
  EXPECT_EQ(keys, (std::vector<std::string>{"bellows.resize.id", "bellows.report.outcome",
                                            "bellows.report.job_size", "bellows.report.ranks",
                                            "bellows.report.text"}));
  EXPECT_EQ(names.size(), kResizeReportFields);
  EXPECT_EQ(r, (ResizeReport{7, ResizeOutcome::left, 3, {5, 6}, "why"}));
}

TEST(ResizeReport, EachOutcomeHasOneNameAndItsWireNumber) {
  EXPECT_EQ(to_string(ResizeOutcome::committed), "committed");
  EXPECT_EQ(to_string(ResizeOutcome::refused), "refused");
  EXPECT_EQ(to_string(ResizeOutcome::left), "left");
  EXPECT_EQ(to_string(ResizeOutcome::cancelled), "cancelled");
  EXPECT_EQ(to_string(static_cast<ResizeOutcome>(9)), "");
  for (const auto& o : kResizeOutcomes) EXPECT_EQ(resize_outcome_named(o.name), o.outcome);
  EXPECT_EQ(resize_outcome_named("drained"), std::nullopt);
  EXPECT_EQ(static_cast<int>(ResizeOutcome::committed), 1);
  EXPECT_EQ(static_cast<int>(ResizeOutcome::refused), 2);
  EXPECT_EQ(static_cast<int>(ResizeOutcome::left), 3);
  EXPECT_EQ(static_cast<int>(ResizeOutcome::cancelled), 4);
  EXPECT_EQ(static_cast<int>(ResizeOutcome::recovered), 5);
  EXPECT_EQ(to_string(ResizeOutcome::recovered), "recovered");
}

TEST(ResizeReport, CheckNamesTheFirstImpossibleField) {
  EXPECT_EQ(check(ResizeReport{}), "");
  EXPECT_EQ(check(ResizeReport{1, ResizeOutcome::left, 3, {4}, ""}), "");
  EXPECT_EQ(check(ResizeReport{1, static_cast<ResizeOutcome>(0), 3, {}, ""}),
            "outcome: 0 is none of committed (1), refused (2), left (3), cancelled (4), recovered (5)");
  EXPECT_EQ(check(ResizeReport{1, static_cast<ResizeOutcome>(6), 3, {}, ""}),
            "outcome: 6 is none of committed (1), refused (2), left (3), cancelled (4), recovered (5)");
  EXPECT_EQ(check(ResizeReport{1, ResizeOutcome::left, 3, {}, ""}),
            "ranks: empty although the outcome is left");
}

// ---------------------------------------------------------------- the PMIx payload form

using Value = std::variant<std::uint64_t, std::string>;
using Payload = std::map<std::string, Value>;

// What ControlChannel::report_resize does: each field under its key, as it travels.
Payload encode(const ResizeReport& r) {
  Payload payload;
  visit_fields(r, [&payload](const char*, const char* key, const auto& value) {
    payload[key] = pmix::payload_value(value);
  });
  return payload;
}

// What the daemon does: each field read back from the value its key carries; "" or why not.
std::string decode(const Payload& payload, ResizeReport& r) {
  std::string error;
  visit_fields(r, [&](const char*, const char* key, auto& value) {
    using Carried = pmix::PayloadValue<std::remove_cvref_t<decltype(value)>>;
    if (!error.empty()) return;
    const auto* carried = std::get_if<Carried>(&payload.at(key));
    if (carried == nullptr) {
      error = std::string(key) + ": another type";
      return;
    }
    if (std::string why = pmix::read_payload_value(*carried, value); !why.empty())
      error = std::string(key) + ": " + why;
  });
  return error;
}

TEST(ResizeReportPayload, FieldsTravelAsCountsAndText) {
  const Payload payload = encode({12, ResizeOutcome::committed, 9, {7, 8}, "ok"});
  EXPECT_EQ(payload, (Payload{{"bellows.resize.id", std::uint64_t{12}},
                              {"bellows.report.outcome", std::string("committed")},
                              {"bellows.report.job_size", std::uint64_t{9}},
                              {"bellows.report.ranks", std::string("7,8")},
                              {"bellows.report.text", std::string("ok")}}));
  EXPECT_EQ(pmix::payload_value(Ranks{}), "");
  EXPECT_EQ(pmix::payload_value(Ranks{4294967295u}), "4294967295");
  EXPECT_EQ(pmix::payload_value(ResizeOutcome::left), "left");
}

TEST(ResizeReportPayload, EveryOutcomeRoundTrips) {
  const std::vector<ResizeReport> reports = {
      {5, ResizeOutcome::committed, 7, {4, 5, 6}, ""},
      {8, ResizeOutcome::left, 4, {5}, ""},
      {9, ResizeOutcome::refused, 6, {}, "rank 0 cannot leave"},
      {10, ResizeOutcome::cancelled, 6, {}, "slurm said no"},
      {~std::uint64_t{0}, ResizeOutcome::committed, 4294967295u, {0, 4294967295u}, "a,b"},
  };
  for (const auto& sent : reports) {
    ResizeReport got;
    EXPECT_EQ(decode(encode(sent), got), "");
    EXPECT_EQ(got, sent) << to_string(sent.outcome);
  }
}

TEST(ResizeReportPayload, RefusesWhatNoReportCarries) {
  ResizeReport r{3, ResizeOutcome::refused, 2, {1}, "kept"};
  const ResizeReport before = r;
  Payload p = encode(r);
  p["bellows.report.outcome"] = std::string("drained");
  EXPECT_EQ(decode(p, r),
            "bellows.report.outcome: 'drained' is none of committed, refused, left, cancelled, recovered");
  p = encode(before);
  p["bellows.report.job_size"] = std::uint64_t{4294967296u};
  EXPECT_EQ(decode(p, r), "bellows.report.job_size: 4294967296 exceeds 4294967295");
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"8,x", "'x' is not a rank"},
           {"8,,9", "'' is not a rank"},
           {",8", "'' is not a rank"},
           {"8,", "'' is not a rank"},
           {"-1", "'-1' is not a rank"},
           {" 8", "' 8' is not a rank"},
           {"4294967296", "'4294967296' is not a rank"}}) {
    p = encode(before);
    p["bellows.report.ranks"] = text;
    EXPECT_EQ(decode(p, r), "bellows.report.ranks: " + why) << text;
  }
  // A field that could not be read is left as it was.
  Ranks ranks = {1};
  EXPECT_EQ(pmix::read_payload_value(std::string("2,y"), ranks), "'y' is not a rank");
  EXPECT_EQ(ranks, Ranks{1});
  ResizeOutcome outcome = ResizeOutcome::refused;
  EXPECT_NE(pmix::read_payload_value(std::string(""), outcome), "");
  EXPECT_EQ(outcome, ResizeOutcome::refused);
  std::uint32_t size = 2;
  EXPECT_NE(pmix::read_payload_value(std::uint64_t{1} << 32, size), "");
  EXPECT_EQ(size, 2u);
}

}  // namespace
}  // namespace bellows::protocol
