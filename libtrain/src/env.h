// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// libtrain's one reader of environment settings (LIBTRAIN_*, and RANK / WORLD_SIZE / MASTER_* of
// the env bootstrap). Every variable is read the same way: unset or empty means its default; a
// number is plain decimal (no sign, space, suffix or hex) within the variable's bounds; anything
// else throws InvalidArgument with one line naming the variable and the value, e.g.
//   libtrain: LIBTRAIN_SHM_CHUNK='12x' must be a whole number of bytes from 4096 to 1073741824
// (libtrain/python/libtrain/_env.py words Python's settings the same way).
#pragma once

#include <cstdint>

namespace libtrain::detail {

// The value of `name`; nullptr when it is unset or empty.
const char* env_text(const char* name);

// `value` of variable `name` as a whole number in [min, max]; `unit` ("bytes", "microseconds",
// or "") only words the error.
uint64_t parse_whole(const char* name, const char* value, uint64_t min, uint64_t max, const char* unit);
// The same from the environment; `fallback` when unset or empty.
uint64_t env_whole(const char* name, uint64_t fallback, uint64_t min, uint64_t max, const char* unit);
// The same, for a variable that must be set: unset or empty throws InvalidArgument naming it.
uint64_t env_whole_required(const char* name, uint64_t min, uint64_t max, const char* unit);

// A positive decimal number of seconds, at most `max` ("2.5", "1e3"; not "inf", "nan", "-1").
double parse_seconds(const char* name, const char* value, double max);
double env_seconds(const char* name, double fallback, double max);

}  // namespace libtrain::detail
