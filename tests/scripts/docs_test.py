#!/usr/bin/env python3
"""The user docs link where they say, and keep benchmark history out.

Over README.md, docs/*.md and the READMEs under cli/, sim/ and examples/:

- every relative link (`[text](path)`, `[text](path#anchor)`, `[text](#anchor)`) names a file
  that exists, and an anchor names a heading of that file (GitHub's slugs: lower case, spaces to
  dashes, punctuation dropped);
- no user doc but docs/benchmarks.md records measurements under a "load average": such diaries
  (every run, on what machine, under what load, before and after each change) belong in
  docs/benchmarks.md, and a user doc gives the current figure in a line with a link there;
- docs/benchmarks.md exists and is linked from the docs whose figures it records.

    tests/scripts/docs_test.py SOURCE_DIR
"""
import glob
import os
import re
import sys

failures = []


def check(what, ok):
    if not ok:
        print("FAIL " + what)
        failures.append(what)


def user_docs(src):
    files = [os.path.join(src, "README.md")]
    files += glob.glob(os.path.join(src, "docs", "*.md"))
    for folder in ("cli", "sim", "examples"):
        files += glob.glob(os.path.join(src, folder, "**", "*.md"), recursive=True)
    return sorted(f for f in files if os.path.isfile(f))


def slug(heading):
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    result, in_code = set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            result.add(slug(line.lstrip("#")))
    return result


def links(path):
    """[(line number, target)] of the relative links outside code."""
    result, in_code = [], False
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if not re.match(r"^[a-z]+:", target):
                result.append((n, target))
    return result


def main():
    if len(sys.argv) != 2:
        print("usage: docs_test.py SOURCE_DIR", file=sys.stderr)
        return 2
    src = sys.argv[1]
    docs = user_docs(src)
    benchmarks = os.path.join(src, "docs", "benchmarks.md")
    check("docs/benchmarks.md exists", os.path.isfile(benchmarks))
    count = 0
    for doc in docs:
        rel = os.path.relpath(doc, src)
        for n, target in links(doc):
            count += 1
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(doc), file_part)) if file_part \
                else doc
            check(f"{rel}:{n}: link to {target}: {file_part} does not exist",
                  os.path.exists(dest))
            if anchor and dest.endswith(".md") and os.path.isfile(dest):
                check(f"{rel}:{n}: link to {target}: no heading makes #{anchor}",
                      anchor in anchors(dest))
        if os.path.abspath(doc) == os.path.abspath(benchmarks):
            continue
        for n, line in enumerate(open(doc, encoding="utf-8"), 1):
            check(f"{rel}:{n}: measurements under a load average belong in docs/benchmarks.md",
                  "load average" not in line.lower())
    for name in ("agent.md", "frd.md", "fr-analyze.md"):
        text = open(os.path.join(src, "docs", name), encoding="utf-8").read()
        check(f"docs/{name} links to benchmarks.md", "(benchmarks.md#" in text)
    print(f"{len(docs)} docs, {count} relative links; {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
