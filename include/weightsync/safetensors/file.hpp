// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Reading a safetensors file through a read-only memory mapping, as a TensorIterator: the
//! trainer side of "update weights from disk" (the producer sends a checkpoint straight from the
//! page cache, host backend), or a source for tests and tools.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weightsync/error.hpp"
#include "weightsync/safetensors/header.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync {

//! An open, validated safetensors file, mapped read-only. Move-only; unmaps on destruction.
//! The views it hands out (tensors(), bytes()) are valid while it lives.
class SafetensorsFile {
 public:
  //! Opens and validates `path`. @throws config_error for a malformed or truncated file (naming
  //! the tensor and field), system_error when the file cannot be opened or mapped.
  static SafetensorsFile open(const std::string& path) {
    SafetensorsFile f;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw system_error("open('" + path + "'): " + std::strerror(errno), errno);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      throw system_error("fstat('" + path + "'): " + std::strerror(err), err);
    }
    f.size_ = static_cast<std::size_t>(st.st_size);
    if (f.size_ > 0) {
      void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        throw system_error("mmap('" + path + "'): " + std::strerror(err), err);
      }
      f.map_ = static_cast<std::byte*>(p);
    }
    ::close(fd);  // the mapping keeps the file's pages
    f.header_ = parse_safetensors_header(std::span<const std::byte>(f.map_, f.size_));
    f.metas_.reserve(f.header_.tensors.size());
    for (const auto& e : f.header_.tensors) f.metas_.push_back(e.meta);
    return f;
  }

  SafetensorsFile(SafetensorsFile&& o) noexcept { swap(o); }
  SafetensorsFile& operator=(SafetensorsFile&& o) noexcept {
    SafetensorsFile tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile() {
    if (map_) ::munmap(map_, size_);
  }

  //! The validated header (tensors in file order, __metadata__).
  const SafetensorsHeader& header() const noexcept { return header_; }
  //! The tensors' metas, in file order: what the producer declares.
  const std::vector<TensorMeta>& metas() const noexcept { return metas_; }
  //! The tensors as a TensorIterator (SourceTensorRef into the mapping), in metas() order.
  std::vector<SourceTensorRef> tensors() const {
    std::vector<SourceTensorRef> v;
    v.reserve(metas_.size());
    for (std::size_t i = 0; i < metas_.size(); ++i) v.push_back({&metas_[i], bytes(i).data()});
    return v;
  }
  //! The bytes of tensor `i` (file order).
  std::span<const std::byte> bytes(std::size_t i) const {
    const auto& e = header_.tensors.at(i);
    return {map_ + header_.data_offset + e.begin, static_cast<std::size_t>(e.end - e.begin)};
  }
  //! Size of the whole file in bytes.
  std::size_t file_size() const noexcept { return size_; }

 private:
  SafetensorsFile() = default;
  void swap(SafetensorsFile& o) noexcept {
    std::swap(map_, o.map_);
    std::swap(size_, o.size_);
    std::swap(header_, o.header_);
    std::swap(metas_, o.metas_);
  }
  std::byte* map_ = nullptr;
  std::size_t size_ = 0;
  SafetensorsHeader header_;
  std::vector<TensorMeta> metas_;
};

}  // namespace weightsync
