# Warning and sanitizer flags shared by every Slipway target (docs/conventions.md, "Build").
add_library(slipway_warnings INTERFACE)
target_compile_options(slipway_warnings INTERFACE
  -Wall -Wextra -Wshadow -Wconversion -Wno-sign-conversion
  $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor>)

set(_slipway_san "")
if(SLIPWAY_ASAN)
  list(APPEND _slipway_san -fsanitize=address -fno-omit-frame-pointer)
endif()
if(SLIPWAY_UBSAN)
  list(APPEND _slipway_san -fsanitize=undefined)
endif()
if(SLIPWAY_TSAN)
  list(APPEND _slipway_san -fsanitize=thread)
endif()
if(_slipway_san)
  target_compile_options(slipway_warnings INTERFACE ${_slipway_san})
  target_link_options(slipway_warnings INTERFACE ${_slipway_san})
endif()
