// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// Prints the weight bridge's distributed layout for this SLURM job: the nodes of
// SLURM_JOB_NODELIST, which run the trainer and which the inference servers, the rendezvous
// addresses, and this process's node. On one machine, a fake list of loopback addresses stands
// in for a job:
//   SLURM_JOB_NODELIST='127.0.0.[1-4]' distributed_layout --inference-nodes 2 --hostname 127.0.0.3
#include <weightsync/bridge/layout.hpp>

#include <cstdio>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "../cli.hpp"

namespace {

void print_nodes(const char* label, const std::vector<std::string>& nodes) {
  std::printf("%-17s (%zu):", label, nodes.size());
  for (const auto& n : nodes) std::printf(" %s", n.c_str());
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) try {
  namespace ws = weightsync;
  if (cli::wants_help(argc, argv)) {
    std::printf(
        "usage: distributed_layout [--inference-nodes N] [--nccl-port P] [--metadata-port P]\n"
        "         [--inference-master-port P] [--master HOST] [--hostname NAME] [--hosts FILE]\n"
        "         [--nodelist-var VAR]\n"
        "Prints the weight bridge's layout over the host list in SLURM_JOB_NODELIST (or VAR):\n"
        "the trainer on the first nodes, the inference servers on the last N (default 1), the\n"
        "master on the first node (NCCL group port 26756, metadata group 26757), the inference\n"
        "master on the first inference node (26758), and this process's node: the one its host\n"
        "name (gethostname, or --hostname) names, else the one /etc/hosts (or --hosts) names.\n");
    return 0;
  }
  ws::BridgeLayoutOptions options;
  std::optional<std::string> hostname;
  std::string hosts = "/etc/hosts", var = "SLURM_JOB_NODELIST";
  for (int i = 1; i < argc; i += 2) {  // "--name value" pairs
    const std::string k = argv[i];
    if (i + 1 >= argc) throw ws::config_error(k, "needs a value (--help)");
    const std::string v = argv[i + 1];
    if (k == "--inference-nodes")
      options.num_inference_nodes = static_cast<int>(cli::parse_int(k, v, 0, 1 << 20));
    else if (k == "--nccl-port")
      options.ports.nccl_group = static_cast<int>(cli::parse_int(k, v, 1, 65535));
    else if (k == "--metadata-port")
      options.ports.metadata_group = static_cast<int>(cli::parse_int(k, v, 1, 65535));
    else if (k == "--inference-master-port")
      options.ports.inference_master = static_cast<int>(cli::parse_int(k, v, 1, 65535));
    else if (k == "--master")
      options.master_host = v;
    else if (k == "--hostname")
      hostname = v;
    else if (k == "--hosts")
      hosts = v;
    else if (k == "--nodelist-var")
      var = v;
    else
      throw ws::config_error(k, "unknown option (--help)");
  }
  const auto layout = ws::slurm_bridge_layout(options, var.c_str());
  print_nodes("nodes", layout.nodes);
  print_nodes("trainer nodes", layout.trainer_nodes);
  print_nodes("inference nodes", layout.inference_nodes);
  std::printf("master:           %s\n", layout.master_host.c_str());
  std::printf("NCCL group:       %s\n", layout.nccl_group_address().c_str());
  std::printf("metadata group:   %s\n", layout.metadata_group_address().c_str());
  std::printf("inference master: %s\n", layout.inference_master_address().c_str());
  try {
    const std::size_t self = ws::find_this_node(layout, hosts, hostname);
    if (const auto k = layout.inference_index(self))
      std::printf("this node:        %s (node %zu): inference server %zu\n",
                  layout.nodes[self].c_str(), self, *k);
    else
      std::printf("this node:        %s (node %zu): trainer%s\n", layout.nodes[self].c_str(), self,
                  layout.nodes[self] == layout.master_host ? " (the master's node)" : "");
  } catch (const ws::error& e) {
    // Not fatal: the layout holds either way; a launcher may place this process itself.
    std::printf("this node:        not found (%s)\n", e.what());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "distributed_layout: %s\n", e.what());
  return 2;
}
