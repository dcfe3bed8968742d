// The communication options (RuntimeOptions::eager_tile_bytes, comm_poll_us,
// comm_thread_task_us, worker_poll_us): what
// validate_communication() accepts and how it names what it refuses.

#include <gtest/gtest.h>

#include "bellows/runtime/options.hpp"

namespace br = bellows::runtime;

TEST(CommunicationOptions, TheDefaultsAndTheLimitsAreAccepted) {
  br::RuntimeOptions o;
  EXPECT_EQ(o.eager_tile_bytes, 4096U);
  EXPECT_EQ(br::validate_communication(o), "");
  o.eager_tile_bytes = 0;
  o.comm_poll_us = 0;
  EXPECT_EQ(br::validate_communication(o), "");
  o.eager_tile_bytes = br::kMaxEagerTileBytes;
  o.comm_poll_us = br::kMaxCommPollUs;
  o.comm_thread_task_us = br::kMaxCommThreadTaskUs;
  EXPECT_EQ(br::validate_communication(o), "");
  o.comm_thread_task_us = 0;
  EXPECT_EQ(br::validate_communication(o), "");
  EXPECT_TRUE(o.workers_read_mail);
  o.worker_poll_us = br::kMaxWorkerPollUs;
  EXPECT_EQ(br::validate_communication(o), "");
}

TEST(CommunicationOptions, RefusalsNameTheOptionAndTheValue) {
  br::RuntimeOptions o;
  o.eager_tile_bytes = br::kMaxEagerTileBytes + 1;
  EXPECT_EQ(br::validate_communication(o), "eager tile limit must be at most 65536 bytes, got 65537");
  o = br::RuntimeOptions{};
  o.comm_poll_us = -1;
  EXPECT_EQ(br::validate_communication(o),
            "communication thread's poll after a message must be 0 to 1000 us, got -1 us");
  o.comm_poll_us = 1001;
  EXPECT_EQ(br::validate_communication(o),
            "communication thread's poll after a message must be 0 to 1000 us, got 1001 us");
  o = br::RuntimeOptions{};
  o.comm_thread_task_us = -1;
  EXPECT_EQ(br::validate_communication(o),
            "longest task the communication thread runs itself must be 0 to 1000 us, got -1 us");
  o.comm_thread_task_us = 1001;
  EXPECT_EQ(br::validate_communication(o),
            "longest task the communication thread runs itself must be 0 to 1000 us, got 1001 us");
  o = br::RuntimeOptions{};
  o.worker_poll_us = -1;
  EXPECT_EQ(br::validate_communication(o),
            "worker's poll of the mailboxes before it sleeps must be 0 to 1000 us, got -1 us");
  o.worker_poll_us = 1001;
  EXPECT_EQ(br::validate_communication(o),
            "worker's poll of the mailboxes before it sleeps must be 0 to 1000 us, got 1001 us");
}
