// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Prints the chunk plan of a benchmark layout and the ring memory it needs on each side, for a
// given buffer size B and number of buffers K.
//   plan_layout [layout=dense8b] [B=1G] [K=2]
// B is a byte count with an optional binary suffix: 1M is 1 MiB (1048576 bytes), 64K is 65536.
#include <weightsync/chunk_plan.hpp>
#include <weightsync/layouts.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "cli.hpp"

int main(int argc, char** argv) try {
  namespace ws = weightsync;
  if (cli::wants_help(argc, argv)) {
    std::printf(
        "usage: plan_layout [layout=dense8b] [B=1G] [K=2]\n"
        "Prints the chunk plan of a layout (dense8b, moe30b, small1b, lora8b, or\n"
        "synthetic:<count>x<bytes>) for buffers of B bytes (K, M, G: KiB, MiB, GiB; 1M = 1048576)\n"
        "and the ring memory K buffers need on each side.\n");
    return 0;
  }
  if (argc > 4)
    throw ws::config_error(argv[4], "unexpected argument (usage: plan_layout [layout] [B] [K])");
  const std::string name = argc > 1 ? argv[1] : "dense8b";
  const std::size_t B = argc > 2 ? cli::parse_bytes("B", argv[2]) : std::size_t{1} << 30;
  if (B == 0) throw ws::config_error("B", "must be at least 1 byte");
  const int K = argc > 3 ? static_cast<int>(cli::parse_int("K", argv[3], 1, 64)) : 2;
  const auto metas = ws::layouts::by_name(name);
  const auto plan = ws::chunk_plan(metas, B);
  std::size_t largest_tensor = 0, producer_slot = 0, consumer_slot = 0, singles = 0;
  for (const auto& m : metas) largest_tensor = std::max(largest_tensor, m.nbytes());
  for (const auto& c : plan) {
    consumer_slot = std::max(consumer_slot, c.bytes);
    if (c.size() > 1)
      producer_slot = std::max(producer_slot, c.bytes);
    else
      ++singles;
  }
  std::printf("# layout %s: %zu tensors, %zu bytes; B = %zu, K = %d\n", name.c_str(), metas.size(),
              ws::layouts::total_bytes(metas), B, K);
  std::printf("# %zu chunks (%zu single-tensor, sent from the tensor itself); largest tensor %zu\n",
              plan.size(), singles, largest_tensor);
  std::printf("#  chunk   first  tensors          bytes\n");
  for (std::size_t i = 0; i < plan.size(); ++i)
    if (i < 8 || i + 4 >= plan.size())
      std::printf("  %6zu  %6zu  %7zu  %13zu\n", i, plan[i].begin, plan[i].size(), plan[i].bytes);
    else if (i == 8)
      std::printf("     ...\n");
  std::printf("# ring: producer %d x %zu = %zu bytes; consumer (views) %d x %zu = %zu bytes\n", K,
              producer_slot, K * producer_slot, K, consumer_slot, K * consumer_slot);
  std::printf("# bound: slot <= B + largest tensor = %zu\n", B + largest_tensor);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "plan_layout: %s\n", e.what());
  return 2;
}
