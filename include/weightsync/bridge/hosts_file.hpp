// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! This machine's own host names, as the weight bridge finds them: from its host name and from a
//! hosts(5) file (/etc/hosts), whose entries for loopback addresses (127.0.0.0/8, ::1, and
//! ::ffff:127.0.0.0/104) name every machine and so are skipped, as are the unspecified (0.0.0.0,
//! ::) and multicast (224.0.0.0/4, ff00::/8: Debian's ip6-allnodes) ones. In a container the
//! hosts file maps the container's own address to its names; on a cluster whose hosts file lists
//! every node, the host name (gethostname) is what tells the nodes apart (see
//! find_this_node() in <weightsync/bridge/layout.hpp>).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "weightsync/detail/format.hpp"
#include "weightsync/error.hpp"

namespace weightsync {

//! One line of a hosts file: an address and the names given to it.
struct HostsEntry {
  std::string address;
  std::vector<std::string> names;
  friend bool operator==(const HostsEntry&, const HostsEntry&) = default;
};

//! Whether `address` (an IPv4 or IPv6 literal) is loopback (127.0.0.0/8, ::1, ::ffff:127.x.y.z).
//! false for anything that is not an address.
inline bool is_loopback_address(const std::string& address) {
  in_addr v4{};
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1)
    return (reinterpret_cast<const unsigned char*>(&v4)[0]) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, address.c_str(), &v6) != 1) return false;
  const unsigned char* b = v6.s6_addr;
  bool zero10 = true;
  for (int i = 0; i < 10; ++i) zero10 = zero10 && b[i] == 0;
  if (zero10 && b[10] == 0xff && b[11] == 0xff) return b[12] == 127;  // IPv4-mapped
  for (int i = 0; i < 15; ++i)
    if (b[i] != 0) return false;
  return b[15] == 1;
}

//! Whether `address` names this machine among others: a valid address that is neither loopback,
//! unspecified (0.0.0.0, ::) nor multicast (224.0.0.0/4, ff00::/8). Not an address: false.
inline bool is_own_host_address(const std::string& address) {
  in_addr v4{};
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1) {
    const auto* b = reinterpret_cast<const unsigned char*>(&v4);
    const bool unspecified = b[0] == 0 && b[1] == 0 && b[2] == 0 && b[3] == 0;
    return !unspecified && b[0] != 127 && (b[0] & 0xf0) != 0xe0;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, address.c_str(), &v6) != 1) return false;
  bool unspecified = true;
  for (unsigned char c : v6.s6_addr) unspecified = unspecified && c == 0;
  return !unspecified && !is_loopback_address(address) && v6.s6_addr[0] != 0xff;
}

//! The entries of a hosts(5) file, in order: `#` starts a comment, fields are separated by
//! spaces and tabs, the first is the address and the others its names; a line without names is
//! skipped, as the resolver skips it. Addresses are not checked here (see is_own_host_address).
//! @throws system_error naming the file when it cannot be read.
inline std::vector<HostsEntry> read_hosts_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    const int err = errno;
    throw system_error(detail::cat("cannot read the hosts file '", path, "': ", std::strerror(err)),
                       err);
  }
  std::vector<HostsEntry> out;
  std::string line;
  while (std::getline(in, line)) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::vector<std::string> fields;
    std::size_t i = 0;
    for (;;) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      if (i >= line.size()) break;
      const std::size_t begin = i;
      while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
      fields.emplace_back(line.substr(begin, i - begin));
    }
    if (fields.size() < 2) continue;
    HostsEntry e{std::move(fields[0]), {}};
    e.names.assign(std::make_move_iterator(fields.begin() + 1),
                   std::make_move_iterator(fields.end()));
    out.push_back(std::move(e));
  }
  if (in.bad()) {
    const int err = errno;
    throw system_error(detail::cat("cannot read the hosts file '", path, "'"), err);
  }
  return out;
}

//! This machine's names in a hosts file (default /etc/hosts): the names of every entry whose
//! address is_own_host_address() (loopback, unspecified and multicast entries skipped, as are
//! lines whose address does not parse), in file order, each once.
//! @throws system_error naming the file when it cannot be read.
inline std::vector<std::string> hosts_file_names(const std::string& path = "/etc/hosts") {
  std::vector<std::string> out;
  for (auto& e : read_hosts_file(path)) {
    if (!is_own_host_address(e.address)) continue;
    for (auto& n : e.names) {
      bool seen = false;
      for (const auto& o : out) seen = seen || o == n;
      if (!seen) out.push_back(std::move(n));
    }
  }
  return out;
}

//! This machine's host name (gethostname(2)).
//! @throws system_error when the system does not say it.
inline std::string this_host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) {
    const int err = errno;
    throw system_error("gethostname failed", err);
  }
  return std::string(buf);
}

}  // namespace weightsync
