#pragma once
// The resize timeline of a job, as `bellows run` prints it at the end and `bellows events`
// prints it on demand: one line per transition of the event log, then one summary line
// per resize.

#include <bellows/controller/event_log.hpp>

#include <cstdio>
#include <vector>

namespace bellows::cli {

/// Which lines of the event log the timeline shows.
enum class MessageLogLines {
  shown,    ///< every rank's message log after each iteration, one line each (`bellows events`)
  counted,  ///< only their number, in one line (the end of `bellows run`)
};

/// Writes the timeline of `records` (an event log, oldest first) to `out`.
void print_timeline(std::FILE* out, const std::vector<controller::EventRecord>& records,
                    MessageLogLines message_log_lines = MessageLogLines::shown);

}  // namespace bellows::cli
