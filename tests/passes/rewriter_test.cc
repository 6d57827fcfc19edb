// GraphRewriter, RewriteEachNode and SameGraph: what every pass builds on.
#include "passes/rewriter.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/printer.h"
#include "pass_test_util.h"

namespace kiln::passes {
namespace {

using ::testing::HasSubstr;

TEST(GraphRewriter, CopyKeepsLocationsAndOutputNames) {
  ir::Builder b;
  const ir::NodeId x = b.Parameter("x", {ir::DType::kF32, {2}});
  const int line = __LINE__ + 1;
  const ir::NodeId e = b.Unary(ir::Op::kExp, x);
  b.Output(e, "e");
  b.Output(x);
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok());
  absl::StatusOr<ir::Graph> copy =
      RewriteEachNode(*graph, [](GraphRewriter&, ir::NodeId) { return ir::kInvalidNode; });
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_TRUE(SameGraph(*graph, *copy));
  EXPECT_EQ(copy->node(1).loc.line(), static_cast<uint32_t>(line));
  EXPECT_EQ(ir::PrintGraph(*copy, {.locations = true}),
            ir::PrintGraph(*graph, {.locations = true}));
}

TEST(GraphRewriter, ReplacementsSeeTheNewGraph) {
  // Replace every exp by its operand's operand when that is a neg: rules read the new graph.
  const ir::Graph graph = testing::Parse(R"(
    graph {
      %0 = parameter() {name="x"} : f32[2]
      %1 = neg(%0) : f32[2]
      %2 = exp(%1) : f32[2]
      return %2 as "y"
    })");
  absl::StatusOr<ir::Graph> result =
      RewriteEachNode(graph, [](GraphRewriter& rw, ir::NodeId id) -> ir::NodeId {
        if (rw.source().node(id).op != ir::Op::kExp) return ir::kInvalidNode;
        const ir::Node& operand = rw.node(rw.Input(id, 0));
        return operand.op == ir::Op::kNeg ? operand.inputs[0] : ir::kInvalidNode;
      });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(testing::NormalizeWhitespace(ir::PrintGraph(*result)),
            testing::NormalizeWhitespace(R"(graph {
              %0 = parameter() {name="x"} : f32[2]
              %1 = neg(%0) : f32[2]
              return %0 as "y"
            })"));
}

TEST(GraphRewriter, AReplacementOfAnotherTypeIsAnError) {
  const ir::Graph graph = testing::Parse(R"(
    graph {
      %0 = parameter() {name="x"} : f32[2]
      %1 = reshape(%0) : f32[1,2]
      return %1
    })");
  absl::StatusOr<ir::Graph> result =
      RewriteEachNode(graph, [](GraphRewriter& rw, ir::NodeId id) -> ir::NodeId {
        return id == 1 ? rw.Input(id, 0) : ir::kInvalidNode;
      });
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(result.status().message(),
              HasSubstr("rewrite of %1 = reshape changed its type from f32[1,2] to f32[2]"));
}

TEST(GraphRewriter, AnIllTypedEmitIsReported) {
  const ir::Graph graph = testing::Parse(R"(
    graph {
      %0 = parameter() {name="x"} : f32[2]
      %1 = exp(%0) : f32[2]
      return %1
    })");
  absl::StatusOr<ir::Graph> result =
      RewriteEachNode(graph, [](GraphRewriter& rw, ir::NodeId id) -> ir::NodeId {
        if (id != 1) return ir::kInvalidNode;
        return rw.Emit(ir::Op::kNot, {rw.Input(id, 0)}, {}, {});
      });
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("not: needs a bool or integer operand"));
}

TEST(GraphRewriter, AnUnmappedOutputIsAnError) {
  const ir::Graph graph = testing::Parse(R"(
    graph {
      %0 = parameter() {name="x"} : f32[2]
      %1 = exp(%0) : f32[2]
      return %1
    })");
  GraphRewriter rw(graph);
  rw.Map(0, rw.Copy(0));
  absl::StatusOr<ir::Graph> result = std::move(rw).Finish();
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("was never mapped"));
}

TEST(SameGraph, ComparesAttributesBitForBitAndIgnoresLocations) {
  const char* kZero = "graph { %0 = fill() : f32[2] return %0 }";
  const char* kNegativeZero = "graph { %0 = fill() {value=-0} : f32[2] return %0 }";
  EXPECT_TRUE(SameGraph(testing::Parse(kZero), testing::Parse(kZero)));
  EXPECT_FALSE(SameGraph(testing::Parse(kZero), testing::Parse(kNegativeZero)));
  EXPECT_FALSE(SameGraph(testing::Parse(kZero),
                         testing::Parse("graph { %0 = fill() : f32[2] return %0 as \"y\" }")));
  EXPECT_FALSE(
      SameGraph(testing::Parse(kZero), testing::Parse("graph { %0 = fill() : f32[3] return %0 }")));
  ir::Graph located = testing::Parse(kZero);
  located.mutable_node(0).loc = std::source_location::current();
  EXPECT_TRUE(SameGraph(located, testing::Parse(kZero)));
}

}  // namespace
}  // namespace kiln::passes
