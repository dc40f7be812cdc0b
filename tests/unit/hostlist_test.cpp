// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The weight bridge's SLURM host lists (expanded as `scontrol show hostnames` does, against a
// table that includes SLURM's documented examples), its layout conventions and overrides, and
// this machine's names from a hosts file.
#include <weightsync/bridge/hostlist.hpp>
#include <weightsync/bridge/hosts_file.hpp>
#include <weightsync/bridge/layout.hpp>

#include <stdlib.h>

#include <cstddef>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/files.hpp"

// (a namespace per test source: the sources build as unity translation units)
namespace ws_test_hostlist_test {

using namespace weightsync;
using Names = std::vector<std::string>;

//! prefix + lo..hi zero-padded to width + suffix: the expected names of one range, written out
//! independently of the parser.
Names seq(const std::string& prefix, int lo, int hi, int width = 0,
          const std::string& suffix = "") {
  Names out;
  for (int v = lo; v <= hi; ++v) {
    std::string d = std::to_string(v);
    while (static_cast<int>(d.size()) < width) d.insert(d.begin(), '0');
    out.push_back(prefix + d + suffix);
  }
  return out;
}

Names join(std::initializer_list<Names> parts) {
  Names out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

//! rack0_blade0 .. rack0_blade41, rack1_blade0, ...: the first group slowest.
Names rack_blade() {
  Names out;
  for (int r = 0; r <= 63; ++r)
    for (int b = 0; b <= 41; ++b)
      out.push_back("rack" + std::to_string(r) + "_blade" + std::to_string(b));
  return out;
}

struct Case {
  const char* list;
  Names expected;
};

// Each expected list below was checked against `scontrol show hostnames` (slurm-client 22.05,
// Debian 12), except the name suffixes (a[1-2]-ib), which SLURM reads since 23.11.
const std::vector<Case>& cases() {
  static const std::vector<Case> table = {
      // SLURM's documentation: scontrol(1), slurm.conf(5), hostlist.h, srun and quickstart pages.
      {"tux[1-3]", {"tux1", "tux2", "tux3"}},
      {"linux[0-64,128]", join({seq("linux", 0, 64), {"linux128"}})},
      {"lx[15,18,32-33]", {"lx15", "lx18", "lx32", "lx33"}},
      {"rack[0-63]_blade[0-41]", rack_blade()},
      {"linux[0000-1023]", seq("linux", 0, 1023, 4)},
      {"lx[0-7]", seq("lx", 0, 7)},
      {"tux2,tux1,tux2", {"tux2", "tux1", "tux2"}},
      {"tux[0-5,12,20-25]", join({seq("tux", 0, 5), {"tux12"}, seq("tux", 20, 25)})},
      {"tux[0,0,0,0,1]", {"tux0", "tux0", "tux0", "tux0", "tux1"}},
      {"hydra[12-16]", seq("hydra", 12, 16)},
      {"linux[01-04]", seq("linux", 1, 4, 2)},
      {"n[12-16]", seq("n", 12, 16)},
      {"d[1-100]", seq("d", 1, 100)},
      {"nid[10-20]", seq("nid", 10, 20)},
      {"host[1-3],host5", {"host1", "host2", "host3", "host5"}},
      {"alpha,beta,gamma", {"alpha", "beta", "gamma"}},
      // Zero padding: the low bound's width.
      {"node[001-004,010]", {"node001", "node002", "node003", "node004", "node010"}},
      {"node[08-10]", {"node08", "node09", "node10"}},
      {"node[9-11]", {"node9", "node10", "node11"}},
      {"x[001-4]", seq("x", 1, 4, 3)},
      {"a[1-010]", seq("a", 1, 10)},
      {"a[01-100]", seq("a", 1, 100, 2)},
      {"a[3-3]", {"a3"}},
      {"a[5]", {"a5"}},
      {"a[007]", {"a007"}},
      // Several groups: a cartesian product in SLURM's order.
      {"rack[1-2]-node[01-02]", {"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"}},
      {"a[1-2][3-4]", {"a13", "a14", "a23", "a24"}},
      {"a[1-2]b[3-4]c[5-6]",
       {"a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6", "a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6"}},
      {"w[1-2]x[1-2]y[1-2]z[1-2]",
       {"w1x1y1z1", "w1x1y1z2", "w2x1y1z1", "w2x1y1z2", "w1x2y1z1", "w1x2y1z2", "w2x2y1z1",
        "w2x2y1z2", "w1x1y2z1", "w1x1y2z2", "w2x1y2z1", "w2x1y2z2", "w1x2y2z1", "w1x2y2z2",
        "w2x2y2z1", "w2x2y2z2"}},
      // Suffixes after the brackets (SLURM 23.11 on).
      {"a[1-2]-ib,b3", {"a1-ib", "a2-ib", "b3"}},
      {"gpu-[01-02].cluster", {"gpu-01.cluster", "gpu-02.cluster"}},
      {"a[1-2]-b[1-2]-c", {"a1-b1-c", "a1-b2-c", "a2-b1-c", "a2-b2-c"}},
      // Several prefixes, commas inside and outside brackets.
      {"a[1-2],b[3-4]c,d", {"a1", "a2", "b3c", "b4c", "d"}},
      {"gpu[1,3],cpu[2-3,5],io", {"gpu1", "gpu3", "cpu2", "cpu3", "cpu5", "io"}},
      {"127.0.0.[1-4]", {"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"}},
      {"[1-3]", {"1", "2", "3"}},
      {"a-1,b_2.x", {"a-1", "b_2.x"}},
      // White space and separators, as SLURM reads them: commas, spaces, tabs, new lines.
      {" a , b ", {"a", "b"}},
      {"a,,b", {"a", "b"}},
      {"\ta\nb c", {"a", "b", "c"}},
      {"node[1-2] node[5-6]", {"node1", "node2", "node5", "node6"}},
      {"", {}},
      {" ,\n\t, ", {}},
  };
  return table;
}

TEST_CASE("bridge: host lists expand as scontrol show hostnames does", "[unit][bridge]") {
  REQUIRE(cases().size() >= 30);
  for (const auto& c : cases()) {
    CAPTURE(c.list);
    CHECK(expand_hostlist(c.list) == c.expected);
  }
  CHECK(expand_hostlist("a[0-65535]").size() == 65536);  // SLURM's MAX_RANGE, allowed
  CHECK(expand_hostlist("rack[0-63]_blade[0-41]")[42] == "rack1_blade0");
}

struct Bad {
  const char* list;
  const char* fragment;  // what the message must say
};

TEST_CASE("bridge: a malformed host list names the character and its position", "[unit][bridge]") {
  const std::vector<Bad> bad = {
      {"node]1[", "unexpected ']' at position 5 in 'node]1[' (no '[' is open)"},
      {"a1]", "unexpected ']' at position 3"},
      {"a[1-2]]", "unexpected ']' at position 7"},
      {"a[1-3", "'[' never closed at position 2 in 'a[1-3'"},
      {"a[", "'[' never closed at position 2"},
      {"a[1-2],b[3", "'[' never closed at position 9"},
      {"a[3-1]", "descending range '3-1' at position 3"},
      {"a[5,10-09]", "descending range '10-09' at position 5"},
      {"a[]", "expected a number, found ']' at position 3"},
      {"a[1,]", "expected a number, found ']' at position 5"},
      {"a[,1]", "expected a number, found ',' at position 3"},
      {"a[1-]", "expected a number, found ']' at position 5"},
      {"a[-1]", "expected a number, found '-' at position 3"},
      {"a[1-2-3]", "unexpected '-' at position 6"},
      {"a[ 1-2]", "unexpected ' ' at position 3 in 'a[ 1-2]' (no white space inside brackets)"},
      {"a[1, 2]", "unexpected ' ' at position 5"},
      {"a[1[2]]", "unexpected '[' at position 4 in 'a[1[2]]' (brackets do not nest)"},
      {"a[+1]", "unexpected '+' at position 3"},
      {"a[b]", "unexpected 'b' at position 3"},
      {"bgl[000x133]", "unexpected 'x' at position 8 in 'bgl[000x133]' (multi-dimensional boxes"},
      {"feature{gpu}", "unexpected '{' at position 8"},
      {"a\rb", "unexpected byte 0x0d at position 2 in 'a\\x0db' (host lists are printable ASCII)"},
      {"n\xc3\xa9", "unexpected byte 0xc3 at position 2"},
      {"a[0-65536]",
       "range '0-65536' at position 3 in 'a[0-65536]' names 65537 hosts, more than 65536"},
      {"a[1234567890123456789]", "a number of more than 18 digits at position 3"},
      {"a[0-65535]b[0-65535]", "expands to more than 1048576 host names"},
  };
  for (const auto& b : bad) {
    CAPTURE(b.list);
    try {
      const auto names = expand_hostlist(b.list, "SLURM_JOB_NODELIST");
      FAIL("accepted, " << names.size() << " names");
    } catch (const config_error& e) {
      CHECK(e.field() == "SLURM_JOB_NODELIST");
      CHECK(std::string(e.what()).find(b.fragment) != std::string::npos);
      CHECK(std::string(e.what()).rfind("[weightsync.config] SLURM_JOB_NODELIST: ", 0) == 0);
    }
  }
  // The whole message; and a long list is quoted around the fault, not whole.
  try {
    (void)expand_hostlist("node]1[", "SLURM_JOB_NODELIST");
    FAIL("accepted");
  } catch (const config_error& e) {
    CHECK(std::string(e.what()) ==
          "[weightsync.config] SLURM_JOB_NODELIST: unexpected ']' at position 5 in 'node]1[' "
          "(no '[' is open)");
  }
  std::string long_list;
  for (int i = 0; i < 100; ++i) long_list += "n" + std::to_string(i) + ",";
  long_list += "bad]";
  try {
    (void)expand_hostlist(long_list);
    FAIL("accepted");
  } catch (const config_error& e) {
    const std::string m = e.what();
    CHECK(m.find(detail::cat("unexpected ']' at position ", long_list.size(), " in '...")) !=
          std::string::npos);
    CHECK(m.find("n0,n1,") == std::string::npos);
    CHECK(m.find("n99,bad]'") != std::string::npos);
    CHECK(m.size() < 250);
  }
}

TEST_CASE("bridge: the layout's conventions: master first, inference last, ports 26756-26758",
          "[unit][bridge]") {
  const auto l = bridge_layout_from_hostlist("node[01-04]");
  CHECK(l.nodes == seq("node", 1, 4, 2));
  CHECK(l.trainer_nodes == Names{"node01", "node02", "node03"});
  CHECK(l.inference_nodes == Names{"node04"});
  CHECK(l.master_host == "node01");
  CHECK(l.inference_master_host == "node04");
  CHECK(l.ports == BridgePorts{26756, 26757, 26758});
  CHECK(l.nccl_group_address() == "node01:26756");
  CHECK(l.metadata_group_address() == "node01:26757");
  CHECK(l.inference_master_address() == "node04:26758");
  CHECK_FALSE(l.is_inference_node(2));
  CHECK(l.is_inference_node(3));
  CHECK_FALSE(l.is_inference_node(4));
  CHECK(l.inference_index(3) == std::optional<std::size_t>(0));
  CHECK_FALSE(l.inference_index(0));

  BridgeLayoutOptions o;
  o.num_inference_nodes = 2;
  o.ports = {30000, 30001, 30002};
  o.master_host = "10.0.0.1";
  const auto m = bridge_layout_from_hostlist("a[1-2]-ib,b3,c[7-8]", o);
  CHECK(m.trainer_nodes == Names{"a1-ib", "a2-ib", "b3"});
  CHECK(m.inference_nodes == Names{"c7", "c8"});
  CHECK(m.nccl_group_address() == "10.0.0.1:30000");
  CHECK(m.metadata_group_address() == "10.0.0.1:30001");
  CHECK(m.inference_master_address() == "c7:30002");
  CHECK(m.inference_index(4) == std::optional<std::size_t>(1));
  o.num_inference_nodes = 1;
  o.master_host.clear();
  o.inference_master_host = "::1";
  CHECK(bridge_layout({"x", "y"}, o).inference_master_address() == "[::1]:30002");
}

void expect_layout_error(const std::vector<std::string>& nodes, const BridgeLayoutOptions& o,
                         const char* field, const char* fragment) {
  CAPTURE(field, fragment);
  try {
    (void)bridge_layout(nodes, o, "SLURM_JOB_NODELIST");
    FAIL("accepted");
  } catch (const config_error& e) {
    CHECK(e.field() == field);
    CHECK(std::string(e.what()).find(fragment) != std::string::npos);
  }
}

TEST_CASE("bridge: a layout that cannot be is refused, naming what is wrong", "[unit][bridge]") {
  const Names four = seq("n", 1, 4);
  BridgeLayoutOptions o;
  expect_layout_error({}, o, "SLURM_JOB_NODELIST", "names no node");
  expect_layout_error({"a", "", "b"}, o, "SLURM_JOB_NODELIST", "node 1 is empty");
  expect_layout_error({"a", "b", "a"}, o, "SLURM_JOB_NODELIST",
                      "names host 'a' twice (nodes 0 and 2)");
  o.num_inference_nodes = 0;
  expect_layout_error(four, o, "num_inference_nodes", "must be >= 1, got 0");
  o.num_inference_nodes = -2;
  expect_layout_error(four, o, "num_inference_nodes", "must be >= 1, got -2");
  o.num_inference_nodes = 4;
  expect_layout_error(four, o, "num_inference_nodes",
                      "4 inference nodes leave no node for the trainer: SLURM_JOB_NODELIST has 4 "
                      "(n1, n2, n3, n4), at least 5 needed");
  o.num_inference_nodes = 9;
  expect_layout_error(four, o, "num_inference_nodes", "at least 10 needed");
  o.num_inference_nodes = 1;
  expect_layout_error({"solo"}, o, "num_inference_nodes", "has 1 (solo)");
  o.ports.nccl_group = 0;
  expect_layout_error(four, o, "ports.nccl_group", "must be in 1..65535, got 0");
  o.ports.nccl_group = 65536;
  expect_layout_error(four, o, "ports.nccl_group", "got 65536");
  o.ports.nccl_group = 26756;
  o.ports.inference_master = 26756;
  expect_layout_error(four, o, "ports.inference_master", "26756 is also ports.nccl_group");
  // The host list's own errors carry the list's name.
  CHECK_THROWS_AS(bridge_layout_from_hostlist("a[2-1]", {}, "SLURM_JOB_NODELIST"), config_error);
}

//! Sets an environment variable for a scope, then puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = ::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST_CASE("bridge: the layout from SLURM_JOB_NODELIST, and its errors", "[unit][bridge]") {
  {
    ScopedEnv env("SLURM_JOB_NODELIST", "gpu[07-09],login");
    const auto l = slurm_bridge_layout();
    CHECK(l.nodes == Names{"gpu07", "gpu08", "gpu09", "login"});
    CHECK(l.master_host == "gpu07");
    CHECK(l.inference_nodes == Names{"login"});
  }
  {
    ScopedEnv env("SLURM_JOB_NODELIST", nullptr);
    try {
      (void)slurm_bridge_layout();
      FAIL("accepted");
    } catch (const config_error& e) {
      CHECK(e.field() == "SLURM_JOB_NODELIST");
      CHECK(std::string(e.what()).find("is not set") != std::string::npos);
    }
  }
  {
    ScopedEnv env("WS_TEST_NODELIST", " , ");
    try {
      (void)slurm_bridge_layout({}, "WS_TEST_NODELIST");
      FAIL("accepted");
    } catch (const config_error& e) {
      CHECK(e.field() == "WS_TEST_NODELIST");
      CHECK(std::string(e.what()).find("is empty") != std::string::npos);
    }
  }
  {
    ScopedEnv env("WS_TEST_NODELIST", "n[1-2");
    try {
      (void)slurm_bridge_layout({}, "WS_TEST_NODELIST");
      FAIL("accepted");
    } catch (const config_error& e) {
      CHECK(std::string(e.what()) ==
            "[weightsync.config] WS_TEST_NODELIST: '[' never closed at position 2 in 'n[1-2'");
    }
  }
}

TEST_CASE("bridge: loopback addresses", "[unit][bridge]") {
  for (const char* a : {"127.0.0.1", "127.0.1.1", "127.255.255.254", "::1", "0:0:0:0:0:0:0:1",
                        "::ffff:127.0.0.1"}) {
    CAPTURE(a);
    CHECK(is_loopback_address(a));
    CHECK_FALSE(is_own_host_address(a));
  }
  for (const char* a : {"10.0.0.1", "128.0.0.1", "::2", "fd00::1", "::ffff:10.0.0.1"}) {
    CAPTURE(a);
    CHECK_FALSE(is_loopback_address(a));
    CHECK(is_own_host_address(a));
  }
  for (const char* a : {"0.0.0.0", "::", "ff02::1", "224.0.0.1", "localhost", "", "1.2.3"}) {
    CAPTURE(a);
    CHECK_FALSE(is_loopback_address(a));
    CHECK_FALSE(is_own_host_address(a));
  }
}

const char* const kHosts =
    "127.0.0.1\tlocalhost\n"
    "127.0.1.1\tmyhost.example myhost   # Debian's own-name line: loopback, skipped\n"
    "::1\t\tlocalhost ip6-localhost ip6-loopback\n"
    "ff02::1\t\tip6-allnodes\n"
    "0.0.0.0 blocked.example\n"
    "# a comment line\n"
    "\n"
    "10.0.0.5\tnode02.cluster node02  # the container's address\n"
    "  10.0.0.6 node03\t\r\n"
    "fd00::7 node04-v6\n"
    "not-an-address bogus\n"
    "192.168.1.9\n"
    "::ffff:127.0.0.1 mapped-loopback\n"
    "10.0.0.5 node02 again\n";

std::string write_hosts(const ws_test::TempDir& dir, const char* name, const char* text) {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST_CASE("bridge: this machine's names from a hosts file, loopback skipped", "[unit][bridge]") {
  ws_test::TempDir dir;
  const std::string path = write_hosts(dir, "hosts", kHosts);
  const auto entries = read_hosts_file(path);
  REQUIRE(entries.size() == 11);  // the comment, the blank line and the bare address dropped
  CHECK(entries[0] == HostsEntry{"127.0.0.1", {"localhost"}});
  CHECK(entries[1] == HostsEntry{"127.0.1.1", {"myhost.example", "myhost"}});
  CHECK(entries[5] == HostsEntry{"10.0.0.5", {"node02.cluster", "node02"}});
  CHECK(entries[6] == HostsEntry{"10.0.0.6", {"node03"}});
  CHECK(hosts_file_names(path) ==
        Names{"node02.cluster", "node02", "node03", "node04-v6", "again"});
  CHECK(hosts_file_names(write_hosts(dir, "loopback", "127.0.0.1 localhost\n::1 localhost\n"))
            .empty());
  try {
    (void)hosts_file_names(dir.path() + "/missing");
    FAIL("accepted");
  } catch (const system_error& e) {
    CHECK(std::string(e.what()).find(dir.path() + "/missing") != std::string::npos);
  }
  CHECK_FALSE(this_host_name().empty());
}

TEST_CASE("bridge: this process's node: its host name, else the hosts file", "[unit][bridge]") {
  ws_test::TempDir dir;
  const auto l = bridge_layout_from_hostlist("node[01-04]");
  // A container's: its own address and names, besides the loopback ones.
  const std::string hosts = write_hosts(dir, "container",
                                        "127.0.0.1 localhost\n::1 localhost ip6-localhost\n"
                                        "172.17.0.5\tnode02.cluster node02\n");
  CHECK(find_this_node(l, hosts, "node03") == 2);
  CHECK(find_this_node(l, hosts, "NODE04.cluster.example") == 3);  // a short node name
  CHECK(find_this_node(l, hosts, "container-1f3a") == 1);          // the hosts file's node02
  // On a cluster whose hosts file lists every node, only the host name tells them apart.
  const std::string all =
      write_hosts(dir, "all", "10.0.0.1 node01\n10.0.0.2 node02\n10.0.0.3 node03\n");
  CHECK(find_this_node(l, all, "node01.cluster") == 0);
  try {
    (void)find_this_node(l, all, "elsewhere");
    FAIL("accepted");
  } catch (const config_error& e) {
    CHECK(e.field() == "hosts");
    CHECK(std::string(e.what()).find("could be any of the nodes node01, node02, node03") !=
          std::string::npos);
  }
  try {
    (void)find_this_node(l, write_hosts(dir, "none", "127.0.0.1 node01\n"), "elsewhere");
    FAIL("accepted");
  } catch (const config_error& e) {
    CHECK(std::string(e.what()).find("host name 'elsewhere'") != std::string::npos);
    CHECK(std::string(e.what()).find("is none of the nodes node01, node02, node03, node04") !=
          std::string::npos);
  }
  // An IPv4 literal has no short name: 127.0.0.1 is not "127".
  CHECK_FALSE(detail::same_host_name("127", "127.0.0.1"));
  CHECK(detail::same_host_name("Node01", "node01"));
  CHECK_FALSE(detail::same_host_name("node0", "node01.cluster"));
}

}  // namespace ws_test_hostlist_test
