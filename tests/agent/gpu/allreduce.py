#!/usr/bin/env python3
"""One-GPU PyTorch job (nccl backend, world size 1): N small all-reduces, timed per call on the
host. Prints `per_call_us=...`. Run it with and without LD_PRELOAD=libfr_agent.so."""
import os
import sys
import time

import torch
import torch.distributed as dist

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=0, world_size=1)
x = torch.ones(256, device="cuda")
for _ in range(100):  # warm up: communicator creation, first launches
    dist.all_reduce(x)
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(n):
    dist.all_reduce(x)
t1 = time.perf_counter()
torch.cuda.synchronize()
print(f"per_call_us={(t1 - t0) / n * 1e6:.2f}")
dist.destroy_process_group()
