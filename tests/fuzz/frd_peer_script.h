// The input format of fr_fuzz_frd_peer, shared with the seed writer: a script of peer messages,
// each one byte of operation, two bytes (little endian) of length, then that many bytes of
// payload, mostly a serialized fr.v1 message (see fuzz_frd_peer.cpp for what each one carries).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fr::fuzz::frd_script {

enum Op : uint8_t {
  kHello,         // fr.v1.Hello
  kHeartbeat,     // session byte, fr.v1.Heartbeat
  kDumpStatus,    // session byte, fr.v1.DumpStatus
  kTick,          // up to 4 bytes: milliseconds to advance (big endian)
  kTrigger,       // the reason, as text
  kUploadHeader,  // fr.v1.UploadHeader: starts an upload
  kUploadData,    // fr.v1.UploadData: one chunk of the current upload
  kUploadEnd,     // ends the current upload
  kPlaced,        // fr.v1.UploadHeader of files said to be in place already
  kDisconnect,    // session byte
  kStatus,        // renders status and metrics
  kOps
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool next(uint8_t* op, std::string* payload) {
    if (end_ - p_ < 3) return false;
    *op = p_[0];
    size_t len = size_t(p_[1]) | size_t(p_[2]) << 8;
    p_ += 3;
    if (len > size_t(end_ - p_)) len = size_t(end_ - p_);
    payload->assign(reinterpret_cast<const char*>(p_), len);
    p_ += len;
    return true;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

inline void append(std::string* out, Op op, const std::string& payload) {
  size_t len = payload.size() > 0xffff ? 0xffff : payload.size();
  out->push_back(char(op));
  out->push_back(char(len & 0xff));
  out->push_back(char(len >> 8));
  out->append(payload, 0, len);
}

}  // namespace fr::fuzz::frd_script
