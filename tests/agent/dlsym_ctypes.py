# vLLM/SGLang's pynccl shape: ctypes.CDLL("libnccl.so.2"), then functions by attribute (CPython's
# _ctypes looks them up with dlsym on the library's handle). Run with the agent preloaded; prints
# key=value lines for dlsym_test.cpp. argv[1]: the libnccl.so.2 to load.
import ctypes
import sys


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_byte * 128)]


nccl = ctypes.CDLL(sys.argv[1])
uid = UniqueId()
print(f"get_unique_id={nccl.ncclGetUniqueId(ctypes.byref(uid))}")
comm = ctypes.c_void_p()
print(f"init={nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0)}")
buf = (ctypes.c_float * 16)()
# ncclFloat32 = 7, ncclSum = 0, the default stream
print(f"all_reduce={nccl.ncclAllReduce(buf, buf, ctypes.c_size_t(16), 7, 0, comm, None)}")
print(f"destroy={nccl.ncclCommDestroy(comm)}")
# vLLM probes newer functions by attribute: the answer is the loaded NCCL's, agent or not.
print(f"has_query_properties={int(hasattr(nccl, 'ncclCommQueryProperties'))}")
print(f"has_all_reduce_config={int(hasattr(nccl, 'ncclAllReduceConfig'))}")
sys.stdout.flush()
