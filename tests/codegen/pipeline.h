// Runs a graph the way the CPU backend will, minus LLVM: passes::Fuse, codegen::LowerGroup for
// every group, and codegen::EvalKernel on host buffers, group after group. Tests compare its
// outputs with ir::Interpret.
#pragma once

#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/kernel_ir.h"
#include "ir/graph.h"
#include "ir/tensor_data.h"
#include "passes/fusion.h"

namespace kiln::test {

struct PipelineOptions {
  /// Run contraction groups as the GEMM path will: the contraction alone (LowerGroup of a
  /// one-node group), then codegen::LowerEpilogue on its result.
  bool use_epilogue = false;
};

struct PipelineResult {
  std::vector<ir::TensorData> outputs;
  passes::FusionPlan plan;
  /// The kernels in launch order.
  std::vector<codegen::Kernel> kernels;
};

/// Fuses, lowers and evaluates `graph` on `arguments` (one per graph.Parameters()). A kernel
/// whose error flag is set fails with InvalidArgument naming the check and the bad index.
absl::StatusOr<PipelineResult> RunLowered(const ir::Graph& graph,
                                          std::span<const ir::TensorData> arguments,
                                          PipelineOptions options = {});

}  // namespace kiln::test
