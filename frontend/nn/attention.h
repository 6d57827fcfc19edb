// Attention and the Transformer encoder with torch's batch_first layouts and parameter names, so
// a PyTorch state dict loads field by field:
//
//   MultiHeadAttention   in_proj_weight [3E, E], in_proj_bias [3E], out_proj (Linear E -> E)
//   TransformerEncoderLayer  self_attn, linear1, dropout, linear2, norm1, norm2, dropout1,
//                            dropout2 (norm_first and activation relu / gelu as torch)
//   TransformerEncoder   layers.<i>..., optional final norm
//
//   auto enc = kiln::nn::TransformerEncoderConfig(
//                  kiln::nn::TransformerEncoderLayerConfig(64, 4).with_dim_feedforward(128), 2)
//                  .init<B>(device);
//   Tensor<B, 3> y = enc.forward(x);  // x [N, L, 64]
//
// Masks: key_padding_mask [N, S] and attn_mask [L, S] or [N * heads, L, S]; a Bool mask is true
// where attention is not allowed, a Float mask is added to the scores (torch's conventions).
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <source_location>
#include <vector>

#include "frontend/activation.h"
#include "frontend/module.h"
#include "frontend/nn/attention_ops.h"
#include "frontend/nn/dropout.h"
#include "frontend/nn/init.h"
#include "frontend/nn/linear.h"
#include "frontend/nn/norm.h"
#include "frontend/tensor.h"

namespace kiln::nn {

/// An optional mask of any kind (Bool or Float) and rank, passed to attention.
struct AttentionMask {
  AttentionMask() = default;
  template <class B, int R, class K>
  AttentionMask(const Tensor<B, R, K>& mask) : ref(mask.ref()) {}  // NOLINT: implicit by design
  template <class B, int R, class K>
  AttentionMask(const std::optional<Tensor<B, R, K>>& mask)  // NOLINT
      : ref(mask ? mask->ref() : nullptr) {}
  kiln::detail::TensorRef ref;
};

template <class B>
struct AttentionOutput {
  /// [N, L, E].
  Tensor<B, 3> output;
  /// Attention weights averaged over heads [N, L, S] (torch's need_weights=True).
  Tensor<B, 3> weights;
};

/// torch.nn.MultiheadAttention(embed_dim, num_heads, dropout, batch_first=True).
template <class B>
struct MultiHeadAttention {
  Tensor<B, 2> in_proj_weight;
  std::optional<Tensor<B, 1>> in_proj_bias;
  Linear<B> out_proj;
  int64_t num_heads = 1;
  /// Dropout probability on the attention weights (training mode only).
  double dropout = 0.0;
  bool training = true;

  KILN_MODULE(MultiHeadAttention, in_proj_weight, in_proj_bias, out_proj);
  void kiln_set_training(bool on) { training = on; }

  /// query [N, L, E], key / value [N, S, E] -> the output and the head-averaged weights.
  AttentionOutput<B> forward(const Tensor<B, 3>& query, const Tensor<B, 3>& key,
                             const Tensor<B, 3>& value, AttentionMask key_padding_mask = {},
                             AttentionMask attn_mask = {},
                             std::source_location loc = std::source_location::current()) const {
    kiln::detail::TensorRef weights;
    Tensor<B, 3> out(run(query, key, value, key_padding_mask, attn_mask, &weights, loc));
    return {std::move(out), Tensor<B, 3>(weights)};
  }
  /// The output alone (torch's need_weights=False).
  Tensor<B, 3> attend(const Tensor<B, 3>& query, const Tensor<B, 3>& key, const Tensor<B, 3>& value,
                      AttentionMask key_padding_mask = {}, AttentionMask attn_mask = {},
                      std::source_location loc = std::source_location::current()) const {
    return Tensor<B, 3>(run(query, key, value, key_padding_mask, attn_mask, nullptr, loc));
  }

 private:
  kiln::detail::TensorRef run(const Tensor<B, 3>& query, const Tensor<B, 3>& key,
                              const Tensor<B, 3>& value, const AttentionMask& key_padding_mask,
                              const AttentionMask& attn_mask, kiln::detail::TensorRef* weights,
                              const std::source_location& loc) const {
    return detail::MultiHeadAttentionForward(
        query.ref(), key.ref(), value.ref(), in_proj_weight.ref(),
        in_proj_bias ? in_proj_bias->ref() : nullptr, out_proj.weight.ref(),
        out_proj.bias ? out_proj.bias->ref() : nullptr, key_padding_mask.ref, attn_mask.ref,
        detail::AttentionArgs{num_heads, dropout, training}, B::kTraits, weights,
        "MultiHeadAttention", loc);
  }
};

struct MultiHeadAttentionConfig {
  MultiHeadAttentionConfig(int64_t embed_dim, int64_t num_heads)
      : embed_dim(embed_dim), num_heads(num_heads) {}
  MultiHeadAttentionConfig with_dropout(double p) const {
    MultiHeadAttentionConfig c = *this;
    c.dropout = p;
    return c;
  }
  MultiHeadAttentionConfig with_bias(bool on) const {
    MultiHeadAttentionConfig c = *this;
    c.bias = on;
    return c;
  }
  /// torch's initialisation: in_proj_weight xavier_uniform, in_proj_bias 0, out_proj.weight
  /// U(-1/sqrt(E), 1/sqrt(E)) (Linear's), out_proj.bias 0.
  template <class B>
  MultiHeadAttention<B> init(const Device& device,
                             std::source_location loc = std::source_location::current()) const {
    if (embed_dim < 1 || num_heads < 1 || embed_dim % num_heads != 0) {
      kiln::detail::ThrowOpError("MultiHeadAttentionConfig",
                                 "num_heads must divide embed_dim (both >= 1)", {}, loc);
    }
    if (!(dropout >= 0.0 && dropout < 1.0)) {
      kiln::detail::ThrowOpError("MultiHeadAttentionConfig", "dropout must be in [0, 1)", {}, loc);
    }
    // torch's xavier_uniform_ on the [3E, E] matrix: fan_in = E, fan_out = 3E.
    Tensor<B, 2> w(detail::InitParameter(Initializer::XavierUniform(), {3 * embed_dim, embed_dim},
                                         0, B::kTraits, device, "MultiHeadAttention", loc));
    std::optional<Tensor<B, 1>> b;
    if (bias) {
      b.emplace(detail::InitParameter(Initializer::Zeros(), {3 * embed_dim}, 0, B::kTraits, device,
                                      "MultiHeadAttention", loc));
    }
    auto out = LinearConfig(embed_dim, embed_dim).with_bias(bias);
    if (bias) out = out.with_bias_initializer(Initializer::Zeros());
    return MultiHeadAttention<B>{std::move(w), std::move(b), out.init<B>(device, loc), num_heads,
                                 dropout};
  }
  int64_t embed_dim;
  int64_t num_heads;
  double dropout = 0.0;
  bool bias = true;
};

enum class Activation { kRelu, kGelu };

/// torch.nn.TransformerEncoderLayer(batch_first=True).
template <class B>
struct TransformerEncoderLayer {
  MultiHeadAttention<B> self_attn;
  Linear<B> linear1;
  Dropout dropout;
  Linear<B> linear2;
  LayerNorm<B> norm1, norm2;
  Dropout dropout1, dropout2;
  bool norm_first = false;
  Activation activation = Activation::kRelu;

  KILN_MODULE(TransformerEncoderLayer, self_attn, linear1, dropout, linear2, norm1, norm2, dropout1,
              dropout2);

  /// src [N, L, E]; masks as MultiHeadAttention's (src_mask is the attn_mask).
  Tensor<B, 3> forward(const Tensor<B, 3>& src, AttentionMask src_mask = {},
                       AttentionMask src_key_padding_mask = {},
                       std::source_location loc = std::source_location::current()) const {
    auto sa = [&](const Tensor<B, 3>& x) {
      return dropout1.forward(self_attn.attend(x, x, x, src_key_padding_mask, src_mask, loc), loc);
    };
    auto ff = [&](const Tensor<B, 3>& x) {
      Tensor<B, 3> h = linear1.forward(x, loc);
      h = activation == Activation::kGelu ? kiln::activation::gelu(h, loc)
                                          : kiln::activation::relu(h, loc);
      return dropout2.forward(linear2.forward(dropout.forward(h, loc), loc), loc);
    };
    Tensor<B, 3> x = src;
    if (norm_first) {
      x = x.add(sa(norm1.forward(x, loc)), loc);
      x = x.add(ff(norm2.forward(x, loc)), loc);
    } else {
      x = norm1.forward(x.add(sa(x), loc), loc);
      x = norm2.forward(x.add(ff(x), loc), loc);
    }
    return x;
  }
};

struct TransformerEncoderLayerConfig {
  TransformerEncoderLayerConfig(int64_t d_model, int64_t nhead) : d_model(d_model), nhead(nhead) {}
  TransformerEncoderLayerConfig with_dim_feedforward(int64_t v) const {
    auto c = *this;
    c.dim_feedforward = v;
    return c;
  }
  TransformerEncoderLayerConfig with_dropout(double v) const {
    auto c = *this;
    c.dropout = v;
    return c;
  }
  TransformerEncoderLayerConfig with_activation(Activation v) const {
    auto c = *this;
    c.activation = v;
    return c;
  }
  TransformerEncoderLayerConfig with_norm_first(bool v) const {
    auto c = *this;
    c.norm_first = v;
    return c;
  }
  TransformerEncoderLayerConfig with_layer_norm_eps(double v) const {
    auto c = *this;
    c.layer_norm_eps = v;
    return c;
  }
  template <class B>
  TransformerEncoderLayer<B> init(
      const Device& device, std::source_location loc = std::source_location::current()) const {
    return TransformerEncoderLayer<B>{
        MultiHeadAttentionConfig(d_model, nhead).with_dropout(dropout).init<B>(device, loc),
        LinearConfig(d_model, dim_feedforward).init<B>(device, loc),
        DropoutConfig(dropout).init(loc),
        LinearConfig(dim_feedforward, d_model).init<B>(device, loc),
        LayerNormConfig(d_model).with_eps(layer_norm_eps).init<B>(device, loc),
        LayerNormConfig(d_model).with_eps(layer_norm_eps).init<B>(device, loc),
        DropoutConfig(dropout).init(loc),
        DropoutConfig(dropout).init(loc),
        norm_first,
        activation};
  }
  int64_t d_model;
  int64_t nhead;
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  Activation activation = Activation::kRelu;
  bool norm_first = false;
  double layer_norm_eps = 1e-5;
};

/// torch.nn.TransformerEncoder: `layers` applied in turn, then the optional final norm.
template <class B>
struct TransformerEncoder {
  std::vector<TransformerEncoderLayer<B>> layers;
  std::optional<LayerNorm<B>> norm;
  KILN_MODULE(TransformerEncoder, layers, norm);

  Tensor<B, 3> forward(const Tensor<B, 3>& src, AttentionMask mask = {},
                       AttentionMask src_key_padding_mask = {},
                       std::source_location loc = std::source_location::current()) const {
    Tensor<B, 3> x = src;
    for (const auto& layer : layers) x = layer.forward(x, mask, src_key_padding_mask, loc);
    if (norm) x = norm->forward(x, loc);
    return x;
  }
};

struct TransformerEncoderConfig {
  TransformerEncoderConfig(TransformerEncoderLayerConfig layer, int64_t num_layers)
      : layer(layer), num_layers(num_layers) {}
  /// A LayerNorm(d_model) after the last layer (torch's `norm` argument).
  TransformerEncoderConfig with_final_norm(bool v) const {
    auto c = *this;
    c.final_norm = v;
    return c;
  }
  template <class B>
  TransformerEncoder<B> init(const Device& device,
                             std::source_location loc = std::source_location::current()) const {
    TransformerEncoder<B> enc;
    for (int64_t i = 0; i < num_layers; ++i) enc.layers.push_back(layer.init<B>(device, loc));
    if (final_norm) {
      enc.norm = LayerNormConfig(layer.d_model).with_eps(layer.layer_norm_eps).init<B>(device, loc);
    }
    return enc;
  }
  TransformerEncoderLayerConfig layer;
  int64_t num_layers;
  bool final_norm = false;
};

/// Sinusoidal positional encodings [length, d_model] (d_model even): row `pos` has
/// sin(pos / max_period^(2i / d_model)) in column 2i and the cos in column 2i + 1.
template <class B>
Tensor<B, 2> sinusoidal_positional_encoding(
    int64_t length, int64_t d_model, const Device& device, double max_period = 10000.0,
    std::source_location loc = std::source_location::current()) {
  return Tensor<B, 2>(
      detail::SinusoidalPositionalEncoding(length, d_model, max_period, B::kTraits, device, loc));
}

}  // namespace kiln::nn
