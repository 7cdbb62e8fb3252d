// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
/* Stand-in for the CUDA runtime (libcudart.so.13) in libtrain's tests without a GPU, loaded in its
 * place through LD_LIBRARY_PATH or linked as it (its soname and symbol version). Host memory is
 * device memory, and it orders work as a GPU does:
 *
 * - STANDIN_CUDA_DEVICES (default 1) devices, PCI bus id 0000:<device>:00.0.
 * - A stream is a queue of work that a thread of its own runs in order: copies, memsets, host
 *   functions, kernels (standin_kernel: a delay, then a write), NCCL's collectives
 *   (standin_nccl.c) and event records and waits. The NULL stream, cudaStreamLegacy and
 *   cudaStreamPerThread are one more stream, without the legacy stream's implicit
 *   synchronization with the others.
 * - An event is a point in a stream: recorded, it completes once the stream's work before it
 *   did; cudaStreamWaitEvent makes a stream wait for it without blocking the host; an event never
 *   recorded is complete, as in CUDA.
 * - Counters (standin.h): copies by direction, and each call that blocks the host
 *   (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, and cudaMemcpy and
 *   cudaMemset, which synchronize as CUDA's do). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "standin.h"

enum {
  kSuccess = 0,
  kInvalidValue = 1,
  kMemoryAllocation = 2,
  kInvalidDevice = 101,
  kInvalidResourceHandle = 400,
  kNotReady = 600,
};
enum { kHostToHost = 0, kHostToDevice = 1, kDeviceToHost = 2, kDeviceToDevice = 3, kDefault = 4 };

/* ---------------------------------------------------------------- counters */

enum { kCopyHH, kCopyHD, kCopyDH, kCopyDD, kStreamSync, kDeviceSync, kEventSync, kCounters };
static const char* const counter_names[kCounters] = {
    "memcpy_htoh", "memcpy_htod", "memcpy_dtoh", "memcpy_dtod",
    "stream_synchronize", "device_synchronize", "event_synchronize"};
static long counters[kCounters];

static void count(int which) { __atomic_add_fetch(&counters[which], 1, __ATOMIC_RELAXED); }

long standin_counter(const char* name) {
  for (int i = 0; i < kCounters; ++i)
    if (strcmp(name, counter_names[i]) == 0) return __atomic_load_n(&counters[i], __ATOMIC_RELAXED);
  return -1;
}

void standin_reset_counters(void) {
  for (int i = 0; i < kCounters; ++i) __atomic_store_n(&counters[i], 0, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- devices */

static __thread int current_device;

static int device_count(void) {
  const char* v = getenv("STANDIN_CUDA_DEVICES");
  return v ? atoi(v) : 1;
}

int cudaGetDeviceCount(int* n) {
  *n = device_count();
  return kSuccess;
}
int cudaSetDevice(int d) {
  if (d < 0 || d >= device_count()) return kInvalidDevice;
  current_device = d;
  return kSuccess;
}
int cudaGetDevice(int* d) {
  *d = current_device;
  return kSuccess;
}
int cudaDeviceGetPCIBusId(char* bus, int len, int d) {
  if (d < 0 || d >= device_count()) return kInvalidDevice;
  snprintf(bus, (size_t)len, "0000:%02x:00.0", d);
  return kSuccess;
}
const char* cudaGetErrorString(int rc) {
  switch (rc) {
    case kSuccess: return "no error";
    case kInvalidValue: return "invalid argument";
    case kMemoryAllocation: return "out of memory";
    case kInvalidDevice: return "invalid device ordinal";
    case kInvalidResourceHandle: return "invalid resource handle";
    case kNotReady: return "device not ready";
    default: return "stand-in CUDA error";
  }
}
const char* cudaGetErrorName(int rc) {
  switch (rc) {
    case kSuccess: return "cudaSuccess";
    case kInvalidValue: return "cudaErrorInvalidValue";
    case kMemoryAllocation: return "cudaErrorMemoryAllocation";
    case kInvalidDevice: return "cudaErrorInvalidDevice";
    case kInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case kNotReady: return "cudaErrorNotReady";
    default: return "cudaErrorUnknown";
  }
}
int cudaGetLastError(void) { return kSuccess; }
int cudaPeekAtLastError(void) { return kSuccess; }

/* ---------------------------------------------------------------- streams */

struct task {
  void (*fn)(void* arg);
  void* arg;
  struct task* next;
};

struct standin_stream {
  pthread_mutex_t mu;
  pthread_cond_t cv;       /* work queued, work done, stopping */
  pthread_t thread;
  struct task *head, *tail;
  unsigned long queued;    /* tasks ever queued; a task's number is queued after its enqueue */
  unsigned long done;      /* tasks run to the end, in order */
  int stopping;
  struct standin_stream* next_stream;  /* every stream ever made (destroyed ones are kept: a
                                          wait or event may still name them) */
};

static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;
static struct standin_stream* streams;
static struct standin_stream* default_stream;

static void* stream_main(void* p) {
  struct standin_stream* s = p;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stopping) pthread_cond_wait(&s->cv, &s->mu);
    if (!s->head) break;
    struct task* t = s->head;
    pthread_mutex_unlock(&s->mu);
    t->fn(t->arg);
    pthread_mutex_lock(&s->mu);
    s->head = t->next;
    if (!s->head) s->tail = NULL;
    s->done++;
    free(t);
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static struct standin_stream* stream_new(void) {
  struct standin_stream* s = calloc(1, sizeof *s);
  if (!s) return NULL;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
    free(s);
    return NULL;
  }
  pthread_mutex_lock(&streams_mu);
  s->next_stream = streams;
  streams = s;
  pthread_mutex_unlock(&streams_mu);
  return s;
}

/* The stream a handle names: NULL, cudaStreamLegacy (1) and cudaStreamPerThread (2) are the
 * default stream. */
static struct standin_stream* resolve(void* handle) {
  if ((uintptr_t)handle > 2) return handle;
  pthread_mutex_lock(&streams_mu);
  if (!default_stream) {
    pthread_mutex_unlock(&streams_mu);
    struct standin_stream* s = stream_new();
    pthread_mutex_lock(&streams_mu);
    if (!default_stream) default_stream = s;  /* a racing second one stays idle in the list */
  }
  struct standin_stream* s = default_stream;
  pthread_mutex_unlock(&streams_mu);
  return s;
}

/* Appends T to S, whose lock the caller holds; returns its number (done reaches it when it ran). */
static unsigned long append_locked(struct standin_stream* s, struct task* t) {
  if (s->tail)
    s->tail->next = t;
  else
    s->head = t;
  s->tail = t;
  pthread_cond_broadcast(&s->cv);
  return ++s->queued;
}

/* Queues a task; its number in *number when given. */
static int enqueue(struct standin_stream* s, void (*fn)(void*), void* arg, unsigned long* number) {
  struct task* t = calloc(1, sizeof *t);
  if (!t) return kMemoryAllocation;
  t->fn = fn;
  t->arg = arg;
  pthread_mutex_lock(&s->mu);
  unsigned long n = append_locked(s, t);
  pthread_mutex_unlock(&s->mu);
  if (number) *number = n;
  return kSuccess;
}

int standin_stream_enqueue(struct standin_stream* stream, void (*fn)(void* arg), void* arg) {
  return enqueue(resolve(stream), fn, arg, NULL);
}

/* Blocks until S ran its task number N. */
static void wait_done(struct standin_stream* s, unsigned long n) {
  pthread_mutex_lock(&s->mu);
  while (s->done < n) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

static unsigned long queued_now(struct standin_stream* s) {
  pthread_mutex_lock(&s->mu);
  unsigned long n = s->queued;
  pthread_mutex_unlock(&s->mu);
  return n;
}

static int stream_idle(struct standin_stream* s) {
  pthread_mutex_lock(&s->mu);
  int idle = s->done == s->queued;
  pthread_mutex_unlock(&s->mu);
  return idle;
}

int cudaStreamCreate(struct standin_stream** s) {
  *s = stream_new();
  return *s ? kSuccess : kMemoryAllocation;
}
int cudaStreamCreateWithFlags(struct standin_stream** s, unsigned flags) {
  (void)flags;
  return cudaStreamCreate(s);
}
int cudaStreamCreateWithPriority(struct standin_stream** s, unsigned flags, int priority) {
  (void)priority;
  return cudaStreamCreateWithFlags(s, flags);
}
/* As in CUDA, returns at once; the work queued still runs. The stream stays in the list. */
int cudaStreamDestroy(struct standin_stream* s) {
  if ((uintptr_t)s <= 2) return kInvalidResourceHandle;
  pthread_mutex_lock(&s->mu);
  s->stopping = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_detach(s->thread);
  return kSuccess;
}
int cudaStreamQuery(void* handle) { return stream_idle(resolve(handle)) ? kSuccess : kNotReady; }
int cudaStreamSynchronize(void* handle) {
  count(kStreamSync);
  struct standin_stream* s = resolve(handle);
  wait_done(s, queued_now(s));
  return kSuccess;
}
int cudaDeviceSynchronize(void) {
  count(kDeviceSync);
  pthread_mutex_lock(&streams_mu);
  struct standin_stream* first = streams;
  pthread_mutex_unlock(&streams_mu);
  for (struct standin_stream* s = first; s; s = s->next_stream) wait_done(s, queued_now(s));
  return kSuccess;
}

typedef void (*host_fn)(void* data);
struct host_call {
  host_fn fn;
  void* data;
};
static void run_host_call(void* p) {
  struct host_call* c = p;
  c->fn(c->data);
  free(c);
}
int cudaLaunchHostFunc(void* handle, host_fn fn, void* data) {
  struct host_call* c = malloc(sizeof *c);
  if (!c) return kMemoryAllocation;
  c->fn = fn;
  c->data = data;
  return enqueue(resolve(handle), run_host_call, c, NULL);
}

/* ---------------------------------------------------------------- events */

struct event {
  pthread_mutex_t mu;
  struct standin_stream* stream;  /* of the last record; NULL: never recorded */
  unsigned long number;           /* that record's task number in it */
  unsigned long generation;       /* records so far: a record's stamp is kept only if it is the last */
  struct timespec when;           /* when the last record ran */
  int refs;                       /* the user's handle, and each record still queued */
};

struct record {
  struct event* e;
  unsigned long generation;
};

static void event_unref(struct event* e) {
  pthread_mutex_lock(&e->mu);
  int left = --e->refs;
  pthread_mutex_unlock(&e->mu);
  if (left == 0) {
    pthread_mutex_destroy(&e->mu);
    free(e);
  }
}

static void run_record(void* p) {
  struct record* r = p;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  pthread_mutex_lock(&r->e->mu);
  if (r->e->generation == r->generation) r->e->when = now;
  pthread_mutex_unlock(&r->e->mu);
  event_unref(r->e);
  free(r);
}

int cudaEventCreate(struct event** e) {
  *e = calloc(1, sizeof **e);
  if (!*e) return kMemoryAllocation;
  pthread_mutex_init(&(*e)->mu, NULL);
  (*e)->refs = 1;
  return kSuccess;
}
int cudaEventCreateWithFlags(struct event** e, unsigned flags) {
  (void)flags;
  return cudaEventCreate(e);
}
int cudaEventDestroy(struct event* e) {
  if (!e) return kInvalidResourceHandle;
  event_unref(e);
  return kSuccess;
}
int cudaEventRecord(struct event* e, void* handle) {
  if (!e) return kInvalidResourceHandle;
  struct standin_stream* s = resolve(handle);
  struct record* r = malloc(sizeof *r);
  if (!r) return kMemoryAllocation;
  /* The event's new place and the task are made under the stream's lock, so that no other
   * record or query sees one without the other. */
  pthread_mutex_lock(&e->mu);
  r->e = e;
  r->generation = ++e->generation;
  e->refs++;
  struct task* t = calloc(1, sizeof *t);
  if (!t) {
    e->refs--;
    pthread_mutex_unlock(&e->mu);
    free(r);
    return kMemoryAllocation;
  }
  t->fn = run_record;
  t->arg = r;
  pthread_mutex_lock(&s->mu);
  e->stream = s;
  e->number = append_locked(s, t);
  pthread_mutex_unlock(&s->mu);
  pthread_mutex_unlock(&e->mu);
  return kSuccess;
}
int cudaEventRecordWithFlags(struct event* e, void* handle, unsigned flags) {
  (void)flags;
  return cudaEventRecord(e, handle);
}

/* Where the event's last record is: its stream (NULL when never recorded) and task number. */
static struct standin_stream* event_point(struct event* e, unsigned long* number) {
  pthread_mutex_lock(&e->mu);
  struct standin_stream* s = e->stream;
  *number = e->number;
  pthread_mutex_unlock(&e->mu);
  return s;
}

int cudaEventQuery(struct event* e) {
  if (!e) return kInvalidResourceHandle;
  unsigned long n;
  struct standin_stream* s = event_point(e, &n);
  if (!s) return kSuccess;
  pthread_mutex_lock(&s->mu);
  int done = s->done >= n;
  pthread_mutex_unlock(&s->mu);
  return done ? kSuccess : kNotReady;
}
int cudaEventSynchronize(struct event* e) {
  if (!e) return kInvalidResourceHandle;
  count(kEventSync);
  unsigned long n;
  struct standin_stream* s = event_point(e, &n);
  if (s) wait_done(s, n);
  return kSuccess;
}
int cudaEventElapsedTime(float* ms, struct event* start, struct event* end) {
  if (!start || !end) return kInvalidResourceHandle;
  if (cudaEventQuery(start) != kSuccess || cudaEventQuery(end) != kSuccess) return kNotReady;
  unsigned long n;
  if (!event_point(start, &n) || !event_point(end, &n)) return kInvalidResourceHandle;
  pthread_mutex_lock(&start->mu);
  struct timespec a = start->when;
  pthread_mutex_unlock(&start->mu);
  pthread_mutex_lock(&end->mu);
  struct timespec b = end->when;
  pthread_mutex_unlock(&end->mu);
  *ms = (float)((double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6);
  return kSuccess;
}

/* The stream waits, on its own thread, until the event's last record (as of this call) ran. */
struct wait_point {
  struct standin_stream* s;
  unsigned long n;
};
static void run_wait(void* p) {
  struct wait_point* w = p;
  wait_done(w->s, w->n);
  free(w);
}
int cudaStreamWaitEvent(void* handle, struct event* e, unsigned flags) {
  (void)flags;
  if (!e) return kInvalidResourceHandle;
  unsigned long n;
  struct standin_stream* src = event_point(e, &n);
  if (!src) return kSuccess;  /* never recorded: nothing to wait for */
  struct wait_point* w = malloc(sizeof *w);
  if (!w) return kMemoryAllocation;
  w->s = src;
  w->n = n;
  return enqueue(resolve(handle), run_wait, w, NULL);
}

/* ---------------------------------------------------------------- memory */

/* Every live allocation of cudaMalloc, for cudaMemcpyDefault's directions. */
struct allocation {
  char* base;
  size_t size;
  struct allocation* next;
};
static pthread_mutex_t allocations_mu = PTHREAD_MUTEX_INITIALIZER;
static struct allocation* allocations;

static int on_device(const void* p) {
  int found = 0;
  pthread_mutex_lock(&allocations_mu);
  for (struct allocation* a = allocations; a && !found; a = a->next)
    found = (const char*)p >= a->base && (const char*)p < a->base + (a->size ? a->size : 1);
  pthread_mutex_unlock(&allocations_mu);
  return found;
}

int cudaMalloc(void** p, size_t size) {
  struct allocation* a = malloc(sizeof *a);
  void* mem = NULL;
  if (!a || posix_memalign(&mem, 256, size ? size : 1) != 0) {
    free(a);
    return kMemoryAllocation;
  }
  a->base = mem;
  a->size = size;
  pthread_mutex_lock(&allocations_mu);
  a->next = allocations;
  allocations = a;
  pthread_mutex_unlock(&allocations_mu);
  *p = mem;
  return kSuccess;
}
int cudaFree(void* p) {
  if (!p) return kSuccess;
  struct allocation* found = NULL;
  pthread_mutex_lock(&allocations_mu);
  for (struct allocation** a = &allocations; *a; a = &(*a)->next) {
    if ((*a)->base == p) {
      found = *a;
      *a = found->next;
      break;
    }
  }
  pthread_mutex_unlock(&allocations_mu);
  if (!found) return kInvalidValue;
  free(found->base);
  free(found);
  return kSuccess;
}
int cudaMallocHost(void** p, size_t size) {
  *p = malloc(size ? size : 1);
  return *p ? kSuccess : kMemoryAllocation;
}
int cudaHostAlloc(void** p, size_t size, unsigned flags) {
  (void)flags;
  return cudaMallocHost(p, size);
}
int cudaFreeHost(void* p) {
  free(p);
  return kSuccess;
}

static int copy_kind(const void* dst, const void* src, int kind) {
  if (kind == kDefault) kind = (on_device(src) ? 2 : 0) + (on_device(dst) ? 1 : 0);
  switch (kind) {
    case kHostToHost: return kCopyHH;
    case kHostToDevice: return kCopyHD;
    case kDeviceToHost: return kCopyDH;
    case kDeviceToDevice: return kCopyDD;
    default: return -1;
  }
}

struct copy {
  void* dst;
  const void* src;
  size_t bytes;
  int fill;  /* >= 0: a memset with this byte */
};
static void run_copy(void* p) {
  struct copy* c = p;
  if (c->fill >= 0)
    memset(c->dst, c->fill, c->bytes);
  else if (c->bytes)
    memmove(c->dst, c->src, c->bytes);
  free(c);
}
static int queue_copy(void* handle, void* dst, const void* src, size_t bytes, int fill, unsigned long* n) {
  struct copy* c = malloc(sizeof *c);
  if (!c) return kMemoryAllocation;
  *c = (struct copy){dst, src, bytes, fill};
  return enqueue(resolve(handle), run_copy, c, n);
}

int cudaMemcpyAsync(void* dst, const void* src, size_t bytes, int kind, void* handle) {
  int which = copy_kind(dst, src, kind);
  if (which < 0) return kInvalidValue;
  count(which);
  return queue_copy(handle, dst, src, bytes, -1, NULL);
}
/* Ordered after the default stream's work, and returns once done: it blocks the host, but is
 * counted as its copy only. */
int cudaMemcpy(void* dst, const void* src, size_t bytes, int kind) {
  int which = copy_kind(dst, src, kind);
  if (which < 0) return kInvalidValue;
  count(which);
  unsigned long n;
  int rc = queue_copy(NULL, dst, src, bytes, -1, &n);
  if (rc == kSuccess) wait_done(resolve(NULL), n);
  return rc;
}
int cudaMemsetAsync(void* dst, int value, size_t bytes, void* handle) {
  return queue_copy(handle, dst, NULL, bytes, value & 0xff, NULL);
}
int cudaMemset(void* dst, int value, size_t bytes) {
  unsigned long n;
  int rc = queue_copy(NULL, dst, NULL, bytes, value & 0xff, &n);
  if (rc == kSuccess) wait_done(resolve(NULL), n);
  return rc;
}

/* ---------------------------------------------------------------- simulated kernels */

struct kernel {
  unsigned delay_ms;
  void* dst;
  const void* src;
  size_t bytes;
};
static void run_kernel(void* p) {
  struct kernel* k = p;
  struct timespec d = {k->delay_ms / 1000, (long)(k->delay_ms % 1000) * 1000000L};
  while (nanosleep(&d, &d) != 0 && errno == EINTR) {
  }
  if (k->bytes) memmove(k->dst, k->src, k->bytes);
  free(k);
}
int standin_kernel(void* handle, unsigned delay_ms, void* dst, const void* src, size_t bytes) {
  struct kernel* k = malloc(sizeof *k);
  if (!k) return kMemoryAllocation;
  *k = (struct kernel){delay_ms, dst, src, bytes};
  return enqueue(resolve(handle), run_kernel, k, NULL);
}
