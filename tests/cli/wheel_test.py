#!/usr/bin/env python3
"""The wheel as a PyTorch user meets it: scripts/build-wheel packs the built tools, a fresh venv
(with the system's site packages, where torch lives) installs it with pip, offline, and then:
- fr-run, frd and fr-analyze are on the venv's PATH and answer --version; every tool's libraries
  resolve inside the wheel (ldd) and the agent needs nothing beyond glibc 2.28;
- every ELF file in the wheel needs no symbol version newer than the tag's glibc and none of a
  library outside glibc and the wheel (no libstdc++); the tag names the newest glibc a file
  needs, and that is 2.28 at most (docs/install.md); auditwheel (/opt/fr-tools) names the same tag
  (tests/cli/wheel_oldglibc_test.py runs the tools on glibc 2.31);
- the wheel's frd serves a coordinator that its `frd status` reads over gRPC; as coordinator and
  node daemons of a simulated job (fr-simjob --daemons) whose rank 3 hangs, it names rank 3; it
  reports a bad flag (a C++ exception through the static runtime's unwinder);
- `python -m fr` says where the tools are; `fr.analyze` gives the verdict, findings and evidence
  as objects on a PyTorch dump set; a bad path raises fr.FrError; examples/python/first_hang.py
  runs; fr-run from the venv preloads the wheel's agent; `fr.snapshot` writes a dump set.

    wheel_test.py BUILD_DIR SOURCE_DIR

Exits 77 (CTest: skipped) with an FR-SKIPPED line when the wheel's tools (build/wheel/bin, not in
sanitizer builds) are not built or patchelf or python3-venv is missing.
"""
import json
import os
import shutil
import re
import subprocess
import sys
import tempfile
import time


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


def version_needs(path):
    """{library: [version, ...]}: the symbol versions an ELF file requires (.gnu.version_r)."""
    out = run(["readelf", "-V", "-W", path]).stdout
    needs, lib = {}, None
    if "Version needs section" in out:
        for line in out[out.index("Version needs section"):].splitlines():
            f = re.search(r"File: (\S+)", line)
            if f:
                lib = f.group(1)
                needs.setdefault(lib, [])
            n = re.search(r"Name: (\S+)", line)
            if n and lib:
                needs[lib].append(n.group(1))
    return needs


def glibc_of(needs):
    """The newest GLIBC_x.y in version_needs' answer, as (x, y); (0, 0) for none."""
    return max([(int(a), int(b)) for v in needs.values() for x in v
                for a, b in re.findall(r"^GLIBC_(\d+)\.(\d+)", x)] or [(0, 0)])


def simjob_hang(build, pkg, tmp):
    """The wheel's frd as the coordinator and the node daemons of a simulated job (fr-simjob
    --daemons, from the build) whose rank 3 hangs: node streams, stacks and the dump upload over
    the wheel's static gRPC, and the verdict names rank 3."""
    simjob = os.path.join(build, "bin", "fr-simjob")
    if not os.path.isfile(simjob) or not os.path.isdir(os.path.join(build, "sim", "lib")):
        print(f"skip the simulated job: fr-simjob or the emulation is not built in {build}")
        return
    tree = os.path.join(tmp, "simtree")  # fr-simjob takes frd, the agent and sim/ beside it
    os.makedirs(os.path.join(tree, "bin"))
    os.makedirs(os.path.join(tree, "lib"))
    shutil.copy2(simjob, os.path.join(tree, "bin", "fr-simjob"))
    os.symlink(os.path.join(build, "bin", "fr-simjob-rank"),
               os.path.join(tree, "bin", "fr-simjob-rank"))
    os.symlink(os.path.join(build, "sim"), os.path.join(tree, "sim"))
    os.symlink(os.path.join(pkg, "bin", "frd"), os.path.join(tree, "bin", "frd"))
    os.symlink(os.path.join(pkg, "lib", "libfr_agent.so"),
               os.path.join(tree, "lib", "libfr_agent.so"))
    out = os.path.join(tmp, "simjob")
    r = run([os.path.join(tree, "bin", "fr-simjob"), "--nodes", "2", "--ranks-per-node", "2",
             "--steps", "20", "--fault", "rank=3,step=5,kind=hang-host", "--daemons",
             "--stall-after", "3", "--quiet", "--out", out], cwd=tmp, timeout=200)
    result = {}
    if os.path.isfile(os.path.join(out, "result.json")):
        result = json.load(open(os.path.join(out, "result.json")))
    verdict = result.get("analysis", {}).get("verdict", {})
    check(r.returncode == 0 and result.get("stop_reason") == "incident" and
          verdict.get("kind") == "not_entered" and verdict.get("culprit_ranks") == [3],
          f"the wheel's frd catches a simulated hang: {r.returncode} {verdict.get('summary')} "
          f"{r.stderr.strip()[-400:]}")


def main(build, source):
    for t in ("wheel/bin/fr-run", "wheel/bin/frd", "wheel/bin/fr-analyze", "lib/libfr_agent.so"):
        if not os.path.isfile(os.path.join(build, t)):
            skip(f"not built: {t} (in {build})")
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
        agent_glibc = glibc_of(version_needs(agent))
        check(agent_glibc <= (2, 28), f"the agent needs glibc {agent_glibc} <= 2.28")
        libs = os.path.join(pkg, "libs")
        shipped = set(os.listdir(libs)) if os.path.isdir(libs) else set()
        per_file = {}
        for dp, _, fs in os.walk(pkg):
            for f in fs:
                p = os.path.join(dp, f)
                if open(p, "rb").read(4) == b"\x7fELF":
                    needs = version_needs(p)
                    per_file[os.path.relpath(p, pkg)] = glibc_of(needs)
                    foreign = {lib: v for lib, v in needs.items()
                               if lib not in glibc | {"ld-linux-x86-64.so.2"} and lib not in shipped}
                    odd = {lib: [x for x in v if not x.startswith("GLIBC_")]
                           for lib, v in needs.items() if lib in glibc}
                    odd = {lib: v for lib, v in odd.items() if v}
                    check(not foreign and not odd,
                          f"{f}: versions needed of glibc and the wheel's libraries alone "
                          f"(others: {foreign}, non-GLIBC_ of glibc: {odd})")
        check(len(per_file) >= 4 + len(shipped), f"ELF files read: {sorted(per_file)}")
        print("glibc needed: " + ", ".join(f"{f} {v[0]}.{v[1]}" for f, v in sorted(per_file.items())))
        if m:
            tag = (int(m.group(1)), int(m.group(2)))
            over = {f: v for f, v in per_file.items() if v > tag}
            check(not over, f"no file needs a glibc newer than the tag's {tag}: {over}")
            check(max(per_file.values()) == tag,
                  f"the tag's glibc {tag} is the newest needed {max(per_file.values())}")
            over = {f: v for f, v in per_file.items() if v > (2, 28)}
            check(tag <= (2, 28), f"the tag is manylinux_2_28 or older: {tag} (files: {over})")

        # auditwheel, the reference for manylinux tags, judges the wheel as this script does.
        auditwheel = shutil.which("auditwheel", path="/opt/fr-tools/bin:" + os.environ["PATH"])
        if auditwheel and m:
            r = run([auditwheel, "show", wheel])
            said = re.search(r'consistent with\s+the\s+following\s+platform\s+tag:\s+"([^"]+)"',
                             r.stdout)
            tag_name = f"manylinux_{m.group(1)}_{m.group(2)}_x86_64"
            check(said is not None and said.group(1) == tag_name,
                  f"auditwheel show agrees with the tag: {r.stdout.strip()[:300]} {r.stderr[-300:]}")
        else:
            check(not os.environ.get("FR_CI"), "auditwheel is installed (scripts/install-deps.sh "
                  "puts it in /opt/fr-tools)")
            print("no auditwheel here: the tag is not checked against its policy")

        # The statically linked gRPC works: a coordinator, and frd status reading it.
        work = os.path.join(tmp, "coord")
        os.makedirs(work)
        coord = subprocess.Popen(["frd", "coordinator", "--listen", "127.0.0.1:0", "--insecure",
                                  "--port-file", os.path.join(work, "port"), "--dump-dir",
                                  os.path.join(work, "dumps")], env=env, cwd=work,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            port = ""
            for _ in range(200):
                if os.path.exists(os.path.join(work, "port")):
                    port = open(os.path.join(work, "port")).read().strip()
                    if port:
                        break
                time.sleep(0.05)
            r = run(["frd", "status", "--insecure", "--coordinator", f"127.0.0.1:{port}",
                     "--json"], env=env, cwd=work, timeout=60)
            check(r.returncode == 0 and '"coordinator_id"' in r.stdout,
                  f"the wheel's frd status reads its coordinator: {r.stdout[:200]} "
                  f"{r.stderr.strip()}")
        finally:
            coord.terminate()
            coord.wait(timeout=30)
        simjob_hang(build, pkg, tmp)
        r = run(["frd", "--no-such-flag"], env=env, cwd=tmp)
        check(r.returncode == 2 and "--help" in r.stdout + r.stderr,
              f"the wheel's frd reports a bad flag: {r.returncode} {r.stdout} {r.stderr}")

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
t = a.verdict.torch
assert isinstance(t, fr.TorchView) and t.pg_desc == "default_pg" and t.seq == 11 and not t.joined, t
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
