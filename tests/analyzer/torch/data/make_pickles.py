#!/usr/bin/env python3
"""Makes pickle/nccl_trace_rank_<r> from json/nccl_trace_rank_<r>: the same dump in the form
PyTorch's pickle writer gives it (FlightRecorder::dump_dict): pg_status values are ints, absent
discovered times are None, entries carry stack frames, keys in PyTorch's insertion order.
Protocol 2, as torch's C++ pickler writes. Run from this folder; the outputs are committed."""
import json
import pickle

ENTRY_KEYS = ["frames", "record_id", "pg_id", "process_group", "thread_name", "thread_id",
              "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name", "time_created_ns",
              "duration_ms", "input_sizes", "input_dtypes", "output_sizes", "output_dtypes",
              "state", "time_discovered_started_ns", "time_discovered_completed_ns", "retired",
              "timeout_ms", "is_p2p"]

for rank in (0, 1):
    d = json.load(open(f"json/nccl_trace_rank_{rank}"))
    frame = {"name": "all_reduce", "filename": "torch/distributed/distributed_c10d.py", "line": 2696}
    entries = []
    for e in d["entries"]:
        e = dict(e)
        e["frames"] = [frame, {"name": "train_step", "filename": "/job/train.py", "line": 42}]
        e["process_group"] = tuple(e["process_group"])
        for k in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            if e[k] == 0:
                e[k] = None
        entries.append({k: e[k] for k in ENTRY_KEYS if k in e})
    dump = {
        "version": d["version"],
        "pg_config": d["pg_config"],
        "comm_lib_version": d["comm_lib_version"],
        "pg_status": {k: {kk: int(vv) for kk, vv in v.items()} for k, v in d["pg_status"].items()},
        "entries": entries,
    }
    with open(f"pickle/nccl_trace_rank_{rank}", "wb") as f:
        f.write(pickle.dumps(dump, protocol=2))
