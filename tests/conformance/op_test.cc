// Every IR op, compiled and run by the backend under test, matches the reference interpreter on
// the cases of tests/codegen/op_cases.h (the one op-case table, shared with the kernel-evaluator
// lowering test), within each case's tolerance widened by the backend's documented math bounds.
// A coverage test checks that the cases use every op in ir::kAllOps.
#include <vector>

#include "gtest/gtest.h"
#include "ir/interpreter.h"
#include "ir/printer.h"
#include "tests/codegen/op_cases.h"
#include "tests/conformance/backend_under_test.h"

namespace kiln::conformance {
namespace {

class ConformanceOpTest : public ::testing::TestWithParam<test::Case> {};

TEST_P(ConformanceOpTest, MatchesInterpreter) {
  const BackendUnderTest& backend = Backend();
  const test::Case& c = GetParam();
  absl::StatusOr<test::CaseInstance> instance = test::Instantiate(c);
  ASSERT_TRUE(instance.ok()) << instance.status();
  const ir::Graph& graph = instance->graph;
  // Every case is valid: the interpreter accepts its arguments.
  absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(graph, instance->arguments);
  ASSERT_TRUE(expected.ok()) << expected.status();
  absl::StatusOr<std::vector<ir::TensorData>> actual = RunOnBackend(graph, instance->arguments);
  if (const ir::Node* gap = FindUnsupported(backend, graph)) {
    ASSERT_FALSE(actual.ok()) << backend.name << " declares " << ir::OpName(gap->op) << " "
                              << ir::DTypeName(gap->type.dtype) << " unsupported, yet ran it";
    EXPECT_EQ(actual.status().code(), absl::StatusCode::kUnimplemented) << actual.status();
    return;
  }
  ASSERT_TRUE(actual.ok()) << actual.status() << "\n" << ir::PrintGraph(graph);
  ASSERT_EQ(actual->size(), expected->size());
  const test::Tolerance tolerance = Tolerance(backend.math, c.tolerance, graph);
  for (size_t i = 0; i < expected->size(); ++i) {
    EXPECT_TRUE(test::TensorsClose((*expected)[i], (*actual)[i], tolerance))
        << "output " << i << "\n"
        << ir::PrintGraph(graph);
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, ConformanceOpTest, ::testing::ValuesIn(test::Cases()),
                         test::CaseTestName);

TEST(ConformanceOpCoverageTest, EveryOpHasACase) {
  for (ir::Op op : test::OpsWithoutCase()) ADD_FAILURE() << ir::OpName(op) << " has no case";
}

}  // namespace
}  // namespace kiln::conformance
