// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Reduction kernels and dtype helpers. Kernels work block by block so the output block stays in
// L1 while every input streams through once; float16/bfloat16 are widened to float32 per block.
#include "libtrain/types.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "libtrain/errors.h"

namespace libtrain {
namespace {

constexpr size_t kBlock = 1024;  // elements per block: 4 KiB of float32, fits L1 with its inputs

struct Half { uint16_t bits; };
struct BFloat { uint16_t bits; };

template <typename T> struct Wide { using type = T; };
template <> struct Wide<Half> { using type = float; };
template <> struct Wide<BFloat> { using type = float; };

template <typename T> typename Wide<T>::type widen(T v) { return v; }
template <> float widen(Half v) { return half_to_float(v.bits); }
template <> float widen(BFloat v) { return bfloat16_to_float(v.bits); }
template <typename T> T narrow(typename Wide<T>::type v) { return v; }
template <> Half narrow(float v) { return Half{float_to_half(v)}; }
template <> BFloat narrow(float v) { return BFloat{float_to_bfloat16(v)}; }

template <typename W> W combine(W a, W b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin: return b < a ? b : a;
    case ReduceOp::kMax: return b > a ? b : a;
    default: return a + b;
  }
}

template <typename W, ReduceOp kOp> void combine_block(W* acc, const W* in, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if constexpr (kOp == ReduceOp::kMin) acc[i] = in[i] < acc[i] ? in[i] : acc[i];
    else if constexpr (kOp == ReduceOp::kMax) acc[i] = in[i] > acc[i] ? in[i] : acc[i];
    else acc[i] += in[i];
  }
}

// Native types: reduce straight into the output block (vectorises).
template <typename T, ReduceOp kOp>
void reduce_native(T* out, const void* const* inputs, int n, size_t count) {
  for (size_t base = 0; base < count; base += kBlock) {
    size_t len = std::min(kBlock, count - base);
    T acc[kBlock];
    std::memcpy(acc, static_cast<const T*>(inputs[0]) + base, len * sizeof(T));
    for (int k = 1; k < n; ++k) combine_block<T, kOp>(acc, static_cast<const T*>(inputs[k]) + base, len);
    std::memcpy(out + base, acc, len * sizeof(T));
  }
}

// Narrow floats: widen each block to float, reduce, round back once.
template <typename T>
void reduce_narrow(T* out, const void* const* inputs, int n, size_t count, ReduceOp op) {
  for (size_t base = 0; base < count; base += kBlock) {
    size_t len = std::min(kBlock, count - base);
    float acc[kBlock];
    const T* first = static_cast<const T*>(inputs[0]) + base;
    for (size_t i = 0; i < len; ++i) acc[i] = widen(first[i]);
    for (int k = 1; k < n; ++k) {
      const T* in = static_cast<const T*>(inputs[k]) + base;
      for (size_t i = 0; i < len; ++i) acc[i] = combine(acc[i], widen(in[i]), op);
    }
    for (size_t i = 0; i < len; ++i) out[base + i] = narrow<T>(acc[i]);
  }
}

template <typename T>
void reduce_typed(void* out, const void* const* inputs, int n, size_t count, ReduceOp op) {
  T* o = static_cast<T*>(out);
  switch (op) {
    case ReduceOp::kMin: return reduce_native<T, ReduceOp::kMin>(o, inputs, n, count);
    case ReduceOp::kMax: return reduce_native<T, ReduceOp::kMax>(o, inputs, n, count);
    default: return reduce_native<T, ReduceOp::kSum>(o, inputs, n, count);
  }
}

void reduce_bitor(void* out, const void* const* inputs, int n, size_t count) {
  uint8_t* o = static_cast<uint8_t*>(out);
  for (size_t base = 0; base < count; base += kBlock * 8) {
    size_t len = std::min(kBlock * 8, count - base);
    uint8_t acc[kBlock * 8];
    std::memcpy(acc, static_cast<const uint8_t*>(inputs[0]) + base, len);
    for (int k = 1; k < n; ++k) {
      const uint8_t* in = static_cast<const uint8_t*>(inputs[k]) + base;
      for (size_t i = 0; i < len; ++i) acc[i] |= in[i];
    }
    std::memcpy(o + base, acc, len);
  }
}

template <typename T> void average_typed(void* data, size_t count, int divisor) {
  T* d = static_cast<T*>(data);
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat>) {
    float inv = 1.0f / static_cast<float>(divisor);
    for (size_t i = 0; i < count; ++i) d[i] = narrow<T>(widen(d[i]) * inv);
  } else if constexpr (std::is_floating_point_v<T>) {
    T inv = T(1) / static_cast<T>(divisor);
    for (size_t i = 0; i < count; ++i) d[i] *= inv;
  } else {
    for (size_t i = 0; i < count; ++i) d[i] = static_cast<T>(d[i] / divisor);
  }
}

}  // namespace

size_t dtype_size(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: case DataType::kInt32: return 4;
    case DataType::kFloat64: case DataType::kInt64: return 8;
    case DataType::kFloat16: case DataType::kBFloat16: return 2;
    case DataType::kUint8: return 1;
  }
  throw InvalidArgument("libtrain: unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

const char* dtype_name(DataType dtype) {
  static const char* const kNames[] = {"float32", "float64", "float16", "bfloat16",
                                       "int32",   "int64",   "uint8"};
  // Out of range: a peer's op header (tcp_ring.cc describes it when ranks disagree) is any bytes.
  auto i = static_cast<size_t>(dtype);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

const char* op_name(ReduceOp op) {
  static const char* const kNames[] = {"sum", "average", "min", "max", "bitor"};
  auto i = static_cast<size_t>(op);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

DataType parse_dtype(const std::string& name) {
  for (int i = 0; i <= static_cast<int>(DataType::kUint8); ++i)
    if (name == dtype_name(static_cast<DataType>(i))) return static_cast<DataType>(i);
  throw InvalidArgument("libtrain: unknown dtype '" + name +
                        "'; use float32, float64, float16, bfloat16, int32, int64 or uint8");
}

ReduceOp parse_op(const std::string& name) {
  if (name == "avg" || name == "mean") return ReduceOp::kAverage;
  for (int i = 0; i < static_cast<int>(ReduceOp::kBitOr); ++i)
    if (name == op_name(static_cast<ReduceOp>(i))) return static_cast<ReduceOp>(i);
  throw InvalidArgument("libtrain: unknown reduction '" + name + "'; use sum, average, min or max");
}

void check_op(DataType dtype, ReduceOp op) {
  if ((op == ReduceOp::kBitOr) != (dtype == DataType::kUint8))
    throw InvalidArgument(std::string("libtrain: reduction '") + op_name(op) +
                          "' is not defined for dtype " + dtype_name(dtype));
}

void reduce_many(void* out, const void* const* inputs, int n, size_t count, DataType dtype,
                 ReduceOp op) {
  switch (dtype) {
    case DataType::kFloat32: return reduce_typed<float>(out, inputs, n, count, op);
    case DataType::kFloat64: return reduce_typed<double>(out, inputs, n, count, op);
    case DataType::kInt32: return reduce_typed<int32_t>(out, inputs, n, count, op);
    case DataType::kInt64: return reduce_typed<int64_t>(out, inputs, n, count, op);
    case DataType::kFloat16: return reduce_narrow(static_cast<Half*>(out), inputs, n, count, op);
    case DataType::kBFloat16: return reduce_narrow(static_cast<BFloat*>(out), inputs, n, count, op);
    case DataType::kUint8: return reduce_bitor(out, inputs, n, count);
  }
}

void reduce_into(void* inout, const void* in, size_t count, DataType dtype, ReduceOp op) {
  const void* inputs[2] = {inout, in};
  reduce_many(inout, inputs, 2, count, dtype, op);
}

void apply_average(void* data, size_t count, DataType dtype, int divisor) {
  if (divisor == 1) return;
  switch (dtype) {
    case DataType::kFloat32: return average_typed<float>(data, count, divisor);
    case DataType::kFloat64: return average_typed<double>(data, count, divisor);
    case DataType::kInt32: return average_typed<int32_t>(data, count, divisor);
    case DataType::kInt64: return average_typed<int64_t>(data, count, divisor);
    case DataType::kFloat16: return average_typed<Half>(data, count, divisor);
    case DataType::kBFloat16: return average_typed<BFloat>(data, count, divisor);
    case DataType::kUint8: throw InvalidArgument("libtrain: average is not defined for uint8");
  }
}

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {  // subnormal half: renormalise
    int e = -1;
    do { ++e; man <<= 1; } while ((man & 0x400u) == 0);
    bits = sign | ((112u - static_cast<uint32_t>(e)) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (abs < 0x38800000u) {  // subnormal or zero: shift the mantissa with rounding
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t e = abs >> 23, man = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e;
    uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

float bfloat16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

namespace detail {
void throw_system_error(const std::string& what, int err, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  throw SystemError("libtrain: " + what + ": " + std::strerror(err) + " [" +
                        (base ? base + 1 : file) + ":" + std::to_string(line) + "]",
                    err);
}
void throw_system_error(const std::string& what, const char* file, int line) {
  throw_system_error(what, errno, file, line);
}
}  // namespace detail

}  // namespace libtrain
