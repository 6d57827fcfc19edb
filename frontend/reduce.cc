// Reductions: the ir keeps reduced axes with size 1; the frontend drops them unless keepdim.
// Sorting along one dim (sort, argsort, topk) lives here too: like argmax, it orders a fibre.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "frontend/amp/autocast.h"
#include "frontend/ops_internal.h"
#include "frontend/tensor_ops.h"

namespace kiln::detail {
namespace {

// reduce_* over `axes`, or x itself when there is nothing to reduce.
TensorRef ReduceOrSame(ir::Op op, const TensorRef& x, const std::vector<int64_t>& axes,
                       const char* name, const Loc& loc) {
  if (axes.empty()) return x;
  return ReduceKeep(op, x, axes, name, loc);
}

}  // namespace

const char* ReductionName(Reduction reduction) {
  switch (reduction) {
    case Reduction::kSum:
      return "sum";
    case Reduction::kMean:
      return "mean";
    case Reduction::kVar:
      return "var";
    case Reduction::kProd:
      return "prod";
    case Reduction::kMax:
      return "max";
    case Reduction::kMin:
      return "min";
    case Reduction::kArgMax:
      return "argmax";
    case Reduction::kArgMin:
      return "argmin";
    case Reduction::kAny:
      return "any";
    case Reduction::kAll:
      return "all";
  }
  return "?";
}

TensorRef Reduce(Reduction reduction, const TensorRef& x, std::vector<int64_t> dims, bool all,
                 bool keepdim, bool unbiased, const Loc& loc) {
  const char* name = ReductionName(reduction);
  const ir::TensorType& type = x->type;
  const int64_t rank = type.rank();
  std::vector<int64_t> axes;
  if (all) {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  } else {
    axes = NormalizeDims(dims, rank, name, type, loc);
  }
  std::sort(axes.begin(), axes.end());

  const bool is_float = ir::IsFloat(type.dtype);
  const bool is_bool = ir::IsBool(type.dtype);
  if ((reduction == Reduction::kMean || reduction == Reduction::kVar) && !is_float) {
    ThrowOpError(name, "needs a float tensor", {type}, loc);
  }
  if (is_bool && reduction != Reduction::kAny && reduction != Reduction::kAll) {
    ThrowOpError(name, "cannot reduce bool; convert with to_int() first", {type}, loc);
  }
  int64_t count = 1;
  for (int64_t a : axes) count *= type.shape[static_cast<size_t>(a)];

  TensorRef kept;  // the result with reduced axes kept as size 1
  switch (reduction) {
    case Reduction::kSum:
    case Reduction::kProd: {
      // Autocast sums and multiplies bf16/f16 in f32, as torch does.
      const TensorRef source = AutocastToF32(x, name, loc);
      const ir::DType acc = is_float ? source->type.dtype : ir::DType::kI64;
      kept = ReduceOrSame(reduction == Reduction::kSum ? ir::Op::kReduceSum : ir::Op::kReduceProd,
                          CastTo(source, acc, name, loc), axes, name, loc);
      break;
    }
    case Reduction::kMax:
    case Reduction::kMin:
      for (int64_t a : axes) {
        if (type.shape[static_cast<size_t>(a)] == 0) {
          ThrowOpError(name, absl::StrCat("dim ", a, " is empty and has no ", name), {type}, loc);
        }
      }
      kept = ReduceOrSame(reduction == Reduction::kMax ? ir::Op::kReduceMax : ir::Op::kReduceMin, x,
                          axes, name, loc);
      break;
    case Reduction::kMean: {
      const TensorRef sum = ReduceOrSame(ir::Op::kReduceSum, x, axes, name, loc);
      kept = Prim(ir::Op::kDiv,
                  {sum, FillOn(sum, sum->type, static_cast<double>(count), name, loc)}, name, loc);
      break;
    }
    case Reduction::kVar: {
      const TensorRef sum = ReduceOrSame(ir::Op::kReduceSum, x, axes, name, loc);
      const TensorRef mean =
          Prim(ir::Op::kDiv, {sum, FillOn(sum, sum->type, static_cast<double>(count), name, loc)},
               name, loc);
      const TensorRef diff =
          Prim(ir::Op::kSub, {x, BroadcastTo(mean, type.shape, name, loc)}, name, loc);
      const TensorRef squares = ReduceOrSame(
          ir::Op::kReduceSum, Prim(ir::Op::kMul, {diff, diff}, name, loc), axes, name, loc);
      const double divisor = static_cast<double>(count - (unbiased ? 1 : 0));
      kept = Prim(ir::Op::kDiv, {squares, FillOn(squares, squares->type, divisor, name, loc)}, name,
                  loc);
      break;
    }
    case Reduction::kArgMax:
    case Reduction::kArgMin: {
      const ir::Op op = reduction == Reduction::kArgMax ? ir::Op::kArgMax : ir::Op::kArgMin;
      if (type.num_elements() == 0) {
        ThrowOpError(name, "an empty tensor has no extreme", {type}, loc);
      }
      if (all) {
        // Over the flattened tensor; the index is into the flattened order.
        const TensorRef flat = ReshapeTo(x, {type.num_elements()}, name, loc);
        ir::Attrs attrs;
        attrs.axes = {0};
        const TensorRef index = Prim(op, {flat}, name, loc, std::move(attrs));
        return ReshapeTo(index, keepdim ? ir::Shape(static_cast<size_t>(rank), 1) : ir::Shape{},
                         name, loc);
      }
      if (axes.size() != 1) {
        ThrowOpError(name, absl::StrCat("needs exactly one dim, got ", DimsToString(dims)), {type},
                     loc);
      }
      ir::Attrs attrs;
      attrs.axes = axes;
      kept = Prim(op, {x}, name, loc, std::move(attrs));
      break;
    }
    case Reduction::kAny:
    case Reduction::kAll: {
      // Over 0/1 bytes: any = sum > 0 (0 when empty), all = product (1 when empty).
      const TensorRef truth = CastTo(x, ir::DType::kBool, name, loc);
      const TensorRef bytes = CastTo(truth, ir::DType::kU8, name, loc);
      const TensorRef reduced =
          ReduceOrSame(reduction == Reduction::kAny ? ir::Op::kReduceSum : ir::Op::kReduceProd,
                       bytes, axes, name, loc);
      kept = CastTo(reduced, ir::DType::kBool, name, loc);
      break;
    }
  }
  if (keepdim) return kept;
  ir::Shape shape;
  for (int64_t i = 0; i < rank; ++i) {
    if (!std::binary_search(axes.begin(), axes.end(), i)) {
      shape.push_back(type.shape[static_cast<size_t>(i)]);
    }
  }
  return ReshapeTo(kept, std::move(shape), name, loc);
}

namespace {

// The sort or argsort primitive along `axis` (ascending); descending sorts flip(x) and flips
// back: ties then keep their index order, and NaN (last ascending) comes first.
TensorRef SortPart(ir::Op op, const TensorRef& x, int64_t axis, bool descending, const char* name,
                   const Loc& loc) {
  ir::Attrs attrs;
  attrs.axes = {axis};
  if (!descending) return Prim(op, {x}, name, loc, std::move(attrs));
  const TensorRef sorted = Prim(op, {Flip(x, {axis}, loc)}, name, loc, std::move(attrs));
  const TensorRef back = Flip(sorted, {axis}, loc);
  if (op == ir::Op::kSort) return back;
  // Position k of flip(x) is position n - 1 - k of x.
  const double last = static_cast<double>(x->type.shape[static_cast<size_t>(axis)] - 1);
  return Prim(ir::Op::kSub, {FillOn(back, back->type, last, name, loc), back}, name, loc);
}

}  // namespace

std::pair<TensorRef, TensorRef> Sort(const TensorRef& x, int64_t dim, bool descending,
                                     const Loc& loc) {
  const int64_t axis = NormalizeDim(dim, x->type.rank(), "sort", x->type, loc);
  return {SortPart(ir::Op::kSort, x, axis, descending, "sort", loc),
          SortPart(ir::Op::kArgsort, x, axis, descending, "sort", loc)};
}

TensorRef Argsort(const TensorRef& x, int64_t dim, bool descending, const Loc& loc) {
  const int64_t axis = NormalizeDim(dim, x->type.rank(), "argsort", x->type, loc);
  return SortPart(ir::Op::kArgsort, x, axis, descending, "argsort", loc);
}

std::pair<TensorRef, TensorRef> TopK(const TensorRef& x, int64_t k, int64_t dim, bool largest,
                                     const Loc& loc) {
  const int64_t axis = NormalizeDim(dim, x->type.rank(), "topk", x->type, loc);
  const int64_t size = x->type.shape[static_cast<size_t>(axis)];
  if (k < 0 || k > size) {
    ThrowOpError("topk", absl::StrCat("k = ", k, " is outside [0, ", size, "] for dim ", axis),
                 {x->type}, loc);
  }
  const SliceRange first{0, k, 1};
  return {
      SliceDim(SortPart(ir::Op::kSort, x, axis, largest, "topk", loc), axis, first, "topk", loc),
      SliceDim(SortPart(ir::Op::kArgsort, x, axis, largest, "topk", loc), axis, first, "topk",
               loc)};
}

}  // namespace kiln::detail
