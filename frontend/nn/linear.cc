#include "frontend/nn/linear.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "frontend/amp/autocast.h"
#include "frontend/tensor_ops.h"

namespace kiln::nn::detail {

using kiln::detail::TensorRef;

TensorRef LinearForward(const TensorRef& x, const TensorRef& weight, const TensorRef& bias,
                        const std::source_location& loc) {
  const ir::TensorType& tx = kiln::detail::TypeOf(x);
  const ir::TensorType& tw = kiln::detail::TypeOf(weight);
  const int64_t d_input = tw.shape[1];
  if (tx.rank() < 1 || tx.shape.back() != d_input) {
    kiln::detail::ThrowOpError(
        "linear", absl::StrCat("the input's last dim must be ", d_input, " (the layer's d_input)"),
        {tx, tw}, loc);
  }
  const TensorRef weight_t = kiln::detail::SwapDims(weight, 0, 1, "linear", loc);
  TensorRef y;
  if (tx.rank() > 2) {
    // One [rows, in] x [in, out] GEMM over every leading dim, as torch's F.linear does, rather
    // than a batched matmul against a broadcast weight: one packing of W, one large kernel.
    int64_t count = 1;
    for (size_t i = 0; i + 1 < tx.shape.size(); ++i) count *= tx.shape[i];
    std::vector<int64_t> rows = {count, d_input};
    std::vector<int64_t> out(tx.shape.begin(), tx.shape.end() - 1);
    out.push_back(tw.shape[0]);
    y = kiln::detail::Reshape(
        kiln::detail::MatMul(kiln::detail::Reshape(x, rows, loc), weight_t, loc), out, loc);
  } else {
    y = kiln::detail::MatMul(x, weight_t, loc);
  }
  if (bias != nullptr) {
    y = kiln::detail::Binary(ir::Op::kAdd, y, kiln::detail::AutocastBias(bias, y, "linear", loc),
                             "linear", loc);
  }
  return y;
}

TensorRef LinearInitUniform(ir::Shape shape, int64_t d_input, const BackendTraits& backend,
                            const Device& device, const std::source_location& loc) {
  if (d_input < 1) {
    kiln::detail::ThrowOpError("linear", absl::StrCat("d_input ", d_input, " must be >= 1"), {},
                               loc);
  }
  for (int64_t d : shape) {
    if (d < 0) {
      kiln::detail::ThrowOpError(
          "linear", absl::StrCat("negative size in ", ir::ShapeToString(shape)), {}, loc);
    }
  }
  const double bound = 1.0 / std::sqrt(static_cast<double>(d_input));
  return kiln::detail::RandomUniform(std::move(shape), ir::DType::kF32, -bound, bound, backend,
                                     device, loc);
}

}  // namespace kiln::nn::detail
