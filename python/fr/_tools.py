"""The console scripts: each runs its tool from the wheel with the same arguments."""

import os
import sys

from ._api import tool_path


def _exec(name: str) -> None:
    path = tool_path(name)
    os.execv(path, [name] + sys.argv[1:])


def fr_run() -> None:
    _exec("fr-run")


def frd() -> None:
    _exec("frd")


def fr_analyze() -> None:
    _exec("fr-analyze")
