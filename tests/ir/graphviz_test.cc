// Graphviz export: the DOT text has the expected structure, and Graphviz's own `dot` accepts it.
#include "ir/graphviz.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/builder.h"

namespace kiln::ir {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TensorType T(DType dtype, Shape shape) { return TensorType{dtype, std::move(shape)}; }

Graph Finish(Builder b) {
  absl::StatusOr<Graph> graph = std::move(b).Build();
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *std::move(graph) : Graph();
}

// The `dot` executable on PATH, or "".
std::string FindDot() {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(std::string(dir), "/dot");
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

struct DotResult {
  int exit_code = -1;
  std::string svg;
  std::string errors;
};

// Renders `dot_text` to SVG with Graphviz.
DotResult RunDot(const std::string& dot_text, const std::string& name) {
  const std::string dot = FindDot();
  DotResult result;
  if (dot.empty()) {
    ADD_FAILURE() << "graphviz's `dot` is not on PATH; run scripts/install_deps.sh";
    return result;
  }
  const std::string base =
      absl::StrCat(::testing::TempDir(), "/kiln_graphviz_", getpid(), "_", name);
  std::ofstream(base + ".dot", std::ios::binary) << dot_text;
  const std::string command =
      absl::StrCat("'", dot, "' -Tsvg '", base, ".dot' -o '", base, ".svg' 2> '", base, ".err'");
  const int status = std::system(command.c_str());
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.svg = ReadFile(base + ".svg");
  result.errors = ReadFile(base + ".err");
  for (const char* ext : {".dot", ".svg", ".err"}) std::remove((base + ext).c_str());
  return result;
}

Graph Model() {
  Builder b;
  const NodeId x = b.Parameter("x", T(DType::kF32, {2, 3}));
  const NodeId w = b.Parameter("weight \"w\" \\ caf\xc3\xa9\n", T(DType::kF32, {3, 4}));
  const NodeId product = b.MatMul(x, w);
  const NodeId bias =
      b.Constant(TensorData::FromVector<double>(DType::kF32, {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}));
  const NodeId sum = b.Binary(Op::kAdd, product, bias);
  const NodeId positive = b.Binary(Op::kGt, sum, b.Fill(0, T(DType::kF32, {2, 4})));
  const NodeId relu = b.Select(positive, sum, b.Fill(0, T(DType::kF32, {2, 4})));
  const NodeId total = b.Reduce(Op::kReduceSum, relu, {0, 1});
  b.Output(relu, "activations <html> & \"quotes\"");
  b.Output(total);
  b.Output(relu);
  return Finish(std::move(b));
}

TEST(GraphvizTest, DotTextHasNodesEdgesAndOutputs) {
  const Graph graph = Model();
  DotOptions options;
  options.max_literal_elements = 3;
  const std::string dot = ToDot(graph, options);
  EXPECT_THAT(dot, HasSubstr("digraph kiln {"));
  // Labels: "%id op", key attributes, type; parameters and constants styled apart.
  EXPECT_THAT(dot, HasSubstr("n0 [label=\"%0 parameter\\nname=\\\"x\\\"\\nf32[2,3]\", "
                             "shape=ellipse"));
  EXPECT_THAT(dot, HasSubstr("n3 [label=\"%3 constant\\nliteral=[1, 2, 3, ...]\\nf32[2,4]\", "
                             "shape=box, style=\"filled,rounded\""));
  EXPECT_THAT(dot, HasSubstr("[label=\"%9 reduce_sum\\naxes=[0,1]\\nf32[1,1]\", shape=box];"));
  // The awkward name reaches DOT escaped twice: by the IR printer, then for DOT.
  EXPECT_THAT(dot,
              HasSubstr("name=\\\"weight \\\\\\\"w\\\\\\\" \\\\\\\\ caf\\\\xc3\\\\xa9\\\\n\\\""));
  // Edges operand -> user, numbered when the op takes several operands.
  EXPECT_THAT(dot, HasSubstr("n0 -> n2 [label=\"0\"];"));
  EXPECT_THAT(dot, HasSubstr("n1 -> n2 [label=\"1\"];"));
  EXPECT_THAT(dot, HasSubstr("n8 -> n9;"));
  // Outputs, in order, with their names.
  EXPECT_THAT(dot, HasSubstr("out0 [label=\"output 0\\n\\\"activations <html> & \\\\\\\"quotes"
                             "\\\\\\\"\\\"\", shape=house"));
  EXPECT_THAT(dot, HasSubstr("n8 -> out0 [style=bold];"));
  EXPECT_THAT(dot, HasSubstr("n9 -> out1 [style=bold];"));
  EXPECT_THAT(dot, HasSubstr("n8 -> out2 [style=bold];"));
  for (const char c : dot) EXPECT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f)) << int{c};
}

TEST(GraphvizTest, DotRendersTheGraph) {
  const DotResult result = RunDot(ToDot(Model()), "model");
  ASSERT_EQ(result.exit_code, 0) << result.errors;
  EXPECT_EQ(result.errors, "");
  EXPECT_THAT(result.svg, HasSubstr("<svg"));
  for (const char* text :
       {"%0 parameter", "%2 matmul", "%3 constant", "%4 add", "%6 gt", "%8 select", "%9 reduce_sum",
        "output 0", "output 2", "f32[2,4]", "activations &lt;html&gt; &amp;"}) {
    EXPECT_THAT(result.svg, HasSubstr(text));
  }
}

TEST(GraphvizTest, BrokenAndEmptyGraphsStillRender) {
  Graph graph;
  Node node;
  node.op = Op::kAdd;
  node.inputs = {4, -2};
  node.type = T(DType::kF32, {});
  graph.AddNode(node);
  graph.AddNode(node);
  graph.AddOutput(1);
  graph.AddOutput(7, "dangling");
  const std::string dot = ToDot(graph);
  EXPECT_THAT(dot, HasSubstr("missing4 [label=\"missing %4\""));
  EXPECT_THAT(dot, HasSubstr("missing_2 [label=\"missing %-2\""));
  EXPECT_THAT(dot, HasSubstr("missing4 -> n1"));
  EXPECT_THAT(dot, Not(HasSubstr("-> out1")));
  const DotResult broken = RunDot(dot, "broken");
  ASSERT_EQ(broken.exit_code, 0) << broken.errors;
  EXPECT_THAT(broken.svg, HasSubstr("missing %4"));

  const DotResult empty = RunDot(ToDot(Graph()), "empty");
  ASSERT_EQ(empty.exit_code, 0) << empty.errors;
  EXPECT_THAT(empty.svg, HasSubstr("<svg"));
}

TEST(GraphvizTest, LongAttributesAreCut) {
  Builder b;
  b.Output(b.Parameter(std::string(500, 'n'), T(DType::kF32, {})));
  DotOptions options;
  options.max_attr_chars = 40;
  const std::string dot = ToDot(Finish(std::move(b)), options);
  EXPECT_THAT(dot, HasSubstr(absl::StrCat("name=\\\"", std::string(31, 'n'), "...\\n")));
  EXPECT_THAT(dot, Not(HasSubstr(std::string(32, 'n'))));
}

}  // namespace
}  // namespace kiln::ir
