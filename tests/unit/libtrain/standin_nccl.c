// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
/* Stand-in for NCCL (libnccl.so.2) in libtrain's tests without a GPU, loaded in its place through
 * LD_LIBRARY_PATH or linked as it; it queues its work on the stand-in CUDA runtime's streams
 * (standin_cudart.c), whose memory is host memory. Collectives really reduce across processes:
 *
 * - A communicator is a directory, STANDIN_NCCL_DIR/<unique id>; each rank writes its pid there at
 *   ncclCommInitRank. Collectives are numbered in the order a rank calls them (the same on every
 *   rank, as NCCL requires); sends and receives per peer.
 * - A collective runs on its stream's thread, after the work queued before it: it writes the rank's
 *   input to <number>.<rank> (a temporary name, then a rename), waits until the inputs it needs
 *   are there, and writes its output. Sends write p2p.<from>.<to>.<n>; receives wait for it.
 * - allreduce, reduce, broadcast (and bcast), allgather, reduce_scatter, alltoall, send and recv;
 *   sum, prod, min, max and avg (integer avg truncates, as the sum divided by the ranks in C)
 *   over int8, uint8, int32, uint32, int64, uint64, float16, bfloat16, float32 and float64
 *   (floating point reduced in double, then rounded once: exact where the sums are).
 * - ncclGroupStart/End: the group's calls on one stream become one piece of its work that first
 *   writes every input and send, then completes each call, so sends and receives in a group never
 *   wait for each other.
 * - A peer that died (its pid is gone) while a call waits for its part is what NCCL reports as
 *   ncclRemoteError ("remote process exited") through ncclCommGetAsyncError;
 *   STANDIN_NCCL_ON_DEATH=hang reports nothing instead,
 *   as NCCL does on transports that never notice, so the caller's timeout must. A collective
 *   waiting for a dead peer waits, as NCCL's kernels do, until ncclCommAbort. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "standin.h"

enum {
  ncclSuccess = 0,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
};
enum { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };
enum { kInt8, kUint8, kInt32, kUint32, kInt64, kUint64, kFloat16, kFloat32, kFloat64, kBfloat16, kTypes };
enum { kAllReduce, kReduce, kBroadcast, kAllGather, kReduceScatter, kAllToAll, kSend, kRecv };

typedef struct {
  char internal[128];
} ncclUniqueId;

struct comm {
  char dir[4096];
  int rank, size, device;
  long seq;           /* collectives called so far */
  long *sent, *received;  /* per peer: sends and receives called so far */
  int aborted;        /* work still waiting gives up */
  int pending;        /* calls queued and not done */
  int executing;      /* calls a stream's thread is running: they read and write the user's buffers */
  char awaited[4200]; /* the part a call waits for, "" while none is missing (under mu) */
  int awaited_from;   /* whose part that is */
  int refs;           /* the user's handle and each call queued */
  pthread_mutex_t mu;
};

struct op {
  struct comm* comm;
  int kind, dtype, redop, root, peer;
  long number;  /* the collective's number, or the send/recv's number with that peer */
  const void* in;
  void* out;
  size_t count;  /* elements: per rank for allgather, reduce_scatter and alltoall */
  void* stream;
  struct op* next;
};

static void comm_unref(struct comm* c) {
  pthread_mutex_lock(&c->mu);
  int left = --c->refs;
  pthread_mutex_unlock(&c->mu);
  if (left == 0) {
    pthread_mutex_destroy(&c->mu);
    free(c->sent);
    free(c->received);
    free(c);
  }
}

static int aborted(struct comm* c) { return __atomic_load_n(&c->aborted, __ATOMIC_ACQUIRE); }

static size_t elem_size(int dtype) {
  static const size_t sizes[kTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return dtype >= 0 && dtype < kTypes ? sizes[dtype] : 0;
}

/* ---------------------------------------------------------------- float16 and bfloat16 */

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, f;
  if (exp == 0 && mant == 0) {
    f = sign;
  } else if (exp == 0) {  /* subnormal: normalize */
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while (!(mant & 0x400));
    f = sign | (uint32_t)(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
  } else if (exp == 31) {
    f = sign | 0x7f800000u | mant << 13;
  } else {
    f = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float out;
  memcpy(&out, &f, 4);
  return out;
}

static uint16_t float_to_half(float v) {
  uint32_t f;
  memcpy(&f, &v, 4);
  uint16_t sign = (uint16_t)((f >> 16) & 0x8000);
  int32_t exp = (int32_t)((f >> 23) & 0xff) - 127 + 15;
  uint32_t mant = f & 0x7fffff;
  if (((f >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31) return (uint16_t)(sign | 0x7c00);
  if (exp <= 0) {  /* subnormal or zero, rounded to nearest even */
    if (exp < -10) return sign;
    mant |= 0x800000;
    int shift = 14 - exp;
    uint32_t half = mant >> shift, rest = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1))) ++half;
    return (uint16_t)(sign | half);
  }
  uint32_t h = (uint32_t)exp << 10 | mant >> 13, rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  /* may carry into the exponent: right */
  return (uint16_t)(sign | h);
}

static float bf16_to_float(uint16_t b) {
  uint32_t f = (uint32_t)b << 16;
  float out;
  memcpy(&out, &f, 4);
  return out;
}

static uint16_t float_to_bf16(float v) {
  uint32_t f;
  memcpy(&f, &v, 4);
  if ((f & 0x7f800000) == 0x7f800000 && (f & 0x7fffff)) return (uint16_t)((f >> 16) | 0x40);
  f += 0x7fff + ((f >> 16) & 1);
  return (uint16_t)(f >> 16);
}

/* ---------------------------------------------------------------- reductions */

static int is_float(int dtype) { return dtype == kFloat16 || dtype == kFloat32 || dtype == kFloat64 || dtype == kBfloat16; }
static int is_signed(int dtype) { return dtype == kInt8 || dtype == kInt32 || dtype == kInt64; }

static double load_f(const void* p, int dtype, size_t i) {
  switch (dtype) {
    case kFloat16: return half_to_float(((const uint16_t*)p)[i]);
    case kBfloat16: return bf16_to_float(((const uint16_t*)p)[i]);
    case kFloat32: return ((const float*)p)[i];
    default: return ((const double*)p)[i];
  }
}
static void store_f(void* p, int dtype, size_t i, double v) {
  switch (dtype) {
    case kFloat16: ((uint16_t*)p)[i] = float_to_half((float)v); break;
    case kBfloat16: ((uint16_t*)p)[i] = float_to_bf16((float)v); break;
    case kFloat32: ((float*)p)[i] = (float)v; break;
    default: ((double*)p)[i] = v; break;
  }
}
static int64_t load_i(const void* p, int dtype, size_t i) {
  switch (dtype) {
    case kInt8: return ((const int8_t*)p)[i];
    case kUint8: return ((const uint8_t*)p)[i];
    case kInt32: return ((const int32_t*)p)[i];
    case kUint32: return ((const uint32_t*)p)[i];
    default: return ((const int64_t*)p)[i];  /* uint64 as its bits */
  }
}
static void store_i(void* p, int dtype, size_t i, int64_t v) {
  switch (dtype) {
    case kInt8: ((int8_t*)p)[i] = (int8_t)v; break;
    case kUint8: ((uint8_t*)p)[i] = (uint8_t)v; break;
    case kInt32: ((int32_t*)p)[i] = (int32_t)v; break;
    case kUint32: ((uint32_t*)p)[i] = (uint32_t)v; break;
    default: ((int64_t*)p)[i] = v; break;
  }
}

/* Reduces PARTS[0..n) (each COUNT elements from element FIRST on) into OUT. Integers wrap as in
 * their type; unsigned compare as unsigned. */
static void reduce(const void* const* parts, int n, size_t first, size_t count, int dtype, int redop, void* out) {
  for (size_t i = 0; i < count; ++i) {
    if (is_float(dtype)) {
      double acc = load_f(parts[0], dtype, first + i);
      for (int r = 1; r < n; ++r) {
        double v = load_f(parts[r], dtype, first + i);
        acc = redop == kProd ? acc * v : redop == kMax ? (v > acc ? v : acc) : redop == kMin ? (v < acc ? v : acc) : acc + v;
      }
      store_f(out, dtype, i, redop == kAvg ? acc / n : acc);
    } else {
      int64_t acc = load_i(parts[0], dtype, first + i);
      uint64_t uacc = (uint64_t)acc;
      for (int r = 1; r < n; ++r) {
        int64_t v = load_i(parts[r], dtype, first + i);
        uint64_t uv = (uint64_t)v;
        if (redop == kSum || redop == kAvg) {
          uacc += uv;
        } else if (redop == kProd) {
          uacc *= uv;
        } else {
          int greater = is_signed(dtype) ? (int64_t)uv > (int64_t)uacc : uv > uacc;
          if ((redop == kMax) == greater && uv != uacc) uacc = uv;
        }
      }
      acc = (int64_t)uacc;
      if (redop == kAvg) {
        if (is_signed(dtype))
          acc = acc / n;
        else
          acc = (int64_t)(uacc / (uint64_t)n);
      }
      store_i(out, dtype, i, acc);
    }
  }
}

/* ---------------------------------------------------------------- the exchange */

static void part_path(const struct comm* c, const struct op* o, int from, char* out, size_t len) {
  if (o->kind == kSend || o->kind == kRecv)
    snprintf(out, len, "%s/p2p.%d.%d.%ld", c->dir, from, o->kind == kSend ? o->peer : c->rank, o->number);
  else
    snprintf(out, len, "%s/%ld.%d", c->dir, o->number, from);
}

/* Writes whole (a temporary name, then rename), so a reader sees all of it or nothing. */
static int write_part(const struct comm* c, const struct op* o, const void* data, size_t bytes) {
  char path[4200], tmp[4300];
  part_path(c, o, c->rank, path, sizeof path);
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

/* Reads FROM's part of O into BUF (BYTES of it), waiting until it is there; 0 when the
 * communicator was aborted first. */
static int read_part(struct comm* c, const struct op* o, int from, void* buf, size_t bytes) {
  char path[4200];
  part_path(c, o, from, path, sizeof path);
  long sleep_ns = 20000;
  for (;;) {
    FILE* f = fopen(path, "rb");
    if (f) {
      size_t got = bytes ? fread(buf, 1, bytes, f) : 0;
      fclose(f);
      if (got == bytes) {
        pthread_mutex_lock(&c->mu);
        c->awaited[0] = 0;
        pthread_mutex_unlock(&c->mu);
        return 1;
      }
    }
    pthread_mutex_lock(&c->mu);
    snprintf(c->awaited, sizeof c->awaited, "%s", path);
    c->awaited_from = from;
    pthread_mutex_unlock(&c->mu);
    if (aborted(c)) return 0;
    struct timespec d = {0, sleep_ns};
    nanosleep(&d, NULL);
    if (sleep_ns < 1000000) sleep_ns *= 2;
  }
}

/* What O puts out for the others: its input (the root's only for a broadcast; nothing for a
 * receive). */
static void post(struct op* o) {
  struct comm* c = o->comm;
  size_t es = elem_size(o->dtype), bytes = o->count * es;
  switch (o->kind) {
    case kBroadcast:
      if (c->rank != o->root) return;
      break;
    case kReduceScatter:
    case kAllToAll: bytes *= (size_t)c->size; break;
    case kRecv: return;
    default: break;
  }
  if (write_part(c, o, o->in, bytes) != 0) __atomic_store_n(&c->aborted, 1, __ATOMIC_RELEASE);
}

/* Waits for what O needs and writes its output. */
static void complete(struct op* o) {
  struct comm* c = o->comm;
  size_t es = elem_size(o->dtype), bytes = o->count * es;
  int n = c->size;
  if (o->kind == kSend) return;
  if (o->kind == kRecv || o->kind == kBroadcast) {
    void* buf = malloc(bytes ? bytes : 1);
    if (read_part(c, o, o->kind == kRecv ? o->peer : o->root, buf, bytes)) memcpy(o->out, buf, bytes);
    free(buf);
    return;
  }
  size_t part_bytes = (o->kind == kReduceScatter || o->kind == kAllToAll) ? bytes * (size_t)n : bytes;
  void** parts = calloc((size_t)n, sizeof *parts);
  int ok = parts != NULL;
  for (int r = 0; ok && r < n; ++r) {
    parts[r] = malloc(part_bytes ? part_bytes : 1);
    ok = parts[r] && read_part(c, o, r, parts[r], part_bytes);
  }
  if (ok) {
    switch (o->kind) {
      case kAllReduce: reduce((const void* const*)parts, n, 0, o->count, o->dtype, o->redop, o->out); break;
      case kReduce:
        if (c->rank == o->root) reduce((const void* const*)parts, n, 0, o->count, o->dtype, o->redop, o->out);
        break;
      case kReduceScatter:
        reduce((const void* const*)parts, n, (size_t)c->rank * o->count, o->count, o->dtype, o->redop, o->out);
        break;
      case kAllGather:
        for (int r = 0; r < n; ++r) memcpy((char*)o->out + (size_t)r * bytes, parts[r], bytes);
        break;
      case kAllToAll:
        for (int r = 0; r < n; ++r)
          memcpy((char*)o->out + (size_t)r * bytes, (char*)parts[r] + (size_t)c->rank * bytes, bytes);
        break;
      default: break;
    }
  }
  for (int r = 0; parts && r < n; ++r) free(parts[r]);
  free(parts);
}

/* One piece of a stream's work: a call, or a group's calls on that stream. Each call counts as
 * executing from before its first look at `aborted` until it is done with the user's buffers, so
 * that ncclCommAbort can wait for it (seq_cst on both sides: either abort sees it executing, or
 * it sees the abort). */
static void run_ops(void* p) {
  struct op* ops = p;
  for (struct op* o = ops; o; o = o->next) __atomic_add_fetch(&o->comm->executing, 1, __ATOMIC_SEQ_CST);
  for (struct op* o = ops; o; o = o->next)
    if (!__atomic_load_n(&o->comm->aborted, __ATOMIC_SEQ_CST)) post(o);
  while (ops) {
    struct op* o = ops;
    ops = o->next;
    if (!aborted(o->comm)) complete(o);
    __atomic_sub_fetch(&o->comm->pending, 1, __ATOMIC_ACQ_REL);
    __atomic_sub_fetch(&o->comm->executing, 1, __ATOMIC_SEQ_CST);
    comm_unref(o->comm);
    free(o);
  }
}

/* ---------------------------------------------------------------- groups */

static __thread int group_depth;
static __thread struct op *group_head, *group_tail;

int ncclGroupStart(void) {
  ++group_depth;
  return ncclSuccess;
}

/* Queues the group's calls: one piece of work per stream, in the order of each stream's first call. */
static int flush_group(void) {
  int rc = ncclSuccess;
  while (group_head) {
    void* stream = group_head->stream;
    struct op *mine = NULL, **mine_tail = &mine, **rest = &group_head;
    while (*rest) {
      if ((*rest)->stream == stream) {
        struct op* o = *rest;
        *rest = o->next;
        o->next = NULL;
        *mine_tail = o;
        mine_tail = &o->next;
      } else {
        rest = &(*rest)->next;
      }
    }
    if (standin_stream_enqueue(stream, run_ops, mine) != 0) {
      rc = ncclSystemError;
      while (mine) {
        struct op* o = mine;
        mine = o->next;
        __atomic_sub_fetch(&o->comm->pending, 1, __ATOMIC_ACQ_REL);
        comm_unref(o->comm);
        free(o);
      }
    }
  }
  group_tail = NULL;
  return rc;
}

int ncclGroupEnd(void) {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth > 0) return ncclSuccess;
  return flush_group();
}

static int call(struct comm* c, int kind, const void* in, void* out, size_t count, int dtype, int redop, int root,
                int peer, void* stream) {
  if (!c || elem_size(dtype) == 0 || redop < kSum || redop > kAvg) return ncclInvalidArgument;
  if ((kind == kBroadcast || kind == kReduce) && (root < 0 || root >= c->size)) return ncclInvalidArgument;
  if ((kind == kSend || kind == kRecv) && (peer < 0 || peer >= c->size)) return ncclInvalidArgument;
  if (aborted(c)) return ncclInvalidUsage;
  struct op* o = calloc(1, sizeof *o);
  if (!o) return ncclSystemError;
  pthread_mutex_lock(&c->mu);
  long number = kind == kSend ? c->sent[peer]++ : kind == kRecv ? c->received[peer]++ : c->seq++;
  c->refs++;
  __atomic_add_fetch(&c->pending, 1, __ATOMIC_ACQ_REL);
  pthread_mutex_unlock(&c->mu);
  *o = (struct op){c, kind, dtype, redop, root, peer, number, in, out, count, stream, NULL};
  if (group_depth > 0) {
    if (group_tail)
      group_tail->next = o;
    else
      group_head = o;
    group_tail = o;
    return ncclSuccess;
  }
  if (standin_stream_enqueue(stream, run_ops, o) != 0) {
    __atomic_sub_fetch(&c->pending, 1, __ATOMIC_ACQ_REL);
    comm_unref(c);
    free(o);
    return ncclSystemError;
  }
  return ncclSuccess;
}

/* ---------------------------------------------------------------- the API */

int ncclGetVersion(int* version) {
  *version = 22800;
  return ncclSuccess;
}

int ncclGetUniqueId(ncclUniqueId* id) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  static int calls;
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "standin-%d-%ld%09ld-%d", (int)getpid(), (long)t.tv_sec, t.tv_nsec,
           __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED));
  return ncclSuccess;
}

int cudaGetDevice(int* device);

int ncclCommInitRank(struct comm** out, int size, ncclUniqueId id, int rank) {
  const char* base = getenv("STANDIN_NCCL_DIR");
  if (!base || size < 1 || rank < 0 || rank >= size || strncmp(id.internal, "standin-", 8) != 0)
    return ncclInvalidArgument;
  struct comm* c = calloc(1, sizeof *c);
  if (!c) return ncclSystemError;
  c->rank = rank;
  c->size = size;
  c->refs = 1;
  c->sent = calloc((size_t)size, sizeof *c->sent);
  c->received = calloc((size_t)size, sizeof *c->received);
  pthread_mutex_init(&c->mu, NULL);
  cudaGetDevice(&c->device);
  snprintf(c->dir, sizeof c->dir, "%s/%.100s", base, id.internal);
  char path[4200], pid[32];
  snprintf(path, sizeof path, "%s/pid.%d", c->dir, rank);
  FILE* f = NULL;
  if (!c->sent || !c->received || (mkdir(c->dir, 0700) != 0 && errno != EEXIST) || !(f = fopen(path, "w"))) {
    comm_unref(c);
    return ncclSystemError;
  }
  snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  fputs(pid, f);
  fclose(f);
  *out = c;
  return ncclSuccess;
}

int ncclCommCount(const struct comm* c, int* count) {
  if (!c) return ncclInvalidArgument;
  *count = c->size;
  return ncclSuccess;
}
int ncclCommUserRank(const struct comm* c, int* rank) {
  if (!c) return ncclInvalidArgument;
  *rank = c->rank;
  return ncclSuccess;
}
int ncclCommCuDevice(const struct comm* c, int* device) {
  if (!c) return ncclInvalidArgument;
  *device = c->device;
  return ncclSuccess;
}

int ncclAllReduce(const void* in, void* out, size_t count, int dtype, int op, struct comm* c, void* s) {
  return call(c, kAllReduce, in, out, count, dtype, op, 0, 0, s);
}
int ncclReduce(const void* in, void* out, size_t count, int dtype, int op, int root, struct comm* c, void* s) {
  return call(c, kReduce, in, out, count, dtype, op, root, 0, s);
}
int ncclBroadcast(const void* in, void* out, size_t count, int dtype, int root, struct comm* c, void* s) {
  return call(c, kBroadcast, in, out, count, dtype, kSum, root, 0, s);
}
int ncclBcast(void* buf, size_t count, int dtype, int root, struct comm* c, void* s) {
  return call(c, kBroadcast, buf, buf, count, dtype, kSum, root, 0, s);
}
int ncclAllGather(const void* in, void* out, size_t count, int dtype, struct comm* c, void* s) {
  return call(c, kAllGather, in, out, count, dtype, kSum, 0, 0, s);
}
int ncclReduceScatter(const void* in, void* out, size_t count, int dtype, int op, struct comm* c, void* s) {
  return call(c, kReduceScatter, in, out, count, dtype, op, 0, 0, s);
}
int ncclAlltoAll(const void* in, void* out, size_t count, int dtype, struct comm* c, void* s) {
  return call(c, kAllToAll, in, out, count, dtype, kSum, 0, 0, s);
}
int ncclSend(const void* in, size_t count, int dtype, int peer, struct comm* c, void* s) {
  return call(c, kSend, in, NULL, count, dtype, kSum, 0, peer, s);
}
int ncclRecv(void* out, size_t count, int dtype, int peer, struct comm* c, void* s) {
  return call(c, kRecv, NULL, out, count, dtype, kSum, 0, peer, s);
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

/* Whether rank R of C is gone. */
static int peer_dead(const struct comm* c, int r) {
  char path[4200];
  int pid = 0, dead = 0;
  snprintf(path, sizeof path, "%s/pid.%d", c->dir, r);
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  if (fscanf(f, "%d", &pid) == 1 && pid > 0) dead = is_dead(pid);
  fclose(f);
  return dead;
}

/* ncclRemoteError once a call waits for a part that is missing and the rank it is from is gone,
 * unless STANDIN_NCCL_ON_DEATH=hang. A call that has, or will get, every part it needs finishes,
 * as NCCL's kernel does once the data is in: a peer that sent its part and exited fails the next
 * call that needs it, not this one. */
int ncclCommGetAsyncError(struct comm* c, int* err) {
  *err = ncclSuccess;
  const char* mode = getenv("STANDIN_NCCL_ON_DEATH");
  if (!c || (mode && strcmp(mode, "hang") == 0)) return ncclSuccess;
  if (__atomic_load_n(&c->pending, __ATOMIC_ACQUIRE) == 0) return ncclSuccess;
  char awaited[sizeof c->awaited];
  pthread_mutex_lock(&c->mu);
  memcpy(awaited, c->awaited, sizeof awaited);
  int from = c->awaited_from;
  pthread_mutex_unlock(&c->mu);
  if (awaited[0] && access(awaited, F_OK) != 0 && peer_dead(c, from)) *err = ncclRemoteError;
  return ncclSuccess;
}

/* The calls still queued give up (NCCL's kernels stop), and it returns once none touches the
 * user's buffers any more, as NCCL's does once its kernels are gone; the communicator is freed
 * once the calls queued are. */
int ncclCommAbort(struct comm* c) {
  if (!c) return ncclSuccess;
  __atomic_store_n(&c->aborted, 1, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&c->executing, __ATOMIC_SEQ_CST) > 0) {
    struct timespec d = {0, 100000};
    nanosleep(&d, NULL);
  }
  comm_unref(c);
  return ncclSuccess;
}
/* The calls queued still complete, as NCCL's do; the communicator is freed once they did. */
int ncclCommDestroy(struct comm* c) {
  if (!c) return ncclSuccess;
  comm_unref(c);
  return ncclSuccess;
}
int ncclCommFinalize(struct comm* c) { return c ? ncclSuccess : ncclInvalidArgument; }

const char* ncclGetErrorString(int rc) {
  switch (rc) {
    case ncclSuccess: return "no error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    default: return "stand-in NCCL error";
  }
}
const char* ncclGetLastError(struct comm* c) {
  (void)c;
  return "";
}
