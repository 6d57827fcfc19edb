#include "frontend/text/bert_onnx.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "frontend/error.h"
#include "frontend/onnx/import.h"

namespace kiln::text {
namespace {

constexpr const char* kInputNames[] = {"input_ids", "attention_mask", "token_type_ids"};

}  // namespace

absl::StatusOr<OnnxBertEncoder> OnnxBertEncoder::Load(const std::string& path) {
  OnnxBertEncoder encoder;
  encoder.path_ = path;
  absl::StatusOr<std::vector<std::string>> input_names = onnx::ModelInputNames(path);
  if (!input_names.ok()) return input_names.status();
  const std::vector<std::string>& names = *input_names;
  for (int i = 0; i < 2; ++i) {
    if (std::find(names.begin(), names.end(), kInputNames[i]) == names.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": a BERT encoder needs an input '", kInputNames[i],
                       "' (the model's inputs: ", absl::StrJoin(names, ", "), ")"));
    }
  }
  // token_type_ids is optional: exports of models that never use segments drop it.
  encoder.has_token_types_ = std::find(names.begin(), names.end(), kInputNames[2]) != names.end();
  if (names.size() != (encoder.has_token_types_ ? 3u : 2u)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": a BERT encoder has the inputs input_ids, attention_mask and "
                     "optionally token_type_ids; the model's are ",
                     absl::StrJoin(names, ", ")));
  }
  // A probe import at [1, 8] checks that the model imports and what it outputs.
  onnx::ImportOptions probe_options;
  for (int i = 0; i < (encoder.has_token_types_ ? 3 : 2); ++i) {
    probe_options.input_shapes[kInputNames[i]] = {1, 8};
  }
  absl::StatusOr<onnx::ImportedModel> probe = onnx::ImportFile(path, probe_options);
  if (!probe.ok()) return probe.status();
  const ir::Graph& g = probe->graph;
  const ir::TensorType* out = g.outputs().empty() ? nullptr : &g.node(g.outputs()[0].node).type;
  if (out == nullptr || out->dtype != ir::DType::kF32 || out->shape.size() != 3 ||
      out->shape[0] != 1 || out->shape[1] != 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the first output must be the last hidden state, f32 [batch, length, hidden]",
        out == nullptr ? " (the model has no output)"
                       : absl::StrCat("; for [1, 8] inputs it is ", ir::TypeToString(*out))));
  }
  encoder.opset_ = probe->opset_version;
  encoder.producer_ = probe->producer;
  return encoder;
}

absl::StatusOr<std::shared_ptr<OnnxBertEncoder::Imported>> OnnxBertEncoder::ImportFor(
    int64_t batch, int64_t length) const {
  onnx::ImportOptions options;
  for (int i = 0; i < (has_token_types_ ? 3 : 2); ++i) {
    options.input_shapes[kInputNames[i]] = {batch, length};
  }
  absl::StatusOr<onnx::ImportedModel> model = onnx::ImportFile(path_, options);
  if (!model.ok()) return model.status();
  auto imported = std::make_shared<Imported>();
  for (ir::NodeId id : model->graph.Parameters()) {
    const std::string& name = model->graph.node(id).attrs.name;
    int input = -1;
    for (int i = 0; i < 3; ++i) {
      if (name == kInputNames[i]) input = i;
    }
    imported->input_of_parameter.push_back(input);
    if (input >= 0) {
      imported->weights.push_back(nullptr);
      continue;
    }
    auto it = model->weights.find(name);
    if (it == model->weights.end()) {
      return absl::InternalError(absl::StrCat(path_, ": parameter '", name, "' has no value"));
    }
    imported->weights.push_back(std::make_shared<const ir::TensorData>(std::move(it->second)));
  }
  imported->graph = std::move(model->graph);
  return imported;
}

std::vector<detail::TensorRef> OnnxBertEncoder::Call(const detail::TensorRef& ids,
                                                     const detail::TensorRef& mask,
                                                     const detail::TensorRef& types,
                                                     const std::source_location& loc) const {
  const ir::Shape& shape = detail::TypeOf(ids).shape;
  if (shape.size() != 2 || detail::TypeOf(mask).shape != shape ||
      detail::TypeOf(types).shape != shape) {
    detail::ThrowStatus(
        absl::InvalidArgumentError(absl::StrCat(
            "OnnxBertEncoder: input_ids ", ir::TypeToString(detail::TypeOf(ids)),
            ", attention_mask ", ir::TypeToString(detail::TypeOf(mask)), " and token_type_ids ",
            ir::TypeToString(detail::TypeOf(types)), " must all be [batch, length]")),
        loc);
  }
  const runtime::DeviceId device = ids->device;
  std::vector<detail::TensorRef> arguments;
  {
    // One import per shape, shared by copies of the encoder; the weights' device nodes are
    // made once per device, so a second call of a shape neither reads nor uploads them again.
    std::lock_guard<std::mutex> lock(shared_->mutex);
    std::shared_ptr<Imported>& entry = shared_->by_shape[{shape[0], shape[1]}];
    if (entry == nullptr) {
      absl::StatusOr<std::shared_ptr<Imported>> imported = ImportFor(shape[0], shape[1]);
      if (!imported.ok()) detail::ThrowStatus(imported.status(), loc);
      entry = *std::move(imported);
    }
    auto on_device = std::find_if(entry->weight_refs.begin(), entry->weight_refs.end(),
                                  [&](const auto& e) { return e.first == device; });
    if (on_device == entry->weight_refs.end()) {
      std::vector<detail::TensorRef> refs;
      for (const auto& value : entry->weights) {
        refs.push_back(value ? detail::FromSharedData(value, device) : nullptr);
      }
      entry->weight_refs.emplace_back(device, std::move(refs));
      on_device = entry->weight_refs.end() - 1;
    }
    const std::vector<detail::TensorRef>& weights = on_device->second;
    const detail::TensorRef* inputs[] = {&ids, &mask, &types};
    for (size_t i = 0; i < entry->input_of_parameter.size(); ++i) {
      const int input = entry->input_of_parameter[i];
      arguments.push_back(input >= 0 ? *inputs[input] : weights[i]);
    }
    return detail::CallGraph(entry->graph, arguments, loc);
  }
}

}  // namespace kiln::text
