#include "wire.hpp"

#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>

namespace bellows::runtime::wire {
namespace {

constexpr std::uint16_t kCollectionMarker = 0xFFFF;
/// Above any task time a message may carry (negative, NaN and infinite are refused too).
constexpr double kMaxSeconds = 1e6;

class Writer {
 public:
  template <typename T>
  void put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const std::byte*>(&value);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void put_bytes(std::span<const std::byte> bytes) {
    bytes_.insert(bytes_.end(), bytes.begin(), bytes.end());
  }
  std::vector<std::byte> take() { return std::move(bytes_); }

 private:
  std::vector<std::byte> bytes_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  template <typename T>
  bool get(T& value) {
    if (bytes_.size() - offset_ < sizeof(T)) return false;
    std::memcpy(&value, bytes_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return true;
  }
  [[nodiscard]] std::size_t remaining() const { return bytes_.size() - offset_; }
  /// The last `count` bytes of the message (count <= remaining()).
  [[nodiscard]] std::span<const std::byte> tail(std::size_t count) const {
    return bytes_.subspan(bytes_.size() - count);
  }

 private:
  std::span<const std::byte> bytes_;
  std::size_t offset_ = 0;
};

void put_header(Writer& w, MessageType type) {
  w.put(kMagic);
  w.put(kVersion);
  w.put(static_cast<std::uint8_t>(type));
}

constexpr std::size_t kTargetBytes = sizeof(std::uint16_t) + 3 * sizeof(std::int32_t) + 1;
// The bits of an activation's flag byte.
constexpr std::uint8_t kCarriesTile = 1;    // the tile's bytes end the message
constexpr std::uint8_t kNamesProducer = 2;  // a Producer follows the targets

}  // namespace

std::vector<std::byte> encode(const Message& message) {
  Writer w;
  if (const auto* a = std::get_if<Activate>(&message)) {
    put_header(w, MessageType::activate);
    w.put(a->handle);
    w.put(a->address);
    w.put(a->rows);
    w.put(a->cols);
    w.put(static_cast<std::uint8_t>((a->tile_bytes.empty() ? 0 : kCarriesTile) |
                                    (a->producer ? kNamesProducer : 0)));
    w.put(static_cast<std::uint32_t>(a->targets.size()));
    for (const auto& t : a->targets) {
      if (t.to_collection) {
        w.put(kCollectionMarker);
        w.put(static_cast<std::int32_t>(t.tile.collection));
        w.put(t.tile.m);
        w.put(t.tile.n);
        w.put(std::uint8_t{0});  // padding in place of the slot: decode ignores it
      } else {
        w.put(t.consumer.task_class);
        for (auto v : t.consumer.index) w.put(v);
        w.put(t.slot);
      }
    }
    if (a->producer) {
      w.put(a->producer->task.task_class);
      for (auto v : a->producer->task.index) w.put(v);
      w.put(a->producer->slot);
      w.put(a->producer->version);
    }
    w.put_bytes(a->tile_bytes);
  } else if (const auto* f = std::get_if<Fetch>(&message)) {
    put_header(w, MessageType::fetch);
    w.put(f->handle);
    w.put(f->tag);
  } else if (const auto* c = std::get_if<CollectionFetch>(&message)) {
    put_header(w, MessageType::collection_fetch);
    w.put(c->tile.collection);
    w.put(c->tile.m);
    w.put(c->tile.n);
    w.put(c->tag);
  } else if (const auto* q = std::get_if<StealRequest>(&message)) {
    put_header(w, MessageType::steal_request);
    w.put(q->thief);
    w.put(q->request_id);
    w.put(q->wanted);
    w.put(q->hops);
    w.put(q->partial_replies);
    w.put(q->thief_load_ns);
    w.put(q->thief_task_overhead_seconds);
    w.put(q->thief_seconds_per_flop);
  } else if (const auto* reply = std::get_if<StealReply>(&message)) {
    put_header(w, MessageType::steal_reply);
    w.put(reply->request_id);
    w.put(static_cast<std::uint8_t>(reply->final ? 1 : 0));
    w.put(reply->partial_replies);
    w.put(reply->hops);
    w.put(static_cast<std::uint32_t>(reply->tasks.size()));
    for (const auto& task : reply->tasks) {
      w.put(task.key.task_class);
      for (auto v : task.key.index) w.put(v);
      w.put(static_cast<std::uint8_t>(task.inputs.size()));
      for (const auto& in : task.inputs) {
        w.put(in.slot);
        w.put(in.handle);
        w.put(in.address);
        w.put(in.rows);
        w.put(in.cols);
      }
    }
  } else if (const auto* p = std::get_if<Progress>(&message)) {
    put_header(w, MessageType::progress);
    w.put(p->completed);
    w.put(static_cast<std::uint8_t>(p->retired ? 1 : 0));
  } else if (std::holds_alternative<IterationDone>(message)) {
    put_header(w, MessageType::iteration_done);
  } else if (const auto* fetched = std::get_if<Fetched>(&message)) {
    put_header(w, MessageType::fetched);
    w.put(fetched->handle);
  } else if (const auto* held = std::get_if<AlreadyHeld>(&message)) {
    put_header(w, MessageType::already_held);
    w.put(held->handle);
  } else if (const auto* invitation = std::get_if<StealInvitation>(&message)) {
    put_header(w, MessageType::steal_invitation);
    w.put(invitation->iteration);
  } else {
    const auto& at = std::get<CollectionTileAt>(message);
    put_header(w, MessageType::collection_tile_at);
    w.put(at.tile.collection);
    w.put(at.tile.m);
    w.put(at.tile.n);
    w.put(at.handle);
    w.put(at.address);
    w.put(at.rows);
    w.put(at.cols);
  }
  return w.take();
}

std::optional<Message> decode(std::span<const std::byte> bytes, std::string& error) {
  Reader r(bytes);
  std::uint16_t magic = 0;
  std::uint8_t version = 0;
  std::uint8_t type = 0;
  if (!r.get(magic) || !r.get(version) || !r.get(type)) {
    error = "message of " + std::to_string(bytes.size()) + " bytes is shorter than the header";
    return std::nullopt;
  }
  if (magic != kMagic) {
    error = "bad magic 0x" + [&] {
      char buf[8];
      std::snprintf(buf, sizeof buf, "%04x", magic);
      return std::string(buf);
    }();
    return std::nullopt;
  }
  if (version != kVersion) {
    error = "unsupported protocol version " + std::to_string(version) + " (this build speaks " +
            std::to_string(kVersion) + ")";
    return std::nullopt;
  }
  const auto truncated = [&](const char* what) {
    error = std::string("truncated ") + what + " message";
    return std::nullopt;
  };
  switch (static_cast<MessageType>(type)) {
    case MessageType::activate: {
      Activate a;
      std::uint8_t flags = 0;
      std::uint32_t count = 0;
      if (!r.get(a.handle) || !r.get(a.address) || !r.get(a.rows) || !r.get(a.cols) ||
          !r.get(flags) || !r.get(count)) {
        return truncated("activate");
      }
      if (a.rows < 0 || a.cols < 0) {
        error = "activate with negative tile shape";
        return std::nullopt;
      }
      if ((flags & ~(kCarriesTile | kNamesProducer)) != 0) {
        error = "activate with flags " + std::to_string(flags) + " (known: 1, a carried tile; 2, its producer)";
        return std::nullopt;
      }
      const bool carries_tile = (flags & kCarriesTile) != 0;
      const std::size_t producer_bytes = (flags & kNamesProducer) != 0 ? kProducerBytes : 0;
      const std::size_t target_bytes = static_cast<std::size_t>(count) * kTargetBytes;
      std::size_t tile_bytes = 0;
      if (carries_tile) {
        if (a.rows == 0 || a.cols == 0 || a.handle != 0 || a.address != 0) {
          error = "activate carries a tile of " + std::to_string(a.rows) + " x " +
                  std::to_string(a.cols) + " with handle " + std::to_string(a.handle) +
                  " and address " + std::to_string(a.address) +
                  " (a carried tile has elements, and neither handle nor address)";
          return std::nullopt;
        }
        // At most 2^62 elements: the byte count below cannot overflow once checked.
        const auto elements = static_cast<std::uint64_t>(a.rows) * static_cast<std::uint64_t>(a.cols);
        if (elements > r.remaining() / sizeof(double)) {
          error = "activate carries a tile of " + std::to_string(a.rows) + " x " +
                  std::to_string(a.cols) + " doubles in " + std::to_string(r.remaining()) +
                  " bytes";
          return std::nullopt;
        }
        tile_bytes = static_cast<std::size_t>(elements) * sizeof(double);
      }
      if (r.remaining() != target_bytes + producer_bytes + tile_bytes) {
        error = "activate announces " + std::to_string(count) + " targets" +
                (producer_bytes > 0 ? ", its producer" : "") +
                (carries_tile ? " and a tile of " + std::to_string(tile_bytes) + " bytes" : "") +
                " but carries " + std::to_string(r.remaining()) + " bytes of them";
        return std::nullopt;
      }
      const auto carried = r.tail(tile_bytes);
      a.tile_bytes.assign(carried.begin(), carried.end());
      a.targets.resize(count);
      for (std::size_t i = 0; i < a.targets.size(); ++i) {
        auto& t = a.targets[i];
        std::uint16_t cls = 0;
        std::int32_t i0 = 0, i1 = 0, i2 = 0;
        std::uint8_t slot = 0;
        r.get(cls), r.get(i0), r.get(i1), r.get(i2), r.get(slot);
        if (cls == kCollectionMarker) {
          // The collection id travels in 4 bytes: one that a CollectionId cannot hold would
          // name another collection once cut down to it.
          if (i0 < 0 || i0 > std::numeric_limits<CollectionId>::max()) {
            error = "activate target " + std::to_string(i) + " names collection " +
                    std::to_string(i0) + ", not a collection id (0 to " +
                    std::to_string(std::numeric_limits<CollectionId>::max()) + ")";
            return std::nullopt;
          }
          t.to_collection = true;
          t.tile = TileIndex{static_cast<CollectionId>(i0), i1, i2};
        } else {
          t.consumer = TaskKey{cls, {i0, i1, i2}};
          t.slot = slot;
        }
      }
      if (producer_bytes > 0) {
        Producer p;
        r.get(p.task.task_class), r.get(p.task.index[0]), r.get(p.task.index[1]), r.get(p.task.index[2]);
        r.get(p.slot), r.get(p.version);
        if (p.task.task_class == kReservedTaskClassId || p.version == 0) {
          error = "activate names its producer as task class " + std::to_string(p.task.task_class) +
                  " in iteration " + std::to_string(p.version) + " (a task class is below " +
                  std::to_string(kReservedTaskClassId) + ", iterations count from 1)";
          return std::nullopt;
        }
        a.producer = p;
      }
      return Message{std::move(a)};
    }
    case MessageType::fetch: {
      Fetch f;
      if (!r.get(f.handle) || !r.get(f.tag)) return truncated("fetch");
      if (r.remaining() != 0) {
        error = "fetch message has trailing bytes";
        return std::nullopt;
      }
      return Message{f};
    }
    case MessageType::collection_fetch: {
      CollectionFetch c;
      if (!r.get(c.tile.collection) || !r.get(c.tile.m) || !r.get(c.tile.n) || !r.get(c.tag)) {
        return truncated("collection_fetch");
      }
      if (r.remaining() != 0) {
        error = "collection_fetch message has trailing bytes";
        return std::nullopt;
      }
      return Message{c};
    }
    case MessageType::steal_request: {
      StealRequest q;
      if (!r.get(q.thief) || !r.get(q.request_id) || !r.get(q.wanted) || !r.get(q.hops) ||
          !r.get(q.partial_replies) || !r.get(q.thief_load_ns) ||
          !r.get(q.thief_task_overhead_seconds) || !r.get(q.thief_seconds_per_flop)) {
        return truncated("steal_request");
      }
      if (r.remaining() != 0) {
        error = "steal_request message has trailing bytes";
        return std::nullopt;
      }
      if (q.thief < 0 || q.wanted < 1) {
        error = "steal_request with thief " + std::to_string(q.thief) + " and wanted " +
                std::to_string(q.wanted);
        return std::nullopt;
      }
      if (!(q.thief_task_overhead_seconds >= 0.0 && q.thief_task_overhead_seconds < kMaxSeconds &&
            q.thief_seconds_per_flop >= 0.0 && q.thief_seconds_per_flop < kMaxSeconds)) {
        char text[96];
        std::snprintf(text, sizeof text, "steal_request with thief task time %g s + %g s per flop",
                      q.thief_task_overhead_seconds, q.thief_seconds_per_flop);
        error = text;
        return std::nullopt;
      }
      return Message{q};
    }
    case MessageType::steal_reply: {
      StealReply reply;
      std::uint8_t final = 0;
      std::uint32_t count = 0;
      if (!r.get(reply.request_id) || !r.get(final) || !r.get(reply.partial_replies) ||
          !r.get(reply.hops) || !r.get(count)) {
        return truncated("steal_reply");
      }
      if (final > 1) {
        error = "steal_reply with final flag " + std::to_string(final);
        return std::nullopt;
      }
      reply.final = final == 1;
      // Each task needs at least its key and input count: refuse absurd counts before
      // allocating for them.
      constexpr std::size_t kMinTaskBytes = sizeof(std::uint16_t) + 3 * sizeof(std::int32_t) + 1;
      if (static_cast<std::size_t>(count) * kMinTaskBytes > r.remaining()) {
        error = "steal_reply announces " + std::to_string(count) + " tasks but carries " +
                std::to_string(r.remaining()) + " bytes of them";
        return std::nullopt;
      }
      reply.tasks.resize(count);
      for (auto& task : reply.tasks) {
        std::uint8_t inputs = 0;
        if (!r.get(task.key.task_class) || !r.get(task.key.index[0]) ||
            !r.get(task.key.index[1]) || !r.get(task.key.index[2]) || !r.get(inputs)) {
          return truncated("steal_reply");
        }
        task.inputs.resize(inputs);
        for (auto& in : task.inputs) {
          if (!r.get(in.slot) || !r.get(in.handle) || !r.get(in.address) || !r.get(in.rows) ||
              !r.get(in.cols)) {
            return truncated("steal_reply");
          }
          if (in.rows < 0 || in.cols < 0) {
            error = "steal_reply with negative tile shape";
            return std::nullopt;
          }
        }
      }
      if (r.remaining() != 0) {
        error = "steal_reply message has trailing bytes";
        return std::nullopt;
      }
      return Message{std::move(reply)};
    }
    case MessageType::progress: {
      Progress p;
      std::uint8_t retired = 0;
      if (!r.get(p.completed) || !r.get(retired)) return truncated("progress");
      if (r.remaining() != 0) {
        error = "progress message has trailing bytes";
        return std::nullopt;
      }
      if (retired > 1) {
        error = "progress with retired flag " + std::to_string(retired);
        return std::nullopt;
      }
      if (retired == 1 && p.completed == 0) {
        error = "progress retires with no completed task";
        return std::nullopt;
      }
      p.retired = retired == 1;
      return Message{p};
    }
    case MessageType::iteration_done: {
      if (r.remaining() != 0) {
        error = "iteration_done message has trailing bytes";
        return std::nullopt;
      }
      return Message{IterationDone{}};
    }
    case MessageType::fetched: {
      Fetched f;
      if (!r.get(f.handle)) return truncated("fetched");
      if (r.remaining() != 0) {
        error = "fetched message has trailing bytes";
        return std::nullopt;
      }
      return Message{f};
    }
    case MessageType::already_held: {
      AlreadyHeld held;
      if (!r.get(held.handle)) return truncated("already_held");
      if (r.remaining() != 0) {
        error = "already_held message has trailing bytes";
        return std::nullopt;
      }
      if (held.handle == 0) {
        error = "already_held for handle 0 (handles count from 1)";
        return std::nullopt;
      }
      return Message{held};
    }
    case MessageType::collection_tile_at: {
      CollectionTileAt at;
      if (!r.get(at.tile.collection) || !r.get(at.tile.m) || !r.get(at.tile.n) ||
          !r.get(at.handle) || !r.get(at.address) || !r.get(at.rows) || !r.get(at.cols)) {
        return truncated("collection_tile_at");
      }
      if (r.remaining() != 0) {
        error = "collection_tile_at message has trailing bytes";
        return std::nullopt;
      }
      if (at.rows <= 0 || at.cols <= 0 || at.address == 0) {
        error = "collection_tile_at without a tile (" + std::to_string(at.rows) + " x " +
                std::to_string(at.cols) + " at address " + std::to_string(at.address) + ")";
        return std::nullopt;
      }
      return Message{at};
    }
    case MessageType::steal_invitation: {
      StealInvitation invitation;
      if (!r.get(invitation.iteration)) return truncated("steal_invitation");
      if (r.remaining() != 0) {
        error = "steal_invitation message has trailing bytes";
        return std::nullopt;
      }
      if (invitation.iteration == 0) {
        error = "steal_invitation for iteration 0 (iterations count from 1)";
        return std::nullopt;
      }
      return Message{invitation};
    }
  }
  error = "unknown message type " + std::to_string(type);
  return std::nullopt;
}

}  // namespace bellows::runtime::wire
