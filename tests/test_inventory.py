#!/usr/bin/env python3
"""Every Catch2 test case runs as exactly one CTest test, and every CTest test runs a test case.

catch_discover_tests turns each test case a binary lists into one CTest test. A name that CMake
reads as a list (a `;` in it) becomes two tests whose names begin or end with the halves; neither
matches a case, and a Catch2 binary that matches nothing exits 0 unless it is run with
`--warn NoTests` (fr_add_test passes it, so such a test fails). This check guards the rest, over
one build directory:

- every test name a binary lists is one CMake would keep whole: no `;`, no leading or trailing
  blank, no backslash, no character that Catch2's command line reads as a pattern (`*` at either
  end, `~` or `"` at the start);
- every binary's cases and the CTest tests that run that binary agree one to one: as many of
  each, and each CTest test's test spec matches exactly one case of its binary (a spec that
  matches several, through case-insensitive names or a pattern, runs them under one name);
- every discovered test is run with --warn NoTests.

Prints one line per binary and a total; exits 1 on any disagreement, naming it. Usage:
  test_inventory.py BUILD_DIR [BUILD_DIR ...]
"""
import json
import os
import re
import subprocess
import sys


def ctest_tests(build):
    out = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out).get("tests", [])


def listed_cases(exe):
    res = subprocess.run([exe, "--list-test-names-only"], capture_output=True, text=True,
                         timeout=60)
    if res.returncode < 0:
        raise RuntimeError(f"{exe} --list-test-names-only died with signal {-res.returncode}")
    return [line for line in res.stdout.split("\n") if line.strip()]


def spec_matches(exe, spec):
    res = subprocess.run([exe, spec, "--list-test-names-only"], capture_output=True, text=True,
                         timeout=60)
    return [line for line in res.stdout.split("\n") if line.strip()]


BAD_NAME = [
    (lambda n: ";" in n, "contains ';' (CMake splits it into two tests)"),
    (lambda n: n != n.strip(), "begins or ends with a blank"),
    (lambda n: "\\" in n, "contains a backslash (CMake and Catch2 escape it differently)"),
    (lambda n: n.startswith("*") or n.endswith("*"), "begins or ends with '*' (a pattern)"),
    (lambda n: n[:1] in ("~", '"'), "begins with '~' or '\"' (Catch2 reads it as a test spec)"),
]


def is_catch_binary(exe, tests_dir):
    if os.path.dirname(os.path.realpath(exe)) != tests_dir or not exe.endswith("_test"):
        return False
    try:
        with open(exe, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return True  # registered but missing: reported below


def check_build(build):
    problems = []
    by_exe = {}
    tests_dir = os.path.realpath(os.path.join(build, "tests"))
    for t in ctest_tests(build):
        cmd = t.get("command") or []
        # The Catch2 tests fr_add_test discovers: a binary of BUILD/tests named *_test, run with
        # the case's name as its first argument.
        if len(cmd) < 2 or not is_catch_binary(cmd[0], tests_dir):
            continue
        by_exe.setdefault(cmd[0], []).append(t)
    total_cases = total_tests = 0
    for exe in sorted(by_exe):
        tests = by_exe[exe]
        name = os.path.basename(exe)
        if not os.access(exe, os.X_OK):
            problems.append(f"{name}: registered with CTest but not built ({exe})")
            continue
        cases = listed_cases(exe)
        total_cases += len(cases)
        total_tests += len(tests)
        for case in cases:
            for bad, why in BAD_NAME:
                if bad(case):
                    problems.append(f"{name}: test case {case!r} {why}")
        if len(cases) != len(tests):
            problems.append(f"{name}: lists {len(cases)} test cases, CTest runs {len(tests)}")
        for t in tests:
            cmd = t["command"]
            if "--warn" not in cmd or cmd[cmd.index("--warn") + 1:][:1] != ["NoTests"]:
                problems.append(f"{name}: CTest test {t['name']!r} runs without --warn NoTests")
            matched = spec_matches(exe, cmd[1])
            if len(matched) != 1:
                problems.append(f"{name}: CTest test {t['name']!r} matches {len(matched)} test "
                                f"cases ({matched[:3]})")
        print(f"test-inventory: {name}: {len(cases)} cases, {len(tests)} CTest tests")
    print(f"test-inventory: {build}: {len(by_exe)} binaries, {total_cases} test cases, "
          f"{total_tests} CTest tests")
    return problems


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().split("\n")[-1], file=sys.stderr)
        return 2
    problems = []
    for build in argv[1:]:
        if not os.path.isfile(os.path.join(build, "CTestTestfile.cmake")):
            print(f"test-inventory: {build}: no CTest build here, skipped")
            continue
        problems += check_build(build)
    for p in problems:
        print(f"test-inventory: FAIL: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
