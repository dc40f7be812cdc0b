// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The eager protocol (detail/frame.hpp: handshake_block_bytes): a transfer whose bytes fit in the
// handshake travels inside it, one exchange per sync; a larger one falls back to the data phase.
// Every failure path keeps its contract: nothing is written on a refusal, the communicator stays
// usable, and the failure of one sync is reported in the next handshake.
#include <weightsync/host/communicator.hpp>
#include <weightsync/packed_broadcast.hpp>
#include <weightsync/sealed_metadata.hpp>
#include <weightsync/workspace.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/host_world.hpp"
#include "support/outcomes.hpp"
#include "support/process.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_eager_test {

using namespace weightsync;
using namespace std::chrono_literals;

namespace {

// A HostCommunicator that counts exchanges: a group, or a broadcast outside one.
struct CountingComm {
  using stream_type = HostStream;
  explicit CountingComm(HostCommunicator& comm) : c(comm) {}
  HostCommunicator& c;
  int exchanges = 0;
  int depth = 0;

  int rank() const { return c.rank(); }
  int size() const { return c.size(); }
  void broadcast(void* buf, std::size_t bytes, int root, HostStream s) {
    c.broadcast(buf, bytes, root, s);
    if (depth == 0) ++exchanges;
  }
  void group_start() {
    c.group_start();
    ++depth;
  }
  void group_end() {
    c.group_end();
    if (--depth == 0) ++exchanges;
  }
  void check() { c.check(); }
  void abort(const std::string& why) noexcept { c.abort(why); }
  WireState& wire_state() noexcept { return c.wire_state(); }
};
static_assert(GroupedCommunicator<CountingComm> && MonitoredCommunicator<CountingComm> &&
              WireStateCommunicator<CountingComm>);

// 3 KiB and some odd tensors: eager with 2 ranks (eager_capacity(2) = 4096 bytes).
std::vector<TensorMeta> small() {
  return {{"embed", DType::bfloat16, {32, 32}},
          {"scalar", DType::float32, {}},
          {"empty", DType::bfloat16, {0, 16}},
          {"q", DType::float16, {16, 16}},
          {"mask", DType::bool_, {7}},
          {"lm_head", DType::bfloat16, {16, 32}}};
}
// 64 KiB: not eager.
std::vector<TensorMeta> large() {
  return {{"a", DType::bfloat16, {128, 128}}, {"b", DType::float32, {64, 64}}};
}

// About 18 KiB in 105 tensors: more than a base block holds, less than a wide one.
std::vector<TensorMeta> medium() {
  std::vector<TensorMeta> m = {{"embed", DType::bfloat16, {64, 64}},
                               {"scalar", DType::float32, {}},
                               {"empty", DType::bfloat16, {0, 16}}};
  for (int i = 0; i < 100; ++i)
    m.push_back({"layers." + std::to_string(i) + ".norm", DType::bfloat16, {32}});
  m.push_back({"lm_head", DType::bfloat16, {32, 64}});
  m.push_back({"mask", DType::bool_, {7}});
  return m;
}

std::vector<std::vector<std::byte>> model(const std::vector<TensorMeta>& metas, int round) {
  std::vector<std::vector<std::byte>> d;
  for (std::size_t i = 0; i < metas.size(); ++i) {
    d.emplace_back(metas[i].nbytes());
    std::mt19937 rng(static_cast<unsigned>(round * 1000 + static_cast<int>(i)));
    for (auto& b : d.back()) b = std::byte(rng());
  }
  return d;
}
std::vector<std::vector<std::byte>> poisoned(const std::vector<TensorMeta>& metas) {
  std::vector<std::vector<std::byte>> d;
  for (const auto& m : metas) d.emplace_back(m.nbytes(), std::byte{0xa5});
  return d;
}

std::size_t total_bytes(const std::vector<TensorMeta>& metas) {
  std::size_t n = 0;
  for (const auto& m : metas) n += m.nbytes();
  return n;
}

[[noreturn]] void fail(int round, int rank, const std::string& what) {
  throw std::runtime_error("round " + std::to_string(round) + " on rank " +
                           std::to_string(rank) + ": " + what);
}

// What one round threw: its message and, for a protocol or remote error, the rank it names (-1
// otherwise); nothing when it returned. A check of the test itself ("round N on rank R: ...")
// goes through.
struct Caught {
  std::string what;
  int peer = -1;
};
template <class F>
Caught run_caught(F&& round) {
  try {
    round();
  } catch (const protocol_error& e) {
    return {e.what(), e.peer()};
  } catch (const remote_error& e) {
    return {e.what(), e.peer()};
  } catch (const config_error& e) {
    return {e.what(), -1};
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()).find("round ") == 0) throw;
    return {e.what(), -1};
  }
  return {};
}

// Rounds (2 ranks, Acknowledge::next_transfer, a small buffer so that the small model would
// take 2 chunks without the eager path):
//   1 small: one exchange on each rank; "embed" and "q" in place, the rest as views;
//   2 large: more than one exchange (handshake, then the data);
//   3 small, the producer's "q" item has the wrong dtype: config_error there, remote_error on the
//     consumer, whose destinations stay poisoned (a wrong transfer is not packed eagerly: the
//     data phase carries the failure, as before);
//   4 small, the consumer declares another shape: protocol_error on both, nothing written;
//   5 small, the consumer's load_weights throws: it rethrows; the producer returns;
//   6 small: refused on both ranks before any byte moves (rank 1 failed round 5), nothing written;
//   7 small: one exchange again, bit-exact.
void run_rank(int port, int rank) {
  auto host = ws_test::connect_host(port, rank, 2, 15s, 15s);
  CountingComm comm{host};
  workspace_for<CountingComm> ws;
  TransferOptions opt;
  opt.buffer_size_bytes = 2048;
  opt.num_buffers = 2;
  opt.timeout = 15s;
  if (total_bytes(small()) > detail::eager_capacity(2) || total_bytes(small()) <= 2048)
    throw std::logic_error("the small model must be eager and need two chunks without it");
  for (int round = 1; round <= 7; ++round) {
    const auto metas = round == 2 ? large() : small();
    auto want = model(metas, round);
    auto got = poisoned(metas);
    const int before = comm.exchanges;
    const auto [what, peer] = run_caught([&] {
      if (rank == 0) {
        auto bad = metas;
        if (round == 3) bad[3].dtype = DType::bfloat16;  // "q": the item says bf16, the meta fp16
        std::vector<SourceTensorRef> items;
        for (std::size_t i = 0; i < metas.size(); ++i) items.push_back({&bad[i], want[i].data()});
        packed_broadcast_producer(metas, items, comm, 0, opt, ws);
      } else {
        auto mine = metas;
        if (round == 4) mine[0].shape = {32, 31};
        TransferOptions o = opt;
        o.destination = [&](const TensorMeta& m) -> void* {
          const auto i = static_cast<std::size_t>(&m - mine.data());
          return m.name == "embed" || m.name == "q" ? got[i].data() : nullptr;
        };
        packed_broadcast_consumer(
            mine, comm, 0,
            [&](std::span<const TensorView> batch, HostStream) {
              if (round == 5) throw std::runtime_error("the engine is out of memory");
              for (const auto& v : batch) {
                const auto i = static_cast<std::size_t>(v.meta - mine.data());
                if (v.nbytes) std::memcpy(got[i].data(), v.data, v.nbytes);
              }
            },
            o, ws);
        if (got != want) fail(round, rank, "the received bytes differ");
      }
    });
    const int exchanges = comm.exchanges - before;
    const bool untouched = got == poisoned(metas);
    switch (round) {
      case 1:
      case 7:
        if (!what.empty()) fail(round, rank, what);
        if (exchanges != 1) fail(round, rank, std::to_string(exchanges) + " exchanges, not 1");
        break;
      case 2:
        if (!what.empty()) fail(round, rank, what);
        if (exchanges < 2) fail(round, rank, "a large sync took one exchange");
        break;
      case 3:
        if (rank == 0 ? what.find("dtype") == std::string::npos
                      : (peer != 0 || what.find("dtype") == std::string::npos))
          fail(round, rank, "the wrong item was not reported: '" + what + "'");
        if (rank == 1 && !untouched) fail(round, rank, "bytes of a failed transfer were written");
        break;
      case 4:
        if (what.find("handshake") == std::string::npos)
          fail(round, rank, "the mismatch was not refused: '" + what + "'");
        if (rank == 1 && !untouched) fail(round, rank, "a refused transfer wrote bytes");
        if (exchanges < 1) fail(round, rank, "no handshake");
        break;
      case 5:
        if (rank == 0 && !what.empty()) fail(round, rank, what);
        if (rank == 1 && what.find("out of memory") == std::string::npos)
          fail(round, rank, "load_weights' error was not rethrown: '" + what + "'");
        break;
      case 6:
        if (peer != 1 || what.find("out of memory") == std::string::npos)
          fail(round, rank, "rank 1's earlier failure was not reported: '" + what + "'");
        if (rank == 1 && !untouched) fail(round, rank, "a refused transfer wrote bytes");
        if (exchanges != 1) fail(round, rank, std::to_string(exchanges) + " exchanges, not 1");
        break;
      default:
        break;
    }
  }
}

// Wide blocks (protocol 8), `world` ranks (Acknowledge::next_transfer, a buffer of 2 KiB so that
// a sync that is not eager takes several chunks). Rounds, each with its exchanges on every rank and
// the communicator's WireState after it (wide: the next handshake's blocks are wide):
//    1 medium: handshake then data (2 exchanges or more), bit-exact; wide after;
//    2 medium: one exchange, bit-exact;
//    3 medium, rank 1 declares another shape: protocol_error on every rank, nothing written; still
//      wide (a refused handshake decides nothing);
//    4 medium, the producer's "embed" item has the wrong dtype: config_error there, remote_error
//      on every consumer (the data phase carries it, as before); still wide;
//    5 medium, rank 1 with a workspace of its own for this call (the overload without one): one
//      exchange, bit-exact (the state is the communicator's, not the workspace's);
//    6 small: one exchange (it fits either block); not wide after;
//    7 medium: 2 exchanges or more (base blocks again); wide after;
//    8 large (64 KiB, in a wide handshake): 2 exchanges or more, bit-exact; not wide after;
//    9 medium: 2 exchanges or more; 10 medium: one exchange.
void run_wide_rank(int port, int rank, int world) {
  auto host = ws_test::connect_host(port, rank, world, 15s, 15s);
  CountingComm comm{host};
  workspace_for<CountingComm> ws;
  TransferOptions opt;
  opt.buffer_size_bytes = 2048;
  opt.num_buffers = 2;
  opt.timeout = 15s;
  if (total_bytes(medium()) <= detail::eager_capacity(static_cast<std::size_t>(world)) ||
      total_bytes(medium()) > detail::kWideEagerBytes)
    throw std::logic_error("the medium model must fit a wide block and not a base one");
  if (comm.wire_state().wide_count != 0) fail(0, rank, "a new communicator starts wide");
  const bool wide_after[] = {false, true, true, true, true, true, false, true, false, true, true};
  for (int round = 1; round <= 10; ++round) {
    const auto metas = round == 6 ? small() : round == 8 ? large() : medium();
    auto want = model(metas, round);
    auto got = poisoned(metas);
    const int before = comm.exchanges;
    const auto [what, peer] = run_caught([&] {
      if (rank == 0) {
        auto bad = metas;
        if (round == 4) bad[0].dtype = DType::int8;  // "embed": the item says int8, the meta bf16
        std::vector<SourceTensorRef> items;
        for (std::size_t i = 0; i < metas.size(); ++i) items.push_back({&bad[i], want[i].data()});
        packed_broadcast_producer(metas, items, comm, 0, opt, ws);
      } else {
        auto mine = metas;
        if (round == 3 && rank == 1) mine[0].shape = {64, 63};
        TransferOptions o = opt;
        o.destination = [&](const TensorMeta& m) -> void* {
          const auto i = static_cast<std::size_t>(&m - mine.data());
          return i % 3 == 0 ? got[i].data() : nullptr;  // some in place, the rest as views
        };
        auto load = [&](std::span<const TensorView> batch, HostStream) {
          for (const auto& v : batch) {
            const auto i = static_cast<std::size_t>(v.meta - mine.data());
            if (v.nbytes) std::memcpy(got[i].data(), v.data, v.nbytes);
          }
        };
        if (round == 5 && rank == 1)
          packed_broadcast_consumer(mine, comm, 0, load, o);
        else
          packed_broadcast_consumer(mine, comm, 0, load, o, ws);
        if (got != want) fail(round, rank, "the received bytes differ");
      }
    });
    const int exchanges = comm.exchanges - before;
    const bool untouched = got == poisoned(metas);
    const bool one = round == 2 || round == 5 || round == 6 || round == 10;
    switch (round) {
      case 3:
        if (what.find("handshake") == std::string::npos || peer != 1)
          fail(round, rank, "the mismatch was not refused naming rank 1: '" + what + "'");
        if (!untouched) fail(round, rank, "a refused transfer wrote bytes");
        break;
      case 4:
        // (Not eager: the data phase carries the failure; "embed", a chunk of its own, may have
        // landed in its destination, as single-tensor chunks are received in place.)
        if (what.find("dtype") == std::string::npos || (rank > 0 && peer != 0))
          fail(round, rank, "the wrong item was not reported: '" + what + "'");
        if (exchanges < 2) fail(round, rank, "a wrong item travelled in the handshake");
        break;
      default:
        if (!what.empty()) fail(round, rank, what);
        if (one && exchanges != 1)
          fail(round, rank, std::to_string(exchanges) + " exchanges, not 1");
        if (!one && exchanges < 2) fail(round, rank, "one exchange: not the path expected");
        break;
    }
    // (wide: the producer's block alone, rank 0's)
    const WireState w = comm.wire_state();
    if ((w.wide_count != 0) != wide_after[round] || (w.wide_count != 0 && (w.wide_first != 0 || w.wide_count != 1)))
      fail(round, rank, "the next handshake's wide blocks are ranks " + std::to_string(w.wide_first) +
                            " + " + std::to_string(w.wide_count));
  }
}

// Repeated eager syncs on the host policy, which cannot relaunch a batch. The producer copies
// each item into its eager bytes as it checks it, in one pass, and keeps no list (a kept list
// would cost a second pass and a compare). The copy out keeps its list and runs it again while
// the plan, the places and the destinations stay the same (RepeatedBatch): three flat lists read
// in order, where listing again walks the plan. Rounds: sources A A B B A A A (the producer
// writes each round's bytes into them in place, so that a kept list would have to read them
// anew), places X X Y Y X V V (V: no destination, views). Every byte is checked every round; so
// is what each side kept.
void run_repeated_rank(int port, int rank) {
  auto host = ws_test::connect_host(port, rank, 2, 15s, 15s);
  workspace_for<HostCommunicator> ws;
  std::vector<TensorMeta> metas;
  for (int i = 0; i < 40; ++i)
    metas.push_back({"layers." + std::to_string(i) + ".norm", DType::bfloat16, {32}});
  if (total_bytes(metas) > detail::eager_capacity(2)) throw std::logic_error("not eager");
  auto a = poisoned(metas), b = poisoned(metas), x = poisoned(metas), y = poisoned(metas);
  auto got = poisoned(metas);
  const char sources[] = "AABBAAA", places[] = "XXYYXVV";
  auto& st = detail::WorkspaceAccess::state(ws);
  for (int round = 1; round <= 7; ++round) {
    const auto want = model(metas, round);
    TransferOptions opt;
    opt.timeout = 15s;
    if (rank == 0) {
      auto& from = sources[round - 1] == 'A' ? a : b;
      for (std::size_t i = 0; i < metas.size(); ++i)
        std::copy(want[i].begin(), want[i].end(), from[i].begin());  // (in place)
      std::vector<SourceTensorRef> items;
      for (std::size_t i = 0; i < metas.size(); ++i) items.push_back({&metas[i], from[i].data()});
      packed_broadcast_producer(metas, items, host, 0, opt, ws);
      if (!st.eager_pack.n.empty() || st.eager_pack.batch)
        fail(round, rank, "the host's one-pass pack kept a list");
      continue;
    }
    const char at = places[round - 1];
    auto& into = at == 'Y' ? y : at == 'X' ? x : got;
    for (auto& t : into) std::fill(t.begin(), t.end(), std::byte{0xa5});
    if (at != 'V') opt.destination = [&](const TensorMeta& m) -> void* {
      return into[static_cast<std::size_t>(&m - metas.data())].data();
    };
    packed_broadcast_consumer(
        metas, host, 0,
        [&](std::span<const TensorView> batch, HostStream) {
          for (const auto& v : batch)
            std::memcpy(got[static_cast<std::size_t>(v.meta - metas.data())].data(), v.data,
                        v.nbytes);
        },
        opt, ws);
    if (into != want) fail(round, rank, std::string("the received bytes differ (into ") + at + ")");
    const bool kept = !st.eager_unpack.n.empty();
    if (kept != (at != 'V') || (kept && st.eager_unpack.dst[0] != into[0].data()))
      fail(round, rank, "the copy out's list was not kept as made");
  }
}

// Tensors laid out in one arena per side, in runs that lie back to back with gaps between them
// (the producer's runs and the consumer's differ, an empty tensor sits inside a run): the bytes
// arrive, the gaps stay poisoned, and the consumer's kept copy out (from the eager bytes, which
// lie back to back) has one copy per run of its places. Rounds 1 and 2: the same arenas (round 2
// copies out again from the kept list); round 3 with the consumer's gaps moved (listed again).
void run_back_to_back_rank(int port, int rank) {
  auto host = ws_test::connect_host(port, rank, 2, 15s, 15s);
  workspace_for<HostCommunicator> ws;
  auto& st = detail::WorkspaceAccess::state(ws);
  std::vector<TensorMeta> metas;
  for (int i = 0; i < 24; ++i)
    metas.push_back({"t" + std::to_string(i), DType::bfloat16, {i == 7 ? 0 : 8 + i}});
  if (total_bytes(metas) > detail::eager_capacity(2)) throw std::logic_error("not eager");
  // A gap of 32 bytes before tensor i when gap(i): the producer's before 5 and 13 (its pack
  // copies [0, 5), [5, 13), [13, 24)), the consumer's before 9 and 13 (copied out as [0, 9),
  // [9, 13), [13, 24): three copies), then before 3, 13 and 20 (four).
  const auto lay = [&](auto gap, std::vector<std::size_t>& off) {
    off.assign(metas.size(), 0);
    std::size_t at = 0;
    for (std::size_t i = 0; i < metas.size(); ++i) {
      if (gap(i)) at += 32;
      off[i] = at;
      at += metas[i].nbytes();
    }
    return at;
  };
  std::vector<std::size_t> src_off, dst_off;
  const std::size_t src_bytes = lay([](std::size_t i) { return i == 5 || i == 13; }, src_off);
  std::vector<std::byte> arena(src_bytes + 64);
  for (int round = 1; round <= 3; ++round) {
    const auto want = model(metas, round);
    TransferOptions opt;
    opt.timeout = 15s;
    if (rank == 0) {
      std::vector<SourceTensorRef> items;
      for (std::size_t i = 0; i < metas.size(); ++i) {
        if (!want[i].empty())  // (an empty vector's data() may be null: no memcpy from it)
          std::memcpy(arena.data() + src_off[i], want[i].data(), want[i].size());
        items.push_back({&metas[i], arena.data() + src_off[i]});
      }
      packed_broadcast_producer(metas, items, host, 0, opt, ws);
      continue;
    }
    const std::size_t dst_bytes =
        round < 3 ? lay([](std::size_t i) { return i == 9 || i == 13; }, dst_off)
                  : lay([](std::size_t i) { return i == 3 || i == 13 || i == 20; }, dst_off);
    std::vector<std::byte> into(dst_bytes + 64, std::byte{0xa5});
    opt.destination = [&](const TensorMeta& m) -> void* {
      return into.data() + dst_off[static_cast<std::size_t>(&m - metas.data())];
    };
    packed_broadcast_consumer(metas, host, 0, [](std::span<const TensorView>, HostStream) {}, opt, ws);
    std::vector<std::byte> expect(into.size(), std::byte{0xa5});
    for (std::size_t i = 0; i < metas.size(); ++i)
      if (!want[i].empty()) std::memcpy(expect.data() + dst_off[i], want[i].data(), want[i].size());
    if (into != expect) fail(round, rank, "the received bytes or the gaps between them differ");
    const std::size_t copies = round < 3 ? 3 : 4;
    if (st.eager_unpack.n.size() != copies)
      fail(round, rank, "the copy out has " + std::to_string(st.eager_unpack.n.size()) +
                            " copies, want " + std::to_string(copies));
  }
}

// SealedMetadata given to the pipeline (packed_broadcast_producer / _consumer overloads): the
// same sync as with a span, on either side or both; a sealed list that differs from the
// producer's is refused at the handshake, naming the tensor, and nothing is written. Rounds
// (P = producer, C = consumer; s = sealed, v = a span): 1 Ps Cv, 2 Ps Cs, 3 Pv Cs, 4 Ps Cs with
// the consumer's "embed" of another shape (refused), 5 Ps Cs again; rounds 1-3 and 5 also in the
// data phase (a 2 KiB buffer for the medium model), the rest eager.
void run_sealed_rank(int port, int rank) {
  auto host = ws_test::connect_host(port, rank, 2, 15s, 15s);
  workspace_for<HostCommunicator> ws;
  for (const bool large_model : {false, true}) {
    const auto metas = large_model ? medium() : small();
    const SealedMetadata sealed(metas);
    auto other = metas;
    other[0].shape.back() -= 1;
    const SealedMetadata differs(other);
    TransferOptions opt;
    opt.timeout = 15s;
    if (large_model) opt.buffer_size_bytes = 2048;
    for (int round = 1; round <= 5; ++round) {
      const auto want = model(metas, round);
      auto got = poisoned(metas);
      const bool producer_sealed = round != 3, consumer_sealed = round != 1;
      const auto [what, peer] = run_caught([&] {
        if (rank == 0) {
          std::vector<SourceTensorRef> items;
          const TensorMeta* listed = producer_sealed ? sealed.metas().data() : metas.data();
          for (std::size_t i = 0; i < metas.size(); ++i) items.push_back({listed + i, want[i].data()});
          if (producer_sealed)
            packed_broadcast_producer(sealed, items, host, 0, opt, ws);
          else
            packed_broadcast_producer(std::span<const TensorMeta>(metas), items, host, 0, opt, ws);
          return;
        }
        const SealedMetadata& mine = round == 4 ? differs : sealed;
        auto load = [&](std::span<const TensorView> batch, HostStream) {
          const TensorMeta* base = consumer_sealed ? mine.metas().data() : metas.data();
          for (const auto& v : batch) {
            const auto i = static_cast<std::size_t>(v.meta - base);
            if (v.nbytes) std::memcpy(got[i].data(), v.data, v.nbytes);
          }
        };
        if (consumer_sealed)
          packed_broadcast_consumer(mine, host, 0, load, opt, ws);
        else
          packed_broadcast_consumer(std::span<const TensorMeta>(metas), host, 0, load, opt, ws);
        if (got != want) fail(round, rank, "the received bytes differ");
      });
      if (round == 4) {
        if (what.find("handshake") == std::string::npos || what.find("'embed'") == std::string::npos)
          fail(round, rank, "a sealed list that differs was not refused naming 'embed': '" + what + "'");
        if (rank == 1 && got != poisoned(metas)) fail(round, rank, "a refused transfer wrote bytes");
      } else if (!what.empty()) {
        fail(round, rank, what);
      }
    }
  }
}

}  // namespace

TEST_CASE("eager: a SealedMetadata on either side is the same sync, and a sealed list that differs is refused",
          "[unit][eager]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  for (int rank = 0; rank < 2; ++rank) procs.spawn([=] { run_sealed_rank(port, rank); });
  ws_test::expect_all_ok(procs.wait_all(60s));
}

TEST_CASE("eager: repeated syncs on the host pack in one pass and copy out from a kept list, other places list again",
          "[unit][eager]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  for (int rank = 0; rank < 2; ++rank) procs.spawn([=] { run_repeated_rank(port, rank); });
  ws_test::expect_all_ok(procs.wait_all(60s));
}

TEST_CASE("eager: tensors that lie back to back on both sides move as one copy, the gaps untouched",
          "[unit][eager]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  for (int rank = 0; rank < 2; ++rank) procs.spawn([=] { run_back_to_back_rank(port, rank); });
  ws_test::expect_all_ok(procs.wait_all(60s));
}

TEST_CASE("workspace: a copy that continues the last one on both sides extends it", "[unit][eager]") {
  detail::WorkspaceState<HostPolicy> w{HostPolicy{}};
  std::byte a[64]{}, b[64]{};
  w.add_copy(a, b, 8);
  w.add_copy(a + 8, b + 8, 8);    // continues both: one copy of 16
  w.add_copy(a + 16, b + 24, 8);  // the destination continues, the source does not
  w.add_copy(a + 32, b + 32, 8);  // the source continues, the destination does not
  w.add_copy(a + 40, b + 40, 0);  // nothing to copy: not listed, and breaks no run
  w.add_copy(a + 40, b + 40, 4);  // continues the last
  REQUIRE(w.copy_size.size() == 3);
  CHECK(w.copy_size[0] == 16);
  CHECK(w.copy_dst[1] == a + 16);
  CHECK(w.copy_src[1] == b + 24);
  CHECK(w.copy_size[1] == 8);
  CHECK(w.copy_dst[2] == a + 32);
  CHECK(w.copy_size[2] == 12);
  w.clear_copies();
  w.add_copy(a + 40, b + 40, 4);  // a new list starts anew
  CHECK(w.copy_size.size() == 1);
}

TEST_CASE("eager: after a sync of up to 32 KiB the next one travels in wide handshake blocks",
          "[unit][eager]") {
  for (const int world : {2, 3}) {
    INFO("world " << world);
    ws_test::Processes procs;
    const int port = ws_test::free_port();
    for (int rank = 0; rank < world; ++rank)
      procs.spawn([=] { run_wide_rank(port, rank, world); });
    ws_test::expect_all_ok(procs.wait_all(60s));
  }
}

TEST_CASE("eager: a sync that fits in the handshake is one exchange, and fails as cleanly",
          "[unit][eager]") {
  ws_test::Processes procs;
  const int port = ws_test::free_port();
  for (int rank = 0; rank < 2; ++rank) procs.spawn([=] { run_rank(port, rank); });
  ws_test::expect_all_ok(procs.wait_all(60s));
}

TEST_CASE("eager: the handshake block sizes", "[unit][eager]") {
  CHECK(detail::handshake_block_bytes(1) == detail::kFrameBytes + 4096);
  CHECK(detail::eager_capacity(2) == 4096);
  CHECK(detail::eager_capacity(3) == 4096);
  CHECK(detail::eager_capacity(4) == 4096 - detail::kFrameBytes);
  CHECK(detail::eager_capacity(64) == 0);
  CHECK(detail::handshake_block_bytes(100000) == detail::kFrameBytes);
  // Wide blocks: the roots' alone, laid out in rank order.
  const auto l = detail::HandshakeLayout::of(3, 1, 1);
  CHECK(l.capacity(0) == 4096);
  CHECK(l.capacity(1) == 32768);
  CHECK(l.capacity(2) == 4096);
  CHECK(l.offset(0) == 0);
  CHECK(l.offset(1) == detail::kFrameBytes + 4096);
  CHECK(l.offset(2) == 2 * detail::kFrameBytes + 4096 + 32768);
  CHECK(l.total() == 3 * detail::kFrameBytes + 2 * 4096 + 32768);
  CHECK(detail::HandshakeLayout::of(64, 0, 4).capacity(3) == 32768);
  CHECK(detail::HandshakeLayout::of(64, 0, 4).capacity(4) == 0);
  CHECK(detail::HandshakeLayout::of(64, 0, 4).total() == 60 * detail::kFrameBytes + 4 * detail::kHandshakeWideBlock);
  // A state that cannot be laid out is no wide block at all: too many, or outside the group.
  CHECK(detail::HandshakeLayout::of(8, 0, 5).count == 0);
  CHECK(detail::HandshakeLayout::of(2, 1, 2).count == 0);
  CHECK(detail::HandshakeLayout::of(2, -1, 1).count == 0);
  for (const std::size_t world : {1, 2, 3, 4, 7, 64})
    for (int first = 0; first < 4; ++first)
      for (int count = 0; count <= 4; ++count)
        CHECK(detail::HandshakeLayout::of(world, first, count).total() <=
              detail::HandshakeLayout::largest(world));
}

TEST_CASE("metadata digest cache: the same digest as the hash, and a change in place is seen",
          "[unit][eager]") {
  detail::MetadataDigestCache cache;
  auto metas = small();
  const auto d0 = detail::metadata_digest(metas);
  CHECK(cache(metas) == d0);
  CHECK(cache(metas) == d0);  // from the cache
  metas[3].shape = {16, 17};  // the same vector, changed in place
  CHECK(cache(metas) == detail::metadata_digest(metas));
  CHECK(cache(metas) != d0);
  metas[3].shape = {16, 16};
  metas[0].name = "embed2";
  CHECK(cache(metas) == detail::metadata_digest(metas));
  metas.pop_back();
  CHECK(cache(metas) == detail::metadata_digest(metas));
  CHECK(cache(std::span<const TensorMeta>{}) == detail::metadata_digest({}));
}

TEST_CASE("metadata digest cache: the byte count with the digest, and an invalid list kept nowhere",
          "[unit][eager]") {
  detail::MetadataDigestCache cache;
  auto metas = small();
  const auto s = cache.of(metas);
  CHECK(s.digest == detail::metadata_digest(metas));
  CHECK(s.bytes == total_bytes(metas));
  metas[0].shape = {-1, 32};  // invalid: refused, and not taken for the last list
  REQUIRE_THROWS_AS(cache.of(metas), config_error);
  REQUIRE_THROWS_AS(cache.of(metas), config_error);
  metas[0].shape = {32, 32};
  CHECK(cache.of(metas).digest == s.digest);
  CHECK(cache.of(metas).bytes == s.bytes);
}

TEST_CASE("SealedMetadata: its digest and bytes are the list's, a moved-from list is the empty one",
          "[unit][eager]") {
  const auto metas = small();
  SealedMetadata sealed(metas);
  CHECK(sealed.digest() == detail::metadata_digest(metas));
  CHECK(sealed.total_bytes() == total_bytes(metas));
  REQUIRE(sealed.size() == metas.size());
  CHECK(sealed[3] == metas[3]);
  const std::span<const TensorMeta> view = sealed;  // every span API takes it
  CHECK(view.data() == sealed.metas().data());
  const SealedMetadata copy = sealed;
  CHECK(copy.digest() == sealed.digest());
  SealedMetadata moved = std::move(sealed);
  CHECK(moved.digest() == detail::metadata_digest(metas));
  CHECK(sealed.size() == 0);  // NOLINT(bugprone-use-after-move): what a moved-from list is
  CHECK(sealed.digest() == detail::metadata_digest({}));
  CHECK(sealed.total_bytes() == 0);
  sealed = std::move(moved);
  CHECK(sealed.digest() == detail::metadata_digest(metas));
  CHECK(moved.digest() == detail::metadata_digest({}));  // NOLINT(bugprone-use-after-move)
  auto bad = metas;
  bad[2].shape = {0, -16};
  try {
    SealedMetadata refused(std::move(bad));
    FAIL("an invalid shape was sealed");
  } catch (const config_error& e) {
    CHECK(std::string(e.what()).find("'empty'") != std::string::npos);
  }
}

TEST_CASE("repeated batch: only the same plan, the same addresses and a batch to repeat relaunch",
          "[unit][eager]") {
  detail::PlanCache cache;
  detail::MetadataDigestCache digests;
  const auto metas = medium();
  const TransferOptions opt;
  const auto plan = cache.whole(metas, 0, opt, digests);
  int a = 0, b = 0;
  const std::vector<const void*> keys = {&a, &b};
  detail::RepeatedBatch last;
  CHECK_FALSE(last.same(plan.get(), keys));  // nothing remembered
  last.plan = plan;
  last.keys = keys;
  CHECK_FALSE(last.same(plan.get(), keys));  // no batch to repeat (a policy without memos)
  last.batch.entry = &a;
  last.batch.count = 2;
  CHECK(last.same(plan.get(), keys));
  CHECK_FALSE(last.same(plan.get(), {&b, &a}));  // other addresses
  CHECK_FALSE(last.same(plan.get(), {&a}));
  const detail::PiecePlan other(metas, 0, opt);
  CHECK_FALSE(last.same(&other, keys));  // another plan, even of the same list
  last.forget();
  CHECK_FALSE(last.same(plan.get(), keys));
  CHECK(last.plan == nullptr);
  // A policy without relaunches keeps the list itself: that, too, can be repeated.
  last.plan = plan;
  last.keys = keys;
  last.dst = {&a};
  last.src = {&b};
  last.n = {sizeof a};
  CHECK(last.same(plan.get(), keys));
  CHECK_FALSE(last.same(plan.get(), {&b, &a}));
  last.forget();
  CHECK(last.n.empty());
  CHECK_FALSE(last.same(plan.get(), keys));
  // The workspace keeps lists exactly when its policy cannot relaunch.
  static_assert(detail::WorkspaceState<HostPolicy>::keeps_lists());
}

}  // namespace ws_test_eager_test

namespace ws_test_eager_test {

TEST_CASE("plan cache: a sync like the last one reuses its plan, and any input of the plan rebuilds it",
          "[unit][eager]") {
  detail::PlanCache cache;
  detail::MetadataDigestCache digests;
  const auto metas = medium();
  TransferOptions opt;
  opt.buffer_size_bytes = 2048;
  const auto first = cache.whole(metas, 0, opt, digests);
  const detail::PiecePlan fresh(metas, 0, opt);
  CHECK(first->total_bytes == fresh.total_bytes);
  CHECK(first->steps == fresh.steps);
  CHECK(first->slot_bytes == fresh.slot_bytes);
  CHECK(first->piece_step == fresh.piece_step);
  auto copy = metas;  // the same list elsewhere: the same plan
  CHECK(cache.whole(copy, 0, opt, digests) == first);
  TransferOptions same = opt;
  same.num_buffers = 3;  // (not an input of the plan)
  same.checksum = true;
  CHECK(cache.whole(metas, 0, same, digests) == first);
  // Each input of the plan: a new one, and it is kept in turn.
  copy[0].shape = {64, 32};
  const auto reshaped = cache.whole(copy, 0, opt, digests);
  CHECK(reshaped != first);
  CHECK(reshaped->total_bytes == fresh.total_bytes - 64 * 32 * 2);
  CHECK(cache.whole(copy, 0, opt, digests) == reshaped);
  CHECK(cache.whole(metas, 1, opt, digests)->root_rank == std::vector<int>{1});
  TransferOptions o = opt;
  o.buffer_size_bytes = 4096;
  const auto wider = cache.whole(metas, 1, o, digests);
  CHECK(wider->steps < fresh.steps);
  o.direct_threshold_bytes = 1024;
  const auto direct = cache.whole(metas, 1, o, digests);
  CHECK(direct != wider);
  CHECK(direct->direct == detail::PiecePlan(metas, 1, o).direct);
  CHECK(std::count(direct->direct.begin(), direct->direct.end(), 1) > 0);
  o.packed = false;
  const auto unpacked = cache.whole(metas, 1, o, digests);
  CHECK(unpacked != direct);
  CHECK(unpacked->steps == detail::PiecePlan(metas, 1, o).steps);
  CHECK(unpacked->steps != direct->steps);
  o.protocol = Protocol::vllm;
  CHECK_THROWS_AS(cache.whole(metas, 1, o, digests), config_error);  // (direct is not vLLM's)
  o.direct_threshold_bytes = 0;
  CHECK(!cache.whole(metas, 1, o, digests)->framed);
  // An invalid shape is refused every time, and nothing is kept for it.
  copy[0].shape = {-1, 2};
  CHECK_THROWS_AS(cache.whole(copy, 0, opt, digests), config_error);
  CHECK_THROWS_AS(cache.whole(copy, 0, opt, digests), config_error);
}

}  // namespace ws_test_eager_test
