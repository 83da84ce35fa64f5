#!/usr/bin/env python3
"""scripts/mutate classifies mutations as it says, on a toy CMake project (a few seconds).

The toy: calc.c with add() (tested by ctest test calc_add) and scale() (tested by nothing), and a
test calc_bad that always fails. Checked: a mutation whose original text is absent, or occurs
twice, is refused (exit 2) before anything is built; a test regex that selects no test is
refused; a failing baseline stops the run (exit 3) naming the test; a mutation of add() is killed,
one that does not compile is killed by the compiler, one that hangs is killed at
--mutation-timeout and its test ended, one of scale() survives and, unexplained,
fails the run (exit 1), explained it passes at a low enough --min-score and fails at 90; the
mutated file is restored in the scratch copy, and what was built from it rebuilt, and the source
is never written; a --build-dir that the script did not make is left alone.

Needs cmake and a C compiler; without them this exits 77 (CTest: skipped) with the FR-SKIPPED line
tests/ctest_report.py reads.

    tests/scripts/mutate_test.py SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

failures = []

CMAKE = """cmake_minimum_required(VERSION 3.16)
project(toy C)
enable_testing()
add_library(calc STATIC calc.c)
add_executable(calc_test calc_test.c)
target_link_libraries(calc_test calc)
add_test(NAME calc_add COMMAND calc_test)
add_test(NAME calc_bad COMMAND calc_test fail)
"""
CALC = "int add(int a, int b) { return a + b; }\nint scale(int a) { return a * 1; }\n"
CALC_TEST = """int add(int a, int b);
int main(int argc, char** argv) {
  (void)argv;
  return argc > 1 || add(2, 3) != 5;
}
"""


def block(mid, orig, repl, tests="^calc_add$", extra="", targets="calc_test"):
    return (f"id: {mid}\nfile: calc.c\ntargets: {targets}\ntests: {tests}\nwhat: {mid}\n{extra}"
            f"- |{orig}\n+ |{repl}\n\n")


ADD = block("toy.add", "return a + b;", "return a - b;")
BROKEN = block("toy.broken", "return a + b;", "return a +;")
SCALE = block("toy.scale", "a * 1", "a * 2")
SCALE_KNOWN = block("toy.scale", "a * 1", "a * 2",
                    extra="expect: survives\nwhy: scale() has no test in the toy\n")


def check(what, ok):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def read(path):
    with open(path) as f:
        return f.read()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: mutate_test.py SOURCE_DIR")
    script = os.path.join(sys.argv[1], "scripts", "mutate")
    missing = [t for t in ("cmake", "ctest", "git") if not shutil.which(t)]
    if not (shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")):
        missing.append("a C compiler")
    if missing:
        print("FR-SKIPPED: mutate_test needs " + ", ".join(missing))
        return 77
    tmp = tempfile.mkdtemp(prefix="fr-mutate-test-")
    try:
        cases(script, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


def cases(script, tmp):
    src = os.path.join(tmp, "toy")
    write(os.path.join(src, "CMakeLists.txt"), CMAKE)
    write(os.path.join(src, "calc.c"), CALC)
    write(os.path.join(src, "calc_test.c"), CALC_TEST)
    subprocess.run(["git", "init", "-q", src], check=True)
    subprocess.run(["git", "-C", src, "add", "-A"], check=True)
    scratch = os.path.join(tmp, "scratch")
    listf = os.path.join(tmp, "mutations.txt")

    def mutate(text, *args):
        write(listf, text)
        res = subprocess.run([sys.executable, script, "--source", src, "--list-file", listf,
                              "--build-dir", scratch, "--keep", "-j", "2", *args],
                             capture_output=True, text=True, timeout=300)
        return res.returncode, res.stdout + res.stderr

    def line_of(out, mid):
        return next((ln for ln in out.splitlines() if ln.startswith(mid + " ")), "")

    # Refused before anything is built.
    rc, out = mutate(block("toy.absent", "return a * b;", "return a / b;"))
    check("an absent original text is refused (exit 2)", rc == 2 and "occurs 0 times" in out)
    rc, out = mutate(block("toy.twice", "(int a", "(long a"))
    check("an original text found twice is refused (exit 2)", rc == 2 and "occurs 2 times" in out)
    check("nothing was built for a refused list", not os.path.exists(scratch))
    rc, out = mutate(ADD + "id: toy.add\nfile: calc.c\n")
    check("a list with a block missing its fields is refused", rc == 2 and "has no" in out)

    # A regex that selects nothing, and a failing baseline.
    rc, out = mutate(block("toy.none", "return a + b;", "return a - b;", tests="^no_such$"))
    check("a tests regex selecting no test is refused (exit 2)", rc == 2 and "toy.none" in out)
    rc, out = mutate(block("toy.base", "return a + b;", "return a - b;", tests="^calc_bad$"))
    check("a failing baseline stops the run (exit 3) naming the test",
          rc == 3 and "calc_bad" in out)

    # Killed, killed by the compiler, survived (unexplained, then explained).
    rc, out = mutate(ADD + BROKEN + SCALE)
    check("a run with an unexplained survivor fails (exit 1)", rc == 1)
    check("the tested mutation is killed, by calc_add",
          " killed " in line_of(out, "toy.add") and "calc_add" in line_of(out, "toy.add"))
    check("the mutation that does not compile is killed by the compiler",
          "killed-by-compiler" in line_of(out, "toy.broken"))
    check("the untested mutation survives", "survived" in line_of(out, "toy.scale"))
    check("the score counts both kinds of kill", "score: 2/3 killed" in out)
    check("the survivor is listed as unexplained", "UNEXPLAINED" in out)
    tree_calc = os.path.join(scratch, "tree", "calc.c")
    check("the scratch copy's file is restored", os.path.exists(tree_calc) and read(tree_calc) == CALC)
    check("the source is never written", read(os.path.join(src, "calc.c")) == CALC)

    rc, out = mutate(ADD + BROKEN + SCALE_KNOWN, "--min-score", "60")
    check("an explained survivor passes at --min-score 60 (exit 0)",
          rc == 0 and "known survivor: scale() has no test" in out)
    rc, out = mutate(ADD + BROKEN + SCALE_KNOWN)
    check("the same run fails the default 90% target (exit 1)", rc == 1)
    rc, out = mutate(block("toy.add", "return a + b;", "return a - b;",
                           extra="expect: survives\nwhy: stale\n"))
    check("a mutation said to survive that is killed fails the run (stale list)",
          rc == 1 and "remove its expect" in out)
    rc, out = mutate(block("toy.add", "return a + b;", "return a - b;",
                           extra="expect: either\nwhy: a race kills it in some runs\n"))
    check("a mutation that a race kills in some runs (expect: either) may be killed",
          rc == 0 and "remove its expect" not in out)
    rc, out = mutate(ADD + SCALE, "--only", "toy.add")
    check("--only runs just the named mutation", rc == 0 and "toy.scale" not in out)

    # A mutation that hangs its test is killed when its tests run past --mutation-timeout, and
    # the hung test is ended with them.
    start = time.time()
    rc, out = mutate(block("toy.hang", "return a + b;", "while (1) {} return a + b;"),
                     "--mutation-timeout", "5", "--test-timeout", "100")
    check("a hanging mutation is killed at --mutation-timeout",
          "ran past --mutation-timeout" in line_of(out, "toy.hang") and time.time() - start < 60)
    hung = subprocess.run(["pgrep", "-f", os.path.join(scratch, "tree", "build", "calc_test")],
                          capture_output=True, text=True).stdout.split()
    check("the hung test does not outlive the run", not hung)

    # The next mutation rebuilds only the library, yet runs calc_test: it must find calc_test
    # rebuilt from the restored add(), not the one built while add() was mutated.
    rc, out = mutate(ADD + block("toy.scale_lib", "a * 1", "a * 2", targets="calc"),
                     "--min-score", "0")
    check("a binary built from a mutated file is rebuilt once it is restored",
          "survived" in line_of(out, "toy.scale_lib"))

    # A folder the script did not make is never used (nor removed).
    other = os.path.join(tmp, "precious")
    write(os.path.join(other, "keep.txt"), "mine\n")
    write(listf, ADD)
    res = subprocess.run([sys.executable, script, "--source", src, "--list-file", listf,
                          "--build-dir", other], capture_output=True, text=True, timeout=60)
    check("a --build-dir not made by the script is refused and left alone",
          res.returncode != 0 and read(os.path.join(other, "keep.txt")) == "mine\n")


if __name__ == "__main__":
    sys.exit(main())
