#include "runtime/vulkan/blob_vulkan.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/blob_json.h"
#include "runtime/blob_target.h"
#include "runtime/vulkan/spirv_check.h"

namespace kiln::runtime::vulkan {
namespace {

using blob::Signature;
using blob::TensorSpec;
using blob::internal::json;
using blob::internal::Reader;

#define KILN_ASSIGN KILN_BLOB_ASSIGN

// Every size and count in a blob is far below these; larger values are hostile.
constexpr int64_t kMaxSlots = 1 << 20;
constexpr int64_t kMaxDimension = int64_t{1} << 40;

absl::StatusOr<std::shared_ptr<VulkanPlan>> ParseVulkanPlan(const json& j,
                                                            const Signature& signature,
                                                            std::span<const std::byte> spirv,
                                                            uint64_t weights_size,
                                                            const std::string& where) {
  const Reader r(where);
  auto plan = std::make_shared<VulkanPlan>();
  KILN_ASSIGN(features, r.Array(j, "vulkan plan", "features", 16));
  for (size_t i = 0; i < features->size(); ++i) {
    const json& f = (*features)[i];
    if (!f.is_string() || !IsVulkanFeature(f.get<std::string>())) {
      return r.Error(absl::StrCat("features[", i, "]"), "is not a known Vulkan feature");
    }
    plan->features.push_back(f.get<std::string>());
  }
  KILN_ASSIGN(api, r.Ints(j, "vulkan plan", "vulkan_version", 2, 1, 9));
  if (api.size() != 2) return r.Error("vulkan_version", "is not [major, minor]");
  plan->api_major = static_cast<uint32_t>(api[0]);
  plan->api_minor = static_cast<uint32_t>(api[1]);
  KILN_ASSIGN(alignment, r.Int(j, "vulkan plan", "offset_alignment", 1, 4096));
  if ((alignment & (alignment - 1)) != 0) {
    return r.Error("offset_alignment", "is not a power of two");
  }
  plan->offset_alignment = alignment;

  KILN_ASSIGN(slots, r.Array(j, "vulkan plan", "slots", kMaxSlots));
  std::vector<bool> output_bound(signature.outputs.size(), false);
  for (size_t i = 0; i < slots->size(); ++i) {
    const std::string path = absl::StrCat("slots[", i, "]");
    const json& s = (*slots)[i];
    VulkanPlan::Slot slot;
    KILN_ASSIGN(kind, r.String(s, path, "kind"));
    KILN_ASSIGN(size, r.Int(s, path, "size", 0, kMaxDimension));
    slot.kind = kind;
    slot.size = size;
    if (kind == "input" || kind == "output") {
      const std::vector<TensorSpec>& tensors =
          kind == "input" ? signature.inputs : signature.outputs;
      KILN_ASSIGN(index, r.Int(s, path, "index", 0, static_cast<int64_t>(tensors.size()) - 1));
      if (size > tensors[index].size_bytes) {
        return r.Error(path, absl::StrCat(size, " bytes, but ", kind, " ", index, " has ",
                                          tensors[index].size_bytes));
      }
      slot.index = index;
      if (kind == "output") output_bound[index] = true;
    } else if (kind == "arena") {
      KILN_ASSIGN(offset, r.Int(s, path, "offset", 0, kMaxDimension));
      if (offset % alignment != 0) {
        return r.Error(path,
                       absl::StrCat("arena offset ", offset, " is not a multiple of ", alignment));
      }
      slot.offset = offset;
    } else if (kind == "constant") {
      KILN_ASSIGN(offset, r.Int(s, path, "weights_offset", 0, kMaxDimension));
      if (static_cast<uint64_t>(offset) > weights_size ||
          static_cast<uint64_t>(size) > weights_size - static_cast<uint64_t>(offset)) {
        return r.Error(
            path, absl::StrCat("constant [", offset, ", +", size,
                               ") lies outside the weights section of ", weights_size, " bytes"));
      }
      slot.weights_offset = offset;
    } else if (kind == "error_flag") {
      if (size != 16) return r.Error(path, "an error flag has 16 bytes");
    } else {
      return r.Error(path, absl::StrCat("unknown slot kind \"", kind, "\""));
    }
    plan->slots.push_back(std::move(slot));
  }
  for (size_t k = 0; k < output_bound.size(); ++k) {
    if (!output_bound[k]) return r.Error("slots", absl::StrCat("no slot for output ", k));
  }

  KILN_ASSIGN(shaders, r.Array(j, "vulkan plan", "shaders", 1 << 16));
  const uint64_t spirv_words = spirv.size() / 4;
  for (size_t i = 0; i < shaders->size(); ++i) {
    const std::string path = absl::StrCat("shaders[", i, "]");
    const json& s = (*shaders)[i];
    VulkanPlan::Shader shader;
    KILN_ASSIGN(name, r.String(s, path, "name"));
    KILN_ASSIGN(offset, r.Int(s, path, "spirv_offset", 0, kMaxDimension));
    KILN_ASSIGN(words, r.Int(s, path, "spirv_words", 5, kMaxDimension));
    KILN_ASSIGN(buffers, r.Int(s, path, "buffers", 0, 64));
    KILN_ASSIGN(push, r.Int(s, path, "push_constant_bytes", 0, 128));
    if (push % 4 != 0) return r.Error(path, "push_constant_bytes is not a multiple of 4");
    if (offset % 4 != 0 || static_cast<uint64_t>(offset) / 4 > spirv_words ||
        static_cast<uint64_t>(words) > spirv_words - static_cast<uint64_t>(offset) / 4) {
      return r.Error(path, absl::StrCat("SPIR-V bytes [", offset, ", +", words * 4,
                                        ") are unaligned or outside the SPIR-V section of ",
                                        spirv.size(), " bytes"));
    }
    std::vector<uint32_t> module(static_cast<size_t>(words));
    std::memcpy(module.data(), spirv.data() + offset, module.size() * 4);
    absl::StatusOr<SpirvInfo> facts = InspectSpirv(module);
    if (!facts.ok()) {
      return r.Error(path, absl::StrCat("SPIR-V at byte ", offset,
                                        " of the SPIR-V section: ", facts.status().message()));
    }
    for (uint32_t capability : facts->capabilities) {
      const char* f = VulkanFeatureForCapability(capability);
      if (f == nullptr) continue;
      if (std::find(plan->features.begin(), plan->features.end(), f) == plan->features.end()) {
        return r.Error(
            path, absl::StrCat("the SPIR-V needs ", f, ", which the plan's features do not list"));
      }
    }
    for (int d = 0; d < 3; ++d) {
      if (facts->local_size[d] == 0 || facts->local_size[d] > 1024) {
        return r.Error(path, absl::StrCat("the SPIR-V's LocalSize is ", facts->local_size[d],
                                          " along axis ", d, " (1 .. 1024; 0: none declared)"));
      }
    }
    shader.name = name;
    shader.spirv_offset = static_cast<uint64_t>(offset);
    shader.spirv_words = static_cast<uint64_t>(words);
    shader.num_buffers = static_cast<int>(buffers);
    shader.push_constant_bytes = static_cast<int>(push);
    for (int d = 0; d < 3; ++d) shader.local_size[d] = facts->local_size[d];
    plan->shaders.push_back(std::move(shader));
  }

  KILN_ASSIGN(dispatches, r.Array(j, "vulkan plan", "dispatches", 1 << 20));
  for (size_t i = 0; i < dispatches->size(); ++i) {
    const std::string path = absl::StrCat("dispatches[", i, "]");
    const json& d = (*dispatches)[i];
    VulkanPlan::Dispatch dispatch;
    KILN_ASSIGN(shader,
                r.Int(d, path, "shader", 0, static_cast<int64_t>(plan->shaders.size()) - 1));
    const VulkanPlan::Shader& sh = plan->shaders[static_cast<size_t>(shader)];
    KILN_ASSIGN(buffers,
                r.Ints(d, path, "buffers", 64, 0, static_cast<int64_t>(plan->slots.size()) - 1));
    if (static_cast<int>(buffers.size()) != sh.num_buffers) {
      return r.Error(path, absl::StrCat(buffers.size(), " buffers, shader ", shader, " takes ",
                                        sh.num_buffers));
    }
    KILN_ASSIGN(push, r.Ints(d, path, "push_constants", 128, 0, 255));
    if (static_cast<int>(push.size()) != sh.push_constant_bytes) {
      return r.Error(path, absl::StrCat(push.size(), " push-constant bytes, shader ", shader,
                                        " takes ", sh.push_constant_bytes));
    }
    KILN_ASSIGN(groups, r.Ints(d, path, "groups", 3, 0, std::numeric_limits<uint32_t>::max()));
    if (groups.size() != 3) return r.Error(path, "groups is not [x, y, z]");
    KILN_ASSIGN(name, r.String(d, path, "name"));
    KILN_ASSIGN(context, r.String(d, path, "error_context"));
    dispatch.shader = static_cast<int>(shader);
    for (int64_t b : buffers) dispatch.buffers.push_back(static_cast<int>(b));
    for (int64_t p : push) dispatch.push_constants.push_back(static_cast<uint8_t>(p));
    for (int a = 0; a < 3; ++a) dispatch.groups[a] = static_cast<uint32_t>(groups[a]);
    dispatch.name = name;
    dispatch.error_context = context;
    plan->dispatches.push_back(std::move(dispatch));
  }
  return plan;
}

bool HasFeature(const DeviceInfo& d, const std::string& f) {
  if (f == "shaderFloat64") return d.float64;
  if (f == "shaderInt64") return d.int64;
  if (f == "shaderFloat16") return d.float16;
  if (f == "shaderInt16") return d.int16;
  if (f == "shaderInt8") return d.int8;
  if (f == "storageBuffer8BitAccess") return d.int8_storage;
  if (f == "storageBuffer16BitAccess") return d.int16_storage;
  return false;
}

class VulkanRunner final : public blob::DeviceRunner {
 public:
  VulkanRunner(std::shared_ptr<VulkanDevice> device,
               std::shared_ptr<const VulkanExecutable> executable)
      : device_(std::move(device)), executable_(std::move(executable)) {}
  absl::Status Run(std::span<const void* const> inputs,
                   std::span<void* const> outputs) const override {
    return device_->Run(*executable_, inputs, outputs);
  }
  std::string Describe() const override { return "vulkan: " + device_->info().ToString(); }

 private:
  std::shared_ptr<VulkanDevice> device_;
  std::shared_ptr<const VulkanExecutable> executable_;
};

class VulkanTargetDriver final : public blob::TargetDriver {
 public:
  absl::StatusOr<std::shared_ptr<const blob::TargetPlan>> Parse(
      const blob::BlobView& view, const blob::TargetEntry& entry,
      std::span<const std::byte> bytes) const override {
    const std::string where = absl::StrCat("section ", entry.plan_section, " (plan \"vulkan\")");
    int spirv_section = -1;
    for (int s : entry.payload_sections) {
      const std::string& name = view.sections[static_cast<size_t>(s)].name;
      if (name != "vulkan:spirv") {
        return blob::internal::Bad("section ", s, " (payload \"", name,
                                   "\"): the vulkan target has only the payload vulkan:spirv");
      }
      if (spirv_section >= 0) {
        return blob::internal::Bad("section ", s, " (payload \"vulkan:spirv\"): a second one");
      }
      spirv_section = s;
    }
    if (spirv_section < 0) {
      return blob::internal::Bad(where, ": the vulkan plan has no payload vulkan:spirv");
    }
    KILN_ASSIGN(plan_json,
                blob::internal::ParseJson(view.SectionBytes(bytes, entry.plan_section), where));
    KILN_ASSIGN(plan,
                ParseVulkanPlan(plan_json, view.signature, view.SectionBytes(bytes, spirv_section),
                                view.Weights(bytes).size(), where));
    plan->plan_section = entry.plan_section;
    plan->spirv_section = spirv_section;
    return std::shared_ptr<const blob::TargetPlan>(std::move(plan));
  }

  absl::StatusOr<std::unique_ptr<blob::DeviceRunner>> Load(
      const blob::BlobView& view, const blob::TargetEntry& entry, std::span<const std::byte> bytes,
      std::shared_ptr<const void>, const std::string& selector) const override {
    const VulkanPlan& plan = static_cast<const VulkanPlan&>(*entry.plan);
    // The spec first: a damaged shader is a bad blob whether or not a device is at hand.
    absl::StatusOr<VulkanExecutableSpec> spec = SpecFromBlob(view, plan, bytes);
    if (!spec.ok()) return spec.status();
    absl::StatusOr<std::shared_ptr<VulkanDevice>> device = VulkanDevice::Open(selector);
    if (!device.ok()) {
      // NotFound (no device matches the selector) would read as a missing file in the C API.
      return absl::FailedPreconditionError(
          absl::StrCat("blob: vulkan: ", device.status().message()));
    }
    if (absl::Status s = CheckDeviceCanRun(plan, (*device)->info()); !s.ok()) return s;
    absl::StatusOr<std::shared_ptr<const VulkanExecutable>> exe = (*device)->Load(*std::move(spec));
    if (!exe.ok()) {
      return absl::Status(exe.status().code(),
                          absl::StrCat("blob: vulkan plan: ", exe.status().message()));
    }
    return std::unique_ptr<blob::DeviceRunner>(new VulkanRunner(*device, *std::move(exe)));
  }

  std::string HowToCompile() const override {
    return "compile it with `kiln compile --target vulkan` (aot::CompileOptions::vulkan)";
  }
};

}  // namespace

std::string VulkanPlan::Describe() const {
  std::string text = absl::StrCat(
      "vulkan plan (section ", plan_section, ", SPIR-V in section ", spirv_section, "): Vulkan ",
      api_major, ".", api_minor, ", features [", absl::StrJoin(features, ", "),
      "], arena offsets aligned to ", offset_alignment, ", ", slots.size(), " slots, ",
      shaders.size(), " shaders, ", dispatches.size(), " dispatches\n");
  for (size_t i = 0; i < shaders.size(); ++i) {
    const Shader& s = shaders[i];
    absl::StrAppend(&text, "  shader ", i, ": ", s.name, " (", s.spirv_words,
                    " SPIR-V words, local size ", s.local_size[0], "x", s.local_size[1], "x",
                    s.local_size[2], ", ", s.num_buffers, " buffers)\n");
  }
  return text;
}

void EnableVulkanBlobs() {
  blob::RegisterTargetDriver("vulkan", std::make_shared<const VulkanTargetDriver>());
}

absl::Status CheckDeviceCanRun(const VulkanPlan& plan, const DeviceInfo& d) {
  auto lacks = [&](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat("blob: vulkan device \"", d.name, "\" lacks ", what,
                     ", which the blob's Vulkan section requires"));
  };
  const uint32_t major = d.api_version >> 22 & 0x7fu, minor = d.api_version >> 12 & 0x3ffu;
  if (major < plan.api_major || (major == plan.api_major && minor < plan.api_minor)) {
    return lacks(absl::StrCat("Vulkan ", plan.api_major, ".", plan.api_minor, " (it has ", major,
                              ".", minor, ")"));
  }
  for (const std::string& f : plan.features) {
    if (!HasFeature(d, f)) return lacks(f);
  }
  if (d.min_storage_buffer_offset_alignment == 0 ||
      plan.offset_alignment % static_cast<int64_t>(d.min_storage_buffer_offset_alignment) != 0) {
    return lacks(absl::StrCat("a storage-buffer offset alignment dividing ", plan.offset_alignment,
                              " (it has ", d.min_storage_buffer_offset_alignment, ")"));
  }
  for (const VulkanPlan::Shader& s : plan.shaders) {
    const uint64_t invocations = uint64_t{s.local_size[0]} * s.local_size[1] * s.local_size[2];
    if (invocations > d.max_workgroup_invocations) {
      return lacks(absl::StrCat("workgroups of ", invocations, " invocations (shader ", s.name,
                                "; it allows ", d.max_workgroup_invocations, ")"));
    }
    for (int a = 0; a < 3; ++a) {
      if (s.local_size[a] > d.max_workgroup_size[a]) {
        return lacks(absl::StrCat("a workgroup size of ", s.local_size[a], " along axis ", a,
                                  " (shader ", s.name, "; it allows ", d.max_workgroup_size[a],
                                  ")"));
      }
    }
    if (static_cast<uint32_t>(s.num_buffers) > d.max_storage_buffers) {
      return lacks(absl::StrCat(s.num_buffers, " storage buffers per shader (shader ", s.name,
                                "; it allows ", d.max_storage_buffers, ")"));
    }
  }
  for (const VulkanPlan::Dispatch& p : plan.dispatches) {
    for (int a = 0; a < 3; ++a) {
      if (p.groups[a] > d.max_workgroup_count[a]) {
        return lacks(absl::StrCat(p.groups[a], " workgroups along axis ", a, " (dispatch ", p.name,
                                  "; it allows ", d.max_workgroup_count[a], ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<VulkanExecutableSpec> SpecFromBlob(const blob::BlobView& view,
                                                  const VulkanPlan& plan,
                                                  std::span<const std::byte> bytes) {
  // ParseBlob checked every range below against the sections, and the sections against `bytes`.
  const blob::SectionEntry& spirv = view.sections[static_cast<size_t>(plan.spirv_section)];
  const std::byte* weights = view.weights_section >= 0 ? view.Weights(bytes).data() : nullptr;
  VulkanExecutableSpec spec;
  spec.name = view.signature.name;
  spec.num_inputs = static_cast<int>(view.signature.inputs.size());
  spec.num_outputs = static_cast<int>(view.signature.outputs.size());
  for (const VulkanPlan::Slot& s : plan.slots) {
    runtime::Slot slot;
    slot.size_bytes = s.size;
    if (s.kind == "input") {
      slot = runtime::Slot::Input(s.index, s.size);
    } else if (s.kind == "output") {
      slot = runtime::Slot::Output(s.index, s.size);
    } else if (s.kind == "arena") {
      slot = runtime::Slot::Arena(s.offset, s.size);
    } else if (s.kind == "error_flag") {
      slot = runtime::Slot::ErrorFlag();
    } else {  // constant: uploaded to the device once by Load, so a copy lives only until then
      std::vector<std::byte> data(static_cast<size_t>(s.size));
      if (s.size > 0) std::memcpy(data.data(), weights + s.weights_offset, data.size());
      slot = runtime::Slot::Constant(std::move(data));
    }
    spec.slots.push_back(std::move(slot));
  }
  for (size_t i = 0; i < plan.shaders.size(); ++i) {
    const VulkanPlan::Shader& s = plan.shaders[i];
    ShaderSpec shader;
    shader.name = s.name;
    shader.num_buffers = s.num_buffers;
    shader.push_constant_bytes = s.push_constant_bytes;
    shader.spirv.resize(static_cast<size_t>(s.spirv_words));
    std::memcpy(shader.spirv.data(), bytes.data() + spirv.offset + s.spirv_offset,
                shader.spirv.size() * 4);
    if (absl::Status c = CheckSpirv(shader.spirv); !c.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("blob: section ", plan.plan_section,
                                                     " (plan \"vulkan\"): shaders[", i,
                                                     "]: ", c.message()));
    }
    spec.shaders.push_back(std::move(shader));
  }
  for (const VulkanPlan::Dispatch& p : plan.dispatches) {
    Dispatch d;
    d.shader = p.shader;
    d.buffer_slots = p.buffers;
    for (uint8_t b : p.push_constants) d.push_constants.push_back(static_cast<std::byte>(b));
    for (int a = 0; a < 3; ++a) d.groups[a] = p.groups[a];
    d.name = p.name;
    d.error_context = p.error_context;
    spec.dispatches.push_back(std::move(d));
  }
  return spec;
}

}  // namespace kiln::runtime::vulkan
