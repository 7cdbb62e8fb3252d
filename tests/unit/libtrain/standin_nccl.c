// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
/* Stand-in for NCCL (libnccl.so.2) and the CUDA runtime (libcudart.so.13) in libtrain's NCCL tests
 * without a GPU: built twice from this file with the real sonames (and cudart's symbol version),
 * it is loaded in their place through LD_LIBRARY_PATH (libtrain's RUNPATH comes after it). It
 * answers the calls libtrain's NcclCommunicator makes, with host memory as "device" memory:
 *
 * - STANDIN_CUDA_DEVICES (default 1) devices, PCI bus id 0000:<device>:00.0.
 * - A communicator is a directory, STANDIN_NCCL_DIR/<unique id>; each rank writes its pid there at
 *   ncclCommInitRank. A collective writes the rank's input to <seq>.<rank> and is pending on the
 *   stream; cudaStreamQuery finishes it (float32/float64 sum, average, min, max) once the inputs it
 *   needs are there, and says cudaErrorNotReady until then.
 * - A peer that died (its pid is gone) is what NCCL reports as ncclRemoteError ("remote process
 *   exited") through ncclCommGetAsyncError; STANDIN_NCCL_ON_DEATH=hang reports nothing instead,
 *   as NCCL does on transports that never notice, so the caller's timeout must. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#ifdef STANDIN_CUDART
/* ---------------------------------------------------------------- libcudart.so.13 */
enum { kSuccess = 0, kInvalidDevice = 101, kNotReady = 600 };

struct stream;
int standin_stream_progress(struct stream* s); /* from libnccl.so.2: 1 when nothing is pending */

static int current_device;

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
  snprintf(bus, (size_t)len, "0000:%02x:00.0", d);
  return kSuccess;
}
const char* cudaGetErrorString(int rc) {
  return rc == kNotReady ? "device not ready" : rc == kInvalidDevice ? "invalid device ordinal" : "stand-in CUDA error";
}

/* A stream is owned by libnccl's half, which queues collectives on it. */
struct stream* standin_stream_new(void);
void standin_stream_free(struct stream* s);
int cudaStreamCreateWithFlags(struct stream** s, unsigned flags) {
  (void)flags;
  *s = standin_stream_new();
  return *s ? kSuccess : 2;
}
int cudaStreamDestroy(struct stream* s) {
  standin_stream_free(s);
  return kSuccess;
}
int cudaStreamQuery(struct stream* s) { return standin_stream_progress(s) ? kSuccess : kNotReady; }

#else
/* ---------------------------------------------------------------- libnccl.so.2 */
enum { ncclSuccess = 0, ncclSystemError = 2, ncclInvalidArgument = 4, ncclRemoteError = 6 };
enum { kSum = 0, kMax = 2, kMin = 3, kAvg = 4 };
enum { kFloat32 = 7, kFloat64 = 8 };
enum { kAllReduce, kBroadcast, kAllGather };

typedef struct {
  char internal[128];
} ncclUniqueId;

struct comm {
  char dir[4096];
  int rank, size;
  long seq;
};

struct op {
  struct comm* comm;
  int kind, dtype, redop, root;
  long seq;
  void* out;
  size_t count; /* elements per rank */
  struct op* next;
};

struct stream {
  struct op* head;
};

struct stream* standin_stream_new(void) { return calloc(1, sizeof(struct stream)); }
void standin_stream_free(struct stream* s) {
  while (s && s->head) {
    struct op* o = s->head;
    s->head = o->next;
    free(o);
  }
  free(s);
}

static size_t elem_size(int dtype) { return dtype == kFloat64 ? 8 : 4; }

static void part_path(const struct comm* c, long seq, int rank, char* out, size_t len) {
  snprintf(out, len, "%s/%ld.%d", c->dir, seq, rank);
}

/* Writes whole (a temporary name, then rename), so a reader sees all of it or nothing. */
static int write_part(const struct comm* c, long seq, const void* data, size_t bytes) {
  char path[4200], tmp[4300];
  part_path(c, seq, c->rank, path, sizeof path);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return -1;
  const char* p = data;
  while (bytes > 0) {
    ssize_t n = write(fd, p, bytes);
    if (n <= 0) {
      close(fd);
      return -1;
    }
    p += n;
    bytes -= (size_t)n;
  }
  close(fd);
  return rename(tmp, path);
}

/* Reads rank's part of collective seq into buf; 0 when it is not there yet. */
static int read_part(const struct comm* c, long seq, int rank, void* buf, size_t bytes) {
  char path[4200];
  part_path(c, seq, rank, path, sizeof path);
  FILE* f = fopen(path, "rb");
  if (!f) return 0;
  size_t got = bytes ? fread(buf, 1, bytes, f) : 0;
  fclose(f);
  return got == bytes;
}

static double load(const void* p, int dtype, size_t i) {
  return dtype == kFloat64 ? ((const double*)p)[i] : ((const float*)p)[i];
}
static void store(void* p, int dtype, size_t i, double v) {
  if (dtype == kFloat64)
    ((double*)p)[i] = v;
  else
    ((float*)p)[i] = (float)v;
}

/* Finishes op o if every input it needs is there: 1 when done. */
static int try_finish(struct op* o) {
  struct comm* c = o->comm;
  size_t bytes = o->count * elem_size(o->dtype);
  char* part = malloc(bytes ? bytes : 1);
  int done = 0;
  if (o->kind == kBroadcast) {
    done = read_part(c, o->seq, o->root, part, bytes);
    if (done) memcpy(o->out, part, bytes);
  } else if (o->kind == kAllGather) {
    done = 1;
    for (int r = 0; r < c->size && done; ++r) done = read_part(c, o->seq, r, part, bytes);
    for (int r = 0; r < c->size && done; ++r) {
      read_part(c, o->seq, r, part, bytes);
      memcpy((char*)o->out + (size_t)r * bytes, part, bytes);
    }
  } else {
    double* acc = calloc(o->count ? o->count : 1, sizeof(double));
    done = 1;
    for (int r = 0; r < c->size && done; ++r) {
      done = read_part(c, o->seq, r, part, bytes);
      for (size_t i = 0; done && i < o->count; ++i) {
        double v = load(part, o->dtype, i);
        if (r == 0 || o->redop == kSum || o->redop == kAvg)
          acc[i] = r == 0 ? v : acc[i] + v;
        else
          acc[i] = o->redop == kMax ? (v > acc[i] ? v : acc[i]) : (v < acc[i] ? v : acc[i]);
      }
    }
    for (size_t i = 0; done && i < o->count; ++i)
      store(o->out, o->dtype, i, o->redop == kAvg ? acc[i] / c->size : acc[i]);
    free(acc);
  }
  free(part);
  return done;
}

int standin_stream_progress(struct stream* s) {
  while (s->head && try_finish(s->head)) {
    struct op* o = s->head;
    s->head = o->next;
    free(o);
  }
  return s->head == NULL;
}

static int enqueue(struct stream* s, struct comm* c, int kind, const void* in, void* out, size_t count,
                   int dtype, int redop, int root) {
  if (!c || (dtype != kFloat32 && dtype != kFloat64)) return ncclInvalidArgument;
  struct op* o = calloc(1, sizeof *o);
  *o = (struct op){c, kind, dtype, redop, root, c->seq++, out, count, NULL};
  if ((kind != kBroadcast || c->rank == root) && write_part(c, o->seq, in, count * elem_size(dtype)) != 0) {
    free(o);
    return ncclSystemError;
  }
  struct op** tail = &s->head;
  while (*tail) tail = &(*tail)->next;
  *tail = o;
  return ncclSuccess;
}

int ncclGetUniqueId(ncclUniqueId* id) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "standin-%d-%ld%09ld", (int)getpid(), (long)t.tv_sec, t.tv_nsec);
  return ncclSuccess;
}

int ncclCommInitRank(struct comm** out, int size, ncclUniqueId id, int rank) {
  const char* base = getenv("STANDIN_NCCL_DIR");
  if (!base || rank < 0 || rank >= size || strncmp(id.internal, "standin-", 8) != 0) return ncclInvalidArgument;
  struct comm* c = calloc(1, sizeof *c);
  c->rank = rank;
  c->size = size;
  snprintf(c->dir, sizeof c->dir, "%s/%.100s", base, id.internal);
  if (mkdir(c->dir, 0700) != 0 && errno != EEXIST) {
    free(c);
    return ncclSystemError;
  }
  char path[4200], pid[32];
  snprintf(path, sizeof path, "%s/pid.%d", c->dir, rank);
  FILE* f = fopen(path, "w");
  if (!f) {
    free(c);
    return ncclSystemError;
  }
  snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  fputs(pid, f);
  fclose(f);
  *out = c;
  return ncclSuccess;
}

int ncclAllReduce(const void* in, void* out, size_t count, int dtype, int op, struct comm* c, struct stream* s) {
  return enqueue(s, c, kAllReduce, in, out, count, dtype, op, 0);
}
int ncclBroadcast(const void* in, void* out, size_t count, int dtype, int root, struct comm* c, struct stream* s) {
  return enqueue(s, c, kBroadcast, in, out, count, dtype, kSum, root);
}
int ncclAllGather(const void* in, void* out, size_t count, int dtype, struct comm* c, struct stream* s) {
  return enqueue(s, c, kAllGather, in, out, count, dtype, kSum, 0);
}

/* A pid that no longer runs, or a zombie nobody reaped yet (the test's ranks are siblings). */
static int is_dead(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(line, 1, sizeof line - 1, f);
  fclose(f);
  line[n] = 0;
  char* paren = strrchr(line, ')');
  return paren && (paren[1] == ' ') && (paren[2] == 'Z' || paren[2] == 'X');
}

/* ncclRemoteError once a peer's pid is gone, unless STANDIN_NCCL_ON_DEATH=hang. */
int ncclCommGetAsyncError(struct comm* c, int* err) {
  *err = ncclSuccess;
  const char* mode = getenv("STANDIN_NCCL_ON_DEATH");
  if (!c || (mode && strcmp(mode, "hang") == 0)) return ncclSuccess;
  for (int r = 0; r < c->size; ++r) {
    char path[4200];
    int pid = 0;
    snprintf(path, sizeof path, "%s/pid.%d", c->dir, r);
    FILE* f = fopen(path, "r");
    if (!f) continue;
    if (fscanf(f, "%d", &pid) == 1 && pid > 0 && is_dead(pid)) *err = ncclRemoteError;
    fclose(f);
  }
  return ncclSuccess;
}

int ncclCommAbort(struct comm* c) {
  free(c);
  return ncclSuccess;
}
int ncclCommDestroy(struct comm* c) {
  free(c);
  return ncclSuccess;
}

const char* ncclGetErrorString(int rc) {
  switch (rc) {
    case ncclSuccess: return "no error";
    case ncclSystemError: return "unhandled system error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclRemoteError: return "remote process exited or there was a network error";
    default: return "stand-in NCCL error";
  }
}
#endif
