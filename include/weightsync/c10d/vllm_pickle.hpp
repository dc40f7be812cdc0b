// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The bytes vLLM's PyNcclCommunicator stores for the NCCL unique id in TCP mode:
//! `StatelessProcessGroup.broadcast_obj(unique_id, src=0)` sets `pickle.dumps(unique_id)`, where
//! `unique_id` is the ctypes structure
//! `vllm.distributed.device_communicators.pynccl_wrapper.ncclUniqueId` (one field,
//! `internal: c_byte * 128`). A ctypes instance pickles through `_ctypes._unpickle(type,
//! (instance __dict__, raw bytes))`, so CPython's pickler (protocol 4, the default of Python
//! 3.8..3.13; Python 3.14 defaults to protocol 5 and differs only in the PROTO byte) writes 247
//! bytes:
//!
//! | offset | bytes                                  | opcode                                  |
//! |--------|----------------------------------------|-----------------------------------------|
//! | 0      | 80 04                                  | PROTO 4 (05 on Python 3.14)             |
//! | 2      | 95 ec 00 00 00 00 00 00 00             | FRAME 236                               |
//! | 11     | 8c 07 "_ctypes" 94                     | SHORT_BINUNICODE, MEMOIZE               |
//! | 21     | 8c 09 "_unpickle" 94                   | SHORT_BINUNICODE, MEMOIZE               |
//! | 33     | 93 94                                  | STACK_GLOBAL, MEMOIZE                   |
//! | 35     | 8c 34 "vllm.distributed.device_communicators.pynccl_wrapper" 94 | module     |
//! | 90     | 8c 0c "ncclUniqueId" 94                | class name                              |
//! | 105    | 93 94                                  | STACK_GLOBAL, MEMOIZE                   |
//! | 107    | 7d 94                                  | EMPTY_DICT (the instance __dict__)      |
//! | 109    | 43 80 <128 id bytes> 94                | SHORT_BINBYTES 128, MEMOIZE             |
//! | 240    | 86 94 86 94 52 94 2e                   | TUPLE2, TUPLE2, REDUCE, STOP            |
//!
//! (Recorded from CPython 3.11's pickle.dumps of that structure, 128 bytes of id at offset 111.)
//!
//! Why producing it is safe: the template is constant except for the 128 id bytes, which sit in a
//! length-prefixed SHORT_BINBYTES field of fixed length, so no id value can change the opcode
//! stream. Unpickling it in a vLLM process imports a module vLLM itself has already imported and
//! calls `_ctypes._unpickle`, which builds the same structure vLLM built on rank 0.
//!
//! Why parsing is safe: nothing here executes pickle. A received value is compared byte for byte
//! with the template (either PROTO byte); anything else is refused with the first offset that
//! differs and what was expected there.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"

namespace weightsync {

inline constexpr std::size_t kVllmUniqueIdPickleBytes = 247;

namespace detail {
inline constexpr std::size_t kPickleIdOffset = 111;

inline std::string vllm_pickle_template(std::uint8_t protocol) {
  std::string t;
  auto b = [&](std::initializer_list<int> v) {
    for (int x : v) t.push_back(static_cast<char>(x));
  };
  auto s = [&](std::string_view v) { t.append(v); };
  b({0x80, protocol, 0x95, 0xec, 0, 0, 0, 0, 0, 0, 0});
  b({0x8c, 0x07});
  s("_ctypes");
  b({0x94, 0x8c, 0x09});
  s("_unpickle");
  b({0x94, 0x93, 0x94, 0x8c, 0x34});
  s("vllm.distributed.device_communicators.pynccl_wrapper");
  b({0x94, 0x8c, 0x0c});
  s("ncclUniqueId");
  b({0x94, 0x93, 0x94, 0x7d, 0x94, 0x43, 0x80});
  t.append(128, '\0');
  b({0x94, 0x86, 0x94, 0x86, 0x94, 0x52, 0x94, 0x2e});
  return t;
}

inline const char* pickle_region(std::size_t off) {
  if (off < 2) return "the pickle protocol header";
  if (off < 11) return "the FRAME header";
  if (off < 35) return "the reference to _ctypes._unpickle";
  if (off < 90) return "the module name (vllm.distributed.device_communicators.pynccl_wrapper)";
  if (off < 107) return "the class name (ncclUniqueId)";
  if (off < 111) return "the instance dict / bytes header (c_byte * 128)";
  return "the closing opcodes (TUPLE2 TUPLE2 REDUCE STOP)";
}
}  // namespace detail

//! The pickle vLLM's rank 0 stores for `id` (protocol 4: every Python vLLM supports loads it).
inline std::string vllm_pickle_unique_id(const std::array<std::byte, 128>& id) {
  std::string t = detail::vllm_pickle_template(4);
  std::memcpy(t.data() + detail::kPickleIdOffset, id.data(), id.size());
  return t;
}

//! The ncclUniqueId inside a value vLLM's rank 0 stored. Accepts exactly the template above with
//! PROTO 4 or 5. @throws protocol_error naming the size, or the first differing offset, its
//! region, and the expected and received bytes.
inline std::array<std::byte, 128> vllm_unpickle_unique_id(std::string_view p) {
  if (p.size() != kVllmUniqueIdPickleBytes)
    throw protocol_error(0, detail::cat("vLLM unique-id pickle: ", p.size(), " bytes, expected ",
                                        kVllmUniqueIdPickleBytes,
                                        " (a pickled pynccl_wrapper.ncclUniqueId)"));
  const std::uint8_t proto = static_cast<std::uint8_t>(p.size() > 1 ? p[1] : 0);
  const std::string t = detail::vllm_pickle_template(proto == 5 ? 5 : 4);
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (i >= detail::kPickleIdOffset && i < detail::kPickleIdOffset + 128) continue;
    if (p[i] != t[i])
      throw protocol_error(0, detail::cat("vLLM unique-id pickle differs at offset ", i, " (",
                                          detail::pickle_region(i), "): expected 0x", std::hex,
                                          int(std::uint8_t(t[i])), ", got 0x",
                                          int(std::uint8_t(p[i]))));
  }
  std::array<std::byte, 128> id{};
  std::memcpy(id.data(), p.data() + detail::kPickleIdOffset, id.size());
  return id;
}

}  // namespace weightsync
