#!/usr/bin/env python3
"""Runs small real PyTorch jobs on the gloo backend (127.0.0.1 only) with one planted fault each,
and has every rank that can dump write its Flight Recorder dump in the three forms torch makes:

  OUT/<fault>/file/fr_rank_<r>    _dump_fr_trace_file (prefix from TORCH_FR_DUMP_TEMP_FILE)
  OUT/<fault>/bytes/fr_rank_<r>   _dump_fr_trace (pickle bytes, written here)
  OUT/<fault>/json/rank_<r>.json  _dump_fr_trace_json (JSON bytes, written here)

Usage: fr_torch_job.py OUT FAULT...   (FAULT: hang skip size op group kill)
Exit 0 when every job wrote its dumps, 77 when torch (with gloo) cannot be imported, else 1.

Every job does ten all_reduces that finish, then the fault at collective #11 on rank 3:
  hang   rank 3 stays on the host (6 ranks); the others wait in all_reduce #11
  skip   rank 3 skips all_reduce #11 and calls the broadcast the others call as #12
  size   everyone broadcasts from rank 0 as #11, rank 3 with another size
  op     rank 3 calls broadcast where the others call all_reduce #11
  group  (6 ranks) new_group([1, 2, 3, 4], group_desc="sub_ranks"); rank 3 stays on the host
         before the group's all_reduce #1 while 1, 2, 4 wait in it
  kill   rank 3 is killed (SIGKILL) before it dumps; the others wait in all_reduce #11

Collectives after the fault are issued with async_op=True, so a rank dumps while its work is
still pending, as a hung job's ranks would. The faults are chosen so that gloo never receives
more bytes than a buffer holds (it aborts the process then, before any dump): the size fault is
a broadcast where rank 3's buffer is the larger, the other op a broadcast that only receives.
torch is imported once; each job's ranks are forked from this process. A rank leaves only after
every rank has dumped (or was killed), so no broken connection can finish pending work before
the dumps; every wait is bounded."""
import datetime
import multiprocessing as mp
import os
import signal
import socket
import sys
import time

WORLD = {"hang": 6, "group": 6}
DEFAULT_WORLD = 4
CULPRIT = 3
LIMIT_S = 60
# torch marks finished work retired a moment after the call returns; a dump taken at once can
# show the last finished collective as unfinished on one rank. A hung job is dumped seconds
# later, so every rank waits this long before it dumps.
SETTLE_S = 1.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(paths, limit_s):
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if all(os.path.exists(p) for p in paths):
            return True
        time.sleep(0.05)
    return False


def rank_main(fault, rank, world, port, out):
    import torch
    import torch.distributed as dist
    import torch._C._distributed_c10d as c10d

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=LIMIT_S))
    sub = dist.new_group([1, 2, 3, 4], group_desc="sub_ranks") if fault == "group" else None
    t = torch.ones(8)
    for _ in range(10):
        dist.all_reduce(t)

    def dump():
        c10d._dump_fr_trace_file(rank)
        with open(os.path.join(out, "bytes", f"fr_rank_{rank}"), "wb") as f:
            f.write(c10d._dump_fr_trace())
        with open(os.path.join(out, "json", f"rank_{rank}.json"), "wb") as f:
            f.write(c10d._dump_fr_trace_json())
        open(os.path.join(out, f"done_{rank}"), "w").close()

    others = [os.path.join(out, f"done_{r}") for r in range(world) if r != CULPRIT]
    pending = []
    if rank == CULPRIT:
        if fault == "kill":
            wait_for(others, LIMIT_S)
            os.kill(os.getpid(), signal.SIGKILL)
        elif fault == "skip":
            pending.append(dist.broadcast(t, src=0, async_op=True))
        elif fault == "size":
            pending.append(dist.broadcast(torch.ones(16), src=0, async_op=True))
        elif fault == "op":
            pending.append(dist.broadcast(t, src=0, async_op=True))
        # hang, group: stays on the host, enters nothing
    elif fault == "group":
        if rank in (1, 2, 4):
            pending.append(dist.all_reduce(t, group=sub, async_op=True))
    elif fault == "size":
        pending.append(dist.broadcast(t, src=0, async_op=True))
    else:
        pending.append(dist.all_reduce(t, async_op=True))
        if fault == "skip":
            pending.append(dist.broadcast(t, src=0, async_op=True))
    time.sleep(SETTLE_S)
    dump()
    wait_for([os.path.join(out, f"done_{r}") for r in range(world) if not (fault == "kill" and r == CULPRIT)],
             LIMIT_S)
    os._exit(0)


def run_job(root, fault):
    world = WORLD.get(fault, DEFAULT_WORLD)
    out = os.path.join(root, fault)
    for sub in ("file", "bytes", "json"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    os.environ["TORCH_FR_DUMP_TEMP_FILE"] = os.path.join(out, "file", "fr_rank_")
    port = free_port()
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=rank_main, args=(fault, r, world, port, out)) for r in range(world)]
    for p in procs:
        p.start()
    ok = True
    end = time.monotonic() + LIMIT_S + 30
    for p in procs:
        p.join(max(0.1, end - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()
            ok = False
    expected = [r for r in range(world) if not (fault == "kill" and r == CULPRIT)]
    missing = [r for r in expected if not os.path.exists(os.path.join(out, f"done_{r}"))]
    for r in range(world):
        try:
            os.remove(os.path.join(out, f"done_{r}"))
        except FileNotFoundError:
            pass
    if missing or not ok:
        print(f"{fault}: ranks {missing} wrote no dump", file=sys.stderr)
        return False
    print(f"{fault}: {world} ranks, dumps in {out}")
    return True


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    try:
        import torch  # noqa: F401  (once, before forking the ranks)
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_gloo_available():
            raise ImportError("torch.distributed with gloo is not available")
    except ImportError as e:
        print(f"no torch: {e}", file=sys.stderr)
        return 77
    ok = all([run_job(argv[1], f) for f in argv[2:]])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
