// The GEMM micro-kernel generator (LLVM IR for an MR x NR register tile) and the JIT's
// MicroKernelProvider. Internal to codegen/ (codegen/cpu and codegen/aot); names LLVM types by
// forward declaration only.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "ir/dtype.h"
#include "runtime/cpu/gemm_internal.h"

namespace llvm {
class Module;
}  // namespace llvm

namespace kiln::codegen::cpu {
struct HostTarget;  // llvm_jit.h
}  // namespace kiln::codegen::cpu

namespace kiln::codegen::cpu::gemm_internal {

using runtime::cpu::gemm_internal::EpilogueVariant;
using runtime::cpu::gemm_internal::Int8EpilogueVariant;
using runtime::cpu::gemm_internal::Int8MicroKernelFn;
using runtime::cpu::gemm_internal::KernelShape;
using runtime::cpu::gemm_internal::MicroKernelFn;
using runtime::cpu::gemm_internal::MicroKernelProvider;
using runtime::cpu::gemm_internal::TargetVectors;

/// The vector registers of the JIT's target (LlvmJit::host(): the host, or the KILN_CPU level).
absl::StatusOr<TargetVectors> HostVectors();
/// The vector registers code compiled for `target` (its triple and LLVM features) has: what its
/// GEMM micro-kernels are generated for.
TargetVectors VectorsFor(const HostTarget& target);

/// The JIT's provider: micro-kernels generated for the host on first use and cached for the life
/// of the process (and on disk under $KILN_CACHE_DIR). Thread-safe, never destroyed.
const MicroKernelProvider& JitMicroKernels();

/// Adds the micro-kernel for (dtype, shape, variant) to `module` (already configured for its
/// target) as the external function MicroKernelName(dtype, shape, variant), and returns that
/// name. Used by the JIT and by ahead-of-time compilation for other triples.
std::string EmitMicroKernel(llvm::Module& module, ir::DType dtype, const KernelShape& shape,
                            const EpilogueVariant& variant);

/// Adds the int8 micro-kernel for (shape, variant) to `module` (its triple set) as the external
/// function Int8MicroKernelName(shape, variant), and returns that name. `target_features` is
/// the subtarget feature string the module is compiled with ("+avx2,..."): x86's pmaddwd is used
/// at the widths it has.
std::string EmitInt8MicroKernel(llvm::Module& module, const KernelShape& shape,
                                const Int8EpilogueVariant& variant,
                                const std::string& target_features);

/// Generates the kernel for the host without caching and returns its text.
struct KernelText {
  std::string name, llvm_ir, assembly;
};
absl::StatusOr<KernelText> GenerateKernelText(ir::DType dtype, const KernelShape& shape,
                                              const EpilogueVariant& variant);
absl::StatusOr<KernelText> GenerateInt8KernelText(const KernelShape& shape,
                                                  const Int8EpilogueVariant& variant);

}  // namespace kiln::codegen::cpu::gemm_internal
