// Multi-head attention on type-erased handles: the non-template part of frontend/nn/attention.h.
#pragma once

#include <cstdint>

#include "frontend/engine.h"

namespace kiln::nn::detail {

using kiln::detail::Loc;
using kiln::detail::TensorRef;

/// torch.nn.functional.multi_head_attention_forward with batch_first inputs:
/// query [N, L, E], key / value [N, S, E]; in_proj_weight [3E, E] (q, k, v rows), in_proj_bias
/// [3E] or null; out_proj_weight [E, E], out_proj_bias [E] or null. Masks may be null:
/// key_padding_mask [N, S] and attn_mask [L, S] or [N * heads, L, S], each bool (true = may not
/// attend) or float (added to the scores). `dropout_seed_source` is called only when
/// dropout > 0: attention weights are dropped with probability `dropout` (scaled by 1 / (1 - p)).
/// Returns the output [N, L, E]; *weights (when non-null) gets the attention weights averaged
/// over heads [N, L, S] (before dropout, like torch).
struct AttentionArgs {
  int64_t num_heads = 1;
  double dropout = 0.0;
  bool training = false;
};
TensorRef MultiHeadAttentionForward(const TensorRef& query, const TensorRef& key,
                                    const TensorRef& value, const TensorRef& in_proj_weight,
                                    const TensorRef& in_proj_bias, const TensorRef& out_proj_weight,
                                    const TensorRef& out_proj_bias,
                                    const TensorRef& key_padding_mask, const TensorRef& attn_mask,
                                    const AttentionArgs& args, const BackendTraits& backend,
                                    TensorRef* weights, const char* name, const Loc& loc);

/// sin / cos positional encodings [length, d_model] (Vaswani et al.): even columns
/// sin(pos / 10000^(2i / d_model)), odd columns the cos of the same angle.
TensorRef SinusoidalPositionalEncoding(int64_t length, int64_t d_model, double max_period,
                                       const BackendTraits& backend, const Device& device,
                                       const Loc& loc);

}  // namespace kiln::nn::detail
