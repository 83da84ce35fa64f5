#!/usr/bin/env python3
"""The shape checks fail on what they exist to catch, and pass on the rest.

scripts/check-format on a tree holding one file as clang-format makes it and one that is not:
exit 1 naming only the second; --fix formats it, after which the check passes. Symlinks and FIFOs
where sources belong are left alone. scripts/check-shape on a file of 701 lines and a function of
101 lines: exit 1 naming both; at 700 and 100 lines it passes.

Both checks need their tool (clang-format 14, lizard); without one this exits 77 (CTest: skipped)
with the FR-SKIPPED line tests/ctest_report.py reads.

    tests/scripts/check_scripts_test.py SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile

failures = []


def check(what, ok):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(script, *args):
    res = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
    return res.returncode, res.stdout + res.stderr


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def format_cases(src, tmp):
    script = os.path.join(src, "scripts", "check-format")
    root = os.path.join(tmp, "format")
    os.makedirs(root)
    shutil.copy(os.path.join(src, ".clang-format"), root)
    write(os.path.join(root, "good", "a.cpp"), "int add(int a, int b) { return a + b; }\n")
    write(os.path.join(root, "bad", "b.cpp"), "int   sub(int a,int b){\nreturn a-b;}\n")
    # Not sources to format: a symlink to the bad file and a FIFO named like a source.
    os.symlink(os.path.join(root, "bad", "b.cpp"), os.path.join(root, "good", "link.cpp"))
    os.mkfifo(os.path.join(root, "good", "fifo.cpp"))
    rc, out = run(script, "--root", root)
    if rc == 77:
        return out
    check("check-format fails on a file clang-format would change", rc == 1)
    check("check-format names the unformatted file", "bad/b.cpp" in out)
    check("check-format names no formatted file, symlink or FIFO",
          "good/" not in out.replace("bad/b.cpp", ""))
    rc, out = run(script, "--root", root, "--fix")
    check("check-format --fix succeeds", rc == 0)
    with open(os.path.join(root, "bad", "b.cpp")) as f:
        check("check-format --fix formats the file", f.read() == "int sub(int a, int b) { return a - b; }\n")
    rc, out = run(script, "--root", root)
    check("check-format passes once fixed", rc == 0)
    return None


def function_of(name, lines):
    body = "".join(f"  x += {i};\n" for i in range(lines - 4))
    return f"int {name}() {{\n  int x = 0;\n{body}  return x;\n}}\n"


def shape_cases(src, tmp):
    script = os.path.join(src, "scripts", "check-shape")
    root = os.path.join(tmp, "shape")
    write(os.path.join(root, "fits", "f.cpp"), function_of("fits", 100) + "\n" * 600)
    rc, out = run(script, "--root", root)
    if rc == 77:
        return out
    check("check-shape passes a 700-line file with a 100-line function", rc == 0)
    write(os.path.join(root, "long", "l.cpp"), "// line\n" * 701)
    write(os.path.join(root, "long", "g.cpp"), function_of("too_long", 101))
    rc, out = run(script, "--root", root)
    check("check-shape fails past 700 lines or 100 per function", rc == 1)
    check("check-shape names the long file", "long/l.cpp" in out)
    check("check-shape names the long function", "too_long" in out)
    check("check-shape does not name what fits", "fits" not in out)
    return None


def main():
    src = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="fr-check-scripts-") as tmp:
        skipped = [s for s in (format_cases(src, tmp), shape_cases(src, tmp)) if s]
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    if skipped:
        print("".join(skipped).strip())
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
