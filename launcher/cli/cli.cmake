# The `slipway` command.
add_executable(slipway cli/main.cc cli/cli_common.cc cli/run.cc cli/doctor.cc
  cli/cache_commands.cc)
target_link_libraries(slipway PRIVATE slipway_launcher)
install(TARGETS slipway RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
