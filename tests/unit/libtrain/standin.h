// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
/* What the stand-in CUDA runtime (standin_cudart.c, libcudart.so.13) offers the stand-in NCCL
 * (standin_nccl.c, libnccl.so.2) and the tests, beside the CUDA API: work queued on a stream, a
 * simulated kernel, and the counters a test reads. Host memory is device memory. */
#ifndef SLIPWAY_TESTS_STANDIN_H
#define SLIPWAY_TESTS_STANDIN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct standin_stream;

/* Queues fn(arg) on STREAM (NULL: the default stream): the stream's thread runs it after
 * everything queued before, and the work after it waits until it returns. 0 on success. */
int standin_stream_enqueue(struct standin_stream* stream, void (*fn)(void* arg), void* arg);

/* A kernel on STREAM: it takes DELAY_MS milliseconds, then writes BYTES of SRC (read when it runs,
 * not when queued) to DST. BYTES 0: only the delay. Not counted as a copy. 0 on success. */
int standin_kernel(void* stream, unsigned delay_ms, void* dst, const void* src, size_t bytes);

/* The counters, by name: "memcpy_htoh", "memcpy_htod", "memcpy_dtoh", "memcpy_dtod" (cudaMemcpy and
 * cudaMemcpyAsync by the direction they copy in, cudaMemcpyDefault resolved by the pointers),
 * "stream_synchronize", "device_synchronize", "event_synchronize" (the calls that block the
 * host). -1 for a name it does not know. */
long standin_counter(const char* name);
void standin_reset_counters(void);

#ifdef __cplusplus
}
#endif

#endif
