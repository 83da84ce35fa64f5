#!/usr/bin/env python3
"""Every tool's --help and its documentation name the same options.

For frd and each of its subcommands, fr-analyze and `fr-analyze export`, fr-run, fr-simjob and
fr-gendumps this runs `TOOL [SUB] --help` and reads the options it lists (-h/--help aside). Then,
over the user documentation (README.md, docs/*.md, the READMEs under cli/ and examples/):

- every option the help lists is documented for that command: it appears in a flag table or a
  line of a section whose heading names the command (`### frd node`, `# fr-run: ...`), in a
  paragraph that names the command, or on a command line that runs it;
- every option the documentation gives the command is one its help lists: the first column of a
  flag table (`| flag | ...` or `| option | ...`) in a section whose heading names the command,
  and every `--option` on a command line that runs it (a code span or a line of a code block:
  `frd node --log-dir X`, `fr-run --coordinator A -- python train.py`; for fr-run the options
  end at its command);
- `fr-simjob --help` lists the fault kinds of the fault table of cli/fr-simjob/README.md, and
  only those.

docs/benchmarks.md is history (commands as they were then) and is not read. Prints one line per
disagreement and exits 1 on any; exits 77 (CTest: skipped), with the FR-SKIPPED line
tests/ctest_report.py reads, when a tool is not built.

    tests/cli/help_docs_test.py BUILD_DIR SOURCE_DIR
"""
import glob
import os
import re
import subprocess
import sys

TOOLS = ["frd", "fr-analyze", "fr-run", "fr-simjob", "fr-gendumps"]
# Commands whose options are checked; subcommands are found from the help of their tool.
SKIP_DOCS = {"docs/benchmarks.md"}

OPTION_LINE = re.compile(r"^ {1,6}(?:-\w,)?(--[a-z][a-z0-9-]*)(.*)$")
# The word after an option in a help line that says it takes a value: CLI11's TEXT, INT:INT,
# FLOAT:POSITIVE, UINT, ...; fr-run's ADDR, F, DIR, ... (not "Needs:" or "Excludes:").
VALUE_WORD = re.compile(r"^[A-Z][A-Z_]*(?=$|[:=.\s])")
FLAG = re.compile(r"--[a-z][a-z0-9-]*\*?")
# Shell's separators; a `|` with no blank beside it is usage's alternation (`auto|SEC`).
SHELL_SPLIT = re.compile(r"\s\|\|?\s|&&|;|\s&\s|\$\(|`")


def run_help(bindir, argv):
    res = subprocess.run([os.path.join(bindir, argv[0]), *argv[1:], "--help"], capture_output=True,
                         text=True, timeout=60)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} --help exited {res.returncode}: {res.stderr}")
    return res.stdout


def parse_help(text):
    """(options -> takes a value, subcommands) of one --help text."""
    options, subs, section = {}, [], None
    for line in text.split("\n"):
        if line and not line[0].isspace():
            section = line.rstrip(":").strip().lower()
            continue
        if section == "subcommands":
            words = line.split()
            if words:
                subs.append(words[0])
            continue
        if section != "options":
            continue
        m = OPTION_LINE.match(line)
        if m and m.group(1) not in ("--help",):
            rest = m.group(2).strip()
            options[m.group(1)] = bool(VALUE_WORD.match(rest))
    return options, subs


def help_commands(bindir):
    """{command key ("frd node") -> {option -> takes a value}} for every tool and subcommand."""
    commands = {}
    for tool in TOOLS:
        options, subs = parse_help(run_help(bindir, [tool]))
        commands[tool] = options
        for sub in subs:
            commands[f"{tool} {sub}"] = parse_help(run_help(bindir, [tool, sub]))[0]
    return commands


def doc_files(src):
    files = [os.path.join(src, "README.md")]
    files += sorted(glob.glob(os.path.join(src, "docs", "*.md")))
    files += sorted(glob.glob(os.path.join(src, "cli", "**", "*.md"), recursive=True))
    files += sorted(glob.glob(os.path.join(src, "examples", "**", "*.md"), recursive=True))
    return [f for f in files if os.path.relpath(f, src) not in SKIP_DOCS and os.path.isfile(f)]


def names_command(text, key):
    """Whether TEXT names the command KEY ("frd node") as words of their own."""
    words = r"\s+".join(re.escape(w) for w in key.split())
    return re.search(r"(?<![\w/.-])" + words + r"(?![\w-])", text) is not None


def heading_command(chain, keys):
    """The command named by the deepest heading of CHAIN that names one (the longest key wins)."""
    for heading in reversed(chain):
        named = [k for k in keys if names_command(heading, k)]
        if named:
            return max(named, key=len)
    return None


def command_runs(line, commands):
    """[(key, [options])] for every run of a tool on one line of shell."""
    runs = []
    for segment in SHELL_SPLIT.split(line):
        tokens = segment.split()
        i = 0
        while i < len(tokens):
            tool = os.path.basename(tokens[i])
            after_flag = i > 0 and tokens[i - 1].startswith("-")
            if tool not in TOOLS or after_flag:
                i += 1
                continue
            key = tool
            if i + 1 < len(tokens) and f"{tool} {tokens[i + 1]}" in commands:
                key = f"{tool} {tokens[i + 1]}"
                i += 1
            takes_value = commands[key]
            options, i = [], i + 1
            while i < len(tokens):
                token = tokens[i]
                if token == "--":
                    break
                m = FLAG.search(token)
                if m and re.match(r"^[\[(]*--", token):
                    options.append(m.group(0))
                    if "=" not in token and takes_value.get(m.group(0)):
                        i += 1  # its value
                elif tool == "fr-run" and not token.startswith("-"):
                    break  # fr-run's command starts here
                i += 1
            runs.append((key, options))
            break
    return runs


def read_doc(path, commands):
    """(documented, given): {key -> set of options} the doc documents for each command, and
    [(key, option, where)] the options it gives each command."""
    keys = sorted(commands, key=len, reverse=True)
    documented = {k: set() for k in commands}
    given = []
    chain, in_code, in_flag_table = [], False, False
    lines = open(path, encoding="utf-8").read().split("\n")
    # Paragraphs: runs of non-blank lines outside code blocks, by the index of their first line.
    paragraph_of, start = {}, None
    for n, line in enumerate(lines):
        if line.startswith("```"):
            in_code = not in_code
            start = None
            continue
        if in_code or not line.strip():
            start = None
            continue
        start = n if start is None else start
        paragraph_of[n] = start
    paragraphs = {}
    for n, s in paragraph_of.items():
        paragraphs.setdefault(s, []).append(lines[n])

    in_code, pending = False, None  # pending: the code block's command line so far, and where

    def run_code(code, where):
        for key, options in command_runs(code, commands):
            documented[key].update(options)
            given.extend((key, option, where) for option in options)

    for n, line in enumerate(lines):
        where = f"{os.path.basename(path)}:{n + 1}"
        if line.startswith("```"):
            if pending:
                run_code(*pending)
            in_code, pending = not in_code, None
            continue
        if in_code:
            # A line ending in a backslash, or an indented one, continues the command before it.
            code = "" if line.lstrip().startswith("#") else line.split(" #")[0]
            if pending and (pending[0].endswith("\\") or line[:1].isspace()):
                pending = (pending[0].rstrip("\\") + " " + code.strip(), pending[1])
            else:
                if pending:
                    run_code(*pending)
                pending = (code, where)
            continue
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            chain = chain[:level - 1] + [""] * (level - 1 - len(chain)) + [line.lstrip("#")]
            in_flag_table = False
            continue
        section = heading_command(chain, keys)
        flags = FLAG.findall(line)
        if section:
            documented[section].update(flags)
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells and cells[0].lower() in ("flag", "option"):
                in_flag_table = True
            elif in_flag_table and section and cells:
                for flag in FLAG.findall(cells[0]):
                    given.append((section, flag, where))
        elif not line.startswith("|"):
            in_flag_table = False
        if n in paragraph_of:
            text = " ".join(paragraphs[paragraph_of[n]])
            for key in keys:
                if names_command(text, key):
                    documented[key].update(flags)
        for code in re.findall(r"`([^`]+)`", line):
            run_code(code, where)
    return documented, given


def help_fault_kinds(text):
    """The fault kinds `fr-simjob --help` lists: the names at the start of the lines between its
    "Fault kinds" line and its exit codes."""
    kinds, inside = set(), False
    for line in text.split("\n"):
        if line.startswith("Fault kinds"):
            inside = True
        elif line.startswith("Exit codes"):
            inside = False
        elif inside and re.match(r"^  [a-z]", line):
            names = line.split("  ")[1].strip() if "  " in line[2:] else line.strip()
            kinds.update(k.strip() for k in names.split(",") if k.strip())
    return kinds


def doc_fault_kinds(path):
    """The fault kinds of the fault tables (`| kind | ...`) of fr-simjob's README."""
    kinds, in_table = set(), False
    for line in open(path, encoding="utf-8").read().split("\n"):
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0].lower() == "kind":
            in_table = True
        elif in_table:
            kinds.update(re.findall(r"`([a-z][a-z0-9-]*)`", cells[0]))
    return kinds


def check_fault_kinds(bindir, src):
    """fr-simjob's --help and its README list the same fault kinds; returns the disagreements."""
    readme = os.path.join(src, "cli", "fr-simjob", "README.md")
    in_help = help_fault_kinds(run_help(bindir, ["fr-simjob"]))
    in_doc = doc_fault_kinds(readme)
    failures = 0
    if not in_doc:
        print(f"FAIL {readme}: no fault table (| kind | ...) found")
        failures += 1
    for kind in sorted(in_doc - in_help):
        print(f"FAIL cli/fr-simjob/README.md documents fault kind {kind}, "
              "which `fr-simjob --help` does not list")
        failures += 1
    for kind in sorted(in_help - in_doc):
        print(f"FAIL `fr-simjob --help` lists fault kind {kind}, "
              "which its README does not document")
        failures += 1
    print(f"fr-simjob: {len(in_help)} fault kinds in its help, {len(in_doc)} in its README")
    return failures


def has_option(options, flag):
    if flag.endswith("*"):
        return any(o.startswith(flag[:-1]) for o in options)
    return flag in options


def main():
    if len(sys.argv) != 3:
        print("usage: help_docs_test.py BUILD_DIR SOURCE_DIR", file=sys.stderr)
        return 2
    build, src = sys.argv[1], sys.argv[2]
    bindir = os.path.join(build, "bin")
    missing = [t for t in TOOLS if not os.access(os.path.join(bindir, t), os.X_OK)]
    if missing:
        print(f"FR-SKIPPED: not built: {', '.join(missing)} (in {bindir})")
        return 77
    commands = help_commands(bindir)
    documented = {k: set() for k in commands}
    given = []
    for path in doc_files(src):
        doc_documented, doc_given = read_doc(path, commands)
        for key, flags in doc_documented.items():
            documented[key].update(flags)
        given += doc_given

    failures = 0
    for key in sorted(commands):
        for option in sorted(commands[key]):
            if not has_option(documented[key], option) and not any(
                    f.endswith("*") and option.startswith(f[:-1]) for f in documented[key]):
                print(f"FAIL `{key} --help` lists {option}, which no doc documents for `{key}`")
                failures += 1
    for key, flag, where in given:
        if not has_option(commands[key], flag):
            print(f"FAIL {where} gives `{key}` {flag}, which `{key} --help` does not list")
            failures += 1
    failures += check_fault_kinds(bindir, src)
    total = sum(len(o) for o in commands.values())
    print(f"{len(commands)} commands, {total} options in their help, {len(given)} options "
          f"given in the docs; {failures} disagreement(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
