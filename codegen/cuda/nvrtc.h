// NVRTC, NVIDIA's runtime compiler of CUDA C++, loaded at run time with dlopen: CUDA C source →
// PTX for one GPU architecture. Nothing of CUDA is needed to build kiln (no header, no library
// at link time); a program that compiles CUDA kernels finds libnvrtc.so.13 (then .12) when it
// first compiles, through the dynamic loader's search path and then /usr/local/cuda/lib64, or
// the file $KILN_NVRTC names. Running PTX needs no NVRTC (the driver JIT-compiles it: blobs).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::codegen::cuda {

/// OK when NVRTC loads; otherwise FailedPrecondition naming the files tried and dlopen's error
/// (tests skip with this message).
absl::Status NvrtcAvailable();

/// "13.0": the loaded NVRTC's version (NvrtcAvailable must hold).
absl::StatusOr<std::string> NvrtcVersion();

/// The PTX of `source` compiled for `arch` ("sm_80", "sm_90": PTX for compute_80 / compute_90),
/// as C++20 (signed shifts and conversions to signed types are defined there), with IEEE
/// division and square root and no contraction of multiplies and adds into FMAs (--fmad=false:
/// kernels round as the kernel IR's evaluator does; the matmul templates call fma themselves).
/// Results are cached in memory by (source, arch). An invalid program is Internal, carrying NVRTC's
/// log and the numbered source (a code generator bug); `name` names it.
absl::StatusOr<std::string> CompileToPtx(const std::string& source, const std::string& name,
                                         const std::string& arch);

/// Programs NVRTC has compiled in this process (cache misses of CompileToPtx).
int64_t NvrtcCompiles();

}  // namespace kiln::codegen::cuda
