"""Two real NIXL agents in two processes (examples/nixl/run.sh and tests/agent/nixl_test.cpp drive
them).

  nixl_pair.py target DIR            registers a buffer, publishes its metadata in DIR, then waits
                                     (bounded) for DIR/stop
  nixl_pair.py initiator DIR N MODE  connects to the target, makes one warm-up WRITE, waits for
                                     DIR/go, posts N WRITEs at once, each with a notification, and
                                     polls them: until all are done (MODE healthy), for 2 s (stall),
                                     or until none is in progress (kill; a
                                     call that raises counts as ERR:<name>); writes DIR/result.json;
                                     in stall mode it then waits for DIR/finish before exiting.

UCX stays on loopback (UCX_NET_DEVICES=lo, set by the caller); data moves by cma.
"""
import json
import os
import sys
import time

import torch
from nixl._api import nixl_agent, nixl_agent_config

SLICE = 4096


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


def target(d):
    agent = nixl_agent("target", nixl_agent_config(backends=["UCX"]))
    buf = torch.zeros(SLICE * 256, dtype=torch.uint8)
    agent.register_memory(buf)
    publish(os.path.join(d, "target.addr"), str(buf.data_ptr()).encode())
    publish(os.path.join(d, "target.md"), agent.get_agent_metadata())
    end = time.monotonic() + 120
    while not os.path.exists(os.path.join(d, "stop")) and time.monotonic() < end:
        agent.get_new_notifs()
        time.sleep(0.005)


def state_of(call, handle):
    """A transfer's state as the binding reports it; ERR:<exception> when the call raises (a
    vanished peer makes postXferReq and getXferStatus raise NIXL_ERR_REMOTE_DISCONNECT)."""
    try:
        return call(handle)
    except Exception as e:
        return "ERR:" + type(e).__name__


def initiator(d, n, mode):
    wait_for(os.path.join(d, "target.md"), 60)
    agent = nixl_agent("initiator", nixl_agent_config(backends=["UCX"]))
    src = torch.arange(SLICE * 256, dtype=torch.int32).to(torch.uint8)
    agent.register_memory(src)
    with open(os.path.join(d, "target.md"), "rb") as f:
        name = agent.add_remote_agent(f.read())
    with open(os.path.join(d, "target.addr"), "rb") as f:
        remote_addr = int(f.read())

    def xfer(i, tag):
        local = agent.get_xfer_descs([(src.data_ptr() + (i % 256) * SLICE, SLICE, 0)], "DRAM")
        rdesc = agent.get_xfer_descs([(remote_addr + (i % 256) * SLICE, SLICE, 0)], "DRAM")
        return agent.initialize_xfer("WRITE", local, rdesc, name, tag)

    warm = xfer(0, b"warm")
    agent.transfer(warm)
    end = time.monotonic() + 30
    while agent.check_xfer_state(warm) == "PROC" and time.monotonic() < end:
        time.sleep(0.001)
    agent.release_xfer_handle(warm)
    publish(os.path.join(d, "warm"), b"")
    wait_for(os.path.join(d, "go"), 60)
    handles = [xfer(i, b"tag-%d" % i) for i in range(n)]
    states = [state_of(agent.transfer, h) for h in handles]
    limit = {"healthy": 60, "stall": 2, "kill": 15}[mode]
    end = time.monotonic() + limit
    while time.monotonic() < end:
        states = [s if s.startswith("ERR") else state_of(agent.check_xfer_state, h)
                  for s, h in zip(states, handles)]
        if mode == "healthy" and all(s == "DONE" for s in states):
            break
        if mode == "kill" and "PROC" not in states:
            break
        time.sleep(0.002)
    publish(os.path.join(d, "result.json"), json.dumps({"pid": os.getpid(), "states": states}).encode())
    if mode in ("stall", "kill"):  # keep the requests unreleased while the logs are read
        wait_for(os.path.join(d, "finish"), 120)
        return
    for h in handles:
        try:
            agent.release_xfer_handle(h)
        except Exception:  # a request that failed may refuse to be released
            pass


if __name__ == "__main__":
    if sys.argv[1] == "target":
        target(sys.argv[2])
    else:
        initiator(sys.argv[2], int(sys.argv[3]), sys.argv[4])
