# The rank program of `fr-simjob --python`: the same job as fr-simjob-rank (rank_main.cpp), written
# as a Python program that drives NCCL and the CUDA driver through ctypes, the way vLLM's and
# SGLang's pynccl do: ctypes.CDLL("libnccl.so.2"), functions looked up by attribute (CPython's
# _ctypes resolves them with dlsym on the library's own handle, which the agent must see through).
# Started by fr-simjob with the launcher's environment (RANK, WORLD_SIZE, LOCAL_RANK,
# FRSIMJOB_BOARD, FRSIMJOB_RUN_DIR, FR_SIM_NVML) and the job's shape and faults as arguments.
# Results are not checked here (fr-simjob-rank does that); the ops, their order and the faults are
# the same, so the verdicts are too.
import ctypes
import mmap
import os
import signal
import struct
import sys
import time

NCCL_FLOAT32, NCCL_INT32 = 7, 2
NCCL_SUM, NCCL_MAX = 0, 2
TP_COUNT, PP_COUNT, DP_COUNT, LOSS_COUNT, BCAST_COUNT = 256, 256, 1024, 1, 16
EXIT_USAGE, EXIT_NCCL, EXIT_CUDA, EXIT_SETUP = 2, 4, 5, 6  # as rank_main.cpp
PROGRESS_MAGIC = 0x4252414F42534A46


NCCL_CONFIG_MAGIC, NCCL_CONFIG_UNDEF_INT = 0xCAFEBEEF, -2147483648


class NcclConfig(ctypes.Structure):
    # ncclConfig_t as nccl.h 2.28 lays it out; `size` tells a newer NCCL which fields it holds.
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("blocking", ctypes.c_int), ("cgaClusterSize", ctypes.c_int), ("minCTAs", ctypes.c_int),
                ("maxCTAs", ctypes.c_int), ("netName", ctypes.c_char_p), ("splitShare", ctypes.c_int),
                ("trafficClass", ctypes.c_int), ("commName", ctypes.c_char_p),
                ("collnetEnable", ctypes.c_int), ("CTAPolicy", ctypes.c_int), ("shrinkShare", ctypes.c_int),
                ("nvlsCTAs", ctypes.c_int), ("nChannelsPerNetPeer", ctypes.c_int),
                ("nvlinkCentricSched", ctypes.c_int)]


def die(code, msg):
    sys.stderr.write(f"fr-simjob-rank.py: {msg}\n")
    sys.stderr.flush()
    os._exit(code)


class Fault:
    def __init__(self, spec):
        self.rank = self.step = -1
        self.kind, self.comm, self.ms, self.xid = "", "dp", -1, -1
        self.peer, self.factor = -1, 0.0
        for item in spec.split(","):
            key, _, value = item.partition("=")
            if key in ("rank", "step", "ms", "xid", "peer"):
                setattr(self, key, int(value))
            elif key == "factor":
                self.factor = float(value)
            elif key in ("kind", "comm"):
                setattr(self, key, value)
            else:
                die(EXIT_USAGE, f"unknown fault key {key!r} in {spec!r}")


class Shape:
    def __init__(self):
        self.nodes = self.ranks_per_node = self.tp = self.pp = self.steps = 1

    def world(self):
        return self.nodes * self.ranks_per_node

    def dp(self):
        return self.world() // (self.tp * self.pp)


class Board:
    """This rank's slot of the launcher's progress board (progress.h): 64 bytes."""

    def __init__(self, rank):
        self.map = None
        path = os.environ.get("FRSIMJOB_BOARD")
        if not path:
            return
        with open(path, "r+b") as f:
            self.map = mmap.mmap(f.fileno(), 0)
        if struct.unpack_from("<Q", self.map, 0)[0] != PROGRESS_MAGIC:
            self.map = None
            return
        self.off = 64 + 64 * rank
        struct.pack_into("<i", self.map, self.off + 28, os.getpid())

    def add(self, field, n=1):
        if self.map is not None:
            at = self.off + field
            struct.pack_into("<Q", self.map, at, struct.unpack_from("<Q", self.map, at)[0] + n)

    def bump(self):
        self.add(0)

    def phase(self, p):
        if self.map is not None:
            struct.pack_into("<I", self.map, self.off + 24, p)


def hang_forever():
    # A host hang in Python: the rank sits in time.sleep, as a rank waiting on a lost peer does.
    while True:
        time.sleep(3600)


class Rank:
    def __init__(self, shape, faults, rank):
        self.shape, self.faults, self.rank = shape, faults, rank
        s = shape
        self.node = rank // s.ranks_per_node
        self.local_rank = rank % s.ranks_per_node
        self.tp_rank = rank % s.tp
        self.dp_rank = (rank // s.tp) % s.dp()
        self.stage = rank // (s.tp * s.dp())
        self.tp_color = rank // s.tp
        self.dp_color = self.stage * s.tp + self.tp_rank
        self.pp_color = self.dp_rank * s.tp + self.tp_rank
        self.board = Board(rank)
        self.cuda = ctypes.CDLL("libcuda.so.1")
        self.nccl = ctypes.CDLL("libnccl.so.2")

    def fault(self, step, kind, comm=None):
        for f in self.faults:
            if f.rank == self.rank and f.step == step and f.kind == kind and (comm is None or f.comm == comm):
                return f
        return None

    def cu(self, what, *args):
        rc = getattr(self.cuda, what)(*args)
        if rc != 0:
            die(EXIT_CUDA, f"{what} failed: {rc}")

    def nc(self, what, *args):
        rc = getattr(self.nccl, what)(*args)
        if rc != 0:
            die(EXIT_NCCL, f"{what} failed: {rc}")
        self.board.bump()

    def setup(self):
        self.cu("cuInit", 0)
        count = ctypes.c_int()
        self.cu("cuDeviceGetCount", ctypes.byref(count))
        dev = ctypes.c_int()
        self.cu("cuDeviceGet", ctypes.byref(dev), self.local_rank % max(count.value, 1))
        ctx = ctypes.c_void_p()
        self.cu("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        self.cu("cuCtxSetCurrent", ctx)
        self.stream = ctypes.c_void_p()
        self.cu("cuStreamCreate", ctypes.byref(self.stream), 1)  # CU_STREAM_NON_BLOCKING
        t = self.shape.tp
        sizes = [TP_COUNT, TP_COUNT * t, TP_COUNT * t, TP_COUNT, PP_COUNT, PP_COUNT, PP_COUNT,
                 PP_COUNT, DP_COUNT, LOSS_COUNT, BCAST_COUNT]
        total = (sum(sizes) + 64 * len(sizes)) * 4
        total = (total + 4095) & ~4095
        self.mem = mmap.mmap(-1, total)  # page-aligned host memory, registered with the device
        host = ctypes.addressof(ctypes.c_char.from_buffer(self.mem))
        self.cu("cuMemHostRegister", ctypes.c_void_p(host), ctypes.c_size_t(total), 2)  # DEVICEMAP
        dptr = ctypes.c_uint64()
        self.cu("cuMemHostGetDevicePointer", ctypes.byref(dptr), ctypes.c_void_p(host), 0)
        bufs, off = [], 0
        for n in sizes:
            bufs.append(ctypes.c_void_p(dptr.value + off * 4))
            off += n + 64
        (self.ag_send, self.ag_recv, self.rs_send, self.rs_recv, self.fwd_send, self.fwd_recv,
         self.bwd_send, self.bwd_recv, self.grad, self.loss, self.bcast) = bufs

    def unique_id(self):
        path = os.path.join(os.environ["FRSIMJOB_RUN_DIR"], "world.uid")
        uid = ctypes.create_string_buffer(128)
        if self.rank == 0:
            self.nc("ncclGetUniqueId", uid)
            tmp = f"{path}.tmp.{os.getpid()}"
            with open(tmp, "wb") as f:
                f.write(uid.raw)
            os.rename(tmp, path)
            return uid
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with open(path, "rb") as f:
                    data = f.read()
                if len(data) == 128:
                    ctypes.memmove(uid, data, 128)
                    return uid
            except FileNotFoundError:
                pass
            time.sleep(0.002)
        die(EXIT_SETUP, f"rank 0 never published the unique id in {path}")

    def config(self, name):
        # NCCL_CONFIG_INITIALIZER with commName set, as rank_main.cpp names its groups (and as
        # frameworks name their process groups), so verdicts read "tp2" here too.
        version = ctypes.c_int()
        if self.nccl.ncclGetVersion(ctypes.byref(version)) != 0:
            die(EXIT_NCCL, "ncclGetVersion failed")
        cfg = NcclConfig(ctypes.sizeof(NcclConfig), NCCL_CONFIG_MAGIC, version.value)
        for field, kind in NcclConfig._fields_[3:]:
            if kind is ctypes.c_int:
                setattr(cfg, field, NCCL_CONFIG_UNDEF_INT)
        cfg.commName = name.encode()
        return cfg

    def setup_comms(self):
        class UniqueId(ctypes.Structure):
            _fields_ = [("internal", ctypes.c_byte * 128)]

        uid = UniqueId.from_buffer_copy(self.unique_id().raw)
        self.world = ctypes.c_void_p()
        self.nc("ncclCommInitRank", ctypes.byref(self.world), self.shape.world(), uid, self.rank)
        self.tp, self.pp, self.dp = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        for comm, color, group in ((self.tp, self.tp_color, "tp"), (self.pp, self.pp_color, "pp"),
                                   (self.dp, self.dp_color, "dp")):
            cfg = self.config(f"{group}{color}")
            self.nc("ncclCommSplit", self.world, color, self.rank, ctypes.byref(comm), ctypes.byref(cfg))

    def before_op(self, step, comm):
        f = self.fault(step, "gpu-stall", comm)
        if f:
            rc = self.cuda.frsim_stream_stall(self.stream, -1 if f.ms < 0 else f.ms)
            if rc != 0:
                die(EXIT_CUDA, f"frsim_stream_stall failed: {rc}")
        return self.fault(step, "skip", comm) is not None

    def args(self, step, comm, count):
        dtype, op, root = NCCL_FLOAT32, NCCL_SUM, 0
        if self.fault(step, "mismatch-count", comm):
            count += 1
        if self.fault(step, "mismatch-dtype", comm):
            dtype = NCCL_INT32
        if self.fault(step, "mismatch-op", comm):
            op = NCCL_MAX
        return ctypes.c_size_t(count), dtype, op, root

    def report_xids(self, step):
        nvml = os.environ.get("FR_SIM_NVML")
        for f in self.faults:
            if nvml and f.rank == self.rank and f.step == step and f.xid >= 0:
                with open(nvml + ".events", "a") as ev:
                    ev.write(f"xid 0000:{(0x3b + self.local_rank) & 0xff:02x}:00.0 {f.xid}\n")

    def apply_fail_slow(self, step):
        # gpu-slow and link-slow multiply the emulation's pace (sim/include/fr_sim_nccl.h), as
        # the C++ ranks do: the link on every collective communicator holding both ends.
        for f in self.faults:
            if f.rank != self.rank or step < f.step:
                continue
            if f.kind == "gpu-slow":
                self.nccl.frsim_gpu_slow(ctypes.c_double(f.factor))
            elif f.kind == "link-slow":
                s, p = self.shape, f.peer
                peer_tp_color, peer_tp_rank = p // s.tp, p % s.tp
                peer_dp_color = p // (s.tp * s.dp()) * s.tp + peer_tp_rank
                peer_dp_rank = (p // s.tp) % s.dp()
                for comm, same, rank in ((self.world, True, p),
                                         (self.tp, peer_tp_color == self.tp_color, peer_tp_rank),
                                         (self.dp, peer_dp_color == self.dp_color, peer_dp_rank)):
                    if same:
                        self.nccl.frsim_nccl_link_slow(comm, rank, ctypes.c_double(f.factor))

    def run_step(self, step):
        self.report_xids(step)
        if self.fault(step, "crash"):
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        if self.fault(step, "hang-host"):
            hang_forever()
        for f in self.faults:
            if f.rank == self.rank and f.kind == "slow" and step >= f.step:
                time.sleep(f.ms / 1000)
        self.apply_fail_slow(step)
        s = self.stream
        if not self.before_op(step, "tp"):
            n, dt, _, _ = self.args(step, "tp", TP_COUNT)
            self.nc("ncclAllGather", self.ag_send, self.ag_recv, n, dt, self.tp, s)
        op = NCCL_MAX if self.fault(step, "mismatch-op", "tp") else NCCL_SUM
        self.nc("ncclReduceScatter", self.rs_send, self.rs_recv, ctypes.c_size_t(TP_COUNT), NCCL_FLOAT32, op, self.tp, s)
        if self.shape.pp > 1:
            stage, last = self.stage, self.shape.pp - 1
            skip_send = self.fault(step, "p2p-skip") is not None
            n = ctypes.c_size_t(PP_COUNT)
            if not self.before_op(step, "pp"):
                self.nc("ncclGroupStart")
                if stage > 0:
                    self.nc("ncclRecv", self.fwd_recv, n, NCCL_FLOAT32, stage - 1, self.pp, s)
                if stage < last and not (skip_send and stage < last):
                    self.nc("ncclSend", self.fwd_send, n, NCCL_FLOAT32, stage + 1, self.pp, s)
                self.nc("ncclGroupEnd")
            self.nc("ncclGroupStart")
            if stage < last:
                self.nc("ncclRecv", self.bwd_recv, n, NCCL_FLOAT32, stage + 1, self.pp, s)
            if stage > 0 and not (skip_send and stage == last):
                self.nc("ncclSend", self.bwd_send, n, NCCL_FLOAT32, stage - 1, self.pp, s)
            self.nc("ncclGroupEnd")
        if not self.before_op(step, "dp"):
            n, dt, op, _ = self.args(step, "dp", DP_COUNT)
            self.nc("ncclAllReduce", self.grad, self.grad, n, dt, op, self.dp, s)
        if not self.before_op(step, "world"):
            n, dt, op, _ = self.args(step, "world", LOSS_COUNT)
            self.nc("ncclAllReduce", self.loss, self.loss, n, dt, op, self.world, s)
        root = 1 if self.fault(step, "mismatch-root", "world") else 0
        self.nc("ncclBroadcast", self.bcast, self.bcast, ctypes.c_size_t(BCAST_COUNT), NCCL_FLOAT32, root, self.world, s)
        # The step ends where a real loop reads its loss: the host waits for the stream.
        self.cu("cuStreamSynchronize", s)
        self.board.add(8)
        self.board.bump()


def main(argv):
    shape, faults, i = Shape(), [], 1
    pacing = {"--step-ms": 0, "--step-jitter": 1, "--pause-step": -1, "--pause-ms": 0,
              "--pause-every": 0, "--seed": 0}
    names = {"--nodes": "nodes", "--ranks-per-node": "ranks_per_node", "--tp": "tp", "--pp": "pp",
             "--steps": "steps"}
    while i < len(argv):
        if i + 1 >= len(argv):
            die(EXIT_USAGE, f"missing value after {argv[i]}")
        key, value = argv[i], argv[i + 1]
        if key in names:
            setattr(shape, names[key], int(value))
        elif key in pacing:
            # Host work between steps (fr-simjob --step-ms, --pause); the Python ranks sleep the
            # plain step time and the pause, without the C++ ranks' jitter draw.
            pacing[key] = int(value)
        elif key == "--fault":
            faults.append(Fault(value))
        else:
            die(EXIT_USAGE, f"unknown option {key}")
        i += 2
    rank = int(os.environ.get("RANK", "-1"))
    if rank < 0 or rank >= shape.world() or int(os.environ.get("WORLD_SIZE", "-1")) != shape.world():
        die(EXIT_USAGE, "RANK/WORLD_SIZE missing or not matching the job shape")
    r = Rank(shape, faults, rank)
    r.board.phase(1)
    r.setup()
    r.setup_comms()
    r.board.phase(2)
    for step in range(shape.steps):
        first, every = pacing["--pause-step"], pacing["--pause-every"]
        pausing = first >= 0 and (step == first or (every > 0 and step > first and (step - first) % every == 0))
        pause = pacing["--pause-ms"] if pausing else 0
        if pacing["--step-ms"] + pause > 0:
            time.sleep((pacing["--step-ms"] + pause) / 1000.0)
        r.run_step(step)
    for comm in (r.dp, r.pp, r.tp, r.world):
        r.nc("ncclCommDestroy", comm)
    r.board.phase(3)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
