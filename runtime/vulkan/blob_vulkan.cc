#include "runtime/vulkan/blob_vulkan.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/vulkan/spirv_check.h"

namespace kiln::runtime::vulkan {
namespace {

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

absl::StatusOr<std::unique_ptr<blob::DeviceRunner>> MakeRunner(const blob::BlobView& view,
                                                               std::span<const std::byte> bytes,
                                                               std::shared_ptr<const void>,
                                                               const std::string& selector) {
  // The spec first: a damaged shader is a bad blob whether or not a device is at hand.
  absl::StatusOr<VulkanExecutableSpec> spec = SpecFromBlob(view, bytes);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::shared_ptr<VulkanDevice>> device = VulkanDevice::Open(selector);
  if (!device.ok()) {
    // NotFound (no device matches the selector) would read as a missing file in the C API.
    return absl::FailedPreconditionError(absl::StrCat("blob: vulkan: ", device.status().message()));
  }
  if (absl::Status s = CheckDeviceCanRun(*view.vulkan, (*device)->info()); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<const VulkanExecutable>> exe = (*device)->Load(*std::move(spec));
  if (!exe.ok()) {
    return absl::Status(exe.status().code(),
                        absl::StrCat("blob: vulkan plan: ", exe.status().message()));
  }
  return std::unique_ptr<blob::DeviceRunner>(new VulkanRunner(*device, *std::move(exe)));
}

}  // namespace

void EnableVulkanBlobs() { blob::SetVulkanRunnerFactory(&MakeRunner); }

absl::Status CheckDeviceCanRun(const blob::VulkanPlan& plan, const DeviceInfo& d) {
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
  for (const blob::VulkanPlan::Shader& s : plan.shaders) {
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
  for (const blob::VulkanPlan::Dispatch& p : plan.dispatches) {
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
                                                  std::span<const std::byte> bytes) {
  if (view.vulkan == nullptr) {
    return absl::FailedPreconditionError("blob: the blob has no Vulkan section");
  }
  const blob::VulkanPlan& plan = *view.vulkan;
  // ParseBlob checked every range below against the sections, and the sections against `bytes`.
  const blob::SectionEntry& spirv = view.sections[static_cast<size_t>(plan.spirv_section)];
  const std::byte* weights =
      view.weights_section >= 0
          ? bytes.data() + view.sections[static_cast<size_t>(view.weights_section)].offset
          : nullptr;
  VulkanExecutableSpec spec;
  spec.name = view.signature.name;
  spec.num_inputs = static_cast<int>(view.signature.inputs.size());
  spec.num_outputs = static_cast<int>(view.signature.outputs.size());
  for (const blob::VulkanPlan::Slot& s : plan.slots) {
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
    const blob::VulkanPlan::Shader& s = plan.shaders[i];
    ShaderSpec shader;
    shader.name = s.name;
    shader.num_buffers = s.num_buffers;
    shader.push_constant_bytes = s.push_constant_bytes;
    shader.spirv.resize(static_cast<size_t>(s.spirv_words));
    std::memcpy(shader.spirv.data(), bytes.data() + spirv.offset + s.spirv_offset,
                shader.spirv.size() * 4);
    if (absl::Status c = CheckSpirv(shader.spirv); !c.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "blob: section ", plan.plan_section, " (vulkan plan): shaders[", i, "]: ", c.message()));
    }
    spec.shaders.push_back(std::move(shader));
  }
  for (const blob::VulkanPlan::Dispatch& p : plan.dispatches) {
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
