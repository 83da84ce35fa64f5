// The parts of NIXL 1.5's C++ ABI the agent reads, declared here so the agent builds without NIXL's
// headers and without touching libstdc++: std::string (the cxx11 ABI) is read through its layout
// (data pointer, length) only, never constructed, copied or destroyed; descriptor lists and the
// optional arguments through the member order of nixl_descriptors.h and nixl_types.h (1.5.1).
// Every read is checked for plausibility (nixl_abi_ok_*): a layout that does not hold turns NIXL
// recording off (wrappers_nixl.cpp), it never guesses further.
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace fr::agent::nixl {

// nixl_status_t values the agent acts on.
inline constexpr int kInProg = 1;
inline constexpr int kSuccess = 0;

// std::__cxx11::basic_string<char>: pointer, length, then the local buffer or the capacity.
struct StdString {
  const char* data;
  size_t size;
  union {
    char local[16];
    size_t capacity;
  };
};
static_assert(sizeof(StdString) == 32, "cxx11 std::string layout");

// std::vector<T>: begin, end, end of storage.
struct StdVector {
  const uint8_t* begin;
  const uint8_t* end;
  const uint8_t* cap;
};

// std::optional<std::string>: the value, then the engaged flag.
struct StdOptString {
  StdString value;
  bool engaged;
};
static_assert(sizeof(StdOptString) == 40, "std::optional<std::string> layout");

// nixlBasicDesc: addr, len, devId (no virtual functions).
struct BasicDesc {
  uintptr_t addr;
  size_t len;
  uint64_t dev_id;
};
// nixlBlobDesc: nixlBasicDesc then metaInfo (a std::string).
struct BlobDesc {
  BasicDesc basic;
  StdString meta;
};
static_assert(sizeof(BlobDesc) == 56, "nixlBlobDesc layout");

// nixlDescList<T>: a vtable (it has a virtual destructor), the memory type, the descriptors.
struct DescList {
  const void* vtable;
  int32_t mem_type;
  StdVector descs;
};
static_assert(offsetof(DescList, descs) == 16, "nixlDescList layout");

// nixlAgentOptionalArgs, up to the fields read: backends, notif (preferred), notifMsg and hasNotif
// (legacy).
struct OptArgs {
  StdVector backends;  // std::vector<nixlBackendH*>
  StdOptString notif;
  StdString notif_msg;
  bool has_notif;
};
static_assert(offsetof(OptArgs, notif) == 24 && offsetof(OptArgs, notif_msg) == 64 &&
                  offsetof(OptArgs, has_notif) == 96,
              "nixlAgentOptionalArgs layout");

// std::unordered_map: buckets, bucket count, before-begin node, element count.
struct StdHashtable {
  void* buckets;
  size_t bucket_count;
  void* before_begin;
  size_t element_count;
};

// std::span<const int> (dynamic extent): passed by value as this two-word aggregate.
struct IntSpan {
  const int* data;
  size_t size;
};

// Plausibility of what is read through these layouts.
inline bool string_ok(const StdString* s) {
  return s != nullptr && s->data != nullptr && s->size < (1u << 20);
}
template <class T>
inline bool vector_ok(const StdVector& v, size_t max_elems) {
  if (v.begin == nullptr && v.end == nullptr) return true;
  if (v.begin == nullptr || v.end < v.begin || v.cap < v.end) return false;
  size_t bytes = (size_t)(v.end - v.begin);
  return bytes % sizeof(T) == 0 && bytes / sizeof(T) <= max_elems;
}

}  // namespace fr::agent::nixl
