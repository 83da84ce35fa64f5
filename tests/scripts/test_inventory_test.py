#!/usr/bin/env python3
"""tests/test_inventory.py fails on what it exists to catch, and passes on the rest.

Each case is a build directory made by hand: a CTestTestfile.cmake and, in its tests/ folder, a
small compiled stand-in for a Catch2 binary that lists the case names it is given (all of them, or
those a spec matches, ignoring case as Catch2 does). The inventory must pass on cases and CTest
tests that agree one to one, and fail, naming the problem, on: a name with ';' that CMake split
into two tests, a name with a backslash, a test run without --warn NoTests, a case CTest does not
run, and a spec that matches two cases.

Needs a C compiler and ctest; without them this exits 77 (CTest: skipped).

    tests/scripts/test_inventory_test.py SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile

failures = []

FAKE_CATCH = r"""
#include <stdio.h>
#include <string.h>
#include <strings.h>
/* Lists the lines of EXE.names: all, or those equal (ignoring case) to the spec, which is
   unescaped the way Catch2 reads a test spec ("\," -> ","). */
int main(int argc, char** argv) {
  char path[4096], line[1024], spec[1024] = "";
  snprintf(path, sizeof path, "%s.names", argv[0]);
  if (argc == 3) {
    size_t j = 0;
    for (const char* s = argv[1]; *s && j + 1 < sizeof spec; ++s) {
      if (*s == '\\' && s[1]) ++s;
      spec[j++] = *s;
    }
    spec[j] = 0;
  }
  FILE* f = fopen(path, "r");
  if (!f) return 1;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (argc != 3 || strcasecmp(line, spec) == 0) puts(line);
  }
  fclose(f);
  return 0;
}
"""


def check(what, ok):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def cmake_arg(s):
    return "[==[" + s + "]==]"


def make_build(root, name, cases, tests, fake):
    """A build dir whose binary lists `cases`; `tests` are (ctest name, spec, extra args)."""
    build = os.path.join(root, name)
    os.makedirs(os.path.join(build, "tests"))
    exe = os.path.join(build, "tests", "demo_test")
    shutil.copy(fake, exe)
    with open(exe + ".names", "w") as f:
        f.write("".join(c + "\n" for c in cases))
    with open(os.path.join(build, "CTestTestfile.cmake"), "w") as f:
        for test_name, spec, extra in tests:
            args = " ".join(cmake_arg(a) for a in [exe, spec, *extra])
            f.write(f"add_test({cmake_arg(test_name)} {args})\n")
    return build


def run_inventory(script, build):
    res = subprocess.run([sys.executable, script, build], capture_output=True, text=True)
    return res.returncode, res.stdout + res.stderr


def main(src):
    script = os.path.join(src, "tests", "test_inventory.py")
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc or not shutil.which("ctest"):
        print("FR-SKIPPED: needs a C compiler and ctest")
        return 77
    warn = ["--warn", "NoTests"]
    with tempfile.TemporaryDirectory() as tmp:
        fake = os.path.join(tmp, "fake_catch")
        with open(fake + ".c", "w") as f:
            f.write(FAKE_CATCH)
        subprocess.run([cc, "-o", fake, fake + ".c"], check=True)

        good = make_build(tmp, "good", ["a, b", "c [x]"],
                          [("a, b", "a\\, b", warn), ("c [x]", "c \\[x\\]", warn)], fake)
        rc, out = run_inventory(script, good)
        check("cases and tests that agree pass", rc == 0)
        check("the figures are printed", "2 test cases, 2 CTest tests" in out)

        split = make_build(tmp, "split", ["one; two"],
                           [("one", "one", warn), (" two", " two", warn)], fake)
        rc, out = run_inventory(script, split)
        check("a name CMake split fails", rc == 1)
        check("... naming the ';'", "contains ';'" in out)
        check("... and the tests that match nothing", "matches 0 test cases" in out)

        slash = make_build(tmp, "slash", ["shown as \\xNN"], [("shown as \\xNN", "shown as \\xNN", warn)],
                           fake)
        rc, out = run_inventory(script, slash)
        check("a name with a backslash fails", rc == 1 and "backslash" in out)

        nowarn = make_build(tmp, "nowarn", ["a"], [("a", "a", [])], fake)
        rc, out = run_inventory(script, nowarn)
        check("a test run without --warn NoTests fails", rc == 1 and "without --warn NoTests" in out)

        extra = make_build(tmp, "extra", ["a", "b"], [("a", "a", warn)], fake)
        rc, out = run_inventory(script, extra)
        check("a case CTest does not run fails", rc == 1 and "lists 2 test cases, CTest runs 1" in out)

        twice = make_build(tmp, "twice", ["Same", "same"],
                           [("Same", "Same", warn), ("same", "same", warn)], fake)
        rc, out = run_inventory(script, twice)
        check("a spec that matches two cases fails", rc == 1 and "matches 2 test cases" in out)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else
                  os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
