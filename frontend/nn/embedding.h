// nn::Embedding: a lookup table (torch.nn.Embedding): weight [num_embeddings, embedding_dim],
// initialised N(0, 1); forward(indices [...]) -> [..., embedding_dim].
//
//   auto emb = kiln::nn::EmbeddingConfig(1000, 64).with_padding_idx(0).init<B>(device);
//   Tensor<B, 3> h = emb.forward(tokens);  // tokens: Tensor<B, 2, Int> [batch, seq]
#pragma once

#include <cstdint>
#include <optional>
#include <source_location>
#include <vector>

#include "frontend/module.h"
#include "frontend/nn/init.h"
#include "frontend/tensor.h"
#include "frontend/tensor_ops.h"

namespace kiln::nn {

template <class B>
struct Embedding {
  Tensor<B, 2> weight;
  /// The row init() zeroes (torch's padding_idx). Its gradient is not masked: freeze the row by
  /// other means if it must stay zero during training.
  std::optional<int64_t> padding_idx;
  KILN_MODULE(Embedding, weight);

  /// indices: integer tensor of any rank, values in [0, num_embeddings) (a run-time error
  /// otherwise).
  template <int R>
  Tensor<B, R + 1> forward(const Tensor<B, R, Int>& indices,
                           std::source_location loc = std::source_location::current()) const {
    const kiln::detail::TensorRef flat = kiln::detail::Reshape(indices.ref(), {-1}, loc);
    const kiln::detail::TensorRef rows = kiln::detail::IndexSelect(weight.ref(), 0, flat, loc);
    std::vector<int64_t> shape;
    for (int64_t d : indices.shape()) shape.push_back(d);
    shape.push_back(weight.dim(1));
    return Tensor<B, R + 1>(kiln::detail::Reshape(rows, shape, loc));
  }
};

struct EmbeddingConfig {
  EmbeddingConfig(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings(num_embeddings), embedding_dim(embedding_dim) {}
  EmbeddingConfig with_padding_idx(int64_t idx) const {
    EmbeddingConfig c = *this;
    c.padding_idx = idx;
    return c;
  }
  EmbeddingConfig with_initializer(Initializer init) const {
    EmbeddingConfig c = *this;
    c.initializer = init;
    return c;
  }
  template <class B>
  Embedding<B> init(const Device& device,
                    std::source_location loc = std::source_location::current()) const {
    if (num_embeddings < 1 || embedding_dim < 1) {
      kiln::detail::ThrowOpError("EmbeddingConfig", "num_embeddings and embedding_dim must be >= 1",
                                 {}, loc);
    }
    std::optional<int64_t> pad = padding_idx;
    if (pad && *pad < 0) *pad += num_embeddings;  // torch accepts negative indices
    if (pad && (*pad < 0 || *pad >= num_embeddings)) {
      kiln::detail::ThrowOpError("EmbeddingConfig", "padding_idx must be within num_embeddings", {},
                                 loc);
    }
    Tensor<B, 2> weight(detail::InitParameter(initializer, {num_embeddings, embedding_dim}, 0,
                                              B::kTraits, device, "Embedding", loc));
    if (pad) {
      // Zero the padding row: weight * (row != pad).
      auto keep = Tensor<B, 1, Int>::arange(0, num_embeddings, device).ne(*pad).to_float();
      weight = Tensor<B, 2>(detail::MarkParameter(
          weight.mul(keep.template reshape<2>({num_embeddings, 1})).realize().ref(), loc));
    }
    return Embedding<B>{std::move(weight), pad};
  }
  int64_t num_embeddings;
  int64_t embedding_dim;
  std::optional<int64_t> padding_idx;
  Initializer initializer = Initializer::Normal(0.0, 1.0);
};

}  // namespace kiln::nn
