// ModexBook: a direct modex request goes to every other node, the host's blob ends it, not_found
// from all ends it with not_found, and a lost node makes it unreachable instead of a hang.
#include <gtest/gtest.h>

#include "bellows/controller/modex_book.hpp"

#include <string>
#include <variant>
#include <vector>

namespace bellows::controller {
namespace {

using protocol::CollectiveStatus;
using protocol::ModexReply;
using protocol::ModexRequest;

const std::vector<std::string> kNodes{"n0", "n1", "n2"};

std::uint64_t asked_id(const std::vector<ModexMessageFor>& asks) {
  return std::get<ModexRequest>(asks.at(0).message).request_id;
}

TEST(ModexBook, AsksEveryOtherNodeAndTheHostsBlobEndsIt) {
  ModexBook book;
  const auto asks = book.ask("n0", ModexRequest{7, "job", 2}, kNodes);
  ASSERT_EQ(asks.size(), 2u);
  EXPECT_EQ(asks[0].node, "n1");
  EXPECT_EQ(asks[1].node, "n2");
  const std::uint64_t id = asked_id(asks);
  EXPECT_EQ(std::get<ModexRequest>(asks[1].message), (ModexRequest{id, "job", 2}));
  EXPECT_TRUE(book.answered("n1", ModexReply{id, CollectiveStatus::not_found, "not here", ""}).empty());
  const auto replies = book.answered("n2", ModexReply{id, CollectiveStatus::ok, "", "blob2"});
  EXPECT_EQ(replies, (std::vector<ModexMessageFor>{{"n0", ModexReply{7, CollectiveStatus::ok, "", "blob2"}}}));
  EXPECT_EQ(book.pending(), 0u);
}

TEST(ModexBook, TheFirstBlobEndsItAndLaterAnswersAreIgnored) {
  ModexBook book;
  const std::uint64_t id = asked_id(book.ask("n0", ModexRequest{7, "job", 1}, kNodes));
  EXPECT_EQ(book.answered("n1", ModexReply{id, CollectiveStatus::ok, "", "blob1"}).size(), 1u);
  EXPECT_TRUE(book.answered("n2", ModexReply{id, CollectiveStatus::not_found, "", ""}).empty());
  EXPECT_TRUE(book.answered("n9", ModexReply{99, CollectiveStatus::ok, "", "x"}).empty());
}

TEST(ModexBook, ARankNoNodeHostsIsNotFound) {
  ModexBook book;
  const std::uint64_t id = asked_id(book.ask("n0", ModexRequest{3, "job", 9}, kNodes));
  EXPECT_TRUE(book.answered("n1", ModexReply{id, CollectiveStatus::not_found, "", ""}).empty());
  const auto replies = book.answered("n2", ModexReply{id, CollectiveStatus::not_found, "", ""});
  EXPECT_EQ(replies, (std::vector<ModexMessageFor>{
                         {"n0", ModexReply{3, CollectiveStatus::not_found, "no node of the job hosts rank 9 of job", ""}}}));
}

TEST(ModexBook, AJobOfOneNodeAnswersNotFoundAtOnce) {
  ModexBook book;
  const auto replies = book.ask("n0", ModexRequest{3, "job", 1}, {"n0"});
  EXPECT_EQ(replies, (std::vector<ModexMessageFor>{
                         {"n0", ModexReply{3, CollectiveStatus::not_found, "no other node of the job to host rank 1 of job", ""}}}));
  EXPECT_EQ(book.pending(), 0u);
}

TEST(ModexBook, TheHostsRefusalEndsItWithItsStatus) {
  ModexBook book;
  const std::uint64_t id = asked_id(book.ask("n0", ModexRequest{3, "job", 1}, kNodes));
  const auto replies = book.answered("n1", ModexReply{id, CollectiveStatus::participant_lost, "rank 1 ended", ""});
  EXPECT_EQ(replies, (std::vector<ModexMessageFor>{
                         {"n0", ModexReply{3, CollectiveStatus::participant_lost, "n1: rank 1 ended", ""}}}));
}

TEST(ModexBook, ALostNodeThatHadNotAnsweredMakesItUnreachable) {
  ModexBook book;
  const std::uint64_t id = asked_id(book.ask("n0", ModexRequest{3, "job", 2}, kNodes));
  EXPECT_TRUE(book.answered("n1", ModexReply{id, CollectiveStatus::not_found, "", ""}).empty());
  const auto replies = book.lost({"n2"}, "the daemon of n2 went away");
  EXPECT_EQ(replies, (std::vector<ModexMessageFor>{
                         {"n0", ModexReply{3, CollectiveStatus::unreachable,
                                           "node n2, which may host rank 2 of job, is lost (the daemon of n2 went away)",
                                           ""}}}));
  EXPECT_EQ(book.pending(), 0u);
}

TEST(ModexBook, UnreachableOnlyOnceEveryOtherNodeSaidNotFound) {
  ModexBook book;
  const std::uint64_t id = asked_id(book.ask("n0", ModexRequest{3, "job", 2}, kNodes));
  EXPECT_TRUE(book.lost({"n1"}, "rank 1 died").empty());
  const auto replies = book.answered("n2", ModexReply{id, CollectiveStatus::not_found, "", ""});
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(std::get<ModexReply>(replies[0].message).status, CollectiveStatus::unreachable);
}

TEST(ModexBook, ARequestOfALostNodeIsDropped) {
  ModexBook book;
  book.ask("n0", ModexRequest{3, "job", 2}, kNodes);
  EXPECT_TRUE(book.lost({"n0"}, "the daemon of n0 went away").empty());
  EXPECT_EQ(book.pending(), 0u);
}

}  // namespace
}  // namespace bellows::controller
