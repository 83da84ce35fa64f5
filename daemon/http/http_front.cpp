// See http_front.h. The event loop owns every connection; the handler threads see only complete
// requests (by connection id) and hand back the reply's bytes through a queue and an eventfd.
#include "daemon/http/http_front.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace fr::daemon {

namespace {

constexpr uint64_t kListenId = 0, kWakeId = 1;
constexpr int64_t kSweepMs = 100;  // how often deadlines are looked at

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The address a connection came from, without its port (an IPv4-mapped IPv6 address as IPv4).
std::string peer_key(const sockaddr_storage& ss) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, text, sizeof text);
  } else if (ss.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a))
      inet_ntop(AF_INET, &a.s6_addr[12], text, sizeof text);
    else
      inet_ntop(AF_INET6, &a, text, sizeof text);
  }
  return text;
}

enum class Phase { kHandshake, kHead, kBusy, kWrite };

// What a read or write on a connection came to.
enum class Io { kDone, kWantRead, kWantWrite, kClosed };

struct Conn {
  uint64_t id = 0;
  int fd = -1;
  SSL* ssl = nullptr;
  std::string peer;
  Phase phase = Phase::kHead;
  int64_t head_deadline = 0, last_byte = 0, write_deadline = 0;
  std::string in, out;
  size_t out_off = 0;
  bool keep_alive = false;
  int served = 0;
  uint32_t events = 0;  // the epoll interest now
  std::list<uint64_t>::iterator all_it, peer_it;
};

struct Job {
  uint64_t id;
  bool keep_alive;
  HttpHead head;
};

struct Done {
  uint64_t id;
  bool keep_alive;
  std::string bytes;
};

}  // namespace

struct HttpFront::Impl {
  HttpLimits lim;
  Serve serve;
  SSL_CTX* tls = nullptr;
  int listen_fd = -1, ep = -1, wake = -1;
  std::thread loop;
  std::vector<std::thread> workers;
  std::atomic<bool> stopping{false};

  // The event loop's alone.
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
  std::list<uint64_t> order;  // every connection, oldest first
  std::unordered_map<std::string, std::list<uint64_t>> peers;
  uint64_t next_id = 2;
  int64_t accept_paused_until = 0;
  size_t handshaking = 0;  // connections in Phase::kHandshake

  // Shared with the handler threads.
  std::mutex mu;
  std::condition_variable cv;        // the page threads wait on it (for either lane)
  std::condition_variable first_cv;  // the priority thread waits on it (its lane only)
  std::deque<Job> jobs, urgent;      // pages; priority paths (served first)
  std::vector<Done> done;

  std::atomic<uint64_t> accepted{0}, served{0}, evicted{0}, timed_out{0}, refused{0}, busy{0};

  void run_loop();
  void run_worker(bool urgent_only);
  void accept_all(int64_t now);
  void admit(int fd, std::string peer, int64_t now);
  bool evict_from(const std::list<uint64_t>& ids, bool handshakes_only = false);
  void close_conn(uint64_t id);
  void take_replies(int64_t now);
  void sweep(int64_t now);
  bool progress(Conn& c, int64_t now);
  bool read_head(Conn& c, int64_t now);
  bool dispatch(Conn& c, HttpHead head, int64_t now);
  bool reply_now(Conn& c, int status, const std::string& body, int64_t now);
  bool write_out(Conn& c, int64_t now);
  void set_interest(Conn& c, uint32_t events);
  Io io_read(Conn& c, char* buf, size_t n, size_t* got);
  Io io_write(Conn& c, const char* buf, size_t n, size_t* put);
  Io ssl_outcome(Conn& c, int r);
};

HttpFront::HttpFront(const HttpLimits& limits, Serve serve) : impl_(std::make_unique<Impl>()) {
  impl_->lim = limits;
  impl_->serve = std::move(serve);
}

HttpFront::~HttpFront() { stop(); }

bool HttpFront::start(int listen_fd, SSL_CTX* tls, std::string* error) {
  Impl& m = *impl_;
  m.listen_fd = listen_fd;
  m.tls = tls;
  // Every connection costs a descriptor: leave at least half of them to the rest of frd.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    m.lim.max_connections =
        std::max<size_t>(1, std::min<size_t>(m.lim.max_connections, rl.rlim_cur / 2));
  m.ep = epoll_create1(EPOLL_CLOEXEC);
  m.wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event le{EPOLLIN, {.u64 = kListenId}}, we{EPOLLIN, {.u64 = kWakeId}};
  if (m.ep < 0 || m.wake < 0 || epoll_ctl(m.ep, EPOLL_CTL_ADD, listen_fd, &le) != 0 ||
      epoll_ctl(m.ep, EPOLL_CTL_ADD, m.wake, &we) != 0) {
    *error = std::string("HTTP listener: epoll: ") + strerror(errno);
    return false;
  }
  m.loop = std::thread([&m] { m.run_loop(); });
  pthread_setname_np(m.loop.native_handle(), "frd-http");
  for (int i = 0; i < std::max(1, m.lim.threads); ++i) {
    m.workers.emplace_back([&m] { m.run_worker(false); });
    pthread_setname_np(m.workers.back().native_handle(), "frd-http-page");
  }
  if (!m.lim.priority_paths.empty()) {
    m.workers.emplace_back([&m] { m.run_worker(true); });
    pthread_setname_np(m.workers.back().native_handle(), "frd-http-first");
  }
  return true;
}

void HttpFront::stop() {
  Impl& m = *impl_;
  if (!m.loop.joinable()) return;
  m.stopping = true;
  uint64_t one = 1;
  (void)!write(m.wake, &one, sizeof one);
  m.loop.join();
  m.cv.notify_all();
  m.first_cv.notify_all();
  for (auto& w : m.workers) w.join();
  m.workers.clear();
  for (int fd : {m.listen_fd, m.ep, m.wake})
    if (fd >= 0) close(fd);
  m.listen_fd = m.ep = m.wake = -1;
}

HttpStats HttpFront::stats() const {
  const Impl& m = *impl_;
  return {m.accepted.load(),  m.served.load(),  m.evicted.load(),
          m.timed_out.load(), m.refused.load(), m.busy.load()};
}

void HttpFront::Impl::run_loop() {
  // A write to a peer that has gone raises SIGPIPE in this thread (OpenSSL writes with write(2)):
  // blocked here, it stays pending on this thread and the write fails with EPIPE.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  epoll_event evs[256];
  int64_t last_sweep = now_ms();
  while (!stopping) {
    const int n = epoll_wait(ep, evs, 256, int(kSweepMs));
    int64_t now = now_ms();
    for (int i = 0; i < n && !stopping; ++i) {
      const uint64_t id = evs[i].data.u64;
      if (id == kListenId) {
        accept_all(now);
      } else if (id == kWakeId) {
        uint64_t count;
        (void)!read(wake, &count, sizeof count);
        take_replies(now);
      } else if (auto it = conns.find(id); it != conns.end()) {
        if ((evs[i].events & (EPOLLERR | EPOLLHUP)) || !progress(*it->second, now)) close_conn(id);
      }
    }
    now = now_ms();
    if (now - last_sweep >= kSweepMs) {
      sweep(now);
      last_sweep = now;
    }
    if (accept_paused_until && now >= accept_paused_until) {
      epoll_event le{EPOLLIN, {.u64 = kListenId}};
      epoll_ctl(ep, EPOLL_CTL_ADD, listen_fd, &le);
      accept_paused_until = 0;
    }
  }
  while (!conns.empty()) close_conn(conns.begin()->first);
}

// A page thread takes a priority request first, then a page; the priority thread only the first.
void HttpFront::Impl::run_worker(bool urgent_only) {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lk(mu);
      (urgent_only ? first_cv : cv).wait(lk, [&] {
        return stopping || !urgent.empty() || (!urgent_only && !jobs.empty());
      });
      if (stopping) return;
      std::deque<Job>& from = urgent.empty() ? jobs : urgent;
      job = std::move(from.front());
      from.pop_front();
    }
    HttpReply reply;
    try {
      reply = serve(job.head);
    } catch (...) {
      reply = HttpReply{500, "text/plain; charset=utf-8", "internal error\n", {}};
    }
    std::string bytes = write_reply(reply, job.keep_alive, job.head.method == "HEAD");
    {
      std::lock_guard<std::mutex> lk(mu);
      done.push_back({job.id, job.keep_alive, std::move(bytes)});
    }
    uint64_t one = 1;
    (void)!write(wake, &one, sizeof one);
  }
}

// At most a batch per turn, so that a flood of connects does not starve the connections held.
void HttpFront::Impl::accept_all(int64_t now) {
  for (int k = 0; k < 256; ++k) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    const int fd =
        accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      admit(fd, peer_key(ss), now);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      // Out of descriptors: stop accepting for a moment rather than spin on a listener that
      // stays readable.
      epoll_ctl(ep, EPOLL_CTL_DEL, listen_fd, nullptr);
      accept_paused_until = now + kSweepMs;
    }
    return;
  }
}

void HttpFront::Impl::admit(int fd, std::string peer, int64_t now) {
  ++accepted;
  std::list<uint64_t>& mine = peers[peer];  // lists are erased only by sweep(): the reference holds
  if ((mine.size() >= lim.per_peer && !evict_from(mine)) ||
      (conns.size() >= lim.max_connections && !evict_from(order))) {
    ++refused;
    close(fd);
    return;
  }
  auto c = std::make_unique<Conn>();
  c->id = next_id++;
  c->fd = fd;
  c->peer = std::move(peer);
  c->head_deadline = now + lim.head_ms;
  c->last_byte = now;
  if (tls && handshaking >= lim.max_handshakes) evict_from(order, true);
  if (tls) {
    c->ssl = SSL_new(tls);
    if (!c->ssl || SSL_set_fd(c->ssl, fd) != 1) {
      if (c->ssl) SSL_free(c->ssl);
      close(fd);
      return;
    }
    SSL_set_accept_state(c->ssl);
    // Its read and write buffers (about 34 KiB) are let go whenever they are empty, as they are
    // in a handshake the peer left half done.
    SSL_set_mode(c->ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                             SSL_MODE_RELEASE_BUFFERS);
    c->phase = Phase::kHandshake;
    ++handshaking;
  }
  c->events = EPOLLIN;
  epoll_event ev{EPOLLIN, {.u64 = c->id}};
  if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
    if (c->ssl) SSL_free(c->ssl);
    close(fd);
    return;
  }
  c->all_it = order.insert(order.end(), c->id);
  c->peer_it = mine.insert(mine.end(), c->id);
  Conn& ref = *c;
  conns.emplace(c->id, std::move(c));
  // A well-behaved client's request is usually here already: read it before anything can evict it.
  if (!progress(ref, now)) close_conn(ref.id);
}

// Closes the oldest of `ids` still waiting for its request (or still in its TLS handshake,
// with `handshakes_only`); false when none is.
bool HttpFront::Impl::evict_from(const std::list<uint64_t>& ids, bool handshakes_only) {
  for (uint64_t id : ids) {
    const Conn& c = *conns.at(id);
    if (c.phase == Phase::kHandshake || (c.phase == Phase::kHead && !handshakes_only)) {
      close_conn(id);
      ++evicted;
      return true;
    }
  }
  return false;
}

void HttpFront::Impl::close_conn(uint64_t id) {
  auto it = conns.find(id);
  if (it == conns.end()) return;
  Conn& c = *it->second;
  if (c.phase == Phase::kHandshake) --handshaking;
  if (c.ssl) {
    ERR_clear_error();
    SSL_shutdown(c.ssl);  // one try at close_notify, never a wait
    SSL_free(c.ssl);
  }
  epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
  close(c.fd);
  order.erase(c.all_it);
  peers[c.peer].erase(c.peer_it);
  conns.erase(it);
}

void HttpFront::Impl::take_replies(int64_t now) {
  std::vector<Done> ready;
  {
    std::lock_guard<std::mutex> lk(mu);
    ready.swap(done);
  }
  for (Done& d : ready) {
    auto it = conns.find(d.id);
    if (it == conns.end()) continue;  // the client went while its page was made
    Conn& c = *it->second;
    c.out = std::move(d.bytes);
    c.out_off = 0;
    c.keep_alive = d.keep_alive;
    c.phase = Phase::kWrite;
    c.write_deadline = now + lim.write_ms;
    if (!write_out(c, now)) close_conn(d.id);
  }
}

void HttpFront::Impl::sweep(int64_t now) {
  std::vector<uint64_t> expired;
  for (const auto& [id, c] : conns) {
    const bool waiting = c->phase == Phase::kHandshake || c->phase == Phase::kHead;
    if ((waiting && (now >= c->head_deadline || now - c->last_byte >= lim.idle_ms)) ||
        (c->phase == Phase::kWrite && now >= c->write_deadline))
      expired.push_back(id);
  }
  for (uint64_t id : expired) close_conn(id);
  timed_out += expired.size();
  for (auto it = peers.begin(); it != peers.end();)
    it = it->second.empty() ? peers.erase(it) : std::next(it);
}

bool HttpFront::Impl::progress(Conn& c, int64_t now) {
  if (c.phase == Phase::kHandshake) {
    ERR_clear_error();
    const int r = SSL_accept(c.ssl);
    if (r != 1) {
      const Io io = ssl_outcome(c, r);
      if (io == Io::kClosed) return false;
      set_interest(c, io == Io::kWantWrite ? EPOLLOUT : EPOLLIN);
      return true;
    }
    c.phase = Phase::kHead;
    --handshaking;
  }
  switch (c.phase) {
    case Phase::kHead: return read_head(c, now);
    case Phase::kWrite: return write_out(c, now);
    default: set_interest(c, 0); return true;
  }
}

bool HttpFront::Impl::read_head(Conn& c, int64_t now) {
  for (;;) {
    HttpHead head;
    size_t used = 0;
    switch (parse_head(c.in, lim.max_head, &head, &used)) {
      case HeadStatus::kComplete: c.in.erase(0, used); return dispatch(c, std::move(head), now);
      case HeadStatus::kTooLarge: return reply_now(c, 431, "the request head is too large\n", now);
      case HeadStatus::kMalformed: return reply_now(c, 400, "malformed request\n", now);
      case HeadStatus::kIncomplete: break;
    }
    char buf[4096];
    size_t got = 0;
    const Io io = io_read(c, buf, std::min(sizeof buf, lim.max_head - c.in.size()), &got);
    if (io == Io::kClosed) return false;
    if (io != Io::kDone) {
      set_interest(c, io == Io::kWantWrite ? EPOLLOUT : EPOLLIN);
      return true;
    }
    c.in.append(buf, got);
    c.last_byte = now;
  }
}

bool HttpFront::Impl::dispatch(Conn& c, HttpHead head, int64_t now) {
  if (head.has_body) return reply_now(c, 413, "this listener takes no request bodies\n", now);
  if (head.method != "GET" && head.method != "HEAD")
    return reply_now(c, 405, "only GET and HEAD\n", now);
  ++c.served;
  const bool keep = head.keep_alive && c.served < lim.keep_alive_max;
  const bool first = std::find(lim.priority_paths.begin(), lim.priority_paths.end(), head.path) !=
                     lim.priority_paths.end();
  {
    std::lock_guard<std::mutex> lk(mu);
    std::deque<Job>& lane = first ? urgent : jobs;
    if (lane.size() < lim.queue) {
      lane.push_back({c.id, keep, std::move(head)});
      // Each lane wakes only threads that take it: a wake-up never lands on a thread that
      // goes back to sleep (the priority thread on a page), leaving the request unserved.
      if (first) first_cv.notify_one();
      cv.notify_one();
      ++served;
      c.phase = Phase::kBusy;
      set_interest(c, 0);
      return true;
    }
  }
  ++busy;
  return reply_now(c, 503, "busy: try again\n", now);
}

// A reply of the front's own (an error); the connection closes after it.
bool HttpFront::Impl::reply_now(Conn& c, int status, const std::string& body, int64_t now) {
  HttpReply r;
  r.status = status;
  r.body = body;
  c.out = write_reply(r, false, false);
  c.out_off = 0;
  c.keep_alive = false;
  c.phase = Phase::kWrite;
  c.write_deadline = now + lim.write_ms;
  return write_out(c, now);
}

bool HttpFront::Impl::write_out(Conn& c, int64_t now) {
  while (c.out_off < c.out.size()) {
    size_t put = 0;
    const Io io = io_write(c, c.out.data() + c.out_off, c.out.size() - c.out_off, &put);
    if (io == Io::kClosed) return false;
    if (io != Io::kDone) {
      set_interest(c, io == Io::kWantRead ? EPOLLIN : EPOLLOUT);
      return true;
    }
    c.out_off += put;
  }
  if (!c.keep_alive) return false;
  c.out.clear();
  c.out_off = 0;
  c.phase = Phase::kHead;
  c.head_deadline = now + lim.head_ms;
  c.last_byte = now;
  return read_head(c, now);  // a request sent ahead, or one TLS holds decrypted already
}

void HttpFront::Impl::set_interest(Conn& c, uint32_t events) {
  if (c.events == events) return;
  epoll_event ev{events, {.u64 = c.id}};
  epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
  c.events = events;
}

Io HttpFront::Impl::ssl_outcome(Conn& c, int r) {
  switch (SSL_get_error(c.ssl, r)) {
    case SSL_ERROR_WANT_READ: return Io::kWantRead;
    case SSL_ERROR_WANT_WRITE: return Io::kWantWrite;
    default: return Io::kClosed;
  }
}

Io HttpFront::Impl::io_read(Conn& c, char* buf, size_t n, size_t* got) {
  if (c.ssl) {
    ERR_clear_error();
    const int r = SSL_read(c.ssl, buf, int(n));
    if (r > 0) *got = size_t(r);
    return r > 0 ? Io::kDone : ssl_outcome(c, r);
  }
  for (;;) {
    const ssize_t r = recv(c.fd, buf, n, 0);
    if (r > 0) *got = size_t(r);
    if (r > 0) return Io::kDone;
    if (r < 0 && errno == EINTR) continue;
    return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? Io::kWantRead : Io::kClosed;
  }
}

Io HttpFront::Impl::io_write(Conn& c, const char* buf, size_t n, size_t* put) {
  if (c.ssl) {
    ERR_clear_error();
    const int r = SSL_write(c.ssl, buf, int(std::min<size_t>(n, 1 << 20)));
    if (r > 0) *put = size_t(r);
    return r > 0 ? Io::kDone : ssl_outcome(c, r);
  }
  for (;;) {
    const ssize_t r = send(c.fd, buf, n, MSG_NOSIGNAL);
    if (r >= 0) *put = size_t(r);
    if (r >= 0) return Io::kDone;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? Io::kWantWrite : Io::kClosed;
  }
}

}  // namespace fr::daemon
