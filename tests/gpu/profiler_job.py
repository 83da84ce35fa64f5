#!/usr/bin/env python3
"""The torch side of tests/gpu/profiler.sh: all-reduces over torch's NCCL, timed, in the
environment the script gives (with or without the agent preloaded, with or without
NCCL_PROFILER_PLUGIN naming it). Prints `key=value` lines.

    profiler_job.py --n N --rounds R [--floats F]
        world size 1 on GPU 0 (WORLD_SIZE/RANK/LOCAL_RANK from the environment otherwise, one
        process per GPU): N all-reduces of F floats per round after a warm-up; the best round's
        host time per call (per_call_us) and time per call up to the GPU finishing (e2e_us).
"""
import argparse
import os
import socket
import sys
import time


def say(key, value):
    print(f"{key}={value}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--floats", type=int, default=256)
    args = ap.parse_args()
    import torch
    import torch.distributed as dist

    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    x = torch.ones(args.floats, device="cuda")
    for _ in range(100):
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
    say("per_call_us", f"{best_host * 1e6:.2f}")
    say("e2e_us", f"{best_e2e * 1e6:.2f}")
    say("allreduces", 100 + args.n * args.rounds)
    say("nccl_version", ".".join(str(v) for v in torch.cuda.nccl.version()))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
