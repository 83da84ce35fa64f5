#!/usr/bin/env python3
"""One rank of a small real PyTorch job that also drives NCCL, on the CPU emulation (sim/), for
torch_incident_e2e_test: rank and world size from RANK and WORLD_SIZE, the rendezvous a file.

The machine has no GPU, so torch's own NCCL backend cannot run; the job does what vLLM's and
SGLang's process groups do instead: a torch process group on gloo (torch records every
collective, with its Python stack) and, beside it, a NCCL communicator of the same ranks driven
through ctypes (fr records every call). Each step issues the same all_reduce on both: torch's
first, then NCCL's. The emulated libnccl.so.2 is preloaded so that torch itself and ctypes load
that one (see torch_incident_run.py --nccl).

Usage: torch_nccl_job.py STORE [HANG_RANK]
Every rank does STEPS steps; at the last one HANG_RANK (default 3) issues torch's all_reduce and
then stays in Python (hang_in_python) before its NCCL call, in which the others wait. Every wait
ends within LIMIT_S seconds, so the job always ends. Exit 77 when torch cannot be imported."""
import ctypes
import datetime
import mmap
import os
import sys
import time

LIMIT_S = 120
STEPS = 6
COUNT = 8
NCCL_FLOAT32, NCCL_SUM = 7, 0


class UniqueId(ctypes.Structure):  # ncclUniqueId, passed by value
    _fields_ = [("internal", ctypes.c_byte * 128)]


def hang_in_python(deadline):
    while time.monotonic() < deadline:
        time.sleep(0.05)


def ok(what, rc):
    if rc != 0:
        print(f"torch_nccl_job: {what} failed: {rc}", file=sys.stderr, flush=True)
        os._exit(1)


class Nccl:
    """A NCCL communicator of every rank on the emulation, and an 8-float buffer."""

    def __init__(self, rank, world, store):
        self.cuda = ctypes.CDLL("libcuda.so.1")
        self.nccl = ctypes.CDLL("libnccl.so.2")
        ok("cuInit", self.cuda.cuInit(0))
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        ok("cuDeviceGet", self.cuda.cuDeviceGet(ctypes.byref(dev), 0))
        ok("cuDevicePrimaryCtxRetain", self.cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
        ok("cuCtxSetCurrent", self.cuda.cuCtxSetCurrent(ctx))
        self.stream = ctypes.c_void_p()
        ok("cuStreamCreate", self.cuda.cuStreamCreate(ctypes.byref(self.stream), 1))
        self.mem = mmap.mmap(-1, 4096)
        host = ctypes.addressof(ctypes.c_char.from_buffer(self.mem))
        ok("cuMemHostRegister", self.cuda.cuMemHostRegister(ctypes.c_void_p(host),
                                                            ctypes.c_size_t(4096), 2))
        dptr = ctypes.c_uint64()
        ok("cuMemHostGetDevicePointer",
           self.cuda.cuMemHostGetDevicePointer(ctypes.byref(dptr), ctypes.c_void_p(host), 0))
        self.buf = ctypes.c_void_p(dptr.value)
        uid = UniqueId()
        path = store + ".nccl-uid"
        if rank == 0:
            ok("ncclGetUniqueId", self.nccl.ncclGetUniqueId(ctypes.byref(uid)))
            with open(path + ".tmp", "wb") as f:
                f.write(bytes(uid.internal))
            os.rename(path + ".tmp", path)
        else:
            deadline = time.monotonic() + LIMIT_S
            while not os.path.exists(path) and time.monotonic() < deadline:
                time.sleep(0.01)
            ctypes.memmove(ctypes.addressof(uid), open(path, "rb").read(128), 128)
        self.comm = ctypes.c_void_p()
        ok("ncclCommInitRank", self.nccl.ncclCommInitRank(ctypes.byref(self.comm), world, uid, rank))

    def all_reduce(self):
        ok("ncclAllReduce", self.nccl.ncclAllReduce(self.buf, self.buf, ctypes.c_size_t(COUNT),
                                                    NCCL_FLOAT32, NCCL_SUM, self.comm, self.stream))
        ok("cuStreamSynchronize", self.cuda.cuStreamSynchronize(self.stream))


def step(dist, t, nccl, rank, hang, last):
    dist.all_reduce(t)
    if last and rank == hang:
        hang_in_python(time.monotonic() + LIMIT_S)
        os._exit(0)
    nccl.all_reduce()


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
    nccl = Nccl(rank, world, store)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=LIMIT_S))
    t = torch.ones(COUNT)
    for i in range(STEPS):
        step(dist, t, nccl, rank, hang, i == STEPS - 1)
    hang_in_python(time.monotonic() + LIMIT_S)  # the others stay in NCCL's wait until killed
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
