// Hand-built training-step and inference graphs for kiln_bench (issue #4's targets), spelled the
// way reverse-mode autodiff (passes/autodiff.h) produces them, so the CPU backend's compile of a
// real training step can be measured before the autodiff pass lands:
//
//  - linear: matmul(x, permute(W)) + broadcast(bias), W is [out, in] (torch layout);
//  - relu: max(x, fill 0); its gradient select(x > 0, g, fill 0);
//  - loss: log-softmax cross-entropy from logits against a one-hot f32 target, mean over the
//    batch; dlogits = (softmax - onehot) * 1/N;
//  - dW = matmul(permute(dY), X) [out, in], dX = matmul(dY, W), db = reduce_sum over the batch;
//  - conv: dW = permute(conv(permute(x), permute(dY))), dX = conv(dY padded, flipped and
//    transposed W); max pool 2x2: the gradient goes to the elements equal to their window's max;
//  - SGD with momentum: v' = 0.9 v + g; W' = W - lr * v' (lr a rank-0 parameter).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::bench {

/// A graph plus what its parameters are, for building arguments.
struct TrainGraph {
  ir::Graph graph;
  /// Per parameter (graph.Parameters() order): "x", "onehot", "lr", "W...", "b...", "v...".
  std::vector<std::string> parameter_names;
  /// For a training step: output k + 1 is the new value of parameter update_of_output[k]
  /// (output 0 is the loss). Empty for inference.
  std::vector<int> update_of_output;
};

/// MLP sizes[0] -> sizes[1] -> ... -> sizes.back() with ReLU between layers.
TrainGraph MlpTrainStep(int64_t batch, const std::vector<int64_t>& sizes, double momentum = 0.9);
/// The forward pass of the same MLP to logits.
TrainGraph MlpInference(int64_t batch, const std::vector<int64_t>& sizes);
/// conv 1->32 3x3, relu, maxpool 2, conv 32->64 3x3, relu, maxpool 2, linear 1600->128, relu,
/// linear 128->10, on [batch, 1, 28, 28].
TrainGraph CnnTrainStep(int64_t batch, double momentum = 0.9);

}  // namespace kiln::bench
