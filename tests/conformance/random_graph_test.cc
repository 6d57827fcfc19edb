// Property test: random graphs (tests/codegen/random_graph.h) compiled and run by the backend
// under test match the reference interpreter. A fixed seed list runs every time;
// KILN_FUZZ_SEED=<n> (or "random") adds one more to the small-graph test.
#include "tests/codegen/random_graph.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "ir/interpreter.h"
#include "tests/conformance/backend_under_test.h"

namespace kiln::conformance {
namespace {

// A cast to f16/bf16 of an f32 value that was accumulated (a GEMM over K terms, in another order
// than the interpreter's double) may round to the neighbouring 16-bit value when the f32 result
// lies near a rounding boundary: the cast value moves by one unit in the last place of the 16-bit
// type, 2^-10 (f16) or 2^-7 (bf16) of its magnitude, and later ops (a subtraction) carry that as
// an absolute error. With the larger shapes such ties occur (e.g. K = 63 sums), so those graphs
// are compared to that unit, relative to the largest magnitude among the graph's arguments and
// outputs (random_graph.h keeps intermediate values in a tame range).
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

std::vector<uint64_t> Range(uint64_t last) {
  std::vector<uint64_t> seeds;
  for (uint64_t seed = 1; seed <= last; ++seed) seeds.push_back(seed);
  return seeds;
}

// Runs every seed's graph on the backend; every failing seed is listed at the end, the first few
// in full. Every graph runs (or hits a gap the backend declares, with Unimplemented), and the
// sample compiled again exercises both of the backend's code paths (kernels, contractions).
void RunSeeds(const std::vector<uint64_t>& seeds, const test::RandomGraphOptions& options,
              bool cast_unit) {
  const BackendUnderTest& backend = Backend();
  std::vector<uint64_t> failed;
  int64_t kernels = 0, contractions = 0;
  for (uint64_t seed : seeds) {
    const test::RandomGraph g = test::MakeRandomGraph(seed, options);
    absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(g.graph, g.arguments);
    ASSERT_TRUE(expected.ok()) << "seed " << seed << ": " << expected.status() << "\n" << g.text;
    const auto fail = [&](const std::string& what) {
      if (failed.size() < 3) {
        ADD_FAILURE() << backend.name << ", seed " << seed << ": " << what << "\n"
                      << g.text << "replay with KILN_DUMP=<dir> KILN_FUZZ_SEED=" << seed;
      }
      failed.push_back(seed);
    };
    absl::StatusOr<std::vector<ir::TensorData>> actual = RunOnBackend(g.graph, g.arguments);
    if (FindUnsupported(backend, g.graph) != nullptr) {
      if (actual.ok() || actual.status().code() != absl::StatusCode::kUnimplemented) {
        fail("a declared gap did not fail with Unimplemented: " +
             (actual.ok() ? std::string("it ran") : std::string(actual.status().ToString())));
      }
      continue;
    }
    if (!actual.ok()) {
      fail(std::string(actual.status().ToString()));
      continue;
    }
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
      // Counted on a sample: a compile of its own (its kernels come from the kernel caches).
      if (absl::StatusOr<CompileStats> stats = backend.compile(g.graph); stats.ok()) {
        kernels += stats->kernels;
        contractions += stats->contractions;
      }
    }
  }
  EXPECT_TRUE(failed.empty()) << failed.size() << " failing seeds: " << absl::StrJoin(failed, ", ");
  EXPECT_GT(kernels, 0);
  EXPECT_GT(contractions, 0);
}

TEST(ConformanceRandomGraphTest, CompiledGraphsMatchTheInterpreter) {
  RunSeeds(test::FuzzSeeds(Range(500)), {}, /*cast_unit=*/false);
}

// Larger shapes: kernels split over several threads or workgroups, GEMMs beyond one register
// block or matmuls over several tiles, reductions long enough for one workgroup per row.
TEST(ConformanceRandomGraphTest, LargerGraphsMatchTheInterpreter) {
  test::RandomGraphOptions options;
  options.max_dim = 64;
  options.max_ops = 20;
  RunSeeds(Range(150), options, /*cast_unit=*/true);
}

}  // namespace
}  // namespace kiln::conformance
