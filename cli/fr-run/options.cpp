// fr-run's flags, defaults and the command's environment (see options.h). The flags are CLI11
// options, as frd's and fr-analyze's; a pass of fr-run's own before CLI11 finds where the command
// starts and keeps fr-run's reading of empty values, short flags and flag values (split_args).
#include "options.h"

#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <utility>

#include <CLI/CLI.hpp>

namespace fr::run {
namespace {

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

// The usage line and the exit statuses around CLI11's list of flags.
class Help : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "usage: fr-run [flags] -- CMD ARGS...\n";
  }
};

// fr-run's flags as CLI11 options over `o`. --parent-death-signal is kept as given, every
// occurrence (`signals`), and checked in order afterwards.
struct Flags {
  CLI::App app{"fr-run: run a command with the fr flight recorder, and a node daemon for this node",
               "fr-run"};
  CLI::Option* version = nullptr;
  CLI::Option* frd_arg = nullptr;
  std::vector<std::string> signals;

  explicit Flags(Options* o) {
    app.formatter(std::make_shared<Help>());
    app.get_formatter()->column_width(32);
    app.footer(
        "Exit status: CMD's own; 128+N when CMD was killed by signal N; 127 CMD not found,\n"
        "126 CMD not executable, 2 bad usage.");
    app.set_help_flag("-h,--help", "print this help");
    // Value flags: the last one given counts. Descriptions break at about 100 columns.
    auto value = [&](const char* name, std::string* field, const char* text, const char* help) {
      app.add_option(name, *field, help)
          ->option_text(text)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    };
    value("--coordinator", &o->coordinator, "ADDR",
          "the job's frd coordinator (env FR_COORDINATOR); without it no\n"
          "node daemon is started and the flight logs are only written");
    value("--job-id", &o->job_id, "ID",
          "the job id (env FR_JOB_ID; else TORCHELASTIC_RUN_ID, SLURM_JOB_ID)");
    value("--log-dir", &o->log_dir, "DIR", "flight logs (env FR_LOG_DIR, default /dev/shm)");
    value("--token-file", &o->token_file, "F",
          "token for the node daemon (env FR_TOKEN_FILE; default\n"
          "${XDG_RUNTIME_DIR:-/tmp}/frd-<uid>/token when it exists)");
    value("--node-name", &o->node_name, "NAME", "the node daemon's name (default: the host name)");
    frd_arg = app.add_option("--frd-arg", o->frd_args,
                             "one more argument for `frd node` (repeatable: TLS, --stall-after)")
                  ->option_text("ARG")
                  ->allow_extra_args(false);
    value("--agent", &o->agent, "PATH",
          "libfr_agent.so (env FR_AGENT; default ../lib next to fr-run)");
    value("--frd", &o->frd, "PATH", "frd (default: next to fr-run)");
    value("--daemon-log", &o->daemon_log, "FILE",
          "the started node daemon's output (default LOG_DIR/frd-node.log)");
    value("--daemon-exit-when-idle", &o->daemon_exit_when_idle, "SEC",
          "the node daemon started leaves after SEC without a live flight\n"
          "log or an fr-run on this node (default 60; 0: never)");
    app.add_flag("--no-daemon", o->no_daemon, "never start a node daemon");
    app.add_flag("--no-torch-hook", o->no_torch_hook,
                 "leave PYTHONPATH alone: torch's own recorder is then not dumped\n"
                 "into incidents (docs/fr-run.md)");
    app.add_flag("--profiler-kernel-channels", o->kernel_channels,
                 "have NCCL report kernel channels to fr too (FR_PROFILER_KERNEL_CH=1);\n"
                 "off by default: NCCL then adds a proxy op per channel to every\n"
                 "collective (docs/agent.md)");
    app.add_option("--parent-death-signal", signals,
                   "what CMD gets if fr-run dies, even by SIGKILL (KILL by default;\n"
                   "TERM, INT, HUP, ...; none: CMD lives on)")
        ->option_text("SIG")
        ->allow_extra_args(false);
    app.add_flag("-v,--verbose", o->verbose, "say what fr-run did, on stderr");
    version = app.add_flag("--version", o->version, "print the version");
  }
};

// fr-run's own reading of its arguments, before CLI11 sees them: the flags end at `--` or at the
// first argument that is not a flag, and everything from there is the command, untouched. A
// value flag takes the next argument whatever it looks like (`--frd-arg --stall-after`), or its
// value after '=' (`--frd-arg=` is an empty one, CLI11 would take the next argument). Flags
// take no values and short flags do not combine (`-vh` is unknown). The flags go to CLI11 as
// `--name=value`, or `--name ""` for an empty value. Stops at -h/--help and --version.
struct Split {
  std::vector<std::string> flags;  // for CLI11, in order, without the program name
  std::vector<std::string> command;
  bool stopped = false;  // at -h, --help or --version
};

bool split_args(Flags& f, const std::vector<std::string>& args, Split* s, std::string* error) {
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.size() < 2 || a[0] != '-') break;  // the command
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq);
    const CLI::Option* opt = f.app.get_option_no_throw(name);
    if (!opt) {
      *error = "unknown flag " + name + " (put the command after --)";
      return false;
    }
    if (opt->get_expected_min() == 0) {  // a flag
      if (eq != std::string::npos) {
        *error = name + " takes no value";
        return false;
      }
      if (opt == f.app.get_help_ptr() || opt == f.version) {
        s->flags.push_back(name);
        s->stopped = true;
        return true;
      }
      s->flags.push_back(name);
      continue;
    }
    std::string value;
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      *error = name + " needs a value";
      return false;
    }
    if (value.empty() && opt != f.frd_arg) {
      *error = name + " needs a non-empty value";
      return false;
    }
    if (value.empty())
      s->flags.insert(s->flags.end(), {name, ""});
    else
      s->flags.push_back(name + "=" + value);
  }
  s->command.assign(args.begin() + std::min(i, args.size()), args.end());
  return true;
}

}  // namespace

bool parse_args(const std::vector<std::string>& args, Options* o, std::string* error) {
  Flags f(o);
  Split s;
  if (!split_args(f, args, &s, error)) return false;
  try {
    f.app.parse(std::vector<std::string>(s.flags.rbegin(), s.flags.rend()));
  } catch (const CLI::CallForHelp&) {
    o->help = true;
  } catch (const CLI::ParseError& e) {
    *error = e.what();
    return false;
  }
  for (const std::string& v : f.signals) {
    o->parent_death_signal = parse_signal_name(v);
    if (o->parent_death_signal < 0) {
      *error = "--parent-death-signal " + v + ": not a signal (KILL, TERM, ..., or none)";
      return false;
    }
  }
  if (s.stopped) return true;
  if (!seconds_value(o->daemon_exit_when_idle)) {
    *error = "--daemon-exit-when-idle " + o->daemon_exit_when_idle +
             ": not a number of seconds (0: never)";
    return false;
  }
  o->command = std::move(s.command);
  if (o->command.empty()) {
    *error = "no command: fr-run [flags] -- CMD ARGS...";
    return false;
  }
  return true;
}

int parse_signal_name(const std::string& v) {
  if (v == "none" || v == "0") return 0;
  static const std::pair<const char*, int> kNames[] = {
      {"KILL", SIGKILL}, {"TERM", SIGTERM}, {"INT", SIGINT},  {"HUP", SIGHUP},
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

void make_paths_absolute(Options* o, const std::string& cwd) {
  const std::string base = cwd.empty() || cwd.back() == '/' ? cwd : cwd + "/";
  auto fix = [&](std::string* p) {
    if (!p->empty() && (*p)[0] != '/' && !base.empty()) *p = base + *p;
  };
  for (std::string* p : {&o->log_dir, &o->token_file, &o->daemon_log, &o->agent, &o->frd}) fix(p);
  static const char* const kPathFlags[] = {"--token-file", "--tls-ca", "--tls-cert", "--tls-key",
                                           "--dump-dir"};
  for (size_t i = 0; i < o->frd_args.size(); ++i) {
    std::string& a = o->frd_args[i];
    for (const char* f : kPathFlags) {
      const std::string flag = f;
      if (a == flag && i + 1 < o->frd_args.size()) {
        fix(&o->frd_args[++i]);
        break;
      }
      if (a.rfind(flag + "=", 0) == 0) {
        std::string v = a.substr(flag.size() + 1);
        fix(&v);
        a = flag + "=" + v;
        break;
      }
    }
  }
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
  if (o.kernel_channels) out["FR_PROFILER_KERNEL_CH"] = "1";
  if (!o.python_hook.empty()) {
    // First, so it shadows any other sitecustomize (which it then runs itself), and once.
    std::string old = get(env, "PYTHONPATH");
    std::string path = o.python_hook;
    size_t start = 0;
    while (!old.empty() && start <= old.size()) {
      size_t end = std::min(old.find(':', start), old.size());
      std::string item = old.substr(start, end - start);
      if (item != o.python_hook) path += ":" + item;  // an empty item (the current folder) stays
      start = end + 1;
    }
    out["PYTHONPATH"] = path;
  }
  return out;
}

std::vector<std::string> frd_node_argv(const Options& o) {
  std::vector<std::string> argv = {o.frd,         "node",      "--coordinator",
                                   o.coordinator, "--log-dir", o.log_dir};
  if (!o.token_file.empty()) argv.insert(argv.end(), {"--token-file", o.token_file});
  if (!o.node_name.empty()) argv.insert(argv.end(), {"--node-name", o.node_name});
  // Before the user's --frd-arg flags: a later --exit-when-idle among them wins.
  argv.insert(argv.end(), {"--exit-when-idle", o.daemon_exit_when_idle});
  argv.insert(argv.end(), o.frd_args.begin(), o.frd_args.end());
  return argv;
}

std::string usage_text() {
  Options o;
  Flags f(&o);
  return f.app.help();
}

}  // namespace fr::run
