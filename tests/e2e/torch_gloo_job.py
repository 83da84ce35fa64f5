#!/usr/bin/env python3
"""One rank of a small real PyTorch job on gloo (127.0.0.1 only, bounded in time), for
torch_incident_e2e_test: rank and world size from RANK and WORLD_SIZE, the rendezvous a file.

Usage: torch_gloo_job.py STORE [HANG_RANK]
Every rank does five all_reduces; then HANG_RANK (default 3) stays in Python (hang_in_python),
never entering all_reduce #6, in which the others wait. Every wait ends within LIMIT_S seconds
(gloo's timeout for the others, a deadline for the hung rank), so the job always ends.
Exit 77 when torch (with gloo) cannot be imported."""
import datetime
import os
import sys
import time

LIMIT_S = 120


def hang_in_python(deadline):
    while time.monotonic() < deadline:
        time.sleep(0.05)


def main():
    try:
        import torch
        import torch.distributed as dist
    except Exception as e:  # pragma: no cover - the test skips
        print(f"torch cannot be imported: {e}", file=sys.stderr)
        return 77
    store = sys.argv[1]
    hang = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=LIMIT_S))
    t = torch.ones(8)
    for _ in range(5):
        dist.all_reduce(t)
    if rank == hang:
        hang_in_python(time.monotonic() + LIMIT_S)
        os._exit(0)
    try:
        dist.all_reduce(t)
    except Exception:
        pass
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
