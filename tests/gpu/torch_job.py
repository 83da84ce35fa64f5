#!/usr/bin/env python3
"""The PyTorch side of the GPU check (tests/gpu/run.sh): one process, one GPU, world size 1, run
with or without the agent preloaded. Prints `key=value` lines for run.sh and check.py.

    torch_job.py allreduce --backend nccl|nccl-legacy [--n N] [--rounds R]
        N small all-reduces (256 floats) per round after a warm-up; prints the best round's host
        time per call (`per_call_us`), the time per call up to the GPU finishing (`e2e_us`) and how
        many all-reduces were issued (`allreduces`).
    torch_job.py graph --backend B [--replays N] [--stall-at K] [--ready FILE]
        Captures a step holding a gate kernel and an all-reduce into one CUDA graph
        (torch.cuda.graph) and replays it N times. With --stall-at K the gate spins on the GPU in
        replay K, before the all-reduce: FILE then names the replay and the process waits for the
        GPU (forever) in wait_for_replay().
    torch_job.py stuck --backend B [--ready FILE]
        A few all-reduces, then a kernel that spins for minutes (torch.cuda._sleep) and the host
        waiting for it in wait_for_gpu(); FILE is written once it waits.

Exit codes: 0 done; 3 this torch cannot do what was asked (the backend is not registered, a
capture failed): one line says why; 1 anything else.
"""
import argparse
import ctypes
import json
import os
import socket
import sys
import time

UNSUPPORTED = 3


def say(key, value):
    print(f"{key}={value}", flush=True)


def unsupported(why):
    print(f"torch_job: {why}", file=sys.stderr, flush=True)
    sys.exit(UNSUPPORTED)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init(backend):
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    # torch 2.15 registers some backends (nccl-legacy, nccl2) on first use, from entry points.
    register = getattr(dist.Backend, "_ensure_backend_registered", None)
    if register is not None:
        register(backend)
    if backend not in dist.Backend.backend_list:
        unsupported(f"torch {torch.__version__} has no backend {backend!r} "
                    f"(it has {', '.join(dist.Backend.backend_list)})")
    torch.cuda.set_device(0)
    dist.init_process_group(backend, rank=0, world_size=1, device_id=torch.device("cuda", 0))
    say("torch", torch.__version__)
    say("backend", backend)
    say("device", torch.cuda.get_device_name(0).replace(" ", "_"))
    with open("/proc/self/maps") as maps:  # which libnccl.so.2 this process really runs
        loaded = sorted({line.split()[-1] for line in maps if "libnccl.so" in line})
    say("nccl_loaded", ",".join(loaded) or "none")
    return torch, dist


def allreduce(args):
    torch, dist = init(args.backend)
    x = torch.ones(256, device="cuda")
    warm = 100
    for _ in range(warm):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    best_host, best_e2e = float("inf"), float("inf")
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        for _ in range(args.n):
            dist.all_reduce(x)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        best_host = min(best_host, (t1 - t0) / args.n)
        best_e2e = min(best_e2e, (t2 - t0) / args.n)
    if x[0].item() != 1.0:
        print(f"torch_job: wrong all-reduce result {x[0].item()}", file=sys.stderr)
        return 1
    time.sleep(0.5)  # where the agent polls events instead of markers, its poller sees the last ones
    say("per_call_us", f"{best_host * 1e6:.2f}")
    say("e2e_us", f"{best_e2e * 1e6:.2f}")
    say("allreduces", warm + args.rounds * args.n)
    dist.destroy_process_group()
    return 0


class Gate:
    """A kernel that spins while a word of pinned host memory is not zero: placed in a captured
    graph, it stalls exactly the replays the host chooses. Loaded from PTX through the driver, so
    nothing is compiled ahead."""

    def __init__(self, torch):
        major, minor = torch.cuda.get_device_capability(0)
        version = "7.8" if major * 10 + minor <= 90 else "8.8"
        ptx = (f".version {version}\n.target sm_{major}{minor}\n.address_size 64\n"
               ".visible .entry fr_gate(.param .u64 flag)\n{\n"
               "  .reg .pred %p;\n  .reg .b32 %r;\n  .reg .b64 %a;\n"
               "  ld.param.u64 %a, [flag];\n"
               "$spin:\n  ld.volatile.u32 %r, [%a];\n  setp.ne.s32 %p, %r, 0;\n"
               "  @%p bra $spin;\n  ret;\n}\n")
        self.cuda = ctypes.CDLL("libcuda.so.1")
        self.module, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
        self.check("cuModuleLoadData", self.cuda.cuModuleLoadData(ctypes.byref(self.module),
                                                                  ptx.encode() + b"\0"))
        self.check("cuModuleGetFunction",
                   self.cuda.cuModuleGetFunction(ctypes.byref(self.fn), self.module, b"fr_gate"))
        self.flag = torch.zeros(1, dtype=torch.int32, pin_memory=True)
        dptr = ctypes.c_uint64(0)
        rc = self.cuda.cuMemHostGetDevicePointer_v2(ctypes.byref(dptr),
                                                    ctypes.c_void_p(self.flag.data_ptr()), 0)
        self.dptr = dptr.value if rc == 0 else self.flag.data_ptr()  # UVA: the same address

    @staticmethod
    def check(what, rc):
        if rc != 0:
            raise RuntimeError(f"{what} failed with CUDA error {rc}")

    def launch(self, stream):
        arg = ctypes.c_uint64(self.dptr)
        params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
        u = ctypes.c_uint
        self.check("cuLaunchKernel", self.cuda.cuLaunchKernel(
            self.fn, u(1), u(1), u(1), u(1), u(1), u(1), u(0), ctypes.c_void_p(stream.cuda_stream),
            params, None))

    def arm(self):
        self.flag[0] = 1


def capture(torch, dist, x, gate, sleep_cycles=0):
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            if gate is not None:
                gate.launch(torch.cuda.current_stream())
            if sleep_cycles:
                torch.cuda._sleep(sleep_cycles)
            dist.all_reduce(x)
    except Exception as e:  # noqa: BLE001 - any capture failure means this torch cannot do it
        unsupported(f"capturing an all_reduce into a CUDA graph failed: {type(e).__name__}: {e}")
    return g


def wait_for_replay(torch):
    torch.cuda.synchronize()


def graph(args):
    torch, dist = init(args.backend)
    x = torch.ones(1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up before capture, as torch.cuda.graph asks
        for _ in range(3):
            dist.all_reduce(x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    eager = 3
    stall_graph = None
    try:
        gate = Gate(torch)
    except (OSError, RuntimeError, AttributeError) as e:
        # Without the gate, the stalled replay is the first of a second graph that sleeps.
        print(f"torch_job: no gate kernel ({e}); a second graph with torch.cuda._sleep stalls",
              file=sys.stderr)
        gate = None
    g = capture(torch, dist, x, gate)
    if gate is None and args.stall_at:
        stall_graph = capture(torch, dist, x, None, sleep_cycles=2 * 10**12)
    torch.cuda.synchronize()
    say("eager", eager)
    say("gate", "kernel" if gate is not None else "sleep-graph")
    for replay in range(1, args.replays + 1):
        if replay == args.stall_at:
            torch.cuda.synchronize()
            if gate is not None:
                gate.arm()
                g.replay()
                expect = {"graph": 1, "replay": replay, "op": "AllReduce", "pid": os.getpid()}
            else:
                stall_graph.replay()
                expect = {"graph": 2, "replay": 1, "op": "AllReduce", "pid": os.getpid()}
            with open(args.ready, "w") as f:
                json.dump(expect, f)
            say("stalled", json.dumps(expect))
            wait_for_replay(torch)  # never returns: the GPU spins in the gate
            return 1
        g.replay()
    torch.cuda.synchronize()
    time.sleep(0.5)
    say("replays", args.replays)
    say("value", x[0].item())
    dist.destroy_process_group()
    return 0


def wait_for_gpu(torch, ready):
    torch.cuda._sleep(2 * 10**12)  # minutes at any clock rate; the check kills the process first
    with open(ready, "w") as f:
        f.write(str(os.getpid()))
    torch.cuda.synchronize()


def stuck(args):
    torch, dist = init(args.backend)
    x = torch.ones(256, device="cuda")
    for _ in range(10):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    say("pid", os.getpid())
    wait_for_gpu(torch, args.ready)
    return 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    a = sub.add_parser("allreduce")
    a.add_argument("--n", type=int, default=2000)
    a.add_argument("--rounds", type=int, default=3)
    g = sub.add_parser("graph")
    g.add_argument("--replays", type=int, default=100)
    g.add_argument("--stall-at", type=int, default=0)
    s = sub.add_parser("stuck")
    for p in (a, g, s):
        p.add_argument("--backend", default="nccl")
        p.add_argument("--ready", default=os.devnull)
    args = ap.parse_args()
    if args.mode == "graph" and args.stall_at and not 1 <= args.stall_at <= args.replays:
        ap.error("--stall-at must lie in 1..--replays")
    try:
        import torch  # noqa: F401
    except ImportError as e:
        unsupported(f"cannot import torch: {e}")
    return {"allreduce": allreduce, "graph": graph, "stuck": stuck}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
