// Tensor<B, R, K>: kiln's lazy, rank-typed tensor.
//
//   B  the backend tag (kiln::Reference, kiln::Any, ...): where the tensor runs.
//   R  the rank, fixed at compile time (0 for a scalar). Rank misuse is a compile error: binary
//      ops need equal ranks (numpy broadcasting applies to sizes, not to rank), reshape<R2> names
//      the new rank, transpose needs R >= 2, reductions over one dim give rank R - 1.
//   K  the kind: kiln::Float (default), kiln::Int or kiln::Bool.
//
// Ops are lazy: each records a node, checked at once (a shape error throws kiln::Error at the
// line that made it, before anything runs). into_data(), to_vector(), item() and printing
// realize the tensor. docs/api.md lists every op.
//
// A Tensor is a cheap handle (one shared_ptr): copies share the same node. Tensors are values;
// ops never modify their operands (`x += y` rebinds x to a new node).
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <source_location>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "frontend/autograd.h"
#include "frontend/backend.h"
#include "frontend/engine.h"
#include "frontend/error.h"
#include "frontend/kind.h"
#include "frontend/tensor_ops.h"

namespace kiln {

template <class B, int R, class K = Float>
class Tensor;

/// Tag for reductions that keep the reduced dims with size 1: `x.sum(1, kiln::keepdim)`.
struct KeepDim {
  explicit constexpr KeepDim() = default;
};
inline constexpr KeepDim keepdim{};

/// A Python-style range of one dim for slice(): `{start, end, step}`; negative start/end count
/// from the end, out-of-range bounds clamp, step >= 1. `{}` is the whole dim.
using Range = detail::SliceRange;
/// "To the end" for Range and slice().
inline constexpr int64_t kEnd = INT64_MAX;

namespace detail {

/// Library access to the handle inside a Tensor (kiln::jit replaces a module's parameters in
/// place: frontend/jit.h).
struct TensorAccess {
  template <class T>
  static TensorRef& Ref(T& tensor) {
    return tensor.ref_;
  }
};

/// A reference plus the caller's source line. Operators cannot take a defaulted location
/// parameter, so one operand converts implicitly to Located, whose constructor's default
/// argument captures the line of the user's expression.
template <class T>
struct Located {
  Located(const T& value, Loc loc = Loc::current()) : value(value), loc(loc) {}  // NOLINT
  const T& value;
  Loc loc;
};

/// Scalars usable with tensors (not bool: `x + true` is almost always a mistake).
template <class S>
concept Arithmetic = std::is_arithmetic_v<S> && !std::is_same_v<S, bool>;

/// A scalar plus the caller's source line, for compound assignment (`x += 1`).
template <class K>
struct LocatedScalar {
  template <Arithmetic S>
  LocatedScalar(S s, Loc loc = Loc::current())  // NOLINT: implicit by design
      : value(static_cast<double>(s)), loc(loc) {
    static_assert(!std::is_same_v<K, Int> || std::is_integral_v<S>,
                  "kiln: an Int tensor takes integer scalars; convert with to_float() first");
  }
  double value;
  Loc loc;
};

/// std::initializer_list nested R deep: the argument type of from_data.
template <class T, int R>
struct NestedList {
  using type = std::initializer_list<typename NestedList<T, R - 1>::type>;
};
template <class T>
struct NestedList<T, 0> {
  using type = T;
};

/// Flattens a nested list row-major, recording its shape; a ragged list throws.
template <class T, int R>
void FlattenNested(const typename NestedList<T, R>::type& list, int depth, ir::Shape& shape,
                   bool& shape_known, std::vector<T>& out, const Loc& loc) {
  if constexpr (R == 0) {
    out.push_back(list);
  } else {
    const auto size = static_cast<int64_t>(list.size());
    if (!shape_known) {
      shape[static_cast<size_t>(depth)] = size;
      if (depth + 1 == static_cast<int>(shape.size())) shape_known = true;
    } else if (shape[static_cast<size_t>(depth)] != size) {
      ThrowOpError("from_data",
                   "ragged nested list: dim " + std::to_string(depth) + " has " +
                       std::to_string(size) + " entries here and " +
                       std::to_string(shape[static_cast<size_t>(depth)]) + " before",
                   {}, loc);
    }
    for (const auto& item : list) {
      FlattenNested<T, R - 1>(item, depth + 1, shape, shape_known, out, loc);
    }
    // An empty list fixes the sizes below it to 0.
    if (size == 0 && !shape_known) {
      for (size_t d = static_cast<size_t>(depth) + 1; d < shape.size(); ++d) shape[d] = 0;
      shape_known = true;
    }
  }
}

template <size_t N>
std::vector<int64_t> ToVector(const int64_t (&values)[N]) {
  return std::vector<int64_t>(values, values + N);
}
template <size_t N>
std::vector<int64_t> ToVector(const std::array<int64_t, N>& values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

}  // namespace detail

/// A list of N dims or sizes written as a braced list: `{2, 3}`. Its length is a compile-time
/// constant, so a list of the wrong length for the rank fails to compile.
template <size_t N>
using DimList = int64_t[N];

template <class B, int R, class K>
class Tensor {
  static_assert(R >= 0, "kiln: a tensor's rank R must be >= 0");
  static_assert(kIsKind<K>, "kiln: a tensor's kind K must be kiln::Float, kiln::Int or kiln::Bool");

  static constexpr bool kFloat = std::is_same_v<K, Float>;
  static constexpr bool kInt = std::is_same_v<K, Int>;
  static constexpr bool kBool = std::is_same_v<K, Bool>;
  static constexpr bool kNumeric = !kBool;
  /// Integer sums and products accumulate in i64, like torch.
  using SumKind = std::conditional_t<kBool, Int, K>;

 public:
  using Backend = B;
  using Kind = K;
  using Loc = std::source_location;
  /// Dims and sizes.
  using Shape = std::array<int64_t, R>;
  static constexpr int kRank = R;
  /// The result type of comparisons.
  using BoolTensor = Tensor<B, R, Bool>;

  /// Wraps a type-erased handle, checking its rank and kind (throws kiln::Error otherwise).
  explicit Tensor(detail::TensorRef ref, Loc loc = Loc::current()) : ref_(std::move(ref)) {
    detail::CheckHandle(ref_, R, K::kId, loc);
  }

  // ---- Creation ---------------------------------------------------------------------------------

  /// A tensor of `dims` filled with `value`; dtype defaults to the kind's (f32, i64, bool).
  template <size_t N>
  static Tensor full(const DimList<N>& dims, typename K::Element value, const Device& device,
                     std::optional<ir::DType> dtype = {}, Loc loc = Loc::current()) {
    static_assert(N == R, "kiln: the dims list must have R entries");
    return filled(detail::ToVector(dims), value, device, dtype, "full", loc);
  }
  static Tensor full(const Shape& dims, typename K::Element value, const Device& device,
                     std::optional<ir::DType> dtype = {}, Loc loc = Loc::current()) {
    return filled(detail::ToVector(dims), value, device, dtype, "full", loc);
  }
  template <size_t N>
  static Tensor zeros(const DimList<N>& dims, const Device& device,
                      std::optional<ir::DType> dtype = {}, Loc loc = Loc::current()) {
    static_assert(N == R, "kiln: the dims list must have R entries");
    return filled(detail::ToVector(dims), 0, device, dtype, "zeros", loc);
  }
  static Tensor zeros(const Shape& dims, const Device& device, std::optional<ir::DType> dtype = {},
                      Loc loc = Loc::current()) {
    return filled(detail::ToVector(dims), 0, device, dtype, "zeros", loc);
  }
  template <size_t N>
  static Tensor ones(const DimList<N>& dims, const Device& device,
                     std::optional<ir::DType> dtype = {}, Loc loc = Loc::current()) {
    static_assert(N == R, "kiln: the dims list must have R entries");
    return filled(detail::ToVector(dims), 1, device, dtype, "ones", loc);
  }
  static Tensor ones(const Shape& dims, const Device& device, std::optional<ir::DType> dtype = {},
                     Loc loc = Loc::current()) {
    return filled(detail::ToVector(dims), 1, device, dtype, "ones", loc);
  }

  /// From a nested initializer list whose depth is R: `Tensor<B, 2>::from_data({{1, 2}, {3, 4}},
  /// device)`. A scalar (R = 0) takes a plain value.
  static Tensor from_data(const typename detail::NestedList<typename K::Element, R>::type& values,
                          const Device& device, std::optional<ir::DType> dtype = {},
                          Loc loc = Loc::current()) {
    ir::Shape shape(R, 0);
    bool shape_known = R == 0;
    std::vector<typename K::Element> flat;
    detail::FlattenNested<typename K::Element, R>(values, 0, shape, shape_known, flat, loc);
    return from_flat(flat, std::move(shape), device, dtype_or_default(dtype, "from_data", loc),
                     "from_data", loc);
  }
  /// From row-major `values` and `dims` (values.size() must equal the element count).
  template <class T, size_t N>
  static Tensor from_vector(const std::vector<T>& values, const DimList<N>& dims,
                            const Device& device, std::optional<ir::DType> dtype = {},
                            Loc loc = Loc::current()) {
    static_assert(N == R, "kiln: the dims list must have R entries");
    return from_vector(values, detail::ToVector(dims), device, dtype, loc);
  }
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& dims, const Device& device,
                            std::optional<ir::DType> dtype = {}, Loc loc = Loc::current()) {
    return from_vector(values, detail::ToVector(dims), device, dtype, loc);
  }
  /// Takes an ir::TensorData (e.g. one into_data() returned); its rank must be R. Copies, or
  /// moves an rvalue. Inside a kiln::jit function, a tensor made from a host-array argument is
  /// that argument's input (frontend/jit.h).
  static Tensor from_tensor_data(const ir::TensorData& data, const Device& device,
                                 Loc loc = Loc::current()) {
    Tensor made(detail::FromTensorData(data, R, K::kId, B::kTraits, device, loc));
    detail::NoteHostSource(&data, made.ref_);
    return made;
  }
  static Tensor from_tensor_data(ir::TensorData&& data, const Device& device,
                                 Loc loc = Loc::current()) {
    const ir::TensorData* source = &data;
    Tensor made(detail::FromTensorData(std::move(data), R, K::kId, B::kTraits, device, loc));
    detail::NoteHostSource(source, made.ref_);
    return made;
  }

  /// [start, end) in steps of 1 or `step` (Int or Float, rank 1).
  static Tensor arange(typename K::Element start, typename K::Element end, const Device& device,
                       std::optional<ir::DType> dtype = {}, Loc loc = Loc::current()) {
    return arange_step(start, end, typename K::Element{1}, device, dtype, loc);
  }
  static Tensor arange_step(typename K::Element start, typename K::Element end,
                            typename K::Element step, const Device& device,
                            std::optional<ir::DType> dtype = {}, Loc loc = Loc::current()) {
    static_assert(R == 1 && kNumeric, "kiln: arange makes a rank-1 Float or Int tensor");
    return Tensor(detail::Arange(static_cast<double>(start), static_cast<double>(end),
                                 static_cast<double>(step), dtype_or_default(dtype, "arange", loc),
                                 B::kTraits, device, loc));
  }
  /// `steps` evenly spaced values from start to end inclusive (Float, rank 1).
  static Tensor linspace(double start, double end, int64_t steps, const Device& device,
                         std::optional<ir::DType> dtype = {}, Loc loc = Loc::current()) {
    static_assert(R == 1 && kFloat, "kiln: linspace makes a rank-1 Float tensor");
    return Tensor(detail::Linspace(start, end, steps, dtype_or_default(dtype, "linspace", loc),
                                   B::kTraits, device, loc));
  }

  /// Uniform in [low, high) from kiln's seeded stream (see manual_seed).
  template <size_t N>
  static Tensor random_uniform(const DimList<N>& dims, double low, double high,
                               const Device& device, std::optional<ir::DType> dtype = {},
                               Loc loc = Loc::current()) {
    static_assert(N == R, "kiln: the dims list must have R entries");
    return random_uniform(shape_of(dims), low, high, device, dtype, loc);
  }
  static Tensor random_uniform(const Shape& dims, double low, double high, const Device& device,
                               std::optional<ir::DType> dtype = {}, Loc loc = Loc::current()) {
    static_assert(kFloat, "kiln: random tensors are Float; convert afterwards");
    return Tensor(detail::RandomUniform(detail::ToVector(dims),
                                        dtype_or_default(dtype, "random_uniform", loc), low, high,
                                        B::kTraits, device, loc));
  }
  /// Normal with `mean` and standard deviation `std` from kiln's seeded stream.
  template <size_t N>
  static Tensor random_normal(const DimList<N>& dims, double mean, double std, const Device& device,
                              std::optional<ir::DType> dtype = {}, Loc loc = Loc::current()) {
    static_assert(N == R, "kiln: the dims list must have R entries");
    return random_normal(shape_of(dims), mean, std, device, dtype, loc);
  }
  static Tensor random_normal(const Shape& dims, double mean, double std, const Device& device,
                              std::optional<ir::DType> dtype = {}, Loc loc = Loc::current()) {
    static_assert(kFloat, "kiln: random tensors are Float; convert afterwards");
    return Tensor(detail::RandomNormal(detail::ToVector(dims),
                                       dtype_or_default(dtype, "random_normal", loc), mean, std,
                                       B::kTraits, device, loc));
  }

  // ---- Properties (no realization) --------------------------------------------------------------

  Shape shape() const {
    Shape dims{};
    const ir::Shape& s = detail::TypeOf(ref_).shape;
    for (int i = 0; i < R; ++i) dims[static_cast<size_t>(i)] = s[static_cast<size_t>(i)];
    return dims;
  }
  /// Size of one dim (negative counts from the end).
  int64_t dim(int64_t d, Loc loc = Loc::current()) const {
    return detail::TypeOf(ref_)
        .shape[static_cast<size_t>(detail::NormalizeDim(d, R, "dim", detail::TypeOf(ref_), loc))];
  }
  int64_t num_elements() const { return detail::TypeOf(ref_).num_elements(); }
  ir::DType dtype() const { return detail::TypeOf(ref_).dtype; }
  const ir::TensorType& type() const { return detail::TypeOf(ref_); }
  Device device() const { return detail::DeviceOf(ref_); }
  static constexpr int rank() { return R; }
  /// The type-erased handle (for library code).
  const detail::TensorRef& ref() const { return ref_; }

  // ---- Realization ------------------------------------------------------------------------------

  /// Runs what is pending and returns the value.
  ir::TensorData into_data(Loc loc = Loc::current()) const { return detail::Data(ref_, loc); }
  /// The values, row-major, converted to T.
  template <class T = typename K::Native>
  std::vector<T> to_vector(Loc loc = Loc::current()) const {
    const ir::TensorData& data = detail::Data(ref_, loc);
    std::vector<T> out;
    out.reserve(static_cast<size_t>(data.num_elements()));
    for (int64_t i = 0; i < data.num_elements(); ++i) {
      if constexpr (std::is_floating_point_v<T>) {
        out.push_back(static_cast<T>(data.GetDouble(i)));
      } else {
        out.push_back(static_cast<T>(data.GetInt64(i)));
      }
    }
    return out;
  }
  /// The one value of a one-element tensor (double for Float, int64_t for Int, bool for Bool).
  typename K::Scalar item(Loc loc = Loc::current()) const {
    const ir::TensorData& data = detail::Data(ref_, loc);
    if (data.num_elements() != 1) {
      detail::ThrowOpError("item", "needs exactly one element", {type()}, loc);
    }
    if constexpr (kFloat) {
      return data.GetDouble(0);
    } else {
      return static_cast<typename K::Scalar>(data.GetInt64(0));
    }
  }
  /// Realizes now (e.g. at the end of a training step) and returns *this.
  const Tensor& realize(Loc loc = Loc::current()) const {
    detail::Realize(std::span<const detail::TensorRef>(&ref_, 1), loc);
    return *this;
  }
  /// This tensor's value on another device (of this backend).
  Tensor to(const Device& device, Loc loc = Loc::current()) const {
    return Tensor(detail::ToDevice(ref_, B::kTraits, device, loc));
  }

  // ---- Gradients (frontend/autograd.h) ----------------------------------------------------------

  /// Marks this tensor as a leaf that requires a gradient (a parameter) and returns it; copies
  /// share the mark. require_grad(false) clears it. Float tensors only.
  const Tensor& require_grad(bool require = true, Loc loc = Loc::current()) const {
    static_assert(kFloat, "kiln: only Float tensors can require gradients");
    detail::SetRequireGrad(ref_, require, loc);
    return *this;
  }
  /// True for a leaf marked with require_grad().
  bool requires_grad() const { return detail::RequiresGrad(ref_); }
  /// True when gradients flow to this tensor (it requires one, or was computed from one).
  bool tracks_grad() const { return detail::TracksGrad(ref_); }
  /// The same value, cut off from the gradient tape (torch.Tensor.detach).
  Tensor detach(Loc loc = Loc::current()) const { return Tensor(detail::Detach(ref_, loc)); }
  /// Reverse-mode gradients of this one-element tensor with respect to every tensor that requires
  /// a gradient and that it depends on. Lazy: the gradients are pending tensors.
  Gradients backward(Loc loc = Loc::current()) const {
    static_assert(kFloat, "kiln: backward needs a Float tensor");
    return detail::Backward(ref_, nullptr, loc);
  }
  /// The same for a tensor of any size, given the gradient of the output (`seed`, same shape).
  Gradients backward(const Tensor& seed, Loc loc = Loc::current()) const {
    static_assert(kFloat, "kiln: backward needs a Float tensor");
    return detail::Backward(ref_, seed.ref(), loc);
  }
  /// This tensor's gradient in `grads`, if backward() reached it.
  std::optional<Tensor> grad(const Gradients& grads) const {
    detail::TensorRef g = grads.get(ref_);
    if (g == nullptr) return std::nullopt;
    return Tensor(std::move(g));
  }

  // ---- Kind and dtype ---------------------------------------------------------------------------

  /// Another dtype of the same kind (f32 -> f16, i64 -> i32, ...).
  Tensor cast(ir::DType dtype, Loc loc = Loc::current()) const {
    detail::CheckDTypeInKind(dtype, K::kId, "cast", loc);
    return Tensor(detail::Cast(ref_, dtype, loc));
  }
  /// Kind conversions: to float (ints convert exactly where the dtype allows, bool gives 0/1),
  /// to int (floats truncate toward zero and saturate, NaN gives 0), to bool (value != 0).
  Tensor<B, R, Float> to_float(ir::DType dtype = ir::DType::kF32, Loc loc = Loc::current()) const {
    detail::CheckDTypeInKind(dtype, KindId::kFloat, "to_float", loc);
    return Tensor<B, R, Float>(detail::Cast(ref_, dtype, loc));
  }
  Tensor<B, R, Int> to_int(ir::DType dtype = ir::DType::kI64, Loc loc = Loc::current()) const {
    detail::CheckDTypeInKind(dtype, KindId::kInt, "to_int", loc);
    return Tensor<B, R, Int>(detail::Cast(ref_, dtype, loc));
  }
  Tensor<B, R, Bool> to_bool(Loc loc = Loc::current()) const {
    return Tensor<B, R, Bool>(detail::Cast(ref_, ir::DType::kBool, loc));
  }

  // ---- Arithmetic (Float and Int; broadcasting sizes, promoting dtypes within the kind) ---------
  //
  // Int division is floor division and `%` / rem is the floored remainder (sign of the divisor,
  // like Python and torch.remainder); integer division by zero gives 0.

  template <int R2, class K2>
  Tensor add(const Tensor<B, R2, K2>& other, Loc loc = Loc::current()) const {
    return arithmetic(ir::Op::kAdd, other, "add", loc);
  }
  template <int R2, class K2>
  Tensor sub(const Tensor<B, R2, K2>& other, Loc loc = Loc::current()) const {
    return arithmetic(ir::Op::kSub, other, "sub", loc);
  }
  template <int R2, class K2>
  Tensor mul(const Tensor<B, R2, K2>& other, Loc loc = Loc::current()) const {
    return arithmetic(ir::Op::kMul, other, "mul", loc);
  }
  template <int R2, class K2>
  Tensor div(const Tensor<B, R2, K2>& other, Loc loc = Loc::current()) const {
    return arithmetic(ir::Op::kDiv, other, "div", loc);
  }
  template <int R2, class K2>
  Tensor rem(const Tensor<B, R2, K2>& other, Loc loc = Loc::current()) const {
    return arithmetic(ir::Op::kMod, other, "rem", loc);
  }
  /// Elementwise max / min (NaN propagates).
  template <int R2, class K2>
  Tensor maximum(const Tensor<B, R2, K2>& other, Loc loc = Loc::current()) const {
    return arithmetic(ir::Op::kMax, other, "maximum", loc);
  }
  template <int R2, class K2>
  Tensor minimum(const Tensor<B, R2, K2>& other, Loc loc = Loc::current()) const {
    return arithmetic(ir::Op::kMin, other, "minimum", loc);
  }
  /// x ** y (Float).
  template <int R2, class K2>
  Tensor pow(const Tensor<B, R2, K2>& other, Loc loc = Loc::current()) const {
    static_assert(kFloat, "kiln: pow needs Float tensors; convert with to_float()");
    return arithmetic(ir::Op::kPow, other, "pow", loc);
  }

  template <detail::Arithmetic S>
  Tensor add(S s, Loc loc = Loc::current()) const {
    return scalar_op(ir::Op::kAdd, s, false, "add", loc);
  }
  template <detail::Arithmetic S>
  Tensor sub(S s, Loc loc = Loc::current()) const {
    return scalar_op(ir::Op::kSub, s, false, "sub", loc);
  }
  template <detail::Arithmetic S>
  Tensor mul(S s, Loc loc = Loc::current()) const {
    return scalar_op(ir::Op::kMul, s, false, "mul", loc);
  }
  template <detail::Arithmetic S>
  Tensor div(S s, Loc loc = Loc::current()) const {
    return scalar_op(ir::Op::kDiv, s, false, "div", loc);
  }
  template <detail::Arithmetic S>
  Tensor rem(S s, Loc loc = Loc::current()) const {
    return scalar_op(ir::Op::kMod, s, false, "rem", loc);
  }
  template <detail::Arithmetic S>
  Tensor pow(S exponent, Loc loc = Loc::current()) const {
    static_assert(kFloat, "kiln: pow needs Float tensors; convert with to_float()");
    return scalar_op(ir::Op::kPow, exponent, false, "pow", loc);
  }
  /// scalar - x, scalar / x, scalar % x, scalar ** x.
  template <detail::Arithmetic S>
  Tensor rsub(S s, Loc loc = Loc::current()) const {
    return scalar_op(ir::Op::kSub, s, true, "sub", loc);
  }
  template <detail::Arithmetic S>
  Tensor rdiv(S s, Loc loc = Loc::current()) const {
    return scalar_op(ir::Op::kDiv, s, true, "div", loc);
  }
  template <detail::Arithmetic S>
  Tensor rrem(S s, Loc loc = Loc::current()) const {
    return scalar_op(ir::Op::kMod, s, true, "rem", loc);
  }
  template <detail::Arithmetic S>
  Tensor rpow(S base, Loc loc = Loc::current()) const {
    static_assert(kFloat, "kiln: pow needs Float tensors; convert with to_float()");
    return scalar_op(ir::Op::kPow, base, true, "pow", loc);
  }

  Tensor neg(Loc loc = Loc::current()) const { return numeric_unary(ir::Op::kNeg, loc); }
  Tensor abs(Loc loc = Loc::current()) const { return numeric_unary(ir::Op::kAbs, loc); }
  /// -1, 0 or 1 (NaN stays NaN).
  Tensor sign(Loc loc = Loc::current()) const { return numeric_unary(ir::Op::kSign, loc); }
  Tensor square(Loc loc = Loc::current()) const {
    static_assert(kNumeric, "kiln: square needs a Float or Int tensor");
    return Tensor(detail::Square(ref_, loc));
  }
  /// Clamps into [low, high] (either as a scalar of the tensor's kind).
  Tensor clamp(typename K::Element low, typename K::Element high, Loc loc = Loc::current()) const {
    static_assert(kNumeric, "kiln: clamp needs a Float or Int tensor");
    return Tensor(
        detail::Clamp(ref_, static_cast<double>(low), static_cast<double>(high), "clamp", loc));
  }
  Tensor clamp_min(typename K::Element low, Loc loc = Loc::current()) const {
    static_assert(kNumeric, "kiln: clamp_min needs a Float or Int tensor");
    return Tensor(detail::Clamp(ref_, static_cast<double>(low), std::nullopt, "clamp_min", loc));
  }
  Tensor clamp_max(typename K::Element high, Loc loc = Loc::current()) const {
    static_assert(kNumeric, "kiln: clamp_max needs a Float or Int tensor");
    return Tensor(detail::Clamp(ref_, std::nullopt, static_cast<double>(high), "clamp_max", loc));
  }

  // ---- Float math -------------------------------------------------------------------------------

  Tensor exp(Loc loc = Loc::current()) const { return float_unary(ir::Op::kExp, loc); }
  Tensor log(Loc loc = Loc::current()) const { return float_unary(ir::Op::kLog, loc); }
  Tensor sqrt(Loc loc = Loc::current()) const { return float_unary(ir::Op::kSqrt, loc); }
  Tensor rsqrt(Loc loc = Loc::current()) const { return float_unary(ir::Op::kRsqrt, loc); }
  Tensor sin(Loc loc = Loc::current()) const { return float_unary(ir::Op::kSin, loc); }
  Tensor cos(Loc loc = Loc::current()) const { return float_unary(ir::Op::kCos, loc); }
  Tensor tanh(Loc loc = Loc::current()) const { return float_unary(ir::Op::kTanh, loc); }
  Tensor erf(Loc loc = Loc::current()) const { return float_unary(ir::Op::kErf, loc); }
  Tensor floor(Loc loc = Loc::current()) const { return float_unary(ir::Op::kFloor, loc); }
  Tensor ceil(Loc loc = Loc::current()) const { return float_unary(ir::Op::kCeil, loc); }
  /// Round half to even.
  Tensor round(Loc loc = Loc::current()) const { return float_unary(ir::Op::kRound, loc); }
  Tensor reciprocal(Loc loc = Loc::current()) const {
    return float_unary(ir::Op::kReciprocal, loc);
  }

  // ---- Comparisons (-> Bool) --------------------------------------------------------------------
  //
  // Named eq/ne rather than operator== / !=: `a == b` on tensors would read as a bool, so it does
  // not compile. <, <=, >, >= are operators.

  template <int R2, class K2>
  Tensor<B, R, Bool> eq(const Tensor<B, R2, K2>& other, Loc loc = Loc::current()) const {
    return compare(ir::Op::kEq, other, "eq", loc);
  }
  template <int R2, class K2>
  Tensor<B, R, Bool> ne(const Tensor<B, R2, K2>& other, Loc loc = Loc::current()) const {
    return compare(ir::Op::kNe, other, "ne", loc);
  }
  template <int R2, class K2>
  Tensor<B, R, Bool> lt(const Tensor<B, R2, K2>& other, Loc loc = Loc::current()) const {
    return compare(ir::Op::kLt, other, "lt", loc);
  }
  template <int R2, class K2>
  Tensor<B, R, Bool> le(const Tensor<B, R2, K2>& other, Loc loc = Loc::current()) const {
    return compare(ir::Op::kLe, other, "le", loc);
  }
  template <int R2, class K2>
  Tensor<B, R, Bool> gt(const Tensor<B, R2, K2>& other, Loc loc = Loc::current()) const {
    return compare(ir::Op::kGt, other, "gt", loc);
  }
  template <int R2, class K2>
  Tensor<B, R, Bool> ge(const Tensor<B, R2, K2>& other, Loc loc = Loc::current()) const {
    return compare(ir::Op::kGe, other, "ge", loc);
  }
  template <detail::Arithmetic S>
  Tensor<B, R, Bool> eq(S s, Loc loc = Loc::current()) const {
    return compare_scalar(ir::Op::kEq, s, false, "eq", loc);
  }
  template <detail::Arithmetic S>
  Tensor<B, R, Bool> ne(S s, Loc loc = Loc::current()) const {
    return compare_scalar(ir::Op::kNe, s, false, "ne", loc);
  }
  template <detail::Arithmetic S>
  Tensor<B, R, Bool> lt(S s, Loc loc = Loc::current()) const {
    return compare_scalar(ir::Op::kLt, s, false, "lt", loc);
  }
  template <detail::Arithmetic S>
  Tensor<B, R, Bool> le(S s, Loc loc = Loc::current()) const {
    return compare_scalar(ir::Op::kLe, s, false, "le", loc);
  }
  template <detail::Arithmetic S>
  Tensor<B, R, Bool> gt(S s, Loc loc = Loc::current()) const {
    return compare_scalar(ir::Op::kGt, s, false, "gt", loc);
  }
  template <detail::Arithmetic S>
  Tensor<B, R, Bool> ge(S s, Loc loc = Loc::current()) const {
    return compare_scalar(ir::Op::kGe, s, false, "ge", loc);
  }

  // ---- Logical (Bool) and bitwise (Int) ---------------------------------------------------------

  template <int R2, class K2>
  Tensor logical_and(const Tensor<B, R2, K2>& other, Loc loc = Loc::current()) const {
    return logical(ir::Op::kAnd, other, "logical_and", loc);
  }
  template <int R2, class K2>
  Tensor logical_or(const Tensor<B, R2, K2>& other, Loc loc = Loc::current()) const {
    return logical(ir::Op::kOr, other, "logical_or", loc);
  }
  template <int R2, class K2>
  Tensor logical_xor(const Tensor<B, R2, K2>& other, Loc loc = Loc::current()) const {
    return logical(ir::Op::kXor, other, "logical_xor", loc);
  }
  /// Logical not on Bool, bitwise not on Int.
  Tensor logical_not(Loc loc = Loc::current()) const {
    static_assert(!kFloat, "kiln: not needs a Bool or Int tensor");
    return Tensor(detail::Unary(ir::Op::kNot, ref_, loc));
  }

  // ---- Selection --------------------------------------------------------------------------------

  /// value where `mask` is true, this tensor elsewhere (mask broadcasts).
  template <int R2>
  Tensor mask_fill(const Tensor<B, R2, Bool>& mask, typename K::Element value,
                   Loc loc = Loc::current()) const {
    static_assert(R2 == R, "kiln: mask_fill needs a mask of the tensor's rank");
    return Tensor(detail::Where(
        mask.ref(), detail::FullLike(ref_, static_cast<double>(value), {}, "mask_fill", loc), ref_,
        "mask_fill", loc));
  }

  // ---- Reductions -------------------------------------------------------------------------------
  //
  // x.sum() -> rank 0; x.sum(dim) -> rank R - 1; x.sum(dim, kiln::keepdim) -> rank R;
  // x.sum_dims({d1, d2}) -> rank R - 2; x.sum_dims({d1, d2}, kiln::keepdim) -> rank R.
  // The same for mean, var, prod, max, min, any, all; argmax/argmin take one dim or none.

#define KILN_REDUCTION(name, reduction, OutKind, requirement, message)                           \
  Tensor<B, 0, OutKind> name(Loc loc = Loc::current()) const {                                   \
    static_assert(requirement, message);                                                         \
    return reduce<0, OutKind>(detail::Reduction::reduction, {}, true, false, true, loc);         \
  }                                                                                              \
  Tensor<B, R - 1, OutKind> name(int64_t dim, Loc loc = Loc::current()) const {                  \
    static_assert(requirement, message);                                                         \
    static_assert(R >= 1, "kiln: a reduction over a dim needs rank >= 1");                       \
    return reduce<R - 1, OutKind>(detail::Reduction::reduction, {dim}, false, false, true, loc); \
  }                                                                                              \
  Tensor<B, R, OutKind> name(int64_t dim, KeepDim, Loc loc = Loc::current()) const {             \
    static_assert(requirement, message);                                                         \
    return reduce<R, OutKind>(detail::Reduction::reduction, {dim}, false, true, true, loc);      \
  }                                                                                              \
  template <size_t N>                                                                            \
  Tensor<B, R - static_cast<int>(N), OutKind> name##_dims(const DimList<N>& dims,                \
                                                          Loc loc = Loc::current()) const {      \
    static_assert(requirement, message);                                                         \
    static_assert(static_cast<int>(N) <= R, "kiln: more reduced dims than the rank");            \
    return reduce<R - static_cast<int>(N), OutKind>(                                             \
        detail::Reduction::reduction, detail::ToVector(dims), false, false, true, loc);          \
  }                                                                                              \
  template <size_t N>                                                                            \
  Tensor<B, R, OutKind> name##_dims(const DimList<N>& dims, KeepDim, Loc loc = Loc::current())   \
      const {                                                                                    \
    static_assert(requirement, message);                                                         \
    return reduce<R, OutKind>(detail::Reduction::reduction, detail::ToVector(dims), false, true, \
                              true, loc);                                                        \
  }

  KILN_REDUCTION(sum, kSum, SumKind, kNumeric, "kiln: sum needs a Float or Int tensor")
  KILN_REDUCTION(mean, kMean, Float, kFloat, "kiln: mean needs a Float tensor")
  KILN_REDUCTION(prod, kProd, SumKind, kNumeric, "kiln: prod needs a Float or Int tensor")
  KILN_REDUCTION(max, kMax, K, kNumeric, "kiln: max needs a Float or Int tensor")
  KILN_REDUCTION(min, kMin, K, kNumeric, "kiln: min needs a Float or Int tensor")
  KILN_REDUCTION(any, kAny, Bool, true, "")
  KILN_REDUCTION(all, kAll, Bool, true, "")
#undef KILN_REDUCTION

  /// Variance, unbiased (divides by n - 1) unless `unbiased` is false.
  Tensor<B, 0, Float> var(Loc loc = Loc::current()) const { return var(true, loc); }
  Tensor<B, 0, Float> var(std::same_as<bool> auto unbiased, Loc loc = Loc::current()) const {
    return reduce<0, Float>(detail::Reduction::kVar, {}, true, false, unbiased, loc);
  }
  Tensor<B, R - 1, Float> var(int64_t dim, bool unbiased = true, Loc loc = Loc::current()) const {
    static_assert(R >= 1, "kiln: a reduction over a dim needs rank >= 1");
    return reduce<R - 1, Float>(detail::Reduction::kVar, {dim}, false, false, unbiased, loc);
  }
  Tensor<B, R, Float> var(int64_t dim, KeepDim, bool unbiased = true,
                          Loc loc = Loc::current()) const {
    return reduce<R, Float>(detail::Reduction::kVar, {dim}, false, true, unbiased, loc);
  }
  template <size_t N>
  Tensor<B, R - static_cast<int>(N), Float> var_dims(const DimList<N>& dims, bool unbiased = true,
                                                     Loc loc = Loc::current()) const {
    static_assert(static_cast<int>(N) <= R, "kiln: more reduced dims than the rank");
    return reduce<R - static_cast<int>(N), Float>(detail::Reduction::kVar, detail::ToVector(dims),
                                                  false, false, unbiased, loc);
  }
  template <size_t N>
  Tensor<B, R, Float> var_dims(const DimList<N>& dims, KeepDim, bool unbiased = true,
                               Loc loc = Loc::current()) const {
    return reduce<R, Float>(detail::Reduction::kVar, detail::ToVector(dims), false, true, unbiased,
                            loc);
  }

  /// Index of the first maximum / minimum: over the flattened tensor, or along one dim.
  Tensor<B, 0, Int> argmax(Loc loc = Loc::current()) const {
    return reduce<0, Int>(detail::Reduction::kArgMax, {}, true, false, true, loc);
  }
  Tensor<B, R - 1, Int> argmax(int64_t dim, Loc loc = Loc::current()) const {
    static_assert(R >= 1, "kiln: a reduction over a dim needs rank >= 1");
    return reduce<R - 1, Int>(detail::Reduction::kArgMax, {dim}, false, false, true, loc);
  }
  Tensor<B, R, Int> argmax(int64_t dim, KeepDim, Loc loc = Loc::current()) const {
    return reduce<R, Int>(detail::Reduction::kArgMax, {dim}, false, true, true, loc);
  }
  Tensor<B, 0, Int> argmin(Loc loc = Loc::current()) const {
    return reduce<0, Int>(detail::Reduction::kArgMin, {}, true, false, true, loc);
  }
  Tensor<B, R - 1, Int> argmin(int64_t dim, Loc loc = Loc::current()) const {
    static_assert(R >= 1, "kiln: a reduction over a dim needs rank >= 1");
    return reduce<R - 1, Int>(detail::Reduction::kArgMin, {dim}, false, false, true, loc);
  }
  Tensor<B, R, Int> argmin(int64_t dim, KeepDim, Loc loc = Loc::current()) const {
    return reduce<R, Int>(detail::Reduction::kArgMin, {dim}, false, true, true, loc);
  }

  // ---- Sorting ----------------------------------------------------------------------------------
  //
  // torch.sort / argsort / topk along one dim (default the last). Stable: equal values keep
  // their order; NaN counts as larger than every number (last ascending, first descending).
  // Indices are Int (i64). The values' gradient scatters back to the positions they came from.

  /// {values, indices}: auto [values, indices] = x.sort(1, /*descending=*/true);
  std::pair<Tensor, Tensor<B, R, Int>> sort(int64_t dim = -1, bool descending = false,
                                            Loc loc = Loc::current()) const {
    static_assert(R >= 1, "kiln: sort needs rank >= 1");
    auto [values, indices] = detail::Sort(ref_, dim, descending, loc);
    return {Tensor(std::move(values)), Tensor<B, R, Int>(std::move(indices))};
  }
  /// The indices of sort(dim, descending).
  Tensor<B, R, Int> argsort(int64_t dim = -1, bool descending = false,
                            Loc loc = Loc::current()) const {
    static_assert(R >= 1, "kiln: argsort needs rank >= 1");
    return Tensor<B, R, Int>(detail::Argsort(ref_, dim, descending, loc));
  }
  /// {values, indices} of the k largest (smallest unless `largest`) along dim, in sorted order
  /// (also when `sorted` is false, which torch leaves unspecified). k <= the dim's size.
  std::pair<Tensor, Tensor<B, R, Int>> topk(int64_t k, int64_t dim = -1, bool largest = true,
                                            bool sorted = true, Loc loc = Loc::current()) const {
    static_assert(R >= 1, "kiln: topk needs rank >= 1");
    (void)sorted;
    auto [values, indices] = detail::TopK(ref_, k, dim, largest, loc);
    return {Tensor(std::move(values)), Tensor<B, R, Int>(std::move(indices))};
  }

  // ---- Movement ---------------------------------------------------------------------------------

  /// A new shape of rank R2 with the same element count; one size may be -1 (inferred).
  template <int R2, size_t N>
  Tensor<B, R2, K> reshape(const DimList<N>& dims, Loc loc = Loc::current()) const {
    static_assert(static_cast<int>(N) == R2,
                  "kiln: reshape<R2> needs exactly R2 sizes in its list");
    return Tensor<B, R2, K>(detail::Reshape(ref_, detail::ToVector(dims), loc));
  }
  template <int R2>
  Tensor<B, R2, K> reshape(const std::array<int64_t, R2>& dims, Loc loc = Loc::current()) const {
    return Tensor<B, R2, K>(detail::Reshape(ref_, detail::ToVector(dims), loc));
  }
  /// Rank 0 -> rank 0 reshape of the only element, for generic code: reshape<0>().
  template <int R2>
  Tensor<B, R2, K> reshape(Loc loc = Loc::current()) const {
    static_assert(R2 == 0, "kiln: reshape<R2> needs a list of R2 sizes");
    return Tensor<B, 0, K>(detail::Reshape(ref_, {}, loc));
  }
  /// All elements in one dim.
  Tensor<B, 1, K> flatten(Loc loc = Loc::current()) const {
    return Tensor<B, 1, K>(detail::Reshape(ref_, {-1}, loc));
  }
  /// Swaps the last two dims.
  Tensor transpose(Loc loc = Loc::current()) const {
    static_assert(R >= 2, "kiln: transpose needs rank >= 2 (it swaps the last two dims)");
    return Tensor(detail::SwapDims(ref_, -2, -1, "transpose", loc));
  }
  Tensor swap_dims(int64_t a, int64_t b, Loc loc = Loc::current()) const {
    return Tensor(detail::SwapDims(ref_, a, b, "swap_dims", loc));
  }
  /// Output dim i is input dim axes[i].
  template <size_t N>
  Tensor permute(const DimList<N>& axes, Loc loc = Loc::current()) const {
    static_assert(static_cast<int>(N) == R, "kiln: permute needs one entry per dim");
    return Tensor(detail::Permute(ref_, detail::ToVector(axes), loc));
  }
  /// Inserts a size-1 dim at D (in [-(R+1), R]; -1 appends).
  template <int D>
  Tensor<B, R + 1, K> unsqueeze(Loc loc = Loc::current()) const {
    static_assert(D >= -(R + 1) && D <= R, "kiln: unsqueeze<D> needs D in [-(R+1), R]");
    return Tensor<B, R + 1, K>(detail::Unsqueeze(ref_, D, loc));
  }
  Tensor<B, R + 1, K> unsqueeze_dim(int64_t dim, Loc loc = Loc::current()) const {
    return Tensor<B, R + 1, K>(detail::Unsqueeze(ref_, dim, loc));
  }
  /// Removes dim D, which must have size 1 (checked when recorded).
  template <int D>
  Tensor<B, R - 1, K> squeeze(Loc loc = Loc::current()) const {
    static_assert(R >= 1, "kiln: squeeze needs rank >= 1");
    static_assert(D >= -R && D < R, "kiln: squeeze<D> needs D in [-R, R)");
    return Tensor<B, R - 1, K>(detail::Squeeze(ref_, D, loc));
  }
  Tensor<B, R - 1, K> squeeze_dim(int64_t dim, Loc loc = Loc::current()) const {
    static_assert(R >= 1, "kiln: squeeze needs rank >= 1");
    return Tensor<B, R - 1, K>(detail::Squeeze(ref_, dim, loc));
  }
  /// torch.expand: size-1 dims grow to the given size, -1 keeps a size; a larger R2 adds
  /// leading dims.
  template <int R2 = R, size_t N>
  Tensor<B, R2, K> expand(const DimList<N>& dims, Loc loc = Loc::current()) const {
    static_assert(static_cast<int>(N) == R2, "kiln: expand<R2> needs R2 sizes");
    static_assert(R2 >= R, "kiln: expand cannot lower the rank");
    return Tensor<B, R2, K>(detail::Expand(ref_, detail::ToVector(dims), loc));
  }
  /// x[start:end:step] along one dim, Python rules (negative counts from the end, bounds clamp).
  Tensor slice(int64_t dim, int64_t start, int64_t end = kEnd, int64_t step = 1,
               Loc loc = Loc::current()) const {
    return Tensor(detail::SliceDim(ref_, dim, Range{start, end, step}, "slice", loc));
  }
  /// One Range per dim: `x.slice({{0, 2}, {}, {1, kEnd, 2}})`.
  template <size_t N>
  Tensor slice(const Range (&ranges)[N], Loc loc = Loc::current()) const {
    static_assert(static_cast<int>(N) == R, "kiln: slice needs one Range per dim");
    return Tensor(detail::Slice(ref_, std::span<const Range>(ranges, N), "slice", loc));
  }
  /// `length` elements from `start` along `dim` (torch.narrow; must be in range).
  Tensor narrow(int64_t dim, int64_t start, int64_t length, Loc loc = Loc::current()) const {
    return Tensor(detail::Narrow(ref_, dim, start, length, loc));
  }
  /// Pieces of `size` along dim (the last may be smaller).
  std::vector<Tensor> split(int64_t size, int64_t dim, Loc loc = Loc::current()) const {
    return wrap_all(detail::Split(ref_, size, dim, loc));
  }
  /// At most `chunks` pieces of ceil(n / chunks) along dim (torch.chunk).
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim, Loc loc = Loc::current()) const {
    return wrap_all(detail::Chunk(ref_, chunks, dim, loc));
  }
  /// `{low, high}` padding per dim, filled with `value`.
  template <size_t N>
  Tensor pad(const std::pair<int64_t, int64_t> (&padding)[N], typename K::Element value = {},
             Loc loc = Loc::current()) const {
    static_assert(static_cast<int>(N) == R, "kiln: pad needs one {low, high} pair per dim");
    return Tensor(detail::Pad(ref_, std::span<const std::pair<int64_t, int64_t>>(padding, N),
                              static_cast<double>(value), loc));
  }
  /// Reverses the listed dims.
  template <size_t N>
  Tensor flip(const DimList<N>& dims, Loc loc = Loc::current()) const {
    return Tensor(detail::Flip(ref_, detail::ToVector(dims), loc));
  }
  /// torch.gather: an Int index of the same rank; out[i][j] = x[index[i][j]][j] for dim 0.
  template <int R2>
  Tensor gather(int64_t dim, const Tensor<B, R2, Int>& index, Loc loc = Loc::current()) const {
    static_assert(R2 == R, "kiln: gather needs an index of the tensor's rank");
    return Tensor(detail::Gather(ref_, dim, index.ref(), loc));
  }
  /// torch.index_select: the entries `index` (rank-1 Int) along dim.
  template <int R2>
  Tensor index_select(int64_t dim, const Tensor<B, R2, Int>& index,
                      Loc loc = Loc::current()) const {
    static_assert(R2 == 1, "kiln: index_select needs a rank-1 index");
    return Tensor(detail::IndexSelect(ref_, dim, index.ref(), loc));
  }
  /// Tiles the tensor `times[d]` times along each dim (torch.Tensor.repeat).
  template <size_t N>
  Tensor repeat(const DimList<N>& times, Loc loc = Loc::current()) const {
    static_assert(static_cast<int>(N) == R, "kiln: repeat needs one count per dim");
    return Tensor(detail::Repeat(ref_, detail::ToVector(times), loc));
  }

  // ---- Linear algebra ---------------------------------------------------------------------------

  /// torch.matmul: 1-d x 1-d is a dot product (rank 0), 2-d x 1-d a matrix-vector product,
  /// batched operands broadcast their batch dims.
  template <int R2>
  Tensor<B, detail::MatMulRank(R, R2), K> matmul(const Tensor<B, R2, K>& other,
                                                 Loc loc = Loc::current()) const {
    static_assert(R >= 1 && R2 >= 1, "kiln: matmul needs operands of rank >= 1");
    static_assert(kNumeric, "kiln: matmul needs Float or Int tensors");
    return Tensor<B, detail::MatMulRank(R, R2), K>(detail::MatMul(ref_, other.ref(), loc));
  }

  // ---- Operators --------------------------------------------------------------------------------
  //
  // One operand converts to detail::Located so the error line is the user's. Operands of
  // different rank or kind select the constrained template, whose static_assert explains.

#define KILN_BINARY_OPERATOR(OP, METHOD, RMETHOD, Out)                                             \
  friend Out operator OP(const Tensor& a, detail::Located<Tensor> b) {                             \
    return a.METHOD(b.value, b.loc);                                                               \
  }                                                                                                \
  template <detail::Arithmetic S>                                                                  \
  friend Out operator OP(detail::Located<Tensor> a, S s) {                                         \
    return a.value.METHOD(s, a.loc);                                                               \
  }                                                                                                \
  template <detail::Arithmetic S>                                                                  \
  friend Out operator OP(S s, detail::Located<Tensor> b) {                                         \
    return b.value.RMETHOD(s, b.loc);                                                              \
  }                                                                                                \
  template <int R2, class K2>                                                                      \
  requires(R2 != R || !std::is_same_v<K2, K>) friend Out operator OP(const Tensor& a,              \
                                                                     const Tensor<B, R2, K2>& b) { \
    return a.METHOD(b);                                                                            \
  }

  KILN_BINARY_OPERATOR(+, add, add, Tensor)
  KILN_BINARY_OPERATOR(-, sub, rsub, Tensor)
  KILN_BINARY_OPERATOR(*, mul, mul, Tensor)
  KILN_BINARY_OPERATOR(/, div, rdiv, Tensor)
  KILN_BINARY_OPERATOR(%, rem, rrem, Tensor)
  KILN_BINARY_OPERATOR(<, lt, gt, BoolTensor)
  KILN_BINARY_OPERATOR(<=, le, ge, BoolTensor)
  KILN_BINARY_OPERATOR(>, gt, lt, BoolTensor)
  KILN_BINARY_OPERATOR(>=, ge, le, BoolTensor)
#undef KILN_BINARY_OPERATOR

  /// Logical on Bool, bitwise on Int.
  friend Tensor operator&(const Tensor& a, detail::Located<Tensor> b) {
    return a.logical_and(b.value, b.loc);
  }
  friend Tensor operator|(const Tensor& a, detail::Located<Tensor> b) {
    return a.logical_or(b.value, b.loc);
  }
  friend Tensor operator^(const Tensor& a, detail::Located<Tensor> b) {
    return a.logical_xor(b.value, b.loc);
  }
  friend Tensor operator!(detail::Located<Tensor> a) { return a.value.logical_not(a.loc); }
  friend Tensor operator~(detail::Located<Tensor> a) { return a.value.logical_not(a.loc); }
  friend Tensor operator-(detail::Located<Tensor> a) { return a.value.neg(a.loc); }

  Tensor& operator+=(detail::Located<Tensor> other) { return *this = add(other.value, other.loc); }
  Tensor& operator-=(detail::Located<Tensor> other) { return *this = sub(other.value, other.loc); }
  Tensor& operator*=(detail::Located<Tensor> other) { return *this = mul(other.value, other.loc); }
  Tensor& operator/=(detail::Located<Tensor> other) { return *this = div(other.value, other.loc); }
  Tensor& operator+=(detail::LocatedScalar<K> s) {
    return *this = located_scalar_op(ir::Op::kAdd, s, "add");
  }
  Tensor& operator-=(detail::LocatedScalar<K> s) {
    return *this = located_scalar_op(ir::Op::kSub, s, "sub");
  }
  Tensor& operator*=(detail::LocatedScalar<K> s) {
    return *this = located_scalar_op(ir::Op::kMul, s, "mul");
  }
  Tensor& operator/=(detail::LocatedScalar<K> s) {
    return *this = located_scalar_op(ir::Op::kDiv, s, "div");
  }

  /// Realizes and prints values, shape, dtype and device.
  friend std::ostream& operator<<(std::ostream& os, const Tensor& t) {
    detail::Print(os, t.ref_);
    return os;
  }

 private:
  friend struct detail::TensorAccess;

  static Tensor filled(std::vector<int64_t> dims, double value, const Device& device,
                       std::optional<ir::DType> dtype, const char* op, const Loc& loc) {
    return Tensor(detail::Full(std::move(dims), dtype_or_default(dtype, op, loc), value, B::kTraits,
                               device, op, loc));
  }
  static ir::DType dtype_or_default(std::optional<ir::DType> dtype, const char* op,
                                    const Loc& loc) {
    if (!dtype) return K::kDefaultDType;
    detail::CheckDTypeInKind(*dtype, K::kId, op, loc);
    return *dtype;
  }
  template <size_t N>
  static Shape shape_of(const DimList<N>& dims) {
    Shape shape{};
    for (size_t i = 0; i < N; ++i) shape[i] = dims[i];
    return shape;
  }
  template <class T>
  static Tensor from_flat(const std::vector<T>& values, ir::Shape shape, const Device& device,
                          ir::DType dtype, const char* op, const Loc& loc) {
    if constexpr (std::is_floating_point_v<T>) {
      std::vector<double> doubles(values.begin(), values.end());
      return Tensor(
          detail::FromDoubles(doubles, std::move(shape), dtype, B::kTraits, device, op, loc));
    } else {
      std::vector<int64_t> ints(values.begin(), values.end());
      return Tensor(detail::FromInt64s(ints, std::move(shape), dtype, B::kTraits, device, op, loc));
    }
  }
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, ir::Shape shape, const Device& device,
                            std::optional<ir::DType> dtype, const Loc& loc) {
    return from_flat(values, std::move(shape), device, dtype_or_default(dtype, "from_vector", loc),
                     "from_vector", loc);
  }

  template <int R2, class K2>
  static constexpr void check_operand() {
    static_assert(R2 == R,
                  "kiln: binary ops need operands of equal rank (numpy broadcasting applies to "
                  "sizes, not rank); use unsqueeze<D>() or reshape<R>() first");
    static_assert(std::is_same_v<K2, K>,
                  "kiln: binary ops need operands of one kind (Float, Int or Bool); convert with "
                  "to_float(), to_int() or to_bool()");
  }
  template <int R2, class K2>
  Tensor arithmetic(ir::Op op, const Tensor<B, R2, K2>& other, const char* name,
                    const Loc& loc) const {
    check_operand<R2, K2>();
    static_assert(kNumeric,
                  "kiln: arithmetic needs Float or Int tensors; convert Bool with to_int() or "
                  "to_float()");
    return Tensor(detail::Binary(op, ref_, other.ref(), name, loc));
  }
  template <class S>
  static constexpr void check_scalar() {
    static_assert(kNumeric,
                  "kiln: arithmetic needs Float or Int tensors; convert Bool with to_int() or "
                  "to_float()");
    static_assert(!kInt || std::is_integral_v<S>,
                  "kiln: an Int tensor takes integer scalars; convert with to_float() first");
  }
  template <class S>
  Tensor scalar_op(ir::Op op, S s, bool scalar_first, const char* name, const Loc& loc) const {
    check_scalar<S>();
    return Tensor(detail::BinaryScalar(op, ref_, static_cast<double>(s), scalar_first, name, loc));
  }
  /// For compound assignment, whose LocatedScalar checked the scalar type already.
  Tensor located_scalar_op(ir::Op op, const detail::LocatedScalar<K>& s, const char* name) const {
    static_assert(kNumeric,
                  "kiln: arithmetic needs Float or Int tensors; convert Bool with to_int() or "
                  "to_float()");
    return Tensor(detail::BinaryScalar(op, ref_, s.value, false, name, s.loc));
  }
  template <int R2, class K2>
  Tensor<B, R, Bool> compare(ir::Op op, const Tensor<B, R2, K2>& other, const char* name,
                             const Loc& loc) const {
    check_operand<R2, K2>();
    return Tensor<B, R, Bool>(detail::Binary(op, ref_, other.ref(), name, loc));
  }
  template <class S>
  Tensor<B, R, Bool> compare_scalar(ir::Op op, S s, bool scalar_first, const char* name,
                                    const Loc& loc) const {
    check_scalar<S>();
    return Tensor<B, R, Bool>(
        detail::BinaryScalar(op, ref_, static_cast<double>(s), scalar_first, name, loc));
  }
  template <int R2, class K2>
  Tensor logical(ir::Op op, const Tensor<B, R2, K2>& other, const char* name,
                 const Loc& loc) const {
    check_operand<R2, K2>();
    static_assert(!kFloat, "kiln: logical/bitwise ops need Bool or Int tensors");
    return Tensor(detail::Binary(op, ref_, other.ref(), name, loc));
  }
  Tensor numeric_unary(ir::Op op, const Loc& loc) const {
    static_assert(kNumeric, "kiln: this op needs a Float or Int tensor");
    return Tensor(detail::Unary(op, ref_, loc));
  }
  Tensor float_unary(ir::Op op, const Loc& loc) const {
    static_assert(kFloat, "kiln: this math op needs a Float tensor; convert with to_float()");
    return Tensor(detail::Unary(op, ref_, loc));
  }
  template <int R2, class K2>
  Tensor<B, R2, K2> reduce(detail::Reduction reduction, std::vector<int64_t> dims, bool all,
                           bool keepdim, bool unbiased, const Loc& loc) const {
    return Tensor<B, R2, K2>(
        detail::Reduce(reduction, ref_, std::move(dims), all, keepdim, unbiased, loc));
  }
  static std::vector<Tensor> wrap_all(std::vector<detail::TensorRef> refs) {
    std::vector<Tensor> out;
    out.reserve(refs.size());
    for (auto& r : refs) out.push_back(Tensor(std::move(r)));
    return out;
  }

  detail::TensorRef ref_;
};

// ---- Free functions
// -------------------------------------------------------------------------------

/// cond ? a : b elementwise; the three broadcast together.
template <class B, int R, int R2, int R3, class K>
Tensor<B, R, K> where(const Tensor<B, R, Bool>& cond, const Tensor<B, R2, K>& a,
                      const Tensor<B, R3, K>& b,
                      std::source_location loc = std::source_location::current()) {
  static_assert(R == R2 && R == R3, "kiln: where needs operands of equal rank");
  return Tensor<B, R, K>(detail::Where(cond.ref(), a.ref(), b.ref(), "where", loc));
}
template <class B, int R, int R2, class K>
Tensor<B, R, K> where(const Tensor<B, R, Bool>& cond, const Tensor<B, R2, K>& a,
                      typename K::Element b,
                      std::source_location loc = std::source_location::current()) {
  static_assert(R == R2, "kiln: where needs operands of equal rank");
  return Tensor<B, R, K>(detail::Where(
      cond.ref(), a.ref(), detail::FullLike(a.ref(), static_cast<double>(b), {}, "where", loc),
      "where", loc));
}
template <class B, int R, int R2, class K>
Tensor<B, R, K> where(const Tensor<B, R, Bool>& cond, typename K::Element a,
                      const Tensor<B, R2, K>& b,
                      std::source_location loc = std::source_location::current()) {
  static_assert(R == R2, "kiln: where needs operands of equal rank");
  return Tensor<B, R, K>(
      detail::Where(cond.ref(), detail::FullLike(b.ref(), static_cast<double>(a), {}, "where", loc),
                    b.ref(), "where", loc));
}

/// Concatenates along an existing dim (all shapes equal except along dim).
template <class B, int R, class K>
Tensor<B, R, K> cat(const std::vector<Tensor<B, R, K>>& tensors, int64_t dim,
                    std::source_location loc = std::source_location::current()) {
  std::vector<detail::TensorRef> refs;
  refs.reserve(tensors.size());
  for (const auto& t : tensors) refs.push_back(t.ref());
  return Tensor<B, R, K>(detail::Cat(refs, dim, "cat", loc));
}

/// Stacks equal-shaped tensors along a new dim (in [-(R+1), R]).
template <class B, int R, class K>
Tensor<B, R + 1, K> stack(const std::vector<Tensor<B, R, K>>& tensors, int64_t dim,
                          std::source_location loc = std::source_location::current()) {
  std::vector<detail::TensorRef> refs;
  refs.reserve(tensors.size());
  for (const auto& t : tensors) refs.push_back(t.ref());
  return Tensor<B, R + 1, K>(detail::Stack(refs, dim, loc));
}

/// Tensors of the shape and device of `like`.
template <class B, int R, class K>
Tensor<B, R, K> zeros_like(const Tensor<B, R, K>& like,
                           std::source_location loc = std::source_location::current()) {
  return Tensor<B, R, K>(detail::FullLike(like.ref(), 0.0, {}, "zeros_like", loc));
}
template <class B, int R, class K>
Tensor<B, R, K> ones_like(const Tensor<B, R, K>& like,
                          std::source_location loc = std::source_location::current()) {
  return Tensor<B, R, K>(detail::FullLike(like.ref(), 1.0, {}, "ones_like", loc));
}
template <class B, int R, class K>
Tensor<B, R, K> full_like(const Tensor<B, R, K>& like, typename K::Element value,
                          std::source_location loc = std::source_location::current()) {
  return Tensor<B, R, K>(
      detail::FullLike(like.ref(), static_cast<double>(value), {}, "full_like", loc));
}

namespace detail {
/// realize()'s first tensor with the caller's line, which a parameter pack cannot default to: the
/// conversion to this type happens at the call, where its default argument is evaluated.
struct FirstToRealize {
  template <class T>
  FirstToRealize(const T& tensor, std::source_location loc = std::source_location::current())
      : ref(tensor.ref()), loc(loc) {}
  TensorRef ref;
  std::source_location loc;
};
}  // namespace detail

/// Realizes several tensors in one graph run (shared work is computed once).
template <class... Ts>
void realize(detail::FirstToRealize first, const Ts&... rest) {
  const detail::TensorRef refs[] = {first.ref, rest.ref()...};
  detail::Realize(refs, first.loc);
}

}  // namespace kiln
