// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The chunk digest (detail/digest.hpp): the host reference against a second, lane-by-lane
// reading of its definition, its golden values, and what it must tell apart (a flipped bit
// anywhere, moved pieces, trailing zeros). The GPU kernel is checked against this reference in
// tests/gpu/digest_test.cpp.
#include <weightsync/detail/digest.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "support/catch.hpp"

namespace ws_test_digest_test {

using namespace weightsync;
using namespace weightsync::detail;
namespace wk = weightsync::kernels;

namespace {

std::vector<unsigned char> bytes(std::size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

// The definition read lane by lane, as a CTA's thread runs it (granules l, l + 256, ... of a
// block), with the zero padding spelled out.
std::uint64_t by_lanes(std::uint64_t ordinal, const unsigned char* p, std::size_t n) {
  if (n == 0) return 0;
  std::uint64_t sum = digest_length_term(ordinal, n);
  for (std::uint64_t b = 0; b * wk::kDigestBlockBytes < n; ++b) {
    const std::uint64_t start = b * wk::kDigestBlockBytes;
    for (unsigned l = 0; l < static_cast<unsigned>(wk::kDigestLanes); ++l) {
      std::uint64_t s = digest_lane_init(digest_key(ordinal, b), l);
      for (std::uint64_t i = 0; i < wk::kDigestGranulesPerLane; ++i) {
        const std::uint64_t off = start + (i * wk::kDigestLanes + l) * wk::kDigestGranuleBytes;
        if (off >= n || off >= start + wk::kDigestBlockBytes) break;
        std::uint64_t w[2] = {0, 0};
        for (std::uint64_t j = 0; j < 16 && off + j < n; ++j)
          w[j / 8] |= static_cast<std::uint64_t>(p[off + j]) << (8 * (j % 8));
        s = digest_round(digest_round(s, w[0]), w[1]);
      }
      sum += digest_fmix(s);
    }
  }
  return sum;
}

}  // namespace

TEST_CASE("digest: the host reference is the definition, lane by lane", "[unit][digest]") {
  // sizes around granules and blocks: empty, one byte, a short granule, whole and partial blocks
  const std::size_t block = wk::kDigestBlockBytes;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{16},
                        std::size_t{17}, std::size_t{4095}, std::size_t{4096}, block - 1, block,
                        block + 1, 3 * block + 1234}) {
    const auto v = bytes(n, static_cast<unsigned>(n));
    for (std::uint64_t ordinal : {0ull, 1ull, 977ull}) {
      CAPTURE(n, ordinal);
      ChunkDigest d;
      d.piece(ordinal, v.data(), n);
      CHECK(d.value() == by_lanes(ordinal, v.data(), n));
    }
  }
}

TEST_CASE("digest: golden values pin the definition", "[unit][digest]") {
  // If these change, the wire changed: bump kProtocolVersion (detail/wire.hpp).
  std::vector<unsigned char> v(3 * wk::kDigestBlockBytes + 100);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<unsigned char>(i * 7 + i / 251);
  const DigestSpan spans[] = {{v.data(), 5, 0}, {v.data() + 5, 0, 1}, {v.data() + 5, v.size() - 5, 2}};
  CHECK(chunk_digest(spans, 1) == 0xc1948cff7cdf6ebfull);
  CHECK(chunk_digest(spans, 3) == 0xe91f6c9bfb72ccacull);
}

TEST_CASE("digest: a flipped bit anywhere, a moved piece, trailing zeros all change it",
          "[unit][digest]") {
  const std::size_t n = 2 * wk::kDigestBlockBytes + 333;
  auto a = bytes(n, 7);
  auto b = bytes(1000, 8);
  const auto digest = [&] {
    const DigestSpan s[] = {{a.data(), a.size(), 0}, {b.data(), b.size(), 1}};
    return chunk_digest(s, 2);
  };
  const std::uint64_t d0 = digest();
  std::mt19937 rng(1);
  for (int t = 0; t < 300; ++t) {
    const std::size_t at = rng() % n;
    const auto bit = static_cast<unsigned char>(1u << (rng() % 8));
    a[at] ^= bit;
    CHECK(digest() != d0);
    a[at] ^= bit;
  }
  // every byte of the short tail granule and of the second piece
  for (std::size_t at = n - 13; at < n; ++at) {
    a[at] ^= 0x80;
    CHECK(digest() != d0);
    a[at] ^= 0x80;
  }
  for (std::size_t at = 0; at < b.size(); ++at) {
    b[at] ^= 1;
    CHECK(digest() != d0);
    b[at] ^= 1;
  }
  CHECK(digest() == d0);
  // the pieces in the other positions; the same pieces added in another order
  const DigestSpan swapped[] = {{a.data(), a.size(), 1}, {b.data(), b.size(), 0}};
  CHECK(chunk_digest(swapped, 2) != d0);
  const DigestSpan reordered[] = {{b.data(), b.size(), 1}, {a.data(), a.size(), 0}};
  CHECK(chunk_digest(reordered, 2) == d0);
  // a trailing zero is not nothing; two blocks swapped inside a piece differ
  std::vector<unsigned char> z(17, 0), z1(16, 0);
  const DigestSpan zs[] = {{z.data(), z.size(), 0}};
  const DigestSpan z1s[] = {{z1.data(), z1.size(), 0}};
  CHECK(chunk_digest(zs, 1) != chunk_digest(z1s, 1));
  std::vector<unsigned char> two(2 * wk::kDigestBlockBytes);
  for (std::size_t i = 0; i < wk::kDigestBlockBytes; ++i) two[i] = 1;
  const DigestSpan t1[] = {{two.data(), two.size(), 0}};
  const std::uint64_t before = chunk_digest(t1, 1);
  std::rotate(two.begin(), two.begin() + static_cast<std::ptrdiff_t>(wk::kDigestBlockBytes), two.end());
  CHECK(chunk_digest(t1, 1) != before);
  // several chunks at once: each piece into the sum it names
  const DigestSpan mixed[] = {{a.data(), a.size(), 0, 1}, {z.data(), z.size(), 0, 0},
                              {b.data(), b.size(), 1, 1}};
  std::uint64_t sums[3] = {9, 9, 9};
  digest_sums(mixed, 3, sums, 3);
  CHECK(sums[0] == chunk_digest(zs, 1));
  CHECK(sums[1] == d0);
  CHECK(sums[2] == 0);
}

}  // namespace ws_test_digest_test
