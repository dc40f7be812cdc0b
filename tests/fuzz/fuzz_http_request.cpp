// SPDX-FileCopyrightText: 2026 weightsync contributors
// SPDX-License-Identifier: Apache-2.0
// The HTTP request reader (ControlServer's detail::RequestParser): raw bytes as a client sends
// them, fed whole and then in pieces (the first byte picks the piece size). Both ways end alike;
// a refusal has a 4xx/5xx status, a message of printable ASCII (a JSON dump of it cannot throw)
// and a field that is UTF-8; an accepted request is in the form cpp-httplib is given (one
// Content-Length, no Transfer-Encoding or Expect), and reading that form again gives itself.
#include <weightsync/vllm/detail/http_request_parser.hpp>

#include <string>

#include "fuzz_support.hpp"

namespace d = weightsync::http::detail;
using Progress = d::RequestParser::Progress;

namespace {

struct Outcome {
  Progress p = Progress::more;
  int status = 0;
  std::string request;
  std::size_t consumed = 0;
};

Outcome run(std::string_view in, std::size_t piece, const d::RequestLimits& l) {
  d::RequestParser parser(l);
  std::string buf;
  Progress p = Progress::more;
  for (std::size_t at = 0; p == Progress::more && at < in.size(); at += piece) {
    buf.append(in.substr(at, piece));
    p = parser.parse(buf);
    (void)parser.take_continue();
  }
  Outcome o;
  o.p = p;
  if (p == Progress::failed) o.status = parser.refusal().status;
  if (p == Progress::done) {
    o.request = parser.request();
    o.consumed = parser.consumed();
  }
  if (p == Progress::failed) {
    const auto& r = parser.refusal();
    ws_fuzz::require(r.status == 400 || r.status == 413 || r.status == 431 || r.status == 501 ||
                         r.status == 505,
                     "refused with an unexpected status");
    for (const char c : r.why)
      ws_fuzz::require(c >= 0x20 && c < 0x7F, "a refusal's message has a byte that is not printable");
    ws_fuzz::require(d::valid_utf8(r.field), "a refusal's field is not UTF-8");
  }
  return o;
}

}  // namespace

WS_FUZZ_ENTRY {
  if (size < 1) return 0;
  const std::string_view in = ws_fuzz::bytes(data + 1, size - 1);
  d::RequestLimits l;
  l.max_header_bytes = 2048;
  l.max_header_count = 16;
  l.max_body_bytes = 4096;
  const Outcome whole = run(in, in.size() + 1, l);
  const Outcome pieces = run(in, 1 + data[0] % 16, l);
  ws_fuzz::require(whole.p == pieces.p, "whole and in pieces end differently");
  ws_fuzz::require(whole.status == pieces.status, "whole and in pieces are refused differently");
  ws_fuzz::require(whole.request == pieces.request, "whole and in pieces read different requests");
  if (whole.p != Progress::done) return 0;
  ws_fuzz::require(whole.consumed <= in.size(), "consumed more than was given");
  const std::string& r = whole.request;
  const std::size_t head = r.find("\r\n\r\n");
  ws_fuzz::require(head != std::string::npos, "the request has no end of head");
  std::size_t lengths = 0;
  for (std::size_t a = r.find("\r\n") + 2; a < head + 2; a = r.find("\r\n", a) + 2) {
    const std::string_view line(r.data() + a, r.find("\r\n", a) - a);
    const std::string_view name = line.substr(0, line.find(':'));
    lengths += d::iequals(name, "Content-Length");
    ws_fuzz::require(!d::iequals(name, "Transfer-Encoding") && !d::iequals(name, "Expect"),
                     "the request keeps a Transfer-Encoding or Expect header");
  }
  ws_fuzz::require(lengths == 1, "the request has no single Content-Length");
  // (read again with room for the Content-Length line the form may have added)
  d::RequestLimits more = l;
  more.max_header_bytes += 64;
  more.max_header_count += 1;
  const Outcome again = run(r, r.size() + 1, more);
  ws_fuzz::require(again.p == Progress::done && again.request == r && again.consumed == r.size(),
                   "the request as given to cpp-httplib does not read as itself");
  return 0;
}
