# The `slipway` command.
add_executable(slipway cli/main.cc cli/cli_common.cc cli/run.cc cli/run_step.cc cli/doctor.cc
  cli/cache_commands.cc)
target_link_libraries(slipway PRIVATE slipway_launcher)
# libstdc++ linked in: resolving its ~4,000 symbols at every start cost 0.5 ms of a ~3 ms launch
# (bench/launch). The plugin keeps the shared one (srun and slurmstepd load it as a module).
target_link_options(slipway PRIVATE -static-libstdc++ -static-libgcc)
install(TARGETS slipway RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
