// runtime/cuda/cuda_loader.h declares the CUDA driver API's types and enum values by hand (no
// CUDA toolkit is needed to build kiln). This file, built only where CMake found a toolkit's
// cuda.h (tests/runtime/cuda/CMakeLists.txt), checks each declaration against cuda.h at compile
// time, so that a wrong number or a wrong symbol version cannot slip in:
//   - every enum value and the sizes of the types;
//   - every function: cuda.h's #define of the name programs call (cuMemAlloc -> cuMemAlloc_v2)
//     is the symbol kiln resolves, and the parameter count and each parameter's size and
//     pointer-ness match cuda.h's prototype of that symbol.
// At run time it assembles the tests' PTX with the toolkit's ptxas for sm_80 and sm_90, and
// loads the toolkit's stub libcuda.so (which exports every driver symbol) through LoadDriver.
#include "runtime/cuda/cuda_loader.h"  // first: cuda.h's #defines must not rename its fields

#if !defined(KILN_CUDA_H_FOUND)
#error "built only where CMake found cuda.h (KILN_CUDA_INCLUDE_DIR)"
#endif
#include <cuda.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <type_traits>

#include "runtime/cuda/cuda_device.h"
#include "tests/runtime/cuda/test_kernels_ptx.h"

namespace kiln::runtime::cuda::internal {
namespace {

// ---- Types and values --------------------------------------------------------------------------
static_assert(sizeof(CUresult) == sizeof(::CUresult));
static_assert(sizeof(CUdevice) == sizeof(::CUdevice));
static_assert(std::is_same_v<CUdeviceptr, ::CUdeviceptr>);
static_assert(sizeof(CUdevice_attribute) == sizeof(::CUdevice_attribute));
static_assert(sizeof(CUfunction_attribute) == sizeof(::CUfunction_attribute));
static_assert(sizeof(CUjit_option) == sizeof(::CUjit_option));

static_assert(kCudaSuccess == CUDA_SUCCESS);
static_assert(kCudaErrorOutOfMemory == CUDA_ERROR_OUT_OF_MEMORY);
static_assert(kCudaErrorStubLibrary == CUDA_ERROR_STUB_LIBRARY);
static_assert(kCudaErrorNoDevice == CUDA_ERROR_NO_DEVICE);
static_assert(kCudaErrorInvalidPtx == CUDA_ERROR_INVALID_PTX);
static_assert(kAttributeMaxThreadsPerBlock == CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
static_assert(kAttributeMaxBlockDimX == CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
static_assert(kAttributeMaxBlockDimY == CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
static_assert(kAttributeMaxBlockDimZ == CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
static_assert(kAttributeMaxGridDimX == CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
static_assert(kAttributeMaxGridDimY == CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
static_assert(kAttributeMaxGridDimZ == CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
static_assert(kAttributeMaxSharedMemoryPerBlock == CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
static_assert(kAttributeWarpSize == CU_DEVICE_ATTRIBUTE_WARP_SIZE);
static_assert(kAttributeMultiprocessorCount == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
static_assert(kAttributeComputeCapabilityMajor == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
static_assert(kAttributeComputeCapabilityMinor == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
static_assert(kAttributeMaxSharedMemoryPerBlockOptin ==
              CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
static_assert(kFuncAttributeMaxDynamicSharedSizeBytes ==
              CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
static_assert(kStreamNonBlocking == CU_STREAM_NON_BLOCKING);
static_assert(kEventDefault == CU_EVENT_DEFAULT);
static_assert(kJitInfoLogBuffer == CU_JIT_INFO_LOG_BUFFER);
static_assert(kJitInfoLogBufferSizeBytes == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES);
static_assert(kJitErrorLogBuffer == CU_JIT_ERROR_LOG_BUFFER);
static_assert(kJitErrorLogBufferSizeBytes == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES);

// ---- Functions ---------------------------------------------------------------------------------

// A parameter as the ABI sees it: its size, and whether it is a pointer (CUresult vs. int and
// CUjit_option* vs. int* are the same to the call; size_t vs. unsigned int is not).
struct Shape {
  size_t size;
  bool pointer;
  constexpr bool operator==(const Shape&) const = default;
};
template <typename T>
constexpr Shape ShapeOf() {
  return {sizeof(T), std::is_pointer_v<T>};
}
template <typename Function>
struct Signature;
template <typename R, typename... Args>
struct Signature<R (*)(Args...)> {
  static constexpr std::array<Shape, sizeof...(Args) + 1> value = {ShapeOf<R>(),
                                                                   ShapeOf<Args>()...};
};

#define KILN_STRINGIFY(x) #x
#define KILN_EXPANDED_NAME(x) KILN_STRINGIFY(x)
// `name` expands through cuda.h's #define (KILN_EXPANDED_NAME); `#exported` does not.
#define KILN_CHECK_FUNCTION(name, exported)                                                     \
  static_assert(std::string_view(KILN_EXPANDED_NAME(name)) == #exported,                        \
                "cuda.h's " #name " is not the symbol cuda_loader.h resolves (" #exported ")"); \
  static_assert(                                                                                \
      Signature<decltype(CudaApi::exported)>::value == Signature<decltype(&::exported)>::value, \
      #exported "'s parameters differ from cuda.h's prototype");
KILN_CUDA_FUNCTIONS(KILN_CHECK_FUNCTION)
#undef KILN_CHECK_FUNCTION
static_assert(CUDA_VERSION >= 12080, "CMake builds this file only with CUDA 12.8+'s cuda.h");

// ---- At run time -------------------------------------------------------------------------------

TEST(CudaHeader, TestKernelsAssembleWithPtxas) {
#ifndef KILN_CUDA_PTXAS
  GTEST_SKIP() << "the CUDA toolkit has no bin/ptxas";
#else
  const std::string dir = ::testing::TempDir();
  const std::string ptx = dir + "/kiln_cuda_test_kernels.ptx";
  std::ofstream(ptx) << cuda::testing::kTestKernelsPtx;
  for (const char* arch : {"sm_80", "sm_90"}) {
    const std::string command = std::string(KILN_CUDA_PTXAS) + " -arch=" + arch + " " + ptx +
                                " -o " + dir + "/kiln_cuda_test_kernels.cubin";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
  }
  std::remove(ptx.c_str());
#endif
}

TEST(CudaHeader, StubDriverExportsEverySymbol) {
#ifndef KILN_CUDA_STUB_DRIVER
  GTEST_SKIP() << "the CUDA toolkit has no lib64/stubs/libcuda.so";
#else
  // In a child process: the stub's SONAME is libcuda.so.1, so once it is loaded
  // dlopen("libcuda.so.1") returns it, and the other cases would see the stub instead of no driver.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // LoadDriver resolves every symbol before it calls cuInit, which the stub refuses.
  EXPECT_EXIT(
      {
        absl::StatusOr<const CudaApi*> api = LoadDriver(KILN_CUDA_STUB_DRIVER);
        std::fprintf(stderr, "%s\n", api.status().ToString().c_str());
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0),
      "FAILED_PRECONDITION: kiln::Cuda: cuInit failed in " KILN_CUDA_STUB_DRIVER
      ": CUDA_ERROR_STUB_LIBRARY: " KILN_CUDA_STUB_DRIVER
      " is the CUDA toolkit's stub library, not a driver. Use KILN_DEVICE=cpu to run on the CPU");
#endif
}

}  // namespace
}  // namespace kiln::runtime::cuda::internal
