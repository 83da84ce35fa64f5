#!/usr/bin/env python3
"""Writes a synthetic PyTorch Flight Recorder dump set for the analyzer benchmark, in the shape
PyTorch's own generator of test dumps gives them (one pickle per rank, <prefix><rank>, schema
2.10, as the NCCL backend fills it: completed entries with their discovered times, stack frames
on every entry). No torch needed.

Usage: gen_torch_pickles.py OUT RANKS ENTRIES FRAMES [CULPRIT]

Every rank runs the same all_reduces on the default group; rank CULPRIT (default RANKS // 2 + 1)
stays on the host before the last one, which the others' GPUs started (the kernel waits for its
peers) and never finished: the verdict is not_entered, rank CULPRIT, at sequence number
ENTRIES + 1. Each frame is its own dict
(as torch writes them, strings memoized), so the files are as large as real ones. Files are
written by two processes."""
import multiprocessing as mp
import os
import pickle
import sys

T0 = 1_700_000_000_000_000_000
STEP_NS = 2_000_000


def frames_for(i, n):
    return [{"name": f"layer_{k}_forward" if k else "all_reduce",
             "filename": f"/workspace/model/block_{k % 5}.py" if k else
             "torch/distributed/distributed_c10d.py",
             "line": 100 + 7 * k + (i % 3)} for k in range(n)]


def one_rank(args):
    out, ranks, entries, frames, culprit, rank = args
    ranks_text = "[" + ", ".join(str(r) for r in range(ranks)) + "]"
    first = 1 if rank == culprit else 2
    last = entries if rank == culprit else entries + 1
    es = []
    for rid, seq in enumerate(range(first, last + 1)):
        t = T0 + seq * STEP_NS + rank * 1000
        done = seq <= entries
        es.append({
            "frames": frames_for(seq, frames),
            "record_id": rid,
            "pg_id": 0,
            "process_group": ("0", "default_pg"),
            "thread_name": "pt_main_thread",
            "thread_id": "140000000000000",
            "collective_seq_id": seq,
            "p2p_seq_id": 0,
            "op_id": seq,
            "profiling_name": "nccl:all_reduce",
            "time_created_ns": t,
            "duration_ms": 0.5 if done else None,
            "input_sizes": [[1024, 1024]],
            "input_dtypes": ["Float"],
            "output_sizes": [[1024, 1024]],
            "output_dtypes": ["Float"],
            "state": "completed" if done else "started",
            "time_discovered_started_ns": t + 100_000,
            "time_discovered_completed_ns": t + 600_000 if done else None,
            "retired": done,
            "timeout_ms": 600_000,
            "is_p2p": False,
        })
    dump = {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks_text}},
        "pg_status": {"0": {"last_enqueued_collective": last,
                            "last_started_collective": last,
                            "last_completed_collective": min(last, entries)}},
        "comm_lib_version": "2.30.7",
        "entries": es,
    }
    with open(os.path.join(out, f"nccl_trace_rank_{rank}"), "wb") as f:
        f.write(pickle.dumps(dump, protocol=2))


def main(argv):
    if len(argv) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    out, ranks, entries, frames = argv[1], int(argv[2]), int(argv[3]), int(argv[4])
    culprit = int(argv[5]) if len(argv) > 5 else ranks // 2 + 1
    os.makedirs(out, exist_ok=True)
    jobs = [(out, ranks, entries, frames, culprit, r) for r in range(ranks)]
    with mp.Pool(2) as pool:
        for _ in pool.imap_unordered(one_rank, jobs, chunksize=8):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
