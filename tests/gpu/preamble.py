#!/usr/bin/env python3
"""The GPU check's preamble: what the machine is, before any check runs.

Prints, one line each: the driver (nvidia-smi), the CUDA driver and runtime versions, torch, the
NCCL torch reports and the libnccl.so.2 its process has mapped, glibc (and the one the bundle
needs), fr's version, the size and free space of /dev/shm; then a probe through libcuda.so.1
directly (ctypes, no torch): cuInit, the primary context of device 0, the 64-bit stream
memory-operation attribute, cuMemHostRegister of one page, cuStreamWriteValue64 into it read back
on the host, and a stream write captured into a CUDA graph and replayed once. Every driver call
is printed with its CUresult.

Besides the human lines it prints `row=CHECK|RESULT|DETAIL` lines (run.sh turns them into rows of
its table) and, when no GPU can be used, `nogpu=REASON`. It never raises: every probe reports
what failed and the next one goes on. Exit 0 always (run.sh decides).

    preamble.py [--fr-version TEXT] [--glibc-needed X.Y]
"""

import argparse
import ctypes
import mmap
import os
import platform
import shutil
import subprocess

rows = []


def say(text):
    print(f"  {text}", flush=True)


def row(check, result, detail):
    rows.append((check, result, detail))
    print(f"row={check}|{result}|{detail}", flush=True)


def nogpu(reason):
    print(f"nogpu={reason}", flush=True)


def driver():
    smi = shutil.which("nvidia-smi")
    if smi is None:
        say("driver: nvidia-smi is not on PATH")
        return None
    try:
        p = subprocess.run(
            [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        say(f"driver: nvidia-smi failed: {e}")
        return None
    text = (p.stdout or p.stderr).strip().splitlines()
    say(f"driver (nvidia-smi, exit {p.returncode}): {text[0] if text else 'no output'}")
    return text[0] if p.returncode == 0 and text else None


def mapped(name):
    """The path of the first mapping of this process whose file name starts with NAME."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if os.path.basename(path).startswith(name):
                    return path
    except OSError:
        pass
    return None


def nccl_version(path):
    try:
        lib = ctypes.CDLL(path)
        v = ctypes.c_int(0)
        lib.ncclGetVersion(ctypes.byref(v))
        return f"{v.value // 10000}.{v.value // 100 % 100}.{v.value % 100}"
    except (OSError, AttributeError) as e:
        return f"unreadable ({e})"


def torch_versions():
    try:
        import torch  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001  (any import failure is a finding, not a crash)
        say(f"torch: cannot import: {type(e).__name__}: {e}")
        return
    say(f"torch: {torch.__version__} ({os.path.dirname(torch.__file__)}); CUDA runtime "
        f"{torch.version.cuda}; cuda available: {torch.cuda.is_available()}")
    try:
        v = torch.cuda.nccl.version()
        say(f"NCCL (torch.cuda.nccl.version()): {'.'.join(map(str, v)) if isinstance(v, tuple) else v}")
    except Exception as e:  # noqa: BLE001
        say(f"NCCL (torch.cuda.nccl.version()): not available: {type(e).__name__}: {e}")
    lib = mapped("libnccl.so")
    if lib is None:
        say("libnccl.so.2 loaded by torch: none mapped in this process")
    else:
        say(f"libnccl.so.2 loaded by torch: {os.path.realpath(lib)} (ncclGetVersion {nccl_version(lib)})")
    cudart = mapped("libcudart.so")
    if cudart is not None:
        try:
            v = ctypes.c_int(0)
            r = ctypes.CDLL(cudart).cudaRuntimeGetVersion(ctypes.byref(v))
            say(f"CUDA runtime (cudaRuntimeGetVersion, {cudart}): {v.value // 1000}.{v.value % 1000 // 10} (result {r})")
        except (OSError, AttributeError) as e:
            say(f"CUDA runtime ({cudart}): unreadable ({e})")


def glibc(needed):
    have = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else " ".join(platform.libc_ver())
    line = f"glibc: {have}"
    if needed:
        try:
            ok = tuple(map(int, have.split()[-1].split("."))) >= tuple(map(int, needed.split(".")))
            line += f" (the bundle's binaries need {needed}: {'met' if ok else 'NOT met'})"
        except ValueError:
            line += f" (the bundle's binaries need {needed})"
    say(line)


def shm():
    try:
        s = os.statvfs("/dev/shm")
    except OSError as e:
        say(f"/dev/shm: {e}")
        row("preamble: /dev/shm", "FAIL", f"cannot stat: {e}")
        return
    size, free = s.f_blocks * s.f_frsize, s.f_bavail * s.f_frsize
    detail = f"{size / 2**20:.0f} MiB, {free / 2**20:.0f} MiB free"
    say(f"/dev/shm: {detail}")
    # The flight log and NCCL's own segments share it; 64 MiB is Docker's default.
    row("preamble: /dev/shm", "OK" if free >= 256 * 2**20 else "WARN", detail)


PROBES = ("probe: cuMemHostRegister", "probe: cuStreamWriteValue64", "probe: captured write, replayed")


def probe_failed(result, detail, why):
    """The context probe's row, the later probes not run; returns WHY (no GPU can be used)."""
    row("probe: cuInit + context", result, detail)
    for p in PROBES:
        row(p, "NOT RUN", "no CUDA context")
    return why


class Driver:
    """libcuda.so.1 through ctypes; every call printed with its CUresult."""

    def __init__(self, lib):
        self.lib = lib

    def name(self, r):
        s = ctypes.c_char_p()
        try:
            if self.lib.cuGetErrorName(r, ctypes.byref(s)) == 0 and s.value:
                return s.value.decode()
        except AttributeError:
            pass
        return "unknown"

    def call(self, label, fn, *args):
        """Calls the first of FN's names (a tuple: _v2 before the old one) that libcuda exports."""
        names = fn if isinstance(fn, tuple) else (fn,)
        for n in names:
            f = getattr(self.lib, n, None)
            if f is not None:
                r = f(*args)
                say(f"{label}: {n} = {self.name(r)} ({r})")
                return r
        say(f"{label}: libcuda.so.1 exports none of {', '.join(names)}")
        return -1


def probe():
    """The ctypes probe; returns None when it ran, else why no GPU can be used."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return probe_failed("NOT RUN", "libcuda.so.1 cannot be loaded",
                            f"libcuda.so.1 cannot be loaded (no NVIDIA driver): {e}")
    d = Driver(lib)
    if d.call("init", "cuInit", 0) != 0:
        return probe_failed("FAIL", "cuInit failed", "cuInit failed")
    v, n, dev = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
    d.call("driver version", "cuDriverGetVersion", ctypes.byref(v))
    d.call("devices", "cuDeviceGetCount", ctypes.byref(n))
    say(f"CUDA driver API {v.value // 1000}.{v.value % 1000 // 10}, {n.value} device(s)")
    if n.value < 1:
        return probe_failed("FAIL", "no CUDA device", "the driver reports no CUDA device")
    ctx = ctypes.c_void_p()
    if d.call("device 0", "cuDeviceGet", ctypes.byref(dev), 0) != 0 or d.call(
            "primary context", ("cuDevicePrimaryCtxRetain",), ctypes.byref(ctx), dev) != 0 or d.call(
            "make it current", "cuCtxSetCurrent", ctx) != 0:
        return probe_failed("FAIL", "no context on device 0", "no CUDA context on device 0")
    row("probe: cuInit + context", "OK", f"driver API {v.value}, {n.value} device(s)")
    try:
        stream_writes(d, dev)
    finally:
        d.call("release the context", ("cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"), dev)
    return None


def stream_writes(d, dev):
    """Host registration, a stream write read back, and the same write captured and replayed."""
    u64, ptr = ctypes.c_uint64, ctypes.c_void_p
    attr = ctypes.c_int(-1)
    d.call("64-bit stream memory operations (attribute 122)", "cuDeviceGetAttribute", ctypes.byref(attr), 122, dev)
    say(f"CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = {attr.value}")
    page = mmap.mmap(-1, mmap.PAGESIZE)
    word = ctypes.c_uint64.from_buffer(page)
    host = ctypes.addressof(word)
    dptr, stream = u64(0), ptr()
    r = d.call("register one page", ("cuMemHostRegister_v2", "cuMemHostRegister"), ptr(host),
               ctypes.c_size_t(mmap.PAGESIZE), 0x02 | 0x01)  # DEVICEMAP | PORTABLE, as the agent
    if r != 0:
        row("probe: cuMemHostRegister", "FAIL", f"{d.name(r)} ({r})")
        row("probe: cuStreamWriteValue64", "NOT RUN", "no registered page")
        row("probe: captured write, replayed", "NOT RUN", "no registered page")
        return
    row("probe: cuMemHostRegister", "OK", f"one page, CUDA_SUCCESS; 64-bit mem ops attribute {attr.value}")
    write = ("cuStreamWriteValue64_v2", "cuStreamWriteValue64")
    try:
        d.call("device pointer", ("cuMemHostGetDevicePointer_v2", "cuMemHostGetDevicePointer"),
               ctypes.byref(dptr), ptr(host), 0)
        d.call("stream", "cuStreamCreate", ctypes.byref(stream), 1)  # CU_STREAM_NON_BLOCKING
        r = d.call("write 1", write, stream, dptr, u64(1), 0)
        s = d.call("synchronize", "cuStreamSynchronize", stream)
        seen = word.value
        ok = r == 0 and s == 0 and seen == 1
        row("probe: cuStreamWriteValue64", "OK" if ok else "FAIL",
            f"{d.name(r)}, synchronize {d.name(s)}, host reads {seen} (1 expected)")
        graph_write(d, stream, dptr, word)
    finally:
        if stream.value:
            d.call("destroy the stream", ("cuStreamDestroy_v2", "cuStreamDestroy"), stream)
        d.call("unregister", "cuMemHostUnregister", ptr(host))
        del word
        page.close()


def graph_write(d, stream, dptr, word):
    u64, ptr = ctypes.c_uint64, ctypes.c_void_p
    graph, exe = ptr(), ptr()
    r = d.call("begin capture (thread local)", ("cuStreamBeginCapture_v2", "cuStreamBeginCapture"), stream, 1)
    w = d.call("captured write 2", ("cuStreamWriteValue64_v2", "cuStreamWriteValue64"), stream, dptr, u64(2), 0)
    e = d.call("end capture", "cuStreamEndCapture", stream, ctypes.byref(graph))
    before = word.value
    if r != 0 or w != 0 or e != 0:
        row("probe: captured write, replayed", "FAIL",
            f"capture {d.name(r)}, write {d.name(w)}, end {d.name(e)}")
        return
    try:
        i = d.call("instantiate", "cuGraphInstantiateWithFlags", ctypes.byref(exe), graph, u64(0))
        launch = d.call("replay once", "cuGraphLaunch", exe, stream) if i == 0 else -1
        s = d.call("synchronize", "cuStreamSynchronize", stream)
        after = word.value
        ok = i == 0 and launch == 0 and s == 0 and before == 1 and after == 2
        row("probe: captured write, replayed", "OK" if ok else "FAIL",
            f"instantiate {d.name(i)}, launch {d.name(launch)}; host reads {before} after capture "
            f"(1 expected: a captured write does not run), {after} after the replay (2 expected)")
    finally:
        if exe.value:
            d.call("destroy the graph exec", "cuGraphExecDestroy", exe)
        d.call("destroy the graph", "cuGraphDestroy", graph)


def main():
    ap = argparse.ArgumentParser(description="the GPU check's preamble")
    ap.add_argument("--fr-version", default="")
    ap.add_argument("--glibc-needed", default="")
    args = ap.parse_args()
    print("== preamble", flush=True)
    if args.fr_version:
        say(f"fr: {args.fr_version}")
    gpu = driver()
    glibc(args.glibc_needed)
    shm()
    torch_versions()
    why = probe()
    if why is None and gpu is None:
        why = "nvidia-smi lists no GPU"
    if why is not None:
        nogpu(why)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except Exception as e:  # noqa: BLE001  (the preamble reports; it never ends the check)
        print(f"row=preamble|FAIL|{type(e).__name__}: {e}", flush=True)
        print(f"nogpu=the preamble failed: {type(e).__name__}: {e}")
