// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The rendezvous messages (host code, fuzzable): a peer's hello and rank 0's welcome, encoded
//! little-endian behind the 12-byte control header; decoders bound every length.

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/detail/wire.hpp"
#include "weightsync/error.hpp"

namespace weightsync::detail {

inline std::uint64_t random_u64() {
  std::random_device rd;
  return (std::uint64_t(rd()) << 32) ^ rd();
}

//! A peer's hello (after the header): its rank, the world size, the shared token and its blob.
inline std::string hello_payload(int rank, int world_size, std::string_view token,
                                 std::string_view blob) {
  Writer w;
  w.i32(rank);
  w.i32(world_size);
  w.str(token);
  w.str(blob);
  return w.bytes();
}

//! A peer's hello, as rank 0 reads it.
struct Hello {
  int rank = 0;
  int world_size = 0;
  std::string token;
  std::string blob;
};

//! Decodes a hello's payload (after the header). @throws protocol_error when it is truncated, has
//! trailing bytes, or a token/blob longer than the limits.
inline Hello parse_hello(std::string_view payload, std::size_t max_blob_bytes) {
  Reader r(payload, -1, "hello");
  Hello h;
  h.rank = r.i32();
  h.world_size = r.i32();
  h.token = r.str(4096);
  h.blob = r.str(max_blob_bytes);
  r.expect_done();
  return h;
}

//! What rank 0 answers every peer once all have joined.
struct Welcome {
  int world_size = 0;
  std::uint64_t session = 0;
  std::vector<std::string> blobs, addresses;
};

//! Decodes a welcome's payload for a rank of a `world_size` group. @throws protocol_error when it
//! is truncated, oversized, or for another world size.
inline Welcome parse_welcome(std::string_view payload, int world_size, std::size_t max_blob_bytes) {
  Reader r(payload, 0, "rendezvous answer");
  Welcome w;
  w.world_size = r.i32();
  if (w.world_size != world_size)
    throw protocol_error(
        0, cat("rank 0 has world_size ", w.world_size, ", this rank has ", world_size));
  w.session = r.u64();
  for (int i = 0; i < world_size; ++i) w.blobs.push_back(r.str(max_blob_bytes));
  for (int i = 0; i < world_size; ++i) w.addresses.push_back(r.str(256));
  r.expect_done();
  return w;
}

}  // namespace weightsync::detail
