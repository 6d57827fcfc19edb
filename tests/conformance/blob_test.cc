// Ahead-of-time blobs on the backend under test: graphs compiled by codegen/aot with the
// backend's section (BlobTarget::configure), loaded through the C API of libkiln_runtime on the
// backend's device and run, give the reference interpreter's outputs (within the tolerance of a
// run of the backend), and the JIT's outputs bit for bit where the blob holds the JIT's very code
// (BlobTarget::bit_exact_with_jit). Checks of one backend's blob sections (section listings,
// feature checks, device-choice errors, KILN_CPU levels) stay in tests/aot.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/aot/aot.h"
#include "ir/builder.h"
#include "ir/interpreter.h"
#include "ir/printer.h"
#include "ir/tensor_data.h"
#include "runtime/include/kiln_runtime.h"
#include "tests/codegen/mlp_graphs.h"
#include "tests/codegen/random_graph.h"
#include "tests/conformance/backend_under_test.h"

namespace kiln::conformance {
namespace {

ir::TensorType F32(ir::Shape shape) { return ir::TensorType{ir::DType::kF32, std::move(shape)}; }

ir::TensorData Random(const ir::TensorType& type, uint64_t seed) {
  return test::RandomTensor(type, seed);
}

// A graph, the blob's inputs (the parameters not bound as weights, in graph order), the weights
// bound at compile time, and the tolerance of a comparison with the interpreter.
struct BlobCase {
  ir::Graph graph;
  std::vector<ir::TensorData> inputs;
  test::NamedWeights weights;
  test::Tolerance tolerance = {1e-4, 1e-4};  // f32 sums in other orders (GEMMs, reductions)
};

// Loads `blob` through the C API on the backend's device and runs it once; the outputs have the
// interpreter's types (`expected`).
absl::StatusOr<std::vector<ir::TensorData>> RunBlob(const std::string& blob,
                                                    const std::vector<ir::TensorData>& inputs,
                                                    const std::vector<ir::TensorData>& expected) {
  const BlobTarget& target = Backend().blob;
  static const bool enabled = [&] {
    if (target.enable) target.enable();
    return true;
  }();
  (void)enabled;
  kiln_model* model = nullptr;
  if (kiln_model_load_memory_on(blob.data(), blob.size(), target.device.c_str(), &model) !=
      KILN_OK) {
    return absl::InternalError(absl::StrCat("load: ", kiln_last_error()));
  }
  std::unique_ptr<kiln_model, void (*)(kiln_model*)> owner(model, kiln_model_free);
  if (std::string(kiln_model_device(model)).find(target.device) == std::string::npos) {
    return absl::InternalError(absl::StrCat("loaded on ", kiln_model_device(model)));
  }
  if (kiln_model_num_inputs(model) != inputs.size() ||
      kiln_model_num_outputs(model) != expected.size()) {
    return absl::InternalError("the blob's signature differs from the graph's");
  }
  std::vector<const void*> input_data;
  for (const ir::TensorData& a : inputs) input_data.push_back(a.data());
  std::vector<ir::TensorData> results;
  std::vector<void*> output_data;
  for (size_t k = 0; k < expected.size(); ++k) {
    kiln_tensor_info info;
    if (kiln_model_output_info(model, k, &info) != KILN_OK) {
      return absl::InternalError(kiln_last_error());
    }
    results.push_back(ir::TensorData::Uninitialized(expected[k].dtype(), expected[k].shape()));
    if (info.size_bytes != static_cast<size_t>(results.back().size_bytes())) {
      return absl::InternalError(absl::StrCat("output ", k, " has ", info.size_bytes, " bytes"));
    }
  }
  for (ir::TensorData& r : results) output_data.push_back(r.data());
  if (kiln_model_run(model, input_data.data(), output_data.data()) != KILN_OK) {
    return absl::InternalError(absl::StrCat("run: ", kiln_last_error()));
  }
  return results;
}

void ExpectBlobMatches(const BlobCase& c) {
  const BackendUnderTest& backend = Backend();
  aot::CompileOptions options;
  options.name = "test";
  options.weights = c.weights;
  if (backend.blob.configure) backend.blob.configure(options);
  absl::StatusOr<std::string> blob = aot::Compile(c.graph, options);
  ASSERT_TRUE(blob.ok()) << blob.status();
  const std::vector<ir::TensorData> args = test::AllArguments(c.graph, c.inputs, c.weights);
  absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(c.graph, args);
  ASSERT_TRUE(expected.ok()) << expected.status();
  absl::StatusOr<std::vector<ir::TensorData>> actual = RunBlob(*blob, c.inputs, *expected);
  ASSERT_TRUE(actual.ok()) << actual.status();
  ASSERT_EQ(actual->size(), expected->size());
  const test::Tolerance tolerance = Tolerance(backend.math, c.tolerance, c.graph);
  for (size_t k = 0; k < expected->size(); ++k) {
    EXPECT_TRUE(test::TensorsClose((*expected)[k], (*actual)[k], tolerance))
        << backend.name << " blob, output " << k;
  }
  if (!backend.blob.bit_exact_with_jit) return;
  absl::StatusOr<std::vector<ir::TensorData>> jit = RunOnBackend(c.graph, args);
  ASSERT_TRUE(jit.ok()) << jit.status();
  ASSERT_EQ(jit->size(), actual->size());
  for (size_t k = 0; k < jit->size(); ++k) {
    ASSERT_EQ((*jit)[k].size_bytes(), (*actual)[k].size_bytes());
    EXPECT_EQ(std::memcmp((*jit)[k].data(), (*actual)[k].data(), (*jit)[k].size_bytes()), 0)
        << "output " << k << " differs from the JIT's";
  }
}

// The MLPs the tests in tests/aot run too (tests/codegen/mlp_graphs.h).
BlobCase FromMlp(test::MlpCase c) {
  return BlobCase{std::move(c.graph), std::move(c.inputs), std::move(c.weights)};
}

TEST(ConformanceBlobTest, MlpBatch1) { ExpectBlobMatches(FromMlp(test::ConstantMlp(1))); }

TEST(ConformanceBlobTest, MlpBatch32) { ExpectBlobMatches(FromMlp(test::ConstantMlp(32))); }

TEST(ConformanceBlobTest, MlpWithBoundWeights) {
  ExpectBlobMatches(FromMlp(test::WeightBoundMlp(5)));
}

TEST(ConformanceBlobTest, ConvNet) {
  ir::Builder b;
  ir::NodeId x = b.Parameter("image", F32({2, 3, 12, 12}));
  ir::NodeId w = b.Constant(Random(F32({8, 3, 3, 3}), 2));
  ir::NodeId bias = b.Constant(Random(F32({8}), 3));
  ir::Attrs conv;
  conv.strides = {1, 1};
  conv.low = {1, 1};
  conv.high = {1, 1};
  ir::NodeId y = b.Conv(x, w, conv);
  y = b.Binary(ir::Op::kAdd, y, b.Broadcast(b.Reshape(bias, {1, 8, 1, 1}), {2, 8, 12, 12}));
  y = b.Binary(ir::Op::kMax, y, b.Fill(0.0, F32({2, 8, 12, 12})));
  ir::NodeId w2 = b.Constant(Random(F32({4, 8, 3, 3}), 4));
  ir::Attrs conv2;
  conv2.strides = {2, 2};
  y = b.Conv(y, w2, conv2);  // [2, 4, 5, 5]
  ir::NodeId flat = b.Reshape(y, {2, 100});
  ir::NodeId fc = b.Constant(Random(F32({100, 10}), 5));
  b.Output(b.MatMul(flat, fc), "logits");
  absl::StatusOr<ir::Graph> g = std::move(b).Build();
  ASSERT_TRUE(g.ok()) << g.status();
  ExpectBlobMatches(BlobCase{*std::move(g), {Random(F32({2, 3, 12, 12}), 6)}, {}});
}

// Layer norm over rows of `d` (300: long enough for one workgroup per row) with the row means
// as a second output, and a softmax of the result.
BlobCase LayerNormSoftmax(int64_t n, int64_t d, uint64_t seed) {
  ir::Builder b;
  ir::NodeId x = b.Parameter("x", F32({n, d}));
  ir::NodeId mean = b.Binary(ir::Op::kDiv, b.Reduce(ir::Op::kReduceSum, x, {1}),
                             b.Fill(static_cast<double>(d), F32({n, 1})));
  ir::NodeId centered = b.Binary(ir::Op::kSub, x, b.Broadcast(b.Reshape(mean, {n, 1}), {n, d}));
  ir::NodeId var = b.Binary(
      ir::Op::kDiv, b.Reduce(ir::Op::kReduceSum, b.Binary(ir::Op::kMul, centered, centered), {1}),
      b.Fill(static_cast<double>(d), F32({n, 1})));
  ir::NodeId inv = b.Unary(ir::Op::kRsqrt, b.Binary(ir::Op::kAdd, var, b.Fill(1e-5, F32({n, 1}))));
  ir::NodeId y = b.Binary(ir::Op::kMul, centered, b.Broadcast(b.Reshape(inv, {n, 1}), {n, d}));
  ir::NodeId m = b.Reduce(ir::Op::kReduceMax, y, {1});
  ir::NodeId e =
      b.Unary(ir::Op::kExp, b.Binary(ir::Op::kSub, y, b.Broadcast(b.Reshape(m, {n, 1}), {n, d})));
  ir::NodeId s = b.Reduce(ir::Op::kReduceSum, e, {1});
  b.Output(y, "normed");
  b.Output(mean, "mean");
  b.Output(b.Binary(ir::Op::kDiv, e, b.Broadcast(b.Reshape(s, {n, 1}), {n, d})), "softmax");
  absl::StatusOr<ir::Graph> g = std::move(b).Build();
  EXPECT_TRUE(g.ok()) << g.status();
  return BlobCase{*std::move(g), {Random(F32({n, d}), seed)}, {}};
}

TEST(ConformanceBlobTest, LayerNormShortRows) { ExpectBlobMatches(LayerNormSoftmax(8, 48, 7)); }

TEST(ConformanceBlobTest, LayerNormLongRows) { ExpectBlobMatches(LayerNormSoftmax(6, 300, 9)); }

// u8 and bool outputs (byte storage on devices): exact casts, so the bytes are the interpreter's.
TEST(ConformanceBlobTest, ByteOutputs) {
  ir::Builder b;
  ir::NodeId x = b.Parameter("x", F32({300}));
  ir::NodeId scaled = b.Binary(ir::Op::kMul, x, b.Fill(100.0, F32({300})));
  b.Output(b.Cast(scaled, ir::DType::kU8), "bytes");
  b.Output(b.Cast(x, ir::DType::kBool), "nonzero");
  absl::StatusOr<ir::Graph> g = std::move(b).Build();
  ASSERT_TRUE(g.ok()) << g.status();
  ir::TensorData input = Random(F32({300}), 11);
  input.SetDouble(0, 0.0);  // a false for the bool output
  ExpectBlobMatches(BlobCase{*std::move(g), {input}, {}, {0, 0}});
}

TEST(ConformanceBlobTest, RandomGraphs) {
  for (uint64_t seed :
       test::FuzzSeeds({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})) {
    test::RandomGraph r = test::MakeRandomGraph(seed);
    SCOPED_TRACE(absl::StrCat("seed ", seed, "\n", r.text));
    ExpectBlobMatches(BlobCase{std::move(r.graph), std::move(r.arguments), {}, r.tolerance});
  }
}

}  // namespace
}  // namespace kiln::conformance
