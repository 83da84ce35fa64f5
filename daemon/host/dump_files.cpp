// See dump_files.h.
#include "daemon/host/dump_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "daemon/base/crc32c.h"
#include "log/manifest.h"
#include "log/safe_file.h"

namespace fr::daemon {

void remove_dir(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") ::unlink((dir + "/" + n).c_str());
    }
    closedir(d);
  }
  ::rmdir(dir.c_str());
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") out.push_back(n);
    }
    closedir(d);
  }
  return out;
}

bool file_crc(const std::string& path, uint64_t* size, uint32_t* crc) {
  fr::log::OpenedFile f = fr::log::open_regular(path);
  return f.ok() && crc32c_fd(f.fd.get(), size, crc);
}

// Copies `from` to `to` (created, never overwritten), checking the copy's size and checksum.
bool copy_checked(const std::string& from, const std::string& to, const DumpFile& f,
                  std::string* error) {
  fr::log::OpenedFile src = fr::log::open_regular(from);
  if (!src.ok()) {
    *error = "cannot read " + src.message;
    return false;
  }
  const int in = src.fd.get();
  int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) {
    *error = "cannot create " + to + ": " + std::strerror(errno);
    return false;
  }
  std::string buf(1 << 20, '\0');
  uint64_t size = 0;
  uint32_t crc = 0;
  bool ok = true;
  for (;;) {
    ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ok = false;
    if (n <= 0) break;
    crc = crc32c(crc, buf.data(), size_t(n));
    size += uint64_t(n);
    for (ssize_t done = 0; ok && done < n;) {
      ssize_t w = ::write(out, buf.data() + done, size_t(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0)
        ok = false;
      else
        done += w;
    }
    if (!ok) break;
  }
  if (ok && ::fsync(out) != 0) ok = false;
  if (!ok) *error = "cannot write " + to + ": " + std::strerror(errno);
  ::close(out);
  if (ok && (size != f.size || crc != f.crc32c)) {
    *error = from + " changed in the spool";
    ok = false;
  }
  return ok;
}

nlohmann::json dump_header_json(const DumpHeader& h) {
  nlohmann::json files = nlohmann::json::array(), procs = nlohmann::json::array(),
                 skipped = nlohmann::json::array();
  for (const auto& f : h.files)
    files.push_back({{"name", f.name}, {"size", f.size}, {"crc32c", f.crc32c}});
  for (const auto& p : h.processes) procs.push_back(p);
  for (const auto& s : h.skipped) skipped.push_back(s);
  return {{"incident_id", h.incident_id},
          {"node_name", h.node_name},
          {"job_id", h.job_id},
          {"snapshot_time_ns", h.snapshot_time_ns},
          {"files", files},
          {"processes", procs},
          {"skipped", skipped}};
}

bool dump_header_from_json(const nlohmann::json& j, DumpHeader* h) {
  try {
    h->incident_id = j.at("incident_id").get<std::string>();
    h->node_name = j.at("node_name").get<std::string>();
    h->snapshot_time_ns = j.at("snapshot_time_ns").get<int64_t>();
    h->job_id = j.value("job_id", std::string());
    for (const auto& f : j.at("files"))
      h->files.push_back({f.at("name").get<std::string>(), f.at("size").get<uint64_t>(),
                          f.at("crc32c").get<uint32_t>()});
    // The node's own file: every field of every entry must be there.
    for (const auto& p : j.at("processes"))
      if (!fr::log::from_json(p, &h->processes.emplace_back())) return false;
    for (const auto& s : j.at("skipped"))
      if (!fr::log::from_json(s, &h->skipped.emplace_back())) return false;
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace fr::daemon
