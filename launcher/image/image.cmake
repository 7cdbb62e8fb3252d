# SPDX-License-Identifier: Apache-2.0
# Copyright The Slipway authors
# Image import sources (owned by the image work): references, registry client, layer unpack,
# node cache and the import orchestration. ISA-L inflates gzip layers (see gzip_source.h).
pkg_check_modules(ISAL REQUIRED IMPORTED_TARGET libisal)
target_sources(slipway_image PRIVATE
  image/archive_lazy.cc
  image/cache.cc
  image/cache_admin.cc
  image/digest.cc
  image/fs_beneath.cc
  image/gzip_source.cc
  image/http.cc image/curl_api.cc
  image/image_ref.cc
  image/import.cc
  image/import_build.cc
  image/import_daemon.cc
  image/import_local.cc
  image/import_squashfs.cc
  image/layer.cc
  image/manifest.cc
  image/manifest_handoff.cc
  image/oci_writer.cc
  image/registry.cc
  image/registry_auth.cc
  image/snapshot.cc
  image/tag_memo.cc)
# ISA-L is loaded with dlopen on first use (gzip_source.h): headers only.
target_include_directories(slipway_image PRIVATE ${ISAL_INCLUDE_DIRS})
