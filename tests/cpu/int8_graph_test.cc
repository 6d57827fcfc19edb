// How the CPU graph compiler runs int8 contractions (matmul / conv {accumulate=i32}): on the int8
// GEMM, with the dequantisation (cast to f32, per-channel scale, bias), relu and the next layer's
// requantisation (divide, round, clamp, cast to u8) in the GEMM's epilogue, and anything else
// as a kernel over its i32 sums. Every graph's outputs must equal the reference interpreter's
// bit for bit (the epilogue computes each node's f32 operation in the node's order).
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "codegen/cpu/graph_compiler.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/interpreter.h"

namespace kiln::codegen::cpu {
namespace {

using ir::DType;
using ir::NodeId;
using ir::Op;

ir::Graph Build(ir::Builder& b) {
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  EXPECT_TRUE(graph.ok()) << graph.status();
  return *std::move(graph);
}

// Random arguments: integers over their dtype's range (extremes included), floats in [-2, 2].
std::vector<ir::TensorData> Arguments(const ir::Graph& graph, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<ir::TensorData> args;
  for (NodeId p : graph.Parameters()) {
    const ir::TensorType& type = graph.node(p).type;
    ir::TensorData data(type.dtype, type.shape);
    for (int64_t i = 0; i < data.num_elements(); ++i) {
      if (type.dtype == DType::kU8) {
        data.SetInt64(i, rng() % 4 == 0 ? 255 : static_cast<int64_t>(rng() % 256));
      } else if (type.dtype == DType::kI8) {
        data.SetInt64(i, rng() % 4 == 0 ? -128 : static_cast<int64_t>(rng() % 256) - 128);
      } else {
        data.SetDouble(i, std::uniform_real_distribution<double>(-2.0, 2.0)(rng));
      }
    }
    args.push_back(std::move(data));
  }
  return args;
}

// Compiles and interprets `graph`; every output must match bit for bit.
std::shared_ptr<const CompiledGraph> CompileAndCompareExactly(const ir::Graph& graph) {
  absl::StatusOr<std::shared_ptr<const CompiledGraph>> compiled = CompileGraph(graph);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return nullptr;
  const std::vector<ir::TensorData> args = Arguments(graph, 11);
  std::vector<std::shared_ptr<const ir::TensorData>> shared;
  for (const ir::TensorData& a : args) shared.push_back(std::make_shared<const ir::TensorData>(a));
  absl::StatusOr<std::vector<ir::TensorData>> got = RunCompiledGraph(**compiled, shared);
  absl::StatusOr<std::vector<ir::TensorData>> want = ir::Interpret(graph, args);
  EXPECT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(want.ok()) << want.status();
  if (!got.ok() || !want.ok()) return *compiled;
  for (size_t k = 0; k < want->size(); ++k) {
    const ir::TensorData& g = (*got)[k];
    const ir::TensorData& w = (*want)[k];
    EXPECT_EQ(g.dtype(), w.dtype());
    EXPECT_EQ(g.shape(), w.shape());
    if (g.size_bytes() != w.size_bytes()) continue;
    int wrong = 0;
    const int64_t size = ir::DTypeSize(w.dtype());
    for (int64_t i = 0; i < w.num_elements() && wrong < 5; ++i) {
      if (std::memcmp(g.data() + i * size, w.data() + i * size, size) != 0) {
        ADD_FAILURE() << "output " << k << " element " << i << ": " << g.GetDouble(i) << " vs "
                      << w.GetDouble(i);
        ++wrong;
      }
    }
  }
  return *compiled;
}

// cast(clamp(round(x / scale), lo, hi), u8 or i8).
NodeId Quantize(ir::Builder& b, NodeId x, double scale, DType dtype) {
  const ir::TensorType& t = b.type(x);
  const double lo = dtype == DType::kU8 ? 0 : -128, hi = dtype == DType::kU8 ? 255 : 127;
  NodeId y = b.Unary(Op::kRound, b.Binary(Op::kDiv, x, b.Fill(scale, t)));
  y = b.Binary(Op::kMin, b.Binary(Op::kMax, y, b.Fill(lo, t)), b.Fill(hi, t));
  return b.Cast(y, dtype);
}

// v [n] laid along `axis` of `like`'s shape, broadcast to it.
NodeId Along(ir::Builder& b, NodeId v, const ir::Shape& like, size_t axis) {
  ir::Shape shape(like.size(), 1);
  shape[axis] = like[axis];
  return b.Broadcast(b.Reshape(v, shape), like);
}

// cast(acc, f32) * scale[channel] + bias[channel], channels along `axis`.
NodeId Dequantize(ir::Builder& b, NodeId acc, NodeId scale, NodeId bias, size_t axis) {
  const ir::Shape shape = b.type(acc).shape;
  NodeId y = b.Binary(Op::kMul, b.Cast(acc, DType::kF32), Along(b, scale, shape, axis));
  return b.Binary(Op::kAdd, y, Along(b, bias, shape, axis));
}

NodeId Relu(ir::Builder& b, NodeId x) { return b.Binary(Op::kMax, x, b.Fill(0.0, b.type(x))); }

// Two quantized Linear layers: x (f32) -> u8 -> int8 GEMM -> relu -> u8 -> int8 GEMM -> f32.
void TwoQuantizedLinears(int64_t batch, int64_t in, int64_t hidden, int64_t out, DType input) {
  SCOPED_TRACE(testing::Message() << "batch " << batch << " input " << ir::DTypeName(input));
  ir::Builder b;
  const NodeId x = b.Parameter("x", {DType::kF32, {batch, in}});
  const NodeId w1 = b.Parameter("w1", {DType::kI8, {hidden, in}});
  const NodeId s1 = b.Parameter("s1", {DType::kF32, {hidden}});
  const NodeId b1 = b.Parameter("b1", {DType::kF32, {hidden}});
  const NodeId w2 = b.Parameter("w2", {DType::kI8, {out, hidden}});
  const NodeId s2 = b.Parameter("s2", {DType::kF32, {out}});
  const NodeId b2 = b.Parameter("b2", {DType::kF32, {out}});
  const NodeId x1 = Quantize(b, x, 0.015, input);
  const NodeId h =
      Relu(b, Dequantize(b, b.IntegerMatMul(x1, b.Permute(w1, {1, 0}), DType::kI32), s1, b1, 1));
  const NodeId x2 = Quantize(b, h, 0.02, DType::kU8);
  b.Output(Dequantize(b, b.IntegerMatMul(x2, b.Permute(w2, {1, 0}), DType::kI32), s2, b2, 1));
  const auto compiled = CompileAndCompareExactly(Build(b));
  ASSERT_NE(compiled, nullptr);
  EXPECT_EQ(compiled->num_gemm_steps, 2);
  // Only the first quantisation of x is a kernel: the weights are read transposed in place, the
  // second quantisation is the first GEMM's epilogue.
  EXPECT_EQ(compiled->num_kernels, 1);
}

TEST(CpuInt8GraphTest, QuantizedLinearsFuseTheirEpiloguesAndTheNextQuantisation) {
  TwoQuantizedLinears(37, 45, 29, 11, DType::kU8);
  TwoQuantizedLinears(1, 70, 33, 10, DType::kI8);
  TwoQuantizedLinears(256, 784, 512, 10, DType::kU8);
}

TEST(CpuInt8GraphTest, QuantizedConvWithPerChannelScaleIsOneStep) {
  ir::Builder b;
  const NodeId x = b.Parameter("x", {DType::kU8, {2, 3, 11, 10}});
  const NodeId w = b.Parameter("w", {DType::kI8, {8, 3, 3, 3}});
  const NodeId scale = b.Parameter("scale", {DType::kF32, {8}});
  const NodeId bias = b.Parameter("bias", {DType::kF32, {8}});
  ir::Attrs attrs;
  attrs.low = {1, 1};
  attrs.high = {1, 1};
  attrs.accumulate = DType::kI32;
  b.Output(
      Quantize(b, Relu(b, Dequantize(b, b.Conv(x, w, attrs), scale, bias, 1)), 0.05, DType::kU8));
  const auto compiled = CompileAndCompareExactly(Build(b));
  ASSERT_NE(compiled, nullptr);
  EXPECT_EQ(compiled->num_gemm_steps, 1);
  EXPECT_EQ(compiled->num_kernels, 0);
}

TEST(CpuInt8GraphTest, ConstantsFoldedToTheOutputsShapeStayVectors) {
  // The simplifier folds a broadcast of a small constant vector into a constant of the output's
  // shape (as in a blob, where weights are constants): the epilogue reads its column again.
  ir::Builder b;
  ir::TensorData scale(DType::kF32, {6, 4});
  for (int64_t i = 0; i < 24; ++i) scale.SetDouble(i, 0.001 * (1 + i % 4));
  const NodeId acc = b.IntegerMatMul(b.Parameter("a", {DType::kU8, {6, 30}}),
                                     b.Parameter("w", {DType::kI8, {30, 4}}), DType::kI32);
  b.Output(Relu(b, b.Binary(Op::kMul, b.Cast(acc, DType::kF32), b.Constant(scale))));
  const auto compiled = CompileAndCompareExactly(Build(b));
  ASSERT_NE(compiled, nullptr);
  EXPECT_EQ(compiled->num_gemm_steps, 1);
  EXPECT_EQ(compiled->num_kernels, 0);
}

TEST(CpuInt8GraphTest, IntegerSumsAndOtherEpilogues) {
  {
    // MatMulInteger: the i32 sums are the output.
    ir::Builder b;
    b.Output(b.IntegerMatMul(b.Parameter("a", {DType::kU8, {2, 9, 40}}),
                             b.Parameter("b", {DType::kU8, {2, 40, 17}}), DType::kI32));
    const auto compiled = CompileAndCompareExactly(Build(b));
    ASSERT_NE(compiled, nullptr);
    EXPECT_EQ(compiled->num_gemm_steps, 1);
    EXPECT_EQ(compiled->num_kernels, 0);
  }
  {
    // tanh is not an epilogue step: the sums go to a buffer and the rest runs as a kernel.
    ir::Builder b;
    const NodeId acc = b.IntegerMatMul(b.Parameter("a", {DType::kI8, {13, 20}}),
                                       b.Parameter("b", {DType::kI8, {20, 7}}), DType::kI32);
    b.Output(b.Unary(Op::kTanh, b.Binary(Op::kMul, b.Cast(acc, DType::kF32),
                                         b.Fill(0.001, {DType::kF32, {13, 7}}))));
    const auto compiled = CompileAndCompareExactly(Build(b));
    ASSERT_NE(compiled, nullptr);
    EXPECT_EQ(compiled->num_gemm_steps, 1);
    EXPECT_EQ(compiled->num_kernels, 1);
  }
  {
    // The sums are an output and feed an epilogue: stored, then the epilogue as a kernel.
    ir::Builder b;
    const NodeId acc = b.IntegerMatMul(b.Parameter("a", {DType::kU8, {5, 8}}),
                                       b.Parameter("b", {DType::kI8, {8, 6}}), DType::kI32);
    b.Output(acc);
    b.Output(b.Cast(acc, DType::kF32));
    const auto compiled = CompileAndCompareExactly(Build(b));
    ASSERT_NE(compiled, nullptr);
    EXPECT_EQ(compiled->num_gemm_steps, 1);
  }
}

// An i8 constant of `shape` with values over [-limit, limit] (128: all of i8), the extremes
// included.
ir::TensorData ConstantWeight(const ir::Shape& shape, int64_t limit, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t lo = -limit, hi = std::min<int64_t>(limit, 127);
  ir::TensorData data(DType::kI8, shape);
  for (int64_t i = 0; i < data.num_elements(); ++i) {
    const uint32_t r = rng() % 4;
    data.SetInt64(i, r == 0 ? lo
                     : r == 1
                         ? hi
                         : lo + static_cast<int64_t>(rng() % static_cast<uint32_t>(hi - lo + 1)));
  }
  return data;
}

TEST(CpuInt8GraphTest, ConstantWeightsArePackedOnceAtCompileTime) {
  // Weights bound as constants (aot::Compile's weights, ONNX initializers): each int8 GEMM's B is
  // packed when the graph compiles, and the outputs keep the interpreter's bits. The first layer's
  // weights span all of i8 (pairs), the second's [-64, 64] (quads); then the other way round.
  for (const auto& [limit1, limit2] : {std::pair<int64_t, int64_t>{128, 64}, {64, 128}}) {
    for (DType input : {DType::kU8, DType::kI8}) {
      SCOPED_TRACE(testing::Message()
                   << "limits " << limit1 << ", " << limit2 << " input " << ir::DTypeName(input));
      const int64_t batch = 19, in = 70, hidden = 45, out = 21;
      ir::Builder b;
      const NodeId x = b.Parameter("x", {DType::kF32, {batch, in}});
      const NodeId w1 = b.Constant(ConstantWeight({hidden, in}, limit1, 1));
      const NodeId w2 = b.Constant(ConstantWeight({out, hidden}, limit2, 2));
      const NodeId s1 = b.Parameter("s1", {DType::kF32, {hidden}});
      const NodeId b1 = b.Parameter("b1", {DType::kF32, {hidden}});
      const NodeId s2 = b.Parameter("s2", {DType::kF32, {out}});
      const NodeId b2 = b.Parameter("b2", {DType::kF32, {out}});
      const NodeId h = Relu(b, Dequantize(b,
                                          b.IntegerMatMul(Quantize(b, x, 0.015, input),
                                                          b.Permute(w1, {1, 0}), DType::kI32),
                                          s1, b1, 1));
      // The second B row-major ([hidden, out] constant, no permute).
      const NodeId w2_rows = b.Constant(ConstantWeight({hidden, out}, limit2, 3));
      const NodeId x2 = Quantize(b, h, 0.02, DType::kU8);
      b.Output(Dequantize(b, b.IntegerMatMul(x2, b.Permute(w2, {1, 0}), DType::kI32), s2, b2, 1));
      b.Output(b.IntegerMatMul(x2, w2_rows, DType::kI32));
      const auto compiled = CompileAndCompareExactly(Build(b));
      ASSERT_NE(compiled, nullptr);
      EXPECT_EQ(compiled->num_gemm_steps, 3);
      EXPECT_EQ(compiled->num_packed_weights, 3);
    }
  }
  {
    // A batch of constant B matrices is packed per call, as a parameter is.
    ir::Builder b;
    b.Output(b.IntegerMatMul(b.Parameter("a", {DType::kU8, {2, 9, 40}}),
                             b.Constant(ConstantWeight({2, 40, 17}, 127, 4)), DType::kI32));
    const auto compiled = CompileAndCompareExactly(Build(b));
    ASSERT_NE(compiled, nullptr);
    EXPECT_EQ(compiled->num_gemm_steps, 1);
    EXPECT_EQ(compiled->num_packed_weights, 0);
  }
}

}  // namespace
}  // namespace kiln::codegen::cpu
