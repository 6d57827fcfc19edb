// Machine code for one LLVM target triple: the graph's kernels and the GEMM micro-kernels in one
// relocatable object. Internal to codegen/aot; names LLVM types by forward declaration only.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/kernel_ir.h"
#include "runtime/cpu/cpu_features.h"
#include "runtime/cpu/gemm_internal.h"

namespace kiln::aot {

struct TargetInfo {
  std::string triple;
  std::string cpu;
  std::string features;
  runtime::cpu::gemm_internal::TargetVectors vectors;
};

/// The host as the JIT compiles for it: its CPU name and every feature it has, or the x86-64
/// level KILN_CPU pins (then the blob's host section runs on any CPU of that level).
absl::StatusOr<TargetInfo> HostTargetInfo();

/// x86-64 level `level` (x86-64-v2 to -v4; kHost: the host as LLVM detects it) as the JIT
/// compiles for it under KILN_CPU: LLVM's CPU of that name with exactly its features, on the
/// host's triple. The host need not be able to run it.
absl::StatusOr<TargetInfo> LevelTargetInfo(runtime::cpu::CpuLevel level);

/// A generic CPU of `triple` (normalised by LLVM, e.g. "aarch64-linux-gnu" →
/// "aarch64-unknown-linux-gnu"): baseline features only, so the code runs on any CPU of the
/// architecture. x86_64 and aarch64 are supported (the GEMM needs to know their registers).
absl::StatusOr<TargetInfo> GenericTargetInfo(const std::string& triple);

/// A GEMM micro-kernel: the f32/f64 one for (dtype, shape, variant), or with `int8` set the int8
/// one for (shape, *int8) (dtype and variant unused).
struct MicroKernelRequest {
  ir::DType dtype;
  runtime::cpu::gemm_internal::KernelShape shape;
  runtime::cpu::gemm_internal::EpilogueVariant variant;
  std::optional<runtime::cpu::gemm_internal::Int8EpilogueVariant> int8;
};

/// Compiles `kernels` (symbol, kernel IR: PrepareKernel, the CPU emitter, O3 for the target) and
/// the micro-kernels into one ELF relocatable object for `target`.
absl::StatusOr<std::string> CompileObject(
    const TargetInfo& target, const std::vector<std::pair<std::string, codegen::Kernel>>& kernels,
    const std::vector<MicroKernelRequest>& micro_kernels);

}  // namespace kiln::aot
