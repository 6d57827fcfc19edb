// Property test: random fused graphs (tests/codegen/random_graph.h) compiled by the Vulkan
// backend and run on the machine's Vulkan device match the reference interpreter. A fixed seed
// list runs every time; KILN_FUZZ_SEED=<n> (or "random") adds one more.
#include "tests/codegen/random_graph.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "codegen/vulkan/graph_compiler.h"
#include "gtest/gtest.h"
#include "ir/interpreter.h"

namespace kiln {
namespace {

// f64 tanh/erf/pow have no GLSL form: a graph using one must fail with an error naming it.
bool IsF64MathGap(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnimplemented &&
         status.message().find("for f64") != std::string::npos;
}

// Like the CPU backend's LargerGraphsMatchTheInterpreter: a cast to f16/bf16 of a value summed in
// another order may round to the neighbouring 16-bit value.
test::Tolerance WithCastUnit(const test::RandomGraph& g,
                             const std::vector<ir::TensorData>& expected) {
  test::Tolerance tolerance = g.tolerance;
  double unit = 0;
  for (const ir::Node& node : g.graph.nodes()) {
    if (node.op != ir::Op::kCast) continue;
    if (node.type.dtype == ir::DType::kF16) unit = std::max(unit, std::ldexp(1.0, -10));
    if (node.type.dtype == ir::DType::kBF16) unit = std::max(unit, std::ldexp(1.0, -7));
  }
  if (unit == 0) return tolerance;
  double magnitude = 1;
  const auto scan = [&](const ir::TensorData& t) {
    if (!ir::IsFloat(t.dtype())) return;
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      const double v = std::fabs(t.GetDouble(i));
      if (std::isfinite(v)) magnitude = std::max(magnitude, v);
    }
  };
  for (const ir::TensorData& t : g.arguments) scan(t);
  for (const ir::TensorData& t : expected) scan(t);
  tolerance.rtol = std::max(tolerance.rtol, unit);
  tolerance.atol = std::max(tolerance.atol, unit * magnitude);
  return tolerance;
}

void RunSeeds(const std::vector<uint64_t>& seeds, const test::RandomGraphOptions& options,
              bool cast_unit) {
  std::vector<uint64_t> failed;
  int64_t ran = 0, gaps = 0, kernels = 0, matmuls = 0;
  for (uint64_t seed : seeds) {
    const test::RandomGraph g = test::MakeRandomGraph(seed, options);
    absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(g.graph, g.arguments);
    ASSERT_TRUE(expected.ok()) << "seed " << seed << ": " << expected.status() << "\n" << g.text;
    std::vector<std::shared_ptr<const ir::TensorData>> arguments;
    for (const ir::TensorData& arg : g.arguments) {
      arguments.push_back(std::make_shared<const ir::TensorData>(arg));
    }
    const auto fail = [&](const std::string& what) {
      if (failed.size() < 3) {
        ADD_FAILURE() << "seed " << seed << ": " << what << "\n"
                      << g.text << "replay with KILN_DUMP=<dir> KILN_FUZZ_SEED=" << seed;
      }
      failed.push_back(seed);
    };
    absl::StatusOr<std::vector<ir::TensorData>> actual =
        codegen::vulkan::CompileAndRun(g.graph, arguments);
    if (!actual.ok()) {
      if (IsF64MathGap(actual.status())) {
        ++gaps;
        continue;
      }
      fail(std::string(actual.status().ToString()));
      continue;
    }
    ++ran;
    ASSERT_EQ(actual->size(), expected->size()) << "seed " << seed;
    const test::Tolerance tolerance = cast_unit ? WithCastUnit(g, *expected) : g.tolerance;
    for (size_t i = 0; i < expected->size(); ++i) {
      const ::testing::AssertionResult close =
          test::TensorsClose((*expected)[i], (*actual)[i], tolerance);
      if (!close) {
        fail("output " + std::to_string(i) + ": " + close.message());
        break;
      }
    }
    if (seed % 10 == 0) {
      absl::StatusOr<std::shared_ptr<runtime::vulkan::VulkanDevice>> device =
          codegen::vulkan::DeviceForIndex(0);
      ASSERT_TRUE(device.ok()) << device.status();
      if (auto compiled = codegen::vulkan::CompileGraph(g.graph, *device); compiled.ok()) {
        kernels += (*compiled)->num_kernels;
        matmuls += (*compiled)->num_matmuls;
      }
    }
  }
  EXPECT_TRUE(failed.empty()) << failed.size() << " failing seeds: " << absl::StrJoin(failed, ", ");
  // Most graphs run (the f64 tanh/erf/pow gap is rare), through both kinds of shader.
  EXPECT_GT(ran, static_cast<int64_t>(seeds.size()) * 9 / 10) << gaps << " graphs hit the gap";
  EXPECT_GT(kernels, 0);
  EXPECT_GT(matmuls, 0);
}

TEST(VulkanRandomGraphTest, CompiledGraphsMatchTheInterpreter) {
  std::vector<uint64_t> fixed;
  for (uint64_t seed = 1; seed <= 300; ++seed) fixed.push_back(seed);
  RunSeeds(test::FuzzSeeds(fixed), {}, /*cast_unit=*/false);
}

// Larger shapes: several workgroups per kernel, matmuls over several 16 x 16 tiles, reductions
// long enough to run one workgroup per row.
TEST(VulkanRandomGraphTest, LargerGraphsMatchTheInterpreter) {
  test::RandomGraphOptions options;
  options.max_dim = 64;
  options.max_ops = 20;
  std::vector<uint64_t> seeds;
  for (uint64_t seed = 1; seed <= 80; ++seed) seeds.push_back(seed);
  RunSeeds(seeds, options, /*cast_unit=*/true);
}

}  // namespace
}  // namespace kiln
