"""A two-rank nccl4py job on the emulated NCCL, for tests/agent/nccl4py_test.cpp.

nccl4py (PyPI `nccl4py`, what torch's nccl4py backend uses) reaches libnccl.so.2 through its
bindings' dlsym and the GPU through cuda.core; here both are the emulation's (LD_LIBRARY_PATH at
its libraries) and the agent is preloaded. Usage:

  nccl4py_job.py WORKDIR healthy   each rank: 3 all-reduces of 256 floats, then destroys
  nccl4py_job.py WORKDIR hang      rank 1 stops in Python before the third (as a host stuck in
                                   the training loop); rank 0 enters it and waits on its stream.
                                   Once both are there, the driver stops them (SIGKILL) and leaves
                                   their flight logs for the analysis.

Prints key=value lines: each rank's pid (pid0, pid1), the sum each rank read back (sum0, sum1;
healthy), `properties` (what Communicator.properties raised: the emulation lacks
ncclCommQueryProperties, as NCCL 2.28.9 does) and `done=1`.
"""

import ctypes
import os
import signal
import subprocess
import sys
import time

RANKS = 2
COUNT = 256


def wait_for(path, seconds):
    end = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > end:
            raise SystemExit(f"nccl4py_job: {path} did not appear in {seconds} s")
        time.sleep(0.01)


class Floats:
    """COUNT float32 at a device address, as the CUDA array interface describes them."""

    def __init__(self, ptr):
        self.__cuda_array_interface__ = {
            "shape": (COUNT,), "typestr": "<f4", "data": (ptr, False), "version": 3,
            "strides": None, "stream": None}


def rank_main(rank, work, mode):
    import numpy as np
    from cuda.core import Device
    import nccl.core as nc

    dev = Device(0)
    dev.set_current()
    uid_path = os.path.join(work, "uid")
    if rank == 0:
        uid = nc.get_unique_id()
        with open(uid_path + ".tmp", "wb") as f:
            f.write(bytes(uid))
        os.rename(uid_path + ".tmp", uid_path)
    else:
        wait_for(uid_path, 60)
        with open(uid_path, "rb") as f:
            uid = nc.UniqueId.from_bytes(f.read())
    comm = nc.Communicator.init(RANKS, rank, uid)
    stream = dev.create_stream()
    mem = nc.mem_alloc(COUNT * 4)
    buf = Floats(int(mem.handle))
    # The emulation's device memory is host memory: the host writes and reads it directly.
    host = np.ctypeslib.as_array((ctypes.c_float * COUNT).from_address(int(mem.handle)))
    host[:] = rank + 1
    try:
        comm.properties
        props = "ok"
    except Exception as e:  # noqa: BLE001 - what the binding raises is the answer
        props = type(e).__name__
    for step in range(3):
        if mode == "hang" and rank == 1 and step == 2:
            open(os.path.join(work, "stuck1"), "w").close()
            while True:
                time.sleep(1)
        if mode == "hang" and rank == 0 and step == 2:
            open(os.path.join(work, "entered0"), "w").close()
        comm.allreduce(buf, buf, nc.SUM, stream=stream)
        stream.sync()
    print(f"sum{rank}={float(host[0]):g}", flush=True)
    print(f"properties={props}", flush=True)
    comm.destroy()


def main():
    work, mode = sys.argv[1], sys.argv[2]
    if len(sys.argv) > 3:
        rank_main(int(sys.argv[3]), work, mode)
        return
    procs = [subprocess.Popen([sys.executable, __file__, work, mode, str(r)],
                              stdout=subprocess.PIPE, text=True) for r in range(RANKS)]
    for r, p in enumerate(procs):
        print(f"pid{r}={p.pid}", flush=True)
    if mode == "hang":
        wait_for(os.path.join(work, "stuck1"), 60)
        wait_for(os.path.join(work, "entered0"), 60)
        time.sleep(1)  # rank 0's third all-reduce is enqueued and waits on its stream
        for p in procs:
            p.send_signal(signal.SIGKILL)
    failed = 0
    for p in procs:
        out, _ = p.communicate(timeout=120)
        sys.stdout.write(out)
        failed += mode == "healthy" and p.returncode != 0
    print("done=1" if failed == 0 else f"failed={failed}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
