// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Host141 probe (throwaway, kept as run): 504 memcpy of 64 B in a warm loop, p50/p10 of 2000.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#include <algorithm>
int main() {
  std::vector<char> a(32256), b(32256 + 504 * 64);
  std::vector<size_t> off(504); for (size_t i = 0; i < 504; ++i) off[i] = i * 64;
  std::vector<void*> dst(504); for (size_t i = 0; i < 504; ++i) dst[i] = b.data() + off[i];
  std::vector<double> t;
  for (int it = 0; it < 2000; ++it) {
    auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < 504; ++i) std::memcpy(dst[i], a.data() + i * 64, 64);
    asm volatile("" ::: "memory");
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end()); std::printf("504 x 64B memcpy: p50 %.2f us p10 %.2f\n", t[1000], t[200]);
}
