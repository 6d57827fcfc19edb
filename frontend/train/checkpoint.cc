#include "frontend/train/checkpoint.h"

#include <charconv>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "frontend/autograd.h"
#include "frontend/train/safetensors.h"
#include "nlohmann/json.hpp"

#ifndef KILN_VERSION_STRING
#error "KILN_VERSION_STRING must be defined by the build (the project version)"
#endif

namespace kiln::train {
namespace {

using Json = nlohmann::json;

constexpr char kFormatKey[] = "kiln.format";
constexpr char kFormatName[] = "kiln checkpoint";
constexpr char kFormatVersionKey[] = "kiln.format_version";
constexpr char kVersionKey[] = "kiln.version";
constexpr char kTreeKey[] = "kiln.module_tree";
constexpr char kEpochKey[] = "kiln.epoch";
constexpr char kStepKey[] = "kiln.step";
constexpr char kRngKey[] = "kiln.rng_state";
constexpr char kOptimizer[] = "optimizer/";
constexpr char kScheduler[] = "scheduler/";
constexpr char kExtra[] = "extra/";
constexpr char kUser[] = "user/";

[[noreturn]] void Fail(const std::string& message, const std::source_location& loc) {
  detail::ThrowStatus(absl::InvalidArgumentError(message), loc);
}

std::string TypeText(ir::DType dtype, const ir::Shape& shape) {
  return absl::StrCat(ir::DTypeName(dtype), ir::ShapeToString(shape));
}

template <class T>
std::optional<T> ParseNumber(const std::string& text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// "1.0" -> {1, 0}.
std::optional<std::pair<int, int>> ParseVersion(const std::string& text) {
  const size_t dot = text.find('.');
  if (dot == std::string::npos) return std::nullopt;
  const auto major = ParseNumber<int>(text.substr(0, dot));
  const auto minor = ParseNumber<int>(text.substr(dot + 1));
  if (!major || !minor) return std::nullopt;
  return std::make_pair(*major, *minor);
}

bool StartsWith(const std::string& s, std::string_view prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

std::string CheckpointFormatVersion() {
  return absl::StrCat(kCheckpointFormatMajor, ".", kCheckpointFormatMinor);
}

const char* KilnVersion() { return KILN_VERSION_STRING; }

std::map<std::string, ir::TensorData> RealizeState(const StateRefs& state,
                                                   std::source_location loc) {
  std::vector<detail::TensorRef> refs;
  refs.reserve(state.size());
  for (const auto& [name, ref] : state) refs.push_back(ref);
  detail::Realize(refs, loc);
  std::map<std::string, ir::TensorData> out;
  for (const auto& [name, ref] : state) {
    if (!out.emplace(name, detail::Data(ref, loc)).second) {
      Fail(absl::StrCat("checkpoint: two tensors of the module state are named '", name, "'"), loc);
    }
  }
  return out;
}

std::string StateMismatches(const StateRefs& expected,
                            const std::map<std::string, ir::TensorData>& values, bool strict) {
  std::vector<std::string> problems;
  std::set<std::string> names;
  for (const auto& [name, ref] : expected) {
    names.insert(name);
    const ir::TensorType& type = detail::TypeOf(ref);
    const auto it = values.find(name);
    if (it == values.end()) {
      problems.push_back(
          absl::StrCat("missing '", name, "' (", TypeText(type.dtype, type.shape), ")"));
      continue;
    }
    const ir::TensorData& data = it->second;
    if (data.shape() != type.shape) {
      problems.push_back(absl::StrCat("'", name, "': shape ", ir::ShapeToString(data.shape()),
                                      " in the file, ", ir::ShapeToString(type.shape),
                                      " in the module"));
    }
    if (data.dtype() != type.dtype) {
      problems.push_back(absl::StrCat("'", name, "': dtype ", ir::DTypeName(data.dtype()),
                                      " in the file, ", ir::DTypeName(type.dtype),
                                      " in the module"));
    }
  }
  if (strict) {
    for (const auto& [name, data] : values) {
      if (!names.count(name)) {
        problems.push_back(absl::StrCat("unexpected '", name, "' (",
                                        TypeText(data.dtype(), data.shape()),
                                        ") is not in the module"));
      }
    }
  }
  return absl::StrJoin(problems, "\n  ");
}

std::vector<detail::TensorRef> ApplyState(const StateRefs& expected,
                                          const std::map<std::string, ir::TensorData>& values,
                                          bool strict, const std::string& what,
                                          const std::source_location& loc) {
  const std::string problems = StateMismatches(expected, values, strict);
  if (!problems.empty()) {
    Fail(absl::StrCat("load: ", what, " does not match the module:\n  ", problems), loc);
  }
  std::vector<detail::TensorRef> refs;
  refs.reserve(expected.size());
  for (const auto& [name, ref] : expected) {
    detail::TensorRef loaded = detail::FromTensorData(values.at(name), detail::DeviceOf(ref));
    // A parameter that required a gradient still does after loading (optimizers and backward
    // find it as before).
    if (detail::RequiresGrad(ref)) loaded = detail::SetRequireGrad(loaded, true, loc);
    refs.push_back(std::move(loaded));
  }
  return refs;
}

void SaveCheckpoint(const std::string& path, const StateRefs& state, const Checkpoint& checkpoint,
                    std::source_location loc) {
  SafetensorsFile file;
  file.tensors = RealizeState(state, loc);
  Json tree = Json::array();
  for (const auto& [name, ref] : state) {
    const ir::TensorType& type = detail::TypeOf(ref);
    tree.push_back(Json::array({name, ir::DTypeName(type.dtype), type.shape}));
  }
  auto add_tensors = [&](const char* prefix, const std::map<std::string, ir::TensorData>& tensors) {
    for (const auto& [name, data] : tensors) {
      if (!file.tensors.emplace(prefix + name, data).second) {
        Fail(absl::StrCat("save_checkpoint: tensor name '", prefix, name, "' is used twice"), loc);
      }
    }
  };
  auto add_values = [&](const char* prefix, const std::map<std::string, std::string>& values) {
    for (const auto& [key, value] : values) file.metadata[prefix + key] = value;
  };
  add_tensors(kOptimizer, checkpoint.optimizer.tensors);
  add_tensors(kScheduler, checkpoint.scheduler.tensors);
  add_tensors(kExtra, checkpoint.extra_tensors);
  add_values(kOptimizer, checkpoint.optimizer.values);
  add_values(kScheduler, checkpoint.scheduler.values);
  add_values(kUser, checkpoint.user);
  file.metadata[kFormatKey] = kFormatName;
  file.metadata[kFormatVersionKey] = CheckpointFormatVersion();
  file.metadata[kVersionKey] = KilnVersion();
  file.metadata[kTreeKey] = tree.dump();
  if (checkpoint.epoch) file.metadata[kEpochKey] = std::to_string(*checkpoint.epoch);
  if (checkpoint.step) file.metadata[kStepKey] = std::to_string(*checkpoint.step);
  if (checkpoint.rng_state) file.metadata[kRngKey] = std::to_string(*checkpoint.rng_state);

  const absl::Status status = WriteSafetensors(path, file);
  if (!status.ok()) {
    Fail(absl::StrCat("save_checkpoint: ", status.message(), " (", path,
                      " is unchanged if it existed)"),
         loc);
  }
}

std::map<std::string, ir::TensorData> ReadStateDict(const std::string& path,
                                                    std::source_location loc) {
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
  if (!file.ok()) detail::ThrowStatus(file.status(), loc);
  // A kiln checkpoint holds more than the model: keep only the module's tensors.
  std::map<std::string, ir::TensorData> out;
  for (auto& [name, data] : file->tensors) {
    if (file->metadata.count(kFormatKey) &&
        (StartsWith(name, kOptimizer) || StartsWith(name, kScheduler) ||
         StartsWith(name, kExtra))) {
      continue;
    }
    out.emplace(name, std::move(data));
  }
  return out;
}

namespace {
Checkpoint FromSafetensors(absl::StatusOr<SafetensorsFile> file, const std::string& path,
                           const std::source_location& loc) {
  if (!file.ok()) detail::ThrowStatus(file.status(), loc);
  const auto& meta = file->metadata;
  auto get = [&](const char* key) -> const std::string* {
    const auto it = meta.find(key);
    return it == meta.end() ? nullptr : &it->second;
  };
  const std::string* format = get(kFormatKey);
  if (format == nullptr || *format != kFormatName) {
    Fail(absl::StrCat("load_checkpoint: ", path,
                      " is not a kiln checkpoint (no \"kiln.format\" metadata); a plain state "
                      "dict (e.g. from PyTorch) loads with load_state_dict"),
         loc);
  }
  Checkpoint ckpt;
  const std::string* version = get(kFormatVersionKey);
  const std::optional<std::pair<int, int>> parsed = version ? ParseVersion(*version) : std::nullopt;
  if (!parsed || parsed->first != kCheckpointFormatMajor) {
    Fail(absl::StrCat("load_checkpoint: ", path, " has kiln checkpoint format version ",
                      version ? "'" + *version + "'" : "(none)", ", this kiln (", KilnVersion(),
                      ") reads format ", kCheckpointFormatMajor, ".x (writes ",
                      CheckpointFormatVersion(), ")"),
         loc);
  }
  ckpt.format_version = *version;
  if (const std::string* v = get(kVersionKey)) ckpt.kiln_version = *v;

  auto bad_meta = [&](const char* key, const std::string& value) {
    Fail(absl::StrCat("load_checkpoint: ", path, ": metadata \"", key, "\" = '", value,
                      "' is malformed"),
         loc);
  };
  if (const std::string* tree = get(kTreeKey)) {
    const Json json = Json::parse(*tree, nullptr, /*allow_exceptions=*/false);
    if (!json.is_array()) bad_meta(kTreeKey, *tree);
    for (const Json& item : json) {
      if (!item.is_array() || item.size() != 3 || !item[0].is_string() || !item[1].is_string() ||
          !item[2].is_array()) {
        bad_meta(kTreeKey, *tree);
      }
      const std::optional<ir::DType> dtype = ir::ParseDType(item[1].get<std::string>());
      if (!dtype) bad_meta(kTreeKey, *tree);
      ir::Shape shape;
      for (const Json& d : item[2]) {
        if (!d.is_number_integer()) bad_meta(kTreeKey, *tree);
        shape.push_back(d.get<int64_t>());
      }
      ckpt.module_tree.push_back(ModuleEntry{item[0].get<std::string>(), *dtype, std::move(shape)});
    }
  }
  if (const std::string* v = get(kEpochKey)) {
    ckpt.epoch = ParseNumber<int64_t>(*v);
    if (!ckpt.epoch) bad_meta(kEpochKey, *v);
  }
  if (const std::string* v = get(kStepKey)) {
    ckpt.step = ParseNumber<int64_t>(*v);
    if (!ckpt.step) bad_meta(kStepKey, *v);
  }
  if (const std::string* v = get(kRngKey)) {
    ckpt.rng_state = ParseNumber<uint64_t>(*v);
    if (!ckpt.rng_state) bad_meta(kRngKey, *v);
  }
  for (const auto& [key, value] : meta) {
    if (StartsWith(key, kOptimizer))
      ckpt.optimizer.values[key.substr(sizeof(kOptimizer) - 1)] = value;
    if (StartsWith(key, kScheduler))
      ckpt.scheduler.values[key.substr(sizeof(kScheduler) - 1)] = value;
    if (StartsWith(key, kUser)) ckpt.user[key.substr(sizeof(kUser) - 1)] = value;
  }
  for (auto& [name, data] : file->tensors) {
    if (StartsWith(name, kOptimizer)) {
      ckpt.optimizer.tensors.emplace(name.substr(sizeof(kOptimizer) - 1), std::move(data));
    } else if (StartsWith(name, kScheduler)) {
      ckpt.scheduler.tensors.emplace(name.substr(sizeof(kScheduler) - 1), std::move(data));
    } else if (StartsWith(name, kExtra)) {
      ckpt.extra_tensors.emplace(name.substr(sizeof(kExtra) - 1), std::move(data));
    } else {
      ckpt.model.emplace(name, std::move(data));
    }
  }
  return ckpt;
}
}  // namespace

Checkpoint ReadCheckpoint(const std::string& path, std::source_location loc) {
  return FromSafetensors(ReadSafetensors(path), path, loc);
}

Checkpoint ParseCheckpoint(std::span<const std::byte> bytes, const std::string& source,
                           std::source_location loc) {
  return FromSafetensors(ParseSafetensors(bytes, source), source, loc);
}

}  // namespace kiln::train
