// A survivor whose watch hears nothing from MPI (recovery_tests `deaf=R`): the slowest a
// survivor can be to find a dead peer by itself, so that it learns of the death from an MPI
// call that failed and then from the control plane's word alone. The victims die in a barrier
// they posted, so that the survivors' barrier fails (as the barrier that starts an iteration
// did on the survivor that ended in issue 33's 16-rank runs).
#pragma once

#include <filesystem>

namespace bellows::testing::recovery {

/// From now on, every receive the runtime's peer watch posts in this process is posted from
/// MPI_ANY_SOURCE instead of its peer: such a receive never fails when a peer dies (docs/
/// recovery.md, "When a rank dies"), and cancels at once, so the watch stays silent until the
/// control plane names the dead. Nothing of Bellows itself knows of this: this test program
/// defines MPI_Irecv, which then stands in front of MPI's for every call in the process.
void make_watch_deaf();

/// How many watch receives were posted deaf so far: none means the watch's tag here no
/// longer matches the runtime's, and the test proves nothing.
[[nodiscard]] long deaf_watch_receives();

/// From now on, this process's next MPI_Ibarrier is posted and then never returns: the process
/// writes `mark` and waits there for its SIGKILL, so that its peers' barrier fails.
void stop_in_next_barrier(const std::filesystem::path& mark);

}  // namespace bellows::testing::recovery
