// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Writing safetensors files. SafetensorsWriter is a LoadWeightsFn for the host path: a consumer
//! that dumps what it receives, tensor by tensor, at the offsets the header (written up front from
//! the declared metas) gives them. write_safetensors() writes a whole TensorIterator at once.

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "weightsync/concepts.hpp"
#include "weightsync/error.hpp"
#include "weightsync/host/device_policy.hpp"
#include "weightsync/safetensors/header.hpp"
#include "weightsync/tensor_meta.hpp"

namespace weightsync {

namespace detail {

//! The 8-byte length prefix and the JSON header for `metas` laid out back to back, padded with
//! spaces to a multiple of 8 (so the data buffer starts 8-byte aligned, as the reference writer
//! does). `offsets` receives each tensor's begin in the data buffer.
inline std::string safetensors_prefix(
    const std::vector<TensorMeta>& metas,
    const std::vector<std::pair<std::string, std::string>>& metadata,
    std::vector<std::uint64_t>& offsets) {
  // Written by hand (not through an ordered JSON object, whose inserts are linear): O(n) for the
  // ~19k tensors of a MoE checkpoint. Names and metadata are escaped by nlohmann.
  std::string json = "{";
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    for (std::size_t i = 0; i < metadata.size(); ++i)
      json += (i ? "," : "") + nlohmann::json(metadata[i].first).dump() + ":" +
              nlohmann::json(metadata[i].second).dump();
    json += "}";
  }
  offsets.clear();
  std::unordered_set<std::string_view> seen;
  std::uint64_t at = 0;
  for (const auto& meta : metas) {
    if (meta.name == "__metadata__" || !seen.insert(meta.name).second)
      throw config_error("safetensors tensor '" + meta.name + "'", "duplicate or reserved name");
    const std::uint64_t nb = meta.nbytes();
    offsets.push_back(at);
    if (json.size() > 1) json += ",";
    json += nlohmann::json(meta.name).dump() + ":{\"dtype\":\"" +
            std::string(safetensors_dtype_name(meta.dtype)) +
            "\",\"shape\":" + nlohmann::json(meta.shape).dump() + ",\"data_offsets\":[" +
            std::to_string(at) + "," + std::to_string(at + nb) + "]}";
    at += nb;
  }
  json += "}";
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<std::size_t>(i)] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  return out + json;
}

//! Writes all of `n` bytes at `off`, retrying short writes. @throws system_error.
inline void pwrite_all(int fd, const void* p, std::size_t n, std::uint64_t off,
                       const std::string& path) {
  const auto* b = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, b, n, static_cast<off_t>(off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw system_error("pwrite('" + path + "'): " + std::strerror(errno), errno);
    b += w;
    n -= static_cast<std::size_t>(w);
    off += static_cast<std::uint64_t>(w);
  }
}

}  // namespace detail

//! Writes a safetensors file for a declared list of tensors, filled as they arrive. Usable as the
//! load_weights of a host-path consumer: `packed_broadcast_consumer(metas, comm, 0, writer, opt)`.
//! Move-only; closes the file on destruction. Call finish() to check that every tensor arrived.
class SafetensorsWriter {
 public:
  //! Creates (truncates) `path` and writes the header for `metas` (in that order).
  //! @throws config_error for a duplicate name, system_error when the file cannot be written.
  SafetensorsWriter(std::string path, std::vector<TensorMeta> metas,
                    std::vector<std::pair<std::string, std::string>> metadata = {})
      : path_(std::move(path)), metas_(std::move(metas)) {
    const std::string prefix = detail::safetensors_prefix(metas_, metadata, offsets_);
    data_offset_ = prefix.size();
    for (std::size_t i = 0; i < metas_.size(); ++i) index_.emplace(metas_[i].name, i);
    written_.assign(metas_.size(), false);
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw system_error("open('" + path_ + "'): " + std::strerror(errno), errno);
    detail::pwrite_all(fd_, prefix.data(), prefix.size(), 0, path_);
  }
  SafetensorsWriter(SafetensorsWriter&& o) noexcept
      : path_(std::move(o.path_)),
        metas_(std::move(o.metas_)),
        offsets_(std::move(o.offsets_)),
        index_(std::move(o.index_)),
        written_(std::move(o.written_)),
        data_offset_(o.data_offset_),
        fd_(std::exchange(o.fd_, -1)) {}
  SafetensorsWriter& operator=(SafetensorsWriter&&) = delete;
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  ~SafetensorsWriter() {
    if (fd_ >= 0) ::close(fd_);
  }

  //! Writes received tensors (host memory) at their offsets. @throws config_error for a tensor
  //! that was not declared, arrives twice, or whose size differs from its declaration.
  void operator()(std::span<const TensorView> views, HostStream = {}) {
    for (const auto& v : views) {
      auto it = index_.find(v.name());
      if (it == index_.end())
        throw config_error("safetensors tensor '" + v.name() + "'",
                           "was not declared to the writer");
      const std::size_t i = it->second;
      if (written_[i]) throw config_error("safetensors tensor '" + v.name() + "'", "written twice");
      if (v.nbytes != metas_[i].nbytes() || *v.meta != metas_[i])
        throw config_error("safetensors tensor '" + v.name() + "'",
                           "does not match its declared dtype and shape");
      if (v.nbytes) detail::pwrite_all(fd_, v.data, v.nbytes, data_offset_ + offsets_[i], path_);
      written_[i] = true;
    }
  }

  //! Checks that every declared tensor was written, and flushes the file to disk.
  //! @throws config_error naming the first missing tensor.
  void finish() {
    for (std::size_t i = 0; i < metas_.size(); ++i)
      if (!written_[i])
        throw config_error("safetensors tensor '" + metas_[i].name + "'", "was never written");
    if (::fsync(fd_) != 0)
      throw system_error("fsync('" + path_ + "'): " + std::strerror(errno), errno);
  }

 private:
  std::string path_;
  std::vector<TensorMeta> metas_;
  std::vector<std::uint64_t> offsets_;
  std::unordered_map<std::string, std::size_t> index_;
  std::vector<bool> written_;
  std::uint64_t data_offset_ = 0;
  int fd_ = -1;
};

static_assert(LoadWeightsFn<SafetensorsWriter, HostStream>);

//! Writes every tensor of `tensors` (a TensorIterator over host memory) to `path`.
template <TensorIterator R>
void write_safetensors(const std::string& path, R&& tensors,
                       std::vector<std::pair<std::string, std::string>> metadata = {}) {
  std::vector<TensorMeta> metas;
  std::vector<const void*> data;
  for (auto&& t : tensors) {
    metas.push_back(t.meta());
    data.push_back(t.data());
  }
  SafetensorsWriter w(path, metas, std::move(metadata));
  for (std::size_t i = 0; i < metas.size(); ++i) {
    const TensorView v{&metas[i], const_cast<void*>(data[i]), metas[i].nbytes()};
    w(std::span<const TensorView>(&v, 1));
  }
  w.finish();
}

}  // namespace weightsync
