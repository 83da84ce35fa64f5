/*
 * The emulation-only C API of the CPU emulation of CUDA and NCCL (libcuda.so.1, libnccl.so.2 in
 * build/sim/lib). Jobs and tests call it to do what a real GPU program does with kernels: make a
 * stream busy (an emulated "kernel" is a host function run by the stream's worker thread, in
 * order with everything else queued on that stream), stall a stream on purpose, and pick the
 * emulated device of a rank process.
 *
 * Every function is exported by libcuda.so.1; none exists in the real driver, so a program that
 * uses this header runs only on the emulation. Return values are CUresult codes (0 = success).
 */
#ifndef FR_SIM_H_
#define FR_SIM_H_

#include <stdint.h>
#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An emulated kernel: fn(arg) runs on the stream's worker thread once every earlier piece of work
 * on the stream has finished; later work waits for it to return. fn may sleep or block. */
typedef void (*frsim_kernel_fn)(void* arg);
CUresult frsim_stream_launch(CUstream stream, frsim_kernel_fn fn, void* arg);

/* The same, and the stream owns arg: release(arg) runs once the work is done with it (after it
 * ran, or when the graph it was captured into is destroyed, or never when it is stalled forever).
 * A work item captured into a graph runs once per graph launch with the same arg. */
CUresult frsim_stream_launch_owned(CUstream stream, frsim_kernel_fn fn, void* arg,
                                   void (*release)(void*));

/* An emulated kernel that keeps the stream busy for ms milliseconds; ms < 0 stalls it forever
 * (the worker thread blocks until the process exits; nothing queued after it ever runs). */
CUresult frsim_stream_stall(CUstream stream, int ms);

/* An emulated kernel that blocks until *flag becomes nonzero (polled with backoff, so another
 * thread, or another process through shared memory, can release the stream). */
CUresult frsim_stream_stall_until(CUstream stream, const volatile uint32_t* flag);

/* Work queued on the stream and not yet finished (0 when idle). */
CUresult frsim_stream_pending(CUstream stream, uint64_t* pending);

/* Emulated devices visible to this process: CUDA_VISIBLE_DEVICES (a comma list of integers)
 * when set, else the one device named by FRSIM_DEVICE, else device 0. Ordinals count from 0 over
 * the visible list; frsim_physical_device maps an ordinal back to the listed number. */
int frsim_device_count(void);
int frsim_physical_device(int ordinal);

/* Makes the primary context of device `ordinal` current on the calling thread (what
 * cudaSetDevice does); frsim_current_device returns the current context's device, 0 if none. */
CUresult frsim_set_device(int ordinal);
int frsim_current_device(void);

/* The prefix of every POSIX shared-memory name libnccl.so.2 creates: FRSIM_SHM_PREFIX when set
 * (it must start with '/' and hold no other '/'), else "/frsim". Exported by libnccl.so.2. */
const char* frsim_shm_prefix(void);

#ifdef __cplusplus
}
#endif

#endif /* FR_SIM_H_ */
