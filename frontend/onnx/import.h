// ONNX import: a `.onnx` model (ModelProto, default-domain opsets 1 to 28) → an ir::Graph over
// static shapes.
//
//   absl::StatusOr<kiln::onnx::ImportedModel> m = kiln::onnx::ImportFile("model.onnx");
//   // m->graph's parameters: the model's inputs (m->input_names) and, by default, one parameter
//   // per initializer, named like the initializer ("fc1.weight"), whose value is m->weights[name].
//   std::vector<ir::TensorData> args = m->Arguments({x});  // inputs in order, then the weights
//   ir::Interpret(m->graph, args);
//
// ONNX's implicit numpy broadcasting and its dtype rules become the IR's explicit reshape /
// broadcast / cast (docs/ir.md). Shapes are static: an input dimension given as a dim_param (or
// missing) needs ImportOptions::input_shapes. Values that only depend on shapes and constants
// (Shape → Gather → Concat → Reshape chains, ConstantOfShape, Range, ...) are evaluated during
// import and never reach the graph. docs/onnx.md lists the supported operators.
//
// Each node is read as its operator's version in the model's opset defines it (e.g. Squeeze's
// axes: an attribute before opset 13, an input from 13; Softmax before 13: over the input coerced
// to 2-D). An operator that the opset does not have yet (Gelu in an opset-17 model) or no longer
// has (Upsample from 10), or an attribute or input that its version lacks, is an error naming the
// node and the opset. kiln implements the operators as opsets 7 to 22 define them; a model of an
// older or newer opset (up to the newest of the onnx package that generated operator_versions.inc)
// imports when each of its operators is defined there as in the nearest of those opsets, up to
// new element types and new optional attributes that the node does not set (Relu-6 at opset 6,
// Cast-25 at opset 28); otherwise the error names the node and both versions.
//
// Protobuf and ONNX headers stay out of this header on purpose (they are large and need
// ONNX_ML / ONNX_NAMESPACE defines); everything here is plain kiln types.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/tensor_data.h"

namespace kiln::onnx {

struct ImportOptions {
  /// Static shapes for graph inputs, by input name. Needed for every input with a dynamic
  /// dimension (dim_param or an unset dim); a given shape must agree with the model's fixed dims.
  std::map<std::string, ir::Shape> input_shapes;
  /// true: each initializer becomes a parameter of the graph (named like the initializer, value in
  /// ImportedModel::weights), so one compiled graph serves any weights of the same shapes.
  /// false: initializers are baked into the graph as constants (weights stays empty).
  bool weights_as_parameters = true;
  /// The folder that external tensor data (TensorProto data_location EXTERNAL; PyTorch writes
  /// `model.onnx.data` beside the model) is read from: each tensor's `location` is relative to it
  /// and must stay inside it (no absolute path, no '..', no symlink leading out). ImportFile uses
  /// the model file's folder when this is empty; ImportBytes has no folder of its own, so an
  /// external tensor is an error unless this (or external_data_files) is set.
  std::string external_data_dir;
  /// Instead of a folder: the external data files' contents by location ("model.onnx.data"),
  /// held by the caller until the import returns. When not empty, no file is read from disk.
  std::map<std::string, std::string_view> external_data_files;
};

/// The result of an import.
struct ImportedModel {
  /// Parameters: first the model's inputs (in the ONNX order, names as in the model), then one
  /// per initializer used by the graph (weights_as_parameters). Outputs are named like the ONNX
  /// graph outputs, in order.
  ir::Graph graph;
  /// The ONNX graph inputs that are real inputs (initializers excluded), in order.
  std::vector<std::string> input_names;
  /// The ONNX graph outputs, in order.
  std::vector<std::string> output_names;
  /// Initializer values by name: the graph parameter of the same name takes this value.
  std::map<std::string, ir::TensorData> weights;
  /// The default-domain opset the model imports, and its producer ("pytorch 1.13.1").
  int64_t opset_version = 0;
  std::string producer;

  /// The graph's positional arguments: `inputs` (one per input_names entry, in order) followed by
  /// the weights in parameter order. Errors when the count differs.
  absl::StatusOr<std::vector<ir::TensorData>> Arguments(std::vector<ir::TensorData> inputs) const;
};

/// Imports a serialized ModelProto. Bytes are untrusted: malformed protobuf, inconsistent
/// tensors (raw_data length mismatch, bad dims), external data out of the file's bounds or
/// outside its folder (or with neither ImportOptions::external_data_dir nor
/// external_data_files set), missing inputs or unsupported
/// operators give InvalidArgument / Unimplemented naming the node (an unsupported model lists every
/// unsupported operator with its node names in one message), never a crash.
absl::StatusOr<ImportedModel> ImportBytes(std::string_view bytes,
                                          const ImportOptions& options = {});

/// Reads `path` and imports it (errors are prefixed with the path). External data is read from
/// `path`'s folder unless `options` names another (external_data_dir / external_data_files): the
/// files are memory-mapped, one mapping per file for the whole import, and each tensor's bytes
/// are copied into its ir::TensorData.
absl::StatusOr<ImportedModel> ImportFile(const std::string& path,
                                         const ImportOptions& options = {});

/// Decodes a serialized TensorProto (the ONNX test-data layout's input_0.pb / output_0.pb, or
/// numpy_helper.from_array(...).SerializeToString()) with the same checks as initializers (a
/// tensor stored as external data is an error: the ONNX test-data layout keeps data inside).
/// The real inputs of the model at `path` (graph inputs that are not initializers), in order,
/// without importing it (for choosing ImportOptions::input_shapes).
absl::StatusOr<std::vector<std::string>> ModelInputNames(const std::string& path);

absl::StatusOr<ir::TensorData> ReadTensorProto(std::string_view bytes);
/// The same for a file (errors are prefixed with the path).
absl::StatusOr<ir::TensorData> ReadTensorProtoFile(const std::string& path);

/// The default-domain ONNX operators the importer has a lowering for, sorted by name ("Abs",
/// "Add", ...). docs/onnx.md says which attributes, dtypes and opsets each one takes; a model
/// using only these operators may still be refused for those reasons.
std::vector<std::string> SupportedOperators();

}  // namespace kiln::onnx
