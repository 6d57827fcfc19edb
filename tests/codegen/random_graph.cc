#include "tests/codegen/random_graph.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/builder.h"
#include "ir/infer.h"
#include "ir/interpreter.h"
#include "ir/printer.h"

namespace kiln::test {
namespace {

using ir::DType;
using ir::NodeId;
using ir::Op;
using ir::Shape;

// A value in the pool: every pool value has the graph's dtype. `exact` is false once an inexact
// accumulation (a float sum, product, matmul, conv, window_sum or scatter_add) is upstream:
// backends may then differ slightly from the interpreter, so discontinuous ops avoid it.
struct Val {
  NodeId id;
  bool exact;
};

class Generator {
 public:
  Generator(uint64_t seed, const RandomGraphOptions& options) : rng_(seed), o_(options) {}

  RandomGraph Run(uint64_t seed) {
    dtype_ = o_.dtypes[static_cast<size_t>(Int(0, static_cast<int64_t>(o_.dtypes.size()) - 1))];
    is_float_ = ir::IsFloat(dtype_);
    const int target = static_cast<int>(Int(o_.min_ops, o_.max_ops));
    const int params = static_cast<int>(Int(1, 3));
    for (int i = 0; i < params; ++i) pool_.push_back({Param(RandomShape(1)), true});
    for (int attempts = 0; b_.graph().num_nodes() < target && attempts < 10 * target; ++attempts) {
      const size_t before = pool_.size();
      Step();
      if (!b_.status().ok()) break;
      (void)before;
    }
    // Outputs: the newest value plus up to two earlier ones.
    std::vector<NodeId> outputs = {pool_.back().id};
    const int extra = static_cast<int>(Int(0, 2));
    for (int i = 0; i < extra; ++i) {
      const NodeId id =
          pool_[static_cast<size_t>(Int(0, static_cast<int64_t>(pool_.size()) - 1))].id;
      if (std::find(outputs.begin(), outputs.end(), id) == outputs.end()) outputs.push_back(id);
    }
    for (size_t i = 0; i < outputs.size(); ++i) b_.Output(outputs[i], absl::StrCat("out", i));

    RandomGraph result;
    result.seed = seed;
    absl::StatusOr<ir::Graph> graph = std::move(b_).Build();
    if (!graph.ok()) {
      // A generator bug: report it through the text so the test shows it.
      result.text = absl::StrCat("generator error: ", graph.status().ToString());
      return result;
    }
    result.graph = *std::move(graph);
    result.text = ir::PrintGraph(result.graph);
    for (NodeId p : result.graph.Parameters()) {
      const ir::Node& node = result.graph.node(p);
      auto bound = index_bounds_.find(node.attrs.name);
      if (bound == index_bounds_.end()) {
        result.arguments.push_back(RandomTensor(node.type, rng_));
      } else {
        ir::TensorData data(node.type.dtype, node.type.shape);
        for (int64_t i = 0; i < data.num_elements(); ++i) {
          data.SetInt64(i, Int(0, bound->second - 1));
        }
        result.arguments.push_back(std::move(data));
      }
    }
    if (dtype_ == DType::kF32) {
      result.tolerance = {2e-4, 2e-4};
    } else if (dtype_ == DType::kF64) {
      result.tolerance = {1e-9, 1e-9};
    } else if (ir::IsFloat(dtype_)) {
      result.tolerance = {2e-2, 2e-2};
    }
    return result;
  }

 private:
  // ---- Randomness -------------------------------------------------------------------------------

  int64_t Int(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  double Real(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng_); }

  Shape RandomShape(int min_rank = 0) {
    Shape shape(static_cast<size_t>(Int(min_rank, o_.max_rank)));
    for (int64_t& d : shape) d = Int(1, o_.max_dim);
    if (!shape.empty() && Chance(o_.zero_dim_probability)) {
      shape[static_cast<size_t>(Int(0, static_cast<int64_t>(shape.size()) - 1))] = 0;
    }
    return shape;
  }

  // After a builder error (a generator bug, reported by Build) ids may be invalid.
  const ir::TensorType& Type(NodeId id) const {
    static const ir::TensorType kNone{DType::kF32, {}};
    return id < 0 || id >= b_.graph().num_nodes() ? kNone : b_.type(id);
  }
  const Shape& ShapeOf(NodeId id) const { return Type(id).shape; }
  int RankOf(NodeId id) const { return static_cast<int>(ShapeOf(id).size()); }

  // Recent values are picked more often, so chains get deep.
  Val Pick() {
    const auto n = static_cast<int64_t>(pool_.size());
    if (Chance(0.6)) return pool_[static_cast<size_t>(std::max<int64_t>(0, n - 1 - Int(0, 2)))];
    return pool_[static_cast<size_t>(Int(0, n - 1))];
  }

  // ---- Leaves -----------------------------------------------------------------------------------

  NodeId Param(const Shape& shape, DType dtype) {
    return b_.Parameter(absl::StrCat("p", params_++), {dtype, shape});
  }
  NodeId Param(const Shape& shape) { return Param(shape, dtype_); }

  NodeId IndexParam(const Shape& shape, int64_t bound) {
    const std::string name = absl::StrCat("idx", params_++);
    index_bounds_[name] = bound;
    return b_.Parameter(name, {Chance(0.5) ? DType::kI64 : DType::kI32, shape});
  }

  NodeId Fill(double value, const Shape& shape) { return b_.Fill(value, {dtype_, shape}); }

  // A new value of `shape`: a parameter or a leaf op.
  Val Fresh(const Shape& shape) {
    const int64_t choice = Int(0, 9);
    if (choice < 4) return {Param(shape), true};
    if (choice < 5)
      return {Fill(is_float_ ? Real(-2, 2) : static_cast<double>(Int(-5, 5)), shape), true};
    if (choice < 6 && !shape.empty()) {
      return {b_.Iota({dtype_, shape}, Int(0, static_cast<int64_t>(shape.size()) - 1)), true};
    }
    if (choice < 8 && is_float_ && o_.allow_random) {
      const uint64_t seed = rng_();
      return {Chance(0.5) ? b_.RandomUniform({dtype_, shape}, seed)
                          : b_.RandomNormal({dtype_, shape}, seed),
              true};
    }
    return {b_.Constant(RandomTensor({dtype_, shape}, rng_)), true};
  }

  // An operand of a's shape: an existing value of that shape, a broadcast of a compatible one,
  // or a fresh value.
  Val Like(Val a) {
    const Shape shape = ShapeOf(a.id);  // a copy: building nodes may move the graph's storage
    std::vector<Val> same, compatible;
    for (const Val& v : pool_) {
      if (v.id == a.id) continue;
      const Shape& s = ShapeOf(v.id);
      if (s == shape) {
        same.push_back(v);
      } else if (s.size() == shape.size()) {
        bool ok = true;
        for (size_t i = 0; i < s.size(); ++i) ok = ok && (s[i] == shape[i] || s[i] == 1);
        if (ok) compatible.push_back(v);
      }
    }
    if (!same.empty() && Chance(0.5)) {
      return same[static_cast<size_t>(Int(0, static_cast<int64_t>(same.size()) - 1))];
    }
    if (!compatible.empty() && Chance(0.6)) {
      const Val v =
          compatible[static_cast<size_t>(Int(0, static_cast<int64_t>(compatible.size()) - 1))];
      return {b_.Broadcast(v.id, shape), v.exact};
    }
    return Fresh(shape);
  }

  void Push(NodeId id, bool exact) { pool_.push_back({id, exact}); }

  // abs(x) + c: a positive operand for log/sqrt/div.
  NodeId PositivePlus(NodeId x, double c) {
    return b_.Binary(Op::kAdd, b_.Unary(Op::kAbs, x), Fill(c, ShapeOf(x)));
  }

  // ---- Steps ------------------------------------------------------------------------------------

  void Step() {
    const int64_t choice = Int(0, 99);
    if (choice < 18) return Unary();
    if (choice < 36) return Binary();
    if (choice < 42) return CompareSelect();
    if (choice < 47) return Cast();
    if (choice < 62) return Reduce();
    if (choice < 78) return Movement();
    if (choice < 83) {
      if (o_.allow_index) return Chance(0.6) ? Gather() : Scatter();
      return Unary();
    }
    if (choice < 88) {
      if (o_.allow_matmul) return MatMul();
      return Binary();
    }
    if (choice < 92) {
      if (o_.allow_window) return Window();
      return Reduce();
    }
    if (choice < 95) {
      if (o_.allow_conv) return Conv();
      return Movement();
    }
    const Val v = Fresh(RandomShape());
    Push(v.id, v.exact);
  }

  void Unary() {
    const Val a = Pick();
    const NodeId x = a.id;
    if (!is_float_) {
      static constexpr Op kOps[] = {Op::kNeg, Op::kAbs, Op::kSign, Op::kNot};
      return Push(b_.Unary(kOps[Int(0, 3)], x), a.exact);
    }
    const int64_t choice = Int(0, a.exact ? 14 : 10);
    switch (choice) {
      case 0:
        return Push(b_.Unary(Op::kNeg, x), a.exact);
      case 1:
        return Push(b_.Unary(Op::kAbs, x), a.exact);
      case 2:
        return Push(b_.Unary(Op::kTanh, x), a.exact);
      case 3:
        return Push(b_.Unary(Op::kSin, x), a.exact);
      case 4:
        return Push(b_.Unary(Op::kCos, x), a.exact);
      case 5:
        return Push(b_.Unary(Op::kErf, x), a.exact);
      case 6:
        return Push(b_.Unary(Op::kExp, b_.Unary(Op::kTanh, x)), a.exact);
      case 7:
        return Push(b_.Unary(Op::kLog, PositivePlus(x, 1.0)), a.exact);
      case 8:
        return Push(b_.Unary(Op::kSqrt, b_.Unary(Op::kAbs, x)), a.exact);
      case 9:
        return Push(b_.Unary(Op::kRsqrt, PositivePlus(x, 1.0)), a.exact);
      case 10:
        return Push(b_.Unary(Op::kReciprocal, PositivePlus(x, 1.0)), a.exact);
      case 11:
        return Push(b_.Unary(Op::kFloor, x), true);
      case 12:
        return Push(b_.Unary(Op::kCeil, x), true);
      case 13:
        return Push(b_.Unary(Op::kRound, x), true);
      default:
        return Push(b_.Unary(Op::kSign, x), true);
    }
  }

  void Binary() {
    const Val a = Pick();
    const Val b = Like(a);
    const bool exact = a.exact && b.exact;
    if (!is_float_) {
      static constexpr Op kOps[] = {Op::kAdd, Op::kSub, Op::kMul, Op::kMax, Op::kMin,
                                    Op::kDiv, Op::kMod, Op::kAnd, Op::kOr,  Op::kXor};
      return Push(b_.Binary(kOps[Int(0, 9)], a.id, b.id), exact);
    }
    switch (Int(0, exact ? 7 : 6)) {
      case 0:
        return Push(b_.Binary(Op::kAdd, a.id, b.id), exact);
      case 1:
        return Push(b_.Binary(Op::kSub, a.id, b.id), exact);
      case 2:
        return Push(b_.Binary(Op::kMul, a.id, b.id), exact);
      case 3:
        return Push(b_.Binary(Op::kMax, a.id, b.id), exact);
      case 4:
        return Push(b_.Binary(Op::kMin, a.id, b.id), exact);
      case 5:
        return Push(b_.Binary(Op::kDiv, a.id, PositivePlus(b.id, 1.0)), exact);
      case 6:
        return Push(b_.Binary(Op::kPow, PositivePlus(a.id, 0.5), b_.Unary(Op::kTanh, b.id)), exact);
      default:
        return Push(b_.Binary(Op::kMod, a.id, PositivePlus(b.id, 0.5)), true);
    }
  }

  void CompareSelect() {
    const Val a = Pick();
    const Val b = Like(a);
    if (is_float_ && !(a.exact && b.exact)) return Binary();
    static constexpr Op kCompares[] = {Op::kEq, Op::kNe, Op::kLt, Op::kLe, Op::kGt, Op::kGe};
    NodeId cond = b_.Binary(kCompares[Int(0, 5)], a.id, b.id);
    if (Chance(0.3)) {
      static constexpr Op kLogical[] = {Op::kAnd, Op::kOr, Op::kXor};
      cond = b_.Binary(kLogical[Int(0, 2)], cond, b_.Binary(kCompares[Int(0, 5)], b.id, a.id));
    }
    if (Chance(0.2)) cond = b_.Unary(Op::kNot, cond);
    Push(b_.Select(cond, a.id, b.id), a.exact && b.exact);
  }

  void Cast() {
    const Val a = Pick();
    if (is_float_) {
      // Rounding to f16/bf16 (choices 1, 2) is discontinuous: an inexact input one f32 ulp off
      // may round to the neighbouring 16-bit value, so only exact values take those round trips.
      const int64_t choice = Int(0, a.exact ? 4 : 0);
      switch (choice) {
        case 0:
          return Push(
              b_.Cast(b_.Cast(a.id, dtype_ == DType::kF64 ? DType::kF32 : DType::kF64), dtype_),
              a.exact);
        case 1:
          return Push(b_.Cast(b_.Cast(a.id, DType::kF16), dtype_), a.exact);
        case 2:
          return Push(b_.Cast(b_.Cast(a.id, DType::kBF16), dtype_), a.exact);
        case 3:
          return Push(b_.Cast(b_.Cast(a.id, DType::kI32), dtype_), true);
        default:
          return Push(b_.Cast(b_.Cast(a.id, DType::kBool), dtype_), true);
      }
    }
    static constexpr DType kVia[] = {DType::kF64, DType::kF32, DType::kI32,
                                     DType::kI64, DType::kU8,  DType::kBool};
    Push(b_.Cast(b_.Cast(a.id, kVia[Int(0, 5)]), dtype_), a.exact);
  }

  void Reduce() {
    const Val a = Pick();
    const Shape shape = ShapeOf(a.id);  // a copy: building nodes may move the graph's storage
    const int rank = static_cast<int>(shape.size());
    if (rank == 0) return Unary();
    std::vector<int64_t> axes;
    for (int axis = 0; axis < rank; ++axis) {
      if (Chance(0.5)) axes.push_back(axis);
    }
    if (axes.empty() && Chance(0.8)) axes.push_back(rank - 1);
    int64_t reduced = 1;
    for (int64_t axis : axes) reduced *= shape[static_cast<size_t>(axis)];
    NodeId result = ir::kInvalidNode;
    bool exact = a.exact;
    const int64_t choice = Int(0, 5);
    if (choice == 0 || (reduced == 0 && choice <= 3)) {
      result = b_.Reduce(Op::kReduceSum, a.id, axes);
      exact = exact && !is_float_;
    } else if (choice == 1) {
      result = b_.Reduce(Op::kReduceMax, a.id, axes);
    } else if (choice == 2) {
      result = b_.Reduce(Op::kReduceMin, a.id, axes);
    } else if (choice == 3) {
      if (reduced > 6) {
        result = b_.Reduce(Op::kReduceSum, a.id, axes);
      } else {
        result = b_.Reduce(Op::kReduceProd, a.id, axes);
      }
      exact = exact && !is_float_;
    } else {
      const int axis = static_cast<int>(Int(0, rank - 1));
      if (shape[static_cast<size_t>(axis)] == 0 || (is_float_ && !a.exact)) {
        result = b_.Reduce(reduced == 0 ? Op::kReduceSum : Op::kReduceMax, a.id, axes);
        exact = exact && (reduced != 0 || !is_float_);
      } else {
        result = b_.Cast(b_.ArgReduce(Chance(0.5) ? Op::kArgMax : Op::kArgMin, a.id, axis), dtype_);
        exact = true;
      }
    }
    if (Chance(0.5)) {
      // The row pattern of softmax / layer norm: combine the input with its broadcast reduction.
      const NodeId back = b_.Broadcast(result, shape);
      if (is_float_ && Chance(0.5)) {
        result = b_.Binary(Op::kDiv, b_.Unary(Op::kExp, b_.Unary(Op::kTanh, a.id)),
                           PositivePlus(back, 1.0));
      } else {
        result = b_.Binary(Op::kSub, a.id, back);
      }
    }
    Push(result, exact);
  }

  Shape RandomReshape(const Shape& shape) {
    const int64_t count = ir::NumElements(shape);
    if (count == 0) return Chance(0.5) ? Shape{0} : Shape{1, 0};
    // Factor the count into up to max_rank + 1 dims (unit dims included).
    Shape out;
    int64_t rest = count;
    const int rank = static_cast<int>(Int(1, o_.max_rank + 1));
    for (int i = 0; i < rank - 1; ++i) {
      std::vector<int64_t> divisors;
      for (int64_t d = 1; d <= rest; ++d) {
        if (rest % d == 0) divisors.push_back(d);
      }
      const int64_t d =
          divisors[static_cast<size_t>(Int(0, static_cast<int64_t>(divisors.size()) - 1))];
      out.push_back(d);
      rest /= d;
    }
    out.push_back(rest);
    return out;
  }

  void Movement() {
    const Val a = Pick();
    const Shape shape = ShapeOf(a.id);  // a copy: building nodes may move the graph's storage
    const int rank = static_cast<int>(shape.size());
    switch (Int(0, 6)) {
      case 0:
        return Push(b_.Reshape(a.id, RandomReshape(shape)), a.exact);
      case 1: {
        if (rank < 2) return Push(b_.Reshape(a.id, RandomReshape(shape)), a.exact);
        std::vector<int64_t> perm(static_cast<size_t>(rank));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng_);
        return Push(b_.Permute(a.id, perm), a.exact);
      }
      case 2: {
        if (rank == 0) break;
        std::vector<int64_t> starts, limits, strides;
        for (int64_t d : shape) {
          const int64_t start = Int(0, d);
          starts.push_back(start);
          limits.push_back(Int(start, d));
          strides.push_back(Int(1, 2));
        }
        return Push(b_.Slice(a.id, starts, limits, strides), a.exact);
      }
      case 3: {
        if (rank == 0) break;
        std::vector<int64_t> low, high;
        for (int i = 0; i < rank; ++i) {
          low.push_back(Int(0, 2));
          high.push_back(Int(0, 2));
        }
        const double value = is_float_ ? Real(-2, 2) : static_cast<double>(Int(-3, 3));
        return Push(b_.Pad(a.id, low, high, value), a.exact);
      }
      case 4: {
        if (rank == 0) break;
        std::vector<int64_t> axes;
        for (int i = 0; i < rank; ++i) {
          if (Chance(0.5)) axes.push_back(i);
        }
        if (axes.empty()) axes.push_back(rank - 1);
        return Push(b_.Flip(a.id, axes), a.exact);
      }
      case 5: {
        if (rank == 0) break;
        const int axis = static_cast<int>(Int(0, rank - 1));
        Shape other_shape = shape;
        other_shape[static_cast<size_t>(axis)] = Int(0, 3);
        const Val other = Chance(0.4) ? a : Fresh(other_shape);
        std::vector<NodeId> parts = {a.id, other.id};
        if (Chance(0.3)) parts.push_back(Fresh(shape).id);
        if (Chance(0.5)) std::swap(parts[0], parts[1]);
        return Push(b_.Concat(parts, axis), a.exact && other.exact);
      }
      default: {
        // Broadcast: give the value a unit axis (reshape or reduce), then expand it.
        if (rank == 0) break;
        const int axis = static_cast<int>(Int(0, rank - 1));
        Shape unit = shape;
        unit[static_cast<size_t>(axis)] = 1;
        NodeId source;
        bool exact = a.exact;
        if (shape[static_cast<size_t>(axis)] == 1) {
          source = a.id;
        } else if (shape[static_cast<size_t>(axis)] > 0) {
          source = b_.Reduce(Op::kReduceMax, a.id, {axis});
        } else {
          source = b_.Reduce(Op::kReduceSum, a.id, {axis});
        }
        Shape target = unit;
        target[static_cast<size_t>(axis)] = Int(1, 4);
        return Push(b_.Broadcast(source, target), exact);
      }
    }
    Unary();
  }

  void Gather() {
    const Val a = Pick();
    const Shape shape = ShapeOf(a.id);  // a copy: building nodes may move the graph's storage
    const int rank = static_cast<int>(shape.size());
    if (rank == 0 || ir::NumElements(shape) == 0) return Movement();
    const int axis = static_cast<int>(Int(0, rank - 1));
    Shape index_shape;
    for (int i = 0; i < rank; ++i) {
      index_shape.push_back(i == axis ? Int(1, 4) : Int(1, shape[static_cast<size_t>(i)]));
    }
    const NodeId index = IndexParam(index_shape, shape[static_cast<size_t>(axis)]);
    Push(b_.Gather(a.id, index, axis), a.exact);
  }

  void Scatter() {
    const Val a = Pick();
    const Shape shape = ShapeOf(a.id);  // a copy: building nodes may move the graph's storage
    const int rank = static_cast<int>(shape.size());
    if (rank == 0 || ir::NumElements(shape) == 0) return Movement();
    const int axis = static_cast<int>(Int(0, rank - 1));
    Shape index_shape;
    for (int i = 0; i < rank; ++i) {
      index_shape.push_back(i == axis ? Int(1, 4) : Int(1, shape[static_cast<size_t>(i)]));
    }
    const NodeId index = IndexParam(index_shape, shape[static_cast<size_t>(axis)]);
    const Val src = Fresh(index_shape);
    Push(b_.ScatterAdd(a.id, index, src.id, axis), a.exact && src.exact && !is_float_);
  }

  void MatMul() {
    const Val a = Pick();
    const Shape shape = ShapeOf(a.id);  // a copy: building nodes may move the graph's storage
    const int rank = static_cast<int>(shape.size());
    if (rank != 2 && rank != 3) return Binary();
    Shape w_shape(shape.begin(), shape.end() - 2);
    const int64_t n = Int(1, o_.max_dim);
    w_shape.push_back(shape.back());
    w_shape.push_back(n);
    NodeId out = b_.MatMul(a.id, Param(w_shape));
    if (Chance(0.6)) {
      Shape bias_shape(static_cast<size_t>(rank), 1);
      bias_shape.back() = n;
      const NodeId bias = b_.Reshape(Param({n}), bias_shape);
      out = b_.Binary(Op::kAdd, out, b_.Broadcast(bias, ShapeOf(out)));
    }
    if (Chance(0.5)) out = b_.Binary(Op::kMax, out, Fill(0.0, ShapeOf(out)));
    Push(out, a.exact && !is_float_);
  }

  void Window() {
    const Val a = Pick();
    const Shape shape = ShapeOf(a.id);  // a copy: building nodes may move the graph's storage
    const int rank = static_cast<int>(shape.size());
    if (rank == 0) return Reduce();
    ir::Attrs attrs;
    for (int i = 0; i < rank; ++i) {
      const int64_t d = shape[static_cast<size_t>(i)];
      int64_t window, stride, low, high, dilation;
      for (int attempt = 0;; ++attempt) {
        window = Int(1, 3);
        stride = Int(1, 2);
        low = Int(0, 1);
        high = Int(0, 1);
        dilation = Int(1, 2);
        if (ir::WindowOutputSize(d, window, stride, low, high, dilation, 1) >= 1 || attempt > 8) {
          break;
        }
      }
      if (ir::WindowOutputSize(d, window, stride, low, high, dilation, 1) < 0) {
        window = 1;
        stride = 1;
        low = high = 0;
        dilation = 1;
      }
      attrs.window.push_back(window);
      attrs.strides.push_back(stride);
      attrs.low.push_back(low);
      attrs.high.push_back(high);
      attrs.dilation.push_back(dilation);
    }
    const bool sum = Chance(0.5);
    const NodeId out = b_.WindowReduce(sum ? Op::kWindowSum : Op::kWindowMax, a.id, attrs);
    Push(out, a.exact && !(sum && is_float_));
  }

  void Conv() {
    const Val a = Pick();
    const Shape shape = ShapeOf(a.id);  // a copy: building nodes may move the graph's storage
    const int rank = static_cast<int>(shape.size());
    if (rank != 3 && rank != 4) return MatMul();
    const int64_t channels = shape[1];
    int64_t groups = 1;
    if (channels > 1 && Chance(0.3) && channels % 2 == 0) groups = 2;
    const int64_t outputs = groups * Int(1, 2);
    ir::Attrs attrs;
    attrs.groups = groups;
    Shape w_shape = {outputs, channels / groups};
    for (int d = 0; d < rank - 2; ++d) {
      const int64_t in = shape[static_cast<size_t>(2 + d)];
      int64_t kernel = 1, stride = 1, low = 0, high = 0, dilation = 1, input_dilation = 1;
      for (int attempt = 0; attempt < 8; ++attempt) {
        const int64_t k = Int(1, 3), s = Int(1, 2), l = Int(0, 1), h = Int(0, 1), dl = Int(1, 2),
                      id = Chance(0.2) ? 2 : 1;
        if (ir::WindowOutputSize(in, k, s, l, h, dl, id) >= 1) {
          kernel = k;
          stride = s;
          low = l;
          high = h;
          dilation = dl;
          input_dilation = id;
          break;
        }
      }
      if (ir::WindowOutputSize(in, kernel, stride, low, high, dilation, input_dilation) < 0) {
        return MatMul();
      }
      w_shape.push_back(kernel);
      attrs.strides.push_back(stride);
      attrs.low.push_back(low);
      attrs.high.push_back(high);
      attrs.dilation.push_back(dilation);
      attrs.input_dilation.push_back(input_dilation);
    }
    Push(b_.Conv(a.id, Param(w_shape), attrs), a.exact && !is_float_);
  }

  std::mt19937_64 rng_;
  const RandomGraphOptions& o_;
  ir::Builder b_;
  std::vector<Val> pool_;
  DType dtype_ = DType::kF32;
  bool is_float_ = true;
  int params_ = 0;
  std::map<std::string, int64_t> index_bounds_;
};

}  // namespace

RandomGraph MakeRandomGraph(uint64_t seed, const RandomGraphOptions& options) {
  return Generator(seed, options).Run(seed);
}

std::vector<uint64_t> FuzzSeeds(std::vector<uint64_t> fixed) {
  if (const char* env = std::getenv("KILN_FUZZ_SEED"); env != nullptr && *env != '\0') {
    uint64_t seed;
    if (std::string(env) == "random") {
      seed = std::random_device{}();
      std::cerr << "KILN_FUZZ_SEED=random picked " << seed << "\n";
    } else {
      seed = std::strtoull(env, nullptr, 10);
    }
    fixed.push_back(seed);
  }
  return fixed;
}

ir::TensorData RandomTensor(const ir::TensorType& type, std::mt19937_64& rng) {
  ir::TensorData data(type.dtype, type.shape);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t i = 0; i < data.num_elements(); ++i) {
    switch (type.dtype) {
      case DType::kBool:
        data.SetInt64(i, static_cast<int64_t>(rng() & 1));
        break;
      case DType::kU8:
      case DType::kU16:
      case DType::kU32:
      case DType::kU64:
        data.SetInt64(i, std::uniform_int_distribution<int64_t>(0, 20)(rng));
        break;
      case DType::kI8:
      case DType::kI16:
        // Now and then a limit, so that 8- and 16-bit arithmetic wraps (the wider types reach
        // theirs in the cases' own fix_args).
        if (rng() % 8 == 0) {
          data.SetDouble(i, rng() % 2 == 0 ? -1e30 : 1e30);  // saturates to the dtype's min/max
          break;
        }
        [[fallthrough]];
      case DType::kI32:
      case DType::kI64:
        data.SetInt64(i, std::uniform_int_distribution<int64_t>(-10, 10)(rng));
        break;
      default:
        data.SetDouble(i, std::clamp(normal(rng), -2.0, 2.0));
        break;
    }
  }
  return data;
}

ir::TensorData RandomTensor(const ir::TensorType& type, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return RandomTensor(type, rng);
}

absl::StatusOr<ReferenceRun> RunReference(const ir::Graph& graph, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ir::TensorData> args;
  ReferenceRun run;
  for (ir::NodeId p : graph.Parameters()) {
    args.push_back(RandomTensor(graph.node(p).type, rng));
    run.arguments.push_back(std::make_shared<const ir::TensorData>(args.back()));
  }
  absl::StatusOr<std::vector<ir::TensorData>> expected = ir::Interpret(graph, args);
  if (!expected.ok()) return expected.status();
  run.expected = *std::move(expected);
  return run;
}

::testing::AssertionResult TensorsClose(const ir::TensorData& expected,
                                        const ir::TensorData& actual, Tolerance tolerance) {
  if (expected.dtype() != actual.dtype() || expected.shape() != actual.shape()) {
    return ::testing::AssertionFailure()
           << "type differs: expected " << ir::DTypeName(expected.dtype())
           << ir::ShapeToString(expected.shape()) << ", got " << ir::DTypeName(actual.dtype())
           << ir::ShapeToString(actual.shape());
  }
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    if (!ir::IsFloat(expected.dtype())) {
      if (expected.GetInt64(i) != actual.GetInt64(i)) {
        return ::testing::AssertionFailure()
               << "element " << i << ": expected " << expected.GetInt64(i) << ", got "
               << actual.GetInt64(i);
      }
      continue;
    }
    const double e = expected.GetDouble(i), a = actual.GetDouble(i);
    bool ok;
    if (std::isnan(e) || std::isnan(a)) {
      ok = std::isnan(e) && std::isnan(a);
    } else if (std::isinf(e) || std::isinf(a)) {
      ok = e == a;
    } else {
      ok = std::fabs(a - e) <= tolerance.atol + tolerance.rtol * std::fabs(e);
    }
    if (!ok) {
      return ::testing::AssertionFailure()
             << "element " << i << " of " << ir::DTypeName(expected.dtype())
             << ir::ShapeToString(expected.shape()) << ": expected " << e << ", got " << a
             << " (rtol " << tolerance.rtol << ", atol " << tolerance.atol << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kiln::test
