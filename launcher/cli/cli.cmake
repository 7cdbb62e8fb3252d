# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# The `slipway` command.
add_executable(slipway cli/main.cc cli/cli_common.cc cli/run.cc cli/run_step.cc cli/doctor.cc
  cli/cache_commands.cc)
target_link_libraries(slipway PRIVATE slipway_launcher)
# libstdc++ linked in: resolving its ~4,000 symbols at every start cost 0.5 ms of a ~3 ms launch
# (bench/launch). The plugin keeps the shared one (srun and slurmstepd load it as a module).
target_link_options(slipway PRIVATE -static-libstdc++ -static-libgcc)
target_compile_definitions(slipway PRIVATE SLIPWAY_VERSION="${PROJECT_VERSION}")

# Package slipway (component slipway): the command, its man page and the environment-module file
# with `root` set to the install prefix (cmake/SlipwayInstall.cmake).
install(TARGETS slipway RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT slipway)
slipway_install_man(${PROJECT_SOURCE_DIR}/man/slipway.1 slipway)
# Debian's environment-modules searches share/modules/modulefiles; EL9's share/modulefiles
# (contrib/rpm/slipway.spec sets that).
set(SLIPWAY_MODULEFILES_DIR ${CMAKE_INSTALL_DATADIR}/modules/modulefiles CACHE STRING
  "Where the environment-module file goes, relative to the prefix")
slipway_install_configured(${PROJECT_SOURCE_DIR}/contrib/modulefiles/slipway
  ${SLIPWAY_MODULEFILES_DIR} slipway slipway)
slipway_install_package_docs(slipway)
