// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
/* The image's own libnccl.so.2 (version 2.18.1, loading net plugins v6 and v7): a stand-in for the
   NCCL an image was built with. The test shows that with --dl-host-libs=nccl the program below
   loads the host's libnccl instead. */
const char slw_nccl_plugins[] = "ncclNetPlugin_v6 ncclNetPlugin_v7";
const char slw_nccl_version[] = "NCCL version 2.18.1+cuda12.2";
int ncclGetVersion(int* version) {
  *version = 21801;
  return 0;
}
