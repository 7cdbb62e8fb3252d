# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Warning and sanitizer flags shared by every Slipway target (docs/conventions.md, "Build").
add_library(slipway_warnings INTERFACE)
target_compile_options(slipway_warnings INTERFACE
  -Wall -Wextra -Wshadow -Wconversion -Wno-sign-conversion
  $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor>)

# SLIPWAY_SANITIZE=address,undefined or thread: compiled into every target that links
# slipway_warnings (all of Slipway's own; not the dl test fixtures, which stand for host
# libraries). A UBSan finding aborts (-fno-sanitize-recover), so a test with undefined behaviour
# fails instead of printing and passing; frame pointers give whole stacks in the reports.
if(SLIPWAY_SANITIZE)
  string(REPLACE "," ";" _slipway_san_list "${SLIPWAY_SANITIZE}")
  foreach(s ${_slipway_san_list})
    if(NOT s MATCHES "^(address|undefined|thread|leak)$")
      message(FATAL_ERROR "SLIPWAY_SANITIZE: '${s}' is not one of address, undefined, thread, leak")
    endif()
  endforeach()
  if("thread" IN_LIST _slipway_san_list AND "address" IN_LIST _slipway_san_list)
    message(FATAL_ERROR "SLIPWAY_SANITIZE: thread and address cannot be combined")
  endif()
  set(_slipway_san -fsanitize=${SLIPWAY_SANITIZE} -fno-omit-frame-pointer)
  if("undefined" IN_LIST _slipway_san_list)
    list(APPEND _slipway_san -fno-sanitize-recover=undefined)
  endif()
  target_compile_options(slipway_warnings INTERFACE ${_slipway_san})
  target_link_options(slipway_warnings INTERFACE -fsanitize=${SLIPWAY_SANITIZE})
endif()
