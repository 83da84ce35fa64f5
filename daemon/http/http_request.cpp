// See http_request.h.
#include "daemon/http/http_request.h"

#include <algorithm>
#include <cctype>

namespace fr::daemon {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "a=1&b=2": each key's first value.
void parse_query(std::string_view q, std::map<std::string, std::string>* out) {
  while (!q.empty()) {
    size_t amp = q.find('&');
    std::string_view part = q.substr(0, amp);
    q = amp == std::string_view::npos ? std::string_view() : q.substr(amp + 1);
    if (part.empty()) continue;
    size_t eq = part.find('=');
    std::string key = percent_decode(part.substr(0, eq), true);
    std::string value =
        eq == std::string_view::npos ? "" : percent_decode(part.substr(eq + 1), true);
    out->emplace(std::move(key), std::move(value));
  }
}

// "GET /path?q HTTP/1.1"
bool parse_request_line(std::string_view line, HttpHead* h) {
  size_t sp1 = line.find(' ');
  if (sp1 == std::string_view::npos || sp1 == 0) return false;
  size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return false;
  std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                   version = line.substr(sp2 + 1);
  if (!std::all_of(method.begin(), method.end(), token_char)) return false;
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return false;
  if (target.empty() || target.front() != '/') return false;
  for (char c : target)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return false;
  h->method = std::string(method);
  h->http10 = version == "HTTP/1.0";
  size_t qm = target.find('?');
  h->path = percent_decode(target.substr(0, qm), false);
  if (qm != std::string_view::npos) parse_query(target.substr(qm + 1), &h->query);
  return true;
}

// The Connection header's tokens, and the body a request announces.
void read_framing(HttpHead* h) {
  h->keep_alive = !h->http10;
  for (const auto& [name, value] : h->headers) {
    if (name == "connection") {
      const std::string v = lower(value);
      if (v.find("close") != std::string::npos)
        h->keep_alive = false;
      else if (v.find("keep-alive") != std::string::npos)
        h->keep_alive = true;
    } else if (name == "transfer-encoding") {
      h->has_body = true;
    } else if (name == "content-length") {
      h->has_body |= value.find_first_not_of('0') != std::string::npos;
    }
  }
}

}  // namespace

std::string HttpHead::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers)
    if (name == lower_name) return value;
  return "";
}

std::string percent_decode(std::string_view s, bool plus_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out.push_back(char(hex(s[i + 1]) * 16 + hex(s[i + 2])));
      i += 2;
    } else {
      out.push_back(plus_space && s[i] == '+' ? ' ' : s[i]);
    }
  }
  return out;
}

HeadStatus parse_head(std::string_view buf, size_t max_bytes, HttpHead* head, size_t* used) {
  const size_t end = buf.find("\r\n\r\n");
  if (end == std::string_view::npos)
    return buf.size() >= max_bytes ? HeadStatus::kTooLarge : HeadStatus::kIncomplete;
  if (end + 4 > max_bytes) return HeadStatus::kTooLarge;
  HttpHead h;
  std::string_view rest = buf.substr(0, end + 2);  // every line with its CRLF
  bool first = true;
  while (!rest.empty()) {
    const size_t eol = rest.find("\r\n");
    std::string_view line = rest.substr(0, eol);
    rest.remove_prefix(eol + 2);
    if (line.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos)
      return HeadStatus::kMalformed;
    if (first) {
      if (!parse_request_line(line, &h)) return HeadStatus::kMalformed;
      first = false;
      continue;
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return HeadStatus::kMalformed;
    std::string_view name = line.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), token_char)) return HeadStatus::kMalformed;
    h.headers.emplace_back(lower(name), std::string(trim(line.substr(colon + 1))));
  }
  read_framing(&h);
  *head = std::move(h);
  *used = end + 4;
  return HeadStatus::kComplete;
}

const char* status_text(int status) {
  switch (status) {
    case 200: return "OK";
    case 303: return "See Other";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

std::string write_reply(const HttpReply& r, bool keep_alive, bool head_only) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + status_text(r.status) + "\r\n";
  out += "Content-Type: " + r.content_type + "\r\n";
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  for (const auto& [name, value] : r.headers) out += name + ": " + value + "\r\n";
  out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  if (!head_only) out += r.body;
  return out;
}

}  // namespace fr::daemon
