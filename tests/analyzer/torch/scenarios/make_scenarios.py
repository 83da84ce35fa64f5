#!/usr/bin/env python3
"""Writes the scenarios of PyTorch's own Flight Recorder tests (test/distributed/flight_recorder:
test_fr_analysis.py's match_one_event, test_all_events and testBuildDB cases 1-6, test_loader.py,
and the dump tests of test_c10d_nccl.py) as per-rank dump sets, in the layout of a genuine
PyTorch 2.15 dump: the pickle torch's _dump_fr_trace() returned on one rank of a real job
(../data/torch-2.15-gloo/op/bytes/fr_rank_0, made by ../real/fr_torch_job.py). Every key of that
dump and of its entries is kept, with the values each scenario gives; profiling names are those
the NCCL backend writes (coalesced end markers, per-op uneven collectives), pg_config lists each
group's members as NCCL's dumps do, and pg_status counts in collective numbers.

Usage: make_scenarios.py OUT [--fr-trace]
  OUT/<scenario>/fr_rank_<r>   one pickle per rank (the form both fr-analyze and fr_trace read)
  --fr-trace                   also runs torch's fr_trace on each set and prints its last lines
The sets are committed under ../data/torch-scenarios; scenarios_test.cpp holds, per scenario,
what torch's test expects and what fr-analyze says."""
import copy
import os
import pickle
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "..", "data", "torch-2.15-gloo", "op", "bytes", "fr_rank_0")
T0 = 1796256936901358904  # the genuine dump's first time_created_ns
F = "Float"


def op(name, seq, state="completed", ins=((4, 4),), outs=None, dt=F, odt=None, pg=None,
       p2p_seq=0, started=None):
    """One entry's values: `name` is the op part of the profiling name ("all_reduce",
    "send 0->1"); outs defaults to ins, odt to dt; started says whether the start was seen
    (timing on), None when timing is off."""
    return dict(name=name, seq=seq, state=state, ins=[list(s) for s in ins],
                outs=[list(s) for s in (ins if outs is None else outs)], dt=dt,
                odt=dt if odt is None else odt, pg=pg or ("0", "default_pg"),
                p2p=name.startswith(("send", "recv")), p2p_seq=p2p_seq, started=started)


def done(n, name="all_reduce", **kw):
    """n collectives that every rank finished, numbered from 1."""
    return [op(name, i + 1, **kw) for i in range(n)]


def ranks_text(ranks):
    return "[" + ", ".join(str(r) for r in ranks) + "]"


def pg_config(groups):
    """groups: {pg_name: (desc, ranks)} as NCCL's dump lists them."""
    return {name: {"name": name, "desc": desc, "ranks": ranks_text(ranks)}
            for name, (desc, ranks) in groups.items()}


def world(n):
    return {"0": ("default_pg", list(range(n)))}


def entry(tmpl, rank, rid, o, op_ids):
    e = copy.deepcopy(tmpl)
    pg_name = o["pg"][0]
    op_ids[pg_name] = op_ids.get(pg_name, 0) + 1
    e["frames"] = []
    e["record_id"] = rid
    e["pg_id"] = int(pg_name) if pg_name.isdigit() else 0
    e["process_group"] = tuple(o["pg"])
    e["collective_seq_id"] = o["seq"] if not o["p2p"] else o.get("coll", 0)
    e["p2p_seq_id"] = o["p2p_seq"]
    e["op_id"] = op_ids[pg_name]
    e["profiling_name"] = "nccl:" + o["name"]
    e["time_created_ns"] = T0 + rid * 1000000 + rank * 1000
    e["input_sizes"] = o["ins"]
    e["input_dtypes"] = [o["dt"]] * len(o["ins"]) if o["dt"] else []
    e["output_sizes"] = o["outs"]
    e["output_dtypes"] = [o["odt"]] * len(o["outs"]) if o["odt"] else []
    e["state"] = o["state"]
    started = o["started"]
    if started is not None:
        e["time_discovered_started_ns"] = e["time_created_ns"] + 500 if started else None
        e["time_discovered_completed_ns"] = (e["time_created_ns"] + 900
                                             if o["state"] == "completed" else None)
    e["retired"] = o["state"] == "completed"
    e["is_p2p"] = o["p2p"]
    return e


def pg_status(ops, timing):
    """Per pg_id, the last collective enqueued, started and completed (collective numbers)."""
    out = {}
    for o in ops:
        if o["p2p"] or o["seq"] <= 0:
            continue
        pg_id = o["pg"][0]
        s = out.setdefault(pg_id, {"last_enqueued_collective": -1,
                                   "last_started_collective": -1,
                                   "last_completed_collective": -1})
        s["last_enqueued_collective"] = max(s["last_enqueued_collective"], o["seq"])
        if o["state"] == "completed":
            s["last_completed_collective"] = max(s["last_completed_collective"], o["seq"])
        if timing and (o["started"] or o["state"] == "completed"):
            s["last_started_collective"] = max(s["last_started_collective"], o["seq"])
    return out


def dump(tmpl_dump, tmpl_entry, rank, ops, groups, version=None):
    d = copy.deepcopy(tmpl_dump)
    op_ids = {}
    d["entries"] = [entry(tmpl_entry, rank, i, o, op_ids) for i, o in enumerate(ops)]
    d["version"] = version or tmpl_dump["version"]
    d["pg_config"] = pg_config(groups) if groups is not None else {}
    d["comm_lib_version"] = "2.27.5"
    timing = any(o["started"] is not None for o in ops)
    d["pg_status"] = pg_status(ops, timing)
    return d


def per_rank(n, common, last=None):
    """n ranks doing `common`, then last(rank) -> list of further ops."""
    return {r: list(common) + (last(r) if last else []) for r in range(n)}


# --- the scenarios: name -> (world groups per rank or for all, {rank: ops}, versions) --------

def match_one_event():
    s = {}
    w4 = world(4)
    pre = done(2)
    s["match_matched"] = (w4, per_rank(4, done(3)))
    s["match_type"] = (w4, per_rank(4, pre, lambda r: [
        op("all_gather" if r == 2 else "all_reduce", 3, "scheduled",
           outs=[(16, 4)] if r == 2 else None)]))
    s["match_alltoall_even"] = (w4, per_rank(4, pre, lambda r: [
        op("all_to_all", 3, "scheduled")]))
    s["match_input_size"] = (w4, per_rank(4, pre, lambda r: [
        op("all_reduce", 3, "scheduled", ins=[(5, 4)] if r == 1 else [(4, 4)],
           outs=[(4, 4)])]))
    s["match_output_size"] = (w4, per_rank(4, pre, lambda r: [
        op("all_reduce", 3, "scheduled", outs=[(5, 4)] if r == 1 else [(4, 4)])]))
    s["match_output_size_all"] = (w4, per_rank(4, done(3, outs=[(5, 4)])))
    s["match_state"] = (w4, per_rank(4, pre, lambda r: [
        op("all_reduce", 3, "completed" if r == 1 else "scheduled")]))
    s["match_dtype"] = (w4, per_rank(4, done(3), lambda r: [
        op("all_reduce", 4, "scheduled", odt="Half" if r == 1 else F)]))
    s["match_gather_nonroot"] = (world(2), per_rank(2, pre, lambda r: [
        op("gather", 3, ins=[(4, 4)], outs=[(4, 4), (4, 4)] if r == 0 else [()],
           odt=F if r == 0 else "")]))
    s["match_gather_one_output"] = (world(2), per_rank(2, pre, lambda r: [
        op("gather", 3, ins=[(4, 4)], outs=[(4, 4), (4, 4)] if r == 0 else [(4, 4)],
           odt=F if r == 0 else "")]))
    return s


# test_all_events: every op torch's COLLECTIVES names, matched, with the test's sizes (2 ranks).
ALL_EVENTS = [
    ("broadcast", [(4, 4)], [(4, 4)]), ("_broadcast_oop", [(4, 4)], [(4, 4)]),
    ("reduce", [(4, 4)], [(4, 4)]), ("_reduce_oop", [(4, 4)], [(4, 4)]),
    ("all_gather", [(4, 4)], [(32,)]), ("all_gather_single", [(4, 4)], [(4, 4)]),
    ("all_gather_v", [(4, 4)], [(4, 4)]), ("all_reduce", [(4, 4)], [(4, 4)]),
    ("_all_gather_base", [(4, 4)], [(32,)]),
    ("all_gather_into_tensor_coalesced", [(4, 4)], [(32,)]),
    ("reduce_scatter", [(4, 4)], [(8,)]), ("reduce_scatter_single", [(4, 4)], [(4, 4)]),
    ("reduce_scatter_v", [(4, 4)], [(4, 4)]),
    ("reduce_scatter_tensor_coalesced", [(4, 4)], [(8,)]),
    ("_reduce_scatter_base", [(4, 4)], [(8,)]), ("gather", [(4, 4)], [(4, 4)]),
    ("scatter", [(4, 4)], [(4, 4)]), ("all_to_all", [(4, 4)], [(4, 4)]),
    ("all_to_all_single", [(4, 4)], [(4, 4)]), ("all_to_all_v_single", [(4, 4)], [(4, 4)]),
    ("all_reduce_barrier", [(4, 4)], [(4, 4)]), ("barrier", [(4, 4)], [(4, 4)]),
    ("allreduce_coalesced", [(4, 4)], [(4, 4)]), ("allgather_coalesced", [(4, 4)], [(4, 4)]),
    # The end markers' names with shapes: the op itself, as torch's test reads them.
    ("ALLGATHER_coalesced", [(4, 4)], [(32,)]), ("REDUCE_SCATTER_coalesced", [(4, 4)], [(8,)]),
    ("split", [(4, 4)], [(4, 4)]), ("new_window", [(4, 4)], [(4, 4)]),
]


def all_events():
    ops = [op(name, i + 1, ins=ins, outs=outs) for i, (name, ins, outs) in enumerate(ALL_EVENTS)]
    return {"all_events": (world(2), per_rank(2, ops))}


def build_db():
    """testBuildDB cases 1-6 (2 ranks; "sub_pg" holds only the dumping rank on each), with the
    sequence numbers NCCL gives: the ops of a coalesced group and its end marker share one."""
    def groups(r):
        return {"0": ("default_pg", [0, 1]), "1": ("sub_pg", [r])}

    sub = ("1", "sub_pg")
    s = {}
    s["builddb_1_all_reduce"] = (groups, per_rank(2, [op("all_reduce", 1),
                                                      op("all_reduce", 1, ins=[(5, 5)], pg=sub)]))
    s["builddb_2_allreduce_coalesced"] = (groups, per_rank(2, [op("allreduce_coalesced", 1)]))
    s["builddb_3_coalesced"] = (groups, per_rank(2, [op("broadcast", 1), op("broadcast", 1),
                                                     op("coalesced", 1, ins=[()], dt="")]))
    s["builddb_4_uneven_all_gather_mismatch"] = (groups, per_rank(2, [], lambda r: [
        op("_broadcast_oop", 1), op("_broadcast_oop", 1, ins=[(5, 5)] if r == 0 else [(4, 4)]),
        op("ALLGATHER_coalesced", 1, ins=[()], dt="")]))
    s["builddb_5_uneven_reduce_scatter"] = (groups, per_rank(2, [
        op("_reduce_oop", 1), op("_reduce_oop", 1),
        op("REDUCE_SCATTER_coalesced", 1, ins=[()], dt="")]))
    s["builddb_6_empty_coalesced_on_rank_0"] = (groups, {
        0: [op("all_reduce", 1)],
        1: [op("all_reduce", 1), op("_reduce_oop", 2), op("_reduce_oop", 2),
            op("REDUCE_SCATTER_coalesced", 2, ins=[()], dt="")]})
    return s


def loader():
    return {"loader_empty": (world(2), {0: [], 1: []})}


def c10d():
    """The shapes test_c10d_nccl.py's Flight Recorder tests dump, and the faults of this issue
    around them (4 ranks unless said)."""
    w4 = world(4)
    pre = done(2)
    s = {}
    s["c10d_short"] = (w4, per_rank(4, done(2)))
    s["c10d_trace_while_stuck"] = (w4, per_rank(4, pre, lambda r: [] if r == 3 else [
        op("all_reduce", 3, "scheduled")]))
    s["c10d_trace_while_stuck_timing"] = (w4, per_rank(4, done(2, started=True), lambda r: [
        ] if r == 3 else [op("all_reduce", 3, "started", started=True)]))
    s["c10d_individual_send_recv"] = (world(2), {
        0: pre + [op("send 0->1", 0, p2p_seq=1), op("recv 0<-1", 0, p2p_seq=2)],
        1: pre + [op("recv 1<-0", 0, p2p_seq=1), op("send 1->0", 0, p2p_seq=2)]})
    batched = {r: pre + [op("send %d->%d" % (r, 1 - r), 0, p2p_seq=1),
                         op("recv %d<-%d" % (r, 1 - r), 0, p2p_seq=1),
                         op("coalesced", 0, ins=[], dt="", p2p_seq=1)] for r in range(2)}
    for r in range(2):
        batched[r][-1]["p2p"] = True
    s["c10d_batched_send_recv"] = (world(2), batched)
    s["c10d_send_then_all_reduce"] = (world(2), {
        0: pre + [op("send 0->1", 0, p2p_seq=1), op("all_reduce", 3, "scheduled")],
        1: pre + [op("recv 1<-0", 0, p2p_seq=1), op("all_reduce", 3, "scheduled")]})
    s["c10d_coalescing_manager"] = (w4, per_rank(4, pre + [
        op("all_reduce", 3), op("all_reduce", 3), op("coalesced", 3, ins=[], dt="")]))
    # all_gather with uneven sizes: one _broadcast_oop per rank (root i, rank i's size), ended
    # by ALLGATHER_coalesced; reduce_scatter likewise with _reduce_oop.
    sizes = [(4, 4), (5, 5), (4, 4), (6, 6)]

    def uneven(kind, marker, n=4, seq=3, state="completed", count=None, skip=()):
        def ops(r):
            if r in skip:
                return []
            out = [op(kind, seq, state, ins=[count(r, i) if count else sizes[i]])
                   for i in range(n)]
            return out + [op(marker, seq, state, ins=[()], dt="")]
        return ops

    s["c10d_allgather_uneven"] = (w4, per_rank(4, pre, uneven("_broadcast_oop",
                                                              "ALLGATHER_coalesced")))
    s["c10d_reduce_scatter_uneven"] = (w4, per_rank(4, pre, uneven("_reduce_oop",
                                                                   "REDUCE_SCATTER_coalesced")))
    s["c10d_allgather_uneven_missing_rank"] = (w4, per_rank(4, pre, uneven(
        "_broadcast_oop", "ALLGATHER_coalesced", state="scheduled", skip=(1,))))
    s["c10d_allgather_uneven_count"] = (w4, per_rank(4, pre, uneven(
        "_broadcast_oop", "ALLGATHER_coalesced", state="scheduled",
        count=lambda r, i: (7, 7) if (r, i) == (2, 1) else sizes[i])))
    s["c10d_reduce_scatter_uneven_count"] = (w4, per_rank(4, pre, uneven(
        "_reduce_oop", "REDUCE_SCATTER_coalesced", state="scheduled",
        count=lambda r, i: (7, 7) if (r, i) == (0, 3) else sizes[i])))
    # all_to_all_single whose totals cannot match: rank 2 sends 8 elements, receives 10.
    s["c10d_alltoall_totals"] = (w4, per_rank(4, pre, lambda r: [
        op("all_to_all_single", 3, "scheduled", ins=[(8,)], outs=[(10,)] if r == 2 else [(8,)])]))
    s["c10d_alltoall_uneven_ok"] = (w4, per_rank(4, pre, lambda r: [
        op("all_to_all", 3, "scheduled", ins=[(4 + r,)], outs=[(7 - r,)])]))
    # A rank without a dump, with timing off and on: the others wait in all_reduce #3.
    s["missing_rank"] = ({"0": ("default_pg", [0, 1, 2])}, {
        r: pre + [op("all_reduce", 3, "scheduled")] for r in range(2)})
    s["missing_rank_timing"] = ({"0": ("default_pg", [0, 1, 2])}, {
        r: done(2, started=True) + [op("all_reduce", 3, "scheduled", started=False)]
        for r in range(2)})
    # Rank 3 has no dump; 0 and 1's GPUs started all_reduce #3 (timing on), 2's never did: its
    # stream is held before the op, whatever rank 3 did.
    s["missing_rank_timing_held"] = (w4, {
        r: done(2, started=True) + [op("all_reduce", 3, "started" if r < 2 else "scheduled",
                                       started=r < 2)] for r in range(3)})
    s["mixed_versions"] = (w4, per_rank(4, pre, lambda r: [op("all_reduce", 3, "scheduled")]
                                        if r != 3 else []), {2: "2.9"})
    return s


def scenarios():
    s = {}
    for part in (match_one_event, all_events, build_db, loader, c10d):
        s.update(part())
    return s


def write(out, name, spec, tmpl_dump, tmpl_entry):
    groups, ops = spec[0], spec[1]
    versions = spec[2] if len(spec) > 2 else {}
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    for r, rank_ops in ops.items():
        g = groups(r) if callable(groups) else groups
        with open(os.path.join(d, "fr_rank_%d" % r), "wb") as f:
            pickle.dump(dump(tmpl_dump, tmpl_entry, r, rank_ops, g, versions.get(r)), f,
                        protocol=2)
    return d


def fr_trace(d):
    p = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", d,
                        "--prefix", "fr_rank_"], capture_output=True, text=True, timeout=120)
    lines = (p.stdout + p.stderr).strip().splitlines()
    return p.returncode, lines[-6:]


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(TEMPLATE, "rb") as f:
        tmpl_dump = pickle.load(f)
    tmpl_entry = tmpl_dump["entries"][0]
    for name, spec in sorted(scenarios().items()):
        d = write(argv[1], name, spec, tmpl_dump, tmpl_entry)
        if "--fr-trace" in argv:
            rc, lines = fr_trace(d)
            print("== %s (fr_trace exit %d)" % (name, rc))
            for line in lines:
                print("   " + line[:200])
        else:
            print(d)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
