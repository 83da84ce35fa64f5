"""A hung job's verdict in a notebook or a script, with the wheel installed in the torch venv:

    make wheel && pip install build/wheels/fr-*.whl
    python examples/python/first_hang.py DUMPS...        # a dump set, or torch's own FR dumps

Where the dumps come from: the coordinator writes one per incident under its --dump-dir
(DIR/<job>/<incident>/); `fr.snapshot(out)` copies this node's flight logs now; torch's own
Flight Recorder dumps (TORCH_FR_DUMP_TEMP_FILE=.../rank_) are read as they are. Without an
argument the script takes the 6-rank gloo hang the tests keep in tests/analyzer/torch/data.
"""

import os
import sys

import fr

here = os.path.dirname(os.path.abspath(__file__))
paths = sys.argv[1:] or [os.path.join(here, "..", "..", "tests", "analyzer", "torch", "data",
                                      "torch-2.15-gloo", "hang", "file")]

try:
    result = fr.analyze(paths)
except fr.FrError as e:  # nothing readable: the tool's one line says why
    sys.exit(f"fr-analyze: {e}")

v = result.verdict
if result.mixed_jobs:
    print("these dumps mix jobs; the verdict is about", result.inputs.job_id, "alone")
print(f"{v.kind}: {v.summary}")
if v.comm:
    print(f"  communicator {v.comm.name or v.comm.id} (size {v.comm.size}), {v.op} #{v.seq}")
print("  culprit ranks:", v.culprit_ranks or "none named")

# The evidence: every member at the verdict's op, culprits first.
for row in sorted(v.evidence, key=lambda e: (not e.culprit, e.rank if e.rank is not None else -1)):
    last = row.last_completed or {}
    print(f"  {'*' if row.culprit else ' '} rank {row.rank}: {row.state:<12} "
          f"last completed {last.get('op', '-')} #{last.get('seq', '-')}")

for f in result.findings:
    print(f"- {f.kind}{' (consequence)' if f.consequence else ''}: {f.summary}")
print(f"ranks: {len(result.ranks.found)} found of {result.ranks.expected}, "
      f"missing {result.ranks.missing or 'none'}")
