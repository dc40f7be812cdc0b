// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! Deterministic device data for GPU tests and benchmarks: fill a buffer with a pattern derived from
//! a seed, and count the bytes that differ from it. Kernels live in cuda_pattern.cu; this header
//! needs no nvcc.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ws_pattern {

//! Writes the pattern of `seed` into `n` bytes at `p` (any alignment), on `stream`.
void fill(void* p, std::size_t n, std::uint64_t seed, cudaStream_t stream);

//! Adds to `*wrong` (device memory) the number of bytes of `p` that differ from the pattern of
//! `seed`, on `stream`.
void count_wrong(const void* p, std::size_t n, std::uint64_t seed, unsigned long long* wrong,
                 cudaStream_t stream);

//! The pattern's byte at offset `i` (host side, for spot checks).
//! Adds to *wrong (device memory) the number of bytes where a[0, n) and b[0, n) differ.
void count_diff(const void* a, const void* b, std::size_t n, unsigned long long* wrong,
                cudaStream_t stream);
std::uint8_t expected_byte(std::uint64_t seed, std::size_t i);

//! A deterministic training step: changes about `fraction` of the `n` elements of `elem_bytes`
//! bytes at `p` (aligned to elem_bytes), at positions that look random (a hash of seed and index
//! decides each one); a changed element's bits are XORed with a nonzero value, so it differs.
//! @throws std::invalid_argument for elem_bytes not 1/2/4/8 or a misaligned p.
void perturb(void* p, std::size_t n, unsigned elem_bytes, double fraction, std::uint64_t seed,
             cudaStream_t stream);

//! Moves a `fraction` of the `n` 2-byte floats (bfloat16 / float16) at `p` by 1 to 4 steps of
//! their 15-bit magnitude, up or down (an optimizer step of a few ULPs; the sign kept), at
//! positions chosen by `seed`, on `stream`. @throws std::invalid_argument for a misaligned p.
void nudge(void* p, std::size_t n, double fraction, std::uint64_t seed, cudaStream_t stream);

//! Makes the `n` floats of `elem_bytes` bytes (2: bfloat16 / float16, 4: float32) at `p` finite
//! and weight-like in place, on `stream`: the top exponent bit is cleared, so |x| < 2 and no
//! element is inf or NaN (random bits hold one in 256 bf16 elements; an FP8 block holding one
//! takes the quantizer's exact slow path, which real weights never do).
//! @throws std::invalid_argument for elem_bytes not 2 or 4 or a misaligned p.
void finite(void* p, std::size_t n, unsigned elem_bytes, cudaStream_t stream);

//! XORs the byte at `p` with `bits`, on `stream` (a fault on the wire, for the checksum tests).
void flip(void* p, std::uint8_t bits, cudaStream_t stream);

}  // namespace ws_pattern
