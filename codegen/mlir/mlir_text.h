// MLIR export: an ir::Graph → the text of an MLIR module holding one func.func, for
// interoperability with MLIR-based compilers. Written by hand as text: kiln does not link MLIR.
//
// Dialects: func, linalg on tensors, tensor, arith, math and (for scatter_add only) scf. TOSA was
// considered and not used: MLIR 16's TOSA has no erf, no floor division or floored modulo, no
// unsigned integers and no NaN-propagating max, so most IR ops would need linalg anyway; one
// dialect family keeps every op's lowering uniform. Each IR op becomes:
//   elementwise ops, broadcast, flip, iota, gather → linalg.generic (flip and broadcast through
//     their indexing maps, gather with tensor.extract in the body);
//   reductions, argmax/argmin, matmul, conv, windows → linalg.generic with reduction iterators
//     over a linalg.fill of the identity (conv groups as a floordiv in the input map; conv
//     input dilation as tensor.insert_slice with strides; padding as tensor.pad);
//   reshape → tensor.collapse_shape / tensor.expand_shape; permute → linalg.transpose;
//   slice → tensor.extract_slice; pad → tensor.pad; concat → tensor.insert_slice;
//   scatter_add → scf.for loops carrying the tensor (tensor.extract / tensor.insert);
//   constants and fills → arith.constant dense<"0x..."> (bit-exact hex).
// The IR's dtypes map to f32, f64, f16, bf16, i32, i64, i8 (u8: signless, with unsigned ops
// where it matters: divui, remui, cmpi ult, extui, uitofp) and i1 (bool). The IR's semantics are
// kept explicitly where arith's differ: floor division and floored modulo with the IR's results
// for a zero divisor, saturating float → integer casts with NaN → 0, NaN-propagating max/min.
// random_uniform / random_normal have no equivalent (Unimplemented).
//
// Parameters become the function's arguments in Graph::Parameters() order, each with a
// {kiln.name = "..."} argument attribute; outputs are its results, with {kiln.name} when named.
// `mlir-opt-16 file.mlir` parses and verifies the text; docs/onnx.md "MLIR" gives a lowering
// pipeline to the LLVM dialect.
#pragma once

#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace kiln::codegen {

struct MlirExportOptions {
  /// The func.func's symbol name.
  std::string function_name = "main";
  /// true: a whole `module { ... }`; false: only the func.func, to paste into a module of one's
  /// own (several graphs in one module, a caller next to it).
  bool module = true;
};

/// The MLIR module text of `graph` (which must verify). InvalidArgument for a graph that does
/// not verify; Unimplemented, naming the op and node, for random ops.
absl::StatusOr<std::string> ExportMlir(const ir::Graph& graph,
                                       const MlirExportOptions& options = {});

/// One row per IR op (ir::kAllOps order): the MLIR ops it becomes, "" when it has none.
struct MlirExportRule {
  ir::Op op;
  const char* mlir;
};
std::span<const MlirExportRule> MlirExportRules();

}  // namespace kiln::codegen
