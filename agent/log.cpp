// The flight-log writer: creates the process's log file in shared memory, fills its header, holds
// the advisory lock that tells readers the writer lives, and publishes records into the ring with
// the sequence-lock primitives of fr/flight_log.h (the protocol every reader checks).
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comms.h"
#include "graphs.h"
#include "log.h"

namespace fr::agent {

constinit LogState g_log = {};

// Copies `src` into `dst` (FR_NAME_LEN bytes, NUL-terminated), keeping [A-Za-z0-9_.-] and
// replacing anything else, so the value is safe in a file name.
static void sanitize_name(char* dst, const char* src) {
  size_t i = 0;
  for (; src[i] != '\0' && i + 1 < FR_NAME_LEN; ++i) {
    char c = src[i];
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-';
    dst[i] = ok ? c : '_';
  }
  dst[i] = '\0';
  if (i == 0 || strcmp(dst, ".") == 0 || strcmp(dst, "..") == 0) strcpy(dst, "unknown");
}

static const char* first_env(const char* const* names, int* which) {
  for (int i = 0; names[i] != nullptr; ++i) {
    const char* v = getenv(names[i]);
    if (v != nullptr && v[0] != '\0') {
      if (which) *which = i;
      return v;
    }
  }
  return nullptr;
}

// Parses a non-negative decimal integer; -1 when absent or malformed.
static long env_long(const char* name) {
  const char* v = getenv(name);
  if (v == nullptr || v[0] == '\0') return -1;
  char* end = nullptr;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (end == v || *end != '\0' || x < 0) return -1;
  // A number too large for a long is a number still: LONG_MAX, which every caller caps.
  if (errno == ERANGE && x == LONG_MAX) return LONG_MAX;
  if (errno != 0) return -1;
  return x;
}

// The size of a log of the default capacities but `ring_cap` records.
static uint64_t default_log_size(uint32_t ring_cap) {
  uint32_t capacity[FR_SECTION_KINDS] = {};
  capacity[FR_SECTION_COMMS] = FR_DEFAULT_COMM_CAPACITY;
  capacity[FR_SECTION_RING] = ring_cap;
  capacity[FR_SECTION_GRAPHS] = FR_DEFAULT_GRAPH_CAPACITY;
  capacity[FR_SECTION_CAPTURES] = FR_DEFAULT_CAPTURE_CAPACITY;
  capacity[FR_SECTION_CHANS] = FR_DEFAULT_CHAN_CAPACITY;
  capacity[FR_SECTION_XFERS] = FR_DEFAULT_XFER_CAPACITY;
  fr_log_section dir[FR_SECTION_KINDS];
  return fr_log_layout(capacity, dir);
}

// The sections of this process's log (the capacities log_open chose).
static uint64_t context_layout(const LogState& c, fr_log_section dir[FR_SECTION_KINDS]) {
  uint32_t capacity[FR_SECTION_KINDS] = {};
  capacity[FR_SECTION_COMMS] = c.comm_cap;
  capacity[FR_SECTION_RING] = c.ring_cap;
  capacity[FR_SECTION_GRAPHS] = c.graph_cap;
  capacity[FR_SECTION_CAPTURES] = c.capture_cap;
  capacity[FR_SECTION_CHANS] = c.chan_cap;
  capacity[FR_SECTION_XFERS] = c.xfer_cap;
  return fr_log_layout(capacity, dir);
}

static uint32_t ring_capacity() {
  const char* v = getenv("FR_BUFFER_ENTRIES");
  if (v == nullptr || v[0] == '\0') return FR_DEFAULT_RING_CAPACITY;
  long x = env_long("FR_BUFFER_ENTRIES");
  if (x < 0) {
    debug_log("FR_BUFFER_ENTRIES=%s is not a number; using %u", v, FR_DEFAULT_RING_CAPACITY);
    return FR_DEFAULT_RING_CAPACITY;
  }
  if (x < 16) x = 16;
  if (x > (long)FR_MAX_RING_CAPACITY) {
    // Said once, at start: the cap costs memory the user may not expect.
    debug_log(
        "FR_BUFFER_ENTRIES=%s is above the maximum; using %u records (%llu MiB of shared "
        "memory per process)",
        v, FR_MAX_RING_CAPACITY,
        (unsigned long long)(default_log_size(FR_MAX_RING_CAPACITY) >> 20));
    x = FR_MAX_RING_CAPACITY;
  }
  return (uint32_t)x;
}

// The log's file mode: FR_LOG_MODE in octal (e.g. 0640), 0600 by default, so other users of the
// machine can neither read the calls nor copy the log. The owner keeps read and write whatever
// is asked.
static mode_t log_mode() {
  const char* v = getenv("FR_LOG_MODE");
  if (v == nullptr || v[0] == '\0') return 0600;
  char* end = nullptr;
  errno = 0;
  long m = strtol(v, &end, 8);
  if (errno != 0 || end == v || *end != '\0' || m < 0 || m > 0777) {
    debug_log("FR_LOG_MODE=%s is not an octal file mode; using 0600", v);
    return 0600;
  }
  return (mode_t)m | 0600;
}

static void fill_identity(fr_log_header* h) {
  static const char* const kJob[] = {"FR_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", nullptr};
  const char* job = first_env(kJob, nullptr);
  sanitize_name(h->job_id, job ? job : "nojob");

  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "unknown");
  sanitize_name(h->hostname, host);

  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    const char* base = strrchr(exe, '/');
    base = base ? base + 1 : exe;
    size_t len = strnlen(base, FR_NAME_LEN - 1);
    memcpy(h->exe, base, len);
    h->exe[len] = '\0';
  }

  // Global rank and size from the launcher; otherwise learned from the largest communicator.
  static const char* const kRank[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID",
                                      nullptr};
  static const char* const kSize[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                      "SLURM_NTASKS", nullptr};
  h->global_rank = -1;
  h->world_size = -1;
  for (int i = 0; kRank[i] != nullptr; ++i) {
    long r = env_long(kRank[i]);
    if (r < 0 || r > INT32_MAX) continue;
    h->global_rank = (int32_t)r;
    long s = env_long(kSize[i]);
    if (s > r && s <= INT32_MAX) h->world_size = (int32_t)s;
    g_comms.rank_from_env = 1;
    break;
  }
  long lr = env_long("LOCAL_RANK");
  h->local_rank = (lr >= 0 && lr <= INT32_MAX) ? (int32_t)lr : -1;
}

// Transfer table entries: FR_XFER_ENTRIES, FR_DEFAULT_XFER_CAPACITY by default, 16 at least.
static uint32_t xfer_capacity() {
  long x = env_long("FR_XFER_ENTRIES");
  if (x < 0) return FR_DEFAULT_XFER_CAPACITY;
  if (x < 16) x = 16;
  if (x > (long)FR_MAX_XFER_CAPACITY) x = FR_MAX_XFER_CAPACITY;
  return (uint32_t)x;
}

static void* map_private(uint64_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// The private side tables (communicator handle map, CommPriv, GraphPriv, the exec map) in one
// anonymous mapping, laid out for the capacities already in `c`.
static bool map_private_tables(LogState& c) {
  uint32_t buckets = 1;
  while (buckets < c.comm_cap * 2) buckets <<= 1;
  uint64_t keys_bytes = (uint64_t)buckets * sizeof(uint64_t);
  uint64_t slots_bytes = (uint64_t)buckets * sizeof(int32_t);
  uint64_t priv_off = (keys_bytes + slots_bytes + 63) & ~63ull;
  uint64_t graph_priv_off = (priv_off + (uint64_t)c.comm_cap * sizeof(CommPriv) + 63) & ~63ull;
  uint64_t exec_off = graph_priv_off + (uint64_t)c.graph_cap * sizeof(GraphPriv);
  c.priv_size = exec_off + (uint64_t)kExecBuckets * sizeof(ExecSlot);
  c.priv_map = (uint8_t*)map_private(c.priv_size);
  if (c.priv_map == nullptr) {
    debug_log("cannot map %llu bytes of private tables", (unsigned long long)c.priv_size);
    return false;
  }
  g_comms.handle_keys = (uint64_t*)c.priv_map;
  g_comms.handle_slots = (int32_t*)(c.priv_map + keys_bytes);
  g_comms.handle_mask = buckets - 1;
  g_comms.priv = (CommPriv*)(c.priv_map + priv_off);
  g_graphs.priv = (GraphPriv*)(c.priv_map + graph_priv_off);
  g_graphs.execs = (ExecSlot*)(c.priv_map + exec_off);
  return true;
}

// Creates the log file at c.path (never an existing one), takes the writer's lock, reserves its
// pages and maps it. On failure nothing is left behind: no file, no descriptor. 0, or the error.
static int create_log_file(LogState& c) {
  const mode_t mode = log_mode();
  int fd = open(c.path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) {
    const int err = errno;
    debug_log("cannot create %s: %s; not recording", c.path, strerror(err));
    return err != 0 ? err : EIO;
  }
  // Exactly the mode asked for: the umask would only take bits away from an explicit FR_LOG_MODE.
  if (fchmod(fd, mode) != 0)
    debug_log("cannot set mode %o on %s: %s", (unsigned)mode, c.path, strerror(errno));
  // Readers tell a live writer from a dead one by this lock; it lasts as long as the process.
  struct flock lk = {};
  lk.l_type = F_WRLCK;
  lk.l_whence = SEEK_SET;
  lk.l_start = 0;
  lk.l_len = 1;
  int err = 0;
  const char* what = nullptr;
  if (fcntl(fd, F_SETLK, &lk) != 0) {
    err = errno, what = "lock";
  } else if ((err = posix_fallocate(fd, 0, (off_t)c.map_size)) != 0) {
    // Reserving the pages now means a full /dev/shm fails here, not with SIGBUS on a write later.
    what = "allocate";
  } else {
    void* m = mmap(nullptr, c.map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
      err = errno, what = "map";
    else
      c.map = (uint8_t*)m;
  }
  if (what != nullptr) {
    debug_log("cannot %s %s (%llu bytes): %s", what, c.path, (unsigned long long)c.map_size,
              strerror(err));
    unlink(c.path);
    close(fd);
    return err != 0 ? err : EIO;
  }
  c.fd = fd;
  c.hdr = (fr_log_header*)c.map;
  fr_log_section dir[FR_SECTION_KINDS];
  context_layout(c, dir);
  c.sections = (fr_log_section*)(c.map + sizeof(fr_log_header));
  c.comms = (fr_comm_entry*)(c.map + dir[FR_SECTION_COMMS].offset);
  c.ring = (fr_record*)(c.map + dir[FR_SECTION_RING].offset);
  c.graphs = (fr_graph_entry*)(c.map + dir[FR_SECTION_GRAPHS].offset);
  c.captures = (fr_record*)(c.map + dir[FR_SECTION_CAPTURES].offset);
  c.chans = (fr_chan_entry*)(c.map + dir[FR_SECTION_CHANS].offset);
  c.xfers = (fr_xfer_entry*)(c.map + dir[FR_SECTION_XFERS].offset);
  return 0;
}

// What the log holds, tried in order until one fits where the log goes (docs/agent.md, "The
// /dev/shm it needs"): the configured log; a smaller one (256 records, 128 captured ops, 256
// channel slots, 32 transfers); the same without channel slots, so that NCCL's profiler plugin
// is declined and has nowhere to write. Communicators and graphs keep their tables (the private
// side tables are sized for them before the file exists).
enum LogTier { kTierFull, kTierSmaller, kTierNoChannels, kTierCount };

static void set_tier(LogState& c, LogTier tier, uint32_t ring, uint32_t xfer) {
  c.ring_cap = tier == kTierFull ? ring : (ring < 256 ? ring : 256u);
  c.ring_mask = (c.ring_cap & (c.ring_cap - 1)) == 0 ? c.ring_cap - 1 : 0;
  c.capture_cap = tier == kTierFull ? FR_DEFAULT_CAPTURE_CAPACITY : 128u;
  c.chan_cap = tier == kTierFull ? FR_DEFAULT_CHAN_CAPACITY : tier == kTierSmaller ? 256u : 0u;
  c.xfer_cap = tier == kTierFull ? xfer : (xfer < 32 ? xfer : 32u);
  fr_log_section dir[FR_SECTION_KINDS];
  c.map_size = context_layout(c, dir);
}

// Whether an error says the file system has no room (the next tier may fit).
static bool no_room(int err) { return err == ENOSPC || err == EDQUOT || err == EFBIG; }

// Creates the largest log that fits, with one notice when it is not the configured one (or when
// none fits). 0, or the error of the last try.
static int create_fitting_log(LogState& c, const char* dir) {
  const uint32_t ring = c.ring_cap, xfer = c.xfer_cap;
  const uint64_t full = c.map_size;
  int err = 0;
  for (int t = kTierFull; t < kTierCount; ++t) {
    set_tier(c, LogTier(t), ring, xfer);
    err = create_log_file(c);
    if (err == 0 && t == kTierFull) return 0;
    if (err == 0) {
      notice_log(
          "no room in %s for a %llu KiB flight log; recording into a smaller one "
          "(%llu KiB: %u records, %s)",
          dir, (unsigned long long)(full >> 10), (unsigned long long)(c.map_size >> 10), c.ring_cap,
          t == kTierSmaller ? "256 profiler channel slots"
                            : "no profiler channel slots: NCCL's profiler plugin is declined");
      set_log_flags(FR_LOG_F_SMALL_LOG, 0);
      return 0;
    }
    if (!no_room(err)) return err;  // not a matter of size
  }
  notice_log(
      "no room in %s for a flight log, even one of %llu KiB (%s); this process runs "
      "unrecorded",
      dir, (unsigned long long)(c.map_size >> 10), strerror(err));
  return err;
}

// The header of the new (zero-filled) file: only non-zero fields are written, the magic last.
static void fill_header(LogState& c, const fr_log_header& id, uint64_t create_ns,
                        uint64_t mono_ns) {
  fr_log_header* h = c.hdr;
  h->version = FR_LOG_VERSION;
  h->header_size = sizeof(fr_log_header);
  fr_log_header_set_directory(h);
  context_layout(c, c.sections);  // rows by kind, where create_log_file placed the tables
  h->file_size = c.map_size;
  h->create_ns = create_ns;
  h->create_mono_ns = mono_ns;
  h->pid = (int32_t)getpid();
  h->global_rank = id.global_rank;
  h->world_size = id.world_size;
  h->local_rank = id.local_rank;
  h->writer_alive = -1;
  memcpy(h->job_id, id.job_id, sizeof h->job_id);
  memcpy(h->hostname, id.hostname, sizeof h->hostname);
  memcpy(h->exe, id.exe, sizeof h->exe);
  auto get_version = FR_REAL(ncclGetVersion);
  int version = 0;
  if (get_version != nullptr && get_version(&version) == ncclSuccess) h->nccl_version = version;
  h->heartbeat_ns = create_ns;
  // The magic last: a reader that sees it sees a whole header.
  __atomic_store_n(&h->magic, FR_LOG_MAGIC, __ATOMIC_RELEASE);
}

bool log_open() {
  LogState& c = g_log;
  c.ring_cap = ring_capacity();
  c.ring_mask = (c.ring_cap & (c.ring_cap - 1)) == 0 ? c.ring_cap - 1 : 0;
  c.records_lost = 0;  // a forked child's new log starts its own count
  c.comm_cap = FR_DEFAULT_COMM_CAPACITY;
  c.graph_cap = FR_DEFAULT_GRAPH_CAPACITY;
  c.capture_cap = FR_DEFAULT_CAPTURE_CAPACITY;
  c.chan_cap = FR_DEFAULT_CHAN_CAPACITY;
  c.xfer_cap = xfer_capacity();
  fr_log_section sections[FR_SECTION_KINDS];
  c.map_size = context_layout(c, sections);

  // The private side tables first: if they fail there is no file to clean up.
  if (!map_private_tables(c)) return false;

  fr_log_header id = {};
  fill_identity(&id);
  struct timespec rt, mono;
  clock_gettime(CLOCK_REALTIME, &rt);
  clock_gettime(CLOCK_MONOTONIC, &mono);
  uint64_t create_ns = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;

  const char* dir = getenv("FR_LOG_DIR");
  if (dir == nullptr || dir[0] == '\0') dir = "/dev/shm";
  int n = snprintf(c.path, sizeof c.path, "%s/fr.%s.%s.%d.%llu%s", dir, id.job_id, id.hostname,
                   (int)getpid(), (unsigned long long)create_ns, FR_LOG_FILE_SUFFIX);
  if (n <= 0 || (size_t)n >= sizeof c.path) {
    debug_log("FR_LOG_DIR is too long; not recording");
    return false;
  }
  if (create_fitting_log(c, dir) != 0) return false;
  fill_header(c, id, create_ns, (uint64_t)mono.tv_sec * 1000000000ull + (uint64_t)mono.tv_nsec);
  if (uint32_t pending = __atomic_exchange_n(&g_log.pending_flags, 0u, __ATOMIC_RELAXED))
    set_log_flags(pending, 0);
  return true;
}

void log_forget_in_child() {
  LogState& c = g_log;
  if (c.map != nullptr) munmap(c.map, c.map_size);
  if (c.priv_map != nullptr) munmap(c.priv_map, c.priv_size);
  if (c.fd > 0) close(c.fd);
  const uint32_t pending = c.pending_flags;  // set before the child's log exists: it takes them
  c = LogState{};
  c.pending_flags = pending;
}

void set_log_flags(uint32_t set, uint32_t clear) {
  if (g_log.hdr == nullptr) {
    uint32_t v = __atomic_load_n(&g_log.pending_flags, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&g_log.pending_flags, &v, (v & ~clear) | set, true,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return;
  }
  if (clear) __atomic_fetch_and(&g_log.hdr->flags, ~clear, __ATOMIC_RELEASE);
  if (set) __atomic_fetch_or(&g_log.hdr->flags, set, __ATOMIC_RELEASE);
}

uint64_t record_begin(fr_record& r) {
  HeldRecord held;
  r.id = record_take_new(r.call_ns, &held);
  if (held.slot != nullptr) {
    fr_copy_words_in((uint64_t*)held.slot + 1, (const uint64_t*)&r + 1, sizeof(fr_record) / 8 - 1);
    record_release(held);
  }
  return r.id;
}

void record_update(const fr_record& r) {
  HeldRecord held;
  if (!record_take(r.id, &held)) return;
  fr_copy_words_in((uint64_t*)held.slot + 1, (const uint64_t*)&r + 1, sizeof(fr_record) / 8 - 1);
  record_release(held);
}

void record_modify(uint64_t id, void (*fn)(fr_record&, const void*), const void* arg) {
  HeldRecord held;
  if (!record_take(id, &held)) return;
  fr_record copy;
  fr_copy_words_out((uint64_t*)&copy + 1, (const uint64_t*)held.slot + 1,
                    sizeof(fr_record) / 8 - 1);
  fn(copy, arg);
  fr_copy_words_in((uint64_t*)held.slot + 1, (const uint64_t*)&copy + 1, sizeof(fr_record) / 8 - 1);
  record_release(held);
}

}  // namespace fr::agent
