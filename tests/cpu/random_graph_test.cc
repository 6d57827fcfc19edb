// Property test: random graphs (tests/codegen/random_graph.h) compiled by the CPU backend and run
// with codegen::cpu::CompileAndRun match the reference interpreter. A fixed seed list runs every
// time; KILN_FUZZ_SEED=<n> (or "random") adds one more.
#include "tests/codegen/random_graph.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "codegen/cpu/graph_compiler.h"
#include "gtest/gtest.h"
#include "ir/interpreter.h"

namespace kiln {
namespace {

// 500 graphs take about 15 s on a small machine (most of it in LLVM).
std::vector<uint64_t> Seeds() {
  std::vector<uint64_t> fixed;
  for (uint64_t seed = 1; seed <= 500; ++seed) fixed.push_back(seed);
  return test::FuzzSeeds(fixed);
}

TEST(CpuRandomGraphTest, CompiledGraphsMatchTheInterpreter) {
  int64_t kernels = 0, gemm_steps = 0;
  std::vector<uint64_t> failed;
  for (uint64_t seed : Seeds()) {
    const test::RandomGraph g = test::MakeRandomGraph(seed);
    absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(g.graph, g.arguments);
    ASSERT_TRUE(expected.ok()) << "seed " << seed << ": " << expected.status() << "\n" << g.text;
    std::vector<std::shared_ptr<const ir::TensorData>> arguments;
    for (const ir::TensorData& arg : g.arguments) {
      arguments.push_back(std::make_shared<const ir::TensorData>(arg));
    }
    // Every failing seed is listed at the end; the first few are shown in full.
    const auto fail = [&](const std::string& what) {
      if (failed.size() < 3) {
        ADD_FAILURE() << "seed " << seed << ": " << what << "\n"
                      << g.text << "replay with KILN_DUMP=<dir> KILN_FUZZ_SEED=" << seed;
      }
      failed.push_back(seed);
    };
    absl::StatusOr<std::vector<ir::TensorData>> actual =
        codegen::cpu::CompileAndRun(g.graph, arguments);
    if (!actual.ok()) {
      fail(std::string(actual.status().ToString()));
      continue;
    }
    ASSERT_EQ(actual->size(), expected->size()) << "seed " << seed;
    for (size_t i = 0; i < expected->size(); ++i) {
      const ::testing::AssertionResult close =
          test::TensorsClose((*expected)[i], (*actual)[i], g.tolerance);
      if (!close) {
        fail("output " + std::to_string(i) + ": " + close.message());
        break;
      }
    }
    if (seed % 10 == 0) {
      // Counted on a sample: CompileGraph recompiles (its kernels come from the kernel cache).
      if (absl::StatusOr<std::shared_ptr<const codegen::cpu::CompiledGraph>> compiled =
              codegen::cpu::CompileGraph(g.graph);
          compiled.ok()) {
        kernels += (*compiled)->num_kernels;
        gemm_steps += (*compiled)->num_gemm_steps;
      }
    }
  }
  EXPECT_TRUE(failed.empty()) << failed.size() << " failing seeds: " << absl::StrJoin(failed, ", ");
  // The graphs exercise both code paths of the backend.
  EXPECT_GT(kernels, 0);
  EXPECT_GT(gemm_steps, 0);
}

// A cast to f16/bf16 of an f32 value that was accumulated (a GEMM over K terms, in another order
// than the interpreter's double) may round to the neighbouring 16-bit value when the f32 result
// lies near a rounding boundary: the cast value moves by one unit in the last place of the 16-bit
// type, 2^-10 (f16) or 2^-7 (bf16) of its magnitude, and later ops (a subtraction) carry that as
// an absolute error. With the larger shapes below such ties occur (e.g. K = 63 sums), so graphs
// with such casts are compared to that unit, relative to the largest magnitude among the graph's
// arguments and outputs (random_graph.h keeps intermediate values in a tame range).
test::Tolerance LargeGraphTolerance(const test::RandomGraph& g,
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

// Larger shapes: kernels whose work is split over the thread pool in several chunks, and GEMMs
// beyond one register block.
TEST(CpuRandomGraphTest, LargerGraphsMatchTheInterpreter) {
  test::RandomGraphOptions options;
  options.max_dim = 64;
  options.max_ops = 20;
  std::vector<uint64_t> failed;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    const test::RandomGraph g = test::MakeRandomGraph(seed, options);
    absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(g.graph, g.arguments);
    ASSERT_TRUE(expected.ok()) << "seed " << seed << ": " << expected.status() << "\n" << g.text;
    std::vector<std::shared_ptr<const ir::TensorData>> arguments;
    for (const ir::TensorData& arg : g.arguments) {
      arguments.push_back(std::make_shared<const ir::TensorData>(arg));
    }
    absl::StatusOr<std::vector<ir::TensorData>> actual =
        codegen::cpu::CompileAndRun(g.graph, arguments);
    if (!actual.ok()) {
      ADD_FAILURE() << "seed " << seed << ": " << actual.status() << "\n" << g.text;
      failed.push_back(seed);
      continue;
    }
    for (size_t i = 0; i < expected->size(); ++i) {
      const ::testing::AssertionResult close =
          test::TensorsClose((*expected)[i], (*actual)[i], LargeGraphTolerance(g, *expected));
      if (!close) {
        ADD_FAILURE() << "seed " << seed << ", output " << i << ": " << close.message() << "\n"
                      << g.text;
        failed.push_back(seed);
        break;
      }
    }
  }
  EXPECT_TRUE(failed.empty()) << failed.size() << " failing seeds: " << absl::StrJoin(failed, ", ");
}

}  // namespace
}  // namespace kiln
