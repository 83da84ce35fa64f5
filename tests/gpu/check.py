#!/usr/bin/env python3
"""Checks what fr wrote during one step of the GPU check (tests/gpu/run.sh), from what fr's own
tools give: `fr-analyze --json` (fr-analysis/1), `fr-analyze --trace` (one slice per recorded
call, with its op and GPU state), and a dump set's side files (fr-stacks/1, fr-gpu/1). The same
checks run on the emulation (tests/gpu/selftest.sh), so they are known to pass and to fail.

    check.py records  --analysis A --trace T --log-dir D --min N [--op AllReduce]
        the log holds at least N all-reduces, every one completed on the GPU, and the log's
        GPU tracking mode (read from its header) is markers or events
    check.py graph    --analysis A --trace T --replays N [--log-dir D]
        exactly N graph replays were recorded, and the GPU markers of the communicator that ran
        them reached its last op; with D, the graph's replay kernel was loaded and its GPU replay
        counter (fr_graph_entry.gpu_replays, read from the logs) advanced once per replay: N
    check.py stall    --analysis A --replay K [--graph G] [--op AllReduce] [--rank R] [--log-dir D]
        the verdict is stuck_in_collective in replay K (of graph G) at that op, blaming rank R;
        with D, graph G's GPU replay counter stopped at K (or K-1: the stall lies before the
        graph's first NCCL op, where the counting kernel runs)
    check.py stacks   --dump DIR --analysis A --pid P [--rank R] [--python-frame F] [--require-python]
        the process's stacks were taken (native frames; the Python frame F when py-spy ran, and
        py-spy must have run with --require-python), and NVML was read for its GPU and joined to
        its rank

Prints `key=value` figures, then `check: OK` or `check: FAILED: ...`; exit 0, 1 on a failed
check, 2 on bad usage or unreadable input.
"""
import argparse
import glob
import json
import os
import struct
import sys

# proto/fr/flight_log.h: the header's magic (offset 0) and flags (offset 88).
LOG_MAGIC = 0x314F4C5448474C46
LOG_FLAGS_OFFSET = 88
LOG_F_GPU_MARKERS = 0x2
LOG_F_GPU_EVENTS = 0x4
LOG_F_GRAPH_REPLAY_KERNEL = 0x40
LOG_F_GRAPH_REPLAY_HOST = 0x80
GRAPH_F_GPU_REPLAYS = 0x4


class Check:
    def __init__(self):
        self.problems = []

    def expect(self, ok, problem):
        if not ok:
            self.problems.append(problem)
        return ok

    def finish(self):
        if self.problems:
            print("check: FAILED: " + "; ".join(self.problems), flush=True)
            return 1
        print("check: OK", flush=True)
        return 0


def say(key, value):
    print(f"{key}={value}", flush=True)


def load_json(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"check: cannot read {what} {path}: {e}", file=sys.stderr)
        sys.exit(2)


def slices(trace):
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return [e for e in events if e.get("ph") == "X"]


def tracking_mode(log_dir):
    """The GPU tracking mode of the logs (or dump files) in log_dir, from their headers."""
    modes = set()
    for path in sorted(glob.glob(os.path.join(log_dir, "*.frlog"))):
        with open(path, "rb") as f:
            head = f.read(LOG_FLAGS_OFFSET + 4)
        if len(head) < LOG_FLAGS_OFFSET + 4 or struct.unpack_from("<Q", head, 0)[0] != LOG_MAGIC:
            continue
        flags = struct.unpack_from("<I", head, LOG_FLAGS_OFFSET)[0]
        modes.add("markers" if flags & LOG_F_GPU_MARKERS else "events" if flags & LOG_F_GPU_EVENTS
                  else "none")
    return ",".join(sorted(modes)) or "no log"


def graph_entries(log_dir):
    """The graph entries of the logs in log_dir: (header flags, [entry dicts]) per log, from the
    graph table's row of the section directory (version 7 on: the header's section_count at 436,
    section_offset at 440, section_size at 448; a row is kind, entry_size, offset, capacity, 0,
    count; the graph table is kind 2) or the header's graph table fields (versions 2 to 6,
    offsets 336..352), and each entry's ordinal (32), flags (44), replays (48) and, from version 3
    on, gpu_replays (64)."""
    out = []
    for path in sorted(glob.glob(os.path.join(log_dir, "*.frlog"))):
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < 512 or struct.unpack_from("<Q", data, 0)[0] != LOG_MAGIC:
            continue
        version = struct.unpack_from("<I", data, 8)[0]
        flags = struct.unpack_from("<I", data, LOG_FLAGS_OFFSET)[0]
        entries = []
        offset = size = count = 0
        if version >= 7:
            rows, = struct.unpack_from("<I", data, 436)
            dir_at, = struct.unpack_from("<Q", data, 440)
            row_size, = struct.unpack_from("<I", data, 448)
            for r in range(rows):
                at = dir_at + r * row_size
                if at + 40 > len(data):
                    break
                kind, entry_size, row_offset, _cap, _res, row_count = struct.unpack_from(
                    "<IIQIIQ", data, at)
                if kind == 2:
                    offset, size, count = row_offset, entry_size, row_count
        elif version >= 2:
            offset, _cap, size, count = struct.unpack_from("<QIII", data, 336)
        if count:
            for i in range(count):
                at = offset + i * size
                if at + min(size, 72) > len(data):
                    break
                entries.append({
                    "ordinal": struct.unpack_from("<I", data, at + 32)[0],
                    "flags": struct.unpack_from("<I", data, at + 44)[0],
                    "replays": struct.unpack_from("<Q", data, at + 48)[0],
                    "gpu_replays": (struct.unpack_from("<Q", data, at + 64)[0]
                                    if version >= 3 and size >= 72 else None),
                })
        out.append((flags, entries))
    return out


def counted_graphs(c, log_dir):
    """The graphs of log_dir that count their replays on the GPU; fails the check when none do."""
    logs = graph_entries(log_dir)
    flags = 0
    for f, _ in logs:
        flags |= f
    say("replay_kernel", "loaded" if flags & LOG_F_GRAPH_REPLAY_KERNEL
        else "failed (host fallback)" if flags & LOG_F_GRAPH_REPLAY_HOST else "not used")
    counted = [e for _, entries in logs for e in entries if e["flags"] & GRAPH_F_GPU_REPLAYS]
    c.expect(bool(counted), f"no graph in {log_dir} counts its replays on the GPU "
                            "(the replay kernel was not loaded or not captured)")
    return counted


def records(args):
    c = Check()
    a = load_json(args.analysis, "analysis")
    ops = [s for s in slices(load_json(args.trace, "trace")) if s["args"].get("op") == args.op]
    done = [s for s in ops if s["args"].get("state") == "completed"]
    mode = tracking_mode(args.log_dir)
    sizes = sorted({cm["size"] for cm in a.get("communicators", [])})
    say("tracking", mode)
    say("recorded", len(ops))
    say("completed", len(done))
    say("comm_sizes", ",".join(map(str, sizes)))
    say("verdict", a["verdict"]["kind"])
    c.expect(mode in ("markers", "events"), f"GPU tracking is {mode}, not markers or events")
    c.expect(len(ops) >= args.min, f"{len(ops)} {args.op} recorded, expected at least {args.min}")
    c.expect(len(done) == len(ops), f"{len(ops) - len(done)} of {len(ops)} {args.op} not completed "
                                    "on the GPU")
    c.expect(a["verdict"]["kind"] == "no_hang", f"verdict {a['verdict']['kind']}, expected no_hang")
    return c.finish()


def graph(args):
    c = Check()
    a = load_json(args.analysis, "analysis")
    launches = [s for s in slices(load_json(args.trace, "trace"))
                if s["args"].get("op") == "GraphLaunch"]
    comms = [cm for cm in a.get("communicators", []) if (cm.get("frontier") or {}).get("coll")]
    busiest = max(comms, key=lambda cm: cm["frontier"]["coll"]["max_enqueued"], default=None)
    say("replays", len(launches))
    say("verdict", a["verdict"]["kind"])
    c.expect(len(launches) == args.replays, f"{len(launches)} replays recorded, expected {args.replays}")
    if c.expect(busiest is not None, "no communicator ran collectives"):
        f = busiest["frontier"]["coll"]
        say("enqueued", f["max_enqueued"])
        say("completed", f["min_completed"])
        c.expect(f["max_enqueued"] >= args.replays,
                 f"only {f['max_enqueued']} collectives on {busiest['id']} for {args.replays} replays")
        c.expect(f["min_completed"] == f["max_enqueued"],
                 f"the GPU markers stopped at {f['min_completed']} of {f['max_enqueued']}")
    c.expect(a["verdict"]["kind"] == "no_hang", f"verdict {a['verdict']['kind']}, expected no_hang")
    if args.log_dir:
        counted = counted_graphs(c, args.log_dir)
        if counted:
            g = max(counted, key=lambda e: e["replays"])
            say("gpu_replays", g["gpu_replays"])
            c.expect(g["gpu_replays"] == args.replays and g["replays"] == args.replays,
                     f"GPU replay counter {g['gpu_replays']}, host replays {g['replays']}, "
                     f"expected {args.replays} each")
    return c.finish()


def stall(args):
    c = Check()
    v = load_json(args.analysis, "analysis")["verdict"]
    rep = v.get("graph_replay") or {}
    say("verdict", v["kind"])
    say("summary", v.get("summary", ""))
    say("replay", rep.get("replay", "none"))
    say("op", f"{rep.get('op', v.get('op'))} #{v.get('seq')}")
    c.expect(v["kind"] == "stuck_in_collective", f"verdict {v['kind']}, expected stuck_in_collective")
    c.expect(rep.get("replay") == args.replay, f"replay {rep.get('replay')}, expected {args.replay}")
    if args.graph:
        c.expect(rep.get("graph") == args.graph, f"graph {rep.get('graph')}, expected {args.graph}")
    c.expect(rep.get("op") == args.op and v.get("op") == args.op,
             f"op {rep.get('op')}/{v.get('op')}, expected {args.op}")
    c.expect(args.rank in v.get("culprit_ranks", []),
             f"culprits {v.get('culprit_ranks')}, expected rank {args.rank} among them")
    if args.log_dir:
        counted = [e for e in counted_graphs(c, args.log_dir) if e["ordinal"] == (args.graph or 1)]
        if c.expect(bool(counted), f"graph {args.graph or 1} does not count its replays on the GPU"):
            gpu = counted[0]["gpu_replays"]
            say("gpu_replays", gpu)
            c.expect(gpu in (args.replay - 1, args.replay),
                     f"GPU replay counter {gpu}, expected {args.replay} (or {args.replay - 1})")
    return c.finish()


def frame_text(frames, n=6):
    def name(fr):
        f = fr.get("function") or "?"
        return f if len(f) <= 48 else f[:45] + "..."
    return " <- ".join(f"{name(fr)}[{fr.get('kind')}]" for fr in frames[:n])


def stacks(args):
    c = Check()
    a = load_json(args.analysis, "analysis")
    files = [p for p in glob.glob(os.path.join(args.dump, "*.stacks.json"))
             if load_json(p, "stacks").get("pid") == args.pid]
    if not c.expect(len(files) == 1, f"{len(files)} stacks files for pid {args.pid} in {args.dump}"):
        return c.finish()
    s = load_json(files[0], "stacks")
    say("taker", s.get("taker"))
    say("stack_error", s.get("error", "none"))
    say("python_error", s.get("python_error", "none"))
    main = next((t for t in s.get("threads", []) if t.get("tid") == args.pid), None)
    frames = main.get("frames", []) if main else []
    say("main_thread", frame_text(frames) or "no frames")
    native = [f for f in frames if f.get("kind") == "native" and f.get("function")]
    c.expect("error" not in s, f"no stacks: {s.get('error')}")
    c.expect(bool(native), "the main thread has no symbolized native frame")
    if args.python_frame:
        if "python_error" in s:
            say("python_frames", f"not taken ({s['python_error']})")
            c.expect(not args.require_python, f"no Python frames: {s['python_error']}")
        else:
            names = [f.get("function", "") for f in frames if f.get("kind") == "python"]
            say("python_frames", " <- ".join(names[:6]) or "none")
            c.expect(any(n == args.python_frame or n.endswith("." + args.python_frame) for n in names),
                     f"no Python frame {args.python_frame} on the main thread")
    gpu_files = glob.glob(os.path.join(args.dump, "*.gpu.json"))
    if c.expect(bool(gpu_files), "no <node>.gpu.json in the dump set"):
        g = load_json(gpu_files[0], "GPU health")
        say("nvml", g.get("error", f"{len(g.get('gpus', []))} GPU(s), driver {g.get('driver_version')}"))
        c.expect("error" not in g, f"NVML not read: {g.get('error')}")
        mine = [x for x in g.get("gpus", []) if args.pid in x.get("pids", [])]
        c.expect(bool(mine), f"no GPU lists pid {args.pid} among its processes")
        for x in mine:
            say("gpu", f"{x.get('pci_bus_id')} {x.get('name', '').replace(' ', '_')} "
                       f"{x.get('temperature_c')}C {x.get('power_mw')}mW "
                       f"unavailable={len(x.get('unavailable', []))}")
    joined = [x for x in a.get("gpus", []) if args.rank in x.get("ranks", [])]
    say("joined", ",".join(x.get("pci_bus_id", "?") for x in joined) or "none")
    c.expect(bool(joined), f"the analysis joins no GPU to rank {args.rank}")
    return c.finish()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("records")
    r.add_argument("--trace", required=True)
    r.add_argument("--log-dir", required=True)
    r.add_argument("--min", type=int, required=True)
    r.add_argument("--op", default="AllReduce")
    g = sub.add_parser("graph")
    g.add_argument("--trace", required=True)
    g.add_argument("--replays", type=int, required=True)
    g.add_argument("--log-dir", default="")
    s = sub.add_parser("stall")
    s.add_argument("--replay", type=int, required=True)
    s.add_argument("--graph", type=int, default=0)
    s.add_argument("--op", default="AllReduce")
    s.add_argument("--rank", type=int, default=0)
    s.add_argument("--log-dir", default="")
    k = sub.add_parser("stacks")
    k.add_argument("--dump", required=True)
    k.add_argument("--pid", type=int, required=True)
    k.add_argument("--rank", type=int, default=0)
    k.add_argument("--python-frame", default="")
    k.add_argument("--require-python", action="store_true",
                   help="fail when the Python frames are missing (py-spy was given)")
    for p in (r, g, s, k):
        p.add_argument("--analysis", required=True)
    args = ap.parse_args()
    return {"records": records, "graph": graph, "stall": stall, "stacks": stacks}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
