// See proc_file.h.
#include "daemon/base/proc_file.h"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace fr::daemon {
namespace {

// A decimal number in [lo, hi]; false otherwise (empty, signs, trailing bytes, out of range).
bool parse_int(const std::string& s, long long lo, long long hi, long long* out) {
  if (s.empty() || s.size() > 20) return false;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t k = i; k < s.size(); ++k)
    if (s[k] < '0' || s[k] > '9') return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool parse_u64(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  errno = 0;
  unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno != 0) return false;
  *out = v;
  return true;
}

// The first of `names` that is set to a number in [lo, hi], else -1.
int first_number(const std::function<std::string(const char*)>& get,
                 std::initializer_list<const char*> names, long long lo, long long hi) {
  for (const char* n : names) {
    long long v = 0;
    if (parse_int(get(n), lo, hi, &v)) return int(v);
  }
  return -1;
}

}  // namespace

std::string proc_file_path(const std::string& log_dir, int pid) {
  return log_dir + "/" + kProcFilePrefix + std::to_string(pid);
}

int proc_file_pid(const std::string& name) {
  const std::string prefix = kProcFilePrefix;
  if (name.rfind(prefix, 0) != 0) return 0;
  long long v = 0;
  if (!parse_int(name.substr(prefix.size()), 1, INT_MAX, &v)) return 0;
  return int(v);
}

std::string proc_file_text(const ProcFile& p) {
  std::ostringstream o;
  o << "fr-proc/1\npid " << p.pid << "\nstart " << p.start_ticks << "\nrank " << p.rank
    << "\nworld_size " << p.world_size << "\njob " << p.job_id << "\n";
  return o.str();
}

bool parse_proc_file(const std::string& text, ProcFile* p, std::string* error) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != "fr-proc/1") {
    *error = "not an fr-proc/1 registration";
    return false;
  }
  ProcFile out;
  bool have_pid = false, have_start = false;
  while (std::getline(in, line)) {
    const size_t sp = line.find(' ');
    const std::string key = line.substr(0, sp);
    const std::string value = sp == std::string::npos ? "" : line.substr(sp + 1);
    long long v = 0;
    if (key == "pid" && parse_int(value, 1, INT_MAX, &v)) {
      out.pid = int(v);
      have_pid = true;
    } else if (key == "start" && parse_u64(value, &out.start_ticks)) {
      have_start = true;
    } else if (key == "rank" && parse_int(value, -1, 1 << 24, &v)) {
      out.rank = int(v);
    } else if (key == "world_size" && parse_int(value, -1, 1 << 24, &v)) {
      out.world_size = int(v);
    } else if (key == "job" && value.size() <= 256) {
      out.job_id = value;
    } else {
      *error = "bad line in an fr-proc/1 registration: " + line.substr(0, 64);
      return false;
    }
  }
  if (!have_pid || !have_start) {
    *error = "an fr-proc/1 registration without its pid or start time";
    return false;
  }
  *p = std::move(out);
  return true;
}

bool parse_torch_progress(const std::string& text, uint64_t* seq) {
  const std::string head = "fr-torch/1 seq ";
  if (text.rfind(head, 0) != 0) return false;
  std::string v = text.substr(head.size());
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return parse_u64(v, seq);
}

uint64_t process_start_ticks(int pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "re");
  if (!f) return 0;
  char buf[1024];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // The command name may hold spaces and parentheses: fields count from the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (!p) return 0;
  // Field 3 (state) follows ") "; starttime is field 22.
  int field = 2;
  for (++p; *p && field < 22; ++p)
    if (*p == ' ') ++field;
  if (field != 22) return 0;
  return std::strtoull(p, nullptr, 10);
}

ProcFile proc_file_from_env(const std::function<std::string(const char*)>& get) {
  ProcFile p;
  p.rank =
      first_number(get, {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, 0, 1 << 24);
  p.world_size = first_number(
      get, {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, 1, 1 << 24);
  for (const char* n : {"FR_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"}) {
    std::string v = get(n);
    if (!v.empty()) {
      p.job_id = v.substr(0, 256);
      break;
    }
  }
  for (char& c : p.job_id)
    if (c == '\n' || c == '\r') c = '_';
  return p;
}

}  // namespace fr::daemon
