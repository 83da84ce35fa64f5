"""fr-run's hook in the Python processes it starts: torch's own Flight Recorder, on request.

fr-run puts this folder first on the command's PYTHONPATH, so Python imports this file at start
(site.py imports `sitecustomize`). It first runs the sitecustomize it shadows, if there is one on
the rest of sys.path, then starts one daemon thread. The thread leaves within 10 s unless fr-run
registered this process (FR_LOG_DIR/fr-proc.<pid>, daemon/base/proc_file.h); in that one it wakes
every half second and, once torch.distributed is imported and initialized,
  - writes FR_LOG_DIR/fr-proc.<pid>.torch ("fr-torch/1 seq N", N the sum of every process group's
    collective sequence number) whenever N moves: the node daemon reads the file's age as the time
    since the job last made progress, for a job that records nothing of fr's own (gloo);
  - when the node daemon asks (FR_LOG_DIR/fr-proc.<pid>.dump-request, a regular file of this user
    or root), calls torch's own dump (torch._C._distributed_c10d._dump_fr_trace, the pickle torch
    writes for TORCH_FR_DUMP_TEMP_FILE) and renames the bytes into FR_LOG_DIR/fr-proc.<pid>.fr-dump
    whole, for the node daemon to put into the incident's dump set.
In a program that never imports torch.distributed the thread only looks at sys.modules. Nothing
here raises into the program: every failure is swallowed. FR_TORCH_HOOK=0 turns it off; so does
fr-run --no-torch-hook, which leaves PYTHONPATH alone.
"""
import os
import sys


def _chain():
    """Runs the sitecustomize this file shadows, as Python would have without fr-run."""
    try:
        import importlib.machinery
        import importlib.util
        here = os.path.dirname(os.path.abspath(__file__))
        rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)
    except Exception as e:  # the other sitecustomize's own failure, reported as Python would
        sys.stderr.write(f"Error in sitecustomize (run by fr-run's hook): {e!r}\n")


def _trusted(path):
    try:
        st = os.lstat(path)
    except OSError:
        return False
    import stat
    return stat.S_ISREG(st.st_mode) and st.st_uid in (0, os.getuid())


def _write_whole(path, data):
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.rename(tmp, path)


def _progress(c10d):
    total = 0
    for pg in list(c10d._world.pg_map.keys()):
        try:
            total += int(pg._get_sequence_number_for_group())
        except Exception:
            pass
    return total


def _watch(base):
    import time
    # fr-run registers the process just after starting it: wait for that a little, and leave
    # for good in a process it did not start (a worker with the same environment).
    for _ in range(40):
        if _trusted(base):
            break
        time.sleep(0.25)
    else:
        return
    last = None
    request = base + ".dump-request"
    while True:
        time.sleep(0.5)
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is None or not dist.is_available() or not dist.is_initialized():
                continue
            import torch.distributed.distributed_c10d as c10d
            seq = _progress(c10d)
            if seq != last:
                _write_whole(base + ".torch", f"fr-torch/1 seq {seq}\n".encode())
                last = seq
            if _trusted(request):
                os.unlink(request)
                import torch._C._distributed_c10d as native
                _write_whole(base + ".fr-dump", native._dump_fr_trace())
        except Exception:
            time.sleep(5)  # torch too old or broken: try again later, never raise into the job


def _start():
    if os.environ.get("FR_TORCH_HOOK", "1") == "0":
        return
    log_dir = os.environ.get("FR_LOG_DIR")
    if not log_dir:
        return
    base = os.path.join(log_dir, f"fr-proc.{os.getpid()}")
    import threading
    threading.Thread(target=_watch, args=(base,), name="fr-torch-hook", daemon=True).start()


_chain()
try:
    _start()
except Exception:
    pass
