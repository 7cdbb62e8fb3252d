# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Install helpers shared by every component: gzipped man pages, the per-package copyright and
# changelog.Debian.gz, and files whose text depends on the install prefix (the module file, the
# plugstack example). Prefix-dependent work runs at install time, so `cmake --install B --prefix P`
# and CPack (prefix /usr) both get the right paths from one build tree.

# Components and the Debian package each becomes (cmake/SlipwayPackaging.cmake).
set(SLIPWAY_PACKAGE_OF_slipway slipway)
set(SLIPWAY_PACKAGE_OF_spank slurm-spank-slipway)
set(SLIPWAY_PACKAGE_OF_libtrain libtrain0)
set(SLIPWAY_PACKAGE_OF_libtrain_dev libtrain-dev)
set(SLIPWAY_PACKAGE_OF_python_libtrain python3-libtrain)

# Debian policy 12.1 and lintian (manpage-not-compressed): man pages are installed gzip -9n.
# Compressed when CMake configures (again whenever a page changes), not by a build target: a
# partial build (contrib/images/demo/build) can still install its components, and installing only
# reads the build tree (a user may install from a build that is not theirs).
function(slipway_install_man page component)
  get_filename_component(name ${page} NAME)
  string(REGEX REPLACE ".*\\.([0-9])$" "\\1" section ${name})
  configure_file(${page} ${CMAKE_BINARY_DIR}/man/${name} COPYONLY)
  slipway_gzip(${CMAKE_BINARY_DIR}/man/${name})
  install(FILES ${CMAKE_BINARY_DIR}/man/${name}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section}
    COMPONENT ${component})
endfunction()

# FILE.gz beside FILE, as Debian wants it: gzip -9, no name or time stamp inside (reproducible).
function(slipway_gzip file)
  execute_process(COMMAND gzip -9nc ${file} OUTPUT_FILE ${file}.gz RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gzip ${file} failed (${rc}); install gzip")
  endif()
endfunction()

# /usr/share/doc/PACKAGE/{copyright,changelog.Debian.gz}: Debian policy 12.5 and 12.7 (lintian
# no-copyright-file, no-changelog).
string(TIMESTAMP SLIPWAY_CHANGELOG_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
function(slipway_install_package_docs component)
  set(package ${SLIPWAY_PACKAGE_OF_${component}})
  configure_file(${PROJECT_SOURCE_DIR}/contrib/debian/changelog.in
    ${CMAKE_BINARY_DIR}/install-doc/${package}/changelog.Debian @ONLY)
  slipway_gzip(${CMAKE_BINARY_DIR}/install-doc/${package}/changelog.Debian)
  set(gz ${CMAKE_BINARY_DIR}/install-doc/${package}/changelog.Debian.gz)
  install(FILES ${PROJECT_SOURCE_DIR}/contrib/debian/copyright ${gz}
    DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${package} COMPONENT ${component})
endfunction()

# Installs SOURCE as DIR/NAME with every "@SLIPWAY_ROOT@" replaced by the install prefix and
# Debian's Slurm plugin directory (which the plugstack example names, so that it reads as it is)
# by the installed one. DIR is relative to the prefix, or starts with @SLIPWAY_ETC@: /etc for
# prefix /usr (GNUInstallDirs' rule), else PREFIX/etc. Honours DESTDIR.
function(slipway_install_configured source dir name component)
  # Written straight to its destination (no file in the build tree: see slipway_install_man) and
  # recorded in install_manifest.txt as file(INSTALL) would.
  install(CODE "
    if(CMAKE_INSTALL_PREFIX STREQUAL \"/usr\")
      set(etc /etc)
    else()
      set(etc \"\${CMAKE_INSTALL_PREFIX}/etc\")
    endif()
    file(READ \"${source}\" text)
    string(REPLACE \"@SLIPWAY_ROOT@\" \"\${CMAKE_INSTALL_PREFIX}\" text \"\${text}\")
    string(REPLACE \"/usr/lib/x86_64-linux-gnu/slurm-wlm/\"
      \"\${CMAKE_INSTALL_PREFIX}/${SLIPWAY_SPANK_PLUGIN_DIR}/\" text \"\${text}\")
    set(dir \"${dir}\")
    string(REPLACE \"@SLIPWAY_ETC@\" \"\${etc}\" dir \"\${dir}\")
    if(NOT IS_ABSOLUTE \"\${dir}\")
      set(dir \"\${CMAKE_INSTALL_PREFIX}/\${dir}\")
    endif()
    set(dest \"\$ENV{DESTDIR}\${dir}/${name}\")
    message(STATUS \"Installing: \${dest}\")
    file(WRITE \"\${dest}\" \"\${text}\")
    file(CHMOD \"\${dest}\" PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
    list(APPEND CMAKE_INSTALL_MANIFEST_FILES \"\${dest}\")"
    COMPONENT ${component})
endfunction()
