#include "frontend/nn/attention_ops.h"

#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "frontend/error.h"
#include "frontend/nn/linear.h"
#include "frontend/ops_internal.h"
#include "frontend/tensor_ops.h"

namespace kiln::nn::detail {

namespace {

using kiln::detail::ThrowOpError;
using kiln::detail::TypeOf;

/// [N, T, E] -> [N, H, T, E / H].
TensorRef SplitHeads(const TensorRef& x, int64_t heads, const char* name, const Loc& loc) {
  const ir::Shape& s = TypeOf(x).shape;
  TensorRef y = kiln::detail::ReshapeTo(x, {s[0], s[1], heads, s[2] / heads}, name, loc);
  return kiln::detail::Permute(y, {0, 2, 1, 3}, loc);
}

/// Applies a bool (true = masked) or float (additive) mask, already shaped to broadcast against
/// the scores.
TensorRef ApplyMask(const TensorRef& scores, const TensorRef& mask, const char* name,
                    const Loc& loc) {
  if (TypeOf(mask).dtype == ir::DType::kBool) {
    TensorRef neg_inf = kiln::detail::FullLike(scores, -std::numeric_limits<double>::infinity(),
                                               std::nullopt, name, loc);
    return kiln::detail::Where(mask, neg_inf, scores, name, loc);
  }
  if (!ir::IsFloat(TypeOf(mask).dtype)) {
    ThrowOpError(name, "masks must be bool (true = masked) or float (added to the scores)",
                 {TypeOf(mask)}, loc);
  }
  return kiln::detail::Binary(ir::Op::kAdd, scores, mask, name, loc);
}

}  // namespace

TensorRef MultiHeadAttentionForward(const TensorRef& query, const TensorRef& key,
                                    const TensorRef& value, const TensorRef& in_proj_weight,
                                    const TensorRef& in_proj_bias, const TensorRef& out_proj_weight,
                                    const TensorRef& out_proj_bias,
                                    const TensorRef& key_padding_mask, const TensorRef& attn_mask,
                                    const AttentionArgs& args, const BackendTraits& backend,
                                    TensorRef* weights, const char* name, const Loc& loc) {
  const ir::TensorType& tq = TypeOf(query);
  const ir::TensorType& tk = TypeOf(key);
  const ir::TensorType& tv = TypeOf(value);
  const ir::TensorType& tw = TypeOf(in_proj_weight);
  const int64_t e = tw.shape[1];
  const int64_t heads = args.num_heads;
  if (tq.rank() != 3 || tk.rank() != 3 || tv.rank() != 3 || tq.shape[2] != e || tk.shape[2] != e ||
      tv.shape[2] != e || tk.shape[0] != tq.shape[0] || tv.shape[0] != tq.shape[0] ||
      tk.shape[1] != tv.shape[1]) {
    ThrowOpError(name, absl::StrCat("needs query [N, L, ", e, "] and key, value [N, S, ", e, "]"),
                 {tq, tk, tv}, loc);
  }
  if (heads < 1 || e % heads != 0 || tw.shape[0] != 3 * e) {
    ThrowOpError(name,
                 absl::StrCat("num_heads (", heads, ") must divide the embedding dim (", e,
                              ") and in_proj_weight must be [3E, E]"),
                 {tw}, loc);
  }
  const int64_t n = tq.shape[0];
  const int64_t l = tq.shape[1];
  const int64_t s = tk.shape[1];
  auto project = [&](const TensorRef& x, int64_t part) {
    TensorRef w = kiln::detail::Narrow(in_proj_weight, 0, part * e, e, loc);
    TensorRef b = in_proj_bias ? kiln::detail::Narrow(in_proj_bias, 0, part * e, e, loc) : nullptr;
    return SplitHeads(LinearForward(x, w, b, loc), heads, name, loc);
  };
  const TensorRef q = project(query, 0);
  const TensorRef k = project(key, 1);
  const TensorRef v = project(value, 2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(e / heads));
  // torch scales q before the product.
  TensorRef scores =
      kiln::detail::MatMul(kiln::detail::BinaryScalar(ir::Op::kMul, q, scale, false, name, loc),
                           kiln::detail::SwapDims(k, 2, 3, name, loc), loc);  // [N, H, L, S]
  if (attn_mask != nullptr) {
    const ir::TensorType& tm = TypeOf(attn_mask);
    TensorRef m;
    if (tm.shape == ir::Shape{l, s}) {
      m = attn_mask;
    } else if (tm.shape == ir::Shape{n * heads, l, s}) {
      m = kiln::detail::ReshapeTo(attn_mask, {n, heads, l, s}, name, loc);
    } else {
      ThrowOpError(
          name, absl::StrCat("attn_mask must be [L, S] = [", l, ", ", s, "] or [N * heads, L, S]"),
          {tq, tk, tm}, loc);
    }
    scores = ApplyMask(scores, m, name, loc);
  }
  if (key_padding_mask != nullptr) {
    const ir::TensorType& tm = TypeOf(key_padding_mask);
    if (tm.shape != ir::Shape{n, s}) {
      ThrowOpError(name, absl::StrCat("key_padding_mask must be [N, S] = [", n, ", ", s, "]"),
                   {tq, tk, tm}, loc);
    }
    scores = ApplyMask(scores, kiln::detail::ReshapeTo(key_padding_mask, {n, 1, 1, s}, name, loc),
                       name, loc);
  }
  TensorRef attn = kiln::detail::Softmax(scores, -1, loc);
  if (weights != nullptr) {
    *weights =
        kiln::detail::Reduce(kiln::detail::Reduction::kMean, attn, {1}, false, false, false, loc);
  }
  if (args.training && args.dropout > 0.0) {
    const TensorRef u =
        kiln::detail::RandomUniform(TypeOf(attn).shape, TypeOf(attn).dtype, 0.0, 1.0, backend,
                                    kiln::detail::DeviceOf(attn), loc);
    const TensorRef drop =
        kiln::detail::BinaryScalar(ir::Op::kLt, u, args.dropout, false, name, loc);
    attn =
        kiln::detail::Where(drop, kiln::detail::FullLike(attn, 0.0, std::nullopt, name, loc),
                            kiln::detail::BinaryScalar(
                                ir::Op::kMul, attn, 1.0 / (1.0 - args.dropout), false, name, loc),
                            name, loc);
  }
  TensorRef out = kiln::detail::MatMul(attn, v, loc);  // [N, H, L, D]
  out =
      kiln::detail::ReshapeTo(kiln::detail::Permute(out, {0, 2, 1, 3}, loc), {n, l, e}, name, loc);
  return LinearForward(out, out_proj_weight, out_proj_bias, loc);
}

TensorRef SinusoidalPositionalEncoding(int64_t length, int64_t d_model, double max_period,
                                       const BackendTraits& backend, const Device& device,
                                       const Loc& loc) {
  if (length < 1 || d_model < 2 || d_model % 2 != 0) {
    ThrowOpError("sinusoidal_positional_encoding",
                 absl::StrCat("needs length >= 1 and an even d_model >= 2 (got ", length, ", ",
                              d_model, ")"),
                 {}, loc);
  }
  std::vector<double> values(static_cast<size_t>(length * d_model));
  for (int64_t pos = 0; pos < length; ++pos) {
    for (int64_t i = 0; i < d_model / 2; ++i) {
      const double angle =
          static_cast<double>(pos) /
          std::pow(max_period, 2.0 * static_cast<double>(i) / static_cast<double>(d_model));
      values[static_cast<size_t>(pos * d_model + 2 * i)] = std::sin(angle);
      values[static_cast<size_t>(pos * d_model + 2 * i + 1)] = std::cos(angle);
    }
  }
  return kiln::detail::FromDoubles(values, {length, d_model}, ir::DType::kF32, backend, device,
                                   "sinusoidal_positional_encoding", loc);
}

}  // namespace kiln::nn::detail
