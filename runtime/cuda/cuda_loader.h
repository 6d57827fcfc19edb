// The CUDA driver API entry points kiln uses, loaded at run time from the driver library
// (libcuda.so.1) with dlopen, so that linking runtime/cuda never makes a program need an NVIDIA
// driver (or the CUDA toolkit) to build or start. Internal to runtime/cuda.
//
// No <cuda.h> here: the few types and enum values the driver uses are declared below with the
// values of cuda.h (CUDA 13.0; these values never change between releases), and
// tests/runtime/cuda/cuda_header_cmake_only_test.cc static_asserts each one against cuda.h,
// plus every function's parameter count and sizes, wherever the toolkit's header is installed.
//
// Functions are resolved by the names the driver exports, which are not always the names
// programs call: cuda.h #defines cuMemAlloc as cuMemAlloc_v2 and so on, and the old unversioned
// symbols stay exported with their old (32-bit size) signatures. Every field below is named by
// its exported symbol, so a call spells the version it makes.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::runtime::cuda::internal {

// ---- Types (cuda.h's, by size and meaning) -----------------------------------------------------
using CUresult = int;                    // enum cudaError_enum
using CUdevice = int;                    // CUdevice_v1
using CUdeviceptr = unsigned long long;  // CUdeviceptr_v2 (64-bit builds)
using CUdevice_attribute = int;          // enum CUdevice_attribute_enum
using CUfunction_attribute = int;        // enum CUfunction_attribute_enum
using CUjit_option = int;                // enum CUjit_option_enum
using CUcontext = struct CUctx_st*;      // opaque handles
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;

// ---- Enum values -------------------------------------------------------------------------------
inline constexpr CUresult kCudaSuccess = 0;            // CUDA_SUCCESS
inline constexpr CUresult kCudaErrorOutOfMemory = 2;   // CUDA_ERROR_OUT_OF_MEMORY
inline constexpr CUresult kCudaErrorStubLibrary = 34;  // CUDA_ERROR_STUB_LIBRARY
inline constexpr CUresult kCudaErrorNoDevice = 100;    // CUDA_ERROR_NO_DEVICE
inline constexpr CUresult kCudaErrorInvalidPtx = 218;  // CUDA_ERROR_INVALID_PTX

inline constexpr CUdevice_attribute kAttributeMaxThreadsPerBlock = 1;
inline constexpr CUdevice_attribute kAttributeMaxBlockDimX = 2;  // Y = 3, Z = 4
inline constexpr CUdevice_attribute kAttributeMaxBlockDimY = 3;
inline constexpr CUdevice_attribute kAttributeMaxBlockDimZ = 4;
inline constexpr CUdevice_attribute kAttributeMaxGridDimX = 5;  // Y = 6, Z = 7
inline constexpr CUdevice_attribute kAttributeMaxGridDimY = 6;
inline constexpr CUdevice_attribute kAttributeMaxGridDimZ = 7;
inline constexpr CUdevice_attribute kAttributeMaxSharedMemoryPerBlock = 8;
inline constexpr CUdevice_attribute kAttributeWarpSize = 10;
inline constexpr CUdevice_attribute kAttributeMultiprocessorCount = 16;
inline constexpr CUdevice_attribute kAttributeComputeCapabilityMajor = 75;
inline constexpr CUdevice_attribute kAttributeComputeCapabilityMinor = 76;
inline constexpr CUdevice_attribute kAttributeMaxSharedMemoryPerBlockOptin = 97;

// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
inline constexpr CUfunction_attribute kFuncAttributeMaxDynamicSharedSizeBytes = 8;

inline constexpr unsigned kStreamNonBlocking = 1;  // CU_STREAM_NON_BLOCKING
inline constexpr unsigned kEventDefault = 0;       // CU_EVENT_DEFAULT (timing enabled)

// cuModuleLoadDataEx options. A buffer option's value is the char* buffer; a size option's value
// is the size itself cast to void* (in: the buffer's size, out: the bytes written).
inline constexpr CUjit_option kJitInfoLogBuffer = 3;            // CU_JIT_INFO_LOG_BUFFER
inline constexpr CUjit_option kJitInfoLogBufferSizeBytes = 4;   // ..._SIZE_BYTES
inline constexpr CUjit_option kJitErrorLogBuffer = 5;           // CU_JIT_ERROR_LOG_BUFFER
inline constexpr CUjit_option kJitErrorLogBufferSizeBytes = 6;  // ..._SIZE_BYTES

// X(name, exported): every function kiln calls, by cuda.h's name (what programs write) and the
// symbol the driver exports for it (what cuda.h's #define makes of that name). The header test
// checks each pair against cuda.h.
#define KILN_CUDA_FUNCTIONS(X)                               \
  X(cuInit, cuInit)                                          \
  X(cuDriverGetVersion, cuDriverGetVersion)                  \
  X(cuGetErrorName, cuGetErrorName)                          \
  X(cuGetErrorString, cuGetErrorString)                      \
  X(cuDeviceGet, cuDeviceGet)                                \
  X(cuDeviceGetCount, cuDeviceGetCount)                      \
  X(cuDeviceGetName, cuDeviceGetName)                        \
  X(cuDeviceGetAttribute, cuDeviceGetAttribute)              \
  X(cuDeviceTotalMem, cuDeviceTotalMem_v2)                   \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain)      \
  X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2) \
  X(cuCtxSetCurrent, cuCtxSetCurrent)                        \
  X(cuMemGetInfo, cuMemGetInfo_v2)                           \
  X(cuMemAlloc, cuMemAlloc_v2)                               \
  X(cuMemFree, cuMemFree_v2)                                 \
  X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2)                 \
  X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2)                 \
  X(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2)                 \
  X(cuMemsetD8Async, cuMemsetD8Async)                        \
  X(cuStreamCreate, cuStreamCreate)                          \
  X(cuStreamDestroy, cuStreamDestroy_v2)                     \
  X(cuStreamSynchronize, cuStreamSynchronize)                \
  X(cuEventCreate, cuEventCreate)                            \
  X(cuEventDestroy, cuEventDestroy_v2)                       \
  X(cuEventRecord, cuEventRecord)                            \
  X(cuEventSynchronize, cuEventSynchronize)                  \
  X(cuEventElapsedTime, cuEventElapsedTime_v2)               \
  X(cuModuleLoadDataEx, cuModuleLoadDataEx)                  \
  X(cuModuleUnload, cuModuleUnload)                          \
  X(cuModuleGetFunction, cuModuleGetFunction)                \
  X(cuFuncSetAttribute, cuFuncSetAttribute)                  \
  X(cuLaunchKernel, cuLaunchKernel)

/// The driver's functions, each field named by its exported symbol. Filled by LoadDriver; every
/// field is set (a driver lacking one is refused), except that cuEventElapsedTime_v2 (CUDA
/// 12.8+) falls back to the older cuEventElapsedTime, which has the same signature.
struct CudaApi {
  CUresult (*cuInit)(unsigned flags) = nullptr;
  CUresult (*cuDriverGetVersion)(int* version) = nullptr;
  CUresult (*cuGetErrorName)(CUresult error, const char** name) = nullptr;
  CUresult (*cuGetErrorString)(CUresult error, const char** text) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice* device, int ordinal) = nullptr;
  CUresult (*cuDeviceGetCount)(int* count) = nullptr;
  CUresult (*cuDeviceGetName)(char* name, int length, CUdevice device) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int* value, CUdevice_attribute attribute,
                                   CUdevice device) = nullptr;
  CUresult (*cuDeviceTotalMem_v2)(size_t* bytes, CUdevice device) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* context, CUdevice device) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease_v2)(CUdevice device) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext context) = nullptr;
  CUresult (*cuMemGetInfo_v2)(size_t* free, size_t* total) = nullptr;
  CUresult (*cuMemAlloc_v2)(CUdeviceptr* pointer, size_t bytes) = nullptr;
  CUresult (*cuMemFree_v2)(CUdeviceptr pointer) = nullptr;
  CUresult (*cuMemcpyHtoDAsync_v2)(CUdeviceptr destination, const void* source, size_t bytes,
                                   CUstream stream) = nullptr;
  CUresult (*cuMemcpyDtoHAsync_v2)(void* destination, CUdeviceptr source, size_t bytes,
                                   CUstream stream) = nullptr;
  CUresult (*cuMemcpyDtoDAsync_v2)(CUdeviceptr destination, CUdeviceptr source, size_t bytes,
                                   CUstream stream) = nullptr;
  CUresult (*cuMemsetD8Async)(CUdeviceptr destination, unsigned char value, size_t count,
                              CUstream stream) = nullptr;
  CUresult (*cuStreamCreate)(CUstream* stream, unsigned flags) = nullptr;
  CUresult (*cuStreamDestroy_v2)(CUstream stream) = nullptr;
  CUresult (*cuStreamSynchronize)(CUstream stream) = nullptr;
  CUresult (*cuEventCreate)(CUevent* event, unsigned flags) = nullptr;
  CUresult (*cuEventDestroy_v2)(CUevent event) = nullptr;
  CUresult (*cuEventRecord)(CUevent event, CUstream stream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent event) = nullptr;
  CUresult (*cuEventElapsedTime_v2)(float* milliseconds, CUevent start, CUevent end) = nullptr;
  CUresult (*cuModuleLoadDataEx)(CUmodule* module, const void* image, unsigned num_options,
                                 CUjit_option* options, void** option_values) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule module) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction* function, CUmodule module,
                                  const char* name) = nullptr;
  CUresult (*cuFuncSetAttribute)(CUfunction function, CUfunction_attribute attribute,
                                 int value) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                             unsigned block_x, unsigned block_y, unsigned block_z,
                             unsigned shared_bytes, CUstream stream, void** kernel_params,
                             void** extra) = nullptr;

  std::string library;  // the path dlopen()ed, for messages
};

/// The library LoadDriver opens for `path`: `path`, else $KILN_CUDA_DRIVER, else "libcuda.so.1".
std::string DriverLibrary(const std::string& path);

/// dlopen()s the driver (DriverLibrary(path)), resolves every function and calls cuInit(0); the
/// API is kept for the life of the process (the driver is never unloaded), failures are not.
/// FailedPrecondition: the library does not load ("kiln::Cuda: cannot load the CUDA driver
/// (libcuda.so.1: <dlerror>); is an NVIDIA driver installed? Use KILN_DEVICE=cpu to run on the
/// CPU"), lacks a function, or cuInit fails (no device, the toolkit's stub library, ...).
absl::StatusOr<const CudaApi*> LoadDriver(const std::string& path);

/// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)": cuGetErrorName and cuGetErrorString of `result`,
/// or "CUresult 999" where the driver does not know it (a stub library knows none).
std::string ResultText(const CudaApi& api, CUresult result);

/// The error for a failed call: "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"; out
/// of memory is ResourceExhausted, PTX the JIT rejects InvalidArgument, everything else
/// Internal.
absl::Status CallError(const CudaApi& api, const char* call, CUresult result);

}  // namespace kiln::runtime::cuda::internal
