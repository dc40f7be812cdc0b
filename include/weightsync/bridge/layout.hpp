// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The weight bridge's distributed layout: which node of a SLURM job runs what, and on which
//! ports. Its conventions, each a default that BridgeLayoutOptions overrides:
//!   - the nodes are SLURM_JOB_NODELIST expanded as `scontrol show hostnames` does
//!     (<weightsync/bridge/hostlist.hpp>), in that order;
//!   - the inference servers run on the last N nodes (num_inference_nodes), the trainer on the
//!     others, so the trainer keeps at least the first node;
//!   - the master (rank 0 of the trainer <-> inference groups) is the first node;
//!     the NCCL group meets at master:26756, the metadata group at master:26757;
//!   - the inference servers' own master (their torch.distributed rendezvous) is the first
//!     inference node, port 26758.
//! A process finds its own node with find_this_node() (its host name, else /etc/hosts).

#include <cstddef>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weightsync/bridge/hostlist.hpp"
#include "weightsync/bridge/hosts_file.hpp"
#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"

namespace weightsync {

//! The bridge's ports (TCP, 1..65535, all three distinct).
struct BridgePorts {
  int nccl_group = 26756;        //!< the trainer <-> inference NCCL group, on the master
  int metadata_group = 26757;    //!< the metadata (torch.distributed gloo) group, on the master
  int inference_master = 26758;  //!< the inference servers' own rendezvous
  friend bool operator==(const BridgePorts&, const BridgePorts&) = default;
};

//! What a caller may change of the bridge's conventions.
struct BridgeLayoutOptions {
  //! How many nodes, the last ones, run inference servers (N >= 1, fewer than the nodes).
  int num_inference_nodes = 1;
  BridgePorts ports{};
  //! The master's host; "" = the first node.
  std::string master_host;
  //! The inference servers' master host; "" = the first inference node.
  std::string inference_master_host;
};

//! Where everything runs. Nodes are indexed in host-list order: the trainer's are
//! [0, trainer_nodes.size()), the inference servers' the rest.
struct BridgeLayout {
  std::vector<std::string> nodes;
  std::vector<std::string> trainer_nodes;    //!< the first nodes.size() - N
  std::vector<std::string> inference_nodes;  //!< the last N
  std::string master_host;
  std::string inference_master_host;
  BridgePorts ports;

  //! "host:port" of the NCCL group's rendezvous ("[addr]:port" for an IPv6 literal).
  std::string nccl_group_address() const { return address(master_host, ports.nccl_group); }
  //! "host:port" of the metadata group's rendezvous.
  std::string metadata_group_address() const { return address(master_host, ports.metadata_group); }
  //! "host:port" of the inference servers' own rendezvous.
  std::string inference_master_address() const {
    return address(inference_master_host, ports.inference_master);
  }
  //! Whether node `index` runs an inference server.
  bool is_inference_node(std::size_t index) const {
    return index >= trainer_nodes.size() && index < nodes.size();
  }
  //! The index of an inference node among the inference nodes (its server's rank in their group).
  std::optional<std::size_t> inference_index(std::size_t index) const {
    if (!is_inference_node(index)) return std::nullopt;
    return index - trainer_nodes.size();
  }

  static std::string address(const std::string& host, int port) {
    if (host.find(':') != std::string::npos) return detail::cat('[', host, "]:", port);
    return detail::cat(host, ':', port);
  }
};

namespace detail {

//! Up to 8 names, comma-separated, for error messages ("a, b, c, ... (12 in all)").
inline std::string node_names(const std::vector<std::string>& nodes) {
  if (nodes.empty()) return "none";
  std::string out;
  for (std::size_t i = 0; i < nodes.size() && i < 8; ++i) out += cat(i ? ", " : "", nodes[i]);
  if (nodes.size() > 8) out += cat(", ... (", nodes.size(), " in all)");
  return out;
}

inline void check_bridge_ports(const BridgePorts& p) {
  const std::pair<const char*, int> ports[] = {{"ports.nccl_group", p.nccl_group},
                                               {"ports.metadata_group", p.metadata_group},
                                               {"ports.inference_master", p.inference_master}};
  for (std::size_t i = 0; i < 3; ++i) {
    if (ports[i].second < 1 || ports[i].second > 65535)
      throw config_error(ports[i].first, cat("must be in 1..65535, got ", ports[i].second));
    for (std::size_t j = 0; j < i; ++j)
      if (ports[j].second == ports[i].second)
        throw config_error(ports[i].first, cat(ports[i].second, " is also ", ports[j].first,
                                               " (the bridge's ", "three ports must differ)"));
  }
}

inline void check_bridge_nodes(const std::vector<std::string>& nodes, std::string_view what) {
  if (nodes.empty())
    throw config_error(std::string(what),
                       "names no node: the bridge needs at least two (the "
                       "trainer's and an inference server's)");
  std::unordered_map<std::string_view, std::size_t> seen;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].empty()) throw config_error(std::string(what), cat("node ", i, " is empty"));
    const auto [it, fresh] = seen.emplace(nodes[i], i);
    if (!fresh)
      throw config_error(std::string(what), cat("names host '", nodes[i], "' twice (nodes ",
                                                it->second, " and ", i, ")"));
  }
}

//! Whether two host names name the same host: equal ignoring case, or, when one is a short name
//! (no '.') and the other a domain name (not an address), the short name is the domain name's
//! first label ("node01" and "node01.cluster").
inline bool same_host_name(std::string_view a, std::string_view b) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  auto equal = [&](std::string_view x, std::string_view y) {
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (lower(x[i]) != lower(y[i])) return false;
    return true;
  };
  if (equal(a, b)) return true;
  if (a.find('.') != std::string_view::npos) std::swap(a, b);  // a: the short one, if any
  if (a.empty() || a.find('.') != std::string_view::npos || b.find(':') != std::string_view::npos)
    return false;
  const std::size_t dot = b.find('.');
  if (dot == std::string_view::npos) return false;
  bool numeric = true;  // an IPv4 literal has no short name
  for (char c : b) numeric = numeric && ((c >= '0' && c <= '9') || c == '.');
  return !numeric && equal(a, b.substr(0, dot));
}

}  // namespace detail

//! The bridge's layout over `nodes` (in host-list order). `what` names the node list in errors.
//! @throws config_error naming the field: an empty list, an empty or repeated name, N < 1 or
//!   N >= the node count, a port outside 1..65535 or two ports alike.
inline BridgeLayout bridge_layout(std::vector<std::string> nodes,
                                  const BridgeLayoutOptions& options = {},
                                  std::string_view what = "nodes") {
  detail::check_bridge_nodes(nodes, what);
  const int n = options.num_inference_nodes;
  if (n < 1) throw config_error("num_inference_nodes", detail::cat("must be >= 1, got ", n));
  if (static_cast<std::size_t>(n) >= nodes.size())
    throw config_error(
        "num_inference_nodes",
        detail::cat(n, " inference node", n == 1 ? "" : "s", " leave", n == 1 ? "s" : "",
                    " no node for the trainer: ", what, " has ", nodes.size(), " (",
                    detail::node_names(nodes), "), at least ", n + 1, " needed"));
  detail::check_bridge_ports(options.ports);
  BridgeLayout l;
  const auto split = nodes.begin() + static_cast<std::ptrdiff_t>(nodes.size() - n);
  l.trainer_nodes.assign(nodes.begin(), split);
  l.inference_nodes.assign(split, nodes.end());
  l.master_host = options.master_host.empty() ? nodes.front() : options.master_host;
  l.inference_master_host = options.inference_master_host.empty() ? l.inference_nodes.front()
                                                                  : options.inference_master_host;
  l.ports = options.ports;
  l.nodes = std::move(nodes);
  return l;
}

//! The layout over a SLURM host list (expand_hostlist()); `what` names the list in errors.
inline BridgeLayout bridge_layout_from_hostlist(std::string_view hostlist,
                                                const BridgeLayoutOptions& options = {},
                                                std::string_view what = "host list") {
  return bridge_layout(expand_hostlist(hostlist, what), options, what);
}

//! The value of the environment variable `var` (default SLURM_JOB_NODELIST), which sbatch,
//! salloc and srun set to the job's nodes.
//! @throws config_error naming the variable when it is unset or holds no name.
inline std::string slurm_job_nodelist(const char* var = "SLURM_JOB_NODELIST") {
  const char* v = std::getenv(var);
  if (v == nullptr)
    throw config_error(var,
                       "is not set: this process is not in a SLURM job (sbatch, salloc and "
                       "srun set it); set it to the job's host list, e.g. 'node[01-04]'");
  std::string s(v);
  bool blank = true;
  for (char c : s) blank = blank && detail::hostlist_separator(c);
  if (blank) throw config_error(var, "is empty: it names no node");
  return s;
}

//! The layout over this SLURM job's nodes: the host list in `var` (default SLURM_JOB_NODELIST).
//! @throws config_error naming the variable or the option at fault.
inline BridgeLayout slurm_bridge_layout(const BridgeLayoutOptions& options = {},
                                        const char* var = "SLURM_JOB_NODELIST") {
  return bridge_layout_from_hostlist(slurm_job_nodelist(var), options, var);
}

//! This process's node in `layout`: the node that its host name names (`hostname`, default
//! gethostname(), equal ignoring case, or as a short name of a domain name), else the one node
//! that a name of the hosts file names (hosts_file_names(hosts_path): loopback entries skipped).
//! @throws config_error ("hosts") when no node matches, or several match through the hosts file
//!   (then pass the host name, or pick the node yourself); system_error when the hosts file
//!   cannot be read.
inline std::size_t find_this_node(const BridgeLayout& layout,
                                  const std::string& hosts_path = "/etc/hosts",
                                  std::optional<std::string> hostname = std::nullopt) {
  const std::string self = hostname ? *hostname : this_host_name();
  for (std::size_t i = 0; i < layout.nodes.size(); ++i)
    if (detail::same_host_name(layout.nodes[i], self)) return i;
  const auto names = hosts_file_names(hosts_path);
  std::vector<std::size_t> hits;
  for (std::size_t i = 0; i < layout.nodes.size(); ++i)
    for (const auto& n : names)
      if (detail::same_host_name(layout.nodes[i], n)) {
        hits.push_back(i);
        break;
      }
  if (hits.size() == 1) return hits.front();
  if (hits.empty())
    throw config_error(
        "hosts", detail::cat("this machine (host name '", self, "', names in ", hosts_path, ": ",
                             detail::node_names(names), ") is none of the nodes ",
                             detail::node_names(layout.nodes)));
  std::vector<std::string> hit_names;
  for (auto i : hits) hit_names.push_back(layout.nodes[i]);
  throw config_error("hosts", detail::cat("this machine (host name '", self,
                                          "') could be any of "
                                          "the nodes ",
                                          detail::node_names(hit_names), " (", hosts_path,
                                          " names them all); pass its host name"));
}

}  // namespace weightsync
