#include "buddy_checkpoints.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <tuple>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>

#include "bellows/runtime/buddies.hpp"
#include "bellows/runtime/checkpoint_interval.hpp"
#include "bellows/runtime/team_replay.hpp"
#include "cancelled_requests.hpp"
#include "sleeping_wait.hpp"

namespace bellows::runtime {
namespace {

// Above the data tags of the communication engine (100 .. 32000), so that the transfers of
// a checkpoint never match a receive of the iteration they overlap.
constexpr int kCheckpointTag = 32100;
constexpr int kRestoreTag = 32101;
// Node names are exchanged in fixed slots; longer names are cut (a host name has at most 64).
constexpr std::size_t kNodeNameBytes = 128;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point begin) {
  return std::chrono::duration<double>(Clock::now() - begin).count();
}

std::string rank_text(int rank) { return "rank " + std::to_string(rank); }

}  // namespace

BuddyCheckpoints::BuddyCheckpoints(CheckpointOptions options, std::string node)
    : options_(std::move(options)), node_(std::move(node)) {
  if (const auto problem = validate(options_); !problem.empty()) {
    throw std::invalid_argument(problem);
  }
}

BuddyCheckpoints::~BuddyCheckpoints() {
  // The runtime completes transfers at the end of every iteration and before a resize;
  // nothing can be in flight here unless an iteration threw.
  for (auto& request : requests_) {
    if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
  }
}

std::unique_ptr<BuddyCheckpoints::NodeGather> BuddyCheckpoints::post_node_gather(MPI_Comm comm) const {
  auto gather = std::make_unique<NodeGather>();
  if (!options_.enabled) return gather;
  int size = 0;
  MPI_Comm_size(comm, &size);
  gather->mine.assign(kNodeNameBytes, '\0');
  std::memcpy(gather->mine.data(), node_.data(), std::min(node_.size(), kNodeNameBytes - 1));
  gather->all.resize(kNodeNameBytes * static_cast<std::size_t>(size));
  MPI_Iallgather(gather->mine.data(), static_cast<int>(kNodeNameBytes), MPI_CHAR, gather->all.data(),
                 static_cast<int>(kNodeNameBytes), MPI_CHAR, comm, &gather->request);
  return gather;
}

std::vector<std::string> BuddyCheckpoints::NodeGather::nodes() const {
  std::vector<std::string> names;
  for (std::size_t at = 0; at + kNodeNameBytes <= all.size(); at += kNodeNameBytes) names.emplace_back(all.data() + at);
  return names;
}

void BuddyCheckpoints::attach(MPI_Comm comm) {
  const auto gather = post_node_gather(comm);
  if (gather->request != MPI_REQUEST_NULL) wait_asleep(gather->request);
  attach(comm, gather->nodes());
}

void BuddyCheckpoints::attach(MPI_Comm comm, std::vector<std::string> nodes) {
  comm_ = comm;
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  checkpoints_.clear();
  held_.clear();
  resized_ = true;
  last_cost_seconds_ = -1.0;
  interval_ = 1;
  if (!options_.enabled) return;
  if (nodes.size() != static_cast<std::size_t>(size_)) {
    throw std::invalid_argument("BuddyCheckpoints::attach: " + std::to_string(nodes.size()) +
                                " node names for a communicator of " + std::to_string(size_) + " ranks");
  }
  nodes_ = std::move(nodes);
  distinct_nodes_ = static_cast<int>(std::set<std::string>(nodes_.begin(), nodes_.end()).size());
}

void BuddyCheckpoints::detach() {
  if (!requests_.empty()) {
    wait_all_asleep(requests_.data(), static_cast<int>(requests_.size()));
    requests_.clear();
    receives_.clear();
  }
  checkpoints_.clear();
  held_.clear();
  comm_ = MPI_COMM_NULL;
}

std::uint64_t BuddyCheckpoints::rehome(MPI_Comm comm, std::vector<std::string> nodes, long iteration,
                                       const ShrinkPlan& ranks, std::span<TiledMatrix* const> collections) {
  const auto begin = Clock::now();
  const Checkpoint* before = find(iteration);
  if (before == nullptr || !requests_.empty()) {
    throw std::logic_error("rehome: " + rank_text(rank_) + " holds no checkpoint of iteration " +
                           std::to_string(iteration) + (requests_.empty() ? "" : ", or has transfers in flight"));
  }
  const std::vector<int> old_buddies = before->buddies;
  std::vector<HeldCopy> old_copies;
  for (HeldCopy& copy : held_) {
    if (copy.iteration == iteration && copy.arrived) old_copies.push_back(std::move(copy));
  }
  const auto old_copy_of = [&](int old_owner) -> HeldCopy& {
    for (HeldCopy& copy : old_copies) {
      if (copy.owner == old_owner) return copy;
    }
    throw std::logic_error("rehome: " + rank_text(rank_) + " holds no complete copy of " + rank_text(old_owner) +
                           "'s checkpoint of iteration " + std::to_string(iteration));
  };
  attach(comm, std::move(nodes));  // every checkpoint dropped; this one is made again below
  if (!options_.enabled) return 0;
  std::vector<int> old_of;  // per survivor: its old number
  for (int r = 0; r < static_cast<int>(ranks.new_rank.size()); ++r) {
    if (!ranks.leaves(r)) old_of.push_back(r);
  }
  Checkpoint checkpoint;
  checkpoint.iteration = iteration;
  checkpoint.tiles.assign(static_cast<std::size_t>(size_), 0);
  for (const TiledMatrix* c : collections) {
    for (int n = 0; n < c->tile_cols(); ++n) {
      for (int m = 0; m < c->tile_rows(); ++m) {
        if (c->kept(m, n)) ++checkpoint.tiles[static_cast<std::size_t>(c->owner(m, n))];
      }
    }
  }
  checkpoint.buddies = choose_buddies(nodes_, checkpoint.tiles, rank_team_);
  const std::vector<RehomedCopy> plan = rehome_checkpoint(old_buddies, ranks, checkpoint.buddies);

  // This rank's copy: the tiles it owns now, each from the copy of whoever owned it then.
  std::map<std::tuple<CollectionId, int, int>, TilePtr> copied;
  for (const int old_owner : plan[static_cast<std::size_t>(rank_)].made_of) {
    for (const CopiedTile& t : old_copy_of(old_owner).tiles) copied[{t.collection, t.m, t.n}] = t.tile;
  }
  HeldCopy own{rank_, iteration, owned_tiles(collections, rank_), 0, true};
  for (CopiedTile& t : own.tiles) {
    const auto found = copied.find({t.collection, t.m, t.n});
    if (found == copied.end()) {
      throw std::logic_error("rehome: " + rank_text(rank_) + " owns tile (" + std::to_string(t.m) + ", " +
                             std::to_string(t.n) + ") of collection " + std::to_string(t.collection) +
                             ", which no copy of iteration " + std::to_string(iteration) + " it holds has");
    }
    t.tile = found->second;
    own.bytes += t.tile->bytes();
  }
  std::uint64_t sent = 0;
  const RehomedCopy& mine = plan[static_cast<std::size_t>(rank_)];
  if (mine.sent) {
    for (const CopiedTile& t : own.tiles) {
      requests_.emplace_back();
      receives_.emplace_back();
      MPI_Isend(std::as_const(*t.tile).data(), static_cast<int>(t.tile->elements()), MPI_DOUBLE, mine.buddy, kCheckpointTag, comm_,
                &requests_.back());
      sent += t.tile->bytes();
    }
  }
  held_.push_back(std::move(own));
  // The wards' copies: kept where this rank held them already, received otherwise.
  for (const int ward : wards_of(checkpoint.buddies, rank_)) {
    if (!plan[static_cast<std::size_t>(ward)].sent) {
      HeldCopy& kept = old_copy_of(old_of[static_cast<std::size_t>(ward)]);
      kept.owner = ward;
      held_.push_back(std::move(kept));
      continue;
    }
    HeldCopy copy{ward, iteration, owned_tiles(collections, ward), 0, false};
    for (std::size_t i = 0; i < copy.tiles.size(); ++i) {
      CopiedTile& t = copy.tiles[i];
      const TiledMatrix& c = *collections[t.collection];
      t.tile = std::make_shared<Tile>(c.rows_of_tile(t.m), c.cols_of_tile(t.n));
      requests_.emplace_back();
      receives_.push_back(PendingReceive{ward, i, -1});
      MPI_Irecv(t.tile->data(), static_cast<int>(t.tile->elements()), MPI_DOUBLE, ward, kCheckpointTag, comm_,
                &requests_.back());
      copy.bytes += t.tile->bytes();
    }
    held_.push_back(std::move(copy));
  }
  checkpoints_.push_back(std::move(checkpoint));
  stats_.bytes_sent += sent;
  post_seconds_ = seconds_since(begin);
  stats_.post_seconds += post_seconds_;
  return sent;  // resized_ stays set: the next boundary outside the replay takes a checkpoint
}

void BuddyCheckpoints::drop_newer_than(long iteration) {
  if (!requests_.empty()) {
    throw std::logic_error("drop_newer_than: transfers in flight (abandon_in_flight() first)");
  }
  std::erase_if(held_, [&](const HeldCopy& h) { return h.iteration > iteration; });
  std::erase_if(checkpoints_, [&](const Checkpoint& c) { return c.iteration > iteration; });
}

bool BuddyCheckpoints::due(long completed) const {
  if (!options_.enabled || comm_ == MPI_COMM_NULL) return false;
  const auto last = last_complete();
  const long interval = options_.every_iterations > 0 ? options_.every_iterations : interval_;
  return checkpoint_due(last ? completed - *last : 0, interval, resized_, last.has_value());
}

std::vector<BuddyCheckpoints::CopiedTile> BuddyCheckpoints::owned_tiles(
    std::span<TiledMatrix* const> collections, int rank) {
  std::vector<CopiedTile> tiles;
  for (const TiledMatrix* c : collections) {
    for (int n = 0; n < c->tile_cols(); ++n) {
      for (int m = 0; m < c->tile_rows(); ++m) {
        if (c->kept(m, n) && c->owner(m, n) == rank) tiles.push_back(CopiedTile{c->id(), m, n, {}});
      }
    }
  }
  return tiles;
}

void BuddyCheckpoints::take(long completed, std::span<TiledMatrix* const> collections) {
  const auto begin = Clock::now();
  if (!requests_.empty()) {
    throw std::logic_error("checkpoint of iteration " + std::to_string(completed) +
                           " taken while the transfers of the previous one are in flight");
  }
  Checkpoint checkpoint;
  checkpoint.iteration = completed;
  checkpoint.tiles.assign(static_cast<std::size_t>(size_), 0);
  for (const TiledMatrix* c : collections) {
    for (int n = 0; n < c->tile_cols(); ++n) {
      for (int m = 0; m < c->tile_rows(); ++m) {
        if (c->kept(m, n)) ++checkpoint.tiles[static_cast<std::size_t>(c->owner(m, n))];
      }
    }
  }
  if (!rank_team_.empty() && rank_team_.size() != nodes_.size()) {
    throw std::logic_error("checkpoint of iteration " + std::to_string(completed) + ": teams of " +
                           std::to_string(rank_team_.size()) + " ranks for a communicator of " +
                           std::to_string(nodes_.size()));
  }
  checkpoint.buddies = choose_buddies(nodes_, checkpoint.tiles, rank_team_);

  // The own copy: the tiles as they are now, shared with the collections.
  HeldCopy own{rank_, completed, owned_tiles(collections, rank_), 0, true};
  for (CopiedTile& t : own.tiles) {
    t.tile = collections[t.collection]->tile(t.m, t.n);
    own.bytes += t.tile->bytes();
  }
  // The copy for the buddy, tile by tile in the order both sides list them. A tile that is
  // still the one the previous complete checkpoint kept goes as an empty message when that
  // checkpoint went to the same buddy, which still holds it (it is freed only once this one
  // is complete everywhere).
  const Checkpoint* previous = nullptr;
  for (const Checkpoint& c : checkpoints_) {
    if (c.complete) previous = &c;
  }
  const long previous_iteration = previous != nullptr ? previous->iteration : -1;
  const int buddy = checkpoint.buddies[static_cast<std::size_t>(rank_)];
  const HeldCopy* previous_own =
      previous != nullptr && previous->buddies[static_cast<std::size_t>(rank_)] == buddy
          ? held(rank_, previous_iteration)
          : nullptr;
  if (buddy >= 0) {
    for (std::size_t i = 0; i < own.tiles.size(); ++i) {
      const Tile& t = *own.tiles[i].tile;
      const bool unchanged = previous_own != nullptr && previous_own->tiles.size() == own.tiles.size() &&
                             previous_own->tiles[i].tile == own.tiles[i].tile;
      requests_.emplace_back();
      receives_.emplace_back();
      MPI_Isend(t.data(), unchanged ? 0 : static_cast<int>(t.elements()), MPI_DOUBLE, buddy,
                kCheckpointTag, comm_, &requests_.back());
      if (unchanged) {
        ++stats_.tiles_unchanged;
      } else {
        ++stats_.tiles_sent;
        stats_.bytes_sent += t.bytes();
      }
    }
  }
  held_.push_back(std::move(own));
  // The wards' copies, received into tiles of their own (an empty message: the tile of the
  // previous copy, once the transfers completed).
  for (const int ward : wards_of(checkpoint.buddies, rank_)) {
    HeldCopy copy{ward, completed, owned_tiles(collections, ward), 0, false};
    const bool had_it = previous != nullptr && previous->buddies[static_cast<std::size_t>(ward)] == rank_;
    for (std::size_t i = 0; i < copy.tiles.size(); ++i) {
      CopiedTile& t = copy.tiles[i];
      const TiledMatrix& c = *collections[t.collection];
      t.tile = std::make_shared<Tile>(c.rows_of_tile(t.m), c.cols_of_tile(t.n));
      requests_.emplace_back();
      receives_.push_back(PendingReceive{ward, i, had_it ? previous_iteration : -1});
      MPI_Irecv(t.tile->data(), static_cast<int>(t.tile->elements()), MPI_DOUBLE, ward,
                kCheckpointTag, comm_, &requests_.back());
      copy.bytes += t.tile->bytes();
    }
    held_.push_back(std::move(copy));
  }
  checkpoints_.push_back(std::move(checkpoint));
  resized_ = false;
  ++stats_.checkpoints;
  post_seconds_ = seconds_since(begin);
  stats_.post_seconds += post_seconds_;
}

double BuddyCheckpoints::complete_transfers(const std::function<bool()>& peer_lost) {
  if (checkpoints_.empty() || checkpoints_.back().complete) return 0.0;
  const auto begin = Clock::now();
  std::vector<MPI_Status> statuses(requests_.size());
  for (;;) {
    int done = 0;
    if (MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &done,
                    statuses.data()) != MPI_SUCCESS) {
      return -1.0;  // a transfer with a dead peer
    }
    if (done) break;
    if (peer_lost()) return -1.0;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const long iteration = checkpoints_.back().iteration;
  for (std::size_t r = 0; r < receives_.size(); ++r) {
    const PendingReceive& receive = receives_[r];
    if (receive.owner < 0) continue;
    int count = 0;
    MPI_Get_count(&statuses[r], MPI_DOUBLE, &count);
    CopiedTile& tile = held(receive.owner, iteration)->tiles[receive.tile];
    if (count != 0) {
      stats_.bytes_received += tile.tile->bytes();
      continue;
    }
    const HeldCopy* before = receive.previous >= 0 ? held(receive.owner, receive.previous) : nullptr;
    if (before == nullptr || before->tiles.size() <= receive.tile) {
      throw std::logic_error("checkpoint of iteration " + std::to_string(iteration) + ": " +
                             rank_text(receive.owner) + " sent tile " + std::to_string(receive.tile) +
                             " as unchanged, but " + rank_text(rank_) +
                             " holds no earlier copy of it");
    }
    tile.tile = before->tiles[receive.tile].tile;
  }
  requests_.clear();
  receives_.clear();
  for (HeldCopy& copy : held_) {
    if (copy.iteration == iteration) copy.arrived = true;
  }
  const double waited = seconds_since(begin);
  stats_.wait_seconds += waited;
  return post_seconds_ + waited;
}

std::size_t BuddyCheckpoints::install(int owner, long iteration,
                                      std::span<TiledMatrix* const> collections) {
  HeldCopy* copy = held(owner, iteration);
  if (copy == nullptr || !copy->arrived) {
    throw std::invalid_argument("recover: " + rank_text(rank_) + " holds no complete copy of " +
                                rank_text(owner) + "'s checkpoint of iteration " +
                                std::to_string(iteration));
  }
  for (const CopiedTile& t : copy->tiles) collections[t.collection]->set_tile(t.m, t.n, t.tile);
  return copy->tiles.size();
}

void BuddyCheckpoints::abandon_in_flight() {
  std::vector<MPI_Request> receives;
  for (std::size_t r = 0; r < requests_.size(); ++r) {
    MPI_Request& request = requests_[r];
    if (request == MPI_REQUEST_NULL) continue;
    if (receives_[r].owner >= 0) {
      receives.push_back(request);
    } else {
      MPI_Request_free(&request);  // reads the own copy's tiles, which stay held
    }
  }
  const std::vector<char> freed_pending = cancel_requests(receives);
  const bool receives_freed = std::find(freed_pending.begin(), freed_pending.end(), 1) != freed_pending.end();
  requests_.clear();
  receives_.clear();
  if (checkpoints_.empty() || checkpoints_.back().complete) return;
  const long iteration = checkpoints_.back().iteration;
  // The own copy's tiles may still be read by a freed send, and a ward's tile still written
  // by a receive that could not be cancelled: they are kept until the process exits. The
  // wards' copies that did not all arrive are of no use.
  static std::vector<HeldCopy> still_used;
  for (HeldCopy& copy : held_) {
    if (copy.iteration != iteration) continue;
    if (copy.owner == rank_ || (receives_freed && !copy.arrived)) still_used.push_back(copy);
  }
  std::erase_if(held_, [&](const HeldCopy& h) { return h.iteration == iteration && !h.arrived; });
}

void BuddyCheckpoints::iteration_ended(double iteration_seconds, double checkpoint_seconds) {
  if (!options_.enabled || checkpoints_.empty()) return;
  if (!checkpoints_.back().complete) {
    // Every rank waited for its transfers before the reductions that carried these values.
    checkpoints_.back().complete = true;
    last_cost_seconds_ = checkpoint_seconds;
    free_superseded();
    // The iteration that carried the checkpoint, less what the checkpoint added to it.
    iteration_seconds = std::max(iteration_seconds - checkpoint_seconds, iteration_seconds * 1e-3);
  }
  if (last_cost_seconds_ >= 0.0 && iteration_seconds > 0.0) {
    interval_ = checkpoint_interval(last_cost_seconds_, options_.node_mean_time_between_failures_seconds,
                                    distinct_nodes_, iteration_seconds)
                    .iterations;
  }
}

void BuddyCheckpoints::confirmed_complete() {
  if (checkpoints_.empty() || checkpoints_.back().complete) {
    throw std::logic_error("confirmed_complete without a checkpoint in flight");
  }
  checkpoints_.back().complete = true;
  free_superseded();
}

void BuddyCheckpoints::free_superseded() {
  // Every rank's view of every copy the job keeps (kept_copies()), complete or not as the
  // checkpoint is; superseded_copies() names those that may go, of which this rank frees
  // its own.
  std::vector<CheckpointCopy> copies;
  for (const Checkpoint& c : checkpoints_) {
    for (const CheckpointSource& kept : kept_copies(c.buddies)) {
      const long tiles = c.tiles[static_cast<std::size_t>(kept.owner)];
      copies.push_back(CheckpointCopy{kept.owner, kept.holder, c.iteration, tiles, c.complete ? tiles : 0});
    }
  }
  const auto& latest = checkpoints_.back();
  const std::vector<CheckpointCopy> superseded = superseded_copies(copies, kept_copies(latest.buddies));
  std::set<long> gone_everywhere;
  for (const CheckpointCopy& copy : superseded) {
    gone_everywhere.insert(copy.iteration);
    if (copy.holder != rank_) continue;
    std::erase_if(held_, [&](const HeldCopy& h) {
      return h.owner == copy.owner && h.iteration == copy.iteration;
    });
  }
  std::erase_if(checkpoints_, [&](const Checkpoint& c) { return gone_everywhere.count(c.iteration) != 0; });
}

CheckpointStats BuddyCheckpoints::take_stats() {
  CheckpointStats out = stats_;
  stats_ = CheckpointStats{};
  for (const HeldCopy& copy : held_) {
    if (copy.owner != rank_) out.bytes_held += copy.bytes;
  }
  if (options_.enabled && last_cost_seconds_ >= 0.0) {
    out.interval_iterations = options_.every_iterations > 0 ? options_.every_iterations : interval_;
  }
  return out;
}

std::vector<CheckpointCopy> BuddyCheckpoints::copies() const {
  std::vector<CheckpointCopy> out;
  for (const HeldCopy& copy : held_) {
    const Checkpoint* c = find(copy.iteration);
    const auto tiles = static_cast<long>(copy.tiles.size());
    out.push_back(CheckpointCopy{copy.owner, rank_, copy.iteration, tiles,
                                 (c != nullptr && c->complete) || copy.arrived ? tiles : 0});
  }
  std::sort(out.begin(), out.end(), [](const CheckpointCopy& a, const CheckpointCopy& b) {
    return std::pair(a.iteration, a.owner) < std::pair(b.iteration, b.owner);
  });
  return out;
}

std::vector<int> BuddyCheckpoints::buddies() const {
  return checkpoints_.empty() ? std::vector<int>{} : checkpoints_.back().buddies;
}

std::optional<long> BuddyCheckpoints::last_complete() const {
  for (auto it = checkpoints_.rbegin(); it != checkpoints_.rend(); ++it) {
    if (it->complete) return it->iteration;
  }
  return std::nullopt;
}

const BuddyCheckpoints::Checkpoint* BuddyCheckpoints::find(long iteration) const {
  for (const Checkpoint& c : checkpoints_) {
    if (c.iteration == iteration) return &c;
  }
  return nullptr;
}

BuddyCheckpoints::HeldCopy* BuddyCheckpoints::held(int owner, long iteration) {
  for (HeldCopy& copy : held_) {
    if (copy.owner == owner && copy.iteration == iteration) return &copy;
  }
  return nullptr;
}

void BuddyCheckpoints::restore(long iteration, std::span<const CheckpointSource> sources,
                               std::span<TiledMatrix* const> collections) {
  // Checked alike on every rank, from what every rank knows, before anything moves.
  const Checkpoint* checkpoint = find(iteration);
  if (checkpoint == nullptr || !checkpoint->complete) {
    std::string have;
    for (const Checkpoint& c : checkpoints_) {
      if (!c.complete) continue;
      have += (have.empty() ? "" : ", ") + std::to_string(c.iteration);
    }
    throw std::invalid_argument("restore_checkpoint: no complete checkpoint of iteration " +
                                std::to_string(iteration) + " (complete: " +
                                (have.empty() ? "none" : have) + ")");
  }
  const std::vector<CheckpointSource> kept = kept_copies(checkpoint->buddies);
  std::vector<char> named(static_cast<std::size_t>(size_), 0);
  for (const CheckpointSource& s : sources) {
    if (s.owner < 0 || s.owner >= size_ || s.holder < 0 || s.holder >= size_) {
      throw std::invalid_argument("restore_checkpoint: " + rank_text(s.owner) + " from " +
                                  rank_text(s.holder) + ": the job has ranks 0 to " +
                                  std::to_string(size_ - 1));
    }
    if (named[static_cast<std::size_t>(s.owner)]++ != 0) {
      throw std::invalid_argument("restore_checkpoint: " + rank_text(s.owner) + " is named twice");
    }
    if (std::find(kept.begin(), kept.end(), s) == kept.end()) {
      const int buddy = checkpoint->buddies[static_cast<std::size_t>(s.owner)];
      throw std::invalid_argument(
          "restore_checkpoint: " + rank_text(s.holder) + " keeps no copy of " + rank_text(s.owner) +
          "'s checkpoint of iteration " + std::to_string(iteration) + " (its copies are at " +
          rank_text(s.owner) + (buddy >= 0 ? " and " + rank_text(buddy) : std::string{}) + ")");
    }
  }
  std::vector<MPI_Request> requests;
  std::vector<CopiedTile> received;
  for (const CheckpointSource& s : sources) {
    if (s.holder == rank_ && s.owner != rank_) {
      const HeldCopy* copy = held(s.owner, iteration);
      for (const CopiedTile& t : copy->tiles) {
        requests.emplace_back();
        MPI_Isend(std::as_const(*t.tile).data(), static_cast<int>(t.tile->elements()), MPI_DOUBLE, s.owner,
                  kRestoreTag, comm_, &requests.back());
      }
    } else if (s.owner == rank_ && s.holder != rank_) {
      // Copies are dropped at every resize, so the owner's tiles now are those it owned then.
      received = owned_tiles(collections, rank_);
      for (CopiedTile& t : received) {
        const TiledMatrix& c = *collections[t.collection];
        t.tile = std::make_shared<Tile>(c.rows_of_tile(t.m), c.cols_of_tile(t.n));
        requests.emplace_back();
        MPI_Irecv(t.tile->data(), static_cast<int>(t.tile->elements()), MPI_DOUBLE, s.holder,
                  kRestoreTag, comm_, &requests.back());
      }
    } else if (s.owner == rank_) {
      received = held(rank_, iteration)->tiles;  // shared: a task's write replaces them
    }
  }
  if (!requests.empty()) wait_all_asleep(requests.data(), static_cast<int>(requests.size()));
  for (CopiedTile& t : received) collections[t.collection]->set_tile(t.m, t.n, std::move(t.tile));
}

}  // namespace bellows::runtime
