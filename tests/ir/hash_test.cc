// Structural hashing: independent of numbering and locations, sensitive to every part of the
// computation, blind to nodes the outputs do not reach.
#include "ir/hash.h"

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/parser.h"
#include "ir/printer.h"

namespace kiln::ir {
namespace {

TensorType T(DType dtype, Shape shape) { return TensorType{dtype, std::move(shape)}; }

Graph Finish(Builder b) {
  absl::StatusOr<Graph> graph = std::move(b).Build();
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *std::move(graph) : Graph();
}

Graph Parse(const std::string& text) {
  absl::StatusOr<Graph> graph = ParseGraph(text);
  EXPECT_TRUE(graph.ok()) << graph.status() << "\n" << text;
  return graph.ok() ? *std::move(graph) : Graph();
}

// out = matmul(exp(x), w) + reduce_sum(log(y)) broadcast, built in the given node order.
Graph Computation(bool reversed_order) {
  Builder b;
  NodeId x, y, w, ex, ly;
  if (!reversed_order) {
    x = b.Parameter("x", T(DType::kF32, {2, 3}));
    w = b.Parameter("w", T(DType::kF32, {3, 4}));
    ex = b.Unary(Op::kExp, x);
    y = b.Parameter("y", T(DType::kF32, {2, 4}));
    ly = b.Unary(Op::kLog, y);
  } else {
    y = b.Parameter("y", T(DType::kF32, {2, 4}));
    ly = b.Unary(Op::kLog, y);
    b.Fill(7, T(DType::kF32, {9}));  // Unreachable from the outputs.
    w = b.Parameter("w", T(DType::kF32, {3, 4}));
    x = b.Parameter("x", T(DType::kF32, {2, 3}));
    ex = b.Unary(Op::kExp, x);
  }
  const NodeId product = b.MatMul(ex, w);
  const NodeId row_sums = b.Reduce(Op::kReduceSum, ly, {1});
  const NodeId spread = b.Broadcast(row_sums, {2, 4});
  b.Output(b.Binary(Op::kAdd, product, spread), "out");
  b.Output(row_sums);
  return Finish(std::move(b));
}

TEST(HashTest, IndependentOfTopologicalOrderAndNumbering) {
  const Graph forward = Computation(false);
  const Graph reversed = Computation(true);
  ASSERT_NE(PrintGraph(forward), PrintGraph(reversed));
  EXPECT_EQ(StructuralHash(forward), StructuralHash(reversed));
  // The parameters come in another order, so a positional caller could not share them.
  EXPECT_NE(SignatureHash(forward), SignatureHash(reversed));
  EXPECT_EQ(SignatureHash(forward), SignatureHash(Computation(false)));
}

TEST(HashTest, SurvivesTextRoundTripAndIgnoresLocations) {
  const Graph graph = Computation(false);
  ASSERT_NE(LocationToString(graph.node(0).loc), "");
  const Graph parsed = Parse(PrintGraph(graph));
  ASSERT_EQ(LocationToString(parsed.node(0).loc), "");
  EXPECT_EQ(StructuralHash(parsed), StructuralHash(graph));
  EXPECT_EQ(SignatureHash(parsed), SignatureHash(graph));
  EXPECT_EQ(NodeHashes(parsed), NodeHashes(graph));
}

TEST(HashTest, SparseTextIdsHashLikeDenseOnes) {
  const Graph dense = Parse(R"(graph {
  %0 = parameter() {name="a"} : i32[3]
  %1 = neg(%0) : i32[3]
  return %1
})");
  const Graph sparse = Parse(R"(graph {
  %40 = parameter() {name="a"} : i32[3]
  %2 = neg(%40) : i32[3]
  return %2
})");
  EXPECT_EQ(StructuralHash(dense), StructuralHash(sparse));
}

TEST(HashTest, UnreachableNodesDoNotMatter) {
  const std::string base = R"(graph {
  %0 = parameter() {name="a"} : f32[3]
  %1 = exp(%0) : f32[3]
)";
  const Graph plain = Parse(base + "  return %1\n}");
  const Graph extra = Parse(base +
                            "  %2 = parameter() {name=\"unused\"} : f64[]\n"
                            "  %3 = log(%0) : f32[3]\n"
                            "  return %1\n}");
  EXPECT_EQ(StructuralHash(plain), StructuralHash(extra));
  // ...but an unused parameter is part of the positional signature.
  EXPECT_NE(SignatureHash(plain), SignatureHash(extra));
}

// One base graph and many single changes to it; every variant must hash differently from the
// base and from each other.
TEST(HashTest, EveryChangeChangesTheHash) {
  const std::string base = R"(graph {
  %0 = parameter() {name="a"} : f32[2,3]
  %1 = parameter() {name="b"} : f32[2,3]
  %2 = sub(%0, %1) : f32[2,3]
  %3 = reduce_sum(%2) {axes=[1]} : f32[2,1]
  %4 = constant() {literal=[1, 2]} : f32[2,1]
  %5 = mul(%3, %4) : f32[2,1]
  %6 = fill() {value=0} : f32[2,1]
  %7 = random_uniform() {seed=5} : f32[2,1]
  %8 = add(%5, %6) : f32[2,1]
  %9 = add(%8, %7) : f32[2,1]
  %10 = flip(%2) {axes=[1]} : f32[2,3]
  return %9 as "y", %10
})";
  const std::vector<std::pair<std::string, std::string>> changes = {
      {"sub(%0, %1)", "add(%0, %1)"},                               // op
      {"sub(%0, %1)", "sub(%1, %0)"},                               // operand order
      {"flip(%2) {axes=[1]}", "flip(%2) {axes=[0]}"},               // attribute
      {"literal=[1, 2]", "literal=[1, 2.0000002]"},                 // literal bytes
      {"literal=[1, 2]", "literal=[2, 1]"},                         // literal order
      {"{value=0}", "{value=-0}"},                                  // -0.0 is not 0.0
      {"{value=0}", "{value=nan}"},                                 //
      {"{seed=5}", "{seed=18446744073709551615}"},                  // seed
      {"name=\"a\"", "name=\"a2\""},                                // parameter name
      {"return %9 as \"y\", %10", "return %10, %9 as \"y\""},       // output order
      {"return %9 as \"y\", %10", "return %9 as \"z\", %10"},       // output name
      {"return %9 as \"y\", %10", "return %9, %10"},                // output name dropped
      {"return %9 as \"y\", %10", "return %9 as \"y\""},            // output dropped
      {"return %9 as \"y\", %10", "return %9 as \"y\", %10, %10"},  // output repeated
  };
  std::set<uint64_t> seen = {StructuralHash(Parse(base))};
  for (const auto& [from, to] : changes) {
    std::string text = base;
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    EXPECT_TRUE(seen.insert(StructuralHash(Parse(text))).second) << from << " -> " << to;
  }
  // Shape and dtype changes need the whole graph retyped.
  std::string wider = base;
  for (size_t at; (at = wider.find("f32[2,")) != std::string::npos;) wider.replace(at, 6, "f32[4,");
  wider.replace(wider.find("literal=[1, 2]"), 14, "literal=[1, 2, 3, 4]");
  EXPECT_TRUE(seen.insert(StructuralHash(Parse(wider))).second);
  std::string doubled = base;
  for (size_t at; (at = doubled.find("f32[")) != std::string::npos;) doubled.replace(at, 4, "f64[");
  EXPECT_TRUE(seen.insert(StructuralHash(Parse(doubled))).second);
}

// The accumulator is hashed when set and, like every attribute at its default, left out when not
// (so graphs without integer contractions hash as before): the text round trip keeps the hash,
// and accumulate=i64 is another graph than accumulate=i32.
TEST(HashTest, AccumulatorIsHashedWhenSet) {
  const std::string i32 = R"(graph {
  %0 = parameter() {name="a"} : i16[2,3]
  %1 = parameter() {name="b"} : i16[3,4]
  %2 = matmul(%0, %1) {accumulate=i32} : i32[2,4]
  %3 = matmul(%0, %1) : i16[2,4]
  return %2, %3
})";
  std::string i64 = i32;
  i64.replace(i64.find("{accumulate=i32} : i32"), 22, "{accumulate=i64} : i64");
  const Graph graph = Parse(i32);
  EXPECT_NE(StructuralHash(graph), StructuralHash(Parse(i64)));
  EXPECT_EQ(StructuralHash(graph), StructuralHash(Parse(PrintGraph(graph))));
}

TEST(HashTest, NodeHashesFindCommonSubexpressions) {
  Builder b;
  const NodeId x = b.Parameter("x", T(DType::kF32, {4}));
  const NodeId e1 = b.Unary(Op::kExp, x);
  const NodeId e2 = b.Unary(Op::kExp, x);
  const NodeId l = b.Unary(Op::kLog, x);
  const NodeId r1 = b.RandomNormal(T(DType::kF32, {4}), 1);
  const NodeId r2 = b.RandomNormal(T(DType::kF32, {4}), 1);
  const NodeId r3 = b.RandomNormal(T(DType::kF32, {4}), 2);
  b.Output(b.Binary(Op::kAdd, e1, e2));
  const Graph graph = Finish(std::move(b));
  const std::vector<uint64_t> hashes = NodeHashes(graph);
  ASSERT_EQ(hashes.size(), static_cast<size_t>(graph.num_nodes()));
  EXPECT_EQ(hashes[e1], hashes[e2]);
  EXPECT_NE(hashes[e1], hashes[l]);
  EXPECT_EQ(hashes[r1], hashes[r2]);  // Counter-based: same seed and type, same values.
  EXPECT_NE(hashes[r1], hashes[r3]);
  EXPECT_NE(hashes[x], hashes[e1]);
}

TEST(HashTest, BrokenGraphsHashWithoutCrashing) {
  Graph graph;
  Node node;
  node.op = Op::kNeg;
  node.inputs = {3};  // Not an earlier node.
  node.type = T(DType::kF32, {});
  graph.AddNode(node);
  node.inputs = {-1};
  graph.AddNode(node);
  graph.AddOutput(0);
  graph.AddOutput(1);
  graph.AddOutput(42);
  const uint64_t hash = StructuralHash(graph);
  EXPECT_EQ(hash, StructuralHash(graph));
  EXPECT_EQ(NodeHashes(graph).size(), 2u);
}

TEST(HashTest, EmptyGraphsDifferFromGraphsWithOutputs) {
  const Graph empty;
  Builder b;
  b.Output(b.Fill(0, T(DType::kF32, {})));
  EXPECT_NE(StructuralHash(empty), StructuralHash(Finish(std::move(b))));
  EXPECT_EQ(StructuralHash(empty), StructuralHash(Graph()));
}

}  // namespace
}  // namespace kiln::ir
