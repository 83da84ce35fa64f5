// Shared-memory segments of emulated communicators and the futex-based wait/notify the emulation
// uses across processes: a waiter sleeps on its own rank's "bell" word, and whoever changes
// something that rank waits for bumps the bell and wakes it only if someone sleeps there, so the
// common path costs two atomic operations and no system call.
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>

#include "internal.h"

namespace frsim {

static uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

Layout layout_for(uint32_t nranks) {
  // Buffers are sparse in tmpfs: only what is touched takes memory. Chunks shrink as the
  // communicator grows so the segment stays a few tens of MiB at most.
  uint64_t n = nranks;
  uint64_t coll = (uint64_t{16} << 20) / n;
  coll = coll > (256u << 10) ? (256u << 10) : coll;
  coll = coll < 4096 ? 4096 : round_up(coll, 4096);
  uint64_t p2p = (uint64_t{16} << 20) / (n * n);
  p2p = p2p > (64u << 10) ? (64u << 10) : p2p;
  p2p = p2p < 4096 ? 4096 : round_up(p2p, 4096);
  Layout l;
  l.coll_chunk = coll;
  l.p2p_chunk = p2p;
  l.slots_off = round_up(sizeof(ShmHeader), 4096);
  l.chan_off = round_up(l.slots_off + n * sizeof(Slot), 4096);
  l.coll_off = round_up(l.chan_off + n * n * sizeof(Channel), 4096);
  l.p2p_off = l.coll_off + n * 2 * coll;
  l.xport_off = round_up(l.p2p_off + n * n * 2 * p2p, 4096);
  l.total = l.xport_off + uint64_t{kMaxSimChannels} * n * kMaxOutEdges * sizeof(EdgeWord);
  return l;
}

const char* shm_prefix() {
  static const char* prefix = [] {
    const char* p = getenv("FRSIM_SHM_PREFIX");
    if (p == nullptr) return "/frsim";
    if (p[0] != '/' || strchr(p + 1, '/') != nullptr || strlen(p) > 200) {
      fprintf(
          stderr,
          "frsim: FRSIM_SHM_PREFIX=\"%s\" is not a valid shm name prefix (\"/name\"); using /frsim\n",
          p);
      return "/frsim";
    }
    return p;
  }();
  return prefix;
}

std::string shm_name(uint64_t key) {
  char buf[64];
  snprintf(buf, sizeof buf, "_%016llx", static_cast<unsigned long long>(key));
  return std::string(shm_prefix()) + buf;
}

static void sleep_ms(int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
}

ncclResult_t segment_open(uint64_t key, uint32_t nranks, Segment* out, std::string* err) {
  std::string name = shm_name(key);
  Layout l = layout_for(nranks);
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  bool creator = fd >= 0;
  if (!creator) {
    if (errno != EEXIST) {
      *err = "shm_open " + name + ": " + strerror(errno);
      return ncclSystemError;
    }
    fd = shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) {
      *err = "shm_open " + name + ": " + strerror(errno);
      return ncclSystemError;
    }
  }
  if (creator) {
    if (ftruncate(fd, static_cast<off_t>(l.total)) != 0) {
      *err = "ftruncate " + name + ": " + strerror(errno);
      close(fd);
      shm_unlink(name.c_str());
      return ncclSystemError;
    }
  } else {
    // The creator sizes the object right after creating it; wait for that.
    for (;;) {
      struct stat st;
      if (fstat(fd, &st) != 0) {
        *err = "fstat " + name + ": " + strerror(errno);
        close(fd);
        return ncclSystemError;
      }
      if (st.st_size > 0) {
        if (static_cast<uint64_t>(st.st_size) != l.total) {
          *err = "communicator " + name + " was created for a different number of ranks";
          close(fd);
          return ncclInvalidUsage;
        }
        break;
      }
      sleep_ms(1);
    }
  }
  void* base = mmap(nullptr, l.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    *err = "mmap " + name + ": " + strerror(errno);
    if (creator) shm_unlink(name.c_str());
    return ncclSystemError;
  }
  auto* h = static_cast<ShmHeader*>(base);
  if (creator) {
    h->version = kShmVersion;
    h->nranks = nranks;
    h->key = key;
    h->coll_chunk = l.coll_chunk;
    h->p2p_chunk = l.p2p_chunk;
    h->slots_off = l.slots_off;
    h->coll_off = l.coll_off;
    h->chan_off = l.chan_off;
    h->p2p_off = l.p2p_off;
    h->xport_off = l.xport_off;
    h->total = l.total;
    h->joined.store(0, std::memory_order_relaxed);
    h->magic.store(kShmMagic, std::memory_order_release);  // the zero-filled slots are valid as is
  } else {
    while (h->magic.load(std::memory_order_acquire) != kShmMagic) sleep_ms(1);
    if (h->version != kShmVersion || h->nranks != nranks || h->key != key || h->total != l.total) {
      munmap(base, l.total);
      *err = "communicator " + name + " does not match this call (nranks " +
             std::to_string(nranks) + ", segment has " + std::to_string(h->nranks) + ")";
      return ncclInvalidUsage;
    }
  }
  out->base = base;
  out->size = l.total;
  return ncclSuccess;
}

void segment_unmap(Segment* s) {
  if (s->base != nullptr) munmap(s->base, s->size);
  s->base = nullptr;
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int timeout_ms) {
  timespec ts{timeout_ms / 1000, (timeout_ms % 1000) * 1000000L};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void ring(Slot* s) {
  s->bell.fetch_add(1, std::memory_order_seq_cst);
  if (s->sleepers.load(std::memory_order_seq_cst) != 0) futex_wake(&s->bell);
}

}  // namespace frsim
