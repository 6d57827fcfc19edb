// The per-op cases shared by the lowering test (kernel evaluator) and the CPU backend's op test
// (LLVM JIT). See op_cases.h.
#include "tests/codegen/op_cases.h"

#include <cmath>
#include <functional>
#include <limits>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/builder.h"

namespace kiln::test {

using ir::DType;
using ir::NodeId;
using ir::Op;
using ir::Shape;

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

namespace {

std::string Name(const std::string& base, DType dtype, const Shape& shape) {
  std::string s = absl::StrCat(base, "_", ir::DTypeName(dtype));
  for (int64_t d : shape) absl::StrAppend(&s, "_", d);
  return s;
}

// Elementwise float results are exact for f32/f64 (one rounding, like the interpreter); f16 and
// bf16 are computed in f32 and rounded on store, so they may differ by a unit in the last place.
test::Tolerance ElementwiseTolerance(DType dtype) {
  if (dtype == DType::kF16) return {1e-3, 1e-6};
  if (dtype == DType::kBF16) return {8e-3, 1e-6};
  return {0, 0};
}

// Accumulations run in the compute type (f32) instead of the interpreter's double.
test::Tolerance AccumulateTolerance(DType dtype) {
  if (dtype == DType::kF16) return {2e-3, 2e-3};
  if (dtype == DType::kBF16) return {1.6e-2, 1.6e-2};
  if (dtype == DType::kF32) return {1e-5, 1e-6};
  return {0, 0};
}

// Sets the first elements of every float argument to special values.
void InjectSpecials(std::vector<ir::TensorData>& args) {
  const double specials[] = {std::nan(""), 0.0, -0.0, 1.0, -1.0, 2.5, -3.5};
  for (ir::TensorData& arg : args) {
    if (!ir::IsFloat(arg.dtype())) continue;
    for (int64_t i = 0; i < arg.num_elements() && i < 7; ++i) arg.SetDouble(i, specials[i]);
  }
}

// The values where rounding to an integer goes wrong: ties of both signs (even and odd integer
// parts), the doubles next to 0.5, the last fractional values below 2^(p-1) (p: mantissa bits of
// `dtype`) where a round up carries into the exponent, integers at and above 2^(p-1), signed
// zeros, subnormals, infinities and NaN.
std::vector<double> RoundingEdges(DType dtype) {
  const int p = dtype == DType::kF64 ? 53 : 24;
  const double big = std::ldexp(1.0, p - 1);  // the first magnitude with no fraction bits
  const double tiny = dtype == DType::kF64 ? std::numeric_limits<double>::denorm_min()
                                           : std::numeric_limits<float>::denorm_min();
  const double below_half =
      dtype == DType::kF64 ? std::nextafter(0.5, 0.0) : std::nextafter(0.5f, 0.0f);
  const double above_half =
      dtype == DType::kF64 ? std::nextafter(0.5, 1.0) : std::nextafter(0.5f, 1.0f);
  std::vector<double> magnitudes = {0.0,
                                    tiny,
                                    below_half,
                                    0.5,
                                    above_half,
                                    0.75,
                                    1.0,
                                    1.25,
                                    1.5,
                                    2.5,
                                    3.5,
                                    4.5,
                                    5.5,
                                    1e6 + 0.5,
                                    big / 2 + 0.5,
                                    big / 2 + 1.5,
                                    big - 1.5,
                                    big - 0.5,
                                    big - 1,
                                    big,
                                    big + 1,
                                    2 * big,
                                    std::ldexp(1.0, 100),
                                    std::numeric_limits<double>::infinity()};
  std::vector<double> values;
  for (double m : magnitudes) {
    values.push_back(m);
    values.push_back(-m);
  }
  values.push_back(std::nan(""));
  return values;
}

// Rounds float arguments to small integers so that comparisons meet equal values.
void SmallIntegers(std::vector<ir::TensorData>& args) {
  for (ir::TensorData& arg : args) {
    if (!ir::IsFloat(arg.dtype())) continue;
    for (int64_t i = 0; i < arg.num_elements(); ++i) arg.SetDouble(i, std::round(arg.GetDouble(i)));
  }
}

// ---- Sorting (sort, argsort) ----
// Kept in one block (and one function) so that it moves as a unit when the backends' op suites
// merge. Values are drawn from a few levels so fibres have ties (stability shows), and floats
// get NaN, infinities and signed zeros among them.
void AppendSortCases(std::vector<Case>& cases) {
  const auto ties = [](std::vector<ir::TensorData>& args) {
    std::mt19937_64 rng(23);
    const double specials[] = {std::nan(""), std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity(), -0.0, 0.0};
    for (ir::TensorData& arg : args) {
      const bool is_float = ir::IsFloat(arg.dtype());
      for (int64_t i = 0; i < arg.num_elements(); ++i) {
        const int64_t level = std::uniform_int_distribution<int64_t>(0, 5)(rng);
        if (is_float && std::uniform_int_distribution<int>(0, 6)(rng) == 0) {
          arg.SetDouble(i, specials[level % 5]);
        } else if (ir::IsBool(arg.dtype())) {
          arg.SetInt64(i, level % 2);
        } else {
          arg.SetDouble(i, is_float ? (level - 2) * 1.5 : static_cast<double>(level * 7));
        }
      }
    }
  };
  struct SortCase {
    Shape shape;
    int64_t axis;
  };
  for (const SortCase& c : std::vector<SortCase>{
           {{4, 7}, 1}, {{5, 3, 4}, 1}, {{9}, 0}, {{3, 0}, 1}, {{2, 1}, 1}, {{6, 5}, 0}}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kI32, DType::kU8, DType::kBool, DType::kI8,
                        DType::kU32, DType::kU64}) {
      for (Op op : {Op::kSort, Op::kArgsort}) {
        cases.push_back({Name(absl::StrCat(ir::OpName(op), "_axis", c.axis), dtype, c.shape),
                         [c, dtype, op](ir::Builder& b) {
                           ir::Attrs attrs;
                           attrs.axes = {c.axis};
                           b.Output(b.Emit(op, {b.Parameter("x", {dtype, c.shape})}, attrs));
                         },
                         ties});
      }
    }
  }
  // Movement producers fuse into the sort kernel as index arithmetic (the frontend's descending
  // sort is flip -> sort -> flip); an elementwise producer (neg) stays a kernel of its own; f64 and
  // i64 use the wide compares; sort and argsort of one value are two outputs.
  cases.push_back({"sort_descending_f64",
                   [](ir::Builder& b) {
                     ir::Attrs attrs;
                     attrs.axes = {1};
                     const NodeId x = b.Parameter("x", {DType::kF64, {3, 8}});
                     const NodeId s = b.Emit(Op::kSort, {b.Flip(x, {1})}, attrs);
                     const NodeId i = b.Emit(Op::kArgsort, {b.Flip(x, {1})}, attrs);
                     b.Output(b.Flip(s, {1}));
                     b.Output(b.Flip(i, {1}));
                   },
                   ties});
  cases.push_back({"argsort_of_permute_i64",
                   [](ir::Builder& b) {
                     ir::Attrs attrs;
                     attrs.axes = {0};
                     const NodeId x = b.Parameter("x", {DType::kI64, {4, 6}});
                     b.Output(b.Emit(Op::kArgsort, {b.Permute(x, {1, 0})}, attrs));
                   },
                   ties});
  cases.push_back({"sort_of_neg_broadcast",
                   [](ir::Builder& b) {
                     ir::Attrs attrs;
                     attrs.axes = {1};
                     const NodeId x = b.Parameter("x", {DType::kF32, {5, 1}});
                     const NodeId e = b.Unary(Op::kNeg, b.Broadcast(x, {5, 4}));
                     b.Output(b.Emit(Op::kSort, {e}, attrs));
                     b.Output(b.Emit(Op::kArgsort, {e}, attrs));
                   },
                   ties});
}

}  // namespace

std::vector<Case> Cases() {
  std::vector<Case> cases;
  const std::vector<Shape> shapes = {{}, {5}, {3, 4}, {2, 3, 4}, {0, 3}, {1, 1}};
  const DType floats[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16};
  // Every integer dtype: 8- and 16-bit ones wrap inside the C-style renderers' 32-bit values.
  const std::vector<DType> integers = {DType::kI8, DType::kI16, DType::kI32, DType::kI64,
                                       DType::kU8, DType::kU16, DType::kU32, DType::kU64};

  // ---- Leaves ----
  cases.push_back({"parameter", [](ir::Builder& b) {
                     b.Output(b.Parameter("x", {DType::kF32, {2, 3}}));
                   }});
  cases.push_back({"constant_dense", [](ir::Builder& b) {
                     const NodeId c = b.Constant(ir::TensorData::FromVector<double>(
                         DType::kF32, {2, 3}, std::vector<double>{1, -2, 3.5, 4, 5, 6}));
                     b.Output(b.Binary(Op::kMul, c, b.Parameter("x", {DType::kF32, {2, 3}})));
                   }});
  cases.push_back({"constant_splat_i64", [](ir::Builder& b) {
                     const NodeId c = b.Constant(ir::TensorData::FromVector<int64_t>(
                         DType::kI64, {2, 2}, std::vector<int64_t>{7, 7, 7, 7}));
                     b.Output(b.Binary(Op::kAdd, c, b.Parameter("x", {DType::kI64, {2, 2}})));
                   }});
  cases.push_back({"constant_output", [](ir::Builder& b) {
                     b.Output(b.Constant(ir::TensorData::FromVector<double>(
                         DType::kF16, {3}, std::vector<double>{0.1, 2, 3})));
                   }});
  for (auto [dtype, value] : std::vector<std::pair<DType, double>>{{DType::kF32, 0.1},
                                                                   {DType::kF16, 0.1},
                                                                   {DType::kBF16, 1e5},
                                                                   {DType::kI32, -7.9},
                                                                   {DType::kU8, -5},
                                                                   {DType::kBool, 0.5}}) {
    cases.push_back({Name("fill", dtype, {2, 3}), [dtype, value](ir::Builder& b) {
                       b.Output(b.Fill(value, {dtype, {2, 3}}));
                     }});
  }
  for (auto [dtype, shape, axis] :
       std::vector<std::tuple<DType, Shape, int64_t>>{{DType::kF32, {3, 4}, 1},
                                                      {DType::kI64, {3, 4}, 0},
                                                      {DType::kU8, {300}, 0},
                                                      {DType::kF16, {2050}, 0},
                                                      {DType::kI32, {2, 3, 4}, 1}}) {
    cases.push_back(
        {Name(absl::StrCat("iota_axis", axis), dtype, shape), [dtype, shape, axis](ir::Builder& b) {
           b.Output(b.Iota({dtype, shape}, axis));
         }});
  }
  for (DType dtype : floats) {
    for (uint64_t seed : {uint64_t{0}, uint64_t{42}, (uint64_t{1} << 63) + 5}) {
      for (Op op : {Op::kRandomUniform, Op::kRandomNormal}) {
        cases.push_back({absl::StrCat(Name(ir::OpName(op), dtype, {300}), "_seed", seed % 1000),
                         [dtype, seed, op](ir::Builder& b) {
                           const ir::TensorType type{dtype, {3, 100}};
                           b.Output(op == Op::kRandomUniform ? b.RandomUniform(type, seed)
                                                             : b.RandomNormal(type, seed));
                         }});
      }
    }
  }

  // ---- Unary ----
  const Op float_unary[] = {Op::kNeg,  Op::kAbs,   Op::kSign, Op::kExp,   Op::kLog,
                            Op::kSqrt, Op::kRsqrt, Op::kSin,  Op::kCos,   Op::kTanh,
                            Op::kErf,  Op::kFloor, Op::kCeil, Op::kRound, Op::kReciprocal};
  for (Op op : float_unary) {
    for (DType dtype : floats) {
      for (const Shape& shape : shapes) {
        cases.push_back({Name(ir::OpName(op), dtype, shape),
                         [op, dtype, shape](ir::Builder& b) {
                           b.Output(b.Unary(op, b.Parameter("x", {dtype, shape})));
                         },
                         InjectSpecials, ElementwiseTolerance(dtype)});
      }
    }
  }
  // floor, ceil and round of every edge value (each backend's rounding lowering, and lavapipe's,
  // which differs by host CPU: docs/vulkan.md).
  for (Op op : {Op::kFloor, Op::kCeil, Op::kRound}) {
    for (DType dtype : {DType::kF32, DType::kF64}) {
      const std::vector<double> edges = RoundingEdges(dtype);
      const Shape shape = {static_cast<int64_t>(edges.size())};
      cases.push_back({Name(absl::StrCat(ir::OpName(op), "_edges"), dtype, shape),
                       [op, dtype, shape](ir::Builder& b) {
                         b.Output(b.Unary(op, b.Parameter("x", {dtype, shape})));
                       },
                       [edges](std::vector<ir::TensorData>& args) {
                         for (size_t i = 0; i < edges.size(); ++i) {
                           args[0].SetDouble(static_cast<int64_t>(i), edges[i]);
                         }
                       }});
    }
  }
  for (Op op : {Op::kNeg, Op::kAbs, Op::kSign, Op::kNot}) {
    for (DType dtype : integers) {
      cases.push_back({Name(ir::OpName(op), dtype, {3, 4}), [op, dtype](ir::Builder& b) {
                         b.Output(b.Unary(op, b.Parameter("x", {dtype, {3, 4}})));
                       }});
    }
  }
  cases.push_back({"not_bool", [](ir::Builder& b) {
                     b.Output(b.Unary(Op::kNot, b.Parameter("x", {DType::kBool, {6}})));
                   }});

  // ---- Binary, compare, logical, select ----
  const Op float_binary[] = {Op::kAdd, Op::kSub, Op::kMul, Op::kDiv,
                             Op::kPow, Op::kMax, Op::kMin, Op::kMod};
  for (Op op : float_binary) {
    for (DType dtype : floats) {
      for (const Shape& shape : {Shape{}, Shape{3, 4}, Shape{0, 2}}) {
        cases.push_back({Name(ir::OpName(op), dtype, shape),
                         [op, dtype, shape](ir::Builder& b) {
                           b.Output(b.Binary(op, b.Parameter("x", {dtype, shape}),
                                             b.Parameter("y", {dtype, shape})));
                         },
                         InjectSpecials, ElementwiseTolerance(dtype)});
      }
    }
  }
  for (Op op : {Op::kAdd, Op::kSub, Op::kMul, Op::kDiv, Op::kMax, Op::kMin, Op::kMod}) {
    for (DType dtype : integers) {
      cases.push_back({Name(ir::OpName(op), dtype, {4, 5}), [op, dtype](ir::Builder& b) {
                         b.Output(b.Binary(op, b.Parameter("x", {dtype, {4, 5}}),
                                           b.Parameter("y", {dtype, {4, 5}})));
                       }});
    }
  }
  cases.push_back({"div_mod_i32_extremes", [](ir::Builder& b) {
                     const ir::TensorType t{DType::kI32, {4}};
                     const NodeId x = b.Constant(ir::TensorData::FromVector<int64_t>(
                         DType::kI32, {4},
                         std::vector<int64_t>{std::numeric_limits<int32_t>::min(), 7, -7, 5}));
                     const NodeId y = b.Constant(ir::TensorData::FromVector<int64_t>(
                         DType::kI32, {4}, std::vector<int64_t>{-1, -2, 2, 0}));
                     b.Output(b.Binary(Op::kDiv, x, y));
                     b.Output(b.Binary(Op::kMod, x, y));
                     b.Output(b.Binary(Op::kMul, x, y));
                     (void)t;
                   }});
  for (Op op : {Op::kEq, Op::kNe, Op::kLt, Op::kLe, Op::kGt, Op::kGe}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kI8, DType::kI32, DType::kU8, DType::kU16,
                        DType::kU64, DType::kBool}) {
      cases.push_back({Name(ir::OpName(op), dtype, {4, 6}),
                       [op, dtype](ir::Builder& b) {
                         b.Output(b.Binary(op, b.Parameter("x", {dtype, {4, 6}}),
                                           b.Parameter("y", {dtype, {4, 6}})));
                       },
                       [](std::vector<ir::TensorData>& args) {
                         SmallIntegers(args);
                         InjectSpecials(args);
                       }});
    }
  }
  for (Op op : {Op::kAnd, Op::kOr, Op::kXor}) {
    for (DType dtype : {DType::kBool, DType::kI32, DType::kU8, DType::kI64, DType::kI8, DType::kU16,
                        DType::kU32}) {
      cases.push_back({Name(ir::OpName(op), dtype, {3, 5}), [op, dtype](ir::Builder& b) {
                         b.Output(b.Binary(op, b.Parameter("x", {dtype, {3, 5}}),
                                           b.Parameter("y", {dtype, {3, 5}})));
                       }});
    }
  }
  for (DType dtype : {DType::kF32, DType::kI64, DType::kF16, DType::kBool}) {
    cases.push_back({Name("select", dtype, {2, 5}), [dtype](ir::Builder& b) {
                       b.Output(b.Select(b.Parameter("c", {DType::kBool, {2, 5}}),
                                         b.Parameter("x", {dtype, {2, 5}}),
                                         b.Parameter("y", {dtype, {2, 5}})));
                     }});
  }

  // ---- Cast: every pair, with values that round, saturate and are NaN ----
  const auto& all = ir::kAllDTypes;
  for (DType from : all) {
    for (DType to : all) {
      if (from == to) continue;
      cases.push_back({absl::StrCat("cast_", ir::DTypeName(from), "_to_", ir::DTypeName(to)),
                       [from, to](ir::Builder& b) {
                         b.Output(b.Cast(b.Parameter("x", {from, {12}}), to));
                       },
                       [](std::vector<ir::TensorData>& args) {
                         const double values[] = {std::nan(""), 1e10,  -1e10,   300.7, -0.5,
                                                  2.5,          65519, 1e5 + 1, -3.49, 0.1};
                         ir::TensorData& x = args[0];
                         for (int64_t i = 0; i < 10; ++i) {
                           if (ir::IsFloat(x.dtype())) x.SetDouble(i, values[i]);
                         }
                         if (x.dtype() == DType::kI64) x.SetInt64(0, (int64_t{1} << 53) + 1);
                         if (x.dtype() == DType::kI32) x.SetInt64(0, 2147483647);
                       }});
    }
  }

  // ---- Reductions ----
  for (Op op : {Op::kReduceSum, Op::kReduceProd, Op::kReduceMax, Op::kReduceMin}) {
    for (DType dtype : {DType::kF32, DType::kF64, DType::kF16, DType::kI32, DType::kU8, DType::kI8,
                        DType::kU16, DType::kU64}) {
      for (auto [shape, axes] :
           std::vector<std::pair<Shape, std::vector<int64_t>>>{{{2, 3, 4}, {}},
                                                               {{2, 3, 4}, {0}},
                                                               {{2, 3, 4}, {1}},
                                                               {{2, 3, 4}, {2}},
                                                               {{2, 3, 4}, {0, 2}},
                                                               {{2, 3, 4}, {0, 1, 2}},
                                                               {{7}, {0}},
                                                               {{}, {}},
                                                               {{3, 0}, {0}},
                                                               {{0, 3}, {0}}}) {
        const bool empty_axis = shape.size() == 2 && shape[axes.empty() ? 0 : axes[0]] == 0;
        if (empty_axis && (op == Op::kReduceMax || op == Op::kReduceMin)) continue;
        std::string axes_name = absl::StrJoin(axes, "");
        cases.push_back({Name(absl::StrCat(ir::OpName(op), "_axes", axes_name), dtype, shape),
                         [op, dtype, shape, axes](ir::Builder& b) {
                           b.Output(b.Reduce(op, b.Parameter("x", {dtype, shape}), axes));
                         },
                         op == Op::kReduceMax || op == Op::kReduceMin ? InjectSpecials : nullptr,
                         AccumulateTolerance(dtype)});
      }
    }
  }
  for (Op op : {Op::kArgMax, Op::kArgMin}) {
    for (DType dtype :
         {DType::kF32, DType::kF16, DType::kI32, DType::kU8, DType::kI16, DType::kU64}) {
      for (auto [shape, axis] : std::vector<std::pair<Shape, int64_t>>{
               {{2, 3, 4}, 0}, {{2, 3, 4}, 1}, {{2, 3, 4}, 2}, {{9}, 0}, {{0, 3}, 1}}) {
        cases.push_back({Name(absl::StrCat(ir::OpName(op), "_axis", axis), dtype, shape),
                         [op, dtype, shape, axis](ir::Builder& b) {
                           b.Output(b.ArgReduce(op, b.Parameter("x", {dtype, shape}), axis));
                         },
                         [](std::vector<ir::TensorData>& args) {
                           SmallIntegers(args);
                           InjectSpecials(args);
                         }});
      }
    }
  }

  // ---- Movement ----
  for (auto [from, to] : std::vector<std::pair<Shape, Shape>>{{{2, 3, 4}, {6, 4}},
                                                              {{4, 6}, {2, 2, 6}},
                                                              {{1, 6}, {6, 1}},
                                                              {{24}, {2, 3, 4}},
                                                              {{2, 3, 4}, {4, 3, 2}},
                                                              {{}, {1, 1}},
                                                              {{0, 3}, {3, 0}}}) {
    cases.push_back(
        {Name("reshape", DType::kF32, from) + "_to" + Name("", DType::kF32, to),
         [from, to](ir::Builder& b) {
           // exp makes the reshape part of a computing group, not a copy.
           b.Output(b.Reshape(b.Unary(Op::kExp, b.Parameter("x", {DType::kF32, from})), to));
           b.Output(b.Reshape(b.Parameter("y", {DType::kI32, from}), to));
         }});
  }
  for (auto [shape, perm] :
       std::vector<std::pair<Shape, std::vector<int64_t>>>{{{2, 3, 4}, {2, 0, 1}},
                                                           {{2, 3, 4}, {0, 2, 1}},
                                                           {{2, 3, 4}, {1, 0, 2}},
                                                           {{3, 1, 2}, {2, 1, 0}},
                                                           {{5, 6}, {1, 0}}}) {
    cases.push_back({Name("permute_" + absl::StrJoin(perm, ""), DType::kF32, shape),
                     [shape, perm](ir::Builder& b) {
                       b.Output(b.Permute(b.Parameter("x", {DType::kF32, shape}), perm));
                     }});
  }
  for (auto [from, to] : std::vector<std::pair<Shape, Shape>>{
           {{1, 3}, {4, 3}}, {{2, 1, 1}, {2, 3, 4}}, {{1, 1}, {1, 5}}, {{3, 1}, {3, 4}}}) {
    cases.push_back({Name("broadcast", DType::kF16, from) + "_to" + Name("", DType::kF16, to),
                     [from, to](ir::Builder& b) {
                       const NodeId big = b.Parameter("y", {DType::kF16, to});
                       b.Output(b.Binary(
                           Op::kAdd, b.Broadcast(b.Parameter("x", {DType::kF16, from}), to), big));
                     },
                     nullptr, ElementwiseTolerance(DType::kF16)});
  }
  struct SliceCase {
    Shape shape;
    std::vector<int64_t> starts, limits, strides;
  };
  for (const SliceCase& c : std::vector<SliceCase>{{{5, 6}, {1, 0}, {4, 6}, {1, 2}},
                                                   {{7}, {2}, {7}, {3}},
                                                   {{2, 3, 4}, {0, 1, 1}, {2, 3, 4}, {}},
                                                   {{4, 4}, {2, 1}, {2, 3}, {}},
                                                   {{3, 8}, {1, 0}, {3, 8}, {}}}) {
    cases.push_back(
        {Name("slice_" + absl::StrJoin(c.starts, ""), DType::kI32, c.shape), [c](ir::Builder& b) {
           b.Output(
               b.Slice(b.Parameter("x", {DType::kI32, c.shape}), c.starts, c.limits, c.strides));
         }});
  }
  struct PadCase {
    DType dtype;
    Shape shape;
    std::vector<int64_t> low, high;
    double value;
  };
  for (const PadCase& c : std::vector<PadCase>{{DType::kF32, {3, 4}, {1, 0}, {2, 1}, 1.5},
                                               {DType::kF32, {0, 2}, {1, 1}, {0, 1}, -2},
                                               {DType::kI32, {4}, {2}, {0}, -3.7},
                                               {DType::kF16, {2, 2}, {0, 1}, {1, 0}, 0.1},
                                               {DType::kBool, {2, 3}, {1, 1}, {1, 1}, 1}}) {
    cases.push_back(
        {Name("pad_" + absl::StrJoin(c.low, "") + absl::StrJoin(c.high, ""), c.dtype, c.shape),
         [c](ir::Builder& b) {
           b.Output(b.Pad(b.Parameter("x", {c.dtype, c.shape}), c.low, c.high, c.value));
         }});
  }
  struct ConcatCase {
    std::vector<Shape> shapes;
    int64_t axis;
  };
  for (const ConcatCase& c : std::vector<ConcatCase>{{{{2, 3}, {1, 3}, {0, 3}}, 0},
                                                     {{{2, 2}, {2, 3}}, 1},
                                                     {{{0, 2}, {3, 2}, {1, 2}}, 0},
                                                     {{{2, 1, 2}, {2, 2, 2}}, 1}}) {
    cases.push_back(
        {absl::StrCat("concat_axis", c.axis, "_", c.shapes.size(), "_",
                      c.shapes[0].empty() ? 0 : c.shapes[0][0]),
         [c](ir::Builder& b) {
           std::vector<NodeId> parts;
           for (size_t i = 0; i < c.shapes.size(); ++i) {
             parts.push_back(b.Parameter(absl::StrCat("x", i), {DType::kI64, c.shapes[i]}));
           }
           b.Output(b.Concat(parts, c.axis));
         }});
  }
  for (auto [shape, axes] : std::vector<std::pair<Shape, std::vector<int64_t>>>{
           {{3, 4}, {0}}, {{3, 4}, {1}}, {{3, 4}, {0, 1}}, {{2, 3, 4}, {1}}, {{2, 1, 4}, {1, 2}}}) {
    cases.push_back({Name("flip_" + absl::StrJoin(axes, ""), DType::kF64, shape),
                     [shape, axes](ir::Builder& b) {
                       b.Output(b.Flip(b.Parameter("x", {DType::kF64, shape}), axes));
                     }});
  }
  // Movement under a reduction over trailing axes sees multi-axis index segments (runs of axes
  // linearised together), which take the fast paths of slice, flip, permute and reshape.
  cases.push_back({"slice_under_reduce", [](ir::Builder& b) {
                     const NodeId x = b.Parameter("x", {DType::kF32, {4, 3, 5}});
                     const NodeId s = b.Slice(x, {0, 1, 0}, {4, 3, 5});
                     b.Output(b.ArgReduce(Op::kArgMax, b.Reshape(s, {4, 10}), 1));
                   }});
  cases.push_back({"flip_under_reduce", [](ir::Builder& b) {
                     const NodeId x = b.Parameter("x", {DType::kF32, {4, 3, 5}});
                     const NodeId f = b.Flip(x, {1, 2});
                     b.Output(b.ArgReduce(Op::kArgMax, b.Reshape(f, {4, 15}), 1));
                   }});
  cases.push_back({"permute_under_reduce", [](ir::Builder& b) {
                     const NodeId x = b.Parameter("x", {DType::kF32, {2, 3, 4}});
                     const NodeId p = b.Permute(x, {2, 0, 1});
                     b.Output(b.ArgReduce(Op::kArgMin, b.Reshape(p, {4, 6}), 1));
                   }});
  cases.push_back({"movement_chain", [](ir::Builder& b) {
                     // broadcast → reshape → permute → slice → flip → pad, then arithmetic.
                     const NodeId x = b.Parameter("x", {DType::kF32, {3, 1, 4}});
                     NodeId v = b.Broadcast(x, {3, 5, 4});
                     v = b.Reshape(v, {15, 4});
                     v = b.Permute(v, {1, 0});
                     v = b.Slice(v, {1, 2}, {4, 15}, {1, 3});
                     v = b.Flip(v, {0, 1});
                     v = b.Pad(v, {1, 0}, {0, 2}, -1);
                     b.Output(b.Binary(Op::kMul, v, v));
                   }});

  // ---- Indexing ----
  struct GatherCase {
    Shape x, index;
    int64_t axis;
    DType index_dtype;
  };
  for (const GatherCase& c : std::vector<GatherCase>{{{4, 5}, {3, 5}, 0, DType::kI64},
                                                     {{4, 5}, {4, 2}, 1, DType::kI32},
                                                     {{3, 4, 5}, {2, 4, 3}, 2, DType::kI64},
                                                     {{3, 4, 5}, {1, 2, 5}, 1, DType::kU8}}) {
    const auto bound = c.x[static_cast<size_t>(c.axis)];
    const auto fix = [bound](std::vector<ir::TensorData>& args) {
      std::mt19937_64 rng(11);
      for (int64_t i = 0; i < args[1].num_elements(); ++i) {
        args[1].SetInt64(i, std::uniform_int_distribution<int64_t>(0, bound - 1)(rng));
      }
    };
    cases.push_back({Name(absl::StrCat("gather_axis", c.axis), c.index_dtype, c.index),
                     [c](ir::Builder& b) {
                       const NodeId x = b.Parameter("x", {DType::kF32, c.x});
                       const NodeId i = b.Parameter("i", {c.index_dtype, c.index});
                       b.Output(b.Gather(b.Unary(Op::kSin, x), i, c.axis));
                     },
                     fix});
    for (DType dtype : {DType::kF32, DType::kI32, DType::kF16}) {
      cases.push_back({Name(absl::StrCat("scatter_add_axis", c.axis, "_", ir::DTypeName(dtype)),
                            c.index_dtype, c.index),
                       [c, dtype](ir::Builder& b) {
                         const NodeId x = b.Parameter("x", {dtype, c.x});
                         const NodeId i = b.Parameter("i", {c.index_dtype, c.index});
                         const NodeId src = b.Parameter("src", {dtype, c.index});
                         b.Output(b.ScatterAdd(x, i, src, c.axis));
                       },
                       fix, AccumulateTolerance(dtype)});
    }
  }

  // ---- Contractions and windows ----
  for (DType dtype : {DType::kF32, DType::kI32, DType::kF16}) {
    std::vector<std::pair<Shape, Shape>> shapes = {
        {{3, 4}, {4, 5}}, {{2, 3, 4}, {2, 4, 2}}, {{3, 0}, {0, 2}}, {{1, 7}, {7, 1}}};
    // Partial tiles of the GPU templates in every direction (128 x 128 tiles). Only f32: the
    // MLIR export's linalg.matmul accumulates 16-bit matmuls in their own type, which a K of 40
    // puts outside f16's tolerance (the CUDA tensor-core path's partial tiles are covered by
    // tests/cuda/emulation on the host).
    if (dtype == DType::kF32) shapes.push_back({{2, 130, 40}, {2, 40, 129}});
    for (auto [a, bs] : shapes) {
      // Sums of 40 products cancel to near zero: the absolute error grows with the length.
      test::Tolerance tolerance = AccumulateTolerance(dtype);
      if (a.back() > 8) tolerance.atol *= 10;
      cases.push_back({Name("matmul", dtype, a) + Name("", dtype, bs),
                       [dtype, a, bs](ir::Builder& b) {
                         const NodeId mm =
                             b.MatMul(b.Parameter("a", {dtype, a}), b.Parameter("b", {dtype, bs}));
                         b.Output(b.Binary(Op::kAdd, mm, mm));
                       },
                       nullptr, tolerance});
    }
  }
  // Integer contractions accumulating in i32 (the int8 inference kernels' op): u8 x i8 at full
  // range, i16 x u8, batched; every backend's generic lowering converts the operands exactly.
  // RandomTensor's u8 values stay small: every third one becomes 255 here.
  const auto full_range_u8 = [](std::vector<ir::TensorData>& args) {
    for (ir::TensorData& arg : args) {
      if (arg.dtype() != DType::kU8) continue;
      for (int64_t i = 0; i < arg.num_elements(); i += 3) arg.SetInt64(i, 255);
    }
  };
  for (auto [ad, bd] :
       {std::pair{DType::kU8, DType::kI8}, {DType::kI8, DType::kI8}, {DType::kI16, DType::kU8}}) {
    for (auto [a, bs] :
         std::vector<std::pair<Shape, Shape>>{{{3, 9}, {9, 5}}, {{2, 3, 4}, {2, 4, 2}}}) {
      cases.push_back({Name("matmul_accumulate_i32", ad, a) + Name("", bd, bs),
                       [ad, bd, a, bs](ir::Builder& b) {
                         b.Output(b.IntegerMatMul(b.Parameter("a", {ad, a}),
                                                  b.Parameter("b", {bd, bs}), DType::kI32));
                       },
                       full_range_u8});
    }
  }
  struct ConvCase {
    std::string name;
    Shape x, w;
    ir::Attrs attrs;
  };
  std::vector<ConvCase> convs;
  {
    ConvCase c{"conv1d_stride_pad", {2, 3, 7}, {4, 3, 3}, {}};
    c.attrs.strides = {2};
    c.attrs.low = {1};
    c.attrs.high = {1};
    convs.push_back(c);
    ConvCase g{"conv2d_groups_dilation", {1, 4, 5, 5}, {2, 2, 2, 2}, {}};
    g.attrs.groups = 2;
    g.attrs.dilation = {2, 1};
    convs.push_back(g);
    ConvCase t{"conv1d_input_dilation", {1, 1, 3}, {1, 1, 2}, {}};
    t.attrs.input_dilation = {2};
    t.attrs.low = {1};
    t.attrs.high = {1};
    convs.push_back(t);
    convs.push_back({"conv2d_plain", {2, 2, 4, 3}, {3, 2, 2, 2}, {}});
  }
  for (const ConvCase& c : convs) {
    for (DType dtype : {DType::kF32, DType::kI32}) {
      cases.push_back({absl::StrCat(c.name, "_", ir::DTypeName(dtype)),
                       [c, dtype](ir::Builder& b) {
                         b.Output(b.Conv(b.Parameter("x", {dtype, c.x}),
                                         b.Parameter("w", {dtype, c.w}), c.attrs));
                       },
                       nullptr, AccumulateTolerance(dtype)});
    }
    ir::Attrs integer = c.attrs;
    integer.accumulate = DType::kI32;
    cases.push_back({absl::StrCat(c.name, "_u8_i8_accumulate_i32"),
                     [c, integer](ir::Builder& b) {
                       b.Output(b.Conv(b.Parameter("x", {DType::kU8, c.x}),
                                       b.Parameter("w", {DType::kI8, c.w}), integer));
                     },
                     full_range_u8});
  }
  for (Op op : {Op::kWindowSum, Op::kWindowMax}) {
    for (DType dtype : {DType::kF32, DType::kI32, DType::kU8}) {
      ir::Attrs attrs;
      attrs.window = {2, 3};
      attrs.strides = {2, 1};
      attrs.low = {1, 0};
      attrs.high = {0, 1};
      attrs.dilation = {1, 2};
      cases.push_back({Name(ir::OpName(op), dtype, {4, 6}),
                       [op, dtype, attrs](ir::Builder& b) {
                         b.Output(b.WindowReduce(op, b.Parameter("x", {dtype, {4, 6}}), attrs));
                       },
                       InjectSpecials, AccumulateTolerance(dtype)});
      ir::Attrs plain;
      plain.window = {2, 2, 2};
      cases.push_back({Name(absl::StrCat(ir::OpName(op), "_plain"), dtype, {3, 3, 3}),
                       [op, dtype, plain](ir::Builder& b) {
                         b.Output(b.WindowReduce(op, b.Parameter("x", {dtype, {3, 3, 3}}), plain));
                       },
                       nullptr, AccumulateTolerance(dtype)});
    }
  }
  AppendSortCases(cases);
  return cases;
}

absl::StatusOr<CaseInstance> Instantiate(const Case& c) {
  ir::Builder b;
  c.build(b);
  absl::StatusOr<ir::Graph> graph = std::move(b).Build();
  if (!graph.ok()) return graph.status();
  CaseInstance instance{*std::move(graph), {}};
  std::mt19937_64 rng(std::hash<std::string>()(c.name));
  for (NodeId p : instance.graph.Parameters()) {
    instance.arguments.push_back(RandomTensor(instance.graph.node(p).type, rng));
  }
  if (c.fix_args) c.fix_args(instance.arguments);
  return instance;
}

std::string CaseTestName(const ::testing::TestParamInfo<Case>& info) {
  std::string name = info.param.name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return absl::StrCat(name, "_", info.index);
}

std::vector<ir::Op> OpsWithoutCase() {
  std::set<ir::Op> covered;
  for (const Case& c : Cases()) {
    ir::Builder b;
    c.build(b);
    for (const ir::Node& node : b.graph().nodes()) covered.insert(node.op);
  }
  std::vector<ir::Op> missing;
  for (ir::Op op : ir::kAllOps) {
    if (covered.count(op) == 0) missing.push_back(op);
  }
  return missing;
}

}  // namespace kiln::test
