// The HTTP/1.x that frd's listener speaks, without sockets: a request head is parsed from the bytes
// read so far (complete, not yet, malformed or too large), and a reply is written out as bytes.
// Only what GET pages need: no request bodies (a request that announces one is answered 413),
// percent-decoded paths and query parameters, keep-alive by the version's default and the
// Connection header.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fr::daemon {

struct HttpHead {
  std::string method;                        // as sent (GET, HEAD, ...)
  std::string path;                          // percent-decoded, without the query
  std::map<std::string, std::string> query;  // ?key=value, decoded (the first of a repeated key)
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
  bool http10 = false;
  bool keep_alive = true;  // what the client asked for
  bool has_body = false;   // Content-Length other than 0, or any Transfer-Encoding

  // The first header of that (lower-case) name; empty when absent.
  std::string header(std::string_view lower_name) const;
};

enum class HeadStatus { kIncomplete, kComplete, kMalformed, kTooLarge };

// Looks for a whole head (request line and headers, up to the blank line) at the start of `buf`,
// at most `max_bytes` long. kComplete fills *head and sets *used to the head's length in bytes.
HeadStatus parse_head(std::string_view buf, size_t max_bytes, HttpHead* head, size_t* used);

// %XX decoded (and '+' as a space where `plus_space`); a bad escape stays as it is.
std::string percent_decode(std::string_view s, bool plus_space);

struct HttpReply {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // more header lines
};

// The whole response: status line, Content-Type, Content-Length, the extra headers, Connection,
// then the body (left out for a HEAD request).
std::string write_reply(const HttpReply& reply, bool keep_alive, bool head_only);

// The reason phrase of a status code this listener uses.
const char* status_text(int status);

}  // namespace fr::daemon
