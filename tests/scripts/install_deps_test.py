#!/usr/bin/env python3
"""`make demo` installs what its build needs and no more, and says what it does before each step.

- `scripts/install-deps.sh --demo --print` lists a part of the full list (`--print`), none of the
  packages only the tests, examples and images need (torch and the rest come from PyPI and are
  not installed in that mode at all), and a package for every dependency that configuring the
  tree asks for: each `find_package(... REQUIRED)`, `pkg_check_modules(... REQUIRED ...)` and
  `find_program(... REQUIRED)` in a CMakeLists.txt. A dependency this test does not know fails it,
  naming what to add.
- An unknown argument is refused with exit code 2.
- `make -n demo`: a line saying that packages are being set up comes before
  `install-deps.sh --demo`, and one naming how many targets are built, how long that takes and
  where the log is comes before `cmake --build`, with as many targets as that build names.
- `make deps` (and so `make test`) and .ci/run install everything: install-deps.sh with no mode.

    tests/scripts/install_deps_test.py SOURCE_DIR
"""
import glob
import os
import re
import shutil
import subprocess
import sys

# What each dependency configure asks for is provided by (a Debian 12 package).
PROVIDED_BY = {
    "Threads": "build-essential",
    "Protobuf": "libprotobuf-dev",
    "gRPC": "libgrpc++-dev",
    "absl": "libgrpc++-dev",  # libabsl-dev, a dependency of libgrpc++-dev
    "nlohmann_json": "nlohmann-json3-dev",
    "OpenSSL": "libssl-dev",
    "PkgConfig": "pkg-config",
    "libdw": "libdw-dev",
    "CLI11": "libcli11-dev",
    "Catch2": "catch2",
    "Python3": "python3",
    "protoc": "protobuf-compiler",
    "grpc_cpp_plugin": "protobuf-compiler-grpc",
}
# Only the tests, the examples and the images need these: never for the demo.
NOT_FOR_DEMO = ["chromium", "buildah", "debootstrap", "valgrind", "shellcheck", "clang",
                "clang-format-14", "libclang-rt-14-dev", "libbenchmark-dev", "python3-venv"]

failures = []


def check(what, ok):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def install_deps(src, *args):
    # Never run the installer itself: without its --print mode it would install.
    script = open(os.path.join(src, "scripts", "install-deps.sh"), encoding="utf-8").read()
    if "--print)" not in script:
        return 1, "", "install-deps.sh has no --print mode (not run)"
    res = subprocess.run(["bash", os.path.join(src, "scripts", "install-deps.sh"), *args],
                         capture_output=True, text=True, timeout=60)
    return res.returncode, res.stdout, res.stderr


def configure_dependencies(src):
    """{dependency: CMakeLists.txt that asks for it} of every REQUIRED find in the tree."""
    deps = {}
    for path in glob.glob(os.path.join(src, "**", "CMakeLists.txt"), recursive=True):
        rel = os.path.relpath(path, src)
        if rel.startswith("build"):
            continue
        text = re.sub(r"#.*", "", open(path, encoding="utf-8").read())
        for m in re.finditer(r"find_package\(\s*(\w+)([^)]*)\)", text):
            if "REQUIRED" in m.group(2).split():
                deps.setdefault(m.group(1), rel)
        for m in re.finditer(r"pkg_check_modules\(([^)]*)\)", text):
            words = m.group(1).split()
            if "REQUIRED" in words:
                modules = [w for w in words[1:] if w not in ("REQUIRED", "IMPORTED_TARGET",
                                                             "QUIET", "GLOBAL", "NO_CMAKE_PATH",
                                                             "NO_CMAKE_ENVIRONMENT_PATH")]
                for module in modules:
                    deps.setdefault(re.split(r"[<>=]", module)[0], rel)
        for m in re.finditer(r"find_program\(\s*\w+\s+(\S+)([^)]*)\)", text):
            if "REQUIRED" in m.group(2).split():
                deps.setdefault(m.group(1), rel)
    return deps


def package_lists(src):
    rc, full, err = install_deps(src, "--print")
    check(f"install-deps.sh --print exits 0 ({err.strip()})", rc == 0)
    rc, demo, err = install_deps(src, "--demo", "--print")
    check(f"install-deps.sh --demo --print exits 0 ({err.strip()})", rc == 0)
    return full.split(), demo.split()


def check_packages(src):
    full, demo = package_lists(src)
    check("the demo list is not empty", len(demo) > 0)
    check(f"the demo list is part of the full list (not in it: {sorted(set(demo) - set(full))})",
          set(demo) <= set(full))
    check(f"the demo list is shorter than the full list ({len(demo)} of {len(full)})",
          len(demo) < len(full))
    for package in NOT_FOR_DEMO:
        check(f"{package}: in the full list, not in the demo list",
              package in full and package not in demo)
    deps = configure_dependencies(src)
    check(f"configure asks for dependencies ({len(deps)} found)", len(deps) >= 5)
    for dep, where in sorted(deps.items()):
        package = PROVIDED_BY.get(dep)
        if package is None:
            check(f"{where} asks for {dep}: unknown here; add it to PROVIDED_BY in this test, "
                  "and its package to install-deps.sh's demo_packages", False)
        else:
            check(f"{dep} ({where}): {package} is in the demo list", package in demo)
    rc, _, err = install_deps(src, "--no-such-mode")
    check(f"an unknown argument exits 2 with a message (exit {rc}: {err.strip()})",
          rc == 2 and "--no-such-mode" in err)


def make_n(src, target):
    res = subprocess.run(["make", "-n", "-C", src, target], capture_output=True, text=True,
                         timeout=60)
    return res.returncode, res.stdout


def check_make(src):
    if shutil.which("make") is None:
        print("FR-SKIPPED: make is not installed: the Makefile is not checked")
        return
    rc, out = make_n(src, "demo")
    check("make -n demo exits 0", rc == 0)
    setup = out.find("setting up packages (first run only")
    install = out.find("install-deps.sh --demo")
    building = re.search(r"building the demo's (\d+) targets \(about (\d+)\"?\s*\\?\s*\"?"
                         r" ?minutes on 2 cores the first time; log in [^)]+\)", out)
    build = out.find("cmake --build")
    check("make demo says it sets up packages before install-deps.sh --demo",
          0 <= setup < install)
    check("make demo says how many targets it builds, how long and where the log is, before "
          "cmake --build", building is not None and building.start() < build)
    if building:
        targets = re.search(r"cmake --build .*--target ((?:[\w+-]+ ?)+)", out)
        named = targets.group(1).split() if targets else []
        check(f"the targets it says ({building.group(1)}) are those it builds ({len(named)})",
              int(building.group(1)) == len(named) > 0)
    rc, out = make_n(src, "deps")
    check("make deps runs install-deps.sh with no mode (everything)",
          rc == 0 and re.search(r"install-deps\.sh\s*$", out, re.M) is not None)
    ci = open(os.path.join(src, ".ci", "run"), encoding="utf-8").read()
    check(".ci/run runs install-deps.sh with no mode (everything)",
          re.search(r"install-deps\.sh\s*$", ci, re.M) is not None)


def main():
    if len(sys.argv) != 2:
        print("usage: install_deps_test.py SOURCE_DIR", file=sys.stderr)
        return 2
    src = sys.argv[1]
    check_packages(src)
    check_make(src)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
