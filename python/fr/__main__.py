"""python -m fr: the tools by name, or where they are.

    python -m fr                      where the tools and the agent are, and the version
    python -m fr analyze PATH...      fr-analyze (any of its flags)
    python -m fr run -- CMD...        fr-run
    python -m fr frd ROLE ...         frd (node, coordinator, snapshot, status, dump)
"""

import os
import sys

from ._api import agent_path, bin_dir, tool_path, version

_TOOLS = {"analyze": "fr-analyze", "run": "fr-run", "frd": "frd",
          "fr-analyze": "fr-analyze", "fr-run": "fr-run"}


def main(argv):
    if not argv or argv[0] in ("-h", "--help", "where"):
        print(f"fr {version()}")
        print(f"tools: {bin_dir()} (fr-run, frd, fr-analyze)")
        print(f"agent: {agent_path()}")
        print(__doc__.strip().split("\n", 1)[1].rstrip() if argv else
              "usage: python -m fr analyze|run|frd ARGS...  (python -m fr --help)")
        return 0
    name = _TOOLS.get(argv[0])
    if name is None:
        print(f"python -m fr: unknown command {argv[0]!r}; analyze, run or frd", file=sys.stderr)
        return 2
    os.execv(tool_path(name), [name] + argv[1:])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
