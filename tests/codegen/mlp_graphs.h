// The two MLPs that the blob tests compile ahead of time (tests/aot: the CPU and Vulkan sections;
// tests/conformance/blob_test.cc: every backend's section), with their random inputs and
// weights, so that each suite runs the very same graphs and values.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor_data.h"

namespace kiln::test {

/// Parameters bound by name at compile time (aot::CompileOptions::weights).
using NamedWeights = std::vector<std::pair<std::string, std::shared_ptr<const ir::TensorData>>>;

struct MlpCase {
  ir::Graph graph;
  /// The values of the parameters not bound as weights, in graph order.
  std::vector<ir::TensorData> inputs;
  NamedWeights weights;
};

/// x[batch, 784] -> relu(x W1 + b1) -> relu(. W2 + b2) -> . W3 + b3 -> softmax ("probs"); the
/// weights and biases are random constants of the graph, so `weights` is empty.
MlpCase ConstantMlp(int64_t batch);

/// x[batch, 64] -> relu(x W1 + b1) -> . W2 -> softmax ("probs") and the logits ("logits");
/// w1, b1 and w2 are parameters, bound in `weights`.
MlpCase WeightBoundMlp(int64_t batch);

/// Every parameter's value, in graph order, as the interpreter and the JIT take them: a bound
/// parameter's weight, the next of `inputs` for the others.
std::vector<ir::TensorData> AllArguments(const ir::Graph& graph,
                                         const std::vector<ir::TensorData>& inputs,
                                         const NamedWeights& weights);

}  // namespace kiln::test
