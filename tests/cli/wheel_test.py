#!/usr/bin/env python3
"""The wheel as a PyTorch user meets it: scripts/build-wheel packs the built tools, a fresh venv
(with the system's site packages, where torch lives) installs it with pip, offline, and then:
fr-run, frd and fr-analyze are on the venv's PATH and answer --version; every tool's libraries
resolve inside the wheel (ldd) and the agent needs nothing beyond glibc 2.28; the platform tag
names the newest glibc a file in the wheel needs; `python -m fr` says where the tools are;
`fr.analyze` gives the verdict, findings and evidence as objects on a PyTorch dump set; a bad
path raises fr.FrError; examples/python/first_hang.py runs; fr-run from the venv preloads the
wheel's agent; `fr.snapshot` writes a dump set.

    wheel_test.py BUILD_DIR SOURCE_DIR

Exits 77 (CTest: skipped) with an FR-SKIPPED line when the tools are not built or patchelf or
python3-venv is missing.
"""
import os
import re
import subprocess
import sys
import tempfile


def skip(why):
    print(f"FR-SKIPPED: {why}")
    sys.exit(77)


failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def main(build, source):
    for t in ("bin/fr-run", "bin/frd", "bin/fr-analyze", "lib/libfr_agent.so"):
        if not os.path.isfile(os.path.join(build, t)):
            skip(f"not built: {t} (in {build})")
    import shutil
    if not shutil.which("patchelf"):
        skip("patchelf is not installed (scripts/install-deps.sh installs it)")
    with tempfile.TemporaryDirectory(prefix="fr-wheel-test.") as tmp:
        r = run([sys.executable, os.path.join(source, "scripts", "build-wheel"), "--build", build,
                 "--out", os.path.join(tmp, "wheels")])
        print(r.stdout + r.stderr)
        check(r.returncode == 0, "scripts/build-wheel builds the wheel")
        if r.returncode != 0:
            return
        wheels = os.listdir(os.path.join(tmp, "wheels"))
        check(len(wheels) == 1, f"one wheel: {wheels}")
        wheel = os.path.join(tmp, "wheels", wheels[0])
        m = re.match(r"fr-[0-9.]+-py3-none-manylinux_(\d+)_(\d+)_x86_64\.whl$", wheels[0])
        check(m is not None, f"the wheel's name has a manylinux x86_64 tag: {wheels[0]}")

        venv = os.path.join(tmp, "venv")
        r = run([sys.executable, "-m", "venv", "--system-site-packages", venv])
        if r.returncode != 0:
            skip(f"python3 -m venv failed (python3-venv missing?): {r.stderr.strip()}")
        py = os.path.join(venv, "bin", "python")
        r = run([py, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet", wheel])
        check(r.returncode == 0, f"pip installs the wheel: {r.stderr.strip()[-500:]}")
        if r.returncode != 0:
            return
        env = dict(os.environ, PATH=os.path.join(venv, "bin") + ":/usr/bin:/bin")
        env.pop("PYTHONPATH", None)
        for tool in ("fr-run", "frd", "fr-analyze"):
            r = run([tool, "--version"], env=env)
            check(r.returncode == 0 and r.stdout.startswith(tool + " "),
                  f"{tool} on the venv's PATH: {r.stdout.strip()} {r.stderr.strip()}")

        pkg = run([py, "-c", "import fr, os; print(os.path.dirname(fr.__file__))"], env=env,
                  cwd=tmp).stdout.strip()
        # Every library of every tool resolves, from the wheel or from glibc.
        glibc = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1"}
        for tool in ("fr-run", "frd", "fr-analyze"):
            out = run(["ldd", os.path.join(pkg, "bin", tool)]).stdout
            outside = [l.split()[0] for l in out.splitlines() if "=>" in l and
                       os.path.join(pkg, "bin", "..", "libs") not in l and
                       l.split()[0] not in glibc]
            check("not found" not in out and not outside,
                  f"{tool}: every library from the wheel or glibc (outside: {outside})")
        agent = os.path.join(pkg, "lib", "libfr_agent.so")
        needed = [l.split()[0] for l in run(["ldd", agent]).stdout.splitlines() if "=>" in l]
        check(set(needed) <= glibc, f"the agent needs glibc alone: {needed}")
        versions = set()
        for dp, _, fs in os.walk(pkg):
            for f in fs:
                p = os.path.join(dp, f)
                if open(p, "rb").read(4) == b"\x7fELF":
                    versions |= {(int(a), int(b)) for a, b in re.findall(
                        r"Name: GLIBC_(\d+)\.(\d+)", run(["readelf", "-V", "-W", p]).stdout)}
        agent_glibc = max((int(a), int(b)) for a, b in re.findall(
            r"Name: GLIBC_(\d+)\.(\d+)", run(["readelf", "-V", "-W", agent]).stdout))
        check(agent_glibc <= (2, 28), f"the agent needs glibc {agent_glibc} <= 2.28")
        if m:
            check(max(versions) == (int(m.group(1)), int(m.group(2))),
                  f"the tag's glibc {m.group(1)}.{m.group(2)} is the newest needed {max(versions)}")

        r = run([py, "-m", "fr"], env=env, cwd=tmp)
        check(r.returncode == 0 and "tools: " + os.path.join(pkg, "bin") in r.stdout,
              f"python -m fr says where the tools are: {r.stdout.strip()}")
        r = run([py, "-m", "fr", "analyze", "--version"], env=env, cwd=tmp)
        check(r.returncode == 0 and r.stdout.startswith("fr-analyze "), "python -m fr analyze")

        gloo = os.path.join(source, "tests/analyzer/torch/data/torch-2.15-gloo/hang/file")
        script = f"""
import dataclasses, fr, sys
a = fr.analyze({gloo!r})
assert isinstance(a, fr.Analysis) and dataclasses.is_dataclass(a.verdict)
assert a.verdict.kind == "not_entered", a.verdict.kind
assert a.verdict.culprit_ranks == [3], a.verdict.culprit_ranks
assert "rank 3 never entered AllReduce #11" in a.verdict.summary, a.verdict.summary
assert a.verdict.comm.name == "default_pg" and a.verdict.seq == 11 and a.verdict.op == "AllReduce"
rows = {{e.rank: e for e in a.verdict.evidence}}
assert sorted(rows) == [0, 1, 2, 3, 4, 5] and rows[3].culprit and not rows[0].culprit
assert isinstance(rows[0], fr.Evidence) and rows[0].state == "started"
assert a.ranks.found == [0, 1, 2, 3, 4, 5] and not a.mixed_jobs
assert all(isinstance(f, fr.Finding) for f in a.findings)
try:
    fr.analyze("/no/such/dump/set")
    sys.exit("no FrError for a missing path")
except fr.FrError as e:
    assert e.code == 3 and "no such file" in str(e), (e.code, str(e))
out = fr.snapshot({os.path.join(tmp, "snap")!r}, log_dir={os.path.join(tmp, "empty-logs")!r})
import os
assert os.path.isfile(os.path.join(out, "manifest.json"))
print("api ok")
"""
        os.makedirs(os.path.join(tmp, "empty-logs"))
        r = run([py, "-c", script], env=env, cwd=tmp)
        check(r.returncode == 0 and "api ok" in r.stdout,
              f"fr.analyze, fr.FrError, fr.snapshot: {r.stdout.strip()} {r.stderr.strip()[-800:]}")

        # The notebook-sized example runs as the README shows it.
        r = run([py, os.path.join(source, "examples", "python", "first_hang.py")], env=env, cwd=tmp)
        check(r.returncode == 0 and r.stdout.startswith("not_entered: rank 3 never entered") and
              "* rank 3: not_entered" in r.stdout,
              f"examples/python/first_hang.py: {r.stdout.strip()[:300]} {r.stderr.strip()[-300:]}")

        # fr-run from the venv preloads the wheel's agent into the command.
        r = run(["fr-run", "--log-dir", os.path.join(tmp, "logs"), "--", "/bin/sh", "-c",
                 "echo $LD_PRELOAD"], env=env, cwd=tmp)
        check(r.returncode == 0 and os.path.realpath(r.stdout.strip()) == os.path.realpath(agent),
              f"fr-run preloads the wheel's agent: {r.stdout.strip()} {r.stderr.strip()}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: wheel_test.py BUILD_DIR SOURCE_DIR")
    main(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]))
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")
