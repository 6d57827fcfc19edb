// ONNX export: an ir::Graph → a serialized ONNX ModelProto (default-domain opset 16 or 17).
//
//   kiln::onnx::ExportOptions options;
//   options.weights["fc1.weight"] = w;  // this parameter becomes an initializer, not an input
//   absl::StatusOr<std::string> bytes = kiln::onnx::ExportModel(graph, options);
//   absl::Status ok = kiln::onnx::ExportFile(graph, "model.onnx", options);
//
// Every IR op becomes one ONNX node or a short fixed sequence of them (ExportRules() lists the
// mapping; docs/onnx.md "Export" prints it). The IR's explicit forms map directly: broadcast →
// Expand, reductions → ReduceX with keepdims=1, conv → Conv (input dilation spelled out as
// Unsqueeze/Pad/Reshape/Slice), windows → Conv with a ones kernel (sum) or Pad + MaxPool (max).
// Where ONNX's semantics differ from the IR's (integer floor division and modulo, saturating
// float→int casts, dtypes an ONNX op does not accept) extra nodes keep the IR's result. Ops
// without an ONNX equivalent (random_*, which are Philox-exact in kiln; bitwise integer
// and/or/xor, which need opset 18) fail with an Unimplemented error naming the op and node.
//
// Graph inputs are the IR parameters not listed in ExportOptions::weights, in parameter order and
// with their names; outputs keep their names (unnamed outputs are called "output<i>"). Every IR
// value also gets a value_info entry with its type, so the model carries full static shapes.
//
// Protobuf and ONNX headers stay out of this header (see import.h).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/tensor_data.h"

namespace kiln::onnx {

struct ExportOptions {
  /// Default-domain opset of the model: 16 or 17 (ScatterElements' reduction="add" needs 16;
  /// ReduceMax/Min/Prod take axes as an attribute up to 17).
  int64_t opset = 17;
  /// ModelProto.producer_name / producer_version.
  std::string producer_name = "kiln";
  std::string producer_version = "0.1.0";
  /// GraphProto.name.
  std::string graph_name = "kiln";
  /// Values of parameters, by parameter name, that become initializers (weights) instead of
  /// graph inputs. Each value's type must equal its parameter's; a name that is not a parameter
  /// of the graph is an error.
  std::map<std::string, ir::TensorData> weights;
};

/// Serializes `graph` (which must verify) as an ONNX ModelProto. InvalidArgument for a graph that
/// does not verify or bad options; Unimplemented, naming the op, its node and its line, for an op
/// (or an op on a dtype) that has no ONNX equivalent.
absl::StatusOr<std::string> ExportModel(const ir::Graph& graph, const ExportOptions& options = {});

/// ExportModel, written to `path` (errors are prefixed with the path).
absl::Status ExportFile(const ir::Graph& graph, const std::string& path,
                        const ExportOptions& options = {});

/// A serialized ONNX TensorProto holding `value` (raw_data, little-endian) under `name`: the
/// files of ONNX's test-data layout (test_data_set_0/input_0.pb), readable with
/// onnx.numpy_helper.to_array.
std::string SerializeTensor(const ir::TensorData& value, const std::string& name);

/// One row of the export table: how an IR op is written. Unsupported rows (or dtypes) say why.
struct ExportRule {
  ir::Op op;
  /// The ONNX ops emitted, e.g. "ReduceSum (keepdims=1)"; empty when the op is not exportable.
  const char* onnx;
  /// Limits and notes ("" when none).
  const char* notes;
};

/// The export table, one row per IR op in ir::kAllOps order (a test checks that every op of the
/// op table has a row).
std::span<const ExportRule> ExportRules();

}  // namespace kiln::onnx
