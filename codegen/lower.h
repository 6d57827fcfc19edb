// Lowering: one fusion group (passes/fusion.h) → one kernel (codegen/kernel_ir.h).
//
// Every node of a group is a scalar function of its output index: LowerGroup evaluates the
// group's outputs at each element, and each node becomes expressions at the index its consumer
// asks for. Indices are kept as "segments" (runs of axes linearised into one i64), so movement
// ops cost index arithmetic only where they change the layout:
//  - reshape passes linear runs through (axes split/merged only where the dims do not line up);
//  - permute moves runs; broadcast sets broadcast axes to 0 (a stride-0 load); slice adds
//    starts and multiplies by strides; flip reverses; pad and concat select between the value
//    and a load at a clamped, always-in-bounds index;
//  - gather loads its index, checks it (an out-of-range index stores into the kernel's error
//    flag, ArgRole::kErrorFlag) and loads the data at the clamped index;
//  - reductions, windows and (in LowerGroup's reference path) matmul/conv are Reduce
//    statements; in a kReduction group each reduction is computed once per row before the
//    stores, and its consumers in the row read the accumulator;
//  - random_uniform/random_normal are Philox4x32-10 written in kernel IR integer ops (u32/u64
//    mul, shifts, xor), bit-exact with ir/random.h; fill, iota and splat constants are
//    immediates or index arithmetic.
//
// Kernel shapes: elementwise groups of elementwise ops only run flat (parallel_extent = element
// count, one store per gid); groups with movement run rows of the output's last axis (gid over
// the other axes, an inner Loop over the last), so broadcasts along leading axes cost nothing in
// the inner loop. Reduction groups run gid over the rows of the outer shape: the Reduce
// statements, the stores of row-shaped outputs, then one inner Loop per reduced input size that
// stores the full-shaped outputs. scatter_add runs gid over the fibres of its axis: copy x's
// fibre, then add the src elements serially in the interpreter's order. sort/argsort run gid
// over every element: a Reduce counts the fibre's elements that sort before it (its rank), and
// it (or its position) is stored at that rank.
//
// dtypes: values are computed in ComputeType(dtype): f16/bf16 in f32, rounded on store (and by
// casts to f16/bf16, which round exactly like the interpreter). A fused chain of f16/bf16 ops
// therefore rounds once at the end instead of after each op: results may differ from the
// interpreter by about one unit in the last place of the dtype per op in the chain. Reductions
// accumulate in the compute type (f32 for f32/f16/bf16; the interpreter uses double), so sums
// differ by the usual float summation error. Integer ops follow the interpreter exactly (floor
// div/mod, division by zero gives 0, wraparound).
//
// Kernel args: the group's inputs (ascending node id), then its outputs (ascending), then the
// error flag if the kernel checks indices.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/kernel_ir.h"
#include "ir/graph.h"
#include "passes/fusion.h"

namespace kiln::codegen {

/// Lowers a group of any kind. kContraction groups get a straightforward reference loop nest
/// (a Reduce per output element plus the epilogue): correct, not fast; the CPU backend uses the
/// GEMM generator with LowerEpilogue instead. `name` defaults to "<kind>_<root id>".
absl::StatusOr<Kernel> LowerGroup(const ir::Graph& graph, const passes::FusionGroup& group,
                                  std::string name = "");

/// The elementwise epilogue of a kContraction group, for the GEMM generator.
///
/// `kernel` is a complete, evaluable kernel over the contraction's output: gid runs over axis 0
/// and nested Loops over the other axes; the innermost body stores every group output. It reads
/// the contraction's result from `contraction_arg` (args: the contraction result, then the
/// other inputs the epilogue reads, then the outputs), so it can run as a separate pass after a
/// plain GEMM. A GEMM generator fuses it instead: for each output element it binds the loop
/// variables `coords[i]` (coords[0] is kGid) to the element's coordinates, substitutes its
/// accumulator for `contraction_value` (the Load from contraction_arg at that element), and emits
/// `output_values[k]` stored at `output_indices[k]` into `output_args[k]`.
struct Epilogue {
  Kernel kernel;
  ir::NodeId contraction = ir::kInvalidNode;
  ArgId contraction_arg = -1;
  ValueId contraction_value = kNoValue;
  std::vector<VarId> coords;
  /// One per group output (group.outputs order).
  std::vector<ir::NodeId> outputs;
  std::vector<ArgId> output_args;
  std::vector<ValueId> output_indices;
  std::vector<ValueId> output_values;
};

/// Lowers the epilogue of a kContraction group (InvalidArgument for other kinds).
absl::StatusOr<Epilogue> LowerEpilogue(const ir::Graph& graph, const passes::FusionGroup& group);

}  // namespace kiln::codegen
