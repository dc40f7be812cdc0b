// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The CUDA delta codec (cuda/delta.hpp) against the host codec (delta/codec.hpp): blobs byte for
// byte (padding included) for elements of 1, 2, 4 and 8 bytes at densities 0 .. 1, sizes that
// are not a multiple of the bucket, empty and one-element tensors, NaN payloads and -0.0 against
// 0.0, misaligned sources (the element-wise path); the CUDA applier rebuilds the source bit for
// bit. Corrupted blobs: the applier throws protocol_error with check_delta_blob's message and
// writes nothing of the bad blob (the good blobs of the same batch are applied). Then a batch of
// many tensors in one measure / encode / apply; blobs applied through a load plan's gather; vLLM's
// sparse pairs on the GPU.
#include <weightsync/cuda/check.hpp>
#include <weightsync/cuda/delta.hpp>
#include <weightsync/cuda/device_buffer.hpp>
#include <weightsync/delta/codec.hpp>
#include <weightsync/delta/gather.hpp>
#include <weightsync/delta/low_byte.hpp>
#include <weightsync/delta/receive.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"

using namespace weightsync;
using namespace weightsync::delta;

namespace {

using Bytes = std::vector<std::byte>;

int device() {
  int d = 0;
  weightsync::detail::check(cudaGetDevice(&d), "cudaGetDevice");
  return d;
}

// A device copy of `h` placed `offset` bytes into its buffer (16 spare bytes after it).
struct Dev {
  DeviceBuffer buf;
  std::size_t offset = 0, size = 0;
  Dev(const Bytes& h, std::size_t off = 0)
      : buf(h.size() + off + 16, device()), offset(off), size(h.size()) {
    weightsync::detail::check(cudaMemset(buf.data(), 0x5a, buf.size()), "cudaMemset");
    if (!h.empty())
      weightsync::detail::check(
          cudaMemcpy(buf.data() + off, h.data(), h.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
    // the non-blocking test stream does not wait for the legacy stream's copies
    weightsync::detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  std::byte* data() const { return buf.data() + offset; }
  Bytes get() const {
    Bytes h(size);
    if (size)
      weightsync::detail::check(cudaMemcpy(h.data(), data(), size, cudaMemcpyDeviceToHost),
                                "cudaMemcpy");
    return h;
  }
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() {
    weightsync::detail::check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                              "cudaStreamCreateWithFlags");
  }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

// A random reference and a source differing from it in about `density` of its elements (the
// changed elements get other random bits). `special`: the reference holds +0.0 / NaNs at some
// positions and the source -0.0 / NaNs of other payloads (changes), or equal NaN bits (no change).
struct Pair {
  Bytes src, ref;
};
Pair make_pair(std::uint64_t numel, unsigned eb, double density, std::uint64_t seed, bool special) {
  std::mt19937_64 rng(seed);
  Pair p{Bytes(numel * eb), Bytes(numel * eb)};
  for (auto& b : p.ref) b = static_cast<std::byte>(rng());
  p.src = p.ref;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (std::uint64_t i = 0; i < numel; ++i) {
    if (density < 1.0 && u(rng) >= density) continue;
    std::uint64_t x = 0;
    while ((x & ((eb == 8 ? 0 : (std::uint64_t{1} << (8 * eb))) - 1)) == 0) x = rng();
    for (unsigned k = 0; k < eb; ++k) p.src[i * eb + k] ^= static_cast<std::byte>(x >> (8 * k));
  }
  if (special && (eb == 2 || eb == 4 || eb == 8)) {
    const auto put = [&](Bytes& t, std::uint64_t i, std::uint64_t v) {
      std::memcpy(t.data() + i * eb, &v, eb);  // little-endian: the low eb bytes
    };
    const std::uint64_t zero_neg = std::uint64_t{1} << (8 * eb - 1);
    const std::uint64_t nan = eb == 2 ? 0x7fc0 : eb == 4 ? 0x7fc00000u : 0x7ff8000000000000ull;
    for (std::uint64_t i = 0; i < numel; i += 97) {
      switch ((i / 97) % 4) {
        case 0:  // 0.0 -> -0.0: a change
          put(p.ref, i, 0), put(p.src, i, zero_neg);
          break;
        case 1:  // NaN -> NaN of another payload: a change
          put(p.ref, i, nan), put(p.src, i, nan | 1);
          break;
        case 2:  // the same NaN bits: no change
          put(p.ref, i, nan | 3), put(p.src, i, nan | 3);
          break;
        default:  // -0.0 on both sides: no change
          put(p.ref, i, zero_neg), put(p.src, i, zero_neg);
          break;
      }
    }
  }
  return p;
}

// Encodes on the GPU (one job) and returns the blob; `update`: measure also writes the source
// into the reference (checked here: the reference equals the source after it, and nothing around
// it was written).
Bytes gpu_encode(CudaDeltaEncoder& enc, const Dev& src, const Dev& ref, std::uint64_t numel,
                 unsigned eb, cudaStream_t s, std::uint64_t* changed = nullptr,
                 bool update = false) {
  const DeltaJob job{src.data(), ref.data(), numel, eb};
  const auto sizes = enc.measure(std::span<const DeltaJob>(&job, 1), s, update);
  if (update) {
    CHECK(ref.get() == src.get());
    Bytes around(ref.offset + 16);
    weightsync::detail::check(
        cudaMemcpy(around.data(), ref.buf.data() + ref.offset + ref.size, 16,
                   cudaMemcpyDeviceToHost),
        "cudaMemcpy");
    if (ref.offset > 0)
      weightsync::detail::check(
          cudaMemcpy(around.data() + 16, ref.buf.data(), ref.offset, cudaMemcpyDeviceToHost),
          "cudaMemcpy");
    for (auto b : around) CHECK(b == std::byte{0x5a});
  }
  REQUIRE(sizes.size() == 1);
  if (changed) *changed = enc.changed_elements();
  Bytes poison(sizes[0], std::byte{0xee});
  Dev out(poison);
  void* outs[] = {out.data()};
  enc.encode(outs, s);
  weightsync::detail::check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  const Bytes got = out.get();
  // nothing written past the blob
  Bytes tail(16);
  weightsync::detail::check(
      cudaMemcpy(tail.data(), out.data() + out.size, 16, cudaMemcpyDeviceToHost), "cudaMemcpy");
  for (auto b : tail) CHECK(b == std::byte{0x5a});
  return got;
}

// Applies `blob` on the GPU onto a device copy of `base` (at `dst_offset`) and returns the result.
Bytes gpu_apply(CudaDeltaApplier& app, const Bytes& blob, const Bytes& base, std::uint64_t numel,
                unsigned eb, cudaStream_t s, std::size_t dst_offset = 0) {
  const Dev b(blob), d(base, dst_offset);
  app.apply(b.data(), blob.size(), d.data(), numel, eb, "t", s);
  app.finish(s);
  return d.get();
}

std::uint64_t popcount_total(const std::vector<std::uint32_t>& c) {
  std::uint64_t n = 0;
  for (auto x : c) n += x;
  return n;
}

}  // namespace

TEST_CASE("delta kernels: blobs byte-identical to the host codec, applied bit-exactly",
          "[gpu][delta]") {
  Stream st;
  std::uint64_t seed = 1;
  for (std::uint32_t be : {kDefaultBucketElems, 1024u}) {
    CudaDeltaEncoder enc(be);
    CudaDeltaApplier app(be), app_sectors(be, SparseWrites::sectors);
    for (unsigned eb : {1u, 2u, 4u, 8u})
      for (double density : {0.0, 0.001, 0.01, 0.03, 0.1, 0.5, 1.0})
        for (std::uint64_t numel : {std::uint64_t{3} * be + 777, std::uint64_t{2} * be}) {
          const bool special = density == 0.01;
          for (std::size_t offset : {std::size_t{0}, std::size_t{eb}}) {  // eb: misaligned
            if (offset != 0 && density != 0.01 && density != 0.5) continue;
            CAPTURE(be, eb, density, numel, offset, special);
            const Pair p = make_pair(numel, eb, density, seed++, special);
            const auto counts = bucket_changes_host(p.src.data(), p.ref.data(), numel, eb, be);
            Bytes want(blob_bytes_for(counts, numel, eb, be));
            encode_delta_host(p.src.data(), p.ref.data(), numel, eb, be, counts, want.data(),
                              want.size());
            const Dev src(p.src, offset), ref(p.ref, offset), ref2(p.ref, offset);
            std::uint64_t changed = 0;
            const Bytes got = gpu_encode(enc, src, ref, numel, eb, st.s, &changed);
            CHECK(changed == popcount_total(counts));
            REQUIRE(got.size() == want.size());
            CHECK(got == want);
            CHECK(gpu_apply(app, got, p.ref, numel, eb, st.s, offset) == p.src);
            CHECK(gpu_apply(app_sectors, got, p.ref, numel, eb, st.s, offset) == p.src);
            // the reference update inside measure: the same blob, and ref becomes src
            CHECK(gpu_encode(enc, src, ref2, numel, eb, st.s, nullptr, true) == want);
          }
        }
  }
}

TEST_CASE("delta kernels: a low-byte reference is seeded, measured, encoded and updated as the host "
          "codec does - a change that kept the low byte fails its block, which goes whole",
          "[gpu][delta]") {
  Stream st;
  std::uint64_t seed = 500;
  for (std::uint32_t be : {kDefaultBucketElems, 1024u}) {
    CudaDeltaEncoder enc(be);
    CudaDeltaApplier app(be);
    for (double density : {0.0, 0.001, 0.01, 0.3, 1.0})
      for (std::uint64_t numel : {std::uint64_t{3} * be + 777, std::uint64_t{2} * be, std::uint64_t{300}})
        for (bool special : {false, true})
          for (std::size_t offset : {std::size_t{0}, std::size_t{2}}) {  // 2: a misaligned source
            if (offset != 0 && density != 0.01) continue;
            CAPTURE(be, density, numel, special, offset);
            Pair p = make_pair(numel, 2, density, seed++, special);
            if (special)  // sign flips and a jump of 2^12 steps: the low byte stays
              for (std::uint64_t i = 5; i < numel; i += 131) p.src[2 * i + 1] ^= std::byte(i % 2 ? 0x80 : 0x10);
            // the host: the receivers' version seeded, then this round's changes
            Bytes want_ref(low_byte_ref_bytes(numel));
            low_byte_seed_host(want_ref.data(), p.ref.data(), numel);
            const Bytes seeded = want_ref;
            std::vector<std::uint64_t> bits;
            std::uint64_t failed = 0;
            const auto counts =
                low_byte_changes_host(p.src.data(), want_ref.data(), numel, be, bits, &failed);
            Bytes want(blob_bytes_for(counts, numel, 2, be));
            encode_delta_host_if(p.src.data(), numel, 2, be, counts, want.data(), want.size(),
                                 [&](std::uint64_t e) { return (bits[e / 64] >> (e % 64)) & 1u; });
            if (special && numel >= 131) CHECK(failed > 0);
            // the GPU: seeded from the receivers' version, then measured against the source
            const Dev full(p.ref), src(p.src, offset);
            Dev lo(Bytes(seeded.size(), std::byte{0}));
            low_byte_seed(lo.data(), full.data(), numel, st.s);
            weightsync::detail::check(cudaStreamSynchronize(st.s), "cudaStreamSynchronize");
            REQUIRE(lo.get() == seeded);
            const DeltaJob job{src.data(), lo.data(), numel, 2, true};
            const auto sizes = enc.measure(std::span<const DeltaJob>(&job, 1), st.s, true);
            REQUIRE(sizes.size() == 1);
            CHECK(enc.failed_blocks() == failed);
            CHECK(enc.changed_elements() == popcount_total(counts));
            REQUIRE(sizes[0] == want.size());
            Dev out(Bytes(sizes[0], std::byte{0xee}));
            void* outs[] = {out.data()};
            enc.encode(outs, st.s);
            weightsync::detail::check(cudaStreamSynchronize(st.s), "cudaStreamSynchronize");
            CHECK(out.get() == want);
            CHECK(lo.get() == want_ref);  // the reference is now the source's
            // applied onto the receivers' full version, the blob gives the source exactly
            CHECK(gpu_apply(app, want, p.ref, numel, 2, st.s) == p.src);
          }
  }
  // argument errors name the field
  CudaDeltaEncoder odd(992);  // not a multiple of 256
  const Dev a(Bytes(64)), b(Bytes(64));
  const DeltaJob j{a.data(), b.data(), 16, 2, true};
  try {
    (void)odd.measure(std::span<const DeltaJob>(&j, 1), st.s, true);
    FAIL("measured");
  } catch (const weightsync::config_error& e) {
    CHECK(e.field() == "bucket_elems");
  }
  const DeltaJob j4{a.data(), b.data(), 16, 4, true};
  CudaDeltaEncoder enc;
  try {
    (void)enc.measure(std::span<const DeltaJob>(&j4, 1), st.s, true);
    FAIL("measured");
  } catch (const weightsync::config_error& e) {
    CHECK(e.field() == "jobs[0].low_byte");
  }
}

TEST_CASE("delta kernels: empty and one-element tensors", "[gpu][delta]") {
  Stream st;
  CudaDeltaEncoder enc;
  CudaDeltaApplier app;
  for (unsigned eb : {1u, 2u, 4u, 8u})
    for (std::uint64_t numel : {std::uint64_t{0}, std::uint64_t{1}})
      for (double density : {0.0, 1.0}) {
        CAPTURE(eb, numel, density);
        const Pair p = make_pair(numel, eb, density, 7 + eb, false);
        const Bytes want = encode_delta_host(p.src.data(), p.ref.data(), numel, eb);
        const Dev src(p.src), ref(p.ref);
        const Bytes got = gpu_encode(enc, src, ref, numel, eb, st.s);
        CHECK(got == want);
        CHECK(gpu_apply(app, got, p.ref, numel, eb, st.s) == p.src);
      }
}

namespace {

// A bf16 tensor of 5 buckets of 16384 (the last partial) whose blob has every kind: sparse,
// bitmask, unchanged, raw, sparse.
Pair mixed_pair() {
  const std::uint64_t be = kDefaultBucketElems, numel = 4 * be + 1000;
  Pair p = make_pair(numel, 2, 0.0, 99, false);
  std::mt19937_64 rng(5);
  const double dens[] = {0.01, 0.2, 0.0, 1.0, 0.01};
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (std::uint64_t i = 0; i < numel; ++i)
    if (u(rng) < dens[i / be] || dens[i / be] == 1.0) p.src[2 * i] ^= std::byte{0x11};
  return p;
}

BucketEntry entry(const Bytes& blob, std::uint64_t b) {
  BucketEntry e;
  std::memcpy(&e, blob.data() + sizeof(BlobHeader) + b * sizeof(BucketEntry), sizeof e);
  return e;
}
void set_entry(Bytes& blob, std::uint64_t b, const BucketEntry& e) {
  std::memcpy(blob.data() + sizeof(BlobHeader) + b * sizeof(BucketEntry), &e, sizeof e);
}

// The message apply_delta_host gives for `blob`, or "" when it accepts it.
std::string host_error(const Bytes& blob, std::uint64_t numel, unsigned eb, const Bytes& base) {
  Bytes dst = base;
  try {
    apply_delta_host(blob.data(), blob.size(), dst.data(), numel, eb, "t");
  } catch (const protocol_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("delta kernels: corrupted blobs throw protocol_error and write nothing", "[gpu][delta]") {
  Stream st;
  const Pair p = mixed_pair();
  const std::uint64_t numel = p.src.size() / 2;
  const Bytes good = encode_delta_host(p.src.data(), p.ref.data(), numel, 2);
  REQUIRE(entry(good, 0).kind == static_cast<std::uint8_t>(BucketKind::sparse));
  REQUIRE(entry(good, 1).kind == static_cast<std::uint8_t>(BucketKind::bitmask));
  REQUIRE(entry(good, 2).kind == static_cast<std::uint8_t>(BucketKind::unchanged));
  REQUIRE(entry(good, 3).kind == static_cast<std::uint8_t>(BucketKind::raw));
  REQUIRE(entry(good, 4).kind == static_cast<std::uint8_t>(BucketKind::sparse));
  {
    CudaDeltaEncoder enc;
    const Dev src(p.src), ref(p.ref);
    CHECK(gpu_encode(enc, src, ref, numel, 2, st.s) == good);
  }
  struct Corruption {
    const char* what;
    Bytes blob;
    std::uint64_t numel;
  };
  std::vector<Corruption> cs;
  const auto add = [&](const char* what, auto&& f, std::uint64_t n) {
    Bytes b = good;
    f(b);
    cs.push_back({what, std::move(b), n});
  };
  add(
      "bad magic", [](Bytes& b) { b[0] ^= std::byte{1}; }, numel);
  add(
      "wrong numel (the tensor's)", [](Bytes&) {}, numel + 1);
  add(
      "wrong numel (the header's)", [](Bytes& b) { b[16] ^= std::byte{4}; }, numel);
  add(
      "short", [](Bytes& b) { b.resize(20); }, numel);
  add(
      "truncated", [](Bytes& b) { b.resize(b.size() - 8); }, numel);
  add(
      "trailing bytes",
      [](Bytes& b) {
        b.resize(b.size() + 8);
        BlobHeader h;
        std::memcpy(&h, b.data(), sizeof h);
        h.blob_bytes += 8;
        std::memcpy(b.data(), &h, sizeof h);
      },
      numel);
  add(
      "offset past the end",
      [](Bytes& b) {
        BucketEntry e = entry(b, 4);
        e.offset = b.size() + 8;
        set_entry(b, 4, e);
      },
      numel);
  add(
      "bad kind",
      [](Bytes& b) {
        BucketEntry e = entry(b, 3);
        e.kind = 7;
        set_entry(b, 3, e);
      },
      numel);
  add(
      "count past len",
      [](Bytes& b) {
        BucketEntry e = entry(b, 1);
        e.count = 70000;
        set_entry(b, 1, e);
      },
      numel);
  add(
      "unchanged with a payload",
      [](Bytes& b) {
        BucketEntry e = entry(b, 2);
        e.count = 1;
        set_entry(b, 2, e);
      },
      numel);
  add(
      "bitmask popcount wrong",
      [](Bytes& b) {
        const BucketEntry e = entry(b, 1);
        b[e.offset + 5] ^= std::byte{0x40};
      },
      numel);
  add(
      "sparse offsets out of order",
      [](Bytes& b) {
        const BucketEntry e = entry(b, 4);
        std::uint16_t o[2];
        std::memcpy(o, b.data() + e.offset + 2 * 3, 4);
        std::swap(o[0], o[1]);
        std::memcpy(b.data() + e.offset + 2 * 3, o, 4);
      },
      numel);
  add(
      "sparse offset past len",
      [](Bytes& b) {
        const BucketEntry e = entry(b, 4);
        const std::uint16_t o = 1000;  // the last bucket has 1000 elements
        std::memcpy(b.data() + e.offset + 2 * (e.count - 1), &o, 2);
      },
      numel);
  add(
      "two errors: the first wins",
      [](Bytes& b) {
        const BucketEntry e = entry(b, 4);
        b[e.offset] ^= std::byte{0xff};
        const BucketEntry e1 = entry(b, 1);
        b[e1.offset + 9] ^= std::byte{0x01};
      },
      numel);

  CudaDeltaApplier app;
  for (const Corruption& c : cs) {
    CAPTURE(c.what);
    const std::string want = host_error(c.blob, c.numel, 2, p.ref);
    REQUIRE(!want.empty());
    // the bad blob between two good ones (of the same tensor's other copies): only it is skipped
    const Dev bad(c.blob), g(good), d0(p.ref), d1(p.ref), d2(p.ref);
    std::vector<DeltaApplyBlob> batch = {{g.data(), good.size(), d0.data(), numel, 2, "good0"},
                                         {bad.data(), c.blob.size(), d1.data(), c.numel, 2, "t"},
                                         {g.data(), good.size(), d2.data(), numel, 2, "good2"}};
    app.apply(batch, st.s);
    std::string got;
    try {
      app.finish(st.s);
    } catch (const protocol_error& e) {
      got = e.what();
    }
    CHECK(got == want);
    CHECK(app.pending() == 0);
    CHECK(d0.get() == p.src);
    CHECK(d1.get() == p.ref);  // nothing written
    CHECK(d2.get() == p.src);
  }
  // after the errors, the applier still works
  CHECK(gpu_apply(app, good, p.ref, numel, 2, st.s) == p.src);
}

TEST_CASE("delta kernels: a batch of many tensors in one measure / encode / apply",
          "[gpu][delta]") {
  Stream st;
  std::mt19937_64 rng(42);
  struct T {
    Pair p;
    std::uint64_t numel;
    unsigned eb;
    Bytes want;
  };
  std::vector<T> ts;
  const unsigned ebs[] = {1, 2, 4, 8};
  const double dens[] = {0.0, 0.001, 0.01, 0.1, 0.5, 1.0};
  for (int i = 0; i < 60; ++i) {
    const unsigned eb = ebs[rng() % 4];
    const std::uint64_t numel = i % 7 == 0 ? rng() % 3 : rng() % 70000;
    const double d = dens[rng() % 6];
    T t{make_pair(numel, eb, d, 1000 + static_cast<std::uint64_t>(i), i % 5 == 0), numel, eb, {}};
    t.want = encode_delta_host(t.p.src.data(), t.p.ref.data(), numel, eb);
    ts.push_back(std::move(t));
  }
  std::vector<Dev> srcs, refs;
  std::vector<DeltaJob> jobs;
  std::uint64_t want_changed = 0;
  for (const T& t : ts) {
    srcs.emplace_back(t.p.src);
    refs.emplace_back(t.p.ref);
    jobs.push_back({srcs.back().data(), refs.back().data(), t.numel, t.eb});
    want_changed += popcount_total(
        bucket_changes_host(t.p.src.data(), t.p.ref.data(), t.numel, t.eb, kDefaultBucketElems));
  }
  CudaDeltaEncoder enc;
  CudaDeltaApplier app;
  for (int round = 0; round < 2; ++round) {  // the scratch is reused
    CAPTURE(round);
    const auto sizes = enc.measure(jobs, st.s);
    REQUIRE(sizes.size() == ts.size());
    CHECK(enc.changed_elements() == want_changed);
    // all blobs in one buffer, each 8-byte aligned
    std::vector<std::size_t> at;
    std::size_t total = 0;
    for (auto s : sizes) {
      at.push_back(total);
      total += (s + 7) / 8 * 8;
    }
    const Dev out(Bytes(total, std::byte{0xee}));
    std::vector<void*> outs;
    for (std::size_t i = 0; i < ts.size(); ++i) outs.push_back(out.data() + at[i]);
    enc.encode(outs, st.s);
    weightsync::detail::check(cudaStreamSynchronize(st.s), "cudaStreamSynchronize");
    const Bytes all = out.get();
    std::vector<Dev> dsts;
    std::vector<DeltaApplyBlob> blobs;
    for (std::size_t i = 0; i < ts.size(); ++i) {
      CAPTURE(i, ts[i].numel, ts[i].eb);
      REQUIRE(sizes[i] == ts[i].want.size());
      CHECK(std::memcmp(all.data() + at[i], ts[i].want.data(), sizes[i]) == 0);
      dsts.emplace_back(ts[i].p.ref);
    }
    for (std::size_t i = 0; i < ts.size(); ++i)
      blobs.push_back({out.data() + at[i], sizes[i], dsts[i].data(), ts[i].numel, ts[i].eb,
                       "t" + std::to_string(i)});
    // two calls before one finish
    const std::size_t half = blobs.size() / 2;
    app.apply(std::span<const DeltaApplyBlob>(blobs.data(), half), st.s);
    app.apply(std::span<const DeltaApplyBlob>(blobs.data() + half, blobs.size() - half), st.s);
    CHECK(app.pending() == blobs.size());
    app.finish(st.s);
    for (std::size_t i = 0; i < ts.size(); ++i) {
      CAPTURE(i);
      CHECK(dsts[i].get() == ts[i].p.src);
    }
  }
}

TEST_CASE("delta kernels: argument errors name the field", "[gpu][delta]") {
  Stream st;
  REQUIRE_THROWS_AS(CudaDeltaEncoder(100), config_error);
  CudaDeltaEncoder enc;
  const DeltaJob bad_eb{nullptr, nullptr, 0, 3};
  REQUIRE_THROWS_AS(enc.measure(std::span<const DeltaJob>(&bad_eb, 1), st.s), config_error);
  const DeltaJob null_src{nullptr, nullptr, 10, 2};
  REQUIRE_THROWS_AS(enc.measure(std::span<const DeltaJob>(&null_src, 1), st.s), config_error);
  std::vector<void*> none;
  REQUIRE_THROWS_AS(enc.encode(none, st.s), config_error);  // no measure yet
  CudaDeltaApplier app;
  const Bytes blob(64);
  const Dev b(blob, 4);  // misaligned
  REQUIRE_THROWS_AS(app.apply(b.data(), 32, b.data(), 0, 2, "x", st.s), config_error);
  CHECK(app.pending() == 0);
}

TEST_CASE("delta kernels: a blob applied through a load plan's gather (TP shard, rotary permute, "
          "cast) writes what the host does",
          "[gpu][delta][loading]") {
  Stream st;
  CudaDeltaApplier app(256);
  const std::int64_t R = 64, C = 96;
  const std::uint64_t numel = static_cast<std::uint64_t>(R * C);
  for (double density : {0.01, 0.3, 1.0}) {
    // bf16 values that cast exactly and stay finite; changes flip a mantissa bit
    std::mt19937_64 rng(static_cast<std::uint64_t>(density * 1000) + 1);
    Bytes ref(numel * 2), src;
    for (std::uint64_t i = 0; i < numel; ++i) {
      const auto v = static_cast<std::uint16_t>((rng() & 0x8000u) | (0x3c00u + rng() % 0x600u));
      std::memcpy(ref.data() + 2 * i, &v, 2);
    }
    src = ref;
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (std::uint64_t i = 0; i < numel; ++i)
      if (density >= 1.0 || u(rng) < density) src[2 * i] ^= std::byte{0x04};
    const Bytes blob = encode_delta_host(src.data(), ref.data(), numel, 2, 256);
    struct Case {
      const char* what;
      DType dst_dtype;
      std::int64_t rows, cols, row0, col0, head_rows;
    };
    for (const Case& c : {Case{"row shard, permuted", DType::bfloat16, 32, C, 32, 0, 16},
                          Case{"column shard, cast to float32", DType::float32, R, 48, 0, 48, 0},
                          Case{"row shard, cast to float16", DType::float16, 16, C, 8, 0, 0}}) {
      CAPTURE(density, c.what);
      const std::size_t ds = dtype_size(c.dst_dtype);
      Bytes param(static_cast<std::size_t>(c.rows * c.cols) * ds);
      for (auto& b : param) b = static_cast<std::byte>(rng());
      GatherOp op;
      op.src_dtype = DType::bfloat16;
      op.dst_dtype = c.dst_dtype;
      op.src_cols = C;
      op.rows = c.rows;
      op.cols = c.cols;
      op.row0 = c.row0;
      op.col0 = c.col0;
      op.head_rows = c.head_rows;
      Bytes want = param;
      op.dst = want.data();
      const TensorMeta t{"w", DType::bfloat16, {R, C}};
      apply_delta_gather_host(blob.data(), blob.size(), op, t);
      const Dev b(blob), d(param);
      op.dst = d.data();
      const DeltaApplyBlob job{b.data(), blob.size(), nullptr, numel, 2, "w", &op};
      app.apply(std::span<const DeltaApplyBlob>(&job, 1), st.s);
      app.finish(st.s);
      CHECK(d.get() == want);
      CHECK(want != param);
    }
  }
}

TEST_CASE("sparse pairs on the GPU: applied as the host does, a bad index refused with the host's "
          "message and nothing written",
          "[gpu][delta]") {
  Stream st;
  CudaSparseApplier app;
  const std::uint64_t numel = 10000;
  std::mt19937_64 rng(9);
  Bytes base(numel * 2);
  for (auto& b : base) b = static_cast<std::byte>(rng());
  const TensorMeta t{"w", DType::bfloat16, {static_cast<std::int64_t>(numel)}};
  auto run = [&](const std::vector<std::int32_t>& idx) {
    Bytes values(idx.size() * 2);
    for (auto& b : values) b = static_cast<std::byte>(rng());
    Bytes want = base;
    std::string host_err, gpu_err;
    try {
      weightsync::detail::apply_sparse_host(t, want.data(), idx.data(), values.data(), idx.size());
    } catch (const protocol_error& e) {
      host_err = e.what();
    }
    Bytes ib(idx.size() * 4);
    if (!idx.empty()) std::memcpy(ib.data(), idx.data(), ib.size());
    const Dev di(ib), dv(values), dd(base);
    try {
      app.indices(di.data(), idx.size(), st.s);
      app.apply(dv.data(), idx.size(), dd.data(), numel, 2, "w", st.s);
    } catch (const protocol_error& e) {
      gpu_err = e.what();
    }
    CHECK(gpu_err == host_err);
    CHECK(dd.get() == (host_err.empty() ? want : base));
  };
  std::vector<std::int32_t> asc;
  for (std::int32_t i = 3; i < 10000; i += 7) asc.push_back(i);
  run(asc);                                     // strictly ascending: in parallel
  run({5, 900, 5, 17, 900, 3});                 // repeats: in order, the last one wins
  run({1, 2, 10000});                           // past the end: refused
  run({4, -1, 8});                              // negative: refused
  run({});                                      // nothing
}
