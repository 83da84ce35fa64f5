// The wrappers of NCCL's collectives and point-to-point calls, the *Config collectives (NCCL
// 2.31+) among them: each one fills the op's arguments and hands the call to run_op (wrappers.h),
// which records it in place and places its GPU markers. The hottest path of the agent.
#include "wrappers.h"

using namespace fr::agent;

// ---- collectives -------------------------------------------------------------------------------

FR_API ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                  cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclAllReduce);
  OpArgs a = {FR_OP_ALLREDUCE, false, sendbuff, recvbuff, count, datatype, op, -1, comm, stream};
  return run_op(a, [=] { return real(sendbuff, recvbuff, count, datatype, op, comm, stream); });
}

FR_API ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclBroadcast);
  OpArgs a = {FR_OP_BROADCAST, false, sendbuff, recvbuff, count, datatype, -1, root, comm, stream};
  return run_op(a, [=] { return real(sendbuff, recvbuff, count, datatype, root, comm, stream); });
}

FR_API ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                              ncclComm_t comm, cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclBcast);
  OpArgs a = {FR_OP_BCAST, false, buff, buff, count, datatype, -1, root, comm, stream};
  return run_op(a, [=] { return real(buff, count, datatype, root, comm, stream); });
}

FR_API ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                               ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                               cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclReduce);
  OpArgs a = {FR_OP_REDUCE, false, sendbuff, recvbuff, count, datatype, op, root, comm, stream};
  return run_op(a,
                [=] { return real(sendbuff, recvbuff, count, datatype, op, root, comm, stream); });
}

FR_API ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                  ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclAllGather);
  OpArgs a = {FR_OP_ALLGATHER, false, sendbuff, recvbuff, sendcount,
              datatype,        -1,    -1,       comm,     stream};
  return run_op(a, [=] { return real(sendbuff, recvbuff, sendcount, datatype, comm, stream); });
}

FR_API ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclReduceScatter);
  OpArgs a = {
      FR_OP_REDUCESCATTER, false, sendbuff, recvbuff, recvcount, datatype, op, -1, comm, stream};
  return run_op(a, [=] { return real(sendbuff, recvbuff, recvcount, datatype, op, comm, stream); });
}

FR_API ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                 ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclAlltoAll);
  OpArgs a = {FR_OP_ALLTOALL, false, sendbuff, recvbuff, count, datatype, -1, -1, comm, stream};
  return run_op(a, [=] { return real(sendbuff, recvbuff, count, datatype, comm, stream); });
}

FR_API ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count,
                               ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclGather);
  OpArgs a = {FR_OP_GATHER, false, sendbuff, recvbuff, count, datatype, -1, root, comm, stream};
  return run_op(a, [=] { return real(sendbuff, recvbuff, count, datatype, root, comm, stream); });
}

FR_API ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                ncclDataType_t datatype, int root, ncclComm_t comm,
                                cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclScatter);
  OpArgs a = {FR_OP_SCATTER, false, sendbuff, recvbuff, count, datatype, -1, root, comm, stream};
  return run_op(a, [=] { return real(sendbuff, recvbuff, count, datatype, root, comm, stream); });
}

FR_API ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                             ncclComm_t comm, cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclSend);
  OpArgs a = {FR_OP_SEND, true, sendbuff, nullptr, count, datatype, -1, peer, comm, stream};
  return run_op(a, [=] { return real(sendbuff, count, datatype, peer, comm, stream); });
}

FR_API ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                             ncclComm_t comm, cudaStream_t stream) {
  FR_REAL_OR_FAIL(ncclRecv);
  OpArgs a = {FR_OP_RECV, true, nullptr, recvbuff, count, datatype, -1, peer, comm, stream};
  return run_op(a, [=] { return real(recvbuff, count, datatype, peer, comm, stream); });
}

// ---- collectives with a per-call config (NCCL 2.31+): recorded exactly as their plain forms --------

FR_API ncclResult_t ncclAllReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                                        ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                        cudaStream_t stream, const ncclCollConfig_t* config) {
  FR_REAL_OR_FAIL(ncclAllReduceConfig);
  OpArgs a = {
      FR_OP_ALLREDUCE,     false, sendbuff, recvbuff, count, datatype, op, -1, comm, stream, 0,
      FR_REC_F_COLL_CONFIG};
  return run_op(
      a, [=] { return real(sendbuff, recvbuff, count, datatype, op, comm, stream, config); });
}

FR_API ncclResult_t ncclBroadcastConfig(const void* sendbuff, void* recvbuff, size_t count,
                                        ncclDataType_t datatype, int root, ncclComm_t comm,
                                        cudaStream_t stream, const ncclCollConfig_t* config) {
  FR_REAL_OR_FAIL(ncclBroadcastConfig);
  OpArgs a = {
      FR_OP_BROADCAST,     false, sendbuff, recvbuff, count, datatype, -1, root, comm, stream, 0,
      FR_REC_F_COLL_CONFIG};
  return run_op(
      a, [=] { return real(sendbuff, recvbuff, count, datatype, root, comm, stream, config); });
}

FR_API ncclResult_t ncclReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, ncclRedOp_t op, int root,
                                     ncclComm_t comm, cudaStream_t stream,
                                     const ncclCollConfig_t* config) {
  FR_REAL_OR_FAIL(ncclReduceConfig);
  OpArgs a = {FR_OP_REDUCE, false, sendbuff, recvbuff, count, datatype,
              op,           root,  comm,     stream,   0,     FR_REC_F_COLL_CONFIG};
  return run_op(
      a, [=] { return real(sendbuff, recvbuff, count, datatype, op, root, comm, stream, config); });
}

FR_API ncclResult_t ncclAllGatherConfig(const void* sendbuff, void* recvbuff, size_t sendcount,
                                        ncclDataType_t datatype, ncclComm_t comm,
                                        cudaStream_t stream, const ncclCollConfig_t* config) {
  FR_REAL_OR_FAIL(ncclAllGatherConfig);
  OpArgs a = {
      FR_OP_ALLGATHER,     false, sendbuff, recvbuff, sendcount, datatype, -1, -1, comm, stream, 0,
      FR_REC_F_COLL_CONFIG};
  return run_op(
      a, [=] { return real(sendbuff, recvbuff, sendcount, datatype, comm, stream, config); });
}

FR_API ncclResult_t ncclReduceScatterConfig(const void* sendbuff, void* recvbuff, size_t recvcount,
                                            ncclDataType_t datatype, ncclRedOp_t op,
                                            ncclComm_t comm, cudaStream_t stream,
                                            const ncclCollConfig_t* config) {
  FR_REAL_OR_FAIL(ncclReduceScatterConfig);
  OpArgs a = {
      FR_OP_REDUCESCATTER, false, sendbuff, recvbuff, recvcount, datatype, op, -1, comm, stream, 0,
      FR_REC_F_COLL_CONFIG};
  return run_op(
      a, [=] { return real(sendbuff, recvbuff, recvcount, datatype, op, comm, stream, config); });
}

FR_API ncclResult_t ncclAlltoAllConfig(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclComm_t comm,
                                       cudaStream_t stream, const ncclCollConfig_t* config) {
  FR_REAL_OR_FAIL(ncclAlltoAllConfig);
  OpArgs a = {FR_OP_ALLTOALL, false,    sendbuff, recvbuff,
              count,          datatype, -1,       -1,
              comm,           stream,   0,        FR_REC_F_COLL_CONFIG};
  return run_op(a, [=] { return real(sendbuff, recvbuff, count, datatype, comm, stream, config); });
}

FR_API ncclResult_t ncclGatherConfig(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, int root, ncclComm_t comm,
                                     cudaStream_t stream, const ncclCollConfig_t* config) {
  FR_REAL_OR_FAIL(ncclGatherConfig);
  OpArgs a = {FR_OP_GATHER, false, sendbuff, recvbuff, count, datatype,
              -1,           root,  comm,     stream,   0,     FR_REC_F_COLL_CONFIG};
  return run_op(
      a, [=] { return real(sendbuff, recvbuff, count, datatype, root, comm, stream, config); });
}

FR_API ncclResult_t ncclScatterConfig(const void* sendbuff, void* recvbuff, size_t count,
                                      ncclDataType_t datatype, int root, ncclComm_t comm,
                                      cudaStream_t stream, const ncclCollConfig_t* config) {
  FR_REAL_OR_FAIL(ncclScatterConfig);
  OpArgs a = {FR_OP_SCATTER, false,    sendbuff, recvbuff,
              count,         datatype, -1,       root,
              comm,          stream,   0,        FR_REC_F_COLL_CONFIG};
  return run_op(
      a, [=] { return real(sendbuff, recvbuff, count, datatype, root, comm, stream, config); });
}
