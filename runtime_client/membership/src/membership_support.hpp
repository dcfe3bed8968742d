#pragma once
// What the membership's grows share (membership.cpp: by spawn; membership_port.cpp: by the
// ranks daemons start, which connect to the job's port): MPI calls that throw MpiError, the
// error handler kept while a call runs, communicators adopted and handed out, and waits
// that sleep instead of spinning. Internal to libbellows.

#include "bellows/runtime/membership.hpp"

#include "sleeping_wait.hpp"

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

namespace bellows::runtime::membership_detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

inline void check(int rc, const char* call) {
  if (rc != MPI_SUCCESS) throw MpiError(call, rc);
}

inline bool mpi_finalized() noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

inline bool predefined(MPI_Comm comm) noexcept {
  return comm == MPI_COMM_NULL || comm == MPI_COMM_WORLD || comm == MPI_COMM_SELF;
}

/// MPI_ERRORS_RETURN on a caller's communicator while a call of this module runs; the
/// handler it had comes back in the destructor (unless the communicator was consumed).
class ReturnErrors {
 public:
  explicit ReturnErrors(MPI_Comm comm) : comm_(comm) {
    check(MPI_Comm_get_errhandler(comm_, &saved_), "MPI_Comm_get_errhandler");
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
  ~ReturnErrors() {
    if (comm_ != MPI_COMM_NULL && !mpi_finalized()) MPI_Comm_set_errhandler(comm_, saved_);
    if (saved_ != MPI_ERRORS_ARE_FATAL && saved_ != MPI_ERRORS_RETURN && !mpi_finalized()) {
      MPI_Errhandler_free(&saved_);
    }
  }
  ReturnErrors(const ReturnErrors&) = delete;
  ReturnErrors& operator=(const ReturnErrors&) = delete;
  /// The communicator is gone: nothing to restore.
  void consumed() noexcept { comm_ = MPI_COMM_NULL; }

 private:
  MPI_Comm comm_;
  MPI_Errhandler saved_ = MPI_ERRHANDLER_NULL;
};

/// Takes ownership of a communicator MPI just created and sets MPI_ERRORS_RETURN on it.
inline Communicator adopt(MPI_Comm comm) {
  Communicator owned(comm);
  if (owned) check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  return owned;
}

/// The communicator as it is handed to the caller: MPI's default error handler.
inline MPI_Comm hand_out(Communicator comm) {
  if (comm)
    check(MPI_Comm_set_errhandler(comm.get(), MPI_ERRORS_ARE_FATAL), "MPI_Comm_set_errhandler");
  return comm.release();
}

/// Completes `request` with sleeps between tests (MPICH ch3's blocking calls poll without
/// pause and would take the cores that the starting processes need).
inline void await(MPI_Request& request, const char* call) {
  check(wait_sleeping(request, [] { std::this_thread::sleep_for(std::chrono::microseconds(200)); }),
        call);
}

inline void finish_report(GrowReport& report, MPI_Comm grown, Clock::time_point start) {
  MPI_Comm_size(grown, &report.new_size);
  report.total_seconds = seconds_since(start);
}

/// The opening of every grow: `report` cleared, with the job's size in it; returns this
/// rank's number in `current`.
inline int open_grow(MPI_Comm current, GrowReport& report) {
  report = GrowReport{};
  int rank = 0;
  check(MPI_Comm_rank(current, &rank), "MPI_Comm_rank");
  check(MPI_Comm_size(current, &report.old_size), "MPI_Comm_size");
  return rank;
}

/// Refuses a grow by a negative count, or with a payload larger than a join carries.
inline void check_grow_request(int count, std::size_t payload_ints) {
  if (count < 0) throw std::invalid_argument("grow: count must not be negative, got " + std::to_string(count));
  if (payload_ints > kJoinPayloadInts)
    throw std::invalid_argument("grow: a payload of " + std::to_string(payload_ints) + " ints exceeds " +
                                std::to_string(kJoinPayloadInts));
}

/// A grow by no process: a duplicate of `current`, reported like any grow.
inline MPI_Comm grow_by_none(MPI_Comm current, GrowReport& report, Clock::time_point start) {
  MPI_Comm copy = MPI_COMM_NULL;
  check(MPI_Comm_dup(current, &copy), "MPI_Comm_dup");
  Communicator grown = adopt(copy);
  finish_report(report, grown.get(), start);
  return hand_out(std::move(grown));
}

/// Both sides of joining a job: the job (`local` = its communicator, accept) or the processes
/// that join it (`local` = their group, or MPI_COMM_SELF for one process; connect) meet on
/// `port` and merge, the job first; the intercommunicator is disconnected.
inline Communicator join_job(MPI_Comm local, const char* port, bool newcomers) {
  MPI_Comm inter_raw = MPI_COMM_NULL;
  if (newcomers) {
    check(MPI_Comm_connect(port, MPI_INFO_NULL, 0, local, &inter_raw), "MPI_Comm_connect");
  } else {
    check(MPI_Comm_accept(port, MPI_INFO_NULL, 0, local, &inter_raw), "MPI_Comm_accept");
  }
  Communicator inter = adopt(inter_raw);
  MPI_Comm merged_raw = MPI_COMM_NULL;
  check(MPI_Intercomm_merge(inter.get(), newcomers ? 1 : 0, &merged_raw), "MPI_Intercomm_merge");
  Communicator merged = adopt(merged_raw);
  inter.disconnect();
  return merged;
}

}  // namespace bellows::runtime::membership_detail
