"""fr: a flight recorder for hung NCCL jobs, from Python.

The wheel carries the tools (``fr-run``, ``frd``, ``fr-analyze``) and the agent
(``libfr_agent.so``); this package finds them and gives the analysis as typed objects::

    import fr
    result = fr.analyze(["/shared/dumps/job-42"])
    print(result.verdict.kind, result.verdict.culprit_ranks, result.verdict.summary)
    for row in result.verdict.evidence:
        print(row.rank, row.state, row.culprit)

``fr.analyze`` runs ``fr-analyze --json`` and reads its ``fr-analysis/1`` document
(docs/fr-analyze.md); ``fr.snapshot`` runs ``frd snapshot``. Both raise ``fr.FrError`` with
the tool's one-line reason when there is nothing to analyse or snapshot.
"""

from ._api import (
    Analysis,
    Communicator,
    Evidence,
    Finding,
    Frame,
    FrError,
    Inputs,
    OtherJob,
    Ranks,
    Skipped,
    TorchView,
    agent_path,
    analyze,
    bin_dir,
    snapshot,
    tool_path,
    version,
)

__all__ = [
    "Analysis",
    "Communicator",
    "Evidence",
    "Finding",
    "Frame",
    "FrError",
    "Inputs",
    "OtherJob",
    "Ranks",
    "Skipped",
    "TorchView",
    "agent_path",
    "analyze",
    "bin_dir",
    "snapshot",
    "tool_path",
    "version",
]
