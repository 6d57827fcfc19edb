// Movement ops: reshape, permute, expand, slice, cat/stack/split, pad, flip, gather, repeat.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "frontend/ops_internal.h"
#include "frontend/tensor_ops.h"

namespace kiln::detail {
namespace {

int64_t Size(const TensorRef& x, int64_t dim) { return x->type.shape[static_cast<size_t>(dim)]; }

// Python's rules for one bound of x[start:end]: negative counts from the end, then clamp.
int64_t ClampIndex(int64_t index, int64_t size) {
  if (index < 0) index += size;
  return std::clamp<int64_t>(index, 0, size);
}

}  // namespace

TensorRef Reshape(const TensorRef& x, std::vector<int64_t> shape, const Loc& loc) {
  const ir::TensorType& type = x->type;
  int64_t known = 1;
  int inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferred >= 0)
        ThrowOpError("reshape", "more than one -1 in " + DimsToString(shape), {type}, loc);
      inferred = static_cast<int>(i);
    } else if (shape[i] < 0) {
      ThrowOpError("reshape", "negative size in " + DimsToString(shape), {type}, loc);
    } else {
      known *= shape[i];
    }
  }
  const int64_t n = type.num_elements();
  if (inferred >= 0) {
    if (known == 0 || n % known != 0) {
      ThrowOpError("reshape",
                   absl::StrCat("cannot reshape ", n, " elements to ", DimsToString(shape)), {type},
                   loc);
    }
    shape[static_cast<size_t>(inferred)] = n / known;
  } else if (known != n) {
    ThrowOpError("reshape",
                 absl::StrCat("cannot reshape ", n, " elements to ", DimsToString(shape)), {type},
                 loc);
  }
  return ReshapeTo(x, std::move(shape), "reshape", loc);
}

TensorRef Permute(const TensorRef& x, std::vector<int64_t> axes, const Loc& loc) {
  const ir::TensorType& type = x->type;
  if (static_cast<int64_t>(axes.size()) != type.rank()) {
    ThrowOpError(
        "permute",
        absl::StrCat("permutation ", DimsToString(axes), " does not match rank ", type.rank()),
        {type}, loc);
  }
  std::vector<int64_t> perm = NormalizeDims(axes, type.rank(), "permute", type, loc);
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i)
    identity = identity && perm[i] == static_cast<int64_t>(i);
  if (identity) return x;
  ir::Attrs attrs;
  attrs.axes = std::move(perm);
  return Prim(ir::Op::kPermute, {x}, "permute", loc, std::move(attrs));
}

TensorRef SwapDims(const TensorRef& x, int64_t a, int64_t b, const char* name, const Loc& loc) {
  const ir::TensorType& type = x->type;
  const int64_t da = NormalizeDim(a, type.rank(), name, type, loc);
  const int64_t db = NormalizeDim(b, type.rank(), name, type, loc);
  if (da == db) return x;
  std::vector<int64_t> perm(static_cast<size_t>(type.rank()));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::swap(perm[static_cast<size_t>(da)], perm[static_cast<size_t>(db)]);
  ir::Attrs attrs;
  attrs.axes = std::move(perm);
  return Prim(ir::Op::kPermute, {x}, name, loc, std::move(attrs));
}

TensorRef Unsqueeze(const TensorRef& x, int64_t dim, const Loc& loc) {
  const ir::TensorType& type = x->type;
  const int64_t d = NormalizeDim(dim, type.rank() + 1, "unsqueeze", type, loc);
  ir::Shape shape = type.shape;
  shape.insert(shape.begin() + d, 1);
  return ReshapeTo(x, std::move(shape), "unsqueeze", loc);
}

TensorRef Squeeze(const TensorRef& x, int64_t dim, const Loc& loc) {
  const ir::TensorType& type = x->type;
  const int64_t d = NormalizeDim(dim, type.rank(), "squeeze", type, loc);
  if (Size(x, d) != 1) {
    ThrowOpError("squeeze", absl::StrCat("dim ", dim, " has size ", Size(x, d), ", not 1"), {type},
                 loc);
  }
  ir::Shape shape = type.shape;
  shape.erase(shape.begin() + d);
  return ReshapeTo(x, std::move(shape), "squeeze", loc);
}

TensorRef Expand(const TensorRef& x, std::vector<int64_t> shape, const Loc& loc) {
  const ir::TensorType& type = x->type;
  const size_t rank = shape.size();
  const size_t old_rank = type.shape.size();
  if (rank < old_rank) {
    ThrowOpError("expand", "cannot lower the rank to " + DimsToString(shape), {type}, loc);
  }
  const size_t offset = rank - old_rank;
  for (size_t i = 0; i < rank; ++i) {
    const int64_t have = i < offset ? 1 : type.shape[i - offset];
    if (shape[i] == -1) {
      if (i < offset) {
        ThrowOpError("expand", absl::StrCat("-1 for the new leading dim ", i), {type}, loc);
      }
      shape[i] = have;
    } else if (shape[i] < 0 || (have != 1 && have != shape[i])) {
      ThrowOpError("expand",
                   absl::StrCat("cannot expand dim ", i, " of size ", have, " to ", shape[i]),
                   {type}, loc);
    }
  }
  return BroadcastTo(x, shape, "expand", loc);
}

TensorRef Slice(const TensorRef& x, std::span<const SliceRange> ranges, const char* name,
                const Loc& loc) {
  const ir::TensorType& type = x->type;
  if (static_cast<int64_t>(ranges.size()) != type.rank()) {
    ThrowOpError(name, absl::StrCat(ranges.size(), " ranges for rank ", type.rank()), {type}, loc);
  }
  ir::Attrs attrs;
  bool identity = true;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const int64_t size = type.shape[i];
    const SliceRange& r = ranges[i];
    if (r.step < 1) {
      ThrowOpError(name, absl::StrCat("step ", r.step, " of dim ", i, " must be >= 1 (use flip)"),
                   {type}, loc);
    }
    const int64_t start = ClampIndex(r.start, size);
    const int64_t end = std::max(start, ClampIndex(r.end, size));
    identity = identity && start == 0 && end == size && r.step == 1;
    attrs.starts.push_back(start);
    attrs.limits.push_back(end);
    attrs.strides.push_back(r.step);
  }
  if (identity) return x;
  return Prim(ir::Op::kSlice, {x}, name, loc, std::move(attrs));
}

TensorRef SliceDim(const TensorRef& x, int64_t dim, SliceRange range, const char* name,
                   const Loc& loc) {
  const int64_t d = NormalizeDim(dim, x->type.rank(), name, x->type, loc);
  std::vector<SliceRange> ranges(static_cast<size_t>(x->type.rank()));
  ranges[static_cast<size_t>(d)] = range;
  return Slice(x, ranges, name, loc);
}

TensorRef Narrow(const TensorRef& x, int64_t dim, int64_t start, int64_t length, const Loc& loc) {
  const ir::TensorType& type = x->type;
  const int64_t d = NormalizeDim(dim, type.rank(), "narrow", type, loc);
  const int64_t size = Size(x, d);
  const int64_t begin = start < 0 ? start + size : start;
  if (begin < 0 || begin > size || length < 0 || begin + length > size) {
    ThrowOpError("narrow",
                 absl::StrCat("start ", start, " and length ", length, " out of range for dim ",
                              dim, " of size ", size),
                 {type}, loc);
  }
  return SliceDim(x, d, SliceRange{begin, begin + length, 1}, "narrow", loc);
}

TensorRef Cat(std::span<const TensorRef> xs, int64_t dim, const char* name, const Loc& loc) {
  if (xs.empty()) ThrowOpError(name, "needs at least one tensor", {}, loc);
  const ir::TensorType& first = xs[0]->type;
  const int64_t d = NormalizeDim(dim, first.rank(), name, first, loc);
  ir::DType dtype = first.dtype;
  for (size_t k = 1; k < xs.size(); ++k) {
    const ir::TensorType& t = xs[k]->type;
    dtype = PromoteDTypes(dtype, t.dtype, name, {first, t}, loc);
    for (int64_t i = 0; i < first.rank(); ++i) {
      if (i != d && t.shape[static_cast<size_t>(i)] != first.shape[static_cast<size_t>(i)]) {
        ThrowOpError(name,
                     absl::StrCat("tensor ", k, " differs from tensor 0 in dim ", i, " (only dim ",
                                  d, " may differ)"),
                     {first, t}, loc);
      }
    }
    if (DeviceOf(xs[k]) != DeviceOf(xs[0])) {
      ThrowOpError(name,
                   absl::StrCat("tensor ", k, " is on ", DeviceOf(xs[k]).ToString(),
                                ", tensor 0 on ", DeviceOf(xs[0]).ToString()),
                   {first, t}, loc);
    }
  }
  if (xs.size() == 1) return xs[0];
  std::vector<TensorRef> inputs;
  inputs.reserve(xs.size());
  for (const TensorRef& x : xs) inputs.push_back(CastTo(x, dtype, name, loc));
  ir::Attrs attrs;
  attrs.axes = {d};
  return Prim(ir::Op::kConcat, std::move(inputs), name, loc, std::move(attrs));
}

TensorRef Stack(std::span<const TensorRef> xs, int64_t dim, const Loc& loc) {
  if (xs.empty()) ThrowOpError("stack", "needs at least one tensor", {}, loc);
  std::vector<TensorRef> parts;
  parts.reserve(xs.size());
  for (size_t k = 0; k < xs.size(); ++k) {
    if (xs[k]->type.shape != xs[0]->type.shape) {
      ThrowOpError("stack", absl::StrCat("tensor ", k, " has another shape than tensor 0"),
                   {xs[0]->type, xs[k]->type}, loc);
    }
    parts.push_back(Unsqueeze(xs[k], dim, loc));
  }
  const int64_t d = dim < 0 ? dim + xs[0]->type.rank() + 1 : dim;
  return Cat(parts, d, "stack", loc);
}

std::vector<TensorRef> Split(const TensorRef& x, int64_t size, int64_t dim, const Loc& loc) {
  const ir::TensorType& type = x->type;
  const int64_t d = NormalizeDim(dim, type.rank(), "split", type, loc);
  if (size < 1)
    ThrowOpError("split", absl::StrCat("piece size ", size, " must be >= 1"), {type}, loc);
  const int64_t n = Size(x, d);
  if (n == 0) return {x};
  std::vector<TensorRef> pieces;
  for (int64_t start = 0; start < n; start += size) {
    pieces.push_back(SliceDim(x, d, SliceRange{start, std::min(n, start + size), 1}, "split", loc));
  }
  return pieces;
}

std::vector<TensorRef> Chunk(const TensorRef& x, int64_t chunks, int64_t dim, const Loc& loc) {
  const ir::TensorType& type = x->type;
  const int64_t d = NormalizeDim(dim, type.rank(), "chunk", type, loc);
  if (chunks < 1)
    ThrowOpError("chunk", absl::StrCat("chunks ", chunks, " must be >= 1"), {type}, loc);
  const int64_t n = Size(x, d);
  return Split(x, std::max<int64_t>(1, (n + chunks - 1) / chunks), d, loc);
}

TensorRef Pad(const TensorRef& x, std::span<const std::pair<int64_t, int64_t>> padding,
              double value, const Loc& loc) {
  const ir::TensorType& type = x->type;
  if (static_cast<int64_t>(padding.size()) != type.rank()) {
    ThrowOpError("pad", absl::StrCat(padding.size(), " {low, high} pairs for rank ", type.rank()),
                 {type}, loc);
  }
  ir::Attrs attrs;
  attrs.value = value;
  bool identity = true;
  for (size_t i = 0; i < padding.size(); ++i) {
    if (padding[i].first < 0 || padding[i].second < 0) {
      ThrowOpError("pad",
                   absl::StrCat("negative padding {", padding[i].first, ", ", padding[i].second,
                                "} for dim ", i, " (use slice to crop)"),
                   {type}, loc);
    }
    identity = identity && padding[i].first == 0 && padding[i].second == 0;
    attrs.low.push_back(padding[i].first);
    attrs.high.push_back(padding[i].second);
  }
  if (identity) return x;
  return Prim(ir::Op::kPad, {x}, "pad", loc, std::move(attrs));
}

TensorRef Flip(const TensorRef& x, std::vector<int64_t> dims, const Loc& loc) {
  std::vector<int64_t> axes = NormalizeDims(dims, x->type.rank(), "flip", x->type, loc);
  if (axes.empty()) return x;
  std::sort(axes.begin(), axes.end());
  ir::Attrs attrs;
  attrs.axes = std::move(axes);
  return Prim(ir::Op::kFlip, {x}, "flip", loc, std::move(attrs));
}

TensorRef Gather(const TensorRef& x, int64_t dim, const TensorRef& index, const Loc& loc) {
  const ir::TensorType& type = x->type;
  const int64_t d = NormalizeDim(dim, type.rank(), "gather", type, loc);
  ir::Attrs attrs;
  attrs.axes = {d};
  return Prim(ir::Op::kGather, {x, index}, "gather", loc, std::move(attrs));
}

TensorRef IndexSelect(const TensorRef& x, int64_t dim, const TensorRef& index, const Loc& loc) {
  const ir::TensorType& type = x->type;
  const ir::TensorType& itype = index->type;
  const int64_t d = NormalizeDim(dim, type.rank(), "index_select", type, loc);
  if (itype.rank() != 1 || !ir::IsInteger(itype.dtype)) {
    ThrowOpError("index_select", "needs a rank-1 integer index", {type, itype}, loc);
  }
  // Every position along dim reads x at index[i]: gather with the index spread over the others.
  ir::Shape index_shape(static_cast<size_t>(type.rank()), 1);
  index_shape[static_cast<size_t>(d)] = itype.shape[0];
  ir::Shape out_shape = type.shape;
  out_shape[static_cast<size_t>(d)] = itype.shape[0];
  const TensorRef spread = BroadcastTo(ReshapeTo(index, index_shape, "index_select", loc),
                                       out_shape, "index_select", loc);
  ir::Attrs attrs;
  attrs.axes = {d};
  return Prim(ir::Op::kGather, {x, spread}, "index_select", loc, std::move(attrs));
}

TensorRef Repeat(const TensorRef& x, std::vector<int64_t> times, const Loc& loc) {
  const ir::TensorType& type = x->type;
  if (static_cast<int64_t>(times.size()) != type.rank()) {
    ThrowOpError("repeat", absl::StrCat(times.size(), " counts for rank ", type.rank()), {type},
                 loc);
  }
  if (std::all_of(times.begin(), times.end(), [](int64_t t) { return t == 1; })) return x;
  // [a, b] -> [1, a, 1, b] -> [ta, a, tb, b] -> [ta * a, tb * b].
  ir::Shape interleaved, expanded, result;
  for (size_t i = 0; i < times.size(); ++i) {
    if (times[i] < 0) {
      ThrowOpError("repeat", absl::StrCat("negative count ", times[i], " for dim ", i), {type},
                   loc);
    }
    interleaved.insert(interleaved.end(), {1, type.shape[i]});
    expanded.insert(expanded.end(), {times[i], type.shape[i]});
    result.push_back(times[i] * type.shape[i]);
  }
  const TensorRef spread =
      BroadcastTo(ReshapeTo(x, interleaved, "repeat", loc), expanded, "repeat", loc);
  return ReshapeTo(spread, result, "repeat", loc);
}

}  // namespace kiln::detail
