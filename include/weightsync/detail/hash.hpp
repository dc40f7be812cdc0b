// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Hash64: the one digest of the wire (metadata, shard specs, IPC plans). Not cryptographic: it
//! tells honest peers that disagree apart. It reads 8 bytes per step, so that digesting the
//! metadata of a model of 20 000 tensors costs microseconds on every sync, not tens of them as a
//! byte-at-a-time hash did.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace weightsync::detail {

class Hash64 {
 public:
  //! Mixes `n` bytes at `p`.
  Hash64& bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    while (n >= 8) {
      std::uint64_t w;
      std::memcpy(&w, b, 8);
      word(w);
      b += 8;
      n -= 8;
    }
    std::uint64_t tail = 0;
    if (n > 0) std::memcpy(&tail, b, n);  // (an empty string_view may hold nullptr)
    word(tail ^ (std::uint64_t{n} << 56));
    return *this;
  }
  //! Mixes one 64-bit value.
  Hash64& u64(std::uint64_t v) {
    word(v);
    return *this;
  }
  //! Mixes a length-prefixed string (so that "ab","c" and "a","bc" differ).
  Hash64& str(std::string_view s) {
    u64(s.size());
    return bytes(s.data(), s.size());
  }
  //! The digest (murmur3's finalizer over the state).
  std::uint64_t value() const {
    std::uint64_t h = h_;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
  }

 private:
  void word(std::uint64_t w) {
    h_ = (h_ ^ w) * 0x9e3779b97f4a7c15ull;
    h_ ^= h_ >> 29;
  }
  std::uint64_t h_ = 0x243f6a8885a308d3ull;
};

}  // namespace weightsync::detail
