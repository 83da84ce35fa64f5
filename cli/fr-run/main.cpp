// fr-run: the launcher for one rank, or for a whole launcher. It preloads the agent into CMD and
// everything CMD starts, sets the agent's environment (FR_LOG_DIR, FR_JOB_ID), makes sure one
// `frd node` serves this node when a coordinator is given, then runs CMD as its child: signals
// forwarded, stdio untouched, CMD's exit status passed on. Nothing fr-run does can keep CMD from
// running: a missing agent or a daemon that will not start is said once on stderr, and CMD runs.
//   fr-run --coordinator coord:7470 --job-id "$JOB" -- python train.py
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "child.h"
#include "fr/version.h"
#include "daemon/base/node_lock.h"
#include "daemon/base/proc_file.h"
#include "node_daemon.h"
#include "options.h"
#include "register.h"

extern char** environ;

namespace {

fr::run::Env current_env() {
  fr::run::Env env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

std::string exe_dir() {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

bool regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The daemon found serves another job that still runs: this job gets a log directory of its
// own below it, with a daemon of its own (node_daemon.h). Returns the daemon serving the job.
fr::run::DaemonResult use_own_log_dir(fr::run::Options* o, const fr::run::DaemonResult& d,
                                      fr::daemon::NodeUse* use) {
  std::string own, why;
  if (!fr::run::own_log_dir(*o, &own, &why)) {
    std::fprintf(stderr, "fr-run: no log directory of this job's own: %s\n", why.c_str());
    return d;
  }
  std::fprintf(stderr,
               "fr-run: the node daemon serving %s (pid %d) follows %s, which is alive and serves "
               "another job; this job's flight logs go to %s, with a node daemon of its own\n",
               o->log_dir.c_str(), int(d.pid), d.other_coordinator.c_str(), own.c_str());
  const bool default_log = o->daemon_log == o->log_dir + "/frd-node.log";
  o->log_dir = own;
  if (default_log) o->daemon_log = own + "/frd-node.log";
  std::string error;
  if (!use->acquire(o->log_dir, &error)) std::fprintf(stderr, "fr-run: %s\n", error.c_str());
  return fr::run::ensure_node_daemon(*o);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fr::run;
  Options o;
  std::string error;
  if (!parse_args(std::vector<std::string>(argv + 1, argv + argc), &o, &error)) {
    std::fprintf(stderr, "fr-run: %s\n%s", error.c_str(), usage_text().c_str());
    return 2;
  }
  if (o.help) {
    std::printf("%s", usage_text().c_str());
    return 0;
  }
  if (o.version) {
    std::printf("%s\n", FR_VERSION_LINE("fr-run"));
    return 0;
  }
  Env env = current_env();
  resolve(&o, env, exe_dir(), ::getuid(), regular_file);
  std::error_code cwd_error;
  make_paths_absolute(&o, std::filesystem::current_path(cwd_error).string());

  bool agent_ok = regular_file(o.agent);
  if (!agent_ok)
    std::fprintf(stderr, "fr-run: no agent at %s: %s runs unrecorded\n", o.agent.c_str(),
                 o.command[0].c_str());

  // The agent records nothing into a missing directory: make it, as the daemon would need it too.
  std::error_code ec;
  std::filesystem::create_directories(o.log_dir, ec);
  if (ec)
    std::fprintf(stderr, "fr-run: cannot create the log directory %s: %s\n", o.log_dir.c_str(),
                 ec.message().c_str());

  // This fr-run uses the node daemon for as long as it runs: one that leaves when idle stays.
  fr::daemon::NodeUse use;
  if (!o.coordinator.empty() && !o.no_daemon && !use.acquire(o.log_dir, &error))
    std::fprintf(stderr,
                 "fr-run: %s; the node daemon may leave while this job has no flight log yet\n",
                 error.c_str());
  fr::daemon::NodeUse own_use;  // the same, in this job's own log directory when it gets one
  if (!o.coordinator.empty() && !o.no_daemon) {
    DaemonResult d = ensure_node_daemon(o);
    if (d.outcome != DaemonOutcome::failed && !d.other_coordinator.empty())
      d = use_own_log_dir(&o, d, &own_use);
    if (!d.replaced.empty())
      std::fprintf(stderr,
                   "fr-run: replaced the node daemon serving %s, which followed %s, with one "
                   "following %s\n",
                   o.log_dir.c_str(), d.replaced.c_str(), o.coordinator.c_str());
    if (d.outcome == DaemonOutcome::failed)
      std::fprintf(stderr, "fr-run: no node daemon: %s\n", d.message.c_str());
    else if (!d.other_coordinator.empty())
      std::fprintf(stderr,
                   "fr-run: the node daemon serving %s (pid %d) follows %s, which is alive and "
                   "serves another job, not %s: this job runs unwatched; give it its own "
                   "--log-dir\n",
                   o.log_dir.c_str(), int(d.pid), d.other_coordinator.c_str(),
                   o.coordinator.c_str());
    else if (std::string refused = refusal_of(o, d.pid); !refused.empty())
      std::fprintf(stderr, "fr-run: %s\n", refused.c_str());
    else if (o.verbose)
      std::fprintf(stderr, "fr-run: node daemon %s (pid %d) serves %s\n",
                   d.outcome == DaemonOutcome::started ? "started" : "already running", int(d.pid),
                   o.log_dir.c_str());
  } else if (o.verbose) {
    std::fprintf(stderr, "fr-run: no coordinator given: flight logs only, in %s\n",
                 o.log_dir.c_str());
  }
  if (o.verbose && agent_ok)
    std::fprintf(stderr, "fr-run: LD_PRELOAD=%s FR_LOG_DIR=%s%s%s\n", o.agent.c_str(),
                 o.log_dir.c_str(), o.job_id.empty() ? "" : " FR_JOB_ID=", o.job_id.c_str());
  const std::string hook = exe_dir() + "/../share/fr/python";
  if (!o.no_torch_hook && regular_file(hook + "/sitecustomize.py")) o.python_hook = hook;
  const Env cenv = child_env(o, env, agent_ok);
  // The command is registered in the log directory while it runs, so the node daemon counts it
  // before it calls NCCL or NIXL (daemon/base/proc_file.h).
  Registration reg(o.log_dir, cenv);
  return run_command(o.command, cenv, o.parent_death_signal, [&](int pid) {
    if (!reg.write(pid, &error) && o.verbose) std::fprintf(stderr, "fr-run: %s\n", error.c_str());
  });
}
