// A direct evaluator of kernel IR: runs a Kernel on host buffers with the semantics documented in
// kernel_ir.h, one statement at a time. It is slow and obviously correct: tests use it to check
// the lowering against the reference interpreter without LLVM, and it is the oracle for the
// emitters (an emitted kernel must produce the same bits, up to the documented freedoms: fma
// contraction, reduction order and the accuracy of transcendental functions).
//
// Float ops are computed in double and rounded once to the expression's type, so single f32 ops
// are correctly rounded (transcendental functions as accurate as libm's double versions), which
// is what the reference interpreter does.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "codegen/kernel_ir.h"
#include "ir/tensor_data.h"

namespace kiln::codegen {

/// Runs iterations [begin, end) of the outer loop. `args[i]` points to arg i's buffer
/// (kernel.args[i].num_elements elements of its dtype, row-major; f16/bf16 as bit patterns, bool
/// as one byte). An index out of an arg's range or a malformed kernel is an Internal error
/// (a lowering bug; well-formed lowered kernels never do it).
absl::Status EvalKernel(const Kernel& kernel, std::span<void* const> args, int64_t begin,
                        int64_t end);

/// Runs the whole range [0, parallel_extent).
absl::Status EvalKernel(const Kernel& kernel, std::span<void* const> args);

/// Convenience for tests: args[i] is the buffer of arg i; its dtype and element count must match
/// the arg (InvalidArgument otherwise). Runs the whole range.
absl::Status EvalKernelOnTensors(const Kernel& kernel, std::span<ir::TensorData* const> args);

}  // namespace kiln::codegen
