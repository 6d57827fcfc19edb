// The C API (runtime/include/kiln_runtime.h) over runtime::blob::Model.
#include <cstring>
#include <exception>
#include <iterator>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/dtype.h"
#include "runtime/blob.h"
#include "runtime/blob_target.h"
#include "runtime/device.h"
#include "runtime/include/kiln_runtime.h"

struct kiln_model {
  std::unique_ptr<kiln::runtime::blob::Model> model;
  struct Info {
    std::string name;
    kiln_dtype dtype;
    std::vector<int64_t> shape;
    size_t size_bytes;
  };
  std::vector<Info> inputs, outputs;
};

namespace {

thread_local std::string last_error;

kiln_status Fail(kiln_status status, std::string message) {
  last_error = std::move(message);
  return status;
}

kiln_status FromStatus(const absl::Status& status, kiln_status bad_blob) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return KILN_OK;
    case absl::StatusCode::kNotFound:
      return Fail(KILN_ERROR_IO, std::string(status.message()));
    case absl::StatusCode::kFailedPrecondition:
      return Fail(KILN_ERROR_UNSUPPORTED, std::string(status.message()));
    case absl::StatusCode::kInvalidArgument:
      return Fail(bad_blob, std::string(status.message()));
    case absl::StatusCode::kOutOfRange:
      return Fail(KILN_ERROR_RUN, std::string(status.message()));
    default:
      return Fail(KILN_ERROR_INTERNAL, std::string(status.message()));
  }
}

// kiln_dtype's values are base::DType's (both follow the blob format's order).
static_assert(KILN_DTYPE_U64 == static_cast<int>(kiln::base::DType::kU64));
static_assert(std::size(kiln::base::kAllDTypes) == KILN_DTYPE_U64 + 1);

kiln_dtype DTypeOf(const std::string& name) {
  const std::optional<kiln::base::DType> dtype = kiln::base::ParseDType(name);
  // ParseBlob accepts only dtype names, so the fallback is unreachable.
  return dtype ? static_cast<kiln_dtype>(*dtype) : KILN_DTYPE_F32;
}

bool IsDType(kiln_dtype dtype) {
  return static_cast<int>(dtype) >= 0 && static_cast<int>(dtype) <= KILN_DTYPE_U64;
}

kiln_status Wrap(absl::StatusOr<std::unique_ptr<kiln::runtime::blob::Model>> loaded,
                 kiln_model** out) {
  if (!loaded.ok()) return FromStatus(loaded.status(), KILN_ERROR_BAD_BLOB);
  auto* model = new (std::nothrow) kiln_model;
  if (model == nullptr) return Fail(KILN_ERROR_INTERNAL, "out of memory");
  model->model = *std::move(loaded);
  const auto& signature = model->model->signature();
  for (const auto& [specs, infos] :
       {std::pair{&signature.inputs, &model->inputs}, {&signature.outputs, &model->outputs}}) {
    for (const auto& spec : *specs) {
      infos->push_back(
          {spec.name, DTypeOf(spec.dtype), spec.shape, static_cast<size_t>(spec.size_bytes)});
    }
  }
  *out = model;
  return KILN_OK;
}

kiln_status Info(const std::vector<kiln_model::Info>& infos, size_t index, kiln_tensor_info* out,
                 const char* what) {
  if (out == nullptr) return Fail(KILN_ERROR_INVALID_ARGUMENT, "kiln: null kiln_tensor_info");
  if (index >= infos.size()) {
    return Fail(KILN_ERROR_INVALID_ARGUMENT, std::string("kiln: ") + what + " " +
                                                 std::to_string(index) + " does not exist (" +
                                                 std::to_string(infos.size()) + ")");
  }
  const kiln_model::Info& info = infos[index];
  out->name = info.name.c_str();
  out->dtype = info.dtype;
  out->rank = info.shape.size();
  out->shape = info.shape.data();
  out->size_bytes = info.size_bytes;
  return KILN_OK;
}

}  // namespace

extern "C" {

const char* kiln_status_string(kiln_status status) {
  switch (status) {
    case KILN_OK:
      return "ok";
    case KILN_ERROR_INVALID_ARGUMENT:
      return "invalid argument";
    case KILN_ERROR_IO:
      return "i/o error";
    case KILN_ERROR_BAD_BLOB:
      return "bad blob";
    case KILN_ERROR_UNSUPPORTED:
      return "unsupported";
    case KILN_ERROR_RUN:
      return "run error";
    case KILN_ERROR_INTERNAL:
      return "internal";
  }
  return "unknown status";
}

const char* kiln_dtype_name(kiln_dtype dtype) {
  return IsDType(dtype) ? kiln::base::DTypeName(static_cast<kiln::base::DType>(dtype)) : "?";
}

size_t kiln_dtype_size(kiln_dtype dtype) {
  return IsDType(dtype)
             ? static_cast<size_t>(kiln::base::DTypeSize(static_cast<kiln::base::DType>(dtype)))
             : 0;
}

const char* kiln_last_error(void) { return last_error.c_str(); }

kiln_status kiln_model_load_file(const char* path, kiln_model** out) {
  if (out == nullptr) return Fail(KILN_ERROR_INVALID_ARGUMENT, "kiln: null output pointer");
  *out = nullptr;
  if (path == nullptr) return Fail(KILN_ERROR_INVALID_ARGUMENT, "kiln: null path");
  try {
    return Wrap(kiln::runtime::blob::Model::LoadFile(path), out);
  } catch (const std::exception& e) {
    return Fail(KILN_ERROR_INTERNAL, e.what());
  }
}

kiln_status kiln_model_load_memory(const void* data, size_t size, kiln_model** out) {
  return kiln_model_load_memory_on(data, size, nullptr, out);
}

// NULL, "", or "<target>[:<selector>]" where the target has a registered blob driver or names a
// kiln backend (whose missing driver Model::Load reports as unsupported). Model::Load says the
// same of other names, but its InvalidArgument would read as a bad blob here.
static bool ValidDevice(const char* device) {
  if (device == nullptr || *device == '\0') return true;
  const std::string d = device;
  const std::string target = d.substr(0, d.find(':'));
  return kiln::runtime::blob::FindTargetDriver(target) != nullptr ||
         kiln::runtime::ParseDeviceId(target).ok();
}

static kiln_status BadDevice(const char* device) {
  std::string targets;
  for (const std::string& name : kiln::runtime::blob::TargetDriverNames()) {
    targets += (targets.empty() ? "" : ", ") + name;
  }
  return Fail(KILN_ERROR_INVALID_ARGUMENT, std::string("kiln: unknown device \"") + device +
                                               "\" (expected one of " + targets +
                                               ", optionally with :<selector>)");
}

kiln_status kiln_model_load_file_on(const char* path, const char* device, kiln_model** out) {
  if (out == nullptr) return Fail(KILN_ERROR_INVALID_ARGUMENT, "kiln: null output pointer");
  *out = nullptr;
  if (path == nullptr) return Fail(KILN_ERROR_INVALID_ARGUMENT, "kiln: null path");
  if (!ValidDevice(device)) return BadDevice(device);
  try {
    kiln::runtime::blob::LoadOptions options;
    if (device != nullptr) options.device = device;
    return Wrap(kiln::runtime::blob::Model::LoadFile(path, options), out);
  } catch (const std::exception& e) {
    return Fail(KILN_ERROR_INTERNAL, e.what());
  }
}

kiln_status kiln_model_load_memory_on(const void* data, size_t size, const char* device,
                                      kiln_model** out) {
  if (out == nullptr) return Fail(KILN_ERROR_INVALID_ARGUMENT, "kiln: null output pointer");
  *out = nullptr;
  if (data == nullptr && size != 0) return Fail(KILN_ERROR_INVALID_ARGUMENT, "kiln: null data");
  if (!ValidDevice(device)) return BadDevice(device);
  try {
    kiln::runtime::blob::LoadOptions options;
    if (device != nullptr) options.device = device;
    return Wrap(kiln::runtime::blob::Model::LoadMemory(
                    std::span<const std::byte>(static_cast<const std::byte*>(data), size), options),
                out);
  } catch (const std::exception& e) {
    return Fail(KILN_ERROR_INTERNAL, e.what());
  }
}

const char* kiln_model_device(const kiln_model* model) {
  return model == nullptr ? nullptr : model->model->device().c_str();
}

void kiln_model_free(kiln_model* model) { delete model; }

const char* kiln_model_name(const kiln_model* model) {
  return model == nullptr ? nullptr : model->model->signature().name.c_str();
}

size_t kiln_model_num_inputs(const kiln_model* model) {
  return model == nullptr ? 0 : model->inputs.size();
}

size_t kiln_model_num_outputs(const kiln_model* model) {
  return model == nullptr ? 0 : model->outputs.size();
}

kiln_status kiln_model_input_info(const kiln_model* model, size_t index, kiln_tensor_info* out) {
  if (model == nullptr) return Fail(KILN_ERROR_INVALID_ARGUMENT, "kiln: null model");
  return Info(model->inputs, index, out, "input");
}

kiln_status kiln_model_output_info(const kiln_model* model, size_t index, kiln_tensor_info* out) {
  if (model == nullptr) return Fail(KILN_ERROR_INVALID_ARGUMENT, "kiln: null model");
  return Info(model->outputs, index, out, "output");
}

kiln_status kiln_model_run(const kiln_model* model, const void* const* inputs,
                           void* const* outputs) {
  if (model == nullptr) return Fail(KILN_ERROR_INVALID_ARGUMENT, "kiln: null model");
  if ((inputs == nullptr && !model->inputs.empty()) ||
      (outputs == nullptr && !model->outputs.empty())) {
    return Fail(KILN_ERROR_INVALID_ARGUMENT, "kiln: null input or output array");
  }
  try {
    absl::Status status =
        model->model->Run(std::span<const void* const>(inputs, model->inputs.size()),
                          std::span<void* const>(outputs, model->outputs.size()));
    return FromStatus(status, KILN_ERROR_INVALID_ARGUMENT);
  } catch (const std::exception& e) {
    return Fail(KILN_ERROR_INTERNAL, e.what());
  }
}

}  // extern "C"
