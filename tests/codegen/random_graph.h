// Random graphs for property tests: a backend (or the lowering + kernel evaluator) must compute
// the same outputs as the reference interpreter on every graph MakeRandomGraph returns.
//
//   for (uint64_t seed : test::FuzzSeeds({1, 2, 3})) {
//     test::RandomGraph g = test::MakeRandomGraph(seed);
//     auto expected = ir::Interpret(g.graph, g.arguments);
//     auto actual = MyBackend(g.graph, g.arguments);
//     EXPECT_TRUE(test::TensorsClose(expected[i], actual[i], g.tolerance)) << g.text;
//   }
//
// The graphs mix elementwise chains, broadcasts, reductions (including softmax-like row
// patterns), movement ops, gather/scatter_add with in-range indices, windows, matmul with bias
// and activation, conv, and leaves (fill, iota, random_*, constants), with 5–40 ops and small
// shapes (size-1 and occasionally size-0 dims). Values stay in a tame range (exp/log/div are
// applied to bounded inputs), and discontinuous ops (floor, round, sign, compares, casts to
// integers, argmax) are only applied to values computed without inexact accumulation, so a
// correct backend never differs from the interpreter by more than `tolerance`.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "ir/graph.h"
#include "ir/tensor_data.h"

namespace kiln::test {

struct RandomGraphOptions {
  int min_ops = 5;
  int max_ops = 40;
  /// Element types the graph computes in: one family is picked per graph (floats compute in one
  /// of the float dtypes listed, integers in one of the integer dtypes listed).
  std::vector<ir::DType> dtypes = {ir::DType::kF32, ir::DType::kF64, ir::DType::kI32,
                                   ir::DType::kI64};
  int max_rank = 3;
  int64_t max_dim = 5;
  /// Probability that a new shape gets a zero-size dimension.
  double zero_dim_probability = 0.03;
  bool allow_matmul = true;
  bool allow_conv = true;
  bool allow_window = true;
  bool allow_index = true;  // gather and scatter_add
  bool allow_random = true;
};

/// Comparison tolerance: |actual - expected| <= atol + rtol * |expected| for floats; integers
/// and bools must be equal; NaN must match NaN and infinities must match.
struct Tolerance {
  double rtol = 0.0;
  double atol = 0.0;
};

struct RandomGraph {
  uint64_t seed = 0;
  ir::Graph graph;
  /// One value per graph.Parameters(), in order (index parameters hold in-range indices).
  std::vector<ir::TensorData> arguments;
  Tolerance tolerance;
  /// The graph's text form, for failure messages.
  std::string text;
};

/// A random graph that verifies, with arguments. Deterministic in (seed, options).
RandomGraph MakeRandomGraph(uint64_t seed, const RandomGraphOptions& options = {});

/// `fixed`, plus the seed in $KILN_FUZZ_SEED if set (a decimal number; "random" picks one and
/// prints it so a failure can be replayed).
std::vector<uint64_t> FuzzSeeds(std::vector<uint64_t> fixed);

/// Random values of `type`: floats in about [-2, 2] (normal), integers in [-10, 10] ([0, 20] for
/// u8), bools 50/50.
ir::TensorData RandomTensor(const ir::TensorType& type, std::mt19937_64& rng);
/// The same from a generator of its own, seeded with `seed`.
ir::TensorData RandomTensor(const ir::TensorType& type, uint64_t seed);

/// Random arguments of a graph and the reference interpreter's outputs on them: what a test
/// compares a backend's run of the graph with.
struct ReferenceRun {
  /// One RandomTensor per graph.Parameters(), in order, shared as the graph compilers take them.
  std::vector<std::shared_ptr<const ir::TensorData>> arguments;
  /// ir::Interpret's outputs.
  std::vector<ir::TensorData> expected;
};

/// Draws the arguments of `graph` from one generator seeded with `seed` and interprets the graph
/// on them; an error is the interpreter's.
absl::StatusOr<ReferenceRun> RunReference(const ir::Graph& graph, uint64_t seed);

/// Compares two tensors of one type (see Tolerance), naming the first mismatching element.
::testing::AssertionResult TensorsClose(const ir::TensorData& expected,
                                        const ir::TensorData& actual, Tolerance tolerance);

}  // namespace kiln::test
