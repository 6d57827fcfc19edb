// Small whole models for the export tests (ONNX and MLIR): a quantized (int8) MLP, an MLP with
// softmax, a conv net
// (conv + bias + relu + max pool + linear) and a layer norm. Each comes with its parameters'
// random values; the weights (every parameter but the input "x") are also returned by name so the
// ONNX export can make them initializers.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor_data.h"

namespace kiln::test {

struct ExportModel {
  std::string name;
  ir::Graph graph;
  /// One value per graph.Parameters(), in order.
  std::vector<ir::TensorData> arguments;
  /// The same values by parameter name, without the input "x".
  std::map<std::string, ir::TensorData> weights;
};

/// quantized_mlp (int8 layers), mlp, conv_net, layer_norm. Deterministic.
std::vector<ExportModel> ExportModels();

}  // namespace kiln::test
