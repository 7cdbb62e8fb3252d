// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// Element types and reduction operators of libtrain collectives, and the reduction kernels
// used by every transport (float16 and bfloat16 are reduced in float32 and rounded back).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace libtrain {

enum class DataType : uint8_t { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUint8 };
enum class ReduceOp : uint8_t { kSum, kAverage, kMin, kMax, kBitOr };

size_t dtype_size(DataType dtype);
const char* dtype_name(DataType dtype);
const char* op_name(ReduceOp op);
DataType parse_dtype(const std::string& name);  // "float32", "bfloat16", ... ; throws InvalidArgument
ReduceOp parse_op(const std::string& name);      // "sum", "average"/"avg", "min", "max"

// Throws InvalidArgument when `op` is not defined for `dtype` (kBitOr needs kUint8 and the reverse).
void check_op(DataType dtype, ReduceOp op);

// out[i] = op(inputs[0][i], ..., inputs[n-1][i]) for i < count. `out` may alias inputs[k].
// kAverage sums here; the division is apply_average()'s job, once per element of the full sum.
void reduce_many(void* out, const void* const* inputs, int n, size_t count, DataType dtype,
                 ReduceOp op);

// inout[i] = op(inout[i], in[i]).
void reduce_into(void* inout, const void* in, size_t count, DataType dtype, ReduceOp op);

// data[i] /= divisor (integers truncate toward zero); nothing at all for a divisor of 1.
void apply_average(void* data, size_t count, DataType dtype, int divisor);

// IEEE half / bfloat16 conversions (round to nearest even), public for tests and bindings.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_bfloat16(float f);

}  // namespace libtrain
