/*
 * The flight-log format: the one file layout shared by the agent (the writer), the node daemon,
 * snapshots, dump sets and the analyzer (the readers).
 *
 * A flight log is a single file (by default in /dev/shm): a header, a directory of its sections,
 * and the sections themselves, each a table of fixed-size entries (version 7 on):
 *
 *   [fr_log_header][fr_log_section x section_count, padded to 64 bytes]
 *   [fr_comm_entry x capacity][fr_record x capacity (the ring)]
 *   [fr_graph_entry x capacity][fr_record x capacity (captured ops)]
 *   [fr_chan_entry x capacity][fr_xfer_entry x capacity]
 *
 * Each row of the directory (fr_log_section) names one section's kind (FR_SECTION_LIST in
 * fr/flight_log_sections.h), where it lies, the size of its entries, how many it holds, how many
 * are in use and how many found no room. Readers find every section through its row and check
 * every row the same way; a new table is one more kind in that list. Versions 1 to 6 kept each
 * table's offset, capacity, count and dropped at fixed places in the header instead (the fields
 * marked "versions 1 to 6" below); readers of this version still read them there.
 *
 * The graph sections describe CUDA graphs that hold NCCL work: one entry per captured graph
 * (its replay counter is live) and, in the capture table, one record per NCCL op captured into a
 * graph, kept out of the ring so that thousands of replays never overwrite what a replay runs. A
 * replay is one ring record (FR_OP_GRAPH_LAUNCH); the graph itself writes its position into the
 * communicator entries (graph_started, graph_completed) through captured stream memory writes,
 * and (version 3 on) counts its replays on the GPU (fr_graph_entry.gpu_replays) with a small
 * captured kernel that also resets its positions, so the positions always belong to the replay
 * that counter names, even while the host has launched newer replays.
 *
 * The channel table (version 5 on) follows channel progress as NCCL's profiler plugin reports it.
 * The transfer table (version 4 on) holds NIXL one-sided transfers: one entry per transfer request
 * (nixlAgent::createXferReq or makeXferReq), its description under a sequence lock (local and
 * remote agent, READ or WRITE, bytes, descriptors, backend, notification) and its progress in live
 * words (state, last NIXL status, posts, times). Each NIXL call is also one ring record (op kind
 * NIXL, ops 64..79) whose aux is the entry's id, so the timeline shows transfers beside NCCL ops.
 *
 * There is exactly one writer per file (one process); readers live in other processes and never
 * trust the writer. Every record and every communicator entry is guarded by a sequence lock: the
 * writer makes the lock odd, writes, and makes it even again, so a reader that sees the same even
 * value before and after copying has a whole, untorn copy. Single-word live fields (progress
 * counters, states) are plain atomic words outside any lock. The GPU stream writes two of those
 * words per communicator itself (gpu_started, gpu_completed) through cuStreamWriteValue64 into the
 * host-registered mapping.
 *
 * A snapshot (dump file) is the same layout with FR_LOG_F_SNAPSHOT set, all locks even and the
 * per-record GPU state resolved, so one reader serves live logs and dumps alike.
 *
 * Byte order is the writer's (little-endian on every platform NCCL runs on). The layout is C so
 * that the agent needs no C++ runtime; everything here is fixed-size and trivially copyable.
 *
 * Compatibility rule: a reader accepts every version up to its own FR_LOG_VERSION. Newer versions
 * only append fields (the *_size fields in the header say how much each structure holds), so a
 * reader copies min(stored size, its own size) and zero-fills the rest. A log whose version is
 * newer than the reader's is refused with a clear error, never guessed at. A structure stored
 * smaller than the fields its version defines (FR_V<n>_*_BYTES below) is corrupt; fields its
 * version did not define read as zero, whatever the writer left in those bytes.
 * log/reader.cpp and log/sections.cpp implement the rule; tests/log/compat_test.cpp writes logs
 * at older, smaller and bigger layouts, and tests/log/sections_test.cpp logs of every version
 * (tests/log/legacy_layout.h lays out versions 1 to 6), to hold them to it.
 */
#ifndef FR_FLIGHT_LOG_H_
#define FR_FLIGHT_LOG_H_

#include <stddef.h>
#include <stdint.h>

#include "fr/seqlock.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FR_LOG_MAGIC 0x314F4C5448474C46ull /* "FLGHTLO1" read as little-endian bytes */
#define FR_LOG_VERSION 7u
#define FR_LOG_FILE_SUFFIX ".frlog"

#define FR_DEFAULT_RING_CAPACITY 2048u
#define FR_DEFAULT_COMM_CAPACITY 256u
#define FR_MAX_RING_CAPACITY (1u << 22)
#define FR_MAX_COMM_CAPACITY 65536u
#define FR_DEFAULT_GRAPH_CAPACITY 64u
#define FR_DEFAULT_CAPTURE_CAPACITY 1024u
#define FR_MAX_GRAPH_CAPACITY 65536u
#define FR_MAX_CAPTURE_CAPACITY (1u << 20)

#define FR_DEFAULT_CHAN_CAPACITY 1024u
#define FR_MAX_CHAN_CAPACITY 65536u
#define FR_DEFAULT_XFER_CAPACITY 256u
#define FR_MAX_XFER_CAPACITY (1u << 20)
#define FR_MAX_CHANNELS 64u /* NCCL's MAXCHANNELS: channel ids are below it */

#define FR_NAME_LEN 64
#define FR_SHRINK_EXCLUDED_MAX_RECORDS 512u /* CommShrinkExcluded records per shrink, at most */

/* ---------------------------------------------------------------------------------------------
 * Enumerations. Each comes from one X-macro list so that names and numbers cannot drift between
 * the writer and the readers. Numbers are part of the format: append only, never renumber.
 * ------------------------------------------------------------------------------------------- */

/* X(ENUM_SUFFIX, value, "name", kind) where kind is COLL, P2P, API or NIXL (a NIXL agent's call:
 * comm_id 0, aux = the transfer entry's id or 0, result = the nixl_status_t returned). */
#define FR_OP_LIST(X)                                         \
  X(NONE, 0, "none", API)                                     \
  X(ALLREDUCE, 1, "AllReduce", COLL)                          \
  X(BROADCAST, 2, "Broadcast", COLL)                          \
  X(BCAST, 3, "Bcast", COLL)                                  \
  X(REDUCE, 4, "Reduce", COLL)                                \
  X(ALLGATHER, 5, "AllGather", COLL)                          \
  X(REDUCESCATTER, 6, "ReduceScatter", COLL)                  \
  X(ALLTOALL, 7, "AlltoAll", COLL)                            \
  X(GATHER, 8, "Gather", COLL)                                \
  X(SCATTER, 9, "Scatter", COLL)                              \
  X(SEND, 10, "Send", P2P)                                    \
  X(RECV, 11, "Recv", P2P)                                    \
  X(PUT_SIGNAL, 12, "PutSignal", P2P)                         \
  X(SIGNAL, 13, "Signal", P2P)                                \
  X(WAIT_SIGNAL, 14, "WaitSignal", P2P)                       \
  X(GET_UNIQUE_ID, 32, "GetUniqueId", API)                    \
  X(COMM_INIT_RANK, 33, "CommInitRank", API)                  \
  X(COMM_INIT_RANK_CONFIG, 34, "CommInitRankConfig", API)     \
  X(COMM_INIT_ALL, 35, "CommInitAll", API)                    \
  X(COMM_INIT_RANK_SCALABLE, 36, "CommInitRankScalable", API) \
  X(COMM_SPLIT, 37, "CommSplit", API)                         \
  X(COMM_SHRINK, 38, "CommShrink", API)                       \
  X(COMM_GROW, 39, "CommGrow", API)                           \
  X(COMM_FINALIZE, 40, "CommFinalize", API)                   \
  X(COMM_DESTROY, 41, "CommDestroy", API)                     \
  X(COMM_ABORT, 42, "CommAbort", API)                         \
  X(COMM_REVOKE, 43, "CommRevoke", API)                       \
  X(COMM_SUSPEND, 44, "CommSuspend", API)                     \
  X(COMM_RESUME, 45, "CommResume", API)                       \
  X(COMM_GET_UNIQUE_ID, 46, "CommGetUniqueId", API)           \
  X(GROUP_START, 47, "GroupStart", API)                       \
  X(GROUP_END, 48, "GroupEnd", API)                           \
  X(GROUP_SIMULATE_END, 49, "GroupSimulateEnd", API)          \
  X(COMM_REGISTER, 50, "CommRegister", API)                   \
  X(COMM_DEREGISTER, 51, "CommDeregister", API)               \
  X(COMM_WINDOW_REGISTER, 52, "CommWindowRegister", API)      \
  X(COMM_WINDOW_DEREGISTER, 53, "CommWindowDeregister", API)  \
  X(MEM_ALLOC, 54, "MemAlloc", API)                           \
  X(MEM_FREE, 55, "MemFree", API)                             \
  X(REDOP_CREATE_PREMULSUM, 56, "RedOpCreatePreMulSum", API)  \
  X(REDOP_DESTROY, 57, "RedOpDestroy", API)                   \
  X(COMM_GET_ASYNC_ERROR, 58, "CommGetAsyncError", API)       \
  X(DEV_COMM_CREATE, 59, "DevCommCreate", API)                \
  X(DEV_COMM_DESTROY, 60, "DevCommDestroy", API)              \
  X(GRAPH_LAUNCH, 61, "GraphLaunch", API)                     \
  X(COMM_SHRINK_EXCLUDED, 62, "CommShrinkExcluded", API)      \
  X(NIXL_CREATE_AGENT, 64, "NixlCreateAgent", NIXL)           \
  X(NIXL_CREATE_XFER, 65, "NixlCreateXferReq", NIXL)          \
  X(NIXL_MAKE_XFER, 66, "NixlMakeXferReq", NIXL)              \
  X(NIXL_POST_XFER, 67, "NixlPostXferReq", NIXL)              \
  X(NIXL_XFER_STATUS, 68, "NixlXferStatus", NIXL)             \
  X(NIXL_RELEASE_XFER, 69, "NixlReleaseXferReq", NIXL)        \
  X(NIXL_GEN_NOTIF, 70, "NixlGenNotif", NIXL)                 \
  X(NIXL_GET_NOTIFS, 71, "NixlGetNotifs", NIXL)               \
  X(NIXL_REGISTER_MEM, 72, "NixlRegisterMem", NIXL)           \
  X(NIXL_LOAD_REMOTE_MD, 73, "NixlLoadRemoteMD", NIXL)        \
  X(NIXL_PREP_XFER_DLIST, 74, "NixlPrepXferDlist", NIXL)      \
  X(NIXL_CREATE_BACKEND, 75, "NixlCreateBackend", NIXL)

typedef enum fr_op {
#define FR_X_OP_ENUM(e, v, s, k) FR_OP_##e = v,
  FR_OP_LIST(FR_X_OP_ENUM)
#undef FR_X_OP_ENUM
} fr_op;

/* How a communicator came to be. */
#define FR_ORIGIN_LIST(X)                        \
  X(UNKNOWN, 0, "unknown")                       \
  X(INIT_RANK, 1, "init_rank")                   \
  X(INIT_RANK_CONFIG, 2, "init_rank_config")     \
  X(INIT_ALL, 3, "init_all")                     \
  X(INIT_RANK_SCALABLE, 4, "init_rank_scalable") \
  X(SPLIT, 5, "split")                           \
  X(SHRINK, 6, "shrink")                         \
  X(GROW, 7, "grow")

typedef enum fr_comm_origin {
#define FR_X_ORIGIN_ENUM(e, v, s) FR_ORIGIN_##e = v,
  FR_ORIGIN_LIST(FR_X_ORIGIN_ENUM)
#undef FR_X_ORIGIN_ENUM
} fr_comm_origin;

#define FR_COMM_STATE_LIST(X)        \
  X(INITIALIZING, 0, "initializing") \
  X(LIVE, 1, "live")                 \
  X(FINALIZED, 2, "finalized")       \
  X(DESTROYED, 3, "destroyed")       \
  X(ABORTED, 4, "aborted")           \
  X(REVOKED, 5, "revoked")           \
  X(SUSPENDED, 6, "suspended")       \
  X(FAILED, 7, "failed")

typedef enum fr_comm_state {
#define FR_X_STATE_ENUM(e, v, s) FR_COMM_##e = v,
  FR_COMM_STATE_LIST(FR_X_STATE_ENUM)
#undef FR_X_STATE_ENUM
} fr_comm_state;

/* Per-record GPU state, as stored in a record and as resolved by readers. */
#define FR_GPU_STATE_LIST(X) \
  X(NONE, 0, "none")         \
  X(ENQUEUED, 1, "enqueued") \
  X(STARTED, 2, "started")   \
  X(COMPLETED, 3, "completed")

typedef enum fr_gpu_state {
#define FR_X_GPU_ENUM(e, v, s) FR_GPU_##e = v,
  FR_GPU_STATE_LIST(FR_X_GPU_ENUM)
#undef FR_X_GPU_ENUM
} fr_gpu_state;

/* The driver call whose failure changed how GPU progress is tracked (fr_log_header.gpu_error_call):
 * no current context (tracking decided without one), the log's host registration or its device
 * address (no markers: events for every stream), a stream write (events for that stream), the
 * device saying it has no 64-bit stream memory operations (events for every stream). */
#define FR_GPU_CALL_LIST(X)                                      \
  X(NONE, 0, "none")                                             \
  X(CTX_GET_CURRENT, 1, "cuCtxGetCurrent")                       \
  X(MEM_HOST_REGISTER, 2, "cuMemHostRegister")                   \
  X(MEM_HOST_GET_DEVICE_POINTER, 3, "cuMemHostGetDevicePointer") \
  X(STREAM_WRITE_VALUE64, 4, "cuStreamWriteValue64")             \
  X(DEVICE_GET_ATTRIBUTE, 5, "cuDeviceGetAttribute(CAN_USE_64_BIT_STREAM_MEM_OPS)")

typedef enum fr_gpu_call {
#define FR_X_GPU_CALL_ENUM(e, v, s) FR_GPU_CALL_##e = v,
  FR_GPU_CALL_LIST(FR_X_GPU_CALL_ENUM)
#undef FR_X_GPU_CALL_ENUM
} fr_gpu_call;

/* What one channel slot (fr_chan_entry, version 5 on) follows: a GPU channel of the kernel, or
 * one proxy connection of a channel (send to or receive from one peer over the network). */
#define FR_CHAN_KIND_LIST(X) \
  X(KERNEL, 0, "kernel")     \
  X(SEND, 1, "send")         \
  X(RECV, 2, "recv")

typedef enum fr_chan_kind {
#define FR_X_CHAN_KIND_ENUM(e, v, s) FR_CHAN_##e = v,
  FR_CHAN_KIND_LIST(FR_X_CHAN_KIND_ENUM)
#undef FR_X_CHAN_KIND_ENUM
} fr_chan_kind;

/* The state of a slot's oldest unfinished proxy step, after NCCL's profiler state names (v5/v6:
 * ncclProfilerProxyStep*), or of a kernel channel. */
#define FR_CHAN_STATE_LIST(X)                                                                  \
  X(IDLE, 0, "idle")                       /* nothing in flight */                             \
  X(POSTED, 1, "posted")                   /* step started, no state recorded yet */           \
  X(SEND_GPU_WAIT, 2, "send_gpu_wait")     /* waiting for the GPU to produce the data */       \
  X(SEND_PEER_WAIT, 3, "send_peer_wait")   /* waiting for credit: the peer's buffer is full */ \
  X(SEND_WAIT, 4, "send_wait")             /* transmitted, waiting for the network */          \
  X(RECV_WAIT, 5, "recv_wait")             /* waiting for data from the peer */                \
  X(RECV_FLUSH_WAIT, 6, "recv_flush_wait") /* received, flushing to the GPU */                 \
  X(RECV_GPU_WAIT, 7, "recv_gpu_wait")     /* received, waiting for the GPU to consume it */   \
  X(DONE, 8, "done")                       /* every posted step finished */                    \
  X(RUNNING, 9, "running")                 /* kernel channel: started, not stopped */          \
  X(STOPPED, 10, "stopped")                /* kernel channel: finished its part */

typedef enum fr_chan_state {
#define FR_X_CHAN_STATE_ENUM(e, v, s) FR_CHANST_##e = v,
  FR_CHAN_STATE_LIST(FR_X_CHAN_STATE_ENUM)
#undef FR_X_CHAN_STATE_ENUM
} fr_chan_state;

/* A NIXL transfer's state (fr_xfer_entry.state). */
#define FR_XFER_STATE_LIST(X)      \
  X(CREATED, 0, "created")         \
  X(POSTED, 1, "posted")           \
  X(IN_PROGRESS, 2, "in_progress") \
  X(DONE, 3, "done")               \
  X(ERROR, 4, "error")             \
  X(RELEASED, 5, "released")

typedef enum fr_xfer_state {
#define FR_X_XFER_ENUM(e, v, s) FR_XFER_##e = v,
  FR_XFER_STATE_LIST(FR_X_XFER_ENUM)
#undef FR_X_XFER_ENUM
} fr_xfer_state;

/* fr_xfer_entry.op, as NIXL numbers it (nixl_xfer_op_t). */
#define FR_XFER_OP_LIST(X) \
  X(READ, 0, "READ")       \
  X(WRITE, 1, "WRITE")

typedef enum fr_xfer_op {
#define FR_X_XOP_ENUM(e, v, s) FR_XFER_OP_##e = v,
  FR_XFER_OP_LIST(FR_X_XOP_ENUM)
#undef FR_X_XOP_ENUM
} fr_xfer_op;

/* NIXL's status codes (nixl_status_t) that readers name; others print as numbers. */
#define FR_NIXL_IN_PROG 1
#define FR_NIXL_SUCCESS 0
#define FR_NIXL_ERR_REMOTE_DISCONNECT (-10)

/* The flag and field tables below are aligned by hand, offsets in one column. */
/* clang-format off */
/* fr_log_header.flags */
#define FR_LOG_F_SNAPSHOT 0x1u          /* a frozen copy (dump file), not a live log */
#define FR_LOG_F_GPU_MARKERS 0x2u       /* progress written by the stream (cuStreamWriteValue64) */
#define FR_LOG_F_GPU_EVENTS 0x4u        /* progress from events polled by the agent's thread */
#define FR_LOG_F_NO_GPU_TRACKING 0x8u   /* neither was available: GPU state is unknown */
#define FR_LOG_F_RANK_FROM_COMM 0x10u   /* global_rank/world_size learned from a communicator */
#define FR_LOG_F_DISABLED 0x20u         /* the writer stopped recording after an internal error */
#define FR_LOG_F_GRAPH_REPLAY_KERNEL 0x40u /* graphs count their replays on the GPU (gpu_replays) */
#define FR_LOG_F_GRAPH_REPLAY_HOST 0x80u   /* the replay kernel could not be loaded or launched:
                                              graph positions follow the host's launches */
#define FR_LOG_F_PROFILER 0x100u           /* NCCL loaded the agent as its profiler plugin */
#define FR_LOG_F_NIXL 0x200u               /* NIXL calls are recorded (the transfer table is in use) */
#define FR_LOG_F_NIXL_OFF 0x400u           /* the loaded NIXL differs from the one supported */
#define FR_LOG_F_SMALL_LOG 0x800u          /* no room for the configured log: a smaller one */

/* fr_comm_entry.flags */
#define FR_COMM_F_NONBLOCKING 0x1u
#define FR_COMM_F_ID_FROM_UNIQUE_ID 0x2u
#define FR_COMM_F_ID_DERIVED 0x4u       /* split/shrink/grow: from (parent, counter, color/list) */

/* fr_record.flags */
#define FR_REC_F_IN_GROUP 0x1u          /* issued between GroupStart and GroupEnd */
#define FR_REC_F_CAPTURED 0x2u          /* captured into a CUDA graph: never counted in flight */
#define FR_REC_F_NONBLOCKING 0x4u       /* on a nonblocking communicator */
#define FR_REC_F_NEVER_LAUNCHED 0x8u    /* its group ended with GroupSimulateEnd, or the call failed */
#define FR_REC_F_LAUNCHED 0x10u         /* the op was handed to the GPU (its group ended) */
#define FR_REC_F_IN_CALL 0x20u          /* the host call has not returned yet */
#define FR_REC_F_GPU_UNTRACKED 0x40u    /* no marker or event could be placed for it */
#define FR_REC_F_COLL_CONFIG 0x80u      /* issued through the per-call-config form (ncclAllReduceConfig...) */
#define FR_REC_F_GPU_POSITION 0x100u    /* captured: the graph writes its position around this op */

/* fr_graph_entry.flags */
#define FR_GRAPH_F_OPS_DROPPED 0x1u     /* some captured ops did not fit in the capture table */
#define FR_GRAPH_F_GPU_POSITION 0x2u    /* the graph writes its position (every op it holds) */
#define FR_GRAPH_F_GPU_REPLAYS 0x4u     /* the graph counts its replays on the GPU (gpu_replays) and
                                           resets its positions there; the host does not */

/* fr_xfer_entry.flags */
#define FR_XFER_F_NOTIF 0x1u            /* the transfer carries a notification (notif holds its start) */
#define FR_XFER_F_NOTIF_CUT 0x2u        /* the notification was longer than notif */
#define FR_XFER_F_PREPPED 0x4u          /* made by makeXferReq from prepared descriptor lists */
#define FR_XFER_F_BYTES_UNKNOWN 0x8u    /* the descriptors' lengths could not be read */

/* A graph position, as the graph writes it into fr_comm_entry.graph_started/graph_completed:
 * the graph's ordinal in the process (fr_graph_entry.ordinal) and the captured op's 1-based index
 * in the graph (0: the graph started, no op of this communicator reached yet). */
#define FR_GRAPH_POS(ordinal, k) (((uint64_t)(uint32_t)(ordinal) << 32) | (uint32_t)(k))
#define FR_GRAPH_POS_ORDINAL(pos) ((uint32_t)((pos) >> 32))
#define FR_GRAPH_POS_OP(pos) ((uint32_t)((pos)&0xffffffffu))

/* Signals (PutSignal, Signal, WaitSignal) keep the signal index and context in fr_record.aux. */
#define FR_SIGNAL_AUX(sig_idx, ctx) (((uint64_t)(uint32_t)(ctx) << 32) | (uint32_t)(sig_idx))
#define FR_SIGNAL_AUX_SIG_IDX(aux) ((int32_t)(uint32_t)((aux) & 0xffffffffu))
#define FR_SIGNAL_AUX_CTX(aux) ((int32_t)(uint32_t)((aux) >> 32))

#define FR_RESULT_PENDING (-1)          /* fr_record.result while the host call is running */

/* ---------------------------------------------------------------------------------------------
 * On-disk structures.
 * ------------------------------------------------------------------------------------------- */

typedef struct fr_log_header {
  uint64_t magic;           /*   0 FR_LOG_MAGIC */
  uint32_t version;         /*   8 FR_LOG_VERSION of the writer */
  uint32_t header_size;     /*  12 sizeof(fr_log_header) of the writer */
  /* Bytes 16..47, 112..119 and 336..423 held the tables' geometry and counts in versions 1 to 6
   * (marked v1-6); from version 7 on they are zero and the section directory holds them. */
  uint32_t comm_size;       /*  16 v1-6: sizeof(fr_comm_entry) of the writer */
  uint32_t record_size;     /*  20 v1-6: sizeof(fr_record) of the writer */
  uint32_t comm_capacity;   /*  24 v1-6: entries in the communicator table */
  uint32_t ring_capacity;   /*  28 v1-6: records in the ring */
  uint64_t comm_offset;     /*  32 v1-6: byte offset of the communicator table */
  uint64_t ring_offset;     /*  40 v1-6: byte offset of the ring */
  uint64_t file_size;       /*  48 total bytes */
  uint64_t create_ns;       /*  56 CLOCK_REALTIME when the log was made */
  uint64_t create_mono_ns;  /*  64 CLOCK_MONOTONIC at the same moment */
  int32_t pid;              /*  72 writer's pid (in its own pid namespace) */
  int32_t global_rank;      /*  76 -1 until known (atomic: may be learned later) */
  int32_t world_size;       /*  80 -1 until known (atomic) */
  int32_t local_rank;       /*  84 -1 when unknown */
  uint32_t flags;           /*  88 FR_LOG_F_* (atomic) */
  int32_t nccl_version;     /*  92 ncclGetVersion of the loaded library, 0 until known */
  /* The ring's count and dropped, in every version: the words every record updates stay on the
   * header's cache line with heartbeat_ns (the ring's directory row holds 0 in both). */
  uint64_t record_counter;  /*  96 records ever written = id of the next record (atomic) */
  uint64_t overwritten;     /* 104 records lost to ring wrap-around (atomic) */
  uint32_t comm_count;      /* 112 v1-6: communicator entries in use (atomic) */
  uint32_t comm_dropped;    /* 116 v1-6: communicators that did not fit in the table (atomic) */
  uint64_t heartbeat_ns;    /* 120 CLOCK_REALTIME of the writer's last record (atomic) */
  uint64_t snapshot_ns;     /* 128 snapshots: when the copy was taken; 0 in live logs */
  int32_t writer_alive;     /* 136 snapshots: 1/0 whether the writer lived then; -1 live log */
  uint32_t torn_skipped;    /* 140 snapshots: records refused as torn or stale while copying */
  char job_id[FR_NAME_LEN];   /* 144 FR_JOB_ID, TORCHELASTIC_RUN_ID or SLURM_JOB_ID */
  char hostname[FR_NAME_LEN]; /* 208 */
  char exe[FR_NAME_LEN];      /* 272 program name (basename of /proc/self/exe) */
  /* Versions 2 to 6; all zero in version 1 (no graph sections). */
  uint64_t graph_offset;      /* 336 byte offset of the graph table */
  uint32_t graph_capacity;    /* 344 entries in the graph table */
  uint32_t graph_size;        /* 348 sizeof(fr_graph_entry) of the writer */
  uint32_t graph_count;       /* 352 graph entries in use (atomic) */
  uint32_t graph_dropped;     /* 356 graphs that did not fit in the table (atomic) */
  uint64_t capture_offset;    /* 360 byte offset of the capture table (fr_record entries) */
  uint32_t capture_capacity;  /* 368 records in the capture table */
  uint32_t capture_count;     /* 372 capture records in use (atomic) */
  /* Versions 4 to 6: the NIXL transfer table; all zero before, and xfer_capacity 0 when absent. */
  uint64_t xfer_offset;       /* 376 byte offset of the transfer table */
  uint32_t xfer_capacity;     /* 384 entries in the transfer table */
  uint32_t xfer_size;         /* 388 sizeof(fr_xfer_entry) of the writer */
  uint32_t xfer_count;        /* 392 transfer entries ever taken (atomic) */
  uint32_t xfer_dropped;      /* 396 transfers that found no free entry (atomic) */
  /* Versions 5 and 6: channel progress from NCCL's profiler plugin interface; all zero before,
   * and chan_capacity 0 when the section is absent. */
  uint64_t chan_offset;       /* 400 byte offset of the channel table (fr_chan_entry entries) */
  uint32_t chan_capacity;     /* 408 entries in the channel table */
  uint32_t chan_size;         /* 412 sizeof(fr_chan_entry) of the writer */
  uint32_t chan_count;        /* 416 channel entries in use (atomic) */
  uint32_t chan_dropped;      /* 420 slots that did not fit in the table (atomic) */
  /* Version 6 on: written when a driver call failed and GPU progress is tracked differently for
   * it; all zero before, and when none failed. */
  int32_t gpu_error;          /* 424 CUresult of the last such failure, 0 none (atomic) */
  uint32_t gpu_error_call;    /* 428 fr_gpu_call: the call that failed (atomic) */
  uint32_t gpu_event_streams; /* 432 streams whose progress comes from events since their stream
                                     write failed; the others keep markers (atomic) */
  /* Version 7 on: the section directory (fr_log_section rows). */
  uint32_t section_count;     /* 436 rows in the directory */
  uint64_t section_offset;    /* 440 byte offset of the directory (after the header) */
  uint32_t section_size;      /* 448 sizeof(fr_log_section) of the writer */
  uint8_t reserved[60];       /* 452 zero */
} fr_log_header;              /* 512 */

typedef struct fr_comm_entry {
  /* Fixed fields, written once under `lock` when the communicator is registered. */
  uint64_t lock;            /*   0 sequence lock over bytes 8..143 */
  uint64_t id;              /*   8 communicator id (DESIGN.md "Identity") */
  uint64_t parent_id;       /*  16 0 when made by an init call */
  uint64_t handle;          /*  24 the ncclComm_t value in the writer process */
  uint64_t create_ns;       /*  32 CLOCK_REALTIME of the creating call */
  int64_t color;            /*  40 split color; shrink: hash of the exclusion list; else 0 */
  int32_t key;              /*  48 split key, else 0 */
  int32_t size;             /*  52 ranks in the communicator, -1 until known */
  int32_t rank;             /*  56 this process's rank in it, -1 until known */
  int32_t cuda_dev;         /*  60 CUDA device, -1 until known */
  uint32_t origin;          /*  64 fr_comm_origin */
  uint32_t flags;           /*  68 FR_COMM_F_* */
  uint64_t derive_index;    /*  72 split/shrink/grow: the parent's per-kind call counter */
  char name[FR_NAME_LEN];   /*  80 commName from the config, if any */
  /* Live fields: each one atomic word, written outside the lock. */
  uint32_t state;           /* 144 fr_comm_state */
  int32_t async_error;      /* 148 last async error the application was told of */
  uint64_t coll_seq;        /* 152 last collective sequence number issued (1-based) */
  uint64_t p2p_seq;         /* 160 last point-to-point sequence number issued (1-based) */
  uint64_t op_index;        /* 168 last op index handed to the GPU (1-based, both kinds) */
  uint64_t last_call_ns;    /* 176 CLOCK_REALTIME of the last call on this communicator */
  uint64_t reserved1;       /* 184 */
  /* Written by the GPU stream (or by the agent's event thread): own cache line. */
  uint64_t gpu_started;     /* 192 highest op index the stream has reached */
  uint64_t gpu_completed;   /* 200 highest op index the stream has finished */
  uint64_t graph_started;   /* 208 FR_GRAPH_POS of the last captured op a replay reached */
  uint64_t graph_completed; /* 216 FR_GRAPH_POS of the last captured op a replay finished */
  uint8_t reserved[32];     /* 224 zero */
} fr_comm_entry;            /* 256 */

typedef struct fr_record {
  uint64_t lock;            /*   0 sequence lock: 0 never written, odd while written */
  uint64_t id;              /*   8 record id: 0-based, per log, slot = id % ring_capacity */
  uint64_t comm_id;         /*  16 communicator the call is on (the new one for init calls) */
  uint64_t seq;             /*  24 collective or p2p sequence number on comm_id; 0 for API calls */
  uint64_t op_index;        /*  32 per-communicator GPU op index; 0 when not tracked */
  uint64_t count;           /*  40 element count (send count for AllGather); WaitSignal: the
                                   signals awaited (opCnt) */
  uint64_t stream;          /*  48 cudaStream_t */
  uint64_t group_id;        /*  56 0 outside groups; the same for every op of one group */
  uint64_t call_ns;         /*  64 CLOCK_REALTIME at entry */
  uint64_t duration_ns;     /*  72 host time spent in the call */
  uint64_t sendbuff;        /*  80 */
  uint64_t recvbuff;        /*  88 */
  uint32_t tid;             /*  96 calling thread (gettid) */
  uint16_t op;              /* 100 fr_op */
  uint8_t dtype;            /* 102 ncclDataType_t */
  uint8_t gpu_state;        /* 103 fr_gpu_state as last stored; readers resolve it further */
  int32_t redop;            /* 104 ncclRedOp_t; -1 when none */
  int32_t peer;             /* 108 root or peer rank in comm_id (signals: the rank signalled, or
                                   waited on); -1 when none */
  int32_t result;           /* 112 ncclResult_t, FR_RESULT_PENDING while in the call */
  uint32_t flags;           /* 116 FR_REC_F_* */
  uint64_t aux;             /* 120 split/shrink/grow: the new communicator's id; signals:
                                   FR_SIGNAL_AUX(signal index, context); captured ops and
                                   GraphLaunch: the graph's id; else 0 */
} fr_record;                /* 128 */
/* CommShrink: count = the shrunk size (0 when the parent's size was unknown), sendbuff and recvbuff
 * = the excluded parent ranks below 128 as a bitmap (bit r of sendbuff, bit r-64 of recvbuff); a
 * reader of an older writer finds zeros there: no exclusion known. Excluded ranks from 128 on
 * follow in CommShrinkExcluded records, one per block of 128 parent ranks that holds any: written
 * right after the CommShrink record by the same thread, same comm_id (the parent) and aux (the new
 * communicator), peer = the block's first rank (a multiple of 128), sendbuff and recvbuff = the
 * block's bitmap (bit r-peer of sendbuff, r-peer-64 of recvbuff), result 0. At most
 * FR_SHRINK_EXCLUDED_MAX_RECORDS of them (a quarter of the ring when it is smaller); a reader
 * finds them by aux, and the CommShrink's count tells it whether the list is whole.
 * Captured ops (FR_REC_F_CAPTURED) have seq 0 (a replay gives them their numbers) and op_index =
 * their 1-based position in the graph. A GraphLaunch record has seq = the replay number (1-based,
 * per graph), count = the captured ops the graph holds, op_index = the graph's ordinal, comm_id 0.
 * At each replay every communicator's coll_seq and p2p_seq advance by the graph's ops on it. */

/* One CUDA graph holding NCCL work (version 2 on). */
typedef struct fr_graph_entry {
  uint64_t lock;            /*   0 sequence lock over bytes 8..39 */
  uint64_t id;              /*   8 graph id: per process, never 0 (captured records' aux) */
  uint64_t capture_ns;      /*  16 CLOCK_REALTIME of the first captured NCCL op */
  uint64_t stream;          /*  24 the stream that was captured */
  uint32_t ordinal;         /*  32 1-based index of the graph in the process (FR_GRAPH_POS) */
  uint32_t reserved0;       /*  36 */
  /* Live fields: each one atomic word. */
  uint32_t n_ops;           /*  40 NCCL ops captured into the graph */
  uint32_t flags;           /*  44 FR_GRAPH_F_* */
  uint64_t replays;         /*  48 replays launched (successfully) */
  uint64_t last_launch_ns;  /*  56 CLOCK_REALTIME of the last launch */
  /* Version 3 on. Written by the graph itself (FR_GRAPH_F_GPU_REPLAYS), before its first NCCL op
   * of each replay: the replay that graph_started/graph_completed positions of this graph belong
   * to (1-based, as GraphLaunch's seq counts them); 0 before the first replay reached it. */
  uint64_t gpu_replays;     /*  64 */
  uint8_t reserved[56];     /*  72 zero */
} fr_graph_entry;           /* 128 */

/* One channel slot (version 5 on): a kernel channel, or one proxy connection of a channel, of one
 * communicator as NCCL's profiler plugin interface reports them (agent/profiler.cpp). A slot is
 * taken once per (profiler context, channel, kind, peer) and reused by every later op there: its
 * live words describe the op in flight now, or the last one. Steps count from 0 at each op. */
typedef struct fr_chan_entry {
  uint64_t lock;            /*   0 sequence lock over bytes 8..47 */
  uint64_t comm_hash;       /*   8 the communicator's id as NCCL gave it to the profiler init */
  uint64_t comm_id;         /*  16 fr communicator id when the agent could tell; else 0 */
  int32_t rank;             /*  24 this process's rank in the communicator */
  int32_t nranks;           /*  28 ranks in the communicator */
  int32_t peer;             /*  32 SEND/RECV: the remote rank; KERNEL: -1 */
  uint16_t channel;         /*  36 channel id (below FR_MAX_CHANNELS) */
  uint8_t kind;             /*  38 fr_chan_kind */
  uint8_t reserved0;        /*  39 */
  uint32_t ctx_ordinal;     /*  40 1-based: the profiler contexts of the process, in init order */
  uint32_t reserved1;       /*  44 */
  /* Live fields: each one atomic word, written by the thread that reports the events. */
  uint64_t op_seq;          /*  48 NCCL's sequence number of the op (per collective kind) */
  uint32_t op;              /*  56 fr_op of that op; FR_OP_NONE when unknown */
  uint32_t state;           /*  60 fr_chan_state of step `state_step` as last recorded */
  uint32_t nsteps;          /*  64 steps of the op on this connection (proxy op's nSteps) */
  uint32_t posted;          /*  68 steps started so far */
  uint32_t done;            /*  72 steps finished so far (in order: the oldest unfinished is `done`) */
  uint32_t state_step;      /*  76 the step `state` belongs to */
  uint64_t ops_started;     /*  80 ops (proxy ops, kernel channel runs) started on the slot */
  uint64_t ops_done;        /*  88 of those, finished */
  uint64_t bytes;           /*  96 bytes moved by the current op's steps (transSize) */
  uint64_t last_ns;         /* 104 CLOCK_REALTIME of the last change */
  uint64_t op_start_ns;     /* 112 CLOCK_REALTIME when the current op started */
  uint8_t reserved[8];      /* 120 zero */
} fr_chan_entry;            /* 128 */

/* One NIXL transfer request (version 4 on). An entry is taken when the request is made and kept
 * after it is released (state RELEASED) until a new request needs the room: entries in flight are
 * never reused. */
typedef struct fr_xfer_entry {
  /* Fixed fields, written under `lock` when the request is made (and again when a post changes
   * its notification). */
  uint64_t lock;             /*   0 sequence lock over bytes 8..239 */
  uint64_t id;               /*   8 transfer id: per process, never 0 (ring records' aux) */
  uint64_t handle;           /*  16 the nixlXferReqH* in the writer process */
  uint64_t create_ns;        /*  24 CLOCK_REALTIME of the creating call */
  uint64_t bytes;            /*  32 bytes moved by one post (the local descriptors' lengths) */
  uint32_t descs;            /*  40 descriptors on the local side */
  uint32_t op;               /*  44 fr_xfer_op */
  uint32_t flags;            /*  48 FR_XFER_F_* */
  uint32_t tid;              /*  52 the thread that made the request */
  uint64_t agent_handle;     /*  56 the nixlAgent* in the writer process */
  char local_agent[FR_NAME_LEN];  /*  64 the posting agent's name (NUL-terminated, cut to fit) */
  char remote_agent[FR_NAME_LEN]; /* 128 the remote agent's name */
  char backend[16];          /* 192 backend type ("UCX"), empty when unknown */
  char notif[32];            /* 208 the notification's first bytes (raw, NUL-padded) */
  /* Live fields: each one atomic word, written outside the lock. */
  uint32_t state;            /* 240 fr_xfer_state */
  int32_t status;            /* 244 last nixl_status_t returned for it (post or status call) */
  uint64_t posts;            /* 248 times posted */
  uint64_t post_ns;          /* 256 CLOCK_REALTIME of the last post */
  uint64_t status_ns;        /* 264 CLOCK_REALTIME of the last status call */
  uint64_t done_ns;          /* 272 when the last post reached done or error; 0 while in flight */
  uint64_t status_calls;     /* 280 status calls since the last post */
  /* GPU-side progress of a stream-ordered transfer (a stream write before and after it): the
   * post number the stream reached and finished. 0 when the transfer is host-driven. */
  uint64_t gpu_posted;       /* 288 */
  uint64_t gpu_done;         /* 296 */
  uint8_t reserved[16];      /* 304 zero */
} fr_xfer_entry;             /* 320 */
/* clang-format on */

#ifdef __cplusplus
#define FR_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define FR_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif
FR_STATIC_ASSERT(sizeof(fr_log_header) == 512, "fr_log_header is 512 bytes");
FR_STATIC_ASSERT(offsetof(fr_log_header, record_counter) == 96, "header layout");
FR_STATIC_ASSERT(offsetof(fr_log_header, job_id) == 144, "header layout");
FR_STATIC_ASSERT(sizeof(fr_comm_entry) == 256, "fr_comm_entry is 256 bytes");
FR_STATIC_ASSERT(offsetof(fr_comm_entry, state) == 144, "comm layout");
FR_STATIC_ASSERT(offsetof(fr_comm_entry, gpu_started) == 192, "comm layout");
FR_STATIC_ASSERT(sizeof(fr_record) == 128, "fr_record is 128 bytes");
FR_STATIC_ASSERT(offsetof(fr_log_header, graph_offset) == 336, "header layout");
FR_STATIC_ASSERT(offsetof(fr_comm_entry, graph_started) == 208, "comm layout");
FR_STATIC_ASSERT(sizeof(fr_graph_entry) == 128, "fr_graph_entry is 128 bytes");
FR_STATIC_ASSERT(offsetof(fr_graph_entry, gpu_replays) == 64, "graph layout");
FR_STATIC_ASSERT(offsetof(fr_graph_entry, n_ops) == 40, "graph layout");
FR_STATIC_ASSERT(offsetof(fr_record, tid) == 96, "record layout");
FR_STATIC_ASSERT(offsetof(fr_record, aux) == 120, "record layout");
FR_STATIC_ASSERT(offsetof(fr_log_header, chan_offset) == 400, "header layout");
FR_STATIC_ASSERT(offsetof(fr_log_header, xfer_offset) == 376, "header layout");
FR_STATIC_ASSERT(offsetof(fr_log_header, xfer_count) == 392, "header layout");
FR_STATIC_ASSERT(sizeof(fr_xfer_entry) == 320, "fr_xfer_entry is 320 bytes");
FR_STATIC_ASSERT(offsetof(fr_xfer_entry, local_agent) == 64, "xfer layout");
FR_STATIC_ASSERT(offsetof(fr_xfer_entry, state) == 240, "xfer layout");
FR_STATIC_ASSERT(offsetof(fr_xfer_entry, gpu_done) == 296, "xfer layout");
FR_STATIC_ASSERT(offsetof(fr_log_header, chan_count) == 416, "header layout");
FR_STATIC_ASSERT(offsetof(fr_log_header, chan_dropped) == 420, "header layout");
FR_STATIC_ASSERT(offsetof(fr_log_header, gpu_error) == 424, "header layout");
FR_STATIC_ASSERT(offsetof(fr_log_header, gpu_event_streams) == 432, "header layout");
FR_STATIC_ASSERT(sizeof(fr_chan_entry) == 128, "fr_chan_entry is 128 bytes");
FR_STATIC_ASSERT(offsetof(fr_log_header, section_offset) == 440, "header layout");
FR_STATIC_ASSERT(offsetof(fr_log_header, reserved) == 452, "header layout");
FR_STATIC_ASSERT(offsetof(fr_chan_entry, op_seq) == 48, "chan layout");
FR_STATIC_ASSERT(offsetof(fr_chan_entry, last_ns) == 104, "chan layout");

#include "fr/flight_log_sections.h"
#include "fr/flight_log_versions.h"

/* The typed sequence-lock reads and publishes of each entry (the protocol is fr/seqlock.h). */

/* Writer: publish a whole record into its ring slot (lock word excluded from `rec`). Returns 0 if
 * the slot was busy with another thread's write; the caller counts the record as lost. */
static inline int fr_record_publish(fr_record* slot, const fr_record* rec) {
  return fr_seq_publish((uint64_t*)slot, (const uint64_t*)rec, sizeof(fr_record) / 8 - 1);
}

/* Reader: copy a record out of a slot (fr_seq_read over the whole record). */
static inline int fr_record_read(const fr_record* slot, fr_record* out) {
  return fr_seq_read((const uint64_t*)slot, (uint64_t*)out, sizeof(fr_record) / 8 - 1);
}

/* The fixed part of a communicator entry (bytes 8..143) has the same protocol. */
#define FR_COMM_FIXED_WORDS ((offsetof(fr_comm_entry, state) - 8) / 8)

static inline int fr_comm_publish_fixed(fr_comm_entry* slot, const fr_comm_entry* c) {
  return fr_seq_publish((uint64_t*)slot, (const uint64_t*)c, FR_COMM_FIXED_WORDS);
}

/* Reader: the fixed part under the lock, then the live words one by one. */
static inline int fr_comm_read(const fr_comm_entry* slot, fr_comm_entry* out) {
  if (!fr_seq_read((const uint64_t*)slot, (uint64_t*)out, FR_COMM_FIXED_WORDS)) return 0;
  size_t live = (sizeof(fr_comm_entry) - offsetof(fr_comm_entry, state)) / 8;
  fr_copy_words_out((uint64_t*)&out->state, (const uint64_t*)&slot->state, live);
  return 1;
}

/* The fixed part of a graph entry (bytes 8..39) has the same protocol. */
#define FR_GRAPH_FIXED_WORDS ((offsetof(fr_graph_entry, n_ops) - 8) / 8)

static inline int fr_graph_publish_fixed(fr_graph_entry* slot, const fr_graph_entry* g) {
  return fr_seq_publish((uint64_t*)slot, (const uint64_t*)g, FR_GRAPH_FIXED_WORDS);
}

static inline int fr_graph_read(const fr_graph_entry* slot, fr_graph_entry* out) {
  if (!fr_seq_read((const uint64_t*)slot, (uint64_t*)out, FR_GRAPH_FIXED_WORDS)) return 0;
  size_t live = (sizeof(fr_graph_entry) - offsetof(fr_graph_entry, n_ops)) / 8;
  fr_copy_words_out((uint64_t*)&out->n_ops, (const uint64_t*)&slot->n_ops, live);
  return 1;
}

/* The fixed part of a channel entry (bytes 8..47) has the same protocol. */
#define FR_CHAN_FIXED_WORDS ((offsetof(fr_chan_entry, op_seq) - 8) / 8)

static inline int fr_chan_publish_fixed(fr_chan_entry* slot, const fr_chan_entry* e) {
  return fr_seq_publish((uint64_t*)slot, (const uint64_t*)e, FR_CHAN_FIXED_WORDS);
}

/* The fixed part of a transfer entry (bytes 8..239) has the same protocol. */
#define FR_XFER_FIXED_WORDS ((offsetof(fr_xfer_entry, state) - 8) / 8)

static inline int fr_xfer_publish_fixed(fr_xfer_entry* slot, const fr_xfer_entry* x) {
  return fr_seq_publish((uint64_t*)slot, (const uint64_t*)x, FR_XFER_FIXED_WORDS);
}

/* The GPU state a reader should report for a launched record, from its communicator's counters.
 * Captured ops keep their stored state: their progress is per replay (graph_started/completed). */
static inline fr_gpu_state fr_resolve_gpu_state(const fr_record* r, uint64_t gpu_started,
                                                uint64_t gpu_completed) {
  fr_gpu_state s = (fr_gpu_state)r->gpu_state;
  if (r->op_index != 0 && !(r->flags & FR_REC_F_CAPTURED)) {
    if (gpu_completed >= r->op_index) return FR_GPU_COMPLETED;
    if (gpu_started >= r->op_index && s < FR_GPU_STARTED) return FR_GPU_STARTED;
  }
  return s;
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FR_FLIGHT_LOG_H_ */
