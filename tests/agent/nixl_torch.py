"""Two processes paired by torch 2.15's one-sided transport (torch.distributed._transport, NIXL
backend) through a TCPStore, no process group (tests/agent/nixl_test.cpp drives them).

  nixl_torch.py target DIR PORT            hosts the store, registers a tensor, publishes its
                                           remote buffer in the store, then waits (bounded) for
                                           DIR/stop
  nixl_torch.py initiator DIR PORT N MODE  pairs with the target, writes once to warm up, waits for
                                           DIR/go, starts N asynchronous writes and waits for them:
                                           all of them (MODE healthy), or each with a short timeout
                                           (stall); writes DIR/result.json; in stall mode it then
                                           waits for DIR/finish before exiting.

The agents are named "torch-target" and "torch-initiator". UCX stays on loopback
(UCX_NET_DEVICES=lo, set by the caller).
"""
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed._transport import new_transport_rank
from torch.distributed._transport.nixl._memory import NIXLRemoteBuffer

SIZE = 1 << 16


def wait_for(path, seconds):
    end = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > end:
            sys.exit(f"timed out waiting for {path}")
        time.sleep(0.01)


def publish(path, data):
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.rename(path + ".tmp", path)


def store_of(port, master):
    return dist.TCPStore("127.0.0.1", port, 2, master, timeout=datetime.timedelta(seconds=60))


def target(d, port):
    store = store_of(port, True)
    t = new_transport_rank("nixl", "cpu", store=store, peer_rank=1, rank=0, agent_name="torch-target")
    buf = torch.zeros(SIZE, dtype=torch.uint8)
    mem = t.register_memory(buf)
    store.set("remote", mem.to_remote_buffer().serialize())
    end = time.monotonic() + 120
    while not os.path.exists(os.path.join(d, "stop")) and time.monotonic() < end:
        time.sleep(0.01)
    publish(os.path.join(d, "target.json"), json.dumps({"sum": int(buf.sum())}).encode())


def initiator(d, port, n, mode):
    store = store_of(port, False)
    t = new_transport_rank("nixl", "cpu", store=store, peer_rank=0, rank=1,
                           agent_name="torch-initiator")
    src = torch.ones(SIZE, dtype=torch.uint8)
    mem = t.register_memory(src)
    remote = NIXLRemoteBuffer.deserialize(store.get("remote"))
    t.write(mem.to_view(0, 1024), remote, timeout=30)
    publish(os.path.join(d, "warm"), b"")
    wait_for(os.path.join(d, "go"), 60)
    works = [t.write(mem.to_view(0, SIZE), remote, async_op=True, timeout=60) for _ in range(n)]
    outcome = []
    for w in works:
        try:
            w.wait(datetime.timedelta(seconds=60 if mode == "healthy" else 2))
            outcome.append("done")
        except Exception as e:  # a stalled write times out; a vanished peer errors
            outcome.append(type(e).__name__)
    publish(os.path.join(d, "result.json"), json.dumps({"pid": os.getpid(), "outcome": outcome}).encode())
    if mode == "stall":
        wait_for(os.path.join(d, "finish"), 120)
        os._exit(0)  # the stalled works cannot be cleaned up; leave without waiting on them


if __name__ == "__main__":
    if sys.argv[1] == "target":
        target(sys.argv[2], int(sys.argv[3]))
    else:
        initiator(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
