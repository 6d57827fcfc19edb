#include "frontend/nn/init.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "frontend/autograd.h"
#include "frontend/error.h"
#include "frontend/tensor_ops.h"

namespace kiln::nn::detail {

using kiln::detail::TensorRef;

TensorRef MarkParameter(TensorRef ref, const std::source_location& loc) {
  // The one place every layer's init() marks its new parameters as gradient leaves.
  return kiln::detail::SetRequireGrad(ref, true, loc);
}

TensorRef InitParameter(const Initializer& init, ir::Shape shape, int64_t fan_in_override,
                        const BackendTraits& backend, const Device& device, const char* layer,
                        const std::source_location& loc) {
  for (int64_t d : shape) {
    if (d < 0) {
      kiln::detail::ThrowOpError(layer, absl::StrCat("negative size in ", ir::ShapeToString(shape)),
                                 {}, loc);
    }
  }
  int64_t receptive = 1;
  for (size_t i = 2; i < shape.size(); ++i) receptive *= shape[i];
  int64_t fan_in = shape.empty() ? 1 : (shape.size() == 1 ? shape[0] : shape[1] * receptive);
  int64_t fan_out = shape.empty() ? 1 : shape[0] * receptive;
  if (fan_in_override > 0) fan_in = fan_in_override;
  const bool random = init.kind != Initializer::Kind::kConstant;
  const int64_t fan = init.mode == FanMode::kFanIn ? fan_in : fan_out;
  const bool uses_fan = init.kind == Initializer::Kind::kKaimingUniform ||
                        init.kind == Initializer::Kind::kKaimingNormal ||
                        init.kind == Initializer::Kind::kXavierUniform ||
                        init.kind == Initializer::Kind::kXavierNormal;
  if (random && uses_fan && (fan < 1 || fan_in + fan_out < 1)) {
    kiln::detail::ThrowOpError(layer,
                               absl::StrCat("cannot compute the fan of a tensor of shape ",
                                            ir::ShapeToString(shape), " (a zero-sized dim)"),
                               {}, loc);
  }
  const ir::DType f32 = ir::DType::kF32;
  TensorRef out;
  switch (init.kind) {
    case Initializer::Kind::kUniform:
      out =
          kiln::detail::RandomUniform(std::move(shape), f32, init.a, init.b, backend, device, loc);
      break;
    case Initializer::Kind::kNormal:
      out = kiln::detail::RandomNormal(std::move(shape), f32, init.a, init.b, backend, device, loc);
      break;
    case Initializer::Kind::kConstant:
      out = kiln::detail::Full(std::move(shape), f32, init.a, backend, device, layer, loc);
      break;
    case Initializer::Kind::kKaimingUniform: {
      const double bound = init.a * std::sqrt(3.0 / static_cast<double>(fan));
      out = kiln::detail::RandomUniform(std::move(shape), f32, -bound, bound, backend, device, loc);
      break;
    }
    case Initializer::Kind::kKaimingNormal:
      out = kiln::detail::RandomNormal(std::move(shape), f32, 0.0,
                                       init.a / std::sqrt(static_cast<double>(fan)), backend,
                                       device, loc);
      break;
    case Initializer::Kind::kXavierUniform: {
      const double bound = init.a * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
      out = kiln::detail::RandomUniform(std::move(shape), f32, -bound, bound, backend, device, loc);
      break;
    }
    case Initializer::Kind::kXavierNormal:
      out = kiln::detail::RandomNormal(
          std::move(shape), f32, 0.0,
          init.a * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)), backend, device, loc);
      break;
  }
  return MarkParameter(std::move(out), loc);
}

}  // namespace kiln::nn::detail
