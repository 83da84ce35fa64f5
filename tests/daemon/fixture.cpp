// See fixture.h.
#include "fixture.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "testing/clock.h"

namespace fr::daemon::test {

void remove_tree(const std::string& p) {
  struct stat st;
  if (lstat(p.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    if (DIR* d = opendir(p.c_str())) {
      while (dirent* e = readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") remove_tree(p + "/" + n);
      }
      closedir(d);
    }
    rmdir(p.c_str());
  } else {
    unlink(p.c_str());
  }
}

fr::log::LogFile make_log(const FakeLog& f) {
  fr::log::LogFile log;
  fr_log_header& h = log.header;
  h.magic = FR_LOG_MAGIC;
  h.version = FR_LOG_VERSION;
  h.pid = f.pid;
  h.global_rank = f.rank;
  h.world_size = f.world_size;
  h.local_rank = f.rank;
  h.flags = f.flags;
  uint64_t now = fr::test::now_real_ns();
  h.create_ns = now - 60'000'000'000ull;
  h.heartbeat_ns = now;
  std::strncpy(h.job_id, f.job.c_str(), FR_NAME_LEN - 1);
  std::strncpy(h.hostname, f.host.c_str(), FR_NAME_LEN - 1);
  std::strncpy(h.exe, "train", FR_NAME_LEN - 1);
  fr_comm_entry c{};
  c.id = f.comm_id;
  c.size = f.world_size;
  c.rank = f.rank;
  c.cuda_dev = f.rank;
  c.origin = FR_ORIGIN_INIT_RANK;
  c.state = f.comm_state;
  uint64_t completed = 0, enqueued = 0, seq = 0;
  for (const auto& op : f.ops) {
    enqueued = std::max(enqueued, op.op_index);
    seq = std::max(seq, op.seq);
    if (op.completed && op.op_index > completed) completed = op.op_index;
  }
  c.coll_seq = seq;
  c.op_index = enqueued;
  c.gpu_started = completed;
  c.gpu_completed = completed;
  log.comms.push_back(c);
  uint64_t id = 0;
  for (const auto& op : f.ops) {
    fr::log::Record r{};
    r.raw.id = id++;
    r.raw.comm_id = f.comm_id;
    r.raw.seq = op.seq;
    r.raw.op_index = op.op_index;
    r.raw.op = op.op;
    r.raw.count = 1024;
    r.raw.dtype = 7;
    r.raw.redop = 0;
    r.raw.peer = -1;
    r.raw.call_ns = now - uint64_t(op.age_ns);
    r.raw.flags = op.in_call ? FR_REC_F_IN_CALL : FR_REC_F_LAUNCHED;
    r.raw.result = op.in_call ? FR_RESULT_PENDING : 0;
    r.raw.gpu_state = op.completed ? FR_GPU_COMPLETED : FR_GPU_ENQUEUED;
    r.gpu_state = static_cast<fr_gpu_state>(r.raw.gpu_state);
    log.records.push_back(r);
  }
  h.record_counter = id;
  log.writer_alive = f.alive;
  return log;
}

std::string write_log(const std::string& dir, const std::string& name, const FakeLog& f) {
  std::string bytes = fr::log::encode_snapshot(make_log(f), fr::test::now_real_ns());
  std::string path = dir + "/" + name;
  std::string tmp = path + ".tmp";
  {
    std::ofstream o(tmp, std::ios::binary);
    o.write(bytes.data(), std::streamsize(bytes.size()));
  }
  std::rename(tmp.c_str(), path.c_str());
  return path;
}

double rss_mib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

fr::daemon::CoordinatorConfig config(const std::string& dir) {
  using fr::test::kSec;
  fr::daemon::CoordinatorConfig c;
  c.dump_dir = dir;
  c.job_id = "job1";
  c.stall_after_ns = 2 * kSec;
  c.heartbeat_timeout_ns = 5 * kSec;
  c.dump_deadline_ns = 10 * kSec;
  c.dead_grace_ns = 1 * kSec;
  return c;
}

int connect_loopback(int port, const std::string& source) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (!source.empty()) {
    inet_pton(AF_INET, source.c_str(), &a.sin_addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      close(fd);
      return -1;
    }
  }
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string http_get(int port, const std::string& path, const std::string& headers) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const std::string req = "GET " + path + " HTTP/1.0\r\n" + headers + "\r\n";
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      write(fd, req.data(), req.size()) != ssize_t(req.size())) {
    close(fd);
    return "";
  }
  std::string resp;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) resp.append(buf, size_t(n));
  close(fd);
  return resp;
}

}  // namespace fr::daemon::test
