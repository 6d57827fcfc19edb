// Property tests of the simplify passes on seeded random graphs: each pass alone and the whole
// pipeline compute the same outputs as the original, bit for bit, under the reference
// interpreter; the pipeline never adds nodes and reaches a fixed point (running it again changes
// nothing). The generator favours what the passes rewrite: fills of 0, -0 and 1, duplicated
// nodes, chains of movement ops and double negations.
#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ir/builder.h"
#include "ir/printer.h"
#include "pass_test_util.h"
#include "passes/rewriter.h"
#include "passes/simplify.h"

namespace kiln::passes {
namespace {

using ir::DType;
using ir::NodeId;
using ir::Op;
using ir::TensorType;

class RandomGraph {
 public:
  explicit RandomGraph(uint64_t seed) : rng_(seed) {}

  ir::Graph Build() {
    parameters_ = 1 + Pick(3);
    for (int i = 0; i < parameters_; ++i) {
      values_.push_back(b_.Parameter(absl::StrCat("p", i), RandomType()));
    }
    const int steps = 4 + Pick(20);
    for (int i = 0; i < steps && b_.status().ok(); ++i) Step();
    const int outputs = 1 + Pick(3);
    for (int i = 0; i < outputs; ++i) b_.Output(Recent(), Pick(2) == 0 ? absl::StrCat("o", i) : "");
    absl::StatusOr<ir::Graph> graph = std::move(b_).Build();
    EXPECT_TRUE(graph.ok()) << graph.status();
    return graph.ok() ? *std::move(graph) : ir::Graph();
  }

 private:
  int Pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }
  template <class T>
  const T& OneOf(const std::vector<T>& options) {
    return options[static_cast<size_t>(Pick(static_cast<int>(options.size())))];
  }

  TensorType RandomType() {
    static const std::vector<ir::Shape> kShapes = {{2, 3}, {3},    {1, 4}, {2, 1, 3},
                                                   {},     {4, 1}, {8},    {6, 1, 5}};
    return {OneOf<DType>({DType::kF32, DType::kF32, DType::kF64, DType::kI32, DType::kBool}),
            OneOf(kShapes)};
  }
  const TensorType& TypeOf(NodeId id) const { return b_.type(id); }

  // Mostly one of the last few values, so chains form.
  NodeId Recent() {
    const int window = std::min<int>(static_cast<int>(values_.size()), 4);
    return Pick(4) == 0 ? values_[static_cast<size_t>(Pick(static_cast<int>(values_.size())))]
                        : values_[values_.size() - 1 - static_cast<size_t>(Pick(window))];
  }
  double SpecialValue(DType dtype) {
    if (ir::IsBool(dtype)) return Pick(2);
    if (ir::IsFloat(dtype)) return OneOf<double>({0.0, -0.0, 0.0, -0.0, 1.0, 1.0, 2.0, -1.0, 0.5});
    return OneOf<double>({0.0, 0.0, 1.0, 1.0, 2.0, -1.0, 7.0});
  }

  // A new leaf of `type`: a fill (often 0 / -0 / 1), a constant (uniform or not), an iota or a
  // random value.
  NodeId Leaf(const TensorType& type) {
    switch (Pick(6)) {
      case 0:
      case 1:
        return b_.Fill(SpecialValue(type.dtype), type);
      case 2: {
        ir::TensorData literal(type.dtype, type.shape);
        const double uniform = SpecialValue(type.dtype);
        const bool all_equal = Pick(2) == 0;
        for (int64_t i = 0; i < literal.num_elements(); ++i) {
          literal.SetDouble(i, all_equal ? uniform : SpecialValue(type.dtype));
        }
        return b_.Constant(std::move(literal));
      }
      case 3:
        if (!ir::IsBool(type.dtype) && type.rank() > 0) {
          return b_.Iota(type, Pick(static_cast<int>(type.rank())));
        }
        return b_.Fill(SpecialValue(type.dtype), type);
      case 4:
        if (ir::IsFloat(type.dtype)) return b_.RandomUniform(type, 1 + Pick(2));
        return b_.Fill(SpecialValue(type.dtype), type);
      default: {
        std::vector<NodeId> same;
        for (NodeId v : values_) {
          if (TypeOf(v) == type) same.push_back(v);
        }
        return same.empty() ? b_.Fill(SpecialValue(type.dtype), type) : OneOf(same);
      }
    }
  }

  NodeId RandomShapeOf(NodeId x) {
    const TensorType& t = TypeOf(x);
    ir::Shape shape;
    switch (Pick(4)) {
      case 0:
        shape = {t.num_elements()};
        break;
      case 1:
        shape = t.shape;
        shape.insert(shape.begin() + Pick(static_cast<int>(t.rank()) + 1), 1);
        break;
      case 2:
        for (int64_t d : t.shape) {
          if (d != 1) shape.push_back(d);
        }
        break;
      default:
        shape = t.shape;
    }
    return b_.Reshape(x, shape);
  }

  enum Action {
    kUnary,
    kBinary,
    kSelect,
    kCast,
    kReshape,
    kPermute,
    kBroadcast,
    kSlice,
    kPad,
    kFlip,
    kConcat,
    kReduce,
    kDuplicate,
    kDoubleUnary,
    kIdentityCandidate,
    kNumActions,
  };

  void Step() {
    // Half the time one action; otherwise the same movement twice (what movement folding
    // composes) or an elementwise op against a special leaf (what the identities match).
    NodeId result = ir::kInvalidNode;
    switch (Pick(4)) {
      case 0: {
        const Action action = OneOf<Action>({kReshape, kPermute, kBroadcast, kSlice, kFlip, kPad});
        const NodeId once = Apply(action, Recent());
        if (once != ir::kInvalidNode) result = Apply(action, once);
        break;
      }
      case 1:
        result =
            Apply(OneOf<Action>({kBinary, kIdentityCandidate, kSelect, kDoubleUnary}), Recent());
        break;
      default:
        result = Apply(static_cast<Action>(Pick(kNumActions)), Recent());
    }
    if (result != ir::kInvalidNode) values_.push_back(result);
  }

  // Applies `action` to x; kInvalidNode when it does not apply.
  NodeId Apply(Action action, NodeId x) {
    const TensorType t = TypeOf(x);
    const DType dtype = t.dtype;
    const bool is_bool = ir::IsBool(dtype), is_float = ir::IsFloat(dtype);
    switch (action) {
      case kUnary:
        if (is_bool) return b_.Unary(Op::kNot, x);
        if (is_float) {
          return b_.Unary(OneOf<Op>({Op::kNeg, Op::kAbs, Op::kExp, Op::kFloor, Op::kSqrt}), x);
        }
        return b_.Unary(OneOf<Op>({Op::kNeg, Op::kAbs, Op::kNot}), x);
      case kBinary: {  // Against a leaf that is often 0, -0 or 1.
        const NodeId y = Leaf(t);
        const bool swap = Pick(2) == 0;
        const Op op = is_bool ? OneOf<Op>({Op::kAnd, Op::kOr, Op::kXor})
                              : OneOf<Op>({Op::kAdd, Op::kAdd, Op::kSub, Op::kMul, Op::kMul,
                                           Op::kDiv, Op::kMax, Op::kMin});
        return b_.Binary(op, swap ? y : x, swap ? x : y);
      }
      case kSelect: {
        const NodeId y = Leaf(t);
        const NodeId cond = Pick(3) == 0 ? b_.Fill(Pick(2), {DType::kBool, t.shape})
                                         : b_.Binary(OneOf<Op>({Op::kLt, Op::kEq}), x, y);
        return b_.Select(cond, x, Pick(4) == 0 ? x : y);
      }
      case kCast:
        return b_.Cast(x, OneOf<DType>({dtype, DType::kF32, DType::kF64, DType::kI32}));
      case kReshape:
        return RandomShapeOf(x);
      case kPermute: {
        std::vector<int64_t> perm(static_cast<size_t>(t.rank()));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng_);
        return b_.Permute(x, perm);
      }
      case kBroadcast: {  // Expand the size-1 axes.
        if (t.num_elements() > 64) return ir::kInvalidNode;
        ir::Shape shape = t.shape;
        for (int64_t& d : shape) {
          if (d == 1 && Pick(2) == 0) d = 2 + Pick(2);
        }
        return b_.Broadcast(x, shape);
      }
      case kSlice: {
        std::vector<int64_t> starts, limits, strides;
        for (int64_t d : t.shape) {
          starts.push_back(d == 0 || Pick(3) == 0 ? 0 : Pick(static_cast<int>(d)));
          limits.push_back(
              Pick(3) == 0 ? d : starts.back() + Pick(static_cast<int>(d - starts.back()) + 1));
          strides.push_back(1 + Pick(3));
        }
        return b_.Slice(x, starts, limits, strides);
      }
      case kPad: {
        if (t.num_elements() > 64) return ir::kInvalidNode;
        std::vector<int64_t> low, high;
        for (int64_t i = 0; i < t.rank(); ++i) {
          low.push_back(Pick(3) == 0 ? 1 : 0);
          high.push_back(Pick(3) == 0 ? 1 : 0);
        }
        return b_.Pad(x, low, high, SpecialValue(dtype));
      }
      case kFlip: {
        std::vector<int64_t> axes;
        for (int64_t i = 0; i < t.rank(); ++i) {
          if (Pick(2) == 0) axes.push_back(i);
        }
        return b_.Flip(x, axes);
      }
      case kConcat:
        if (t.rank() == 0 || t.num_elements() > 64) return ir::kInvalidNode;
        return b_.Concat({x, Leaf(t)}, Pick(static_cast<int>(t.rank())));
      case kReduce: {
        if (is_bool) x = b_.Cast(x, DType::kF32);
        std::vector<int64_t> axes;
        for (int64_t i = 0; i < t.rank(); ++i) {
          if (Pick(2) == 0) axes.push_back(i);
        }
        // reduce_max has no identity for an empty axis.
        const bool empty = t.num_elements() == 0;
        return b_.Reduce(empty ? Op::kReduceSum : OneOf<Op>({Op::kReduceSum, Op::kReduceMax}), x,
                         axes);
      }
      case kDuplicate: {  // The same node again, for CSE.
        const ir::Node node = b_.graph().node(x);
        if (node.op == Op::kParameter) return ir::kInvalidNode;
        return b_.Emit(node.op, node.inputs, node.attrs);
      }
      case kDoubleUnary:
        if (is_bool) return b_.Unary(Op::kNot, b_.Unary(Op::kNot, x));
        return b_.Unary(Op::kNeg, b_.Unary(Op::kNeg, x));
      case kIdentityCandidate: {  // x op 0, -0 or 1, often right on a parameter.
        if (is_bool) return ir::kInvalidNode;
        if (Pick(2) == 0) {
          x = values_[static_cast<size_t>(Pick(parameters_))];
          if (TypeOf(x).dtype != dtype) x = b_.Cast(x, dtype);
        }
        const NodeId y = b_.Fill(OneOf<double>({0.0, -0.0, 1.0}), TypeOf(x));
        const bool swap = Pick(2) == 0;
        const Op op = OneOf<Op>({Op::kAdd, Op::kSub, Op::kMul, Op::kDiv});
        return b_.Binary(op, swap ? y : x, swap ? x : y);
      }
      case kNumActions:
        break;
    }
    return ir::kInvalidNode;
  }

  std::mt19937_64 rng_;
  int parameters_ = 0;  // values_ starts with them.
  ir::Builder b_;
  std::vector<NodeId> values_;
};

constexpr int kGraphs = 300;

TEST(SimplifyRandom, EachPassPreservesOutputs) {
  for (int seed = 0; seed < kGraphs; ++seed) {
    const ir::Graph graph = RandomGraph(seed).Build();
    ASSERT_GT(graph.num_nodes(), 0) << seed;
    for (const char* name : {"cse", "dce", "constant_fold", "algebraic", "movement_fold"}) {
      absl::StatusOr<ir::Graph> result = testing::RunPasses(name, graph);
      ASSERT_TRUE(result.ok()) << "seed " << seed << " " << name << ": " << result.status() << "\n"
                               << ir::PrintGraph(graph);
      SCOPED_TRACE(absl::StrCat("seed ", seed, ", pass ", name));
      testing::ExpectSameOutputs(graph, *result, seed, /*trials=*/2);
    }
  }
}

TEST(SimplifyRandom, PipelinePreservesOutputsShrinksAndIsAFixedPoint) {
  int64_t nodes_before = 0, nodes_after = 0;
  for (int seed = 0; seed < kGraphs; ++seed) {
    const ir::Graph graph = RandomGraph(seed).Build();
    PassManager pm(testing::QuietOptions());
    AddSimplifyPasses(pm);
    absl::StatusOr<ir::Graph> result = pm.Run(graph);
    ASSERT_TRUE(result.ok()) << "seed " << seed << ": " << result.status() << "\n"
                             << ir::PrintGraph(graph);
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    testing::ExpectSameOutputs(graph, *result, seed, /*trials=*/2);

    absl::StatusOr<ir::Graph> live = testing::RunPasses("dce", graph);
    ASSERT_TRUE(live.ok());
    EXPECT_LE(result->num_nodes(), live->num_nodes()) << ir::PrintGraph(graph);
    nodes_before += live->num_nodes();
    nodes_after += result->num_nodes();

    absl::StatusOr<ir::Graph> again = pm.Run(*result);
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(SameGraph(*result, *again)) << "not a fixed point:\n"
                                            << ir::PrintGraph(*result) << "again:\n"
                                            << ir::PrintGraph(*again);
  }
  // The generator's patterns really get simplified.
  EXPECT_LT(nodes_after, nodes_before * 3 / 4);
}

}  // namespace
}  // namespace kiln::passes
