// How the CPU graph compiler hands contraction groups to the GEMM: a permute of the last two axes
// that only feeds matmuls is read as a strided (transposed) view instead of being copied, a bias
// add and relu after a matmul or convolution run in the GEMM's register epilogue (no kernel of
// their own), and one-row products take the matrix-vector path. Every graph is also checked
// against the reference interpreter, including the cases that must fall back to a separate
// epilogue kernel.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "codegen/cpu/graph_compiler.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/interpreter.h"

namespace kiln::codegen::cpu {
namespace {

using ir::NodeId;
using ir::Op;

// Runs `graph` compiled and interpreted on random arguments; returns the compiled graph.
std::shared_ptr<const CompiledGraph> CompileAndCompare(const ir::Graph& graph) {
  absl::StatusOr<std::shared_ptr<const CompiledGraph>> compiled = CompileGraph(graph);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return nullptr;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<ir::TensorData> plain;
  std::vector<std::shared_ptr<const ir::TensorData>> shared;
  for (NodeId p : graph.Parameters()) {
    const ir::TensorType& type = graph.node(p).type;
    ir::TensorData data = ir::TensorData::Uninitialized(type.dtype, type.shape);
    for (int64_t i = 0; i < data.num_elements(); ++i) data.SetDouble(i, uniform(rng));
    plain.push_back(data);
    shared.push_back(std::make_shared<const ir::TensorData>(std::move(data)));
  }
  absl::StatusOr<std::vector<ir::TensorData>> got = RunCompiledGraph(**compiled, shared);
  absl::StatusOr<std::vector<ir::TensorData>> want = ir::Interpret(graph, plain);
  EXPECT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(want.ok()) << want.status();
  if (!got.ok() || !want.ok()) return *compiled;
  EXPECT_EQ(got->size(), want->size());
  for (size_t k = 0; k < got->size() && k < want->size(); ++k) {
    EXPECT_EQ((*got)[k].num_elements(), (*want)[k].num_elements());
    if ((*got)[k].num_elements() != (*want)[k].num_elements()) continue;
    int64_t wrong = 0;
    for (int64_t i = 0; i < (*got)[k].num_elements() && wrong < 5; ++i) {
      const double w = (*want)[k].GetDouble(i), g = (*got)[k].GetDouble(i);
      const bool close = std::abs(g - w) <= 1e-4 * (1.0 + std::abs(w));
      EXPECT_TRUE(close) << "output " << k << " element " << i << ": " << g << " vs " << w;
      wrong += close ? 0 : 1;
    }
  }
  return *compiled;
}

ir::Graph Build(ir::Builder& b) {
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  EXPECT_TRUE(graph.ok()) << graph.status();
  return *std::move(graph);
}

// x [batch, in] @ permute(W [out, in]) + broadcast(reshape(bias [out])).
NodeId Linear(ir::Builder& b, NodeId x, NodeId w, NodeId bias) {
  const NodeId y = b.MatMul(x, b.Permute(w, {1, 0}));
  const int64_t out = b.type(w).shape[0];
  return b.Binary(Op::kAdd, y, b.Broadcast(b.Reshape(bias, {1, out}), b.type(y).shape));
}

NodeId Relu(ir::Builder& b, NodeId x) { return b.Binary(Op::kMax, x, b.Fill(0.0, b.type(x))); }

void LinearReluRunsInTheGemm(ir::DType dtype, int64_t batch, int64_t in, int64_t out) {
  ir::Builder b;
  const NodeId x = b.Parameter("x", {dtype, {batch, in}});
  const NodeId w = b.Parameter("w", {dtype, {out, in}});
  const NodeId bias = b.Parameter("bias", {dtype, {out}});
  b.Output(Relu(b, Linear(b, x, w, bias)));
  const auto compiled = CompileAndCompare(Build(b));
  ASSERT_NE(compiled, nullptr);
  EXPECT_EQ(compiled->num_gemm_steps, 1);
  EXPECT_EQ(compiled->num_kernels, 0);  // no permute copy, no epilogue kernel
}

TEST(CpuGemmEpilogueTest, LinearReluIsOneGemmStep) {
  LinearReluRunsInTheGemm(ir::DType::kF32, 37, 45, 29);
  LinearReluRunsInTheGemm(ir::DType::kF64, 37, 45, 29);
}

TEST(CpuGemmEpilogueTest, BatchOneLinearIsOneGemmStep) {
  LinearReluRunsInTheGemm(ir::DType::kF32, 1, 300, 200);
  LinearReluRunsInTheGemm(ir::DType::kF64, 1, 70, 33);
}

TEST(CpuGemmEpilogueTest, PreActivationNeededElsewhereFallsBack) {
  ir::Builder b;
  const NodeId x = b.Parameter("x", {ir::DType::kF32, {9, 20}});
  const NodeId w = b.Parameter("w", {ir::DType::kF32, {11, 20}});
  const NodeId bias = b.Parameter("bias", {ir::DType::kF32, {11}});
  const NodeId h = Linear(b, x, w, bias);
  b.Output(Relu(b, h));
  b.Output(h);  // read outside the relu: the bias add is stored, the relu is a kernel
  const auto compiled = CompileAndCompare(Build(b));
  ASSERT_NE(compiled, nullptr);
  EXPECT_EQ(compiled->num_gemm_steps, 1);
}

TEST(CpuGemmEpilogueTest, OtherEpiloguesRunAsAKernel) {
  ir::Builder b;
  const NodeId x = b.Parameter("x", {ir::DType::kF32, {9, 20}});
  const NodeId w = b.Parameter("w", {ir::DType::kF32, {20, 11}});
  const NodeId r = b.Parameter("r", {ir::DType::kF32, {9, 11}});
  const NodeId y = b.MatMul(x, w);
  b.Output(b.Unary(Op::kTanh, b.Binary(Op::kMul, y, r)));
  const auto compiled = CompileAndCompare(Build(b));
  ASSERT_NE(compiled, nullptr);
  EXPECT_EQ(compiled->num_gemm_steps, 1);
  EXPECT_EQ(compiled->num_kernels, 1);
}

TEST(CpuGemmEpilogueTest, TransposedOperandsOfBackwardMatmuls) {
  // dW = permute(dY) @ X with dY computed by a kernel, and dX = dY @ W; the permute is also
  // read by an elementwise op in a second graph, where it must be materialized.
  for (bool shared_permute : {false, true}) {
    ir::Builder b;
    const NodeId x = b.Parameter("x", {ir::DType::kF32, {16, 24}});
    const NodeId g = b.Parameter("g", {ir::DType::kF32, {16, 10}});
    const NodeId w = b.Parameter("w", {ir::DType::kF32, {10, 24}});
    const NodeId dy = b.Unary(Op::kTanh, g);
    const NodeId dy_t = b.Permute(dy, {1, 0});
    b.Output(b.MatMul(dy_t, x));
    b.Output(b.MatMul(dy, w));
    if (shared_permute) b.Output(b.Unary(Op::kExp, dy_t));
    const auto compiled = CompileAndCompare(Build(b));
    ASSERT_NE(compiled, nullptr);
    EXPECT_EQ(compiled->num_gemm_steps, 2);
    if (!shared_permute) {
      EXPECT_EQ(compiled->num_kernels, 1);  // tanh only
    }
  }
}

TEST(CpuGemmEpilogueTest, TransposedOperandBesideABiasGradient) {
  // The bias gradient (a column sum) and the permute feeding dW read the same buffer, so fusion
  // puts them in one kernel; the permute is dropped from it and the GEMM reads the buffer.
  ir::Builder b;
  const NodeId x = b.Parameter("x", {ir::DType::kF32, {32, 24}});
  const NodeId g = b.Parameter("g", {ir::DType::kF32, {32, 10}});
  const NodeId w = b.Parameter("w", {ir::DType::kF32, {10, 24}});
  const NodeId dy = b.Unary(Op::kTanh, g);
  b.Output(b.MatMul(b.Permute(dy, {1, 0}), x));
  b.Output(b.Binary(Op::kMul, b.Reduce(Op::kReduceSum, dy, {0}),
                    b.Fill(0.5, {ir::DType::kF32, {1, 10}})));
  b.Output(b.MatMul(dy, w));
  const auto compiled = CompileAndCompare(Build(b));
  ASSERT_NE(compiled, nullptr);
  EXPECT_EQ(compiled->num_gemm_steps, 2);
}

TEST(CpuGemmEpilogueTest, BatchedTransposedOperand) {
  ir::Builder b;
  const NodeId a = b.Parameter("a", {ir::DType::kF32, {3, 5, 7}});
  const NodeId c = b.Parameter("c", {ir::DType::kF32, {3, 6, 7}});
  b.Output(b.MatMul(a, b.Permute(c, {0, 2, 1})));
  const auto compiled = CompileAndCompare(Build(b));
  ASSERT_NE(compiled, nullptr);
  EXPECT_EQ(compiled->num_kernels, 0);
}

TEST(CpuGemmEpilogueTest, ReshapedParameterIsReadInPlace) {
  // A training step's first layer: the [batch, 4, 6] input reshaped to [batch, 24] feeds the
  // forward matmul and the weight gradient dW = dY^T X. The reshape moves no bytes, so both GEMMs
  // read the parameter's buffer; where something else also reads the reshape (here a graph
  // output), it is still computed.
  for (bool also_output : {false, true}) {
    ir::Builder b;
    const NodeId x = b.Parameter("x", {ir::DType::kF32, {16, 4, 6}});
    const NodeId g = b.Parameter("g", {ir::DType::kF32, {16, 10}});
    const NodeId w = b.Parameter("w", {ir::DType::kF32, {10, 24}});
    const NodeId flat = b.Reshape(x, {16, 24});
    b.Output(b.MatMul(flat, b.Permute(w, {1, 0})));
    b.Output(b.MatMul(b.Permute(g, {1, 0}), flat));
    if (also_output) b.Output(flat);
    const auto compiled = CompileAndCompare(Build(b));
    ASSERT_NE(compiled, nullptr);
    EXPECT_EQ(compiled->num_gemm_steps, 2);
    if (!also_output) {
      EXPECT_EQ(compiled->num_kernels, 0);  // no copy of x
    }
  }
}

TEST(CpuGemmEpilogueTest, ConvBiasReluIsOneConvStep) {
  ir::Builder b;
  const NodeId x = b.Parameter("x", {ir::DType::kF32, {2, 3, 9, 8}});
  const NodeId w = b.Parameter("w", {ir::DType::kF32, {5, 3, 3, 3}});
  const NodeId bias = b.Parameter("bias", {ir::DType::kF32, {5}});
  const NodeId y = b.Conv(x, w, ir::Attrs{});
  const NodeId biased =
      b.Binary(Op::kAdd, y, b.Broadcast(b.Reshape(bias, {1, 5, 1, 1}), b.type(y).shape));
  b.Output(Relu(b, biased));
  const auto compiled = CompileAndCompare(Build(b));
  ASSERT_NE(compiled, nullptr);
  EXPECT_EQ(compiled->num_gemm_steps, 1);
  EXPECT_EQ(compiled->num_kernels, 0);
}

TEST(CpuGemmEpilogueTest, BiasAlongTheWrongAxisIsAKernel) {
  // A [M] vector broadcast along the columns is not a column bias: it stays a kernel.
  ir::Builder b;
  const NodeId x = b.Parameter("x", {ir::DType::kF32, {6, 4}});
  const NodeId w = b.Parameter("w", {ir::DType::kF32, {4, 6}});
  const NodeId v = b.Parameter("v", {ir::DType::kF32, {6}});
  const NodeId y = b.MatMul(x, w);
  b.Output(b.Binary(Op::kAdd, y, b.Broadcast(b.Reshape(v, {6, 1}), {6, 6})));
  const auto compiled = CompileAndCompare(Build(b));
  ASSERT_NE(compiled, nullptr);
  EXPECT_EQ(compiled->num_kernels, 1);
}

}  // namespace
}  // namespace kiln::codegen::cpu
