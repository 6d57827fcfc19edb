// A BERT encoder imported from ONNX (frontend/onnx), the second way kiln runs
// all-MiniLM-L6-v2: the PyTorch 2.x export of Hugging Face's BertModel instead of its
// model.safetensors loaded into kiln modules (bert.h). Same tokenizer, pooling and output:
//
//   auto encoder = kiln::text::OnnxBertEncoder::Load("model.onnx");     // StatusOr
//   Tensor<B, 2> embeddings = kiln::text::sentence_embeddings<B>(*encoder, batch, device);
//
// tests/text/fixtures/export_minilm_onnx.py writes such a model. kiln compiles static shapes, so
// the model is imported once per [batch, length] of the encodings it sees (the weights are read
// once per shape and shared by every call of it); the imported graph then runs lazily with the
// ops around it (CallGraph), on any backend.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "frontend/engine.h"
#include "frontend/tensor.h"
#include "frontend/text/bert.h"
#include "frontend/text/wordpiece.h"
#include "ir/graph.h"
#include "ir/tensor_data.h"

namespace kiln::text {

/// An ONNX BERT encoder: inputs input_ids and attention_mask and, where the model has it,
/// token_type_ids (int64 [batch, length], by those names); the first output the last hidden
/// state, f32 [batch, length, hidden]. Copies share the imports.
class OnnxBertEncoder {
 public:
  /// Checks that `path` imports (at [1, 8]) with those inputs and that output; the error says
  /// what is missing.
  static absl::StatusOr<OnnxBertEncoder> Load(const std::string& path);

  /// The last hidden state of a batch: [batch, length, hidden]. Throws kiln::Error.
  template <class B>
  Tensor<B, 3> forward(const Tensor<B, 2, Int>& input_ids, const Tensor<B, 2, Int>& attention_mask,
                       const Tensor<B, 2, Int>& token_type_ids,
                       std::source_location loc = std::source_location::current()) const {
    const std::vector<detail::TensorRef> outputs =
        Call(input_ids.ref(), attention_mask.ref(), token_type_ids.ref(), loc);
    return Tensor<B, 3>(outputs[0], loc);
  }

  const std::string& path() const { return path_; }
  /// The model's default-domain opset and producer ("pytorch 2.15.0").
  int64_t opset() const { return opset_; }
  const std::string& producer() const { return producer_; }

 private:
  struct Imported {
    ir::Graph graph;
    // Per parameter of `graph`: an input (0 input_ids, 1 attention_mask, 2 token_type_ids) or a
    // weight (-1), with its value.
    std::vector<int> input_of_parameter;
    std::vector<std::shared_ptr<const ir::TensorData>> weights;
    std::vector<std::pair<runtime::DeviceId, std::vector<detail::TensorRef>>> weight_refs;
  };
  struct Shared {
    std::mutex mutex;
    std::map<std::pair<int64_t, int64_t>, std::shared_ptr<Imported>> by_shape;
  };

  std::vector<detail::TensorRef> Call(const detail::TensorRef& ids, const detail::TensorRef& mask,
                                      const detail::TensorRef& types,
                                      const std::source_location& loc) const;
  absl::StatusOr<std::shared_ptr<Imported>> ImportFor(int64_t batch, int64_t length) const;

  std::string path_;
  int64_t opset_ = 0;
  std::string producer_;
  bool has_token_types_ = true;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
};

/// sentence_embeddings (bert.h) on the ONNX encoder: the same mean pooling and normalisation.
/// B is not deduced (the encoder holds no backend): sentence_embeddings<B>(encoder, ...).
template <class B>
Tensor<B, 2> sentence_embeddings(const OnnxBertEncoder& encoder, const BatchEncoding& batch,
                                 const Device& device,
                                 std::source_location loc = std::source_location::current()) {
  return internal::SentenceEmbeddings<B>(
      [&](const Tensor<B, 2, Int>& ids, const Tensor<B, 2, Int>& mask,
          const Tensor<B, 2, Int>& types) { return encoder.forward(ids, mask, types, loc); },
      batch, device, loc);
}

}  // namespace kiln::text
