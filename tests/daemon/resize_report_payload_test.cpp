// The resize report through real pmix_info_t arrays, without a PMIx server (PMIx_Info_load
// needs none): each field loaded as the rank loads it (visit_fields() with payload_value,
// under the key's declared type), then read back by the daemon's own decoding
// (decode_payload, then read_fields()).

#include <bellows/daemon/payload.hpp>
#include <bellows/protocol/pmix_events.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace d = bellows::daemon;
namespace pr = bellows::protocol;
namespace proto = bellows::protocol::pmix;

d::InfoArray encode(const pr::ResizeReport& r) {
  d::InfoArray info(pr::kResizeReportFields);
  std::size_t i = 0;
  pr::visit_fields(r, [&info, &i](const char*, const char* key, const auto& value) {
    info.load(i++, key, d::Value(proto::payload_value(value)));
  });
  return info;
}

pr::ResizeReport decode(const pmix_info_t* info, std::size_t ninfo) {
  pr::ResizeReport r;
  d::read_fields(d::decode_payload(info, ninfo), r);
  return r;
}

TEST(ResizeReportPayload, EveryOutcomeRoundTripsThroughPmixInfo) {
  const std::vector<pr::ResizeReport> reports = {
      {11, pr::ResizeOutcome::committed, 4, {2, 3}, ""},
      {12, pr::ResizeOutcome::refused, 2, {}, "the job is at its maximum size"},
      {13, pr::ResizeOutcome::cancelled, 2, {}, "slurm said no"},
      {14, pr::ResizeOutcome::left, 3, {6}, ""},
  };
  for (const auto& sent : reports) {
    d::InfoArray info = encode(sent);
    ASSERT_EQ(info.size(), 5u);
    for (std::size_t i = 0; i < info.size(); ++i) {
      const pmix_info_t& entry = info.data()[i];
      const std::string key(entry.key, ::strnlen(entry.key, PMIX_MAX_KEYLEN + 1));
      EXPECT_EQ(entry.value.type, proto::key_type(key)) << key;
    }
    EXPECT_EQ(decode(info.data(), info.size()), sent) << pr::to_string(sent.outcome);
  }
}

TEST(ResizeReportPayload, TheOutcomeAndTheRanksTravelAsText) {
  d::InfoArray info = encode({14, pr::ResizeOutcome::left, 3, {6, 7}, ""});
  const d::Payload payload = d::decode_payload(info.data(), info.size());
  EXPECT_EQ(d::get<std::string>(payload, proto::kReportOutcome), "left");
  EXPECT_EQ(d::get<std::string>(payload, proto::kReportRanks), "6,7");
  EXPECT_EQ(d::get<std::uint64_t>(payload, proto::kReportJobSize), 3u);
}

TEST(ResizeReportPayload, AReportTheDaemonCannotReadNamesTheKey) {
  d::InfoArray info = encode({14, pr::ResizeOutcome::left, 3, {6}, ""});
  d::Payload payload = d::decode_payload(info.data(), info.size());
  payload[proto::kReportOutcome] = std::string("drained");
  d::InfoArray bad(payload);
  try {
    (void)decode(bad.data(), bad.size());
    ADD_FAILURE() << "a report with outcome 'drained' was read";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "bellows.report.outcome: 'drained' is none of committed, refused, "
                           "left, cancelled, recovered");
  }
  payload.erase(proto::kReportText);
  d::InfoArray missing(payload);
  EXPECT_THROW((void)decode(missing.data(), missing.size()), std::invalid_argument);
}

}  // namespace
