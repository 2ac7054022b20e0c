// What the CUDA kernel suites share: a device buffer that records a failed
// allocation, and a fixture base that opens a stream and a cuBLAS handle once
// per suite and skips every test with a message where no GPU is present.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

namespace gpucompute::testing {

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) {
      EXPECT_EQ(cudaMalloc(&ptr_, bytes), cudaSuccess);
    }
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

// `Suite` is the deriving fixture (one set of statics per suite).
template <typename Suite>
class CudaSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
      skip_reason_ = err != cudaSuccess ? std::string("no CUDA device: ") + cudaGetErrorString(err)
                                        : "no CUDA device present";
      cudaGetLastError();
      return;
    }
    cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    cublasCreate(&cublas_);
    seed_ = std::random_device{}();
  }
  static void TearDownTestSuite() {
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    cublas_ = nullptr;
    stream_ = nullptr;
  }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << "SKIPPED (GPU test): " << skip_reason_;
  }

  static inline std::string skip_reason_;
  static inline cudaStream_t stream_ = nullptr;
  static inline cublasHandle_t cublas_ = nullptr;
  static inline uint64_t seed_ = 0;
};

}  // namespace gpucompute::testing
