// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The node's collectives over ShmGroup's segment: allreduce through the slots (one or two
// barriers per chunk) or by cross-memory attach, broadcast and allgather.
// Slot reuse: chunk c writes buffer c%2 only after passing the first barrier of chunk c-1, which
// every rank reaches only after it finished reading chunk c-2 (the same buffer). This holds
// across collectives too (the buffer index keeps alternating), and whether a chunk takes one
// barrier or two, since every read of a slot ends before the reader's next first barrier.
#include <sys/uio.h>

#include <algorithm>
#include <cstring>

#include "shm_group.h"

namespace libtrain::detail {
namespace {

constexpr size_t kCmaChunk = 256 * 1024;  // bytes per peer read: the chunks stay in L2

// Copies [0, len) of `src` into `dst`, except the part [skip_begin, skip_end).
void copy_around(uint8_t* dst, const uint8_t* src, size_t len, size_t skip_begin, size_t skip_end) {
  if (skip_begin) std::memcpy(dst, src, skip_begin);
  if (len > skip_end) std::memcpy(dst + skip_end, src + skip_end, len - skip_end);
}

}  // namespace

// CMA allreduce, 3 barriers whatever the size: (1) buffers published; each rank reduces its 1/n
// slice, reading the peers' inputs chunk by chunk into scratch and reducing them with its own
// into its own buffer; (2) every slice final in its owner's buffer; each rank reads the n-1
// other slices straight into its buffer; (3) nobody reads my buffer any more, I may return.
// Per rank that moves ~2.5 S bytes (2 ranks) instead of ~4 S through the slots.
void ShmGroup::allreduce_cma(void* data, size_t count, DataType dtype, ReduceOp op, int divisor) {
  size_t esize = dtype_size(dtype), chunk = std::max<size_t>(kCmaChunk / esize, 1);
  auto* mine = static_cast<uint8_t*>(data);
  scratch_.resize(chunk * esize * static_cast<size_t>(size_ - 1));
  const void* inputs[kMaxLocalRanks];
  publish_address(data);
  barrier();
  size_t b, e;
  split(count, size_, rank_, b, e);
  for (size_t off = b; off < e; off += chunk) {
    size_t len = std::min(chunk, e - off);
    inputs[0] = mine + off * esize;
    for (int j = 0, k = 1; j < size_; ++j) {
      if (j == rank_) continue;
      uint8_t* buf = scratch_.data() + static_cast<size_t>(k - 1) * chunk * esize;
      read_peer(j, hdr_addr(j) + off * esize, buf, len * esize);
      inputs[k++] = buf;
    }
    reduce_many(mine + off * esize, inputs, size_, len, dtype, op);
    apply_average(mine + off * esize, len, dtype, divisor);
  }
  barrier();
  for (int j = 0; j < size_; ++j) {
    split(count, size_, j, b, e);
    if (j != rank_ && e > b) read_peer(j, hdr_addr(j) + b * esize, mine + b * esize, (e - b) * esize);
  }
  barrier();
}

// One barrier: every rank stages its chunk, then reduces all n of them into its own buffer. The
// inputs are taken in rank order on every rank, so all get bit-identical results.
void ShmGroup::reduce_one_phase(uint8_t* in, size_t len, int buf, DataType dtype, ReduceOp op, int divisor) {
  size_t bytes = len * dtype_size(dtype);
  std::memcpy(slot(rank_, buf), in, bytes);
  barrier();
  const void* inputs[kMaxLocalRanks];
  for (int j = 0; j < size_; ++j) inputs[j] = j == rank_ ? in : slot(j, buf);
  reduce_many(in, inputs, size_, len, dtype, op);  // in place: the kernels read a block first
  apply_average(in, len, dtype, divisor);
}

// Two barriers: every rank stages the n-1 slices its peers reduce (its own slice stays in its
// buffer, where it reads it from: a third less copying than staging everything); reduces its
// slice into its slot and its buffer; after the second barrier copies the other finished slices.
void ShmGroup::reduce_two_phase(uint8_t* in, size_t len, int buf, DataType dtype, ReduceOp op, int divisor) {
  size_t esize = dtype_size(dtype), b, e;
  split(len, size_, rank_, b, e);
  uint8_t* mine = slot(rank_, buf);
  copy_around(mine, in, len * esize, b * esize, e * esize);
  barrier();
  const void* inputs[kMaxLocalRanks];
  for (int j = 0; j < size_; ++j) inputs[j] = (j == rank_ ? in : slot(j, buf)) + b * esize;
  if (e > b) {
    reduce_many(mine + b * esize, inputs, size_, e - b, dtype, op);
    apply_average(mine + b * esize, e - b, dtype, divisor);
    std::memcpy(in + b * esize, mine + b * esize, (e - b) * esize);
  }
  barrier();
  for (int j = 0; j < size_; ++j) {
    split(len, size_, j, b, e);
    if (j != rank_) std::memcpy(in + b * esize, slot(j, buf) + b * esize, (e - b) * esize);
  }
}

void ShmGroup::allreduce(void* data, size_t count, DataType dtype, ReduceOp op, int divisor) {
  size_t esize = dtype_size(dtype);
  if (is_cma(count * esize)) return allreduce_cma(data, count, dtype, op, divisor);
  size_t chunk = chunk_bytes_ / esize;
  auto* bytes = static_cast<uint8_t*>(data);
  for (size_t off = 0; off < count; off += chunk) {
    size_t len = std::min(chunk, count - off);
    int buf = next_buffer();
    if (len * esize <= one_phase_bytes_) reduce_one_phase(bytes + off * esize, len, buf, dtype, op, divisor);
    else reduce_two_phase(bytes + off * esize, len, buf, dtype, op, divisor);
  }
}

void ShmGroup::broadcast(void* data, size_t bytes, int root) {
  if (is_cma(bytes)) {  // everyone reads root's buffer: one copy, 2 barriers
    publish_address(data);
    barrier();
    if (rank_ != root) read_peer(root, hdr_addr(root), data, bytes);
    barrier();
    return;
  }
  auto* p = static_cast<uint8_t*>(data);
  for (size_t off = 0; off < bytes; off += slot_bytes_) {
    size_t len = std::min(slot_bytes_, bytes - off);
    int buf = next_buffer();
    if (rank_ == root) std::memcpy(slot(root, buf), p + off, len);
    barrier();
    if (rank_ != root) std::memcpy(p + off, slot(root, buf), len);
  }
}

void ShmGroup::allgather(const void* in, void* out, size_t bytes) {
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  if (is_cma(bytes * static_cast<size_t>(size_))) {  // everyone reads every peer's input
    publish_address(in);
    barrier();
    for (int j = 0; j < size_; ++j) {
      uint8_t* to = dst + static_cast<size_t>(j) * bytes;
      if (j != rank_) read_peer(j, hdr_addr(j), to, bytes);
      else if (to != src) std::memmove(to, src, bytes);
    }
    barrier();
    return;
  }
  for (size_t off = 0; off < bytes; off += slot_bytes_) {
    size_t len = std::min(slot_bytes_, bytes - off);
    int buf = next_buffer();
    std::memcpy(slot(rank_, buf), src + off, len);
    barrier();
    for (int j = 0; j < size_; ++j)
      std::memcpy(dst + static_cast<size_t>(j) * bytes + off, slot(j, buf), len);
  }
}

}  // namespace libtrain::detail
