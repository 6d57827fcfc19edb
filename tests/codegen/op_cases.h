// One table of small graphs that together use every IR op: several dtypes, shapes with
// broadcasts, size-1 and size-0 dims, special float values and the attribute variants. Each
// backend's op test runs every case against ir::Interpret:
//
//   class MyOpTest : public ::testing::TestWithParam<test::Case> {};
//   TEST_P(MyOpTest, MatchesInterpreter) {
//     absl::StatusOr<test::CaseInstance> in = test::Instantiate(GetParam());
//     auto expected = ir::Interpret(in->graph, in->arguments);
//     ... EXPECT_TRUE(test::TensorsClose(expected[i], actual[i], GetParam().tolerance));
//   }
//   INSTANTIATE_TEST_SUITE_P(AllOps, MyOpTest, ::testing::ValuesIn(test::Cases()),
//                            test::CaseTestName);
//
// The tolerances are those of a backend that computes f16/bf16 in f32 and accumulates in f32
// (kernel IR semantics); a backend with looser math (polynomial transcendentals) widens them
// where its documentation justifies it.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/graph.h"
#include "ir/tensor_data.h"
#include "tests/codegen/random_graph.h"

namespace kiln::test {

struct Case {
  std::string name;
  std::function<void(ir::Builder&)> build;
  // Adjusts the random arguments (in-range indices, special values).
  std::function<void(std::vector<ir::TensorData>&)> fix_args = nullptr;
  Tolerance tolerance = {};
};

/// gtest prints a case by name in failure messages.
void PrintTo(const Case& c, std::ostream* os);

/// Every case; together they use every op of ir::kAllOps (checked by the op tests).
std::vector<Case> Cases();

/// A case's graph with its arguments: random values (RandomTensor, seeded by the case name, so
/// every backend sees the same data) adjusted by the case's fix_args.
struct CaseInstance {
  ir::Graph graph;
  std::vector<ir::TensorData> arguments;
};
absl::StatusOr<CaseInstance> Instantiate(const Case& c);

/// A gtest parameter name: the case name with non-alphanumerics replaced, plus its index.
std::string CaseTestName(const ::testing::TestParamInfo<Case>& info);

/// The ops of ir::kAllOps that no case in Cases() builds (empty when every op is covered).
std::vector<ir::Op> OpsWithoutCase();

}  // namespace kiln::test
