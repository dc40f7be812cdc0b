// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! Files as the messages between a test's processes (update infos, which travel by HTTP in a real
//! setup; a sharded trainer's delta parts, which travel through its own group): a temporary
//! folder (removed with what it holds when the test that made it ends), a file written whole
//! (under a temporary name, then renamed), and a bounded wait for one.

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace ws_test {

inline std::string temp_dir() {
  char tmpl[] = "/tmp/ws_test_XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

//! A temporary folder that the process which made it removes, with its files, at scope exit (a
//! forked child that leaves through _exit never runs this; one that returns does not remove it).
class TempDir {
 public:
  TempDir() : path_(temp_dir()), owner_(::getpid()) {}
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    if (::getpid() != owner_) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  pid_t owner_;
};

//! Removes `path` with its files at scope exit (nothing when empty): a folder that several of a
//! test's processes share, removed by the one that, by design, is the last to use it.
class RemoveAtExit {
 public:
  explicit RemoveAtExit(std::string path) : path_(std::move(path)) {}
  RemoveAtExit(const RemoveAtExit&) = delete;
  RemoveAtExit& operator=(const RemoveAtExit&) = delete;
  ~RemoveAtExit() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

 private:
  std::string path_;
};

inline void write_file(const std::string& path, const std::string& text) {
  {
    std::ofstream f(path + ".tmp");
    f << text;
  }
  std::rename((path + ".tmp").c_str(), path.c_str());
}

//! @throws std::runtime_error naming the file when it does not appear within `limit`.
inline std::string wait_for_file(const std::string& path, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    std::ifstream f(path);
    if (f) {
      std::stringstream s;
      s << f.rdbuf();
      return s.str();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  throw std::runtime_error("no " + path + " within the limit");
}

}  // namespace ws_test
