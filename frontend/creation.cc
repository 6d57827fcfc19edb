// Creation ops: fill, literal data, ranges and seeded random tensors.
#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "frontend/ops_internal.h"
#include "frontend/random.h"
#include "frontend/tensor_ops.h"

namespace kiln::detail {
namespace {

void CheckShape(const ir::Shape& shape, const char* op, const Loc& loc) {
  for (int64_t d : shape) {
    if (d < 0) {
      ThrowOpError(op, absl::StrCat("negative size in shape ", ir::ShapeToString(shape)), {}, loc);
    }
  }
}

// value * x + offset in x's dtype, skipping the identity steps.
TensorRef ScaleShift(const TensorRef& x, double scale, double offset, const char* name,
                     const Loc& loc) {
  TensorRef y = x;
  if (scale != 1.0) y = Prim(ir::Op::kMul, {y, FillOn(y, y->type, scale, name, loc)}, name, loc);
  if (offset != 0.0) {
    y = Prim(ir::Op::kAdd, {y, FillOn(y, y->type, offset, name, loc)}, name, loc);
  }
  return y;
}

TensorRef Iota(int64_t n, ir::DType dtype, const Device& device, const char* name, const Loc& loc) {
  ir::Attrs attrs;
  attrs.dtype = dtype;
  attrs.shape = {n};
  attrs.axes = {0};
  return RecordLeaf(name, ir::Op::kIota, std::move(attrs), device, loc);
}

}  // namespace

TensorRef Full(ir::Shape shape, ir::DType dtype, double value, const BackendTraits& backend,
               const Device& device, const char* op, const Loc& loc) {
  CheckDevice(backend, device, op, loc);
  CheckShape(shape, op, loc);
  ir::Attrs attrs;
  attrs.dtype = dtype;
  attrs.shape = std::move(shape);
  attrs.value = value;
  return RecordLeaf(op, ir::Op::kFill, std::move(attrs), device, loc);
}

TensorRef FullLike(const TensorRef& like, double value, std::optional<ir::DType> dtype,
                   const char* op, const Loc& loc) {
  ir::TensorType type = like->type;
  if (dtype) type.dtype = *dtype;
  return FillOn(like, type, value, op, loc);
}

TensorRef FromDoubles(std::span<const double> values, ir::Shape shape, ir::DType dtype,
                      const BackendTraits& backend, const Device& device, const char* op,
                      const Loc& loc) {
  CheckDevice(backend, device, op, loc);
  CheckShape(shape, op, loc);
  absl::StatusOr<ir::TensorData> data = ir::TensorData::FromDoubles(dtype, shape, values);
  if (!data.ok()) ThrowOpError(op, std::string(data.status().message()), {}, loc);
  TensorRef node = FromTensorData(*std::move(data), device);
  node->loc = loc;
  return node;
}

TensorRef FromInt64s(std::span<const int64_t> values, ir::Shape shape, ir::DType dtype,
                     const BackendTraits& backend, const Device& device, const char* op,
                     const Loc& loc) {
  CheckDevice(backend, device, op, loc);
  CheckShape(shape, op, loc);
  ir::TensorData data(dtype, shape);
  if (static_cast<int64_t>(values.size()) != data.num_elements()) {
    ThrowOpError(op,
                 absl::StrCat(values.size(), " values given for shape ", ir::ShapeToString(shape),
                              " (", data.num_elements(), " elements)"),
                 {}, loc);
  }
  for (size_t i = 0; i < values.size(); ++i) data.SetInt64(static_cast<int64_t>(i), values[i]);
  TensorRef node = FromTensorData(std::move(data), device);
  node->loc = loc;
  return node;
}

TensorRef FromTensorData(ir::TensorData data, int64_t rank, KindId kind,
                         const BackendTraits& backend, const Device& device, const Loc& loc) {
  CheckDevice(backend, device, "from_tensor_data", loc);
  if (data.rank() != rank) {
    ThrowOpError("from_tensor_data", absl::StrCat("data of rank ", data.rank(), " for rank ", rank),
                 {ir::TensorType{data.dtype(), data.shape()}}, loc);
  }
  CheckDTypeInKind(data.dtype(), kind, "from_tensor_data", loc);
  TensorRef node = FromTensorData(std::move(data), device);
  node->loc = loc;
  return node;
}

TensorRef Arange(double start, double end, double step, ir::DType dtype,
                 const BackendTraits& backend, const Device& device, const Loc& loc) {
  CheckDevice(backend, device, "arange", loc);
  if (step == 0 || !std::isfinite(step) || !std::isfinite(start) || !std::isfinite(end)) {
    ThrowOpError("arange",
                 absl::StrCat("needs finite bounds and a nonzero step (start ", start, ", end ",
                              end, ", step ", step, ")"),
                 {}, loc);
  }
  const int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((end - start) / step)));
  if (ir::IsInteger(dtype)) {
    return ScaleShift(Iota(n, dtype, device, "arange", loc), step, start, "arange", loc);
  }
  // Float values are computed in f64 and rounded once, like torch.
  const TensorRef values =
      ScaleShift(Iota(n, ir::DType::kF64, device, "arange", loc), step, start, "arange", loc);
  return CastTo(values, dtype, "arange", loc);
}

TensorRef Linspace(double start, double end, int64_t steps, ir::DType dtype,
                   const BackendTraits& backend, const Device& device, const Loc& loc) {
  CheckDevice(backend, device, "linspace", loc);
  if (steps < 0) ThrowOpError("linspace", absl::StrCat("negative steps ", steps), {}, loc);
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  const TensorRef values = ScaleShift(Iota(steps, ir::DType::kF64, device, "linspace", loc), step,
                                      start, "linspace", loc);
  return CastTo(values, dtype, "linspace", loc);
}

TensorRef RandomUniform(ir::Shape shape, ir::DType dtype, double low, double high,
                        const BackendTraits& backend, const Device& device, const Loc& loc) {
  CheckDevice(backend, device, "random_uniform", loc);
  CheckShape(shape, "random_uniform", loc);
  if (!(low <= high)) {
    ThrowOpError("random_uniform", absl::StrCat("low ", low, " above high ", high), {}, loc);
  }
  ir::Attrs attrs;
  attrs.dtype = dtype;
  attrs.shape = std::move(shape);
  attrs.seed = NextSeed();
  const TensorRef u =
      RecordLeaf("random_uniform", ir::Op::kRandomUniform, std::move(attrs), device, loc);
  return ScaleShift(u, high - low, low, "random_uniform", loc);
}

TensorRef RandomNormal(ir::Shape shape, ir::DType dtype, double mean, double std,
                       const BackendTraits& backend, const Device& device, const Loc& loc) {
  CheckDevice(backend, device, "random_normal", loc);
  CheckShape(shape, "random_normal", loc);
  if (!(std >= 0)) {
    ThrowOpError("random_normal", absl::StrCat("negative standard deviation ", std), {}, loc);
  }
  ir::Attrs attrs;
  attrs.dtype = dtype;
  attrs.shape = std::move(shape);
  attrs.seed = NextSeed();
  const TensorRef n =
      RecordLeaf("random_normal", ir::Op::kRandomNormal, std::move(attrs), device, loc);
  return ScaleShift(n, std, mean, "random_normal", loc);
}

TensorRef ToDevice(const TensorRef& x, const BackendTraits& backend, const Device& device,
                   const Loc& loc) {
  CheckDevice(backend, device, "to", loc);
  if (DeviceOf(x) == device) return x;
  return FromTensorData(Data(x, loc), device);
}

}  // namespace kiln::detail
