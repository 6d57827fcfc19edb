// The CPU backend's graph compiler: ir::Graph → runtime::Executable. The pipeline is the shared
// one (codegen/graph_compiler.h); this backend supplies its hooks:
//
//   simplify passes (passes/simplify.h) → Fuse (passes/fusion.h) → per group:
//     elementwise / reduction / scatter / copy → LowerGroup → CpuCompiler (PrepareKernel, JIT)
//     contraction (f32/f64 matmul, conv) → the packed GEMM (gemm.h). A bias add and/or relu
//       epilogue runs in the GEMM's registers (GemmEpilogue); any other epilogue runs as its own
//       kernel over the result (LowerEpilogue). A permute of the last two axes read only by
//       such matmuls is never copied: the GEMM reads its source with swapped strides.
//   → PlanMemory (liveness, arena offsets) → runtime::Executable (slots + steps).
//
// KILN_DUMP=<dir> writes each compile's stages into a fresh subfolder: the graph before and after
// every pass (NN-<pass>.kir), fusion.txt (groups and every fusion decision with its reason),
// kernel_K.kir (kernel IR), kernel_K.ll and kernel_K.s (LLVM IR after O3 and assembly),
// memory_plan.txt and executable.txt.
//
// Compiled graphs are cached in memory by ir::SignatureHash (checked against the graph itself,
// so a hash collision costs a compile, never a wrong result); kernels are also cached on disk
// under KILN_CACHE_DIR by CpuCompiler, so a second process skips LLVM.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/graph_compiler.h"
#include "codegen/kernel_ir.h"
#include "ir/graph.h"
#include "ir/tensor_data.h"
#include "runtime/executable.h"

namespace kiln::codegen::cpu {

/// A graph compiled for the host CPU.
struct CompiledGraph {
  /// The graph as given (before simplification): the cache compares against it.
  ir::Graph source;
  runtime::Executable executable;
  /// Types of the parameters (positional) and outputs.
  std::vector<ir::TensorType> parameter_types;
  std::vector<ir::TensorType> output_types;
  /// Number of kernels launched per run and of groups that went to the GEMM.
  int num_kernels = 0;
  int num_gemm_steps = 0;
  /// Of those, the int8 GEMMs whose B is a constant of the graph, packed once at compile time
  /// (runtime::cpu::PackInt8B) instead of on every run.
  int num_packed_weights = 0;
  /// The dump folder of this compile ("" when KILN_DUMP was unset).
  std::string dump_directory;
  /// Per parameter: whether it was compiled as donatable (part of the cache key).
  std::vector<bool> donatable;
  /// Per output: the parameter whose buffer the output is written into, or -1 (see
  /// CompileGraph). Empty when no parameter was donatable.
  std::vector<int> donor_of_output;
  /// The kernel IR behind each step of `executable` that launches a generated kernel, by step
  /// index (GEMM/convolution steps run runtime::cpu::ContractionKernel and copies
  /// runtime::CopyBytesKernel instead). Ahead-of-time compilation (codegen/aot) compiles these
  /// again for each target triple.
  std::map<int, Kernel> step_kernels;
};

/// Compiles `graph` (which must verify) for the host CPU. Errors name the stage and, for
/// kernel-level failures, the fusion group and its root node.
///
/// Buffer donation (JAX's donate_argnums): `donatable` (empty, or one flag per parameter) marks
/// parameters whose buffers the caller will hand over at run time. An output whose type equals a
/// donatable parameter's is then written into that parameter's buffer, when that is safe: no step
/// reads the parameter after the output's writing step begins, or the writing step is an
/// elementwise kernel that reads the parameter only at the element it writes, before writing it
/// (that kernel is rebuilt to load and store one buffer, so its noalias arguments stay true).
/// CompiledGraph::donor_of_output records the pairs.
absl::StatusOr<std::shared_ptr<const CompiledGraph>> CompileGraph(const ir::Graph& graph,
                                                                  std::vector<bool> donatable = {});

/// Runs a compiled graph: `arguments` are the values of the graph's parameters in order (types
/// checked; data used in place when 64-byte aligned, which ir::TensorData always is).
///
/// `donated` (empty, or one flag per parameter): the caller hands over argument j's buffer (it
/// holds the only reference and will not read it again). An output paired with argument j
/// (donor_of_output) is then computed in that buffer, which is moved into the result: no
/// allocation, no copy, and arguments[j] is left empty. Without the flag, the paired output gets a
/// buffer of its own, first filled with a copy of argument j (the kernel reads it from there).
/// A donated argument must point to a TensorData object not created const (it is moved from).
/// On an error, donated arguments hold unspecified values.
absl::StatusOr<std::vector<ir::TensorData>> RunCompiledGraph(
    const CompiledGraph& compiled, std::span<const std::shared_ptr<const ir::TensorData>> arguments,
    std::span<const bool> donated = {});

/// Counters of the process-wide compiled-graph cache.
using codegen::GraphCacheStats;
GraphCacheStats GetGraphCacheStats();

/// The process-wide cache's compiled `graph` for the donation flags `donatable` (empty, or one
/// flag per parameter; see CompileGraph), compiling it on a miss.
absl::StatusOr<std::shared_ptr<const CompiledGraph>> CompileCached(
    const ir::Graph& graph, std::span<const bool> donatable = {});

/// Compiles (or finds in the cache) and runs `graph`: the `kiln::Cpu` backend's executor.
/// `donated` as for RunCompiledGraph; it is also the compile's `donatable`, and part of the cache
/// key (a graph compiled with donation differs from one without).
absl::StatusOr<std::vector<ir::TensorData>> CompileAndRun(
    const ir::Graph& graph, std::span<const std::shared_ptr<const ir::TensorData>> arguments,
    std::span<const bool> donated = {});

}  // namespace kiln::codegen::cpu
