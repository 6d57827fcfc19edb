// The CPU backend's GEMM and convolution with JIT-compiled micro-kernels.
//
// The driver (packing, blocking, threading, implicit im2col) lives in runtime/cpu/gemm.h so that
// libkiln_runtime can run it for ahead-of-time blobs without LLVM; this header re-exports its
// types into codegen::cpu and adds the entry points that take their micro-kernels from the JIT
// (generated as LLVM IR for the host's vector width on first use, kept in $KILN_CACHE_DIR).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/dtype.h"
#include "ir/tensor_data.h"
#include "runtime/cpu/gemm.h"

namespace kiln::codegen::cpu {

using runtime::cpu::ConvOutputShape;
using runtime::cpu::ConvParams;
using runtime::cpu::DenseMatrix;
using runtime::cpu::GemmActivation;
using runtime::cpu::GemmActivationName;
using runtime::cpu::GemmEpilogue;
using runtime::cpu::GemmParams;
using runtime::cpu::GemmTuning;
using runtime::cpu::Int8ConvParams;
using runtime::cpu::Int8Epilogue;
using runtime::cpu::Int8EpilogueOp;
using runtime::cpu::Int8EpilogueStep;
using runtime::cpu::Int8GemmParams;
using runtime::cpu::Int8Operand;
using runtime::cpu::MatrixView;

/// runtime::cpu::ExecuteGemm with the JIT's micro-kernels: the first call for a dtype, tile shape
/// and epilogue variant compiles its micro-kernel (tens of milliseconds); later calls reuse it.
absl::Status Gemm(const GemmParams& params, runtime::ThreadPool* pool = nullptr);

/// runtime::cpu::ExecuteConv with the JIT's micro-kernels.
absl::Status Conv(const ConvParams& params, runtime::ThreadPool* pool = nullptr);

/// runtime::cpu::ExecuteInt8Gemm / ExecuteInt8Conv with the JIT's int8 micro-kernels.
absl::Status Int8Gemm(const Int8GemmParams& params, runtime::ThreadPool* pool = nullptr);
absl::Status Int8Conv(const Int8ConvParams& params, runtime::ThreadPool* pool = nullptr);

/// The micro-kernel this host gets, for dumps and documentation.
struct GemmKernelInfo {
  std::string name;                // the LLVM function name, e.g. "kiln_gemm_f32_14x32_v512_relu"
  int mr = 0;                      // rows of the register tile
  int nr = 0;                      // columns of the register tile
  int vector_bits = 0;             // vector register width it uses
  int64_t mc = 0, nc = 0, kc = 0;  // default cache blocking
  std::string llvm_ir;             // as code generation got it (float kernels skip O3)
  std::string assembly;            // host assembly
};

/// Generates (without caching) the micro-kernel for `dtype` and `epilogue`'s variant and returns
/// its IR and assembly. Only the variant matters: pointers in `epilogue` are not read.
absl::StatusOr<GemmKernelInfo> DescribeGemmKernel(ir::DType dtype, const GemmEpilogue& epilogue,
                                                  const GemmTuning& tuning = {});

}  // namespace kiln::codegen::cpu
