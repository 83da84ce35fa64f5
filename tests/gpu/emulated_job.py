#!/usr/bin/env python3
"""torch_job.py's stand-in on the CPU emulation (sim/: libcuda.so.1, libcudart.so.13,
libnccl.so.2 on LD_LIBRARY_PATH), for selftest.sh to run run.sh itself end to end where there is
no GPU: the same command line, the same `key=value` lines and ready files, the same NCCL calls
(a one-rank communicator, all-reduces, one captured into a CUDA graph through the runtime), so
that everything run.sh does around the job is exercised. The stalls are the emulation's: a
captured host function that spins on a flag (the gate), and frsim_stream_stall.

    emulated_job.py allreduce|graph|stuck [the options of torch_job.py]
"""
import argparse
import ctypes
import json
import os
import sys
import time

cuda = ctypes.CDLL("libcuda.so.1")
cudart = ctypes.CDLL("libcudart.so.13")
nccl = ctypes.CDLL("libnccl.so.2")
NCCL_FLOAT32, NCCL_SUM = 7, 0


class UniqueId(ctypes.Structure):  # ncclUniqueId, passed by value
    _fields_ = [("internal", ctypes.c_char * 128)]


def say(key, value):
    print(f"{key}={value}", flush=True)


def ok(what, rc):
    if rc != 0:
        print(f"emulated_job: {what} failed: {rc}", file=sys.stderr)
        sys.exit(1)


class Job:
    def __init__(self, backend):
        ok("cuInit", cuda.cuInit(0))
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        ok("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), 0))
        ok("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
        ok("cuCtxSetCurrent", cuda.cuCtxSetCurrent(ctx))
        self.stream = ctypes.c_void_p()
        ok("cuStreamCreate", cuda.cuStreamCreate(ctypes.byref(self.stream), 1))
        self.buf = ctypes.c_uint64()
        ok("cuMemAlloc", cuda.cuMemAlloc_v2(ctypes.byref(self.buf), ctypes.c_size_t(4096)))
        uid = UniqueId()
        ok("ncclGetUniqueId", nccl.ncclGetUniqueId(ctypes.byref(uid)))
        self.comm = ctypes.c_void_p()
        ok("ncclCommInitRank", nccl.ncclCommInitRank(ctypes.byref(self.comm), 1, uid, 0))
        say("torch", "emulation")
        say("backend", backend)

    def all_reduce(self):
        p = ctypes.c_void_p(self.buf.value)
        ok("ncclAllReduce", nccl.ncclAllReduce(p, p, ctypes.c_size_t(256), NCCL_FLOAT32, NCCL_SUM,
                                               self.comm, self.stream))

    def sync(self):
        ok("cuStreamSynchronize", cuda.cuStreamSynchronize(self.stream))


def allreduce(job, args):
    warm = 100
    for _ in range(warm):
        job.all_reduce()
    job.sync()
    best_host, best_e2e = float("inf"), float("inf")
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        for _ in range(args.n):
            job.all_reduce()
        t1 = time.perf_counter()
        job.sync()
        t2 = time.perf_counter()
        best_host, best_e2e = min(best_host, (t1 - t0) / args.n), min(best_e2e, (t2 - t0) / args.n)
    say("per_call_us", f"{best_host * 1e6:.2f}")
    say("e2e_us", f"{best_e2e * 1e6:.2f}")
    say("allreduces", warm + args.rounds * args.n)
    return 0


GATE = ctypes.c_int(0)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def gate(_):
    while GATE.value:
        time.sleep(0.01)


def wait_for_replay(job):
    job.sync()


def graph(job, args):
    for _ in range(3):
        job.all_reduce()
    job.sync()
    ok("cudaStreamBeginCapture", cudart.cudaStreamBeginCapture(job.stream, 0))
    ok("cuLaunchHostFunc", cuda.cuLaunchHostFunc(job.stream, gate, None))
    job.all_reduce()
    g, exe = ctypes.c_void_p(), ctypes.c_void_p()
    ok("cudaStreamEndCapture", cudart.cudaStreamEndCapture(job.stream, ctypes.byref(g)))
    ok("cudaGraphInstantiate", cudart.cudaGraphInstantiate(ctypes.byref(exe), g, ctypes.c_ulonglong(0)))
    say("eager", 3)
    say("gate", "host-function")
    for replay in range(1, args.replays + 1):
        if replay == args.stall_at:
            job.sync()
            GATE.value = 1
            ok("cudaGraphLaunch", cudart.cudaGraphLaunch(exe, job.stream))
            expect = {"graph": 1, "replay": replay, "op": "AllReduce", "pid": os.getpid()}
            with open(args.ready, "w") as f:
                json.dump(expect, f)
            wait_for_replay(job)
            return 1
        ok("cudaGraphLaunch", cudart.cudaGraphLaunch(exe, job.stream))
    job.sync()
    say("replays", args.replays)
    return 0


def wait_for_gpu(job, ready):
    ok("frsim_stream_stall", cuda.frsim_stream_stall(job.stream, -1))
    # The emulated NVML lists the GPU's processes from its file (FR_SIM_NVML): this one is on it.
    with open(os.environ["FR_SIM_NVML"], "w") as f:
        f.write(f"driver 550.54.15\ngpu 0000:3b:00.0 pids={os.getpid()}\n")
    with open(ready, "w") as f:
        f.write(str(os.getpid()))
    job.sync()


def stuck(job, args):
    for _ in range(10):
        job.all_reduce()
    job.sync()
    wait_for_gpu(job, args.ready)
    return 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["allreduce", "graph", "stuck"])
    ap.add_argument("--backend", default="nccl")
    ap.add_argument("--ready", default=os.devnull)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--replays", type=int, default=100)
    ap.add_argument("--stall-at", type=int, default=0)
    args = ap.parse_args()
    if args.backend == "nccl-legacy":  # as a torch without that backend answers
        print("torch_job: the emulation has no backend 'nccl-legacy'", file=sys.stderr)
        return 3
    job = Job(args.backend)
    return {"allreduce": allreduce, "graph": graph, "stuck": stuck}[args.mode](job, args)


if __name__ == "__main__":
    sys.exit(main())
