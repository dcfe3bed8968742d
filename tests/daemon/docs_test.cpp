// docs/daemon.md carries the PMIx vocabulary as pmix_events.hpp declares it: every event code
// with its name and value, every payload key with its type, and nothing the header lacks.
// The direction, payload and meaning columns are prose; the keys they name must exist.
// Its tables of PMIx calls, queries, standard events and registered job, node and process keys
// are checked against the daemon's code the same way, both ways.

#include "bellows/protocol/pmix_events.hpp"

#include <bellows/daemon/namespace_info.hpp>
#include <bellows/daemon/pmix_server.hpp>
#include <bellows/daemon/queries.hpp>
#include <bellows/daemon/standard_events.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace bellows::protocol::pmix {
namespace {

using Row = std::vector<std::string>;

std::string read_doc() {
  std::ifstream in(std::string(BELLOWS_SOURCE_DIR) + "/docs/daemon.md");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string section(const std::string& doc, const std::string& name) {
  const std::string begin = "<!-- " + name + ": checked against the code, begin -->\n";
  const std::string end = "<!-- " + name + ": end -->";
  const auto b = doc.find(begin);
  const auto e = doc.find(end);
  if (b == std::string::npos || e == std::string::npos || e < b) return "";
  return doc.substr(b + begin.size(), e - b - begin.size());
}

std::string trim(std::string cell) {
  const auto first = cell.find_first_not_of(' ');
  if (first == std::string::npos) return "";
  cell = cell.substr(first, cell.find_last_not_of(' ') - first + 1);
  if (cell.size() >= 2 && cell.front() == '`' && cell.back() == '`' &&
      cell.find('`', 1) == cell.size() - 1)
    cell = cell.substr(1, cell.size() - 2);
  return cell;
}

/// The body rows of the markdown table in text (its header and separator rows skipped), each
/// cell trimmed and, when it is one `code span`, without its backticks.
std::vector<Row> table_rows(const std::string& text) {
  std::vector<Row> rows;
  std::istringstream lines(text);
  std::string line;
  int seen = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line.front() != '|') continue;
    if (++seen <= 2) continue;
    Row row;
    std::string cell;
    for (std::size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '|') {
        row.push_back(trim(cell));
        cell.clear();
      } else {
        cell += line[i];
      }
    }
    rows.push_back(row);
  }
  return rows;
}

/// The `code spans` of a cell that name a Bellows key ("bellows....").
std::vector<std::string> keys_named(const std::string& cell) {
  std::vector<std::string> keys;
  std::size_t at = 0;
  while ((at = cell.find('`', at)) != std::string::npos) {
    const auto close = cell.find('`', at + 1);
    if (close == std::string::npos) break;
    const std::string span = cell.substr(at + 1, close - at - 1);
    if (span.starts_with("bellows.")) keys.push_back(span);
    at = close + 1;
  }
  return keys;
}

/// The `code spans` of a cell that name a PMIx constant ("PMIX_..."; not PMIx's functions).
std::set<std::string> pmix_constants_named(const std::string& cell) {
  std::set<std::string> constants;
  std::size_t at = 0;
  while ((at = cell.find('`', at)) != std::string::npos) {
    const auto close = cell.find('`', at + 1);
    if (close == std::string::npos) break;
    const std::string span = cell.substr(at + 1, close - at - 1);
    if (span.starts_with("PMIX_")) constants.insert(span);
    at = close + 1;
  }
  return constants;
}

std::string type_name(pmix_data_type_t type) {
  switch (type) {
    case PMIX_UINT64: return "PMIX_UINT64";
    case PMIX_DOUBLE: return "PMIX_DOUBLE";
    case PMIX_STRING: return "PMIX_STRING";
    default: return "PMIX_UNDEF";
  }
}

std::vector<Row> events_table() { return table_rows(section(read_doc(), "pmix events")); }
std::vector<Row> keys_table() { return table_rows(section(read_doc(), "pmix keys")); }

TEST(DaemonDocs, EventTableListsEveryCodeWithItsNameAndValue) {
  const auto rows = events_table();
  ASSERT_FALSE(rows.empty()) << "docs/daemon.md: no table between the pmix events markers";
  for (const auto& event : kEventCodes) {
    const std::string expected = "| `" + std::string(event.constant) + "` | `" +
                                 std::string(event.name) + "` | " + std::to_string(event.code) +
                                 " | ...";
    int found = 0;
    for (const auto& row : rows) {
      if (row.empty() || row[0] != event.constant) continue;
      ++found;
      ASSERT_GE(row.size(), 3u) << "expected a row " << expected;
      EXPECT_EQ(row[1], event.name) << "expected a row " << expected;
      EXPECT_EQ(row[2], std::to_string(event.code)) << "expected a row " << expected;
    }
    EXPECT_EQ(found, 1) << "docs/daemon.md: expected one row " << expected;
  }
  for (const auto& row : rows) {
    bool declared = false;
    for (const auto& event : kEventCodes) declared = declared || (!row.empty() && row[0] == event.constant);
    EXPECT_TRUE(declared) << "docs/daemon.md lists " << (row.empty() ? "" : row[0])
                          << ", an event code pmix_events.hpp does not declare";
  }
}

TEST(DaemonDocs, KeyTableListsEveryKeyWithItsType) {
  const auto rows = keys_table();
  ASSERT_FALSE(rows.empty()) << "docs/daemon.md: no table between the pmix keys markers";
  for (const auto& key : kPayloadKeys) {
    const std::string expected = "| `" + std::string(key.key) + "` | `" +
                                 std::string(key.constant) + "` | " + type_name(key.type) +
                                 " | ...";
    int found = 0;
    for (const auto& row : rows) {
      if (row.empty() || row[0] != key.key) continue;
      ++found;
      ASSERT_GE(row.size(), 3u) << "expected a row " << expected;
      EXPECT_EQ(row[1], key.constant) << "expected a row " << expected;
      EXPECT_EQ(row[2], type_name(key.type)) << "expected a row " << expected;
    }
    EXPECT_EQ(found, 1) << "docs/daemon.md: expected one row " << expected;
  }
  for (const auto& row : rows)
    EXPECT_NE(key_type(row.empty() ? "" : row[0]), PMIX_UNDEF)
        << "docs/daemon.md lists " << (row.empty() ? "" : row[0])
        << ", a key pmix_events.hpp does not declare";
}

TEST(DaemonDocs, PayloadsNameDeclaredKeys) {
  std::set<std::string> named;
  for (const auto& row : events_table()) {
    ASSERT_GE(row.size(), 5u) << "an event row without its payload column: " << row[0];
    for (const auto& key : keys_named(row[4])) {
      named.insert(key);
      EXPECT_NE(key_type(key), PMIX_UNDEF)
          << "docs/daemon.md: the payload of " << row[0] << " names " << key
          << ", a key pmix_events.hpp does not declare";
    }
  }
  EXPECT_FALSE(named.empty());
}

TEST(DaemonDocs, QueryTableListsEveryAnsweredKeyWithItsType) {
  const auto rows = table_rows(section(read_doc(), "pmix queries"));
  ASSERT_FALSE(rows.empty()) << "docs/daemon.md: no table between the pmix queries markers";
  for (const auto& key : daemon::kAnsweredQueryKeys) {
    const std::string expected = "| `" + std::string(key.key) + "` | `" +
                                 std::string(key.constant) + "` | " + std::string(key.type) +
                                 " | ...";
    int found = 0;
    for (const auto& row : rows) {
      if (row.empty() || row[0] != key.key) continue;
      ++found;
      ASSERT_GE(row.size(), 5u) << "expected a row " << expected;
      EXPECT_EQ(row[1], key.constant) << "expected a row " << expected;
      EXPECT_EQ(row[2], key.type) << "expected a row " << expected;
    }
    EXPECT_EQ(found, 1) << "docs/daemon.md: expected one row " << expected;
  }
  for (const auto& row : rows) {
    bool answered = false;
    for (const auto& key : daemon::kAnsweredQueryKeys)
      answered = answered || (!row.empty() && row[0] == key.key);
    EXPECT_TRUE(answered) << "docs/daemon.md lists the query key " << (row.empty() ? "" : row[0])
                          << ", which bellows/daemon/queries.hpp does not answer";
  }
}

TEST(DaemonDocs, CallTableListsEveryUpcallAndWhetherItIsAnswered) {
  const auto rows = table_rows(section(read_doc(), "pmix calls"));
  ASSERT_FALSE(rows.empty()) << "docs/daemon.md: no table between the pmix calls markers";
  const auto upcalls = daemon::server_upcalls();
  EXPECT_EQ(upcalls.size(), 28u) << "pmix_server_module_t of PMIx 4.2 has 28 entries";
  for (const auto& upcall : upcalls) {
    const std::string answered = upcall.implemented ? "yes" : "no";
    const std::string expected = "| `" + std::string(upcall.name) + "` | ... | " + answered + " | ...";
    int found = 0;
    for (const auto& row : rows) {
      if (row.empty() || row[0] != upcall.name) continue;
      ++found;
      ASSERT_GE(row.size(), 4u) << "expected a row " << expected;
      EXPECT_EQ(row[2], answered) << "expected a row " << expected;
    }
    EXPECT_EQ(found, 1) << "docs/daemon.md: expected one row " << expected;
  }
  for (const auto& row : rows) {
    bool known = false;
    for (const auto& upcall : upcalls) known = known || (!row.empty() && row[0] == upcall.name);
    EXPECT_TRUE(known) << "docs/daemon.md lists " << (row.empty() ? "" : row[0])
                       << ", which is no entry of PMIx's server module";
  }
}

TEST(DaemonDocs, StandardEventTableListsEveryStandardEventWithItsValue) {
  const auto rows = table_rows(section(read_doc(), "pmix standard events"));
  ASSERT_FALSE(rows.empty()) << "docs/daemon.md: no table between the pmix standard events markers";
  for (const auto& event : daemon::kStandardEventCodes) {
    const std::string expected =
        "| `" + std::string(event.constant) + "` | " + std::to_string(event.code) + " | ...";
    int found = 0;
    for (const auto& row : rows) {
      if (row.empty() || row[0] != event.constant) continue;
      ++found;
      ASSERT_GE(row.size(), 4u) << "expected a row " << expected;
      EXPECT_EQ(row[1], std::to_string(event.code)) << "expected a row " << expected;
    }
    EXPECT_EQ(found, 1) << "docs/daemon.md: expected one row " << expected;
  }
  for (const auto& row : rows) {
    bool raised = false;
    for (const auto& event : daemon::kStandardEventCodes)
      raised = raised || (!row.empty() && row[0] == event.constant);
    EXPECT_TRUE(raised) << "docs/daemon.md lists the standard event " << (row.empty() ? "" : row[0])
                        << ", which bellows/daemon/standard_events.hpp does not raise";
  }
}

TEST(DaemonDocs, RegisteredKeyTableListsEveryKeyRegisteredAtEachLevel) {
  const auto rows = table_rows(section(read_doc(), "pmix registered keys"));
  ASSERT_FALSE(rows.empty()) << "docs/daemon.md: no table between the pmix registered keys markers";
  // Two nodes and a rank that left: every entry namespace_info() registers at some plan.
  const auto plan = daemon::plan_registration({{"a", 0}, {"b", 1}, {"a", 2}}, {0, 1}, "a");
  const daemon::NamespaceInfo info = daemon::namespace_info("local-7", plan);
  const std::string job = "job";
  const std::string node = "each node of the job (`PMIX_NODE_INFO_ARRAY`)";
  const std::string proc = "each rank of the job (`PMIX_PROC_INFO_ARRAY`)";
  std::map<std::string, std::set<std::string>> registered;
  for (const auto& entry : info.job) registered[job].insert(std::string(entry.constant));
  for (const auto& entries : info.nodes)
    for (const auto& entry : entries) registered[node].insert(std::string(entry.constant));
  for (const auto& entries : info.procs)
    for (const auto& entry : entries) registered[proc].insert(std::string(entry.constant));
  ASSERT_EQ(registered.size(), 3u);

  std::map<std::string, int> rows_of_level;
  for (const auto& row : rows) {
    ASSERT_GE(row.size(), 2u) << "a row of the registered keys without its keys: " << row[0];
    const auto level = registered.find(row[0]);
    if (level == registered.end()) {
      ADD_FAILURE() << "docs/daemon.md lists the level '" << row[0] << "'; the levels are '" << job << "', '"
                    << node << "' and '" << proc << "'";
      continue;
    }
    ++rows_of_level[row[0]];
    const std::set<std::string> documented = pmix_constants_named(row[1]);
    for (const std::string& key : level->second)
      EXPECT_TRUE(documented.contains(key))
          << "namespace_info() registers " << key << " at the level '" << row[0]
          << "', which docs/daemon.md does not list there";
    for (const std::string& key : documented)
      EXPECT_TRUE(level->second.contains(key))
          << "docs/daemon.md lists " << key << " at the level '" << row[0]
          << "', which namespace_info() does not register there";
  }
  for (const auto& level : registered)
    EXPECT_EQ(rows_of_level[level.first], 1) << "docs/daemon.md: expected one row | " << level.first << " | ... |";
}

TEST(DaemonDocs, StatesTheProtocolVersion) {
  const std::string stated = "`kProtocolVersion = " + std::to_string(kProtocolVersion) + "`";
  EXPECT_NE(read_doc().find(stated), std::string::npos)
      << "docs/daemon.md should say " << stated;
}

}  // namespace
}  // namespace bellows::protocol::pmix
