// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! RequestParser: one HTTP/1.1 request read from a buffer as its bytes arrive (see
//! http_request.hpp for the checks), into the form cpp-httplib is given.

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include "weightsync/detail/format.hpp"
#include "weightsync/vllm/detail/http_request.hpp"

namespace weightsync::http::detail {

//! One request read from a buffer that starts with it and grows as its bytes arrive: call parse()
//! again after each append. Work is proportional to the new bytes (a slow client costs no
//! rescans). What follows the request in the buffer (a pipelined one) is left to the next parser.
class RequestParser {
 public:
  enum class Progress { more, done, failed };
  explicit RequestParser(RequestLimits l = {}) : l_(l) {}

  Progress parse(std::string_view buf) {
    if (state_ == State::done) return Progress::done;
    if (state_ == State::failed) return Progress::failed;
    if (state_ == State::head) {
      const Progress p = scan_head(buf);
      if (p != Progress::done) return p;
      const Progress h = read_headers(buf.substr(start_, cur_ - start_));
      if (h != Progress::done) return h;
      continue_ = expect_continue_ && (chunked_ || length_ > 0) && buf.size() == cur_;
      state_ = chunked_ ? State::chunk_size : State::length;
    }
    if (state_ == State::length) {
      if (buf.size() - cur_ < length_) return Progress::more;
      body_.assign(buf.substr(cur_, length_));
      return finish(cur_ + length_);
    }
    return chunks(buf);
  }
  //! After done: the request as cpp-httplib is given it (head amended, body after a
  //! Content-Length).
  const std::string& request() const noexcept { return out_; }
  //! After done: the bytes of the buffer the request took (blank lines before it included).
  std::size_t consumed() const noexcept { return end_; }
  //! After failed: the status to answer, why, and the field at fault.
  const Refusal& refusal() const noexcept { return r_; }
  //! True once when the head asked "Expect: 100-continue" and no byte of its body has come yet.
  bool take_continue() noexcept {
    const bool c = continue_;
    continue_ = false;
    return c;
  }
  //! Whether a byte of the request arrived (blank lines before it aside).
  bool started() const noexcept { return started_; }
  //! Whether the request line and headers are complete.
  bool head_complete() const noexcept { return state_ != State::head; }

 private:
  enum class State { head, length, chunk_size, chunk_data, trailers, done, failed };

  Progress fail(int status, std::string why, std::string field) {
    r_ = {status, std::move(why), std::move(field)};
    state_ = State::failed;
    return Progress::failed;
  }
  Progress failed() {
    state_ = State::failed;
    return Progress::failed;
  }

  //! Finds the end of the head in the new bytes: blank lines before the request line skipped,
  //! the request line checked as soon as it is complete, a bare LF and an oversized head refused
  //! before the rest arrives. Done: the head is buf[start_, cur_).
  Progress scan_head(std::string_view buf) {
    using weightsync::detail::cat;
    while (!started_ && buf.size() - start_ >= 2 && buf[start_] == '\r' && buf[start_ + 1] == '\n')
      start_ += 2;
    if (start_ > l_.max_header_bytes)
      return fail(400, cat("over ", l_.max_header_bytes, " bytes of blank lines"), "request line");
    if (!started_ && buf.size() > start_ && !(buf[start_] == '\r' && buf.size() - start_ == 1))
      started_ = true;
    if (!started_) return Progress::more;
    for (cur_ = std::max(cur_, start_); cur_ < buf.size(); ++cur_) {
      if (cur_ - start_ >= l_.max_header_bytes)
        return fail(431, cat("the request line and headers exceed ", l_.max_header_bytes,
                             " bytes (max_header_bytes)"), "headers");
      if (buf[cur_] != '\n') continue;
      if (cur_ == start_ || buf[cur_ - 1] != '\r')
        return fail(400, "a line of the request head ends in a bare LF, not CRLF", "headers");
      if (!line_checked_) {
        line_checked_ = true;
        if (!check_request_line(buf.substr(start_, cur_ - 1 - start_), r_)) return failed();
      } else if (buf[cur_ - 2] == '\n') {  // "\r\n\r\n": the end of the head
        ++cur_;
        return Progress::done;
      }
    }
    return Progress::more;
  }

  //! The header lines of a complete head: each checked, the framing read (Content-Length or
  //! chunked, not both, each at most once), the head rewritten into out_ without the framing and
  //! Expect headers (and with a form's Content-Type renamed, see ControlServer).
  Progress read_headers(std::string_view head) {
    using weightsync::detail::cat;
    std::size_t a = head.find("\r\n") + 2, count = 0;
    out_.assign(head.substr(0, a));
    bool has_length = false, has_te = false;
    for (std::size_t e; (e = head.find("\r\n", a)) != a; a = e + 2) {
      if (++count > l_.max_header_count)
        return fail(431, cat("the request has over ", l_.max_header_count,
                             " headers (max_header_count)"), "headers");
      const std::string_view line = head.substr(a, e - a);
      std::string_view name, value;
      if (!check_header_line(line, name, value, r_)) return failed();
      if (iequals(name, "Content-Length")) {
        if (has_length) return fail(400, "the request has more than one Content-Length", "Content-Length");
        has_length = true;
        std::uint64_t n = 0;
        const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (value.empty() || ec != std::errc{} || p != value.data() + value.size())
          return fail(400, cat("Content-Length '", escaped(value), "' is not a number"),
                      "Content-Length");
        if (n > l_.max_body_bytes)  // refused before a byte of it is read
          return fail(413, cat("request body of ", n, " bytes exceeds the limit of ",
                               l_.max_body_bytes, " bytes"), "Content-Length");
        length_ = static_cast<std::size_t>(n);
      } else if (iequals(name, "Transfer-Encoding")) {
        if (has_te) return fail(400, "the request has more than one Transfer-Encoding", "Transfer-Encoding");
        has_te = chunked_ = true;
        if (!iequals(value, "chunked"))
          return fail(501, cat("Transfer-Encoding '", escaped(value), "' is not implemented (chunked is)"),
                      "Transfer-Encoding");
      } else if (iequals(name, "Expect")) {
        expect_continue_ = iequals(value, "100-continue");
      } else if (iequals(name, "Content-Type") &&
                 iequals(value.substr(0, std::min<std::size_t>(value.size(), 33)),
                         "application/x-www-form-urlencoded")) {
        // The body reaches the handler as it came (the routes read it as JSON whatever its
        // type); cpp-httplib would parse it as a form and refuse one over 8 KiB with 413.
        out_.append("X-Original-Content-Type: ").append(value).append("\r\n");
      } else {
        out_.append(line).append("\r\n");
      }
    }
    if (has_length && has_te)
      return fail(400, "the request has both Content-Length and Transfer-Encoding", "Transfer-Encoding");
    return Progress::done;
  }

  //! The chunks from cur_: sizes in hex (extensions ignored), each chunk's data and its CRLF,
  //! then trailers (checked, dropped) up to the empty line.
  Progress chunks(std::string_view buf) {
    using weightsync::detail::cat;
    while (true) {
      if (state_ == State::chunk_data) {
        if (buf.size() - cur_ < chunk_left_ || buf.size() - cur_ - chunk_left_ < 2) return Progress::more;
        if (buf.substr(cur_ + chunk_left_, 2) != "\r\n")
          return fail(400, cat("a chunk of ", chunk_left_, " bytes is not followed by CRLF"), "chunk");
        body_.append(buf.substr(cur_, chunk_left_));
        cur_ += chunk_left_ + 2;
        state_ = State::chunk_size;
      }
      // A line longer than `most` is refused whether it came whole or in pieces (in pieces, once
      // more than it and its CR wait without the LF).
      const std::size_t e = buf.find("\r\n", cur_);
      const std::size_t most = state_ == State::trailers ? l_.max_header_bytes : 1024;
      if (e == std::string_view::npos ? buf.size() - cur_ > most + 1 : e - cur_ > most)
        return fail(state_ == State::trailers ? 431 : 400,
                    cat("a ", state_ == State::trailers ? "trailer" : "chunk size", " line exceeds ",
                        most, " bytes"),
                    "chunk");
      if (e == std::string_view::npos) return Progress::more;
      const std::string_view line = buf.substr(cur_, e - cur_);
      cur_ = e + 2;
      if (state_ == State::trailers) {
        if (line.empty()) return finish(cur_);
        std::string_view name, value;
        if (!check_header_line(line, name, value, r_)) return failed();
        if (++trailers_ > l_.max_header_count)
          return fail(431, cat("the request has over ", l_.max_header_count, " trailers"), "trailer");
        continue;
      }
      const std::string_view digits = line.substr(0, line.find(';'));
      std::uint64_t n = 0;
      const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n, 16);
      if (digits.empty() || ec != std::errc{} || p != digits.data() + digits.size())
        return fail(400, cat("the chunk size '", escaped(line), "' is not a hexadecimal number"),
                    "chunk size");
      if (n > l_.max_body_bytes - body_.size())
        return fail(413, cat("the chunked request body exceeds the limit of ", l_.max_body_bytes,
                             " bytes"), "chunk size");
      chunk_left_ = static_cast<std::size_t>(n);
      state_ = n == 0 ? State::trailers : State::chunk_data;
    }
  }

  Progress finish(std::size_t end) {
    out_.append("Content-Length: ").append(std::to_string(body_.size())).append("\r\n\r\n");
    out_.append(body_);
    body_.clear();
    body_.shrink_to_fit();
    end_ = end;
    state_ = State::done;
    return Progress::done;
  }

  RequestLimits l_;
  State state_ = State::head;
  std::size_t start_ = 0;       // the request line's first byte
  std::size_t cur_ = 0;         // the next byte to look at
  std::size_t length_ = 0;      // a Content-Length
  std::size_t chunk_left_ = 0;  // the data of the chunk being read
  std::size_t trailers_ = 0;
  std::size_t end_ = 0;
  bool started_ = false, line_checked_ = false, chunked_ = false, expect_continue_ = false,
       continue_ = false;
  std::string out_, body_;
  Refusal r_;
};

}  // namespace weightsync::http::detail
