// The CPU emitter: a kernel-IR Kernel becomes one LLVM function with the runtime's kernel ABI
//
//   void <symbol>(void* const* args, int64_t begin, int64_t end)
//
// that runs outer iterations gid in [begin, end). Internal to codegen/cpu (jit.h is the public
// entry point); names LLVM types by forward declaration only.
//
// What the generated code assumes and guarantees:
//  - Buffers: args[i] points to kernel.args[i].num_elements elements of its dtype. Args of more
//    than one element are assumed aligned to EmitOptions::assume_alignment bytes (the runtime's
//    buffers are 64-byte aligned); one-element args (scalar slots) and the error flag only to
//    their element size. Stores to the error flag are relaxed atomic stores.
//    Distinct args are assumed not to overlap (the pointers are `noalias`), so LLVM vectorises
//    without run-time overlap checks. The one overlap that stays correct is an output that is the
//    same buffer as an input read only at the element being written (an in-place elementwise
//    update); anything else (an output overlapping an input read at other indices) is undefined.
//  - Loops are plain counted loops (Loop statements from 0 to a constant extent, the outer loop
//    from begin to end), which LLVM's loop vectoriser turns into vector code for the host.
//  - Fast-math: `contract` on every float add/sub/mul (a*b+c may become one fma, as the kernel
//    IR allows). Sum and product reductions additionally carry `reassoc` and `nsz`, so the
//    vectoriser may reorder them: a float sum is then accumulated in several interleaved partial
//    sums and added pairwise at the end, which changes the rounding (usually for the better, the
//    error bound of a sum of n terms is still O(n) ulps) and may turn -0 into +0. Max/min
//    reductions stay exact (max and min are associative) and keep NaN propagation: they are
//    computed as an ordered max/min plus a "saw a NaN" flag.
//  - f16/bf16 buffers are widened to f32 exactly on load and rounded to nearest even on store
//    with the bit-exact algorithms of ir/dtype.h (NaN stays a quiet NaN); RoundToF16/BF16 of an
//    f64 rounds once (round-to-odd to f32 first, as ir/dtype.cc). No libcalls, so they vectorise.
//  - Integer semantics per docs/ir.md without undefined behaviour: floored div/mod with a zero
//    divisor giving 0, INT_MIN / -1 wrapping (the divisor is replaced before the sdiv, so no
//    poison), shifts by out-of-range amounts defined as in kernel_ir.h, saturating float→int
//    casts (llvm.fpto[su]i.sat, NaN → 0).
//  - f32 transcendental functions that reach the emitter (sin, cos, pow, and exp/log/tanh/erf if
//    ExpandMath did not run) and f32 rsqrt are computed in double with libm and rounded once, like
//    kernel_eval; f64 ones call libm directly.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "codegen/kernel_ir.h"

namespace llvm {
class Function;
class Module;
}  // namespace llvm

namespace kiln::codegen::cpu {

struct EmitOptions {
  /// Alignment in bytes asserted for every buffer (0 or 1: only the element size).
  int64_t assume_alignment = 64;
};

/// The kernel-IR rewrites the CPU applies before EmitKernel, in order: HoistInvariantChecks
/// (index checks out of the loops they do not vary in, so those loops vectorise),
/// ReuseReducedValues (a gid's statements run in order on one thread here, so a value a
/// reduction computed may be stored early and loaded back; it must see the transcendental
/// functions before they are expanded), then ExpandMath when `expand_math`. The JIT and the AOT
/// compiler both call it.
Kernel PrepareKernel(Kernel kernel, bool expand_math = true);

/// Adds `kernel` to `module` as the external function `symbol` (plus an internal always-inline
/// body function `<symbol>.body` holding the `noalias` parameters). The module should already be
/// configured for the target (LlvmJit::ConfigureModule). Checks the kernel with VerifyKernel
/// first; an unsupported combination of op and type is an Internal error naming the kernel and
/// the value.
absl::StatusOr<llvm::Function*> EmitKernel(const Kernel& kernel, const std::string& symbol,
                                           llvm::Module& module, const EmitOptions& options = {});

}  // namespace kiln::codegen::cpu
