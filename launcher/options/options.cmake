# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Job options shared by the plugin and `slipway run`, and the container plan built from them.
target_sources(slipway_options PRIVATE options/job_options.cc options/container_plan.cc
  options/entrypoint.cc options/container_instances.cc options/save.cc)
