// The launch-plan step that runs a matmul or a convolution through the packed GEMM driver
// (runtime/cpu/gemm.h). Shared by the JIT (codegen/cpu/graph_compiler.cc) and the blob loader
// (runtime/blob.cc), which differ only in where the micro-kernels come from.
#pragma once

#include <cstdint>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/gemm_internal.h"
#include "runtime/thread_pool.h"

namespace kiln::runtime::cpu {

/// What a GEMM or convolution step needs besides its operand pointers. Its owner (the compiled
/// graph or the loaded blob) keeps it alive through ExecutableSpec::keep_alive; a constant slot
/// holds its address.
struct ContractionStep {
  bool is_conv = false;
  /// The epilogue's bias vector is args[4] (matmul: a column bias, conv: a per-channel bias).
  bool has_bias = false;
  /// An int8 contraction (matmul / conv {accumulate=i32}): int8_gemm / int8_conv run instead of
  /// gemm / conv, and args[4], args[5], ... are the vectors of its epilogue steps with a row or
  /// column operand, in step order.
  bool is_int8 = false;
  GemmParams gemm;           // data pointers filled per run
  ConvParams conv;           // data pointers filled per run
  Int8GemmParams int8_gemm;  // data and vector pointers filled per run
  Int8ConvParams int8_conv;  // data and vector pointers filled per run
  ThreadPool* pool = nullptr;
  const gemm_internal::MicroKernelProvider* kernels = nullptr;
};

/// runtime::KernelFn for a contraction: args = [lhs, rhs, out, &descriptor, bias?] (int8: the
/// epilogue vectors instead of the bias). It runs on
/// the calling thread (extent 1) and parallelises inside the GEMM. A failure (a micro-kernel the
/// provider lacks) throws std::runtime_error, which Executable::Run turns into an error naming
/// the step.
void ContractionKernel(void* const* args, int64_t begin, int64_t end);

}  // namespace kiln::runtime::cpu
