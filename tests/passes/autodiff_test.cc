// Tests of reverse-mode autodiff (passes/autodiff.h). The oracle is central finite differences
// in f64 on the reference interpreter: every differentiable op has one or more rows in
// GradientCases(), each a small f64 function whose inputs are drawn away from the op's kinks and
// ties, differentiated through loss = sum(w * y) with random w so every output element matters.
// Gradients of gradients are checked the same way, the pass form by its printed IR, and the
// error cases by their messages.
#include "passes/autodiff.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/interpreter.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "pass_test_util.h"

namespace kiln::passes {
namespace {

using ir::DType;
using ir::NodeId;
using ir::Op;
using ir::TensorData;
using ir::TensorType;
using ::testing::HasSubstr;

constexpr DType kF64 = DType::kF64;

// How a parameter's values are drawn, to keep finite differences away from kinks and ties.
enum class Kind {
  kAny,       // uniform in [-2, 2]
  kNonZero,   // |x| in [0.3, 2], random sign
  kPositive,  // [0.5, 2]
  kDistinct,  // all kDistinct elements of a case pairwise at least 0.1 apart
  kFrac,      // an integer in [-3, 3] plus [0.2, 0.4]: away from integers and halves
};

struct GradCase {
  std::string name;
  // Builds the function from f64 parameters; returns y.
  std::function<NodeId(ir::Builder&)> build;
  // Kinds of the parameters in order (missing ones are kAny).
  std::vector<Kind> kinds = {};
  // Adjusts the drawn arguments (e.g. a mod's dividend relative to its divisor).
  std::function<void(std::vector<TensorData>&)> fix = nullptr;
  double step = 1e-5;
  double tolerance = 1e-6;
};

void PrintTo(const GradCase& c, std::ostream* os) { *os << c.name; }

NodeId P(ir::Builder& b, const std::string& name, ir::Shape shape) {
  return b.Parameter(name, {kF64, std::move(shape)});
}

NodeId IndexConstant(ir::Builder& b, ir::Shape shape, const std::vector<int64_t>& values) {
  return b.Constant(TensorData::FromVector(DType::kI64, std::move(shape), values));
}

ir::Attrs ConvAttrs(std::vector<int64_t> strides, std::vector<int64_t> low,
                    std::vector<int64_t> high, std::vector<int64_t> dilation,
                    std::vector<int64_t> input_dilation, int64_t groups) {
  ir::Attrs a;
  a.strides = std::move(strides);
  a.low = std::move(low);
  a.high = std::move(high);
  a.dilation = std::move(dilation);
  a.input_dilation = std::move(input_dilation);
  a.groups = groups;
  return a;
}

ir::Attrs WindowAttrs(std::vector<int64_t> window, std::vector<int64_t> strides,
                      std::vector<int64_t> low, std::vector<int64_t> high,
                      std::vector<int64_t> dilation) {
  ir::Attrs a;
  a.window = std::move(window);
  a.strides = std::move(strides);
  a.low = std::move(low);
  a.high = std::move(high);
  a.dilation = std::move(dilation);
  return a;
}

GradCase Unary(Op op, Kind kind = Kind::kAny) {
  return {ir::OpName(op), [op](ir::Builder& b) { return b.Unary(op, P(b, "x", {2, 3})); }, {kind}};
}

GradCase Binary(Op op, Kind a, Kind b) {
  return {ir::OpName(op),
          [op](ir::Builder& bb) {
            const NodeId p0 = P(bb, "a", {2, 3});
            const NodeId p1 = P(bb, "b", {2, 3});
            return bb.Binary(op, p0, p1);
          },
          {a, b}};
}

std::vector<GradCase> GradientCases() {
  std::vector<GradCase> cases;
  for (Op op : {Op::kNeg, Op::kExp, Op::kSin, Op::kCos, Op::kTanh, Op::kErf}) {
    cases.push_back(Unary(op));
  }
  cases.push_back(Unary(Op::kAbs, Kind::kNonZero));
  cases.push_back(Unary(Op::kSign, Kind::kNonZero));
  cases.push_back(Unary(Op::kReciprocal, Kind::kNonZero));
  for (Op op : {Op::kLog, Op::kSqrt, Op::kRsqrt}) cases.push_back(Unary(op, Kind::kPositive));
  for (Op op : {Op::kFloor, Op::kCeil, Op::kRound}) cases.push_back(Unary(op, Kind::kFrac));

  cases.push_back(Binary(Op::kAdd, Kind::kAny, Kind::kAny));
  cases.push_back(Binary(Op::kSub, Kind::kAny, Kind::kAny));
  cases.push_back(Binary(Op::kMul, Kind::kAny, Kind::kAny));
  cases.push_back(Binary(Op::kDiv, Kind::kAny, Kind::kNonZero));
  cases.push_back(Binary(Op::kPow, Kind::kPositive, Kind::kAny));
  // Zero bases with integer exponents >= 2: both derivatives are 0 (the torch guard for d/db).
  cases.push_back({"pow zero base",
                   [](ir::Builder& b) {
                     const NodeId p0 = P(b, "a", {4});
                     const NodeId p1 = P(b, "b", {4});
                     return b.Binary(Op::kPow, p0, p1);
                   },
                   {Kind::kPositive, Kind::kPositive},
                   [](std::vector<TensorData>& args) {
                     args[0].SetDouble(0, 0.0);
                     args[0].SetDouble(2, 0.0);
                     for (int64_t i = 0; i < 4; ++i) args[1].SetDouble(i, 2.0 + i % 2);
                   }});
  cases.push_back(Binary(Op::kMax, Kind::kDistinct, Kind::kDistinct));
  cases.push_back(Binary(Op::kMin, Kind::kDistinct, Kind::kDistinct));
  // Ties: max(x, x) = x, so each operand must get g / 2.
  for (Op op : {Op::kMax, Op::kMin}) {
    cases.push_back({absl::StrCat(ir::OpName(op), " ties"), [op](ir::Builder& b) {
                       const NodeId x = P(b, "x", {5});
                       return b.Binary(op, x, x);
                     }});
  }
  cases.push_back({"mod",
                   [](ir::Builder& b) {
                     const NodeId p0 = P(b, "a", {2, 3});
                     const NodeId p1 = P(b, "b", {2, 3});
                     return b.Binary(Op::kMod, p0, p1);
                   },
                   {Kind::kFrac, Kind::kNonZero},
                   [](std::vector<TensorData>& args) {
                     // a = b * (integer + 0.2..0.4): a / b stays away from integers.
                     for (int64_t i = 0; i < 6; ++i) {
                       args[0].SetDouble(i, args[0].GetDouble(i) * args[1].GetDouble(i));
                     }
                   }});

  cases.push_back({"select",
                   [](ir::Builder& b) {
                     const NodeId a = P(b, "a", {2, 3}), c = P(b, "c", {2, 3});
                     return b.Select(b.Binary(Op::kLt, a, c), b.Unary(Op::kSin, a),
                                     b.Unary(Op::kCos, c));
                   },
                   {Kind::kDistinct, Kind::kDistinct}});
  cases.push_back({"cast f64-f32-f64",
                   [](ir::Builder& b) {
                     const NodeId x = P(b, "x", {2, 3});
                     return b.Cast(b.Cast(x, DType::kF32), kF64);
                   },
                   {},
                   nullptr,
                   1e-2,
                   1e-4});
  // Through an integer: no gradient, and none needed (truncation is flat between integers).
  cases.push_back({"cast through i32",
                   [](ir::Builder& b) {
                     const NodeId x = P(b, "x", {2, 3});
                     return b.Binary(Op::kMul, b.Cast(b.Cast(x, DType::kI32), kF64), x);
                   },
                   {Kind::kFrac}});

  cases.push_back({"reduce_sum", [](ir::Builder& b) {
                     return b.Reduce(Op::kReduceSum, P(b, "x", {2, 3, 4}), {0, 2});
                   }});
  cases.push_back({"reduce_sum all", [](ir::Builder& b) {
                     return b.Reduce(Op::kReduceSum, P(b, "x", {2, 3}), {0, 1});
                   }});
  cases.push_back({"reduce_prod",
                   [](ir::Builder& b) {
                     return b.Reduce(Op::kReduceProd, P(b, "x", {3, 4}), {1});
                   },
                   {Kind::kNonZero}});
  // Row 0 has one zero, row 1 two zeros, row 2 none.
  cases.push_back({"reduce_prod zeros",
                   [](ir::Builder& b) {
                     return b.Reduce(Op::kReduceProd, P(b, "x", {3, 4}), {1});
                   },
                   {Kind::kNonZero},
                   [](std::vector<TensorData>& args) {
                     args[0].SetDouble(1, 0.0);
                     args[0].SetDouble(4, 0.0);
                     args[0].SetDouble(7, 0.0);
                   }});
  cases.push_back({"reduce_max",
                   [](ir::Builder& b) {
                     return b.Reduce(Op::kReduceMax, P(b, "x", {3, 4, 2}), {0, 2});
                   },
                   {Kind::kDistinct}});
  cases.push_back({"reduce_min",
                   [](ir::Builder& b) {
                     return b.Reduce(Op::kReduceMin, P(b, "x", {3, 4}), {1});
                   },
                   {Kind::kDistinct}});
  // Ties: every row of the broadcast holds the same maximum.
  cases.push_back({"reduce_max ties", [](ir::Builder& b) {
                     const NodeId x = b.Broadcast(P(b, "x", {1, 4}), {3, 4});
                     return b.Reduce(Op::kReduceMax, x, {0});
                   }});

  cases.push_back({"reshape", [](ir::Builder& b) { return b.Reshape(P(b, "x", {2, 6}), {3, 4}); }});
  cases.push_back({"permute", [](ir::Builder& b) {
                     return b.Permute(P(b, "x", {2, 3, 4}), {2, 0, 1});
                   }});
  cases.push_back({"broadcast", [](ir::Builder& b) {
                     return b.Broadcast(P(b, "x", {2, 1, 3, 1}), {2, 4, 3, 2});
                   }});
  cases.push_back({"slice", [](ir::Builder& b) {
                     return b.Slice(P(b, "x", {4, 5}), {1, 0}, {3, 4});
                   }});
  cases.push_back({"slice strided", [](ir::Builder& b) {
                     return b.Slice(P(b, "x", {7, 6, 3}), {1, 0, 0}, {7, 5, 3}, {2, 3, 1});
                   }});
  cases.push_back({"pad", [](ir::Builder& b) {
                     return b.Pad(P(b, "x", {2, 3}), {1, 0}, {2, 3}, 0.5);
                   }});
  cases.push_back({"concat", [](ir::Builder& b) {
                     return b.Concat({P(b, "a", {2, 1}), P(b, "b", {2, 3}), P(b, "c", {2, 2})}, 1);
                   }});
  cases.push_back({"flip", [](ir::Builder& b) { return b.Flip(P(b, "x", {3, 4}), {0, 1}); }});

  cases.push_back({"gather", [](ir::Builder& b) {
                     const NodeId x = P(b, "x", {3, 4});
                     return b.Gather(x, IndexConstant(b, {2, 4}, {0, 2, 2, 1, 2, 0, 0, 1}), 0);
                   }});
  cases.push_back({"scatter_add", [](ir::Builder& b) {
                     const NodeId x = P(b, "x", {3, 4}), src = P(b, "src", {3, 2});
                     return b.ScatterAdd(x, IndexConstant(b, {3, 2}, {3, 3, 0, 2, 1, 0}), src, 1);
                   }});

  // Distinct values: the order (hence the permutation) does not change within a step. The
  // product with another input makes each output position's gradient differ.
  for (int64_t axis : {0, 1}) {
    cases.push_back({absl::StrCat("sort axis ", axis),
                     [axis](ir::Builder& b) {
                       ir::Attrs attrs;
                       attrs.axes = {axis};
                       const NodeId sorted = b.Emit(Op::kSort, {P(b, "x", {3, 4})}, attrs);
                       return b.Binary(Op::kMul, sorted, P(b, "w", {3, 4}));
                     },
                     {Kind::kDistinct}});
  }

  cases.push_back({"matmul", [](ir::Builder& b) {
                     const NodeId p0 = P(b, "a", {3, 4});
                     const NodeId p1 = P(b, "b", {4, 2});
                     return b.MatMul(p0, p1);
                   }});
  cases.push_back({"matmul batched", [](ir::Builder& b) {
                     const NodeId p0 = P(b, "a", {2, 3, 4});
                     const NodeId p1 = P(b, "b", {2, 4, 5});
                     return b.MatMul(p0, p1);
                   }});

  cases.push_back({"conv 1d", [](ir::Builder& b) {
                     const NodeId p0 = P(b, "x", {2, 3, 7});
                     const NodeId p1 = P(b, "w", {4, 3, 3});
                     return b.Conv(p0, p1, {});
                   }});
  cases.push_back({"conv 2d stride pad dilation groups", [](ir::Builder& b) {
                     const NodeId p0 = P(b, "x", {2, 4, 7, 6});
                     const NodeId p1 = P(b, "w", {6, 2, 3, 2});
                     return b.Conv(p0, p1, ConvAttrs({2, 2}, {1, 2}, {2, 0}, {2, 1}, {}, 2));
                   }});
  cases.push_back({"conv input_dilation", [](ir::Builder& b) {
                     const NodeId p0 = P(b, "x", {1, 2, 4, 3});
                     const NodeId p1 = P(b, "w", {3, 2, 3, 2});
                     return b.Conv(p0, p1, ConvAttrs({1, 2}, {2, 1}, {1, 1}, {1, 2}, {2, 3}, 1));
                   }});
  // Padding beyond the kernel's extent (the input gradient's padding comes out negative).
  cases.push_back({"conv wide padding", [](ir::Builder& b) {
                     const NodeId p0 = P(b, "x", {1, 2, 3});
                     const NodeId p1 = P(b, "w", {2, 1, 2});
                     return b.Conv(p0, p1, ConvAttrs({2}, {3}, {4}, {}, {}, 2));
                   }});
  // Negative padding crops the input.
  cases.push_back({"conv negative padding", [](ir::Builder& b) {
                     const NodeId p0 = P(b, "x", {1, 1, 8});
                     const NodeId p1 = P(b, "w", {2, 1, 2});
                     return b.Conv(p0, p1, ConvAttrs({3}, {-1}, {-2}, {}, {}, 1));
                   }});

  cases.push_back({"window_sum", [](ir::Builder& b) {
                     return b.WindowReduce(
                         Op::kWindowSum, P(b, "x", {2, 7, 6}),
                         WindowAttrs({1, 3, 2}, {1, 2, 1}, {0, 1, 0}, {0, 2, 1}, {1, 1, 2}));
                   }});
  cases.push_back({"window_sum wide padding", [](ir::Builder& b) {
                     return b.WindowReduce(Op::kWindowSum, P(b, "x", {3}),
                                           WindowAttrs({2}, {3}, {3}, {4}, {}));
                   }});
  cases.push_back({"window_max",
                   [](ir::Builder& b) {
                     return b.WindowReduce(
                         Op::kWindowMax, P(b, "x", {2, 7, 6}),
                         WindowAttrs({1, 3, 3}, {1, 2, 2}, {0, 1, 1}, {0, 1, 1}, {}));
                   },
                   {Kind::kDistinct}});
  cases.push_back({"window_max dilated",
                   [](ir::Builder& b) {
                     return b.WindowReduce(Op::kWindowMax, P(b, "x", {8, 5}),
                                           WindowAttrs({2, 2}, {1, 2}, {2, 0}, {0, 1}, {2, 3}));
                   },
                   {Kind::kDistinct}});
  // Windows that tile x (window == strides, no padding): the split-axes rule.
  cases.push_back({"window_max tiled",
                   [](ir::Builder& b) {
                     return b.WindowReduce(Op::kWindowMax, P(b, "x", {2, 4, 6}),
                                           WindowAttrs({1, 2, 3}, {1, 2, 3}, {}, {}, {}));
                   },
                   {Kind::kDistinct}});
  // Sizes that are not multiples of the window (max_pool2d on 11 x 11): the remainder gets 0.
  cases.push_back({"window_max tiled remainder",
                   [](ir::Builder& b) {
                     return b.WindowReduce(Op::kWindowMax, P(b, "x", {2, 5, 7}),
                                           WindowAttrs({1, 2, 3}, {1, 2, 3}, {}, {}, {}));
                   },
                   {Kind::kDistinct}});
  // Ties within windows: rows 1 and 2 both hold the maximum x, so exactly one of them (the
  // first) may take the gradient.
  cases.push_back({"window_max ties", [](ir::Builder& b) {
                     const NodeId x = P(b, "x", {1, 4});
                     const NodeId lower = b.Binary(Op::kSub, x, b.Fill(1.0, {kF64, {1, 4}}));
                     return b.WindowReduce(Op::kWindowMax, b.Concat({lower, x, x}, 0),
                                           WindowAttrs({3, 1}, {}, {}, {}, {}));
                   }});
  // A chain mixing the op classes, with a fan-out (x used twice) so cotangents accumulate.
  cases.push_back({"chain", [](ir::Builder& b) {
                     const NodeId x = P(b, "x", {2, 3}), w = P(b, "w", {3, 3});
                     const NodeId h = b.Unary(Op::kTanh, b.MatMul(x, w));
                     const NodeId s = b.Reduce(Op::kReduceSum, b.Binary(Op::kMul, h, x), {1});
                     return b.Binary(Op::kAdd, b.Broadcast(s, {2, 3}), b.Unary(Op::kExp, x));
                   }});
  return cases;
}

// ---- Finite differences
// --------------------------------------------------------------------------

TensorData Draw(const TensorType& type, Kind kind, std::mt19937_64& rng,
                std::vector<double>& distinct_pool) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  TensorData t(type.dtype, type.shape);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    double v = 0;
    switch (kind) {
      case Kind::kAny:
        v = -2.0 + 4.0 * unit(rng);
        break;
      case Kind::kNonZero:
        v = (0.3 + 1.7 * unit(rng)) * (unit(rng) < 0.5 ? -1.0 : 1.0);
        break;
      case Kind::kPositive:
        v = 0.5 + 1.5 * unit(rng);
        break;
      case Kind::kDistinct:
        v = distinct_pool.back();
        distinct_pool.pop_back();
        break;
      case Kind::kFrac:
        v = std::floor(-3.0 + 7.0 * unit(rng)) + 0.2 + 0.2 * unit(rng);
        break;
    }
    t.SetDouble(i, v);
  }
  return t;
}

// Arguments for the graph's parameters, seeded by `name`.
std::vector<TensorData> DrawArguments(const ir::Graph& graph, const std::vector<Kind>& kinds,
                                      const std::string& name) {
  std::mt19937_64 rng(std::hash<std::string>()(name));
  // Distinct values: a shuffled grid 0.1 apart with jitter below 0.03, centred on 0.
  std::vector<double> pool;
  for (int i = 0; i < 200; ++i) {
    pool.push_back((i - 100) * 0.1 + std::uniform_real_distribution<double>(0.0, 0.03)(rng));
  }
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<TensorData> args;
  const std::vector<NodeId> params = graph.Parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    args.push_back(
        Draw(graph.node(params[i]).type, i < kinds.size() ? kinds[i] : Kind::kAny, rng, pool));
  }
  return args;
}

// loss = sum(w * y) with random w of y's type, as a one-element value.
NodeId WeightedSum(ir::Builder& b, NodeId y, uint64_t seed) {
  const TensorType type = b.type(y);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.5, 1.5);
  TensorData w(type.dtype, type.shape);
  for (int64_t i = 0; i < w.num_elements(); ++i) {
    w.SetDouble(i, unit(rng) * (rng() % 2 == 0 ? 1.0 : -1.0));
  }
  const NodeId weighted = b.Binary(Op::kMul, y, b.Constant(std::move(w)));
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < type.rank(); ++i) axes.push_back(i);
  return b.Reshape(b.Reduce(Op::kReduceSum, weighted, axes), {});
}

double Evaluate(const ir::Graph& graph, NodeId loss, const std::vector<TensorData>& args) {
  ir::Graph g = graph;
  g.mutable_outputs() = {ir::Output{loss, ""}};
  absl::StatusOr<std::vector<TensorData>> out = ir::Interpret(g, args);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? (*out)[0].GetDouble(0) : std::nan("");
}

// Differentiates `loss` with respect to every parameter of `graph` (all f64) and compares each
// gradient element with a central difference.
void CheckGradients(const ir::Graph& graph, NodeId loss, const std::vector<TensorData>& args,
                    double step, double tolerance, const std::string& label) {
  const std::vector<NodeId> params = graph.Parameters();
  absl::StatusOr<GradientGraph> grads = AppendGradients(graph, loss, params);
  ASSERT_TRUE(grads.ok()) << label << ": " << grads.status();
  ASSERT_TRUE(ir::Verify(grads->graph).ok()) << label << ": " << ir::Verify(grads->graph);
  // The forward nodes are kept with their ids.
  for (NodeId id = 0; id < graph.num_nodes(); ++id) {
    ASSERT_EQ(grads->graph.node(id).op, graph.node(id).op) << label;
    ASSERT_EQ(grads->graph.node(id).inputs, graph.node(id).inputs) << label;
  }
  ir::Graph run = grads->graph;
  run.mutable_outputs().clear();
  for (NodeId g : grads->gradients) run.AddOutput(g);
  absl::StatusOr<std::vector<TensorData>> analytic = ir::Interpret(run, args);
  ASSERT_TRUE(analytic.ok()) << label << ": " << analytic.status();
  for (size_t p = 0; p < params.size(); ++p) {
    const TensorData& got = (*analytic)[p];
    ASSERT_EQ(got.shape(), args[p].shape()) << label;
    for (int64_t i = 0; i < got.num_elements(); ++i) {
      std::vector<TensorData> plus = args, minus = args;
      const double x = args[p].GetDouble(i);
      plus[p].SetDouble(i, x + step);
      minus[p].SetDouble(i, x - step);
      const double fd = (Evaluate(graph, loss, plus) - Evaluate(graph, loss, minus)) / (2 * step);
      const double ad = got.GetDouble(i);
      EXPECT_NEAR(ad, fd, tolerance * (1.0 + std::abs(fd)))
          << label << ": d/d " << graph.node(params[p]).attrs.name << "[" << i << "] at " << x;
    }
  }
}

class GradientTest : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradientTest, MatchesFiniteDifferences) {
  const GradCase& c = GetParam();
  ir::Builder b;
  const NodeId y = c.build(b);
  const NodeId loss = WeightedSum(b, y, std::hash<std::string>()(c.name) + 1);
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::vector<TensorData> args = DrawArguments(*graph, c.kinds, c.name);
  if (c.fix) c.fix(args);
  CheckGradients(*graph, loss, args, c.step, c.tolerance, c.name);
}

std::string CaseName(const ::testing::TestParamInfo<GradCase>& info) {
  std::string name = info.param.name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return absl::StrCat(name, "_", info.index);
}

INSTANTIATE_TEST_SUITE_P(AllOps, GradientTest, ::testing::ValuesIn(GradientCases()), CaseName);

// Every differentiable op has a finite-difference row.
TEST(Gradient, EveryDifferentiableOpHasACase) {
  std::set<Op> covered;
  for (const GradCase& c : GradientCases()) {
    ir::Builder b;
    c.build(b);
    for (const ir::Node& node : b.graph().nodes()) covered.insert(node.op);
  }
  for (Op op : ir::kAllOps) {
    if (IsDifferentiable(op) && covered.count(op) == 0) {
      ADD_FAILURE() << ir::OpName(op) << " is differentiable but has no finite-difference case";
    }
  }
}

TEST(Gradient, IsDifferentiableByClass) {
  for (Op op : ir::kAllOps) {
    const ir::OpClass c = ir::GetOpClass(op);
    const bool constant = c == ir::OpClass::kLeaf || c == ir::OpClass::kCompare ||
                          c == ir::OpClass::kLogical || c == ir::OpClass::kArgReduce ||
                          op == Op::kNot || op == Op::kArgsort;
    EXPECT_EQ(IsDifferentiable(op), !constant) << ir::OpName(op);
  }
}

// window_max with many ties: the gradient of each window goes to its first maximum in
// row-major window order (torch's max_pool). The oracle is a direct loop over the windows.
TEST(Gradient, WindowMaxTiesGoToTheFirstMaximum) {
  const ir::Shape shape = {5, 6};
  const ir::Attrs attrs = WindowAttrs({2, 3}, {1, 2}, {1, 0}, {0, 1}, {1, 1});
  ir::Builder b;
  const NodeId x = P(b, "x", shape);
  const NodeId y = b.WindowReduce(Op::kWindowMax, x, attrs);
  const NodeId g = P(b, "g", b.type(y).shape);
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  const NodeId wrt[] = {x};
  absl::StatusOr<GradientGraph> grads = AppendGradients(*graph, y, wrt, g);
  ASSERT_TRUE(grads.ok()) << grads.status();
  ir::Graph run = grads->graph;
  run.AddOutput(grads->gradients[0]);

  std::mt19937_64 rng(5);
  TensorData xv(kF64, shape), gv(kF64, graph->node(g).type.shape);
  for (int64_t i = 0; i < xv.num_elements(); ++i) xv.SetDouble(i, static_cast<double>(rng() % 3));
  for (int64_t i = 0; i < gv.num_elements(); ++i) gv.SetDouble(i, 1.0 + static_cast<double>(i));
  absl::StatusOr<std::vector<TensorData>> out = ir::Interpret(run, std::vector<TensorData>{xv, gv});
  ASSERT_TRUE(out.ok()) << out.status();

  std::vector<double> expected(static_cast<size_t>(xv.num_elements()), 0.0);
  const ir::Shape& out_shape = graph->node(y).type.shape;
  for (int64_t p0 = 0; p0 < out_shape[0]; ++p0) {
    for (int64_t p1 = 0; p1 < out_shape[1]; ++p1) {
      int64_t best = -1;
      for (int64_t k0 = 0; k0 < 2; ++k0) {
        for (int64_t k1 = 0; k1 < 3; ++k1) {
          const int64_t q0 = p0 * 1 + k0 - 1, q1 = p1 * 2 + k1;
          if (q0 < 0 || q0 >= shape[0] || q1 >= shape[1]) continue;
          const int64_t at = q0 * shape[1] + q1;
          if (best < 0 || xv.GetDouble(at) > xv.GetDouble(best)) best = at;
        }
      }
      expected[static_cast<size_t>(best)] += gv.GetDouble(p0 * out_shape[1] + p1);
    }
  }
  EXPECT_EQ((*out)[0].ToDoubles(), expected);
}

// max_pool2d-style windows (window == strides, no padding) with many ties, on a shape the
// windows tile and on one they do not (5 x 7: the last row and column lie outside every window;
// the split-axes rule runs on the covered 4 x 6 and pads the remainder with zeros). Both must give
// exactly the direct loop's values, bit for bit: the first maximum in row-major window order takes
// g, and a -0.0 g comes out as +0.0 (0 + g), as the general rule's sum of per-offset parts gives.
TEST(Gradient, WindowMaxTiledTiesMatchTheGeneralRuleBitForBit) {
  for (const ir::Shape& shape : {ir::Shape{2, 3, 4, 6}, ir::Shape{2, 3, 5, 7}}) {
    SCOPED_TRACE(::testing::PrintToString(shape));
    const ir::Attrs attrs = WindowAttrs({1, 1, 2, 3}, {1, 1, 2, 3}, {}, {}, {});
    ir::Builder b;
    const NodeId x = P(b, "x", shape);
    const NodeId y = b.WindowReduce(Op::kWindowMax, x, attrs);
    const NodeId g = P(b, "g", b.type(y).shape);
    absl::StatusOr<ir::Graph> graph = std::move(b).Build();
    ASSERT_TRUE(graph.ok()) << graph.status();
    const NodeId wrt[] = {x};
    absl::StatusOr<GradientGraph> grads = AppendGradients(*graph, y, wrt, g);
    ASSERT_TRUE(grads.ok()) << grads.status();
    ir::Graph run = grads->graph;
    run.AddOutput(grads->gradients[0]);

    std::mt19937_64 rng(11);
    TensorData xv(kF64, shape), gv(kF64, graph->node(g).type.shape);
    for (int64_t i = 0; i < xv.num_elements(); ++i) {
      xv.SetDouble(i, static_cast<double>(rng() % 3));
    }
    for (int64_t i = 0; i < gv.num_elements(); ++i) {
      gv.SetDouble(i, i % 5 == 0 ? -0.0 : static_cast<double>(i) - 20.0);
    }
    absl::StatusOr<std::vector<TensorData>> out =
        ir::Interpret(run, std::vector<TensorData>{xv, gv});
    ASSERT_TRUE(out.ok()) << out.status();

    std::vector<double> expected(static_cast<size_t>(xv.num_elements()), 0.0);
    const ir::Shape& os = graph->node(y).type.shape;
    for (int64_t nc = 0; nc < os[0] * os[1]; ++nc) {
      for (int64_t p0 = 0; p0 < os[2]; ++p0) {
        for (int64_t p1 = 0; p1 < os[3]; ++p1) {
          int64_t best = -1;
          for (int64_t k0 = 0; k0 < 2; ++k0) {
            for (int64_t k1 = 0; k1 < 3; ++k1) {
              const int64_t at = (nc * shape[2] + p0 * 2 + k0) * shape[3] + p1 * 3 + k1;
              if (best < 0 || xv.GetDouble(at) > xv.GetDouble(best)) best = at;
            }
          }
          expected[static_cast<size_t>(best)] += gv.GetDouble((nc * os[2] + p0) * os[3] + p1);
        }
      }
    }
    const std::vector<double> got = (*out)[0].ToDoubles();
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i], expected[i]) << "element " << i;
      EXPECT_EQ(std::signbit(got[i]), std::signbit(expected[i])) << "element " << i;
    }
  }
}

// ---- Gradients of gradients -------------------------------------------------------------------

// d/dx of sum(w * d(sum(tanh(x)^3))/dx): the second derivative, through the first gradient's
// nodes (mul, sub, fill, broadcast).
TEST(Gradient, SecondDerivative) {
  ir::Builder b;
  const NodeId x = P(b, "x", {2, 3});
  const NodeId t = b.Unary(Op::kTanh, x);
  const NodeId y =
      b.Reduce(Op::kReduceSum, b.Binary(Op::kMul, t, b.Binary(Op::kMul, t, t)), {0, 1});
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  const NodeId wrt[] = {x};
  absl::StatusOr<GradientGraph> first = AppendGradients(*graph, y, wrt);
  ASSERT_TRUE(first.ok()) << first.status();
  ir::Builder b2(first->graph);
  const NodeId z = WeightedSum(b2, first->gradients[0], 7);
  absl::StatusOr<ir::Graph> second = std::move(b2).Build();
  ASSERT_TRUE(second.ok()) << second.status();
  CheckGradients(*second, z, DrawArguments(*second, {}, "second"), 1e-5, 1e-6, "second");
}

// Second derivatives through the rules that build movement, window and contraction nodes.
TEST(Gradient, SecondDerivativeThroughConvAndPooling) {
  ir::Builder b;
  const NodeId x = P(b, "x", {1, 2, 6, 5});
  const NodeId w = P(b, "w", {2, 1, 3, 2});
  const NodeId c = b.Conv(x, w, ConvAttrs({2, 1}, {1, 0}, {1, 1}, {1, 2}, {}, 2));
  const NodeId pooled = b.WindowReduce(Op::kWindowSum, b.Unary(Op::kTanh, c),
                                       WindowAttrs({1, 1, 2, 2}, {1, 1, 1, 2}, {}, {}, {}));
  const NodeId y = WeightedSum(b, b.Unary(Op::kSin, pooled), 3);
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  const NodeId wrt[] = {x, w};
  absl::StatusOr<GradientGraph> first = AppendGradients(*graph, y, wrt);
  ASSERT_TRUE(first.ok()) << first.status();
  ir::Builder b2(first->graph);
  const NodeId z = b2.Binary(Op::kAdd, WeightedSum(b2, first->gradients[0], 11),
                             WeightedSum(b2, first->gradients[1], 12));
  absl::StatusOr<ir::Graph> second = std::move(b2).Build();
  ASSERT_TRUE(second.ok()) << second.status();
  CheckGradients(*second, z, DrawArguments(*second, {}, "conv2"), 1e-5, 1e-6, "conv2");
}

// A Hessian-vector product of a small MLP: H v = d/dθ <dL/dθ, v>.
TEST(Gradient, HessianVectorProductOfMlp) {
  ir::Builder b;
  const NodeId x = b.Constant(
      TensorData::FromVector(kF64, {2, 3}, std::vector<double>{0.5, -1, 2, 1.5, 0, -0.5}));
  const NodeId w1 = P(b, "w1", {3, 4});
  const NodeId b1 = P(b, "b1", {1, 4});
  const NodeId w2 = P(b, "w2", {4, 1});
  const NodeId h = b.Unary(Op::kTanh, b.Binary(Op::kAdd, b.MatMul(x, w1), b.Broadcast(b1, {2, 4})));
  const NodeId out = b.MatMul(h, w2);
  const NodeId loss = b.Reduce(Op::kReduceSum, b.Binary(Op::kMul, out, out), {0, 1});
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  const std::vector<NodeId> params = graph->Parameters();
  absl::StatusOr<GradientGraph> first = AppendGradients(*graph, loss, params);
  ASSERT_TRUE(first.ok()) << first.status();
  // <g, v> with a random direction v per parameter (WeightedSum's weights).
  ir::Builder b2(first->graph);
  NodeId z = ir::kInvalidNode;
  for (size_t i = 0; i < params.size(); ++i) {
    const NodeId dot = WeightedSum(b2, first->gradients[i], 100 + i);
    z = z == ir::kInvalidNode ? dot : b2.Binary(Op::kAdd, z, dot);
  }
  absl::StatusOr<ir::Graph> second = std::move(b2).Build();
  ASSERT_TRUE(second.ok()) << second.status();
  CheckGradients(*second, z, DrawArguments(*second, {}, "hvp"), 1e-5, 1e-6, "hvp");
}

// ---- API behaviour ------------------------------------------------------------------------------

TEST(Gradient, UnreachedWrtGetsZerosAndSeedIsUsed) {
  ir::Builder b;
  const NodeId x = P(b, "x", {3});
  const NodeId unused = P(b, "unused", {2});
  const NodeId seed = P(b, "seed", {3});
  const NodeId y = b.Unary(Op::kExp, x);
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok());
  const NodeId wrt[] = {x, unused, y};
  absl::StatusOr<GradientGraph> g = AppendGradients(*graph, y, wrt, seed);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->gradients[2], seed);  // dy/dy against the seed is the seed itself.
  const ir::Node& zero = g->graph.node(g->gradients[1]);
  EXPECT_EQ(zero.op, Op::kFill);
  EXPECT_EQ(zero.attrs.value, 0.0);
  EXPECT_EQ(zero.type, g->graph.node(unused).type);
  // exp's gradient against a seed s is s * exp(x): check on the interpreter.
  ir::Graph run = g->graph;
  run.AddOutput(g->gradients[0]);
  run.AddOutput(y);
  std::vector<TensorData> args = DrawArguments(run, {}, "seed");
  absl::StatusOr<std::vector<TensorData>> out = ir::Interpret(run, args);
  ASSERT_TRUE(out.ok()) << out.status();
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ((*out)[0].GetDouble(i), args[2].GetDouble(i) * (*out)[1].GetDouble(i));
  }
}

TEST(Gradient, NodesCarryTheForwardLocation) {
  ir::Builder b;
  const NodeId x = P(b, "x", {3});
  const NodeId y = b.Reduce(Op::kReduceSum, b.Unary(Op::kSin, x), {0});
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok());
  const NodeId wrt[] = {x};
  absl::StatusOr<GradientGraph> g = AppendGradients(*graph, y, wrt);
  ASSERT_TRUE(g.ok()) << g.status();
  const NodeId sin_node = y - 1;
  bool saw_cos = false;
  for (NodeId id = graph->num_nodes(); id < g->graph.num_nodes(); ++id) {
    const ir::Node& node = g->graph.node(id);
    if (node.op == Op::kCos) {
      saw_cos = true;
      EXPECT_EQ(node.loc.line(), graph->node(sin_node).loc.line());
    }
  }
  EXPECT_TRUE(saw_cos);
}

// Zero-element values carry no gradient and build no rule nodes; the rest still flows.
TEST(Gradient, EmptyValues) {
  ir::Builder b;
  const NodeId x = P(b, "x", {3});
  const NodeId empty = b.Unary(Op::kExp, b.Slice(x, {1}, {1}));
  const NodeId y = b.Reduce(Op::kReduceSum, b.Unary(Op::kSin, b.Concat({x, empty}, 0)), {0});
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok()) << graph.status();
  CheckGradients(*graph, y, DrawArguments(*graph, {}, "empty"), 1e-5, 1e-6, "empty");
}

TEST(Gradient, RejectsNonFloatY) {
  ir::Builder b;
  const NodeId x = P(b, "x", {4});
  const NodeId y = b.ArgReduce(Op::kArgMax, x, 0);
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok());
  const NodeId wrt[] = {x};
  absl::StatusOr<GradientGraph> g = AppendGradients(*graph, y, wrt);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("argmax"));
  EXPECT_THAT(g.status().message(), HasSubstr("i64[1]"));
  EXPECT_THAT(g.status().message(), HasSubstr("floating-point"));
}

TEST(Gradient, RejectsNonFloatWrtAndBadIds) {
  ir::Builder b;
  const NodeId x = P(b, "x", {4});
  const NodeId i = b.Parameter("i", {DType::kI32, {4}});
  const NodeId y = b.Reduce(Op::kReduceSum, x, {0});
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok());
  const NodeId int_wrt[] = {i};
  EXPECT_THAT(AppendGradients(*graph, y, int_wrt).status().message(), HasSubstr("i32[4]"));
  const NodeId bad[] = {42};
  EXPECT_THAT(AppendGradients(*graph, y, bad).status().message(), HasSubstr("%42"));
  const NodeId wrt[] = {x};
  EXPECT_THAT(AppendGradients(*graph, 99, wrt).status().message(), HasSubstr("%99"));
  EXPECT_THAT(AppendGradients(*graph, y, wrt, x).status().message(), HasSubstr("seed"));
}

TEST(Gradient, RejectsNonScalarYWithoutSeed) {
  ir::Builder b;
  const NodeId x = P(b, "x", {2, 3});
  const NodeId y = b.Unary(Op::kExp, x);
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  ASSERT_TRUE(graph.ok());
  const NodeId wrt[] = {x};
  absl::StatusOr<GradientGraph> g = AppendGradients(*graph, y, wrt);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("f64[2,3]"));
  EXPECT_THAT(g.status().message(), HasSubstr("seed"));
}

// ---- The pass -----------------------------------------------------------------------------------

// loss = sum(tanh(x) * w). Reading the rules: the seed is fill(1); reduce_sum broadcasts it;
// mul sends g * w to tanh and g * tanh(x) to w; tanh multiplies by 1 - tanh(x)^2 (its own
// output). The integer parameter gets no gradient output.
TEST(GradientPass, PrintedIr) {
  ir::Graph input = testing::Parse(R"(
    graph {
      %0 = parameter() {name="x"} : f64[2]
      %1 = parameter() {name="n"} : i32[2]
      %2 = parameter() {name="w"} : f64[2]
      %3 = tanh(%0) : f64[2]
      %4 = mul(%3, %2) : f64[2]
      %5 = reduce_sum(%4) {axes=[0]} : f64[1]
      return %5 as "loss"
    })");
  GradientPass pass;
  absl::StatusOr<ir::Graph> out = pass.Run(input);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(testing::NormalizeWhitespace(ir::PrintGraph(*out)), testing::NormalizeWhitespace(R"(
    graph {
      %0 = parameter() {name="x"} : f64[2]
      %1 = parameter() {name="n"} : i32[2]
      %2 = parameter() {name="w"} : f64[2]
      %3 = tanh(%0) : f64[2]
      %4 = mul(%3, %2) : f64[2]
      %5 = reduce_sum(%4) {axes=[0]} : f64[1]
      %6 = fill() {value=1} : f64[1]
      %7 = broadcast(%6) : f64[2]
      %8 = mul(%7, %2) : f64[2]
      %9 = mul(%7, %3) : f64[2]
      %10 = fill() {value=1} : f64[2]
      %11 = mul(%3, %3) : f64[2]
      %12 = sub(%10, %11) : f64[2]
      %13 = mul(%8, %12) : f64[2]
      return %5 as "loss", %13 as "grad.x", %9 as "grad.w"
    })"));
  EXPECT_TRUE(ir::Verify(*out).ok());
}

TEST(GradientPass, RejectsNonScalarLoss) {
  GradientPass pass;
  absl::StatusOr<ir::Graph> out = pass.Run(testing::Parse(R"(
    graph {
      %0 = parameter() {name="x"} : f32[2]
      %1 = exp(%0) : f32[2]
      return %1
    })"));
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.status().message(), HasSubstr("f32[2]"));
}

}  // namespace
}  // namespace kiln::passes
