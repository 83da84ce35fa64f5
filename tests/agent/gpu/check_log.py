#!/usr/bin/env python3
"""Checks a flight log written under a real GPU: prints its communicators and the GPU progress of
the recorded collectives, and fails unless every launched all-reduce completed on the GPU.

    check_log.py LOG [--expect-allreduce N]

Reads the layout of proto/fr/flight_log.h directly (little-endian), so it needs nothing built.
"""
import argparse
import struct
import sys

OP_ALLREDUCE = 1
REC_F_CAPTURED = 0x2
REC_F_LAUNCHED = 0x10
LOG_F_GPU_MARKERS = 0x2
LOG_F_GPU_EVENTS = 0x4


def read(path):
    data = open(path, "rb").read()
    magic, version, header_size, comm_size, record_size, comm_cap, ring_cap, comm_off, ring_off = \
        struct.unpack_from("<QIIIIIIQQ", data, 0)
    if magic != 0x314F4C5448474C46:
        raise SystemExit(f"{path}: not a flight log")
    flags, = struct.unpack_from("<I", data, 88)
    counter, overwritten, comm_count = struct.unpack_from("<QQI", data, 96)
    comms = {}
    for i in range(comm_count):
        o = comm_off + i * comm_size
        cid, = struct.unpack_from("<Q", data, o + 8)
        size, rank, dev = struct.unpack_from("<iii", data, o + 52)
        started, completed = struct.unpack_from("<QQ", data, o + 192)
        op_index, = struct.unpack_from("<Q", data, o + 168)
        comms[cid] = dict(size=size, rank=rank, dev=dev, op_index=op_index,
                          started=started, completed=completed)
    records = []
    for rid in range(max(0, counter - ring_cap), counter):
        o = ring_off + (rid % ring_cap) * record_size
        lock, rec_id, comm_id, seq, op_index = struct.unpack_from("<QQQQQ", data, o)
        call_ns, duration_ns = struct.unpack_from("<QQ", data, o + 64)
        op, = struct.unpack_from("<H", data, o + 100)
        result, rflags = struct.unpack_from("<iI", data, o + 112)
        if lock == 0 or lock & 1 or rec_id != rid:
            continue
        records.append(dict(id=rid, comm=comm_id, seq=seq, op=op, op_index=op_index,
                            result=result, flags=rflags, duration_ns=duration_ns))
    return flags, counter, overwritten, comms, records


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--expect-allreduce", type=int, default=0)
    args = ap.parse_args()
    flags, counter, overwritten, comms, records = read(args.log)
    mode = "markers" if flags & LOG_F_GPU_MARKERS else "events" if flags & LOG_F_GPU_EVENTS else "none"
    print(f"log: {counter} records ({overwritten} overwritten), GPU tracking: {mode}")
    for cid, c in comms.items():
        print(f"  comm {cid:016x}: size {c['size']} rank {c['rank']} dev {c['dev']} "
              f"op_index {c['op_index']} gpu started {c['started']} completed {c['completed']}")
    ars = [r for r in records if r["op"] == OP_ALLREDUCE and not r["flags"] & REC_F_CAPTURED]
    bad = []
    for r in ars:
        c = comms.get(r["comm"])
        done = c is not None and r["op_index"] != 0 and c["completed"] >= r["op_index"]
        if r["result"] != 0 or not r["flags"] & REC_F_LAUNCHED or not done:
            bad.append(r)
    seqs = [r["seq"] for r in ars]
    print(f"all-reduces: {len(ars)}, seq {seqs[:1]}..{seqs[-1:]}, not completed on the GPU: {len(bad)}")
    ok = mode != "none" and not bad and (args.expect_allreduce == 0 or len(ars) >= args.expect_allreduce
                                         or overwritten > 0)
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
