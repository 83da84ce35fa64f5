// See gpu_sampler.h.
#include "daemon/host/gpu_sampler.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>

#include "daemon/base/model.h"
#include "fr/flight_log.h"

namespace fr::daemon {

namespace {

uint64_t word_at(const unsigned char* entry, size_t offset) {
  uint64_t v;
  std::memcpy(&v, entry + offset, sizeof v);
  return v;
}

// An entry must reach its completed counter to be sampled (every version that has one does).
constexpr size_t kEntryNeeds = offsetof(fr_comm_entry, gpu_completed) + sizeof(uint64_t);

}  // namespace

GpuSampler::GpuSampler(std::string log_dir, int64_t period_ns, Limits limits)
    : log_dir_(std::move(log_dir)),
      period_ns_(std::max<int64_t>(1000, period_ns)),
      limits_(limits) {
  limits_.ops = std::max<size_t>(1, limits_.ops);
  real_minus_mono_ = real_ns() - mono_ns();
}

GpuSampler::~GpuSampler() { stop(); }

void GpuSampler::start() {
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { run(); });
}

void GpuSampler::stop() {
  {
    std::lock_guard<std::mutex> lk(run_mu_);
    stopping_ = true;
  }
  run_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GpuSampler::run() {
  std::unique_lock<std::mutex> lk(run_mu_);
  int64_t next = mono_ns();
  while (!stopping_) {
    lk.unlock();
    sample(mono_ns());
    lk.lock();
    // Fixed ticks (not period after the pass): a pass's own time does not stretch the period.
    next += period_ns_;
    const int64_t now = mono_ns();
    if (next < now) next = now;  // behind (the machine was busy): no burst to catch up
    run_cv_.wait_for(lk, std::chrono::nanoseconds(next - now), [this] { return stopping_; });
  }
}

void GpuSampler::set_logs(const std::vector<SampledLog>& logs) {
  real_minus_mono_ = real_ns() - mono_ns();
  std::vector<LogSlot> next;
  next.reserve(std::min(logs.size(), limits_.logs));
  std::lock_guard<std::mutex> lk(mu_);
  for (const SampledLog& l : logs) {
    if (next.size() >= limits_.logs) break;
    if (l.comm_size < kEntryNeeds || l.comm_offset == 0) continue;  // no counters to sample
    const uint32_t count = uint32_t(std::min<size_t>(l.comm_count, limits_.comms));
    auto old = std::find_if(slots_.begin(), slots_.end(), [&](const LogSlot& s) {
      return s.log.name == l.name && s.log.dev == l.dev && s.log.ino == l.ino &&
             s.log.comm_offset == l.comm_offset && s.log.comm_size == l.comm_size;
    });
    LogSlot s;
    if (old != slots_.end()) {
      s = std::move(*old);  // keeps its descriptor (closed when the file went away) and its times
    } else {
      fr::log::OpenedFile f = fr::log::open_regular(log_dir_ + "/" + l.name);
      if (!f.ok() || f.st.st_dev != l.dev || f.st.st_ino != l.ino) continue;
      s.fd = std::move(f.fd);
    }
    s.log = l;
    s.log.comm_count = count;
    s.comms.resize(count);
    for (CommSlot& c : s.comms)
      if (c.ring.size() != limits_.ops) c.ring.assign(limits_.ops, OpTime{});
    s.buf.resize(size_t(count) * l.comm_size);
    next.push_back(std::move(s));
  }
  slots_ = std::move(next);  // the logs not listed again are closed here
}

void GpuSampler::sample(int64_t now_mono_ns) {
  std::lock_guard<std::mutex> lk(mu_);
  for (LogSlot& s : slots_)
    if (s.fd.valid()) sample_log(s, now_mono_ns);
  passes_.fetch_add(1, std::memory_order_relaxed);
}

void GpuSampler::sample_log(LogSlot& s, int64_t now) {
  if (s.buf.empty()) return;
  const ssize_t got = pread(s.fd.get(), s.buf.data(), s.buf.size(), off_t(s.log.comm_offset));
  if (got != ssize_t(s.buf.size())) {  // truncated or unreadable: not sampled again
    s.fd.reset();
    return;
  }
  for (size_t i = 0; i < s.comms.size(); ++i) {
    const unsigned char* e = s.buf.data() + i * s.log.comm_size;
    CommSlot& c = s.comms[i];
    const uint64_t lock = word_at(e, offsetof(fr_comm_entry, lock));
    const uint64_t id = word_at(e, offsetof(fr_comm_entry, id));
    const uint64_t enq = word_at(e, offsetof(fr_comm_entry, op_index));
    const uint64_t started = word_at(e, offsetof(fr_comm_entry, gpu_started));
    const uint64_t completed = word_at(e, offsetof(fr_comm_entry, gpu_completed));
    if ((lock & 1) || id == 0) continue;  // being registered
    if (c.id != id) {  // a new communicator in this entry: nothing of the old one is kept
      c.id = id;
      c.primed = false;
      std::fill(c.ring.begin(), c.ring.end(), OpTime{});
    }
    // Counters that do not add up (a read that caught a word in change, a writer gone astray):
    // this sample says nothing.
    if (completed > started || started > enq) continue;
    if (!c.primed || started < c.started || completed < c.completed) {
      c.primed = true;  // where the counters stand; what came before is not timed
      c.started = started;
      c.completed = completed;
      continue;
    }
    note(c, c.started, started, now, false);
    note(c, c.completed, completed, now, true);
    c.started = started;
    c.completed = completed;
  }
}

void GpuSampler::note(CommSlot& c, uint64_t from, uint64_t to, int64_t now, bool completed) const {
  if (to <= from) return;
  const uint64_t n = c.ring.size();
  for (uint64_t i = std::max(from + 1, to > n ? to - n + 1 : 1); i <= to; ++i) {
    OpTime& t = c.ring[i % n];
    if (t.index != i) t = OpTime{i, 0, 0};
    (completed ? t.completed : t.started) = now;
  }
}

GpuOpTimes GpuSampler::times(const std::string& name, uint64_t comm_id, uint64_t op_index) const {
  GpuOpTimes out;
  if (op_index == 0) return out;
  std::lock_guard<std::mutex> lk(mu_);
  for (const LogSlot& s : slots_) {
    if (s.log.name != name) continue;
    for (const CommSlot& c : s.comms) {
      if (c.id != comm_id || c.ring.empty()) continue;
      const OpTime& t = c.ring[op_index % c.ring.size()];
      if (t.index != op_index) return out;
      const int64_t off = real_minus_mono_.load();
      if (t.started) out.started_ns = t.started + off;
      if (t.completed) out.completed_ns = t.completed + off;
      return out;
    }
  }
  return out;
}

size_t GpuSampler::logs_sampled() const {
  std::lock_guard<std::mutex> lk(mu_);
  size_t n = 0;
  for (const LogSlot& s : slots_) n += s.fd.valid();
  return n;
}

}  // namespace fr::daemon
