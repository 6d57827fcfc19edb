// The CPU backend's GEMM path: matmul and convolution operands that Fuse recomputes per group
// (leaves) still get buffers of their own for the GEMM engine. (Every op case against the
// interpreter is the conformance suite's, tests/conformance/op_test.cc.)
#include <memory>
#include <vector>

#include "codegen/cpu/graph_compiler.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "tests/codegen/random_graph.h"

namespace kiln {
namespace {

using ir::DType;

// Fuse recomputes leaves (fill, iota, random_*) in each group that reads them; a matmul or conv
// operand that is such a leaf still needs a buffer of its own for the GEMM.
TEST(CpuGemmTest, LeafOperandsAreMaterialized) {
  ir::Builder b;
  const ir::NodeId random = b.RandomUniform({DType::kF32, {1, 2, 3}}, 7);
  const ir::NodeId iota = b.Iota({DType::kF32, {1, 3, 4}}, 1);
  const ir::NodeId x = b.Parameter("x", {DType::kF32, {1, 3, 4}});
  b.Output(b.MatMul(random, x));
  b.Output(b.MatMul(random, iota));
  ir::Attrs conv_attrs;
  b.Output(b.Conv(b.Parameter("image", {DType::kF64, {1, 2, 5}}),
                  b.Fill(0.5, {DType::kF64, {3, 2, 2}}), conv_attrs));
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<test::ReferenceRun> reference = test::RunReference(*graph, /*seed=*/3);
  ASSERT_TRUE(reference.ok()) << reference.status();
  absl::StatusOr<std::shared_ptr<const codegen::cpu::CompiledGraph>> compiled =
      codegen::cpu::CompileGraph(*graph);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ((*compiled)->num_gemm_steps, 3);
  absl::StatusOr<std::vector<ir::TensorData>> actual =
      codegen::cpu::RunCompiledGraph(**compiled, reference->arguments);
  ASSERT_TRUE(actual.ok()) << actual.status();
  ASSERT_EQ(actual->size(), 3u);
  // Sums of three and of four products, accumulated in f32 (f64 for the conv).
  const test::Tolerance tolerances[] = {{1e-6, 1e-6}, {1e-6, 1e-6}, {1e-14, 1e-14}};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(test::TensorsClose(reference->expected[i], (*actual)[i], tolerances[i]))
        << "output " << i;
  }
}

}  // namespace
}  // namespace kiln
