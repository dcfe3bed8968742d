// Who owns which tile across resizes: the work behind each tile, the tiles an expand
// gives to the new ranks, and how a shrink spreads the leaving ranks' tiles.
//
// John & Milthorpe,
// "Elasticity in a Task-based Dataflow Runtime Through Inter-node GPU Work Stealing",
// CCGrid 2024, section V keeps the fixed mapping: new nodes get work only by stealing, and
// a node that leaves hands everything to one backup, which stealing then relieves
// iteration after iteration. With RuntimeOptions::rebalance_on_resize the runtime instead
// re-grids at the resize (regrid.hpp): every tile goes where a job started at the new size
// would hold it (per-tile owners on top of each collection's placement, the same on every
// rank), so that the iterations after it read and move what such a job would; stealing
// still evens out what is left.

#include <utility>
#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "bellows/runtime/regrid.hpp"
#include "bellows/runtime/shrink_plan.hpp"
#include "comm_engine.hpp"
#include "cancelled_requests.hpp"
#include "engine.hpp"
#include "sleeping_wait.hpp"

namespace bellows::runtime {
namespace {

constexpr int kHandoffTag = 7002;
constexpr int kMoveTag = 7003;

}  // namespace

void Engine::for_each_task_by_tile(
    const std::function<void(const TaskClass&, const TaskKey&, int tile)>& fn) const {
  int total = 0;
  std::vector<int> base;
  for (const auto* c : collections_) {
    base.push_back(total);
    total += c->tile_rows() * c->tile_cols();
  }
  // While `probe` lives, every collection answers owner() with a value that names the
  // tile (TiledMatrix::start_probe); a local class shares this function's access.
  struct OwnerProbe {
    const std::vector<TiledMatrix*>& collections;
    OwnerProbe(const std::vector<TiledMatrix*>& all, const std::vector<int>& base) : collections(all) {
      for (std::size_t c = 0; c < collections.size(); ++c) collections[c]->start_probe(base[c]);
    }
    ~OwnerProbe() {
      for (auto* c : collections) c->stop_probe();
    }
    OwnerProbe(const OwnerProbe&) = delete;
    OwnerProbe& operator=(const OwnerProbe&) = delete;
  } probe(collections_, base);
  for (const auto& cls : classes_) {
    cls->for_each_task([&](const TaskKey& key) {
      const int owner = cls->owner(key);
      fn(*cls, key, owner <= -2 && -(owner + 2) < total ? -(owner + 2) : -1);
    });
  }
}

Engine::WorkMap Engine::map_work(const std::vector<char>& pinned_leaves) const {
  WorkMap work;
  work.load.assign(static_cast<std::size_t>(size_), 0.0);
  int total = 0;
  for (const auto* c : collections_) {
    work.base.push_back(total);
    total += c->tile_rows() * c->tile_cols();
  }
  work.weight.assign(static_cast<std::size_t>(total), 0.0);
  work.tasks.assign(static_cast<std::size_t>(total), 0);
  work.holder.assign(static_cast<std::size_t>(total), -1);
  for (std::size_t c = 0; c < collections_.size(); ++c) {
    const auto* coll = collections_[c];
    for (int n = 0; n < coll->tile_cols(); ++n) {
      for (int m = 0; m < coll->tile_rows(); ++m) {
        const auto s = static_cast<std::size_t>(work.base[c]) + coll->slot(m, n);
        work.holder[s] = coll->kept(m, n) ? coll->owner(m, n) : -1;
      }
    }
  }
  for_each_task_by_tile([&](const TaskClass& cls, const TaskKey& key, int tile) {
    // Tasks without flops count as one flop each, so that they are still spread.
    const double weight = std::max(cls.flops(key), 1.0);
    if (const auto it = pinned_.find(key); it != pinned_.end()) {
      const auto rank = static_cast<std::size_t>(it->second);
      if (pinned_leaves.empty() || !pinned_leaves[rank]) {
        work.load[rank] += weight;
        return;
      }
    }
    if (tile >= 0) {
      const auto s = static_cast<std::size_t>(tile);
      work.weight[s] += weight;
      ++work.tasks[s];
    } else if (const int owner = cls.owner(key); owner >= 0 && owner < size_) {
      work.load[static_cast<std::size_t>(owner)] += weight;
    }
  });
  return work;
}

std::vector<int> Engine::regrid_moves(const WorkMap& work, std::span<const int> ranks) const {
  std::vector<TileHolders> holders;
  for (std::size_t c = 0; c < collections_.size(); ++c) {
    const auto* coll = collections_[c];
    const auto first = work.holder.begin() + work.base[c];
    holders.push_back(TileHolders{coll->tile_rows(), coll->tile_cols(),
                                  std::vector<int>(first, first + coll->tile_rows() * coll->tile_cols())});
  }
  const Regrid layout = regrid(holders, ranks);
  std::vector<int> to(work.holder.size(), -1);
  for (std::size_t c = 0; c < collections_.size(); ++c) {
    const auto& owners = layout.owners[c];
    for (std::size_t slot = 0; slot < owners.size(); ++slot) {
      const auto s = static_cast<std::size_t>(work.base[c]) + slot;
      if (owners[slot] >= 0 && owners[slot] != work.holder[s]) to[s] = owners[slot];
    }
  }
  return to;
}

std::vector<Engine::TileMove> Engine::plan_expand(int old_size) const {
  if (!options_.rebalance_on_resize || old_size >= size_) return {};
  return plan_regrid();
}

std::vector<Engine::TileMove> Engine::plan_regrid() const {
  std::vector<TileMove> moves;
  const WorkMap work = map_work({});
  std::vector<int> ranks(static_cast<std::size_t>(size_));
  std::iota(ranks.begin(), ranks.end(), 0);
  const std::vector<int> to = regrid_moves(work, ranks);
  for (std::size_t c = 0; c < collections_.size(); ++c) {
    const int rows = collections_[c]->tile_rows();
    const int slots = rows * collections_[c]->tile_cols();
    for (int slot = 0; slot < slots; ++slot) {
      const auto s = static_cast<std::size_t>(work.base[c] + slot);
      if (to[s] < 0) continue;
      moves.push_back(TileMove{static_cast<CollectionId>(c), slot % rows, slot / rows, to[s], work.tasks[s]});
    }
  }
  return moves;
}

bool Engine::apply_tile_moves() {
  // Collective: the holders send the tiles, the new owners receive them, then every
  // rank records the new owners.
  std::vector<MPI_Request> requests;
  std::vector<TilePtr> buffers;  // per request: the tile sent or received into
  std::vector<char> receiving;   // per request: 1 for a receive
  std::vector<std::pair<const TileMove*, TilePtr>> received;
  for (const auto& move : pending_moves_) {
    auto& c = collection(move.collection);
    const int from = c.owner(move.m, move.n);
    if (from == move.to) continue;
    if (from == rank_) {
      const TilePtr& t = c.tile(move.m, move.n);
      requests.emplace_back();
      buffers.push_back(t);
      receiving.push_back(0);
      MPI_Isend(std::as_const(*t).data(), static_cast<int>(t->elements()), MPI_DOUBLE, move.to, kMoveTag, comm_,
                &requests.back());
    } else if (move.to == rank_) {
      auto t = std::make_shared<Tile>(c.rows_of_tile(move.m), c.cols_of_tile(move.n));
      requests.emplace_back();
      buffers.push_back(t);
      receiving.push_back(1);
      MPI_Irecv(t->data(), static_cast<int>(t->elements()), MPI_DOUBLE, from, kMoveTag, comm_,
                &requests.back());
      received.emplace_back(&move, std::move(t));
    }
  }
  if (!wait_watching_peers(requests)) {
    // No move is applied: the tiles stay where they were, and the recovery that follows
    // rolls back to the checkpoint. Receives are cancelled, sends freed; MPI may still use
    // their tiles, which are kept until the process exits.
    static std::vector<TilePtr> still_used;
    std::vector<MPI_Request> receives;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (requests[i] == MPI_REQUEST_NULL) continue;
      still_used.push_back(buffers[i]);
      if (receiving[i]) {
        receives.push_back(requests[i]);
      } else {
        MPI_Request_free(&requests[i]);
      }
    }
    (void)cancel_requests(receives);
    return false;
  }
  for (std::size_t id = 0; id < collections_.size(); ++id) {
    auto* c = collections_[id];
    std::vector<int> owners = c->tile_owners();
    bool changed = false;
    for (const auto& move : pending_moves_) {
      if (move.collection != id) continue;
      if (owners.empty()) {
        owners.assign(static_cast<std::size_t>(c->tile_rows() * c->tile_cols()), TiledMatrix::kNoTileOwner);
      }
      owners[c->slot(move.m, move.n)] = move.to;
      changed = true;
    }
    if (!changed) continue;
    c->set_mapping(c->placement(), std::move(owners), rank_);
  }
  for (auto& [move, tile] : received) {
    collection(move->collection).set_tile(move->m, move->n, std::move(tile));
  }
  pending_moves_.clear();
  local_tasks_known_ = false;
  return true;
}

bool Engine::hand_off_watched(std::vector<MPI_Request>& requests, const std::vector<TilePtr>& buffers,
                              const std::vector<char>& receiving) {
  // Every peer watched, errors returned (on MPI_COMM_WORLD too, as in an iteration); then a
  // barrier, so that no rank changes anything before every rank completed its part.
  const ErrorsReturned world_errors_returned(MPI_COMM_WORLD);
  const ErrorsReturned errors_returned(comm_);
  watch_->arm();
  bool completed = wait_watching_peers(requests);
  if (completed) {
    MPI_Request barrier = MPI_REQUEST_NULL;
    MPI_Ibarrier(comm_, &barrier);
    completed = wait_watching_peers(std::span<MPI_Request>(&barrier, 1));
    // A barrier left pending is left to MPI (a collective's request may not be freed).
  }
  if (completed) {
    watch_->disarm();
    return true;
  }
  // Nothing is applied. Receives still pending are cancelled, sends freed; MPI may still use
  // their tiles, which are kept until the process exits.
  static std::vector<TilePtr> still_used;
  std::vector<MPI_Request> pending_receives;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i] == MPI_REQUEST_NULL) continue;
    still_used.push_back(buffers[i]);
    if (receiving[i] != 0) {
      pending_receives.push_back(requests[i]);
    } else {
      MPI_Request_free(&requests[i]);
    }
  }
  (void)cancel_requests(pending_receives);
  return false;
}

ShrinkHandoff Engine::prepare_shrink(std::span<const int> leaving, StateBeforeShrink state) {
  const auto begin = Clock::now();
  // The checkpoint copies are dropped (they match neither the survivors' numbers nor their
  // tiles) only once the hand-off below completed everywhere: a rank lost before that gives
  // the shrink up, and the job recovers from them. Held (StateBeforeShrink::held), they stay
  // until the caller releases them, with what the hand-off changed, so that a loss after its
  // barrier can still give the shrink up (give_up_hand_off).
  // An expand's moves come first (outside an iteration the watch is not armed: a loss here
  // is the resize's).
  if (!pending_moves_.empty() && !apply_tile_moves()) {
    throw std::runtime_error("prepare_shrink: a peer was lost while an expand's tile moves were carried out");
  }
  resize_under_way_ = ResizeUnderWay{ResizeKind::shrink, ResizePhase::hand_off};
  // Each rank's tiles over all collections, for the choice of backups (shrink_plan.hpp).
  std::vector<long> held(static_cast<std::size_t>(size_), 0);
  for (const auto* c : collections_) {
    for (int n = 0; n < c->tile_cols(); ++n) {
      for (int m = 0; m < c->tile_rows(); ++m) {
        if (c->kept(m, n)) ++held[static_cast<std::size_t>(c->owner(m, n))];
      }
    }
  }
  const ShrinkPlan plan = plan_shrink(held, leaving);
  std::vector<char> leaves(static_cast<std::size_t>(size_), 0);
  for (const int r : leaving) leaves[static_cast<std::size_t>(r)] = 1;
  const auto leaver = [&](int r) { return plan.leaves(r); };
  const auto backup = [&](int r) { return plan.backup[static_cast<std::size_t>(r)]; };
  const std::vector<int>& renumbered = plan.new_rank;
  ShrinkHandoff out;
  out.leaving = leaver(rank_);
  out.new_rank = renumbered[static_cast<std::size_t>(rank_)];

  // Where tiles go (numbers before the shrink): with rebalancing, every kept tile onto the
  // grid of a job started on the survivors (regrid.hpp); without, each leaver's tiles to
  // its backup.
  const WorkMap work = map_work(leaves);
  std::vector<int> heir(work.holder.size(), -1);
  if (options_.rebalance_on_resize) {
    std::vector<int> survivors;
    for (int r = 0; r < size_; ++r) {
      if (!leaver(r)) survivors.push_back(r);
    }
    heir = regrid_moves(work, survivors);
  } else {
    for (std::size_t s = 0; s < work.holder.size(); ++s) {
      if (leaver(work.holder[s])) heir[s] = backup(work.holder[s]);
    }
  }

  // Tasks of an iteration whose rank changes: those of the tiles that move, and the
  // pinned tasks of leavers that go back to a tile a survivor keeps.
  last_rebalance_ = Rebalance{};
  for (std::size_t s = 0; s < heir.size(); ++s) {
    if (heir[s] < 0) continue;
    ++last_rebalance_.tiles;
    last_rebalance_.tasks += work.tasks[s];
  }
  for (const auto& [key, rank] : pinned_) last_rebalance_.tasks += leaver(rank) ? 1 : 0;

  // Hand the tiles that move to their heirs, in one fixed order per pair.
  std::vector<MPI_Request> requests;
  std::vector<TilePtr> buffers;  // per request: the tile sent or received into
  std::vector<char> receiving;   // per request: 1 for a receive
  std::vector<std::pair<std::pair<TiledMatrix*, std::pair<int, int>>, TilePtr>> received;
  for (std::size_t id = 0; id < collections_.size(); ++id) {
    auto* c = collections_[id];
    for (int n = 0; n < c->tile_cols(); ++n) {
      for (int m = 0; m < c->tile_rows(); ++m) {
        const auto s = static_cast<std::size_t>(work.base[id]) + c->slot(m, n);
        if (heir[s] < 0) continue;
        const int holder = work.holder[s];
        if (holder == rank_) {
          const TilePtr& t = c->tile(m, n);
          requests.emplace_back();
          MPI_Isend(std::as_const(*t).data(), static_cast<int>(t->elements()), MPI_DOUBLE, heir[s], kHandoffTag,
                    comm_, &requests.back());
          buffers.push_back(t);
          receiving.push_back(0);
          ++out.tiles_sent;
          out.bytes_moved += t->bytes();
        } else if (heir[s] == rank_) {
          auto t = std::make_shared<Tile>(c->rows_of_tile(m), c->cols_of_tile(n));
          requests.emplace_back();
          MPI_Irecv(t->data(), static_cast<int>(t->elements()), MPI_DOUBLE, holder, kHandoffTag,
                    comm_, &requests.back());
          buffers.push_back(t);
          receiving.push_back(1);
          ++out.tiles_received;
          out.bytes_moved += t->bytes();
          received.push_back({{c, {m, n}}, std::move(t)});
        }
      }
    }
  }
  if (!hand_off_watched(requests, buffers, receiving)) {
    // No tile changed owner and the copies are kept: on_loss_during_resize gives the shrink
    // up, and the loss is one of the job as it was.
    resize_under_way_.reset();
    ShrinkHandoff given_up;
    given_up.lost = watch_->lost();  // kept: the next run_iteration() reports them at once
    given_up.seconds = seconds_between(begin, Clock::now());
    last_rebalance_ = Rebalance{};
    return given_up;
  }
  resize_under_way_->phase = ResizePhase::attach;
  if (state == StateBeforeShrink::held) {
    StateBeforeHandOff kept;
    for (auto* c : collections_) {
      kept.placements.push_back(c->placement());
      kept.tile_owners.push_back(c->tile_owners());
      std::vector<TilePtr> tiles(static_cast<std::size_t>(c->tile_rows() * c->tile_cols()));
      for (int n = 0; n < c->tile_cols(); ++n) {
        for (int m = 0; m < c->tile_rows(); ++m) {
          if (c->is_local(m, n)) tiles[c->slot(m, n)] = c->tile(m, n);  // a send only read it
        }
      }
      kept.tiles.push_back(std::move(tiles));
    }
    kept.pinned = pinned_;
    kept.first_new_rank = first_new_rank_;
    before_hand_off_ = std::move(kept);
  } else {
    checkpoints_->detach();
  }

  // The mapping in the survivors' numbering: grid ranks of leavers go to their backups;
  // a tile that moved, or had its own owner, names it.
  for (std::size_t id = 0; id < collections_.size(); ++id) {
    auto* c = collections_[id];
    std::vector<int> placement(static_cast<std::size_t>(c->distribution().size()));
    for (int g = 0; g < c->distribution().size(); ++g) {
      const int now = c->placement().empty() ? g : c->placement()[static_cast<std::size_t>(g)];
      placement[static_cast<std::size_t>(g)] = renumbered[static_cast<std::size_t>(backup(now))];
    }
    std::vector<int> owners = c->tile_owners();
    for (int n = 0; n < c->tile_cols(); ++n) {
      for (int m = 0; m < c->tile_rows(); ++m) {
        const auto s = static_cast<std::size_t>(work.base[id]) + c->slot(m, n);
        const int own = owners.empty() ? TiledMatrix::kNoTileOwner : owners[c->slot(m, n)];
        const int target = heir[s] >= 0 ? heir[s] : own;
        if (target == TiledMatrix::kNoTileOwner) continue;
        const int by_placement = placement[static_cast<std::size_t>(c->distribution().owner(m, n))];
        const int survivor = leaver(target) ? backup(target) : target;
        if (own == TiledMatrix::kNoTileOwner &&
            renumbered[static_cast<std::size_t>(survivor)] == by_placement) {
          continue;  // where the placement puts it anyway
        }
        if (owners.empty()) {
          owners.assign(static_cast<std::size_t>(c->tile_rows() * c->tile_cols()), TiledMatrix::kNoTileOwner);
        }
        // (A tile not kept may still name a leaver: it follows that leaver's backup.)
        owners[c->slot(m, n)] = renumbered[static_cast<std::size_t>(survivor)];
      }
    }
    c->set_mapping(std::move(placement), std::move(owners), out.new_rank);
  }
  for (auto& [where, tile] : received) where.first->set_tile(where.second.first, where.second.second, std::move(tile));
  std::unordered_map<TaskKey, int> pinned;
  for (const auto& [key, rank] : pinned_) {
    if (!leaver(rank)) pinned.emplace(key, renumbered[static_cast<std::size_t>(rank)]);
  }
  pinned_ = std::move(pinned);  // a leaver's pinned tasks go back to their tiles' owners
  if (first_new_rank_ >= 0) {
    int before = 0;
    for (int r = 1; r < first_new_rank_; ++r) before += leaves[static_cast<std::size_t>(r)];
    first_new_rank_ -= before;
  }
  {
    std::lock_guard lock(migrations_mutex_);
    migrations_.clear();  // rank numbers change
    stolen_this_iteration_.clear();
  }
  pending_moves_.clear();
  local_tasks_known_ = false;
  if (state == StateBeforeShrink::released) {
    comm_engine_.reset();
    watch_.reset();
    MPI_Comm_disconnect(&comm_);
  }
  out.seconds = seconds_between(begin, Clock::now());
  return out;
}

void Engine::release_state_before_shrink(OldCommunicator old) {
  if (!before_hand_off_) {
    throw std::logic_error("release_state_before_shrink without prepare_shrink holding the state before it");
  }
  // Freed, never disconnected, when a rank was lost: a dead peer would make that wait.
  const auto let_go = [old](MPI_Comm& comm) {
    if (old == OldCommunicator::free) {
      MPI_Comm_free(&comm);
    } else {
      MPI_Comm_disconnect(&comm);
    }
  };
  if (before_hand_off_->job_communicator) {
    // Attached to the survivors' communicator, its checkpoint complete (attach_shrunk_checkpointed):
    // only what ran on the job's communicator goes.
    auto& kept = *before_hand_off_->job_communicator;
    if (kept.checkpoint_barrier_failed) {
      throw std::logic_error("release_state_before_shrink with the survivors' checkpoint not confirmed");
    }
    kept.checkpoints->detach();
    kept.comm_engine.reset();
    kept.watch.reset();
    let_go(kept.comm);
    before_hand_off_.reset();
    return;
  }
  before_hand_off_.reset();
  checkpoints_->detach();
  comm_engine_.reset();
  watch_.reset();
  let_go(comm_);
}

void Engine::give_up_hand_off() {
  if (!before_hand_off_) {
    throw std::logic_error("give_up_hand_off without prepare_shrink holding the state before it");
  }
  // Every rank puts back what it had: the tiles it handed off (a send only read them), its
  // mapping in the job's numbering, its pinned tasks. The tiles it received are dropped with
  // the mapping (set_mapping keeps only local tiles). The copies from before were never
  // dropped, the communicator never left: the job is as before the shrink.
  leave_unconfirmed_survivors();
  StateBeforeHandOff kept = std::move(*before_hand_off_);
  before_hand_off_.reset();
  for (std::size_t id = 0; id < collections_.size(); ++id) {
    auto* c = collections_[id];
    c->set_mapping(std::move(kept.placements[id]), std::move(kept.tile_owners[id]), rank_);
    for (int n = 0; n < c->tile_cols(); ++n) {
      for (int m = 0; m < c->tile_rows(); ++m) {
        TilePtr& tile = kept.tiles[id][c->slot(m, n)];
        if (tile) c->set_tile(m, n, std::move(tile));
      }
    }
  }
  pinned_ = std::move(kept.pinned);
  first_new_rank_ = kept.first_new_rank;
  resize_under_way_.reset();  // given up: a loss from here is one of the job as it was
  last_rebalance_ = Rebalance{};
  local_tasks_known_ = false;
}

}  // namespace bellows::runtime
