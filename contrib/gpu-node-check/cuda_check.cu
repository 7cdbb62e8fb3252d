// SPDX-License-Identifier: Apache-2.0
// Copyright The Slipway authors
// The CUDA test program of the GPU node check's image (gpu-node-check.sh): lists the devices CUDA
// sees and runs a kernel on each, checking its result. Linked with the static CUDA runtime, so the
// image needs only the driver's libcuda.so.1, which Slipway binds in. Prints one line per device,
// "cuda-check: DEVICES device(s), kernel ok" last; exits 1 on any error, 2 when no device is seen.
#include <cstdio>
#include <vector>

__global__ void axpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

static bool check(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return true;
  std::printf("cuda-check: %s: %s\n", what, cudaGetErrorString(rc));
  return false;
}

int main() {
  int devices = 0;
  if (!check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount")) return 2;
  if (devices == 0) {
    std::printf("cuda-check: no CUDA device\n");
    return 2;
  }
  const int n = 1 << 20;
  for (int d = 0; d < devices; ++d) {
    cudaDeviceProp p;
    char bus[32] = {};
    if (!check(cudaSetDevice(d), "cudaSetDevice") || !check(cudaGetDeviceProperties(&p, d), "props") ||
        !check(cudaDeviceGetPCIBusId(bus, sizeof bus, d), "bus id"))
      return 1;
    std::vector<float> x(n, 1.0f), y(n, 2.0f);
    float *dx = nullptr, *dy = nullptr;
    if (!check(cudaMalloc(&dx, n * sizeof(float)), "cudaMalloc") ||
        !check(cudaMalloc(&dy, n * sizeof(float)), "cudaMalloc") ||
        !check(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice), "copy in") ||
        !check(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice), "copy in"))
      return 1;
    axpy<<<(n + 255) / 256, 256>>>(n, 3.0f, dx, dy);
    if (!check(cudaGetLastError(), "kernel launch") ||
        !check(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost), "copy out"))
      return 1;
    for (int i = 0; i < n; ++i)
      if (y[i] != 5.0f) {
        std::printf("cuda-check: device %d computed %f at %d, want 5\n", d, y[i], i);
        return 1;
      }
    cudaFree(dx);
    cudaFree(dy);
    std::printf("cuda-check: device %d: %s, %s, compute %d.%d\n", d, p.name, bus, p.major, p.minor);
  }
  std::printf("cuda-check: %d device(s), kernel ok\n", devices);
  return 0;
}
