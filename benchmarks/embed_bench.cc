// kiln's rows of benchmarks/peers/embed_peers.py: all-MiniLM-L6-v2 sentence embeddings on
// kiln::Cpu (threads: KILN_NUM_THREADS), both ways kiln runs the model (docs/text.md): the
// safetensors weights in kiln's BERT modules, and the PyTorch 2.x ONNX export through the
// importer. Tokenizes SENTENCES_FILE (one sentence a line) with kiln's tokenizer, padded to
// --length, in batches of --batch, and times sentence_embeddings (tokens already encoded) after
// two warm-up batches (compile and cache fill).
//
//   embed_bench --model DIR [--onnx MODEL.onnx] SENTENCES_FILE [--batch 32] [--length 128]
//               [--min-time 3] [--output PREFIX]
//
// Prints JSON {"safetensors": {...}, "onnx": {...}} with seconds per batch (the best of the
// repetitions' means) and sentences per second; --output PREFIX writes each way's embeddings of
// the first batch as raw float32 (PREFIX.safetensors.f32, PREFIX.onnx.f32) for the peers'
// comparison.
#include <kiln/kiln.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "frontend/text/bert.h"
#include "frontend/text/bert_onnx.h"

namespace {

using B = kiln::Cpu;

int Fail(const std::string& msg) {
  std::fprintf(stderr, "embed_bench: %s\n", msg.c_str());
  return 1;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best mean seconds per call over 3 repetitions of at least min_time / 3 each.
double Time(const std::function<void()>& run, double min_time) {
  run();
  run();
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    int calls = 0;
    const double start = Now();
    do {
      run();
      ++calls;
    } while (Now() - start < min_time / 3);
    best = std::min(best, (Now() - start) / calls);
  }
  return best;
}

void WriteF32(const std::string& path, const std::vector<float>& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(float)));
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, onnx_path, sentences_path, output;
  int64_t batch_size = 32, length = 128;
  double min_time = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (arg == "--model") {
      model_dir = value();
    } else if (arg == "--onnx") {
      onnx_path = value();
    } else if (arg == "--batch") {
      batch_size = std::atoll(value().c_str());
    } else if (arg == "--length") {
      length = std::atoll(value().c_str());
    } else if (arg == "--min-time") {
      min_time = std::atof(value().c_str());
    } else if (arg == "--output") {
      output = value();
    } else if (!arg.empty() && arg[0] != '-') {
      sentences_path = arg;
    } else {
      return Fail("unknown flag " + arg);
    }
  }
  if (model_dir.empty() || sentences_path.empty() || batch_size < 1 || length < 2) {
    return Fail(
        "usage: embed_bench --model DIR [--onnx MODEL.onnx] SENTENCES_FILE [--batch N] "
        "[--length L] [--min-time S] [--output PREFIX]");
  }
  std::vector<std::string> sentences;
  {
    std::ifstream in(sentences_path);
    if (!in) return Fail("cannot open " + sentences_path);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) sentences.push_back(line);
    }
  }
  if (static_cast<int64_t>(sentences.size()) < batch_size) {
    return Fail("fewer sentences than one batch in " + sentences_path);
  }
  sentences.resize(static_cast<size_t>(batch_size));
  try {
    auto config = kiln::text::BertConfig::FromJsonFile(model_dir + "/config.json");
    if (!config.ok()) return Fail(std::string(config.status().message()));
    auto tokenizer = kiln::text::BertTokenizer::FromVocabFile(model_dir + "/vocab.txt");
    if (!tokenizer.ok()) return Fail(std::string(tokenizer.status().message()));
    auto batch = tokenizer->EncodeBatch(sentences, length, kiln::text::Padding::kMaxLength);
    if (!batch.ok()) return Fail(std::string(batch.status().message()));

    const B::Device device;
    std::printf("{\"batch\": %lld, \"length\": %lld", static_cast<long long>(batch_size),
                static_cast<long long>(length));
    auto report = [&](const char* name, const std::function<std::vector<float>()>& embed) {
      std::vector<float> first = embed();
      const double seconds = Time([&] { (void)embed(); }, min_time);
      std::printf(", \"%s\": {\"seconds_per_batch\": %.6f, \"sentences_per_second\": %.2f}", name,
                  seconds, static_cast<double>(batch_size) / seconds);
      if (!output.empty()) WriteF32(output + "." + name + ".f32", first);
    };
    kiln::text::BertModel<B> model = config->init<B>(device);
    kiln::text::load_bert_weights(model_dir + "/model.safetensors", model);
    report("safetensors", [&] {
      return kiln::text::sentence_embeddings(model, *batch, device).to_vector<float>();
    });
    if (!onnx_path.empty()) {
      auto encoder = kiln::text::OnnxBertEncoder::Load(onnx_path);
      if (!encoder.ok()) return Fail(std::string(encoder.status().message()));
      report("onnx", [&] {
        return kiln::text::sentence_embeddings<B>(*encoder, *batch, device).to_vector<float>();
      });
    }
    std::printf("}\n");
  } catch (const kiln::Error& e) {
    return Fail(e.what());
  }
  return 0;
}
