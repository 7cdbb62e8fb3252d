// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
/* A stand-in for an MPICH-ABI libmpi.so.12 (MPICH, Intel MPI, Cray MPT): only its soname matters
   to the test that injecting the host's OpenMPI libmpi.so.40 into this image is refused. */
int MPI_Init(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  return 0;
}
