#!/usr/bin/env python3
"""The wheel's tools on a glibc older than 2.34 (cli/wheel links them against glibc 2.28's symbol
versions, with its own start code and stand-ins for newer functions; docs/install.md):

- here: the probe (tests/cli/wheel_probe.cpp, linked as the tools are) passes every check, and it
  and the tools need no symbol version newer than GLIBC_2.28;
- in the Debian 11 root that scripts/install-deps.sh makes (glibc 2.31, where libpthread, libdl and
  librt still hold their functions and __libc_start_main runs only the init function it is given):
  the probe passes every check (constructors run once, exceptions, threads, condition variables,
  stat, close_range, dlopen); the wheel's frd, fr-analyze and fr-run answer --version;
  fr-analyze --help; fr-analyze names the hung rank of a PyTorch dump set; frd reports a bad flag
  (an exception through the static runtime); the wheel's frd serves a coordinator that its
  `frd status` reads over gRPC; fr-run preloads the wheel's agent into a command.

    wheel_oldglibc_test.py BUILD_DIR SOURCE_DIR PROBE

Exits 77 (CTest: skipped) with an FR-SKIPPED line, after the checks that need no root, when the
wheel's tools are not built, when not root (chroot needs it) or when the Debian 11 root is missing
(FR_BULLSEYE_ROOT, default /var/cache/fr/bullseye-root).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

failures = []
MAX_GLIBC = (2, 28)


def skip(why):
    print(f"FR-SKIPPED: {why}")
    sys.exit(1 if failures else 77)


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(argv, **kw):
    kw.setdefault("timeout", 120)
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def glibc_needed(path):
    """The newest GLIBC_x.y version `path` requires (.gnu.version_r), as (x, y)."""
    out = run(["readelf", "-V", "-W", path]).stdout
    found = [(int(a), int(b)) for a, b in re.findall(r"Name: GLIBC_(\d+)\.(\d+)", out)]
    return max(found or [(0, 0)])


def probe_passes(r, where):
    lines = r.stdout.strip().splitlines()
    names = [l.split(":")[0] for l in lines]
    check(r.returncode == 0 and lines and all(l.endswith(": ok") or ": ok " in l for l in lines) and
          "constructors" in names and "stat" in names,
          f"the probe passes every check {where}: rc {r.returncode} {lines} {r.stderr.strip()[-300:]}")


def in_root_runner(root):
    """A function that wraps argv to run inside `root` with /proc mounted (a private mount
    namespace, so nothing changes outside; plain chroot where unshare is not allowed), and
    whether /proc is there. LD_BIND_NOW=1: the loader binds every symbol a program imports
    before it starts, so one that the root's glibc lacks fails the start, called or not."""
    r = run(["unshare", "-m", "--propagation", "private", "true"]) if shutil.which("unshare") \
        else None
    if r is not None and r.returncode == 0:
        def wrap(argv):
            argv = ["/usr/bin/env", "LD_BIND_NOW=1"] + argv
            cmd = " ".join("'" + a.replace("'", "'\\''") + "'" for a in argv)
            return ["unshare", "-m", "--propagation", "private", "sh", "-c",
                    f"mount -t proc proc '{root}/proc' && exec chroot '{root}' {cmd}"]
        return wrap, True
    return (lambda argv: ["chroot", root, "/usr/bin/env", "LD_BIND_NOW=1"] + argv), False


def coordinator_in_root(wrap, host_dir, dir_):
    """The wheel's frd as a coordinator inside the root, and its frd status reading it."""
    port_file = os.path.join(host_dir, "port")
    coord = subprocess.Popen(wrap([dir_ + "/fr/bin/frd", "coordinator", "--listen", "127.0.0.1:0",
                                   "--insecure", "--port-file", dir_ + "/port", "--dump-dir",
                                   dir_ + "/dumps"]),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = ""
        for _ in range(400):
            if os.path.exists(port_file):
                port = open(port_file).read().strip()
                if port:
                    break
            if coord.poll() is not None:
                break
            time.sleep(0.05)
        check(port != "", f"the wheel's frd coordinator starts on glibc 2.31 (port '{port}')")
        if port:
            r = run(wrap([dir_ + "/fr/bin/frd", "status", "--insecure", "--coordinator",
                          f"127.0.0.1:{port}", "--json"]), timeout=60)
            check(r.returncode == 0 and '"coordinator_id"' in r.stdout,
                  f"the wheel's frd status reads it over gRPC on glibc 2.31: {r.stdout[:200]} "
                  f"{r.stderr.strip()[-300:]}")
    finally:
        coord.terminate()
        try:
            _, err = coord.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            coord.kill()
            _, err = coord.communicate()
        check(coord.returncode in (0, -15, 143), f"the coordinator ends cleanly: "
              f"{coord.returncode} {err.strip()[-300:]}")


def in_root(build, source, probe, pkg, root):
    if os.geteuid() != 0:
        skip("chroot needs root")
    if not os.access(os.path.join(root, "bin/true"), os.X_OK) or \
            not os.path.isdir(os.path.join(root, "tmp")):
        skip(f"no Debian 11 root at {root} (scripts/install-deps.sh makes it with debootstrap "
             "bullseye; it could not be made on this machine)")
    libc = os.path.realpath(os.path.join(root, "lib/x86_64-linux-gnu/libc.so.6"))
    m = re.search(r"libc-(\d+)\.(\d+)\.so$", libc)
    check(m is not None and (int(m.group(1)), int(m.group(2))) < (2, 34),
          f"the root's glibc is older than 2.34: {libc}")
    host_dir = tempfile.mkdtemp(prefix="fr-wheel-oldglibc.", dir=os.path.join(root, "tmp"))
    dir_ = host_dir[len(root.rstrip("/")):]
    try:
        shutil.copy2(probe, os.path.join(host_dir, "probe"))
        shutil.copytree(pkg, os.path.join(host_dir, "fr"), symlinks=True)
        shutil.copytree(os.path.join(source, "tests/analyzer/torch/data/torch-2.15-gloo/hang"),
                        os.path.join(host_dir, "gloo"))
        os.makedirs(os.path.join(host_dir, "logs"))
        wrap, with_proc = in_root_runner(root)
        probe_passes(run(wrap([dir_ + "/probe"])), "on glibc 2.31")
        tools = dir_ + "/fr/bin/"
        for tool in ("frd", "fr-analyze", "fr-run"):
            r = run(wrap([tools + tool, "--version"]))
            check(r.returncode == 0 and r.stdout.startswith(tool + " "),
                  f"the wheel's {tool} --version on glibc 2.31: {r.stdout.strip()} "
                  f"{r.stderr.strip()[-300:]}")
        r = run(wrap([tools + "fr-analyze", "--help"]))
        check(r.returncode == 0 and "Usage:" in r.stdout,
              f"fr-analyze --help on glibc 2.31: {r.returncode} {r.stderr.strip()[-300:]}")
        r = run(wrap([tools + "fr-analyze", dir_ + "/gloo/file"]))
        check(r.returncode == 0 and "rank 3 never entered AllReduce #11" in r.stdout,
              f"fr-analyze names the hung rank on glibc 2.31: {r.stdout[:300]} "
              f"{r.stderr.strip()[-300:]}")
        r = run(wrap([tools + "frd", "--no-such-flag"]))
        check(r.returncode == 2 and "--help" in r.stdout + r.stderr,
              f"the wheel's frd reports a bad flag on glibc 2.31: {r.returncode} {r.stderr[-300:]}")
        coordinator_in_root(wrap, host_dir, dir_)
        agent = dir_ + "/fr/lib/libfr_agent.so"
        argv = [tools + "fr-run", "--log-dir", dir_ + "/logs"]
        if not with_proc:  # fr-run finds the agent beside itself through /proc/self/exe
            argv += ["--agent", agent]
        r = run(wrap(argv + ["--", "/bin/sh", "-c", "echo $LD_PRELOAD"]))
        check(r.returncode == 0 and os.path.normpath(r.stdout.strip()) == agent,
              f"fr-run preloads the wheel's agent on glibc 2.31: {r.stdout.strip()} "
              f"{r.stderr.strip()[-300:]}")
    finally:
        shutil.rmtree(host_dir, ignore_errors=True)


def main(build, source, probe):
    r = run([probe])
    probe_passes(r, "here")
    check(glibc_needed(probe) <= MAX_GLIBC, f"the probe needs glibc {glibc_needed(probe)} <= 2.28")
    for t in ("wheel/bin/fr-run", "wheel/bin/frd", "wheel/bin/fr-analyze", "lib/libfr_agent.so"):
        if not os.path.isfile(os.path.join(build, t)):
            skip(f"not built: {t} (in {build})")
    if not shutil.which("patchelf"):
        skip("patchelf is not installed (scripts/install-deps.sh installs it)")
    with tempfile.TemporaryDirectory(prefix="fr-wheel-oldglibc.") as tmp:
        r = run([sys.executable, os.path.join(source, "scripts", "build-wheel"), "--build", build,
                 "--out", os.path.join(tmp, "wheels")])
        check(r.returncode == 0, f"scripts/build-wheel builds the wheel: {r.stderr.strip()}")
        if r.returncode != 0:
            return
        (wheel,) = os.listdir(os.path.join(tmp, "wheels"))
        check(wheel.endswith("-manylinux_2_28_x86_64.whl"), f"the wheel is manylinux_2_28: {wheel}")
        unpacked = os.path.join(tmp, "unpacked")
        with zipfile.ZipFile(os.path.join(tmp, "wheels", wheel)) as z:
            z.extractall(unpacked)
        pkg = os.path.join(unpacked, "fr")
        for dp, _, fs in os.walk(pkg):
            for f in fs:
                p = os.path.join(dp, f)
                if open(p, "rb").read(4) == b"\x7fELF":
                    os.chmod(p, 0o755)
                    check(glibc_needed(p) <= MAX_GLIBC,
                          f"{os.path.relpath(p, pkg)} needs glibc {glibc_needed(p)} <= 2.28")
        root = os.environ.get("FR_BULLSEYE_ROOT") or "/var/cache/fr/bullseye-root"
        in_root(build, source, probe, pkg, os.path.abspath(root))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: wheel_oldglibc_test.py BUILD_DIR SOURCE_DIR PROBE")
    main(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3]))
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")
