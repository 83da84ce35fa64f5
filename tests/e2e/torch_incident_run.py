#!/usr/bin/env python3
"""Runs a 4-rank real PyTorch gloo job (torch_gloo_job.py, 127.0.0.1 only) under fr: a coordinator
with --stall-after, and every rank started through fr-run, as examples/torchrun/run.sh does it
(torchrun itself is not needed: the ranks get RANK and WORLD_SIZE here). Rank 3 stays in Python
after five all_reduces; the others wait in the sixth. gloo records nothing of fr's own, so the
incident can only come from the processes fr-run registered and torch's progress (fr-run's hook).

With --nccl the job is torch_nccl_job.py instead: the same four ranks, each with a torch process
group on gloo and a NCCL communicator on the emulation (build/sim/lib, its libnccl.so.2 preloaded
so that torch loads it too: it exports every NCCL function torch 2.15 links), whose rank 3 stays
in Python between torch's all_reduce and NCCL's.

Usage: torch_incident_run.py BUILD_DIR OUT_DIR [--nccl]
Prints one JSON document: the most processes the status showed (`processes_total`, its summary),
the incident (its directory and verdict as the coordinator logged it), and the node's log. Every
process it starts is gone when it exits; every wait is bounded. Exit 77 when python3 cannot
import torch, 0 otherwise (the caller judges the document)."""
import json
import os
import signal
import subprocess
import sys
import time

DEADLINE_S = 240


def status(frd, port, token):
    r = subprocess.run([frd, "status", "--json", "--coordinator", f"127.0.0.1:{port}",
                        "--token-file", token], capture_output=True, text=True, timeout=30)
    try:
        return json.loads(r.stdout)
    except ValueError:
        return None


def main():
    build, out = sys.argv[1], sys.argv[2]
    nccl = sys.argv[3:] == ["--nccl"]
    if subprocess.run([sys.executable, "-c", "import torch.distributed"],
                      capture_output=True).returncode != 0:
        print("python3 cannot import torch.distributed")
        return 77
    here = os.path.dirname(os.path.abspath(__file__))
    frd, fr_run = os.path.join(build, "bin", "frd"), os.path.join(build, "bin", "fr-run")
    logs, dumps, spool = (os.path.join(out, d) for d in ("logs", "dumps", "spool"))
    for d in (logs, dumps, spool):
        os.makedirs(d, exist_ok=True)
    token = os.path.join(out, "token")
    with open(os.open(token, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(os.urandom(16).hex())
    port_file = os.path.join(out, "port")
    procs = []
    result = {"processes_total": 0, "processes_summary": "", "incident": None}
    try:
        coord = subprocess.Popen(
            [frd, "coordinator", "--listen", "127.0.0.1:0", "--port-file", port_file,
             "--token-file", token, "--dump-dir", dumps, "--job-id", "torchjob",
             "--expect-ranks", "4", "--stall-after", "5", "--dump-deadline", "150"],
            stdout=open(os.path.join(out, "coordinator.log"), "w"), stderr=subprocess.STDOUT,
            start_new_session=True)
        procs.append(coord)
        end = time.monotonic() + 20
        while time.monotonic() < end and not (os.path.exists(port_file)
                                              and os.path.getsize(port_file) > 0):
            time.sleep(0.1)
        port = open(port_file).read().strip()
        command = [sys.executable, os.path.join(here, "torch_gloo_job.py"),
                   os.path.join(out, "store")]
        if nccl:
            # Only the job's own process gets the emulation, after the agent fr-run preloads.
            sim = os.path.join(build, "sim", "lib")
            command = ["sh", "-c", 'LD_LIBRARY_PATH="$1" LD_PRELOAD="$LD_PRELOAD:$2" exec "$3" "$4" "$5"',
                       "sh", sim, os.path.join(sim, "libnccl.so.2"), sys.executable,
                       os.path.join(here, "torch_nccl_job.py"), os.path.join(out, "store")]
        for r in range(4):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE="4")
            procs.append(subprocess.Popen(
                [fr_run, "--coordinator", f"127.0.0.1:{port}", "--job-id", "torchjob",
                 "--log-dir", logs, "--token-file", token,
                 "--frd-arg", "--dump-dir", "--frd-arg", spool,
                 "--frd-arg", "--stack-budget", "--frd-arg", "60",
                 "--"] + command,
                env=env, stdout=open(os.path.join(out, f"rank{r}.log"), "w"),
                stderr=subprocess.STDOUT, start_new_session=True))
        end = time.monotonic() + DEADLINE_S
        while time.monotonic() < end:
            time.sleep(1)
            s = status(frd, port, token)
            if not s:
                continue
            p = s.get("processes", {})
            if p.get("total", 0) > result["processes_total"]:
                result["processes_total"] = p["total"]
                result["processes_summary"] = p.get("summary", "")
            done = [i for i in s.get("incidents", []) if i.get("verdict")]
            if done:
                result["incident"] = done[0]
                break
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
        # The ranks are fr-run's children in its session; the node daemon is in its own.
        lock = os.path.join(logs, "frd-node.lock")
        try:
            pid = int(open(lock).read().split()[0])
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError, IndexError):
            pass
    try:
        result["node_log"] = open(os.path.join(logs, "frd-node.log")).read()[-6000:]
    except OSError:
        result["node_log"] = ""
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
