#include "frontend/amp/autocast.h"

#include "absl/strings/str_cat.h"
#include "frontend/error.h"
#include "frontend/ops_internal.h"

namespace kiln::amp {
namespace {

thread_local std::optional<ir::DType> g_autocast;

}  // namespace

const char* PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kF32:
      return "f32";
    case Precision::kBF16:
      return "bf16";
    case Precision::kF16:
      return "f16";
  }
  return "?";
}

std::optional<Precision> ParsePrecision(std::string_view name) {
  for (Precision p : {Precision::kF32, Precision::kBF16, Precision::kF16}) {
    if (name == PrecisionName(p)) return p;
  }
  return std::nullopt;
}

std::optional<ir::DType> AutocastDTypeOf(Precision precision) {
  switch (precision) {
    case Precision::kF32:
      return std::nullopt;
    case Precision::kBF16:
      return ir::DType::kBF16;
    case Precision::kF16:
      return ir::DType::kF16;
  }
  return std::nullopt;
}

AutocastGuard::AutocastGuard(std::optional<ir::DType> dtype, std::source_location loc)
    : previous_(g_autocast) {
  if (dtype && *dtype != ir::DType::kBF16 && *dtype != ir::DType::kF16) {
    detail::ThrowOpError(
        "autocast", absl::StrCat("computes in bf16 or f16, not ", ir::DTypeName(*dtype)), {}, loc);
  }
  g_autocast = dtype;
}

AutocastGuard::~AutocastGuard() { g_autocast = previous_; }

std::optional<ir::DType> AutocastDType() { return g_autocast; }

}  // namespace kiln::amp

namespace kiln::detail {

TensorRef AutocastToLow(const TensorRef& x, const char* op, const Loc& loc) {
  const std::optional<ir::DType> low = amp::AutocastDType();
  if (!low || x == nullptr || x->type.dtype != ir::DType::kF32) return x;
  return CastTo(x, *low, op, loc);
}

TensorRef AutocastToF32(const TensorRef& x, const char* op, const Loc& loc) {
  if (!amp::AutocastDType() || x == nullptr) return x;
  const ir::DType dtype = x->type.dtype;
  if (dtype != ir::DType::kBF16 && dtype != ir::DType::kF16) return x;
  return CastTo(x, ir::DType::kF32, op, loc);
}

TensorRef AutocastBias(const TensorRef& bias, const TensorRef& product, const char* op,
                       const Loc& loc) {
  const std::optional<ir::DType> low = amp::AutocastDType();
  if (!low || bias == nullptr || product->type.dtype != *low) return bias;
  return AutocastToLow(bias, op, loc);
}

}  // namespace kiln::detail
