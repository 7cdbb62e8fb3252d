# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Debian packages by CPack, one per install component (`cmake --build B --target package`, or
# contrib/make-debs.sh OUTDIR): slipway, slurm-spank-slipway, libtrain0, libtrain-dev and
# python3-libtrain. The version is the CMake project version; dependencies on system libraries are
# computed from the binaries by dpkg-shlibdeps; lintian must report no errors on any of them.

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME slipway)
set(CPACK_PACKAGE_VENDOR "The Slipway authors")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_DEBIAN_PACKAGE_RELEASE ${SLIPWAY_DEB_RELEASE}${SLIPWAY_DEB_SUFFIX})
set(CPACK_PACKAGE_CONTACT "${SLIPWAY_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${SLIPWAY_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_OUTPUT_FILE_PREFIX ${CMAKE_BINARY_DIR}/debs)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL slipway spank libtrain libtrain_dev python_libtrain)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# python3-libtrain's module needs libtrain.so.0 from another component of this build: let
# dpkg-shlibdeps find it there (the dependency itself is written below, with the exact version).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR}/libtrain)
# lintian unstripped-binary-or-object: the packages carry no debug information.
set(CPACK_STRIP_FILES ON)
# Install with DESTDIR and prefix /usr, so that absolute destinations (/etc/slurm/...) land in
# the package and cmake/SlipwayInstall.cmake sees the prefix a package gets.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Control files (conffiles, triggers, shlibs) keep dpkg's modes (lintian control-file-has-bad-permissions).
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(deb_version ${SLIPWAY_DEB_VERSION})
foreach(component IN LISTS CPACK_COMPONENTS_ALL)
  string(TOUPPER ${component} C)
  set(CPACK_DEBIAN_${C}_PACKAGE_NAME ${SLIPWAY_PACKAGE_OF_${component}})
endforeach()

# The command and the plugin load these with dlopen on first use (launcher/common/lazy_library.h),
# out of dpkg-shlibdeps' sight: their packages by Debian release (Debian 13's 64-bit time_t
# transition renamed three). ISA-L only speeds up gzip; squashfs tools are for .sqsh images
# (squashfuse mounts them; without it they are unpacked).
if(SLIPWAY_DEBIAN_VERSION_ID AND SLIPWAY_DEBIAN_VERSION_ID LESS 13)
  set(launcher_dlopened "libcurl4, libarchive13, libssl3, libseccomp2")
else()
  set(launcher_dlopened "libcurl4t64, libarchive13t64, libssl3t64, libseccomp2")
endif()
set(launcher_recommends "libisal2, squashfs-tools-ng, squashfs-tools, squashfuse")

set(CPACK_DEBIAN_SLIPWAY_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_SLIPWAY_PACKAGE_DEPENDS "${launcher_dlopened}")
set(CPACK_DEBIAN_SLIPWAY_PACKAGE_RECOMMENDS "${launcher_recommends}")
set(CPACK_COMPONENT_SLIPWAY_DESCRIPTION "containerized distributed deep-learning training on Slurm
The slipway command runs a step of a Slurm job in a container image without an
administrator install (srun slipway run --container-image=IMAGE -- COMMAND),
and imports, lists and removes images of the node cache it shares with the
Slurm plugin (package slurm-spank-slipway). An environment-module file puts it
on PATH.")

set(CPACK_DEBIAN_SPANK_PACKAGE_SECTION admin)
# Slurm loads a SPANK plugin only into the release (major.minor) it was built against ("Incompatible
# plugin version", src/common/plugin.c): the package is tied to the Slurm of the headers it was
# compiled with (spank/CMakeLists.txt reads SLIPWAY_SLURM_RELEASE from slurm/slurm_version.h).
# Debian's slurm-wlm provides no virtual package naming that ABI, so the bounds are on its version.
set(_slurm slurm-wlm-basic-plugins)
if(SLIPWAY_SLURM_RELEASE)  # no plugin without the launcher (-DSLIPWAY_BUILD_LAUNCHER=OFF)
  set(_slurm "${_slurm} (>= ${SLIPWAY_SLURM_RELEASE}), ${_slurm} (<< ${SLIPWAY_SLURM_NEXT_RELEASE})")
endif()
set(CPACK_DEBIAN_SPANK_PACKAGE_DEPENDS "${_slurm}, ${launcher_dlopened}")
set(CPACK_DEBIAN_SPANK_PACKAGE_RECOMMENDS "${launcher_recommends}")
set(CPACK_DEBIAN_SPANK_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/packaging/spank/conffiles)
file(WRITE ${CMAKE_BINARY_DIR}/packaging/spank/conffiles "/etc/slurm/plugstack.conf.d/slipway.conf\n")
set(CPACK_COMPONENT_SPANK_DESCRIPTION "Slurm SPANK plugin for containerized training steps
spank_slipway.so adds pyxis's --container-image, --container-mounts and the
other --container-* options, and --dl-gpus, --dl-host-libs and --dl-explain,
to srun, sbatch and salloc. The plugstack.conf.d example it installs is fully
commented out: enabling the plugin is a step the administrator takes.")

set(CPACK_DEBIAN_LIBTRAIN_PACKAGE_SECTION libs)
# The shlibs file and the ldconfig trigger a shared library package must have (lintian no-shlibs,
# lacks-ldconfig-trigger). CPack's GENERATE_SHLIBS is global; only libtrain0 holds a library
# with a SONAME. CPack would also call ldconfig from postinst/postrm; the trigger replaces that
# (Debian policy 8.1.1; lintian maintscript-calls-ldconfig), so those scripts are ours and empty.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
file(WRITE ${CMAKE_BINARY_DIR}/packaging/libtrain/triggers "activate-noawait ldconfig\n")
foreach(script postinst postrm)
  file(WRITE ${CMAKE_BINARY_DIR}/packaging/libtrain/${script} "#!/bin/sh\nset -e\n")
endforeach()
set(CPACK_DEBIAN_LIBTRAIN_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/packaging/libtrain/triggers
  ${CMAKE_BINARY_DIR}/packaging/libtrain/postinst ${CMAKE_BINARY_DIR}/packaging/libtrain/postrm)
set(CPACK_COMPONENT_LIBTRAIN_DESCRIPTION "data-parallel training library bootstrapped from PMIx
libtrain forms its communicator from what srun --mpi=pmix gives each task and
averages gradients with a ring allreduce over shared memory inside a node and
TCP between nodes. This package holds the shared library.")

set(CPACK_DEBIAN_LIBTRAIN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_LIBTRAIN_DEV_PACKAGE_DEPENDS "libtrain0 (= ${deb_version})")
set(CPACK_COMPONENT_LIBTRAIN_DEV_DESCRIPTION "data-parallel training library (development files)
libtrain forms its communicator from what srun --mpi=pmix gives each task.
This package holds the headers, the CMake package, the pkg-config file, the
libtrain(3) manual and the C++ Fashion-MNIST example.")

set(CPACK_DEBIAN_PYTHON_LIBTRAIN_PACKAGE_SECTION python)
# dpkg-shlibdeps sees only libraries; the interpreter ABI (cpython-311 on Debian 12, cpython-313 on
# 13: the Python the module was built for, libtrain/CMakeLists.txt) and numpy are ours to say.
set(_python3 python3)
if(LIBTRAIN_PYTHON_VERSION MATCHES "^([0-9]+)\\.([0-9]+)$")
  math(EXPR _py_next "${CMAKE_MATCH_2} + 1")
  set(_python3 "python3 (>= ${LIBTRAIN_PYTHON_VERSION}), python3 (<< ${CMAKE_MATCH_1}.${_py_next})")
endif()
set(CPACK_DEBIAN_PYTHON_LIBTRAIN_PACKAGE_DEPENDS "libtrain0 (= ${deb_version}), ${_python3}, python3-numpy")
# libtrain.torch needs PyTorch; the numpy module does not.
set(CPACK_DEBIAN_PYTHON_LIBTRAIN_PACKAGE_SUGGESTS "python3-torch")
set(CPACK_COMPONENT_PYTHON_LIBTRAIN_DESCRIPTION "data-parallel training library (Python 3 module)
The libtrain module gives Python training scripts init(), rank(), size(),
allreduce, broadcast_parameters and a DistributedOptimizer over the libtrain
library, with the libtrain(7) manual and the Python Fashion-MNIST example.
libtrain.torch is Horovod's PyTorch API on libtrain, and registers the
torch.distributed backend named libtrain (needs python3-torch).")

include(CPack)
