#!/usr/bin/env python3
"""Runs small real PyTorch jobs on the gloo backend (127.0.0.1 only) with one planted fault each,
and has every rank that can dump write its Flight Recorder dump in the three forms torch makes:

  OUT/<fault>/file/fr_rank_<r>    _dump_fr_trace_file (prefix from TORCH_FR_DUMP_TEMP_FILE)
  OUT/<fault>/bytes/fr_rank_<r>   _dump_fr_trace (pickle bytes, written here)
  OUT/<fault>/json/rank_<r>.json  _dump_fr_trace_json (JSON bytes, written here)

Usage: fr_torch_job.py OUT FAULT...   (FAULT: hang skip size op group kill p2p p2p_pair
                                              p2p_skip empty unreached stale raised root
                                              subgroups slow)
Exit 0 when every job wrote its dumps, 77 when torch (with gloo) cannot be imported, else 1.

Every job does ten all_reduces that finish, then the fault at collective #11 on rank 3:
  hang   rank 3 stays on the host (6 ranks); the others wait in all_reduce #11
  skip   rank 3 skips all_reduce #11 and calls the broadcast the others call as #12
  size   everyone broadcasts from rank 0 as #11, rank 3 with another size
  op     rank 3 calls broadcast where the others call all_reduce #11
  group  (6 ranks) new_group([1, 2, 3, 4], group_desc="sub_ranks"); rank 3 stays on the host
         before the group's all_reduce #1 while 1, 2, 4 wait in it
  kill   rank 3 is killed (SIGKILL) before it dumps; the others wait in all_reduce #11
  p2p    after two rounds of send/recv between 0-1 and 2-3 (gloo records no entry for them, its
         pg_status counts them), rank 2 waits in recv from 3, which stays on the host; 0 and 1
         wait in all_reduce #11
  p2p_pair (2 ranks) after a round of send/recv, rank 0 sends once more (isend, never
         received: rank 1 posts no recv); both go on to all_reduce #11
  p2p_skip (2 ranks) after two rounds of send/recv, rank 1 waits in a recv from 0, which skips
         its send and waits in all_reduce #11
  empty  rank 3 stays on the host before its first collective (its dump holds nothing); the
         others wait in all_reduce #1 (no ten all_reduces before)
  unreached new_group([1, 2, 3], group_desc="trio"); 1 and 2 wait in its all_reduce #1, rank 3
         stays on the host before it, rank 0 waits in the world's all_reduce #11
  stale  rank 3 dumps after all_reduce #4, goes on to #10 with the others, then stays on the
         host and is killed before it dumps again; the others wait in all_reduce #11
  raised (2 ranks) a group with a 3 s timeout; rank 1 stays on the host before the group's
         all_reduce #1; rank 0's raises (timed out) and it dumps after
  root   broadcast #11 from rank 0 on 0, 1, 2 and from rank 3 on rank 3 (gloo records no root)
  subgroups groups grp_a [0, 1, 2], grp_b [2, 3], grp_c [0, 2, 3] each finish two all_reduces;
         then rank 1 stays on the host while 0 and 2 wait in grp_a's all_reduce #3, and 3 waits
         in grp_c's #3, which 0 and 2 (held in grp_a) never reach
  slow   no hang: 30 all_reduces (instead of ten), and from the fifth on rank 3 sleeps
         SLOW_S before each, as a straggler's host would; every rank dumps after the last

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
import sys
import time

WORLD = {"hang": 6, "group": 6, "raised": 2, "p2p_pair": 2, "p2p_skip": 2}
DEFAULT_WORLD = 4
CULPRIT = 3
CULPRITS = {"raised": 1, "p2p_pair": 1, "p2p_skip": 0, "subgroups": 1}
SUBGROUPS = (("grp_a", (0, 1, 2)), ("grp_b", (2, 3)), ("grp_c", (0, 2, 3)))
LIMIT_S = 60
# torch marks finished work retired a moment after the call returns; a dump taken at once can
# show the last finished collective as unfinished on one rank. A hung job is dumped seconds
# later, so every rank waits this long before it dumps.
SETTLE_S = 1.0
# The group timeout of the job whose collective raises (gloo raises once it passes).
TIMEOUT_S = {"raised": 3}
# The slow job: its collectives, and the straggler's sleep before each from SLOW_FROM on.
SLOW_COLLECTIVES, SLOW_FROM, SLOW_S = 30, 4, 0.04


def wait_for(paths, limit_s):
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if all(os.path.exists(p) for p in paths):
            return True
        time.sleep(0.05)
    return False


def exchange(dist, t, rank, rounds):
    """Blocking send/recv between pairs (0, 1) and (2, 3): the lower rank sends first."""
    peer = rank ^ 1
    for _ in range(rounds):
        if rank < peer:
            dist.send(t, peer)
            dist.recv(t, peer)
        else:
            dist.recv(t, peer)
            dist.send(t, peer)


def fault_ops(fault, rank, dist, torch, t, sub):
    """What rank issues at the fault, after the all_reduces that finish: its pending work."""
    culprit = CULPRITS.get(fault, CULPRIT)
    if fault == "subgroups":
        for g, (_, members) in zip(sub, SUBGROUPS):
            if rank in members:
                for _ in range(2):
                    dist.all_reduce(t, group=g)
        if rank == culprit:
            return []
        return [dist.all_reduce(t, group=sub[2 if rank == 3 else 0], async_op=True)]
    if fault == "p2p":
        exchange(dist, t, rank, 2)
        if rank == 2:
            return [dist.irecv(t, src=3)]
        return [] if rank == 3 else [dist.all_reduce(t, async_op=True)]
    if fault == "p2p_pair":
        exchange(dist, t, rank, 1)
        pending = [dist.isend(t, 1)] if rank == 0 else []
        return pending + [dist.all_reduce(t, async_op=True)]
    if fault == "p2p_skip":
        exchange(dist, t, rank, 2)
        return [dist.all_reduce(t, async_op=True)] if rank == 0 else [dist.irecv(t, src=0)]
    if fault == "unreached":
        if rank in (1, 2):
            return [dist.all_reduce(t, group=sub, async_op=True)]
        return [dist.all_reduce(t, async_op=True)] if rank == 0 else []
    if fault == "group":
        return [dist.all_reduce(t, group=sub, async_op=True)] if rank in (1, 2, 4) else []
    if fault == "root":
        return [dist.broadcast(t, src=culprit if rank == culprit else 0, async_op=True)]
    if fault == "slow":
        return []  # nothing pending: the job ran to its end, slowly
    if fault == "raised":
        if rank == culprit:
            return []
        try:
            dist.all_reduce(t)  # the others never come: raises once the group's timeout passes
        except RuntimeError:
            pass
        return []
    if rank == culprit:
        if fault in ("skip", "op"):
            return [dist.broadcast(t, src=0, async_op=True)]
        if fault == "size":
            return [dist.broadcast(torch.ones(16), src=0, async_op=True)]
        return []  # hang, empty, stale, kill: stays on the host, enters nothing
    if fault == "size":
        return [dist.broadcast(t, src=0, async_op=True)]
    pending = [dist.all_reduce(t, async_op=True)]
    if fault == "skip":
        pending.append(dist.broadcast(t, src=0, async_op=True))
    return pending


def rank_main(fault, rank, world, store, out):
    import torch
    import torch.distributed as dist
    import torch._C._distributed_c10d as c10d

    culprit = CULPRITS.get(fault, CULPRIT)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S.get(fault, LIMIT_S)))
    sub = None
    if fault == "group":
        sub = dist.new_group([1, 2, 3, 4], group_desc="sub_ranks")
    elif fault == "unreached":
        sub = dist.new_group([1, 2, 3], group_desc="trio")
    elif fault == "subgroups":
        sub = [dist.new_group(list(members), group_desc=desc) for desc, members in SUBGROUPS]

    def dump():
        c10d._dump_fr_trace_file(rank)
        with open(os.path.join(out, "bytes", f"fr_rank_{rank}"), "wb") as f:
            f.write(c10d._dump_fr_trace())
        with open(os.path.join(out, "json", f"rank_{rank}.json"), "wb") as f:
            f.write(c10d._dump_fr_trace_json())
        open(os.path.join(out, f"done_{rank}"), "w").close()

    t = torch.ones(8)
    for i in range(0 if fault == "empty" else SLOW_COLLECTIVES if fault == "slow" else 10):
        if fault == "slow" and rank == culprit and i >= SLOW_FROM:
            time.sleep(SLOW_S)
        dist.all_reduce(t)
        if fault == "stale" and rank == culprit and i == 3:
            time.sleep(SETTLE_S)
            dump()  # the early dump; the rank goes on with the others, then dies undumped
    others = [os.path.join(out, f"done_{r}") for r in range(world) if r != culprit]
    if rank == culprit and fault in ("kill", "stale"):
        wait_for(others, LIMIT_S)
        os.kill(os.getpid(), signal.SIGKILL)
    pending = fault_ops(fault, rank, dist, torch, t, sub)
    time.sleep(SETTLE_S)
    dump()
    wait_for([os.path.join(out, f"done_{r}") for r in range(world)
              if not (fault == "kill" and r == culprit)], LIMIT_S)
    del pending
    os._exit(0)


def run_job(root, fault):
    world = WORLD.get(fault, DEFAULT_WORLD)
    out = os.path.join(root, fault)
    for sub in ("file", "bytes", "json"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    os.environ["TORCH_FR_DUMP_TEMP_FILE"] = os.path.join(out, "file", "fr_rank_")
    # The rendezvous is a file (no port to race for with other jobs on the machine); gloo's own
    # connections bind ephemeral ports on 127.0.0.1.
    store = os.path.join(out, "store")
    if os.path.exists(store):
        os.remove(store)
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=rank_main, args=(fault, r, world, store, out)) for r in range(world)]
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
    for name in [f"done_{r}" for r in range(world)] + ["store"]:
        try:
            os.remove(os.path.join(out, name))
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
