#!/usr/bin/env python3
"""The end of `make test`: how many tests ran, passed, failed and were skipped, and why each skip.

A test that cannot run here ends with FR_SKIP (tests/skip.h): exit code 77, which CTest reports as
skipped, with a line `FR-SKIPPED: reason` in its output. This reads the JUnit files that ctest wrote
(`ctest --output-junit`), one per build folder, and groups the skipped tests by that reason. A test
that CTest did not run for another reason (its executable missing, a failed fixture) counts as
skipped with CTest's own message.

Under CI (FR_CI=1, or CI=true as most CI services set) a skip fails the run unless its reason
starts with one of ALLOWED below: the prerequisites that .ci/run installs must be present there,
so a test that skips for want of torch, buildah or a built target hides a regression.

    python3 tests/ctest_report.py BUILD/ctest-junit.xml [MORE.xml ...]

Exit status: 0, or 1 when a file is unreadable or CI meets a skip outside the allow-list. Files
that do not exist are listed and ignored (a step of `make test` that never got to ctest).
"""
import os
import sys
import xml.etree.ElementTree as ET

# Reasons that cannot be met on the CI machine kind (CPU only, no GPU). Keep this list short: every
# entry is a test CI never runs.
ALLOWED = (
    "no GPU",  # needs a real GPU and driver; the emulation covers the rest
    "sanitizer build",  # by design in the TSan/ASan builds; the plain build runs the test
)

SKIP_MARK = "FR-SKIPPED: "


def skip_reason(case):
    """The FR_SKIP reason in a skipped test's output, else CTest's own message."""
    out = case.findtext("system-out") or ""
    for line in out.splitlines():
        at = line.find(SKIP_MARK)
        if at >= 0:
            return line[at + len(SKIP_MARK):].strip()
    skipped = case.find("skipped")
    message = skipped.get("message", "") if skipped is not None else ""
    return "not run by ctest: " + (message or "no reason given")


def main(paths):
    in_ci = os.environ.get("FR_CI") == "1" or os.environ.get("CI", "").lower() == "true"
    counts = {"run": 0, "passed": 0, "failed": 0, "skipped": 0}
    by_reason = {}
    ok = True
    for path in paths:
        label = os.path.basename(os.path.dirname(os.path.abspath(path)))
        if not os.path.exists(path):
            print(f"ctest-report: {path}: no results (that step did not run ctest)")
            continue
        try:
            root = ET.parse(path).getroot()
        except (ET.ParseError, OSError) as e:
            print(f"ctest-report: {path}: unreadable: {e}", file=sys.stderr)
            ok = False
            continue
        for case in root.iter("testcase"):
            status = case.get("status", "")
            if status == "notrun" or case.find("skipped") is not None:
                counts["skipped"] += 1
                by_reason.setdefault(skip_reason(case), []).append(f"{case.get('name')} ({label})")
                continue
            counts["run"] += 1
            if status == "fail" or case.find("failure") is not None:
                counts["failed"] += 1
            else:
                counts["passed"] += 1

    print(f"== tests: {counts['run']} ran, {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['skipped']} skipped")
    refused = 0
    for reason in sorted(by_reason, key=lambda r: (-len(by_reason[r]), r)):
        names = by_reason[reason]
        allowed = reason.startswith(ALLOWED)
        if in_ci and not allowed:
            refused += len(names)
        tag = "" if allowed or not in_ci else "  [NOT ALLOWED IN CI]"
        print(f"   {len(names):4d} skipped: {reason}{tag}")
        for n in names[:5]:
            print(f"          {n}")
        if len(names) > 5:
            print(f"          ... and {len(names) - 5} more")
    if refused:
        print(f"ctest-report: {refused} skipped test(s) need something CI provides; allowed "
              f"reasons start with: {', '.join(ALLOWED)}", file=sys.stderr)
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("usage: ctest_report.py BUILD/ctest-junit.xml [MORE.xml ...]", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
