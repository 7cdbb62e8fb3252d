# slipway_check_test(NAME SOURCES ... [LIBS ...] [LABELS ...] [TIMEOUT s])
# One Check executable per unit, registered with CTest. Check runs each test in a forked child
# (CK_FORK=yes) so a test may unshare() or crash without touching its neighbours.
# Labels say what a test needs: unit, userns, cluster, gpu.
function(slipway_check_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE PkgConfig::CHECK slipway_warnings ${T_LIBS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/common)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "CK_FORK=yes;CK_DEFAULT_TIMEOUT=60"
    SKIP_RETURN_CODE 77)
endfunction()
