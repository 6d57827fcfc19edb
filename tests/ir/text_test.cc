// The text form: exact printing, round trips for every op and dtype, parser errors with
// positions, and hostile input (truncation, huge numbers, garbage, random mutations).
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/parser.h"
#include "ir/printer.h"

namespace kiln::ir {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TensorType T(DType dtype, Shape shape) { return TensorType{dtype, std::move(shape)}; }

Graph Finish(Builder b) {
  absl::StatusOr<Graph> graph = std::move(b).Build();
  EXPECT_TRUE(graph.ok()) << graph.status();
  return graph.ok() ? *std::move(graph) : Graph();
}

// A literal whose elements are given as raw bit patterns (NaN payloads, -0.0, subnormals).
TensorData FromBits(DType dtype, Shape shape, const std::vector<uint64_t>& bits) {
  TensorData data(dtype, std::move(shape));
  const int64_t size = DTypeSize(dtype);
  for (size_t i = 0; i < bits.size(); ++i) {
    // Little-endian host: the low `size` bytes of the pattern.
    std::memcpy(data.data() + static_cast<int64_t>(i) * size, &bits[i], static_cast<size_t>(size));
  }
  return data;
}

struct Sample {
  std::string name;
  Graph graph;
};

// Sample graphs that together use every op (checked by EverySampleOpIsCovered), every dtype,
// scalars, zero-size dims and awkward numbers and names.
std::vector<Sample> Samples() {
  std::vector<Sample> samples;
  {
    Builder b;
    const NodeId x = b.Parameter("x \"quoted\" \\ \n\t\x01 caf\xc3\xa9", T(DType::kF32, {2, 3}));
    const NodeId one = b.Fill(1, T(DType::kF32, {2, 3}));
    const NodeId sum = b.Binary(Op::kAdd, x, one);
    b.Output(sum, "y");
    b.Output(b.Iota(T(DType::kI32, {4, 2}), 1));
    b.Output(b.Iota(T(DType::kBF16, {3}), 0));
    b.Output(b.RandomUniform(T(DType::kF32, {2, 2}), 42));
    b.Output(b.RandomNormal(T(DType::kF16, {3}), ~uint64_t{0}));          // > 2^63
    b.Output(b.RandomNormal(T(DType::kF64, {}), uint64_t{1} << 63), "");  // exactly 2^63
    b.Output(b.Constant(TensorData::FromVector<double>(DType::kF32, {3}, {1, 2.5, -3})));
    b.Output(sum, "again, \"y\"");
    samples.push_back({"leaves", Finish(std::move(b))});
  }
  {
    Builder b;
    const NodeId x = b.Parameter("x", T(DType::kF32, {2, 3}));
    for (Op op :
         {Op::kNeg, Op::kAbs, Op::kSign, Op::kExp, Op::kLog, Op::kSqrt, Op::kRsqrt, Op::kSin,
          Op::kCos, Op::kTanh, Op::kErf, Op::kFloor, Op::kCeil, Op::kRound, Op::kReciprocal}) {
      b.Output(b.Unary(op, x));
    }
    const NodeId i = b.Parameter("i", T(DType::kI64, {5}));
    b.Output(b.Unary(Op::kNeg, i));
    b.Output(b.Unary(Op::kNot, i));
    b.Output(b.Unary(Op::kNot, b.Parameter("flags", T(DType::kBool, {}))));
    b.Output(b.Unary(Op::kAbs, b.Parameter("h", T(DType::kF16, {0, 7}))));
    samples.push_back({"unary", Finish(std::move(b))});
  }
  {
    Builder b;
    const NodeId a = b.Parameter("a", T(DType::kF64, {4}));
    const NodeId c = b.Parameter("c", T(DType::kF64, {4}));
    for (Op op : {Op::kAdd, Op::kSub, Op::kMul, Op::kDiv, Op::kPow, Op::kMax, Op::kMin, Op::kMod}) {
      b.Output(b.Binary(op, a, c));
    }
    const NodeId p = b.Parameter("p", T(DType::kI32, {}));
    const NodeId q = b.Parameter("q", T(DType::kI32, {}));
    for (Op op : {Op::kDiv, Op::kMod, Op::kMax}) b.Output(b.Binary(op, p, q));
    for (Op op : {Op::kEq, Op::kNe, Op::kLt, Op::kLe, Op::kGt, Op::kGe}) {
      b.Output(b.Binary(op, a, c));
    }
    const NodeId u = b.Parameter("u", T(DType::kU8, {2, 0}));
    const NodeId v = b.Parameter("v", T(DType::kU8, {2, 0}));
    const NodeId f = b.Parameter("f", T(DType::kBool, {3}));
    const NodeId g = b.Parameter("g", T(DType::kBool, {3}));
    for (Op op : {Op::kAnd, Op::kOr, Op::kXor}) {
      b.Output(b.Binary(op, u, v));
      b.Output(b.Binary(op, f, g));
    }
    const NodeId bf = b.Parameter("bf", T(DType::kBF16, {3}));
    b.Output(b.Select(f, bf, b.Fill(-0.0, T(DType::kBF16, {3}))));
    samples.push_back({"elementwise", Finish(std::move(b))});
  }
  {
    Builder b;
    const NodeId x = b.Parameter("x", T(DType::kF32, {2, 3}));
    for (DType d : kAllDTypes) b.Output(b.Cast(x, d));
    const NodeId big = b.Parameter("big", T(DType::kI64, {2, 3, 4}));
    b.Output(b.Reduce(Op::kReduceSum, big, {0, 2}));
    b.Output(b.Reduce(Op::kReduceProd, x, {}));
    b.Output(b.Reduce(Op::kReduceMax, big, {1}));
    b.Output(b.Reduce(Op::kReduceMin, x, {0, 1}));
    b.Output(b.Reduce(Op::kReduceSum, b.Parameter("empty", T(DType::kF32, {0, 3})), {0}));
    b.Output(b.ArgReduce(Op::kArgMax, big, 2));
    b.Output(b.ArgReduce(Op::kArgMin, x, 0));
    samples.push_back({"cast_and_reduce", Finish(std::move(b))});
  }
  {
    Builder b;
    const NodeId x = b.Parameter("x", T(DType::kF32, {2, 3, 4}));
    b.Output(b.Reshape(x, {6, 4}));
    b.Output(b.Reshape(x, {24}));
    b.Output(b.Reshape(b.Parameter("s", T(DType::kI32, {})), {1, 1}));
    b.Output(b.Permute(x, {2, 0, 1}));
    b.Output(b.Broadcast(b.Parameter("row", T(DType::kF32, {1, 3, 1})), {5, 3, 2}));
    b.Output(b.Slice(x, {0, 1, 0}, {2, 3, 4}, {1, 1, 3}));
    b.Output(b.Slice(x, {1, 0, 2}, {1, 3, 4}));
    b.Output(b.Pad(x, {0, 1, 2}, {1, 0, 0}, -0.0));
    b.Output(b.Pad(x, {1, 1, 1}, {0, 0, 0}, kNaN));
    b.Output(b.Pad(x, {0, 0, 0}, {0, 0, 1}, -kInf));
    b.Output(b.Pad(x, {0, 0, 0}, {0, 0, 1}, 0.1));
    b.Output(b.Concat({x, b.Parameter("y", T(DType::kF32, {2, 1, 4})), x}, 1));
    b.Output(b.Flip(x, {0, 2}));
    samples.push_back({"movement", Finish(std::move(b))});
  }
  {
    Builder b;
    const NodeId x = b.Parameter("x", T(DType::kF32, {3, 4}));
    const NodeId index = b.Parameter("index", T(DType::kI64, {2, 4}));
    b.Output(b.Gather(x, index, 0));
    b.Output(b.ScatterAdd(x, index, b.Parameter("src", T(DType::kF32, {2, 4})), 0));
    const NodeId ia = b.Parameter("ia", T(DType::kI32, {2, 3, 4}));
    const NodeId ib = b.Parameter("ib", T(DType::kI32, {2, 4, 5}));
    b.Output(b.MatMul(ia, ib));
    b.Output(b.MatMul(x, b.Parameter("w", T(DType::kF32, {4, 0}))));
    const NodeId image = b.Parameter("image", T(DType::kF32, {1, 4, 5, 5}));
    const NodeId kernel = b.Parameter("kernel", T(DType::kF32, {6, 2, 3, 3}));
    Attrs conv;
    conv.strides = {2, 1};
    conv.low = {1, 0};
    conv.high = {0, 1};
    conv.dilation = {1, 2};
    conv.input_dilation = {2, 1};
    conv.groups = 2;
    b.Output(b.Conv(image, kernel, conv));
    b.Output(b.Conv(image, b.Parameter("k1", T(DType::kF32, {3, 4, 1, 1})), Attrs{}));
    b.Output(b.IntegerMatMul(b.Parameter("q", T(DType::kU8, {2, 3})),
                             b.Parameter("qw", T(DType::kI8, {3, 4})), DType::kI32));
    Attrs integer_conv;
    integer_conv.accumulate = DType::kI32;
    b.Output(b.Conv(b.Parameter("qi", T(DType::kU8, {1, 2, 3, 3})),
                    b.Parameter("qk", T(DType::kI8, {2, 2, 2, 2})), integer_conv));
    Attrs window;
    window.window = {2, 3};
    window.strides = {2, 1};
    window.low = {0, 1};
    window.high = {1, 0};
    window.dilation = {1, 2};
    b.Output(b.WindowReduce(Op::kWindowSum, x, window));
    Attrs plain;
    plain.window = {1, 2};
    b.Output(b.WindowReduce(Op::kWindowMax, b.Parameter("bytes", T(DType::kU8, {3, 4})), plain));
    Attrs along;
    along.axes = {1};
    b.Output(b.Emit(Op::kSort, {x}, along));
    b.Output(b.Emit(Op::kArgsort, {b.Parameter("ints", T(DType::kI32, {2, 3}))}, along));
    samples.push_back({"index_contraction_window", Finish(std::move(b))});
  }
  {
    // Literals of every dtype with their awkward values, given by bit pattern.
    Builder b;
    b.Output(
        b.Constant(FromBits(DType::kF32, {12},
                            {0x7fc00000, 0xffc00000, 0x7fc00001, 0x7f800001, 0x7f800000, 0xff800000,
                             0x80000000, 0x00000000, 0x00000001, 0x7f7fffff,
                             std::bit_cast<uint32_t>(0.1f), std::bit_cast<uint32_t>(-1e-7f)})));
    b.Output(b.Constant(FromBits(
        DType::kF64, {2, 5},
        {0x7ff8000000000000, 0xfff8000000000000, 0x7ff0000000000001, 0xfff0000000000000,
         0x8000000000000000, 0x0000000000000001, 0x7fefffffffffffff, std::bit_cast<uint64_t>(0.1),
         std::bit_cast<uint64_t>(1.0 / 3), std::bit_cast<uint64_t>(-123456789.125)})));
    b.Output(b.Constant(FromBits(
        DType::kF16, {10},
        {0x7e00, 0xfe00, 0x7c01, 0x7e01, 0x7c00, 0xfc00, 0x8000, 0x0001, 0x7bff, 0x2e66})));
    b.Output(b.Constant(
        FromBits(DType::kBF16, {9},
                 {0x7fc0, 0xffc0, 0x7f81, 0x7f80, 0xff80, 0x8000, 0x0001, 0x7f7f, 0x3dcd})));
    b.Output(b.Constant(TensorData::FromVector<int64_t>(
        DType::kI32, {4},
        {std::numeric_limits<int32_t>::min(), -1, 0, std::numeric_limits<int32_t>::max()})));
    TensorData i64(DType::kI64, {4});
    i64.SetInt64(0, std::numeric_limits<int64_t>::min());
    i64.SetInt64(1, std::numeric_limits<int64_t>::max());
    i64.SetInt64(2, (int64_t{1} << 53) + 1);  // Not a double.
    i64.SetInt64(3, -7);
    b.Output(b.Constant(std::move(i64)));
    b.Output(b.Constant(TensorData::FromVector<int>(DType::kU8, {3}, {0, 128, 255})));
    b.Output(b.Constant(TensorData::FromVector<int>(DType::kBool, {2, 2}, {1, 0, 0, 1})));
    b.Output(b.Constant(TensorData::FromVector<double>(DType::kF64, {}, {2.5})));
    b.Output(b.Constant(TensorData(DType::kI32, {0, 4})));
    samples.push_back({"literals", Finish(std::move(b))});
  }
  {
    // Fill values that stress number printing; every dtype; scalars and zero-size shapes.
    Builder b;
    for (double value : {kNaN, -kNaN, kInf, -kInf, -0.0, 5e-324, 1e-300, 0.1, 1e21, 123456789.0,
                         -2.5, std::bit_cast<double>(uint64_t{0x7ff0000000000123})}) {
      b.Output(b.Fill(value, T(DType::kF64, {})));
    }
    for (DType d : kAllDTypes) {
      b.Output(b.Fill(1, T(d, {2, 0, 3})));
      b.Parameter(absl::StrCat("p_", DTypeName(d)), T(d, {}));
    }
    samples.push_back({"fills", Finish(std::move(b))});
  }
  {
    Builder b;
    b.Parameter("unused", T(DType::kF32, {1}));
    samples.push_back({"no_outputs", Finish(std::move(b))});
  }
  return samples;
}

// Node-by-node equality, with attrs.value also compared by bits (Attrs::operator== calls
// -0.0 equal to 0.0 and any NaN equal to any other).
void ExpectSameGraph(const Graph& a, const Graph& b) {
  ASSERT_EQ(a.num_nodes(), b.num_nodes());
  for (NodeId id = 0; id < a.num_nodes(); ++id) {
    SCOPED_TRACE(absl::StrCat("node %", id));
    const Node& x = a.node(id);
    const Node& y = b.node(id);
    EXPECT_EQ(x.op, y.op);
    EXPECT_EQ(x.inputs, y.inputs);
    EXPECT_TRUE(x.attrs == y.attrs) << PrintNode(a, id) << " vs " << PrintNode(b, id);
    EXPECT_EQ(std::bit_cast<uint64_t>(x.attrs.value), std::bit_cast<uint64_t>(y.attrs.value));
    EXPECT_EQ(x.type, y.type);
  }
  EXPECT_EQ(a.outputs(), b.outputs());
}

TEST(TextTest, EverySampleOpIsCovered) {
  std::set<Op> used;
  for (const Sample& sample : Samples()) {
    for (const Node& node : sample.graph.nodes()) used.insert(node.op);
  }
  for (Op op : kAllOps) EXPECT_TRUE(used.contains(op)) << "no sample uses " << OpName(op);
}

TEST(TextTest, EverySampleRoundTrips) {
  for (const Sample& sample : Samples()) {
    SCOPED_TRACE(sample.name);
    ASSERT_GT(sample.graph.num_nodes(), 0);
    const std::string text = PrintGraph(sample.graph);
    absl::StatusOr<Graph> parsed = ParseGraph(text);
    ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
    EXPECT_EQ(PrintGraph(*parsed), text);
    ExpectSameGraph(sample.graph, *parsed);
  }
}

TEST(TextTest, PrintsTheDocumentedFormat) {
  Builder b;
  const NodeId x = b.Parameter("x", T(DType::kF32, {2, 3}));
  const NodeId one = b.Fill(1, T(DType::kF32, {2, 3}));
  const NodeId sum = b.Binary(Op::kAdd, x, one);
  const NodeId reduced = b.Reduce(Op::kReduceSum, sum, {1});
  b.Constant(TensorData::FromVector<double>(DType::kF32, {3}, {1, 2.5, -3}));
  b.Output(sum, "y");
  b.Output(reduced);
  const Graph graph = Finish(std::move(b));
  EXPECT_EQ(PrintGraph(graph),
            "graph {\n"
            "  %0 = parameter() {name=\"x\"} : f32[2,3]\n"
            "  %1 = fill() {value=1} : f32[2,3]\n"
            "  %2 = add(%0, %1) : f32[2,3]\n"
            "  %3 = reduce_sum(%2) {axes=[1]} : f32[2,1]\n"
            "  %4 = constant() {literal=[1, 2.5, -3]} : f32[3]\n"
            "  return %2 as \"y\", %3\n"
            "}\n");
  EXPECT_EQ(PrintNode(graph, 2), "%2 = add(%0, %1) : f32[2,3]");
  EXPECT_EQ(PrintAttrs(graph.node(3)), "axes=[1]");
  EXPECT_EQ(PrintAttrs(graph.node(2)), "");
}

TEST(TextTest, PrintsEachAttributeAndNumberSpelling) {
  const std::vector<Sample> samples = Samples();
  std::string all;
  for (const Sample& s : samples) all += PrintGraph(s.graph);
  // Attributes restored from the result type are not printed.
  EXPECT_THAT(all, HasSubstr("= cast(%0) : f64[2,3]"));
  EXPECT_THAT(all, HasSubstr("= reshape(%0) : f32[6,4]"));
  EXPECT_THAT(all, HasSubstr("= broadcast(%6) : f32[5,3,2]"));
  EXPECT_THAT(all, HasSubstr("= random_normal() {seed=18446744073709551615} : f16[3]"));
  EXPECT_THAT(all, HasSubstr("= random_normal() {seed=9223372036854775808} : f64[]"));
  EXPECT_THAT(all, HasSubstr("= iota() {axes=[1]} : i32[4,2]"));
  EXPECT_THAT(all, HasSubstr("{name=\"x \\\"quoted\\\" \\\\ \\n\\t\\x01 caf\\xc3\\xa9\"}"));
  EXPECT_THAT(all, HasSubstr("return %2 as \"y\", %3, %4, %5, %6, %7, %8, %2 as \"again, "
                             "\\\"y\\\"\"\n"));
  EXPECT_THAT(all, HasSubstr("= slice(%0) {starts=[0,1,0], limits=[2,3,4], strides=[1,1,3]}"));
  EXPECT_THAT(all, HasSubstr("{strides=[2,1], low=[1,0], high=[0,1], dilation=[1,2], "
                             "input_dilation=[2,1], groups=2} : f32[1,6,4,2]"));
  EXPECT_THAT(all, HasSubstr("window_sum(%0) {window=[2,3], strides=[2,1], low=[0,1], high=[1,0], "
                             "dilation=[1,2]} : f32[2,1]"));
  EXPECT_THAT(all, HasSubstr("= matmul(%16, %15) {accumulate=i32} : i32[2,4]"));
  EXPECT_THAT(all, HasSubstr("= conv(%19, %18) {accumulate=i32} : i32[1,2,2,2]"));
  EXPECT_THAT(all, HasSubstr("pad(%0) {low=[0,1,2], high=[1,0,0], value=-0}"));
  EXPECT_THAT(all, HasSubstr("pad(%0) {low=[1,1,1], high=[0,0,0], value=nan}"));
  EXPECT_THAT(all, HasSubstr("value=-inf}"));
  EXPECT_THAT(all, HasSubstr("value=0.1}"));
  EXPECT_THAT(all, HasSubstr("{value=-nan} : f64[]"));
  EXPECT_THAT(all, HasSubstr("{value=5e-324} : f64[]"));
  EXPECT_THAT(all, HasSubstr("{value=nan(0x7ff0000000000123)} : f64[]"));
  EXPECT_THAT(all, HasSubstr("{literal=[nan, -nan, nan(0x7fc00001), nan(0x7f800001), inf, -inf, "
                             "-0, 0, 1e-45, 3.4028235e+38, 0.1, -1e-07]} : f32[12]"));
  EXPECT_THAT(all, HasSubstr("{literal=[nan, -nan, nan(0x7ff0000000000001), -inf, -0, 5e-324, "
                             "1.7976931348623157e+308, 0.1, 0.3333333333333333, -123456789.125]}"
                             " : f64[2,5]"));
  EXPECT_THAT(all, HasSubstr("{literal=[nan, -nan, nan(0x7c01), nan(0x7e01), inf, -inf, -0, "
                             "5.9604645e-08, 65504, 0.099975586]} : f16[10]"));
  EXPECT_THAT(all, HasSubstr("{literal=[nan, -nan, nan(0x7f81), inf, -inf, -0, 9.1835e-41, "
                             "3.3895314e+38, 0.100097656]} : bf16[9]"));
  EXPECT_THAT(all, HasSubstr("{literal=[-2147483648, -1, 0, 2147483647]} : i32[4]"));
  EXPECT_THAT(all, HasSubstr("{literal=[-9223372036854775808, 9223372036854775807, "
                             "9007199254740993, -7]} : i64[4]"));
  EXPECT_THAT(all, HasSubstr("{literal=[0, 128, 255]} : u8[3]"));
  EXPECT_THAT(all, HasSubstr("{literal=[true, false, false, true]} : bool[2,2]"));
  EXPECT_THAT(all, HasSubstr("{literal=[2.5]} : f64[]"));
  EXPECT_THAT(all, HasSubstr("{literal=[]} : i32[0,4]"));
  EXPECT_THAT(all,
              HasSubstr("graph {\n  %0 = parameter() {name=\"unused\"} : f32[1]\n  return\n}"));
}

TEST(TextTest, ParsesAnyNumberingCommentsAndAttributeOrder) {
  const std::string text = R"(// A hand-written graph.
graph{
  %7=parameter(){name="b"}:f32[2]   // ids need not be dense or ordered
  %3 = parameter() {name = "a"} : f32[2]
  %10 = add( %3 , %7 ) : f32[2]
  %4 = slice(%10) {limits=[2], starts=[1]} : f32[1]
  %0 = cast(%4) {dtype=i32} : i32[1]
  %1 = fill() {value=2.50, dtype=f32, shape=[2]} : f32[2]
  %2 = constant() {literal=[ 1e0 , -.5, 0x0]} : f32[3]
  return %0 as "out", %10
}
)";
  // "0x0" is not a number of the text form.
  absl::StatusOr<Graph> bad = ParseGraph(text);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), StartsWith("9:41: malformed number \"0x0\""));

  std::string good = text;
  good.replace(good.find("0x0"), 3, "3");
  absl::StatusOr<Graph> graph = ParseGraph(good);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(PrintGraph(*graph),
            "graph {\n"
            "  %0 = parameter() {name=\"b\"} : f32[2]\n"
            "  %1 = parameter() {name=\"a\"} : f32[2]\n"
            "  %2 = add(%1, %0) : f32[2]\n"
            "  %3 = slice(%2) {starts=[1], limits=[2]} : f32[1]\n"
            "  %4 = cast(%3) : i32[1]\n"
            "  %5 = fill() {value=2.5} : f32[2]\n"
            "  %6 = constant() {literal=[1, -0.5, 3]} : f32[3]\n"
            "  return %4 as \"out\", %2\n"
            "}\n");
  EXPECT_EQ(graph->node(5).attrs.dtype, DType::kF32);
  EXPECT_EQ(graph->node(5).attrs.shape, Shape({2}));
  EXPECT_EQ(graph->node(4).attrs.dtype, DType::kI32);
  EXPECT_TRUE(graph->node(0).loc.file_name() == nullptr || *graph->node(0).loc.file_name() == 0);
}

TEST(TextTest, ParsesSpecialNumbersAndStrings) {
  absl::StatusOr<Graph> graph = ParseGraph(R"(graph {
  %0 = constant() {literal=[nan, -nan, inf, -inf, -0, 1.5e+2, 1E-2, 65504]} : f16[8]
  %1 = parameter() {name="\x00\"\\\t\r\n\xff ok"} : bool[]
  %2 = fill() {value=-nan(0x1)} : f32[]
})");
  ASSERT_FALSE(graph.ok());
  EXPECT_THAT(std::string(graph.status().message()),
              StartsWith("4:22: \"-nan(0x1)\" is not a f64 NaN: write nan(0x<16 hex digits"));
  graph = ParseGraph(R"(graph {
  %0 = constant() {literal=[nan, -nan, inf, -inf, -0, 1.5e+2, 1E-2, 65504]} : f16[8]
  %1 = parameter() {name="\x00\"\\\t\r\n\xff ok"} : bool[]
  %2 = fill() {value=nan(0x7ff0000000000001)} : f32[]
  return %0
})");
  ASSERT_TRUE(graph.ok()) << graph.status();
  const TensorData& literal = *graph->node(0).attrs.literal;
  uint16_t bits[8];
  std::memcpy(bits, literal.data(), sizeof(bits));
  EXPECT_EQ(bits[0], 0x7e00);
  EXPECT_EQ(bits[1], 0xfe00);
  EXPECT_EQ(bits[2], 0x7c00);
  EXPECT_EQ(bits[3], 0xfc00);
  EXPECT_EQ(bits[4], 0x8000);
  EXPECT_EQ(bits[5], FloatToHalf(150.0f));
  EXPECT_EQ(bits[6], FloatToHalf(0.01f));
  EXPECT_EQ(bits[7], 0x7bff);
  EXPECT_EQ(graph->node(1).attrs.name, std::string("\0\"\\\t\r\n\xff ok", 10));
  EXPECT_EQ(std::bit_cast<uint64_t>(graph->node(2).attrs.value), 0x7ff0000000000001u);
}

TEST(TextTest, OptionsAddLocationsAndElideLiterals) {
  Builder b;
  const int line = __LINE__ + 1;
  const NodeId c = b.Constant(TensorData::FromVector<int>(DType::kI32, {5}, {1, 2, 3, 4, 5}));
  b.Output(c);
  const Graph graph = Finish(std::move(b));
  PrintOptions options;
  options.locations = true;
  const std::string with_locations = PrintGraph(graph, options);
  EXPECT_THAT(with_locations, HasSubstr(absl::StrCat("text_test.cc:", line, "\n")));
  absl::StatusOr<Graph> parsed = ParseGraph(with_locations);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(PrintGraph(*parsed), PrintGraph(graph));

  options = PrintOptions();
  options.max_literal_elements = 2;
  EXPECT_EQ(PrintNode(graph, 0, options), "%0 = constant() {literal=[1, 2, ...]} : i32[5]");
  options.max_literal_elements = 0;
  EXPECT_EQ(PrintNode(graph, 0, options), "%0 = constant() {literal=[...]} : i32[5]");
  options.max_literal_elements = 5;
  EXPECT_EQ(PrintNode(graph, 0, options), "%0 = constant() {literal=[1, 2, 3, 4, 5]} : i32[5]");
  options.max_literal_elements = 3;
  absl::StatusOr<Graph> elided = ParseGraph(PrintGraph(graph, options));
  ASSERT_FALSE(elided.ok());
  EXPECT_THAT(std::string(elided.status().message()),
              StartsWith("2:38: an elided literal ('...', from max_literal_elements)"));
}

TEST(TextTest, PrintsBrokenGraphsFaithfully) {
  Graph graph;
  Node node;
  node.op = Op::kAdd;
  node.inputs = {0, 5};
  node.attrs.axes = {1};
  node.attrs.dtype = DType::kI32;
  node.type = T(DType::kF32, {2});
  graph.AddNode(node);
  Node param;
  param.op = Op::kParameter;
  param.attrs.name = "p";
  param.attrs.dtype = DType::kF64;  // Disagrees with the result type.
  param.type = T(DType::kF32, {});
  graph.AddNode(param);
  graph.AddOutput(9, "gone");
  EXPECT_EQ(PrintGraph(graph),
            "graph {\n"
            "  %0 = add(%0, %5) {dtype=i32, axes=[1]} : f32[2]\n"
            "  %1 = parameter() {dtype=f64, name=\"p\"} : f32[]\n"
            "  return %9 as \"gone\"\n"
            "}\n");
  // The explicit dtype survives parsing, so the mismatch is reported rather than hidden.
  absl::StatusOr<Graph> parsed =
      ParseGraph("graph {\n  %1 = parameter() {dtype=f64, name=\"p\"} : f32[]\n  return\n}");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(std::string(parsed.status().message()),
            "2:44: %1 = parameter: result type f32[] differs from the inferred f64[]");
}

struct ErrorCase {
  const char* text;
  const char* message_prefix;
};

TEST(TextTest, ErrorsGivePositionAndExpectation) {
  const std::string param = "graph {\n  %0 = parameter() {name=\"x\"} : f32[2]\n";
  const std::vector<ErrorCase> cases = {
      {"", "1:1: expected 'graph', found end of input"},
      {"graf {", "1:1: expected 'graph', found \"graf\""},
      {"graph (", "1:7: expected '{' after 'graph', found \"(\""},
      {"graph {\n  0 = fill() : f32[]",
       "2:3: expected a node ('%<id> = op(...) : type') or "
       "'return', found \"0\""},
      {"graph {\n  %0 fill() : f32[]", "2:6: expected '=' after %0, found \"fill\""},
      {"graph {\n  %0 = addd(%1) : f32[]", "2:8: unknown op \"addd\""},
      {"graph {\n  %0 = fill : f32[]", "2:13: expected '(' after 'fill', found \":\""},
      {"graph {\n  %0 = fill() : f32[]\n  %0 = fill() : f32[]",
       "3:3: %0 is defined twice (first on line 2)"},
      {"graph {\n  %0 = neg(%1) : f32[]\n  %1 = fill() : f32[]",
       "2:12: %0 = neg: operand %1 is not defined before use"},
  };
  const std::vector<std::pair<std::string, std::string>> more = {
      {param + "  %1 = add(%0 %0) : f32[2]",
       "3:15: expected ',' or ')' after operand, found \"%\""},
      {param + "  %1 = add(%0, 0) : f32[2]", "3:16: expected '%<id>' as an operand, found \"0\""},
      {param + "  %1 = add(%0, %0) f32[2]",
       "3:20: expected ':' and the result type of %1 = add, found \"f32\""},
      {param + "  %1 = add(%0, %0) : f32[3]",
       "3:22: %1 = add: result type f32[3] differs from the inferred f32[2]"},
      {param + "  %1 = add(%0, %0) : f33[2]",
       "3:22: unknown dtype \"f33\" (f32, f64, f16, bf16, i32, i64, u8, bool)"},
      {param + "  %1 = add(%0, %0) : f32[2,]", "3:28: expected an integer, found \"]\""},
      {param + "  %1 = add(%0, %0) : f32[-2]", "3:26: -2 is out of range [0, 2147483648]"},
      {param + "  %1 = add(%0, %0) {axes=[1]} : f32[2]",
       "3:21: %1 = add: 'add' does not use attribute 'axes'"},
      {param + "  %1 = add(%0, %0) {axis=[1]} : f32[2]",
       "3:21: %1 = add: unknown attribute \"axis\""},
      {param + "  %1 = reduce_sum(%0) {axes=[0], axes=[0]} : f32[1]",
       "3:34: %1 = reduce_sum: attribute 'axes' given twice"},
      {param + "  %1 = reduce_sum(%0) {axes=[0] : f32[1]",
       "3:33: expected ',' or '}' after attribute, found \":\""},
      {param + "  %1 = add(%0) : f32[2]",
       "3:3: %1 = add: expects 2 operands, got 1; operands f32[2]"},
      {param + "  %1 = matmul(%0, %0) : f32[2]",
       "3:3: %1 = matmul: needs operands of equal rank >= 2"},
      {param + "  %1 = matmul(%0, %0) {accumulate=i32} : i32[2]",
       "3:3: %1 = matmul: accumulate=i32 needs integer operands that it holds exactly "
       "(narrower)"},
      {param + "  %1 = add(%0, %0) {accumulate=i32} : f32[2]",
       "3:21: %1 = add: 'add' does not use attribute 'accumulate'"},
      {param + "  %1 = parameter() {name=\"x\"} : f32[2]",
       "3:3: %1 = parameter: name \"x\" already used by %0"},
      {param + "  %1 = parameter() {name=\"x} : f32[2]\n", "3:38: newline in a string (write \\n)"},
      {param + "  %1 = parameter() {name=\"x", "3:26: unterminated string"},
      {param + "  %1 = parameter() {name=\"\\q\"} : f32[2]", "3:27: unknown escape in string"},
      {param + "  %1 = parameter() {name=\"\\x4\"} : f32[2]", "3:27: \\x needs two hex digits"},
      {param + "  %1 = fill() {value=1e999} : f32[2]", "3:22: 1e999 is out of range for f64"},
      {param + "  %1 = fill() {value=infinity} : f32[2]",
       "3:22: expected a number, found \"infinity\""},
      {param + "  %1 = random_uniform() {seed=-1} : f32[2]",
       "3:31: expected an unsigned 64-bit seed, found \"-1\""},
      {param + "  %1 = random_uniform() {seed=18446744073709551616} : f32[2]",
       "3:31: 18446744073709551616 is out of range [0, 2^64)"},
      {param + "  %1 = constant() {literal=[1, 2]} : f32[3]",
       "3:28: literal has 2 elements, the result type f32[3] needs 3"},
      {param + "  %1 = constant() {literal=[1, 256]} : u8[2]", "3:32: 256 is out of range for u8"},
      {param + "  %1 = constant() {literal=[1.5]} : i32[1]",
       "3:29: expected an integer, found \"1.5\""},
      {param + "  %1 = constant() {literal=[1]} : bool[1]",
       "3:29: expected true or false, found \"1\""},
      {param + "  %1 = constant() {literal=[70000]} : f16[1]",
       "3:29: 70000 is out of range for f16"},
      {param + "  %1 = constant() {literal=[1e39]} : f32[1]", "3:29: 1e39 is out of range for f32"},
      {param + "  %1 = constant() {literal=[nan(0x7c00)]} : f16[1]",
       "3:29: \"nan(0x7c00)\" is not a f16 NaN: write nan(0x<4 hex digits of a NaN, sign "
       "included>)"},
      {param + "  %1 = constant() {literal=[1,]} : f32[1]",
       "3:31: expected a literal element, found \"]\""},
      {param + "  %1 = constant() : f32[1]", "3:3: %1 = constant: missing literal"},
      {param + "  %1 = fill() : f32[65536,65536]",
       "3:20: the shape has more than 2^31 elements (ignoring zero dims)"},
      {param + "  %1 = fill() : f32[0,65536,65536]",
       "3:20: the shape has more than 2^31 elements (ignoring zero dims)"},
      {param + "  %1 = fill() : f32[4294967296]",
       "3:21: 4294967296 is out of range [0, 2147483648]"},
      {param + "  %1 = fill() {shape=[99999999999999999999]} : f32[1]",
       "3:23: 99999999999999999999 is out of range [0, 2147483648]"},
      {param + "  %1 = pad(%0) {low=[9223372036854775807], high=[0]} : f32[2]",
       "3:22: 9223372036854775807 is out of range [-2147483648, 2147483648]"},
      {param + "  %99999999999999999999 = fill() : f32[]", "3:3: node id too large"},
      {param + "  return %0 as \"a\", %0 as \"a\"\n}",
       "3:27: return: output name \"a\" used twice"},
      {param + "  return %1\n}", "3:10: return: %1 is not defined"},
      {param + "  return %0 as y\n}", "3:16: expected a string in double quotes, found \"y\""},
      {param + "  return %0\n",
       "4:1: expected ',' or '}' after the graph's outputs, found end of "
       "input"},
      {param + "  return %0\n} x", "4:3: expected end of input after the graph, found \"x\""},
      {param + "  return %0,\n}", "4:1: expected '%<id>' as an output, found \"}\""},
      {param + "  %1 = neg(%0) : f32[2]\n  %1 = neg(%0) : f32[2]",
       "4:3: %1 is defined twice (first on line 3)"},
      {param + "  %1 = iota() {axes=[0]} : bool[2]", "3:3: %1 = iota: iota of dtype bool"},
  };
  for (const ErrorCase& c : cases) {
    absl::StatusOr<Graph> graph = ParseGraph(c.text);
    ASSERT_FALSE(graph.ok()) << c.text;
    EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(graph.status().message()), StartsWith(c.message_prefix)) << c.text;
  }
  for (const auto& [text, prefix] : more) {
    absl::StatusOr<Graph> graph = ParseGraph(text);
    ASSERT_FALSE(graph.ok()) << text;
    EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(graph.status().message()), StartsWith(prefix)) << text;
  }
}

TEST(TextTest, EveryTruncationIsAnError) {
  for (const Sample& sample : Samples()) {
    const std::string text = PrintGraph(sample.graph);
    const size_t closing = text.rfind('}');
    for (size_t length = 0; length < closing; ++length) {
      absl::StatusOr<Graph> graph = ParseGraph(std::string_view(text).substr(0, length));
      ASSERT_FALSE(graph.ok()) << sample.name << " truncated to " << length;
      EXPECT_THAT(std::string(graph.status().message()), HasSubstr(":")) << graph.status();
    }
  }
}

TEST(TextTest, DeepGarbageAndHugeInputsFailCleanly) {
  const std::vector<std::string> inputs = {
      std::string(200000, '['),
      std::string(200000, '{'),
      "graph {" + std::string(200000, '('),
      "graph {\n  %0 = add(" + std::string(100000, '%'),
      "graph {\n  %0 = constant() {literal=[" + std::string(100000, '[') + "]} : f32[1]",
      "graph {\n  %0 = constant() {literal=[" + std::string(100000, '9') + "]} : f32[1]\n}",
      "graph {\n  %0 = constant() {literal=[" + std::string(100000, '9') + "]} : i64[1]\n}",
      "graph {\n  %0 = fill() {value=0." + std::string(100000, '0') + "1} : f64[]\n}",
      "graph {\n  %0 = fill() : f32[" + std::string(100000, '1') + "]\n}",
      "graph {\n  %0 = parameter() {name=\"" + std::string(100000, '\\') + "\"} : f32[]\n}",
      std::string("graph {\0}", 9),
      "graph {\n  %0 = fill() : f32[" + absl::StrJoin(std::vector<int>(100000, 1), ",") + ",0]",
  };
  for (const std::string& input : inputs) {
    absl::StatusOr<Graph> graph = ParseGraph(input);
    EXPECT_FALSE(graph.ok()) << input.substr(0, 60);
  }
  // Long but valid inputs parse: a deep chain and a rank-10000 shape.
  std::string chain = "graph {\n  %0 = parameter() {name=\"x\"} : f32[3]\n";
  for (int i = 1; i <= 20000; ++i)
    absl::StrAppend(&chain, "  %", i, " = neg(%", i - 1, ") : f32[3]\n");
  chain += "  return %20000\n}\n";
  absl::StatusOr<Graph> graph = ParseGraph(chain);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->num_nodes(), 20001);
  const std::string wide = "graph {\n  %0 = fill() : f32[" +
                           absl::StrJoin(std::vector<int>(10000, 1), ",") + "]\n  return %0\n}";
  graph = ParseGraph(wide);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->node(0).type.rank(), 10000);
}

TEST(TextTest, RandomMutationsNeverCrash) {
  std::vector<std::string> texts;
  for (const Sample& sample : Samples()) texts.push_back(PrintGraph(sample.graph));
  std::mt19937_64 rng(20240611);
  const std::string alphabet = "%=(){}[],:\"\\-.0123456789eanfix_ \n";
  int parsed_ok = 0;
  for (int iteration = 0; iteration < 20000; ++iteration) {
    std::string text = texts[rng() % texts.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = rng() % text.size();
      switch (rng() % 5) {
        case 0:
          text[at] = static_cast<char>(rng() & 0xff);
          break;
        case 1:
          text[at] = alphabet[rng() % alphabet.size()];
          break;
        case 2:
          text.erase(at, 1 + rng() % 8);
          break;
        case 3:
          text.insert(at, 1, alphabet[rng() % alphabet.size()]);
          break;
        default: {
          const size_t from = rng() % text.size();
          text.insert(at, text.substr(from, 1 + rng() % 16));
        }
      }
    }
    absl::StatusOr<Graph> graph = ParseGraph(text);
    if (!graph.ok()) {
      EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
      continue;
    }
    // A mutation that still parses must print to a fixed point.
    ++parsed_ok;
    const std::string printed = PrintGraph(*graph);
    absl::StatusOr<Graph> again = ParseGraph(printed);
    ASSERT_TRUE(again.ok()) << again.status() << "\n" << printed;
    EXPECT_EQ(PrintGraph(*again), printed);
  }
  // Some mutations (a digit of a literal, white space) keep the text valid; the loop must
  // exercise both outcomes.
  EXPECT_GT(parsed_ok, 0);
  EXPECT_LT(parsed_ok, 20000);
}

TEST(TextTest, RandomBytesNeverCrash) {
  std::mt19937_64 rng(7);
  for (int iteration = 0; iteration < 5000; ++iteration) {
    std::string text = "graph {\n  ";
    const size_t length = rng() % 64;
    for (size_t i = 0; i < length; ++i) text += static_cast<char>(rng() & 0xff);
    EXPECT_FALSE(ParseGraph(text).ok());
  }
}

}  // namespace
}  // namespace kiln::ir
