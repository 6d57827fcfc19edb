// The non-template implementation of every Tensor<B, R, K> op, on type-erased handles. The
// templates in tensor.h are one-line wrappers around these, so instantiating a tensor type for
// another backend, rank or kind compiles no op code. Every function checks its arguments at
// record time and throws kiln::Error naming the op, the operand types and `loc`.
//
// Dims may be negative (counted from the end, like Python) unless a comment says otherwise.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <utility>
#include <vector>

#include "frontend/engine.h"
#include "frontend/kind.h"

namespace kiln::detail {

// ---- Checks shared by the templates -------------------------------------------------------------

/// Throws unless `dtype` belongs to `kind`.
void CheckDTypeInKind(ir::DType dtype, KindId kind, const char* op, const Loc& loc);
/// Throws unless the node has rank `rank` and a dtype of `kind` (guards handle -> Tensor).
void CheckHandle(const TensorRef& ref, int64_t rank, KindId kind, const Loc& loc);
/// `dim` in [-rank, rank) made non-negative; throws otherwise.
int64_t NormalizeDim(int64_t dim, int64_t rank, const char* op, const ir::TensorType& type,
                     const Loc& loc);

// ---- Creation -----------------------------------------------------------------------------------

TensorRef Full(ir::Shape shape, ir::DType dtype, double value, const BackendTraits& backend,
               const Device& device, const char* op, const Loc& loc);
TensorRef FullLike(const TensorRef& like, double value, std::optional<ir::DType> dtype,
                   const char* op, const Loc& loc);
/// From row-major values; values.size() must match the shape.
TensorRef FromDoubles(std::span<const double> values, ir::Shape shape, ir::DType dtype,
                      const BackendTraits& backend, const Device& device, const char* op,
                      const Loc& loc);
TensorRef FromInt64s(std::span<const int64_t> values, ir::Shape shape, ir::DType dtype,
                     const BackendTraits& backend, const Device& device, const char* op,
                     const Loc& loc);
/// Takes `data` as it is; its rank must be `rank` and its dtype of `kind`.
TensorRef FromTensorData(ir::TensorData data, int64_t rank, KindId kind,
                         const BackendTraits& backend, const Device& device, const Loc& loc);
/// start, start + step, ... below `end` (above, for a negative step).
TensorRef Arange(double start, double end, double step, ir::DType dtype,
                 const BackendTraits& backend, const Device& device, const Loc& loc);
/// `steps` values from start to end inclusive.
TensorRef Linspace(double start, double end, int64_t steps, ir::DType dtype,
                   const BackendTraits& backend, const Device& device, const Loc& loc);
/// U[low, high) and N(mean, std^2), each taking the next seed of the global stream.
TensorRef RandomUniform(ir::Shape shape, ir::DType dtype, double low, double high,
                        const BackendTraits& backend, const Device& device, const Loc& loc);
TensorRef RandomNormal(ir::Shape shape, ir::DType dtype, double mean, double std,
                       const BackendTraits& backend, const Device& device, const Loc& loc);
/// Realizes `x` and places its value on `device`.
TensorRef ToDevice(const TensorRef& x, const BackendTraits& backend, const Device& device,
                   const Loc& loc);

// ---- Elementwise --------------------------------------------------------------------------------

/// A unary primitive (neg, exp, ..., not).
TensorRef Unary(ir::Op op, const TensorRef& x, const Loc& loc);
/// A binary, compare or logical primitive after numpy broadcasting of sizes and promotion of the
/// dtypes to the wider one of their kind. `name` is the user's op for messages.
TensorRef Binary(ir::Op op, const TensorRef& a, const TensorRef& b, const char* name,
                 const Loc& loc);
/// `x op scalar`, or `scalar op x` when `scalar_first`; the scalar takes x's dtype.
TensorRef BinaryScalar(ir::Op op, const TensorRef& x, double scalar, bool scalar_first,
                       const char* name, const Loc& loc);
TensorRef Cast(const TensorRef& x, ir::DType dtype, const Loc& loc);
/// select(cond, a, b) with all three broadcast together.
TensorRef Where(const TensorRef& cond, const TensorRef& a, const TensorRef& b, const char* name,
                const Loc& loc);
/// Clamps into [low, high]; either bound may be absent.
TensorRef Clamp(const TensorRef& x, std::optional<double> low, std::optional<double> high,
                const char* name, const Loc& loc);
/// x * x.
TensorRef Square(const TensorRef& x, const Loc& loc);

// ---- Reductions ---------------------------------------------------------------------------------

enum class Reduction { kSum, kMean, kVar, kProd, kMax, kMin, kArgMax, kArgMin, kAny, kAll };
const char* ReductionName(Reduction reduction);

/// Reduces over `dims` (all dims when `all`); reduced dims are kept with size 1 when `keepdim`,
/// removed otherwise. Integer sum/prod give i64 (like torch); argmax/argmin give i64 (one dim
/// only, or over the flattened tensor when `all`); any/all give bool; var divides by n - 1 when
/// `unbiased`.
TensorRef Reduce(Reduction reduction, const TensorRef& x, std::vector<int64_t> dims, bool all,
                 bool keepdim, bool unbiased, const Loc& loc);

// ---- Sorting ------------------------------------------------------------------------------------

/// torch.sort along `dim`: {values, indices (i64)}. Stable (ties keep their order, also when
/// `descending`); NaN counts as larger than every number. Built on the sort/argsort primitives
/// (ascending); descending sorts the flipped tensor and flips back.
std::pair<TensorRef, TensorRef> Sort(const TensorRef& x, int64_t dim, bool descending,
                                     const Loc& loc);
/// The indices of Sort.
TensorRef Argsort(const TensorRef& x, int64_t dim, bool descending, const Loc& loc);
/// torch.topk: the first k of Sort(x, dim, largest); 0 <= k <= the dim's size.
std::pair<TensorRef, TensorRef> TopK(const TensorRef& x, int64_t k, int64_t dim, bool largest,
                                     const Loc& loc);

// ---- Movement -----------------------------------------------------------------------------------

/// One entry of `shape` may be -1 (inferred).
TensorRef Reshape(const TensorRef& x, std::vector<int64_t> shape, const Loc& loc);
/// Output dim i reads input dim axes[i].
TensorRef Permute(const TensorRef& x, std::vector<int64_t> axes, const Loc& loc);
TensorRef SwapDims(const TensorRef& x, int64_t a, int64_t b, const char* name, const Loc& loc);
/// Inserts a size-1 dim at `dim` in [-(rank+1), rank].
TensorRef Unsqueeze(const TensorRef& x, int64_t dim, const Loc& loc);
/// Removes `dim`, which must have size 1.
TensorRef Squeeze(const TensorRef& x, int64_t dim, const Loc& loc);
/// torch.Tensor.expand: size-1 dims grow, -1 keeps a size, new dims may be added in front.
TensorRef Expand(const TensorRef& x, std::vector<int64_t> shape, const Loc& loc);

/// A Python-style range of one dim: negative start/end count from the end, out-of-range values
/// clamp, step >= 1.
struct SliceRange {
  int64_t start = 0;
  int64_t end = INT64_MAX;
  int64_t step = 1;
};
/// One range per dim, in order.
TensorRef Slice(const TensorRef& x, std::span<const SliceRange> ranges, const char* name,
                const Loc& loc);
TensorRef SliceDim(const TensorRef& x, int64_t dim, SliceRange range, const char* name,
                   const Loc& loc);
/// torch.narrow: `length` elements from `start` (which may be negative); must be in range.
TensorRef Narrow(const TensorRef& x, int64_t dim, int64_t start, int64_t length, const Loc& loc);
TensorRef Cat(std::span<const TensorRef> xs, int64_t dim, const char* name, const Loc& loc);
/// Stacks equal-shaped tensors along a new dim in [-(rank+1), rank].
TensorRef Stack(std::span<const TensorRef> xs, int64_t dim, const Loc& loc);
/// Pieces of `size` along dim (the last may be smaller).
std::vector<TensorRef> Split(const TensorRef& x, int64_t size, int64_t dim, const Loc& loc);
/// torch.chunk: at most `chunks` pieces of ceil(n / chunks).
std::vector<TensorRef> Chunk(const TensorRef& x, int64_t chunks, int64_t dim, const Loc& loc);
/// (low, high) per dim, in order.
TensorRef Pad(const TensorRef& x, std::span<const std::pair<int64_t, int64_t>> padding,
              double value, const Loc& loc);
TensorRef Flip(const TensorRef& x, std::vector<int64_t> dims, const Loc& loc);
/// torch.gather: out[i][j] = x[index[i][j]][j] for dim 0.
TensorRef Gather(const TensorRef& x, int64_t dim, const TensorRef& index, const Loc& loc);
/// torch.index_select with a rank-1 integer index.
TensorRef IndexSelect(const TensorRef& x, int64_t dim, const TensorRef& index, const Loc& loc);
/// torch.Tensor.repeat with one count per dim.
TensorRef Repeat(const TensorRef& x, std::vector<int64_t> times, const Loc& loc);

// ---- Linear algebra -----------------------------------------------------------------------------

/// torch.matmul: 1-d operands are promoted and the added dim removed again; batch dims
/// broadcast.
TensorRef MatMul(const TensorRef& a, const TensorRef& b, const Loc& loc);
/// Rank of torch.matmul's result for operand ranks ra, rb (>= 1).
constexpr int MatMulRank(int ra, int rb) {
  if (ra == 1 && rb == 1) return 0;
  if (ra == 1) return rb - 1;
  if (rb == 1) return ra - 1;
  return ra > rb ? ra : rb;
}

// ---- Activations (compositions of primitives) ---------------------------------------------------

TensorRef Relu(const TensorRef& x, const Loc& loc);
TensorRef LeakyRelu(const TensorRef& x, double slope, const Loc& loc);
/// Exact (erf) when !tanh_approximation.
TensorRef Gelu(const TensorRef& x, bool tanh_approximation, const Loc& loc);
TensorRef Sigmoid(const TensorRef& x, const Loc& loc);
TensorRef Silu(const TensorRef& x, const Loc& loc);
TensorRef Softplus(const TensorRef& x, double beta, const Loc& loc);
TensorRef Softmax(const TensorRef& x, int64_t dim, const Loc& loc);
TensorRef LogSoftmax(const TensorRef& x, int64_t dim, const Loc& loc);

// ---- Printing -----------------------------------------------------------------------------------

/// Realizes `x` and prints it torch-style: values (elided in the middle when large), shape,
/// dtype and device.
void Print(std::ostream& os, const TensorRef& x);
/// The value part alone, e.g. "[[1.0000, 2.0000],\n [3.0000, 4.0000]]" (`indent` spaces before
/// continuation lines).
std::string FormatValues(const ir::TensorData& data, int indent);

}  // namespace kiln::detail

namespace kiln::ir {
/// Prints a host value like a tensor, without a device: `std::cout << x.into_data()`.
std::ostream& operator<<(std::ostream& os, const TensorData& data);
}  // namespace kiln::ir
