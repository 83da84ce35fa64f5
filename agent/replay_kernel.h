// The kernel a CUDA graph holding NCCL work runs at the start of each replay, as PTX text the
// driver compiles (cuModuleLoadData) for whatever GPU the process runs on. It is captured once,
// before the graph's first NCCL op, so every replay
//  - adds one to the graph's replay counter in the flight log (fr_graph_entry.gpu_replays): a
//    plain increment, since the launches of one executable graph run one after another;
//  - resets this graph's positions (graph_started, graph_completed whose ordinal is this graph's)
//    in the communicator table to "no op reached", so the positions always belong to the replay
//    the counter names, however far the host has run ahead.
// Parameters: the counter's and the communicator table's device addresses (the host-registered
// log), the table's capacity (one thread per entry) and the graph's ordinal. Entry stride and the
// position offsets are fr_comm_entry's (256, 208, 216), pinned below. PTX ISA 6.0 and sm_50 keep
// it loadable by every driver and GPU that CUDA 13 supports (the driver JITs it upward).
#ifndef FR_AGENT_REPLAY_KERNEL_H_
#define FR_AGENT_REPLAY_KERNEL_H_

#include <stddef.h>

#include "fr/flight_log.h"

namespace fr::agent {

inline constexpr const char kReplayKernelName[] = "fr_graph_replay";
inline constexpr unsigned kReplayKernelBlock = 128;  // threads per block

static_assert(sizeof(fr_comm_entry) == 256 && offsetof(fr_comm_entry, graph_started) == 208 &&
                  offsetof(fr_comm_entry, graph_completed) == 216,
              "the PTX below hard-codes these");

inline constexpr const char kReplayKernelPtx[] = R"PTX(
.version 6.0
.target sm_50
.address_size 64

.visible .entry fr_graph_replay(
	.param .u64 counter,
	.param .u64 comms,
	.param .u32 n_comms,
	.param .u32 ordinal
)
{
	.reg .pred %p<4>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<12>;

	ld.param.u64 %rd1, [counter];
	ld.param.u64 %rd2, [comms];
	ld.param.u32 %r1, [n_comms];
	ld.param.u32 %r2, [ordinal];
	mov.u32 %r3, %ctaid.x;
	mov.u32 %r4, %ntid.x;
	mov.u32 %r5, %tid.x;
	mad.lo.u32 %r6, %r3, %r4, %r5;
	setp.ge.u32 %p1, %r6, %r1;
	@%p1 bra COUNT;
	cvta.to.global.u64 %rd3, %rd2;
	mul.wide.u32 %rd4, %r6, 256;
	add.u64 %rd5, %rd3, %rd4;
	cvt.u64.u32 %rd6, %r2;
	shl.b64 %rd6, %rd6, 32;
	ld.volatile.global.u64 %rd7, [%rd5+216];
	shr.u64 %rd8, %rd7, 32;
	cvt.u32.u64 %r7, %rd8;
	setp.ne.u32 %p2, %r7, %r2;
	@%p2 bra STARTED;
	st.volatile.global.u64 [%rd5+216], %rd6;
STARTED:
	ld.volatile.global.u64 %rd7, [%rd5+208];
	shr.u64 %rd8, %rd7, 32;
	cvt.u32.u64 %r7, %rd8;
	setp.ne.u32 %p3, %r7, %r2;
	@%p3 bra COUNT;
	st.volatile.global.u64 [%rd5+208], %rd6;
COUNT:
	setp.ne.u32 %p1, %r6, 0;
	@%p1 bra DONE;
	cvta.to.global.u64 %rd9, %rd1;
	ld.volatile.global.u64 %rd10, [%rd9];
	add.u64 %rd10, %rd10, 1;
	st.volatile.global.u64 [%rd9], %rd10;
DONE:
	membar.sys;
	ret;
}
)PTX";

}  // namespace fr::agent

#endif  // FR_AGENT_REPLAY_KERNEL_H_
