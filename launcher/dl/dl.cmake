# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Deep-learning wiring: GPU selection and binds, DL environment, host library injection with ABI
# checks, node diagnosis (doctor).
target_sources(slipway_dl PRIVATE dl/elf.cc dl/ld_cache.cc dl/gpu.cc dl/dl_env.cc
  dl/image_libs.cc dl/host_libs.cc dl/abi_checks.cc dl/doctor.cc
  dl/nvidia_env.cc dl/gpu_exposure.cc dl/fabric.cc dl/slurm_versions.cc)
