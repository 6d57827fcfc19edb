// Property test: random graphs (tests/codegen/random_graph.h) lowered through Fuse + LowerGroup
// and run by the kernel evaluator match the reference interpreter. A fixed seed list runs every
// time; KILN_FUZZ_SEED=<n> (or "random") adds one more.
#include "tests/codegen/random_graph.h"

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "gtest/gtest.h"
#include "ir/interpreter.h"
#include "ir/verifier.h"
#include "passes/fusion.h"
#include "tests/codegen/pipeline.h"

namespace kiln {
namespace {

std::vector<uint64_t> Seeds() {
  std::vector<uint64_t> fixed;
  for (uint64_t seed = 1; seed <= 1000; ++seed) fixed.push_back(seed);
  return test::FuzzSeeds(fixed);
}

TEST(RandomGraphTest, GeneratorIsDeterministicAndValid) {
  for (uint64_t seed : {1u, 2u, 3u, 77u}) {
    const test::RandomGraph a = test::MakeRandomGraph(seed);
    const test::RandomGraph b = test::MakeRandomGraph(seed);
    ASSERT_TRUE(ir::Verify(a.graph).ok()) << a.text;
    EXPECT_EQ(a.text, b.text);
    ASSERT_EQ(a.arguments.size(), a.graph.Parameters().size());
    for (size_t i = 0; i < a.arguments.size(); ++i) EXPECT_TRUE(a.arguments[i] == b.arguments[i]);
    EXPECT_GE(a.graph.num_nodes(), 5);
  }
  EXPECT_NE(test::MakeRandomGraph(1).text, test::MakeRandomGraph(2).text);
}

TEST(RandomGraphTest, TensorsCloseReportsTheMismatch) {
  const ir::TensorData a =
      ir::TensorData::FromVector<double>(ir::DType::kF32, {2}, std::vector<double>{1.0, 2.0});
  const ir::TensorData b =
      ir::TensorData::FromVector<double>(ir::DType::kF32, {2}, std::vector<double>{1.0, 2.5});
  EXPECT_TRUE(test::TensorsClose(a, a, {}));
  const ::testing::AssertionResult r = test::TensorsClose(a, b, {1e-3, 0});
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("element 1"), std::string::npos) << r.message();
  EXPECT_TRUE(test::TensorsClose(a, b, {0.25, 0}));
}

TEST(RandomGraphTest, LoweredGraphsMatchTheInterpreter) {
  int kernels = 0, groups_with_several_nodes = 0;
  for (uint64_t seed : Seeds()) {
    const test::RandomGraph g = test::MakeRandomGraph(seed);
    ASSERT_TRUE(ir::Verify(g.graph).ok()) << "seed " << seed << "\n" << g.text;
    absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(g.graph, g.arguments);
    ASSERT_TRUE(expected.ok()) << "seed " << seed << ": " << expected.status() << "\n" << g.text;
    for (bool epilogue : {false, true}) {
      absl::StatusOr<test::PipelineResult> actual =
          test::RunLowered(g.graph, g.arguments, {.use_epilogue = epilogue});
      ASSERT_TRUE(actual.ok()) << "seed " << seed << ": " << actual.status() << "\n" << g.text;
      if (!epilogue) {
        kernels += static_cast<int>(actual->kernels.size());
        for (const passes::FusionGroup& group : actual->plan.groups) {
          groups_with_several_nodes += group.nodes.size() > 1;
        }
      }
      for (size_t i = 0; i < expected->size(); ++i) {
        const ::testing::AssertionResult close =
            test::TensorsClose((*expected)[i], actual->outputs[i], g.tolerance);
        if (!close) {
          std::string dump;
          for (const codegen::Kernel& k : actual->kernels) dump += codegen::PrintKernel(k);
          ADD_FAILURE() << "seed " << seed << (epilogue ? " (epilogue path)" : "") << ", output "
                        << i << ": " << close.message() << "\n"
                        << g.text << passes::PrintFusionPlan(g.graph, actual->plan) << dump;
          return;
        }
      }
    }
  }
  // The graphs exercise fusion, not just one kernel per op.
  EXPECT_GT(groups_with_several_nodes, 100);
  EXPECT_GT(kernels, 300);
}

}  // namespace
}  // namespace kiln
