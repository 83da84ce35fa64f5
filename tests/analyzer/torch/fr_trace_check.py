#!/usr/bin/env python3
"""Checks a directory of exported dumps the way PyTorch's fr_trace script reads them
(torch/distributed/flight_recorder/components/loader.py, builder.py, types.py), without torch:
the common file prefix and the rank from each file name, the dump keys, pg_config ranks as Python
literals and the same membership on every rank, profiling names split as its Op class splits
them, p2p ranks inside their group. Usage: fr_trace_check.py DIR json|pickle. Exit 0 when all hold."""
import ast
import json
import os
import pickle
import re
import sys

COLLECTIVES = {"broadcast", "reduce", "all_gather", "all_reduce", "reduce_scatter", "gather",
               "scatter", "all_to_all", "_all_gather_base", "_reduce_scatter_base", "barrier"}
P2P = {"send", "recv"}


def main(d, form):
    files = sorted(os.listdir(d))
    prefixes = {re.search(r"([\w\-\_]*?)(\d+)$", f).group(1) for f in files}
    assert len(prefixes) == 1, prefixes
    prefix = prefixes.pop()
    groups, descs = {}, {}
    for f in files:
        rank = int(f[len(prefix):])
        with open(os.path.join(d, f), "rb") as fh:
            dump = pickle.load(fh) if form == "pickle" else json.load(fh)
        entries, version, pg_config = dump["entries"], dump["version"], dump["pg_config"]
        assert version == "2.10", version
        for pg_uid, pg in pg_config.items():
            ranks = ast.literal_eval(pg["ranks"])
            if groups.setdefault(pg_uid, set(ranks)) != set(ranks):
                raise AssertionError(f"membership of {pg_uid} differs on rank {rank}")
            if descs.setdefault(pg_uid, pg["desc"]) != pg["desc"]:
                raise AssertionError(f"desc of {pg_uid} differs on rank {rank}")
            assert rank in ranks, (rank, ranks)
        for e in entries:
            pg_name, desc = e["process_group"]
            if form == "pickle":
                assert isinstance(e["process_group"], tuple)
            backend, name = e["profiling_name"].split(":")
            assert backend in ("nccl", "xccl")
            parts = name.split(" ")
            kind = parts[0]
            assert kind in COLLECTIVES | P2P | {"coalesced"}, kind
            members = sorted(groups[pg_name])
            if kind == "send":
                s, t = parts[1].split("->")
                assert members[int(s)] == rank
                members[int(t)]
            elif kind == "recv":
                t, s = parts[1].split("<-")
                assert members[int(t)] == rank
                members[int(s)]
            for k in ("collective_seq_id", "p2p_seq_id", "record_id", "input_sizes",
                      "output_sizes", "state", "input_dtypes", "output_dtypes",
                      "time_created_ns", "is_p2p", "op_id", "pg_id"):
                assert k in e, k
            assert e["state"] in ("scheduled", "started", "completed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
