// fr-run's flags, defaults and the command's environment (see options.h).
#include "options.h"

#include <signal.h>

#include <cctype>
#include <cstdlib>
#include <sstream>
#include <utility>

namespace fr::run {
namespace {

struct Flag {
  const char* name;
  std::string Options::*field;
};

const Flag kValueFlags[] = {
    {"--coordinator", &Options::coordinator}, {"--job-id", &Options::job_id},
    {"--log-dir", &Options::log_dir},         {"--token-file", &Options::token_file},
    {"--node-name", &Options::node_name},     {"--agent", &Options::agent},
    {"--frd", &Options::frd},                 {"--daemon-log", &Options::daemon_log},
    {"--daemon-exit-when-idle", &Options::daemon_exit_when_idle},
};

// A number of seconds, 0 or more.
bool seconds_value(const std::string& v) {
  char* end = nullptr;
  const double s = std::strtod(v.c_str(), &end);
  return end != v.c_str() && *end == '\0' && s >= 0 && s <= 1e7;
}

std::string get(const Env& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

void fill(std::string* field, const std::string& value) {
  if (field->empty()) *field = value;
}

}  // namespace

bool parse_args(const std::vector<std::string>& args, Options* o, std::string* error) {
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.size() < 2 || a[0] != '-') break;  // the command
    if (a == "-h" || a == "--help") {
      o->help = true;
      return true;
    }
    if (a == "--version") {
      o->version = true;
      return true;
    }
    if (a == "--no-daemon") {
      o->no_daemon = true;
      continue;
    }
    if (a == "--verbose" || a == "-v") {
      o->verbose = true;
      continue;
    }
    std::string name = a, value;
    bool inline_value = false;
    if (size_t eq = a.find('='); eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      inline_value = true;
    }
    std::string* target = nullptr;
    for (const Flag& f : kValueFlags)
      if (name == f.name) target = &(o->*f.field);
    bool is_frd_arg = name == "--frd-arg";
    bool is_death = name == "--parent-death-signal";
    if (!target && !is_frd_arg && !is_death) {
      *error = "unknown flag " + name + " (put the command after --)";
      return false;
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) {
        *error = name + " needs a value";
        return false;
      }
      value = args[++i];
    }
    if (value.empty() && !is_frd_arg) {
      *error = name + " needs a non-empty value";
      return false;
    }
    if (is_death) {
      o->parent_death_signal = parse_signal_name(value);
      if (o->parent_death_signal < 0) {
        *error = "--parent-death-signal " + value + ": not a signal (KILL, TERM, ..., or none)";
        return false;
      }
    } else if (is_frd_arg) {
      o->frd_args.push_back(value);
    } else {
      *target = value;
    }
  }
  if (!seconds_value(o->daemon_exit_when_idle)) {
    *error = "--daemon-exit-when-idle " + o->daemon_exit_when_idle + ": not a number of seconds (0: never)";
    return false;
  }
  o->command.assign(args.begin() + std::min(i, args.size()), args.end());
  if (o->command.empty()) {
    *error = "no command: fr-run [flags] -- CMD ARGS...";
    return false;
  }
  return true;
}

int parse_signal_name(const std::string& v) {
  if (v == "none" || v == "0") return 0;
  static const std::pair<const char*, int> kNames[] = {
      {"KILL", SIGKILL}, {"TERM", SIGTERM}, {"INT", SIGINT},   {"HUP", SIGHUP},
      {"QUIT", SIGQUIT}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}};
  const std::string name = v.rfind("SIG", 0) == 0 ? v.substr(3) : v;
  for (const auto& [n, s] : kNames)
    if (name == n) return s;
  if (!v.empty() && v.size() <= 2 && std::isdigit(static_cast<unsigned char>(v[0])) &&
      std::isdigit(static_cast<unsigned char>(v.back()))) {
    int s = std::stoi(v);
    if (s >= 1 && s <= 64) return s;
  }
  return -1;
}

std::string default_token_file(const Env& env, unsigned uid) {
  std::string base = get(env, "XDG_RUNTIME_DIR");
  if (base.empty()) base = "/tmp";
  return base + "/frd-" + std::to_string(uid) + "/token";
}

void resolve(Options* o, const Env& env, const std::string& exe_dir, unsigned uid,
             bool (*token_exists)(const std::string& path)) {
  fill(&o->coordinator, get(env, "FR_COORDINATOR"));
  fill(&o->job_id, get(env, "FR_JOB_ID"));
  fill(&o->log_dir, get(env, "FR_LOG_DIR"));
  fill(&o->log_dir, "/dev/shm");
  while (o->log_dir.size() > 1 && o->log_dir.back() == '/') o->log_dir.pop_back();
  fill(&o->token_file, get(env, "FR_TOKEN_FILE"));
  if (o->token_file.empty()) {
    std::string def = default_token_file(env, uid);
    if (token_exists && token_exists(def)) o->token_file = def;
  }
  fill(&o->agent, get(env, "FR_AGENT"));
  fill(&o->agent, exe_dir + "/../lib/libfr_agent.so");
  fill(&o->frd, exe_dir + "/frd");
  fill(&o->daemon_log, o->log_dir + "/frd-node.log");
}

Env child_env(const Options& o, const Env& env, bool agent_ok) {
  Env out = env;
  if (agent_ok) {
    std::string old = get(env, "LD_PRELOAD");
    // ld.so splits LD_PRELOAD on spaces and colons; keep the agent once, first.
    bool present = false;
    std::string item;
    for (size_t k = 0; k <= old.size(); ++k) {
      if (k == old.size() || old[k] == ':' || old[k] == ' ') {
        present = present || item == o.agent;
        item.clear();
      } else {
        item += old[k];
      }
    }
    if (!present) out["LD_PRELOAD"] = old.empty() ? o.agent : o.agent + ":" + old;
    // The agent is also NCCL's profiler plugin (channel progress, docs/agent.md). A user who set
    // NCCL_PROFILER_PLUGIN (another plugin, or "none") keeps it: NCCL loads one plugin only.
    if (get(env, "NCCL_PROFILER_PLUGIN").empty()) out["NCCL_PROFILER_PLUGIN"] = o.agent;
  }
  out["FR_LOG_DIR"] = o.log_dir;
  if (!o.job_id.empty()) out["FR_JOB_ID"] = o.job_id;
  return out;
}

std::vector<std::string> frd_node_argv(const Options& o) {
  std::vector<std::string> argv = {o.frd, "node", "--coordinator", o.coordinator, "--log-dir",
                                   o.log_dir};
  if (!o.token_file.empty()) argv.insert(argv.end(), {"--token-file", o.token_file});
  if (!o.node_name.empty()) argv.insert(argv.end(), {"--node-name", o.node_name});
  // Before the user's --frd-arg flags: a later --exit-when-idle among them wins.
  argv.insert(argv.end(), {"--exit-when-idle", o.daemon_exit_when_idle});
  argv.insert(argv.end(), o.frd_args.begin(), o.frd_args.end());
  return argv;
}

std::string usage_text() {
  std::ostringstream s;
  s << "fr-run: run a command with the fr flight recorder, and a node daemon for this node\n"
       "usage: fr-run [flags] -- CMD ARGS...\n"
       "  --coordinator ADDR   the job's frd coordinator (env FR_COORDINATOR); without it no node\n"
       "                       daemon is started and the flight logs are only written\n"
       "  --job-id ID          the job id (env FR_JOB_ID; else TORCHELASTIC_RUN_ID, SLURM_JOB_ID)\n"
       "  --log-dir DIR        flight logs (env FR_LOG_DIR, default /dev/shm)\n"
       "  --token-file F       token for the node daemon (env FR_TOKEN_FILE; default\n"
       "                       ${XDG_RUNTIME_DIR:-/tmp}/frd-<uid>/token when it exists)\n"
       "  --node-name NAME     the node daemon's name (default: the host name)\n"
       "  --frd-arg ARG        one more argument for `frd node` (repeatable: TLS, --stall-after)\n"
       "  --agent PATH         libfr_agent.so (env FR_AGENT; default ../lib next to fr-run)\n"
       "  --frd PATH           frd (default: next to fr-run)\n"
       "  --daemon-log FILE    the started node daemon's output (default LOG_DIR/frd-node.log)\n"
       "  --daemon-exit-when-idle SEC  the node daemon started leaves after SEC without a live\n"
       "                       flight log or an fr-run on this node (default 60; 0: never)\n"
       "  --no-daemon          never start a node daemon\n"
       "  --parent-death-signal SIG  what CMD gets if fr-run dies, even by SIGKILL (KILL by\n"
       "                       default; TERM, INT, HUP, ...; none: CMD lives on)\n"
       "  --verbose            say what fr-run did, on stderr\n"
       "  --version            print the version\n"
       "Exit status: CMD's own; 128+N when CMD was killed by signal N; 127 CMD not found,\n"
       "126 CMD not executable, 2 bad usage.\n";
  return s.str();
}

}  // namespace fr::run
