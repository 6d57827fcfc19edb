#include "runtime/vulkan/vulkan_device.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/buffer.h"
#include "runtime/vulkan/spirv_check.h"
#include "runtime/vulkan/vulkan_loader.h"

namespace kiln::runtime::vulkan {

using internal::CallError;
using internal::DeviceApi;
using internal::InstanceApi;

// Calls api.fn(...) and returns CallError("fn", result) from the enclosing function on failure.
#define KILN_VK(api, fn, ...)                                                \
  do {                                                                       \
    const VkResult kiln_vk_result = (api).fn(__VA_ARGS__);                   \
    if (kiln_vk_result != VK_SUCCESS) return CallError(#fn, kiln_vk_result); \
  } while (false)

namespace {

constexpr VkDeviceSize kBlockBytes = VkDeviceSize{64} << 20;  // one VkDeviceMemory
constexpr int kMaxPushConstantBytes = 128;

VkDeviceSize AlignUp(VkDeviceSize value, VkDeviceSize alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

std::string Plural(int64_t count, const char* noun) {
  return absl::StrCat(count, " ", noun, count == 1 ? "" : "s");
}

std::string Lower(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

const char* DeviceTypeName(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return "CPU";
    default:
      return "other";
  }
}

// A physical device and what Open enables on it.
struct PhysicalDevice {
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  DeviceInfo info;
  VkPhysicalDeviceMemoryProperties memory{};
  int queue_family = -1;  // the first family with compute; -1: none
};

PhysicalDevice QueryDevice(const InstanceApi& api, VkPhysicalDevice handle, int index) {
  PhysicalDevice device;
  device.handle = handle;
  DeviceInfo& info = device.info;
  info.index = index;

  VkPhysicalDeviceSubgroupProperties subgroup{};
  subgroup.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
  VkPhysicalDeviceProperties2 properties{};
  properties.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  properties.pNext = &subgroup;
  api.vkGetPhysicalDeviceProperties2(handle, &properties);
  const VkPhysicalDeviceProperties& p = properties.properties;
  const VkPhysicalDeviceLimits& limits = p.limits;
  info.name = p.deviceName;
  info.type = DeviceTypeName(p.deviceType);
  info.vendor_id = p.vendorID;
  info.device_id = p.deviceID;
  info.api_version = p.apiVersion;
  info.subgroup_size = subgroup.subgroupSize;
  const bool compute_subgroups = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
  info.subgroup_arithmetic =
      compute_subgroups && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
  info.subgroup_shuffle =
      compute_subgroups && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
  info.max_shared_memory_bytes = limits.maxComputeSharedMemorySize;
  info.max_workgroup_invocations = limits.maxComputeWorkGroupInvocations;
  for (int d = 0; d < 3; ++d) {
    info.max_workgroup_size[d] = limits.maxComputeWorkGroupSize[d];
    info.max_workgroup_count[d] = limits.maxComputeWorkGroupCount[d];
  }
  info.max_storage_buffers =
      std::min(limits.maxPerStageDescriptorStorageBuffers, limits.maxDescriptorSetStorageBuffers);
  info.max_storage_buffer_range = limits.maxStorageBufferRange;
  info.min_storage_buffer_offset_alignment = limits.minStorageBufferOffsetAlignment;

  VkPhysicalDeviceVulkan12Features features12{};
  features12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  VkPhysicalDeviceVulkan11Features features11{};
  features11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  VkPhysicalDeviceFeatures2 features{};
  features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  const bool vulkan12 = p.apiVersion >= VK_API_VERSION_1_2;
  if (vulkan12) {  // the 1.1/1.2 feature structs exist from 1.2 on
    features.pNext = &features11;
    features11.pNext = &features12;
  }
  api.vkGetPhysicalDeviceFeatures2(handle, &features);
  info.float64 = features.features.shaderFloat64;
  info.int64 = features.features.shaderInt64;
  info.int16 = features.features.shaderInt16;
  if (vulkan12) {
    info.int16_storage = features11.storageBuffer16BitAccess;
    info.int8_storage = features12.storageBuffer8BitAccess;
    info.float16 = features12.shaderFloat16;
    info.int8 = features12.shaderInt8;
  }

  api.vkGetPhysicalDeviceMemoryProperties(handle, &device.memory);
  // Separate device-local memory: the largest device-local heap has no host-visible type.
  uint32_t largest_heap = 0;
  for (uint32_t h = 0; h < device.memory.memoryHeapCount; ++h) {
    const VkMemoryHeap& heap = device.memory.memoryHeaps[h];
    if ((heap.flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && heap.size > info.device_local_bytes) {
      info.device_local_bytes = heap.size;
      largest_heap = h;
    }
  }
  bool unified = false;
  for (uint32_t t = 0; t < device.memory.memoryTypeCount; ++t) {
    const VkMemoryType& type = device.memory.memoryTypes[t];
    const VkMemoryPropertyFlags wanted = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT |
                                         VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                         VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    if ((type.propertyFlags & wanted) == wanted && type.heapIndex == largest_heap) unified = true;
  }
  info.device_local_separate = !unified;

  uint32_t family_count = 0;
  api.vkGetPhysicalDeviceQueueFamilyProperties(handle, &family_count, nullptr);
  std::vector<VkQueueFamilyProperties> families(family_count);
  api.vkGetPhysicalDeviceQueueFamilyProperties(handle, &family_count, families.data());
  for (uint32_t f = 0; f < family_count; ++f) {
    if (families[f].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      device.queue_family = static_cast<int>(f);
      break;
    }
  }
  return device;
}

absl::StatusOr<std::vector<PhysicalDevice>> EnumerateDevices(const InstanceApi& api) {
  uint32_t count = 0;
  KILN_VK(api, vkEnumeratePhysicalDevices, api.instance, &count, nullptr);
  std::vector<VkPhysicalDevice> handles(count);
  if (count > 0) KILN_VK(api, vkEnumeratePhysicalDevices, api.instance, &count, handles.data());
  std::vector<PhysicalDevice> devices;
  for (uint32_t i = 0; i < count; ++i) {
    devices.push_back(QueryDevice(api, handles[i], static_cast<int>(i)));
  }
  return devices;
}

std::string ListText(const std::vector<PhysicalDevice>& devices) {
  std::vector<std::string> lines;
  for (const PhysicalDevice& device : devices) lines.push_back(device.info.ToString());
  return absl::StrJoin(lines, "; ");
}

// ---- Memory ------------------------------------------------------------------------------------

// One VkDeviceMemory that buffers are carved from (first fit, free ranges merged on release).
struct Block {
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkDeviceSize size = 0;
  uint32_t type = 0;
  std::byte* mapped = nullptr;                // host-visible types stay mapped
  std::map<VkDeviceSize, VkDeviceSize> free;  // offset -> size
};

struct Allocation {
  Block* block = nullptr;
  VkDeviceSize offset = 0;
  VkDeviceSize size = 0;
};

// A VkBuffer bound to an allocation.
struct Buffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  Allocation allocation;
  VkDeviceSize size = 0;
  std::byte* mapped = nullptr;  // null unless host-visible
};

enum class MemoryUse {
  kDevice,   // shaders' memory: device-local; host-visible too unless the device stages
  kStaging,  // host-visible, host-coherent: the host side of copies
};

}  // namespace

// ---- Pipelines
// -----------------------------------------------------------------------------------

struct Pipeline;

struct VulkanDevice::Impl {
  std::shared_ptr<InstanceApi> instance;
  PhysicalDevice physical;
  bool staging = false;
  VkDevice device = VK_NULL_HANDLE;
  DeviceApi api;
  VkQueue queue = VK_NULL_HANDLE;
  std::mutex queue_mutex;  // vkQueueSubmit needs the queue externally synchronized
  VkPipelineCache pipeline_cache = VK_NULL_HANDLE;

  std::mutex memory_mutex;
  std::vector<std::unique_ptr<Block>> blocks;

  std::mutex pipelines_mutex;
  std::unordered_map<std::string, std::weak_ptr<Pipeline>> pipelines;

  ~Impl();

  absl::StatusOr<int> MemoryType(uint32_t type_bits, MemoryUse use) const;
  absl::StatusOr<Allocation> Allocate(const VkMemoryRequirements& requirements, MemoryUse use);
  void Free(const Allocation& allocation);
  absl::StatusOr<Buffer> CreateBuffer(VkDeviceSize size, MemoryUse use);
  void DestroyBuffer(Buffer& buffer);
  absl::StatusOr<std::shared_ptr<Pipeline>> GetPipeline(const ShaderSpec& shader);
  // Records commands with `record` into a fresh command buffer, submits it and waits.
  absl::Status SubmitOnce(const std::function<void(VkCommandBuffer)>& record);
  absl::Status Submit(VkCommandBuffer command_buffer, VkFence fence);
};

struct Pipeline {
  VulkanDevice::Impl* device = nullptr;
  VkShaderModule module = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;

  ~Pipeline() {
    const DeviceApi& api = device->api;
    if (pipeline != VK_NULL_HANDLE) api.vkDestroyPipeline(device->device, pipeline, nullptr);
    if (layout != VK_NULL_HANDLE) api.vkDestroyPipelineLayout(device->device, layout, nullptr);
    if (set_layout != VK_NULL_HANDLE) {
      api.vkDestroyDescriptorSetLayout(device->device, set_layout, nullptr);
    }
    if (module != VK_NULL_HANDLE) api.vkDestroyShaderModule(device->device, module, nullptr);
  }
};

VulkanDevice::Impl::~Impl() {
  if (device != VK_NULL_HANDLE) {
    api.vkDeviceWaitIdle(device);
    for (auto& block : blocks) {
      if (block->mapped != nullptr) api.vkUnmapMemory(device, block->memory);
      api.vkFreeMemory(device, block->memory, nullptr);
    }
    if (pipeline_cache != VK_NULL_HANDLE) {
      api.vkDestroyPipelineCache(device, pipeline_cache, nullptr);
    }
    api.vkDestroyDevice(device, nullptr);
  }
}

absl::StatusOr<int> VulkanDevice::Impl::MemoryType(uint32_t type_bits, MemoryUse use) const {
  const VkPhysicalDeviceMemoryProperties& memory = physical.memory;
  const VkMemoryPropertyFlags host =
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  VkMemoryPropertyFlags required = 0;
  VkMemoryPropertyFlags preferred = 0;
  if (use == MemoryUse::kStaging) {
    required = host;
    preferred = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;  // the host reads results back
  } else if (staging) {
    preferred = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  } else {
    required = host;
    preferred = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  }
  int best = -1;
  for (uint32_t t = 0; t < memory.memoryTypeCount; ++t) {
    const VkMemoryPropertyFlags flags = memory.memoryTypes[t].propertyFlags;
    if (!(type_bits & (1u << t)) || (flags & required) != required) continue;
    if (best < 0 || ((flags & preferred) == preferred &&
                     (memory.memoryTypes[best].propertyFlags & preferred) != preferred)) {
      best = static_cast<int>(t);
    }
  }
  if (best < 0) {
    return absl::InternalError(
        absl::StrCat("Vulkan device \"", physical.info.name, "\" has no ",
                     use == MemoryUse::kStaging ? "host-visible" : "suitable",
                     " memory type for a storage buffer"));
  }
  return best;
}

absl::StatusOr<Allocation> VulkanDevice::Impl::Allocate(const VkMemoryRequirements& requirements,
                                                        MemoryUse use) {
  absl::StatusOr<int> type = MemoryType(requirements.memoryTypeBits, use);
  if (!type.ok()) return type.status();
  const VkDeviceSize alignment = std::max<VkDeviceSize>(requirements.alignment, 1);
  const VkDeviceSize size = AlignUp(requirements.size, alignment);
  std::lock_guard<std::mutex> lock(memory_mutex);
  for (auto& block : blocks) {
    if (block->type != static_cast<uint32_t>(*type)) continue;
    for (auto it = block->free.begin(); it != block->free.end(); ++it) {
      const VkDeviceSize begin = AlignUp(it->first, alignment);
      const VkDeviceSize end = it->first + it->second;
      if (begin + size > end) continue;
      const VkDeviceSize free_begin = it->first;
      block->free.erase(it);
      if (begin > free_begin) block->free[free_begin] = begin - free_begin;
      if (end > begin + size) block->free[begin + size] = end - (begin + size);
      return Allocation{block.get(), begin, size};
    }
  }
  // A new block: kBlockBytes, or a block of its own for a request above half of that.
  auto block = std::make_unique<Block>();
  block->size = size > kBlockBytes / 2 ? size : kBlockBytes;
  block->type = static_cast<uint32_t>(*type);
  VkMemoryAllocateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
  info.allocationSize = block->size;
  info.memoryTypeIndex = block->type;
  KILN_VK(api, vkAllocateMemory, device, &info, nullptr, &block->memory);
  if (physical.memory.memoryTypes[block->type].propertyFlags &
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) {
    void* mapped = nullptr;
    const VkResult result = api.vkMapMemory(device, block->memory, 0, VK_WHOLE_SIZE, 0, &mapped);
    if (result != VK_SUCCESS) {
      api.vkFreeMemory(device, block->memory, nullptr);
      return CallError("vkMapMemory", result);
    }
    block->mapped = static_cast<std::byte*>(mapped);
  }
  if (block->size > size) block->free[size] = block->size - size;
  blocks.push_back(std::move(block));
  return Allocation{blocks.back().get(), 0, size};
}

void VulkanDevice::Impl::Free(const Allocation& allocation) {
  if (allocation.block == nullptr) return;
  std::lock_guard<std::mutex> lock(memory_mutex);
  auto& free = allocation.block->free;
  VkDeviceSize begin = allocation.offset;
  VkDeviceSize end = allocation.offset + allocation.size;
  auto next = free.lower_bound(begin);
  if (next != free.end() && next->first == end) {
    end += next->second;
    next = free.erase(next);
  }
  if (next != free.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second == begin) {
      begin = previous->first;
      free.erase(previous);
    }
  }
  free[begin] = end - begin;
  if (begin != 0 || end != allocation.block->size) return;
  // An empty block is returned to the driver when it was one buffer's own, or when another
  // empty block of its type is kept anyway (the next executable reuses that one).
  bool keep = allocation.block->size == kBlockBytes;
  if (keep) {
    for (const auto& other : blocks) {
      if (other.get() != allocation.block && other->type == allocation.block->type &&
          other->size == kBlockBytes && other->free.size() == 1 &&
          other->free.begin()->second == other->size) {
        keep = false;
      }
    }
  }
  if (keep) return;
  if (allocation.block->mapped != nullptr) api.vkUnmapMemory(device, allocation.block->memory);
  api.vkFreeMemory(device, allocation.block->memory, nullptr);
  std::erase_if(blocks, [&](const auto& block) { return block.get() == allocation.block; });
}

int64_t VulkanDevice::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->memory_mutex);
  int64_t total = 0;
  for (const auto& block : impl_->blocks) total += static_cast<int64_t>(block->size);
  return total;
}

absl::StatusOr<Buffer> VulkanDevice::Impl::CreateBuffer(VkDeviceSize size, MemoryUse use) {
  Buffer buffer;
  buffer.size = std::max<VkDeviceSize>(size, 16);
  VkBufferCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  info.size = buffer.size;
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
               VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  KILN_VK(api, vkCreateBuffer, device, &info, nullptr, &buffer.buffer);
  VkMemoryRequirements requirements;
  api.vkGetBufferMemoryRequirements(device, buffer.buffer, &requirements);
  absl::StatusOr<Allocation> allocation = Allocate(requirements, use);
  if (!allocation.ok()) {
    api.vkDestroyBuffer(device, buffer.buffer, nullptr);
    return allocation.status();
  }
  buffer.allocation = *allocation;
  const VkResult result =
      api.vkBindBufferMemory(device, buffer.buffer, allocation->block->memory, allocation->offset);
  if (result != VK_SUCCESS) {
    DestroyBuffer(buffer);
    return CallError("vkBindBufferMemory", result);
  }
  // A staging device reaches shaders' buffers only through copies, even where they happen to be
  // mapped (so forcing staging on a unified-memory device tests the copies).
  if (allocation->block->mapped != nullptr && (use == MemoryUse::kStaging || !staging)) {
    buffer.mapped = allocation->block->mapped + allocation->offset;
  }
  return buffer;
}

void VulkanDevice::Impl::DestroyBuffer(Buffer& buffer) {
  if (buffer.buffer != VK_NULL_HANDLE) api.vkDestroyBuffer(device, buffer.buffer, nullptr);
  Free(buffer.allocation);
  buffer = Buffer{};
}

absl::StatusOr<std::shared_ptr<Pipeline>> VulkanDevice::Impl::GetPipeline(
    const ShaderSpec& shader) {
  // Identical kernels (the same graph loaded twice, a kernel shared by graphs) share one
  // pipeline; the VkPipelineCache below additionally lets the driver reuse its compilation.
  std::string key(reinterpret_cast<const char*>(shader.spirv.data()),
                  shader.spirv.size() * sizeof(uint32_t));
  absl::StrAppend(&key, "/", shader.num_buffers, "/", shader.push_constant_bytes);
  std::lock_guard<std::mutex> lock(pipelines_mutex);
  if (auto it = pipelines.find(key); it != pipelines.end()) {
    if (std::shared_ptr<Pipeline> cached = it->second.lock()) return cached;
  }
  auto pipeline = std::make_shared<Pipeline>();
  pipeline->device = this;

  VkShaderModuleCreateInfo module_info{};
  module_info.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
  module_info.codeSize = shader.spirv.size() * sizeof(uint32_t);
  module_info.pCode = shader.spirv.data();
  KILN_VK(api, vkCreateShaderModule, device, &module_info, nullptr, &pipeline->module);

  std::vector<VkDescriptorSetLayoutBinding> bindings(shader.num_buffers);
  for (int i = 0; i < shader.num_buffers; ++i) {
    bindings[i].binding = static_cast<uint32_t>(i);
    bindings[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    bindings[i].descriptorCount = 1;
    bindings[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo set_info{};
  set_info.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
  set_info.bindingCount = static_cast<uint32_t>(bindings.size());
  set_info.pBindings = bindings.data();
  KILN_VK(api, vkCreateDescriptorSetLayout, device, &set_info, nullptr, &pipeline->set_layout);

  VkPushConstantRange push{};
  push.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  push.size = static_cast<uint32_t>(shader.push_constant_bytes);
  VkPipelineLayoutCreateInfo layout_info{};
  layout_info.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
  layout_info.setLayoutCount = 1;
  layout_info.pSetLayouts = &pipeline->set_layout;
  layout_info.pushConstantRangeCount = shader.push_constant_bytes > 0 ? 1 : 0;
  layout_info.pPushConstantRanges = &push;
  KILN_VK(api, vkCreatePipelineLayout, device, &layout_info, nullptr, &pipeline->layout);

  VkComputePipelineCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
  info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = pipeline->module;
  info.stage.pName = "main";
  info.layout = pipeline->layout;
  KILN_VK(api, vkCreateComputePipelines, device, pipeline_cache, 1, &info, nullptr,
          &pipeline->pipeline);
  std::erase_if(pipelines, [](const auto& entry) { return entry.second.expired(); });
  pipelines[key] = pipeline;
  return pipeline;
}

absl::Status VulkanDevice::Impl::Submit(VkCommandBuffer command_buffer, VkFence fence) {
  VkSubmitInfo submit{};
  submit.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &command_buffer;
  {
    std::lock_guard<std::mutex> lock(queue_mutex);
    KILN_VK(api, vkQueueSubmit, queue, 1, &submit, fence);
  }
  KILN_VK(api, vkWaitForFences, device, 1, &fence, VK_TRUE, UINT64_MAX);
  KILN_VK(api, vkResetFences, device, 1, &fence);
  return absl::OkStatus();
}

absl::Status VulkanDevice::Impl::SubmitOnce(const std::function<void(VkCommandBuffer)>& record) {
  VkCommandPoolCreateInfo pool_info{};
  pool_info.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  pool_info.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
  pool_info.queueFamilyIndex = static_cast<uint32_t>(physical.queue_family);
  VkCommandPool pool = VK_NULL_HANDLE;
  KILN_VK(api, vkCreateCommandPool, device, &pool_info, nullptr, &pool);
  VkFence fence = VK_NULL_HANDLE;
  auto run = [&]() -> absl::Status {
    VkCommandBufferAllocateInfo allocate{};
    allocate.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    allocate.commandPool = pool;
    allocate.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    allocate.commandBufferCount = 1;
    VkCommandBuffer command_buffer = VK_NULL_HANDLE;
    KILN_VK(api, vkAllocateCommandBuffers, device, &allocate, &command_buffer);
    VkCommandBufferBeginInfo begin{};
    begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    KILN_VK(api, vkBeginCommandBuffer, command_buffer, &begin);
    record(command_buffer);
    KILN_VK(api, vkEndCommandBuffer, command_buffer);
    VkFenceCreateInfo fence_info{};
    fence_info.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    KILN_VK(api, vkCreateFence, device, &fence_info, nullptr, &fence);
    return Submit(command_buffer, fence);
  };
  absl::Status status = run();
  if (fence != VK_NULL_HANDLE) api.vkDestroyFence(device, fence, nullptr);
  api.vkDestroyCommandPool(device, pool, nullptr);
  return status;
}

// ---- Executables
// ---------------------------------------------------------------------------------

namespace {

// What one concurrent run holds: its buffers, descriptor sets pointing into them, and a command
// buffer recorded once (the bindings never change, so every run resubmits it).
struct RunContext {
  Buffer run;      // inputs, scalars, error flags, outputs, arena
  Buffer staging;  // host side of [0, download_end) when the device stages
  VkDescriptorPool descriptor_pool = VK_NULL_HANDLE;
  std::vector<VkDescriptorSet> sets;  // per dispatch; VK_NULL_HANDLE for one without buffers
  VkCommandPool command_pool = VK_NULL_HANDLE;
  VkCommandBuffer command_buffer = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  // The caller's buffers the input and output slots are bound to (Device::Run on DeviceBuffers);
  // both empty while they are bound to the run buffer's own input and output regions.
  std::vector<VkBuffer> bound_inputs, bound_outputs;
  bool external() const { return !bound_inputs.empty() || !bound_outputs.empty(); }
};

}  // namespace

struct VulkanExecutable::Impl {
  std::shared_ptr<VulkanDevice> owner;  // first member: destroyed last
  VulkanDevice::Impl* device = nullptr;

  std::string name;
  int num_scalars = 0;
  std::vector<Slot> slots;          // constant bytes dropped
  std::vector<ShaderSpec> shaders;  // SPIR-V dropped; spirv_words keeps the size
  std::vector<size_t> spirv_words;
  std::vector<Dispatch> dispatches;
  std::vector<std::shared_ptr<Pipeline>> pipelines;

  std::vector<int64_t> input_bytes, output_bytes, scalar_bytes;
  int64_t arena_bytes = 0;

  // The run buffer's layout (every region aligned to `alignment`).
  VkDeviceSize alignment = 64;
  std::vector<VkDeviceSize> input_offset, scalar_offset, output_offset;
  std::vector<VkDeviceSize> flag_offset;  // per dispatch; only for those binding the flag
  std::vector<int> flag_dispatches;       // dispatches binding the error flag, in order
  VkDeviceSize scalars_begin = 0;         // scalars: [scalars_begin, upload_end)
  VkDeviceSize upload_end = 0;            // inputs and scalars: [0, upload_end)
  VkDeviceSize flags_begin = 0, flags_end = 0;
  VkDeviceSize download_end = 0;  // flags and outputs: [flags_begin, download_end)
  VkDeviceSize arena_offset = 0;
  VkDeviceSize run_bytes = 0;

  Buffer constants;
  std::vector<VkDeviceSize> constant_offset;  // per slot

  std::mutex contexts_mutex;
  std::vector<std::unique_ptr<RunContext>> idle_contexts;

  ~Impl() {
    for (auto& context : idle_contexts) DestroyContext(*context);
    device->DestroyBuffer(constants);
  }

  // Where binding `binding` of dispatch `d` points: (buffer, offset, range).
  void Resolve(const RunContext& context, int d, int binding, VkDescriptorBufferInfo& info) const;
  absl::StatusOr<std::unique_ptr<RunContext>> CreateContext();
  // Points the descriptor sets at `inputs` / `outputs` (the caller's buffers; both empty: the
  // run buffer's own regions) and records the command buffer again, which writing a descriptor
  // set it binds invalidates.
  absl::Status Bind(RunContext& context, std::vector<VkBuffer> inputs,
                    std::vector<VkBuffer> outputs);
  absl::Status RecordCommands(RunContext& context);
  void DestroyContext(RunContext& context);
};

void VulkanExecutable::Impl::Resolve(const RunContext& context, int d, int binding,
                                     VkDescriptorBufferInfo& info) const {
  const int slot_number = dispatches[d].buffer_slots[binding];
  const Slot& slot = slots[slot_number];
  info.buffer = context.run.buffer;
  switch (slot.kind) {
    case SlotKind::kInput:
      if (context.external()) {
        info.buffer = context.bound_inputs[slot.index];
        info.offset = 0;
      } else {
        info.offset = input_offset[slot.index];
      }
      break;
    case SlotKind::kOutput:
      if (context.external()) {
        info.buffer = context.bound_outputs[slot.index];
        info.offset = 0;
      } else {
        info.offset = output_offset[slot.index];
      }
      break;
    case SlotKind::kScalar:
      info.offset = scalar_offset[slot.index];
      break;
    case SlotKind::kArena:
      info.offset = arena_offset + slot.offset;
      break;
    case SlotKind::kConstant:
      info.buffer = constants.buffer;
      info.offset = constant_offset[slot_number];
      break;
    case SlotKind::kErrorFlag:
      info.offset = flag_offset[d];
      break;
  }
  // A zero-size binding is not allowed; every region is padded so 4 bytes always fit.
  info.range = std::max<VkDeviceSize>(slot.size_bytes, 4);
}

absl::StatusOr<std::unique_ptr<RunContext>> VulkanExecutable::Impl::CreateContext() {
  const DeviceApi& api = device->api;
  const VkDevice vk = device->device;
  auto context = std::make_unique<RunContext>();
  auto fail = [&](absl::Status status) -> absl::StatusOr<std::unique_ptr<RunContext>> {
    DestroyContext(*context);
    return status;
  };
  absl::StatusOr<Buffer> run = device->CreateBuffer(run_bytes, MemoryUse::kDevice);
  if (!run.ok()) return fail(run.status());
  context->run = *run;
  if (device->staging && download_end > 0) {
    absl::StatusOr<Buffer> staging = device->CreateBuffer(download_end, MemoryUse::kStaging);
    if (!staging.ok()) return fail(staging.status());
    context->staging = *staging;
  }

  // Descriptor sets: one per dispatch, written once.
  uint32_t descriptors = 0;
  uint32_t sets = 0;
  for (const Dispatch& dispatch : dispatches) {
    descriptors += static_cast<uint32_t>(dispatch.buffer_slots.size());
    sets += dispatch.buffer_slots.empty() ? 0 : 1;
  }
  context->sets.assign(dispatches.size(), VK_NULL_HANDLE);
  if (sets > 0) {
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptors};
    VkDescriptorPoolCreateInfo pool_info{};
    pool_info.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
    pool_info.maxSets = sets;
    pool_info.poolSizeCount = 1;
    pool_info.pPoolSizes = &size;
    VkResult result =
        api.vkCreateDescriptorPool(vk, &pool_info, nullptr, &context->descriptor_pool);
    if (result != VK_SUCCESS) return fail(CallError("vkCreateDescriptorPool", result));
    for (size_t d = 0; d < dispatches.size(); ++d) {
      const Dispatch& dispatch = dispatches[d];
      if (dispatch.buffer_slots.empty()) continue;
      VkDescriptorSetAllocateInfo allocate{};
      allocate.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
      allocate.descriptorPool = context->descriptor_pool;
      allocate.descriptorSetCount = 1;
      allocate.pSetLayouts = &pipelines[dispatch.shader]->set_layout;
      result = api.vkAllocateDescriptorSets(vk, &allocate, &context->sets[d]);
      if (result != VK_SUCCESS) return fail(CallError("vkAllocateDescriptorSets", result));
    }
  }

  VkCommandPoolCreateInfo pool_info{};
  pool_info.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  // Bind re-records the command buffer: vkBeginCommandBuffer then resets it.
  pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool_info.queueFamilyIndex = static_cast<uint32_t>(device->physical.queue_family);
  VkResult result = api.vkCreateCommandPool(vk, &pool_info, nullptr, &context->command_pool);
  if (result != VK_SUCCESS) return fail(CallError("vkCreateCommandPool", result));
  VkCommandBufferAllocateInfo allocate{};
  allocate.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  allocate.commandPool = context->command_pool;
  allocate.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  allocate.commandBufferCount = 1;
  result = api.vkAllocateCommandBuffers(vk, &allocate, &context->command_buffer);
  if (result != VK_SUCCESS) return fail(CallError("vkAllocateCommandBuffers", result));
  VkFenceCreateInfo fence_info{};
  fence_info.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
  result = api.vkCreateFence(vk, &fence_info, nullptr, &context->fence);
  if (result != VK_SUCCESS) return fail(CallError("vkCreateFence", result));
  if (absl::Status status = Bind(*context, {}, {}); !status.ok()) return fail(status);
  return context;
}

absl::Status VulkanExecutable::Impl::Bind(RunContext& context, std::vector<VkBuffer> inputs,
                                          std::vector<VkBuffer> outputs) {
  context.bound_inputs = std::move(inputs);
  context.bound_outputs = std::move(outputs);
  uint32_t descriptors = 0;
  for (const Dispatch& dispatch : dispatches) {
    descriptors += static_cast<uint32_t>(dispatch.buffer_slots.size());
  }
  std::vector<VkDescriptorBufferInfo> infos(descriptors);
  std::vector<VkWriteDescriptorSet> writes;
  writes.reserve(descriptors);
  size_t next_info = 0;
  for (size_t d = 0; d < dispatches.size(); ++d) {
    const Dispatch& dispatch = dispatches[d];
    for (size_t b = 0; b < dispatch.buffer_slots.size(); ++b) {
      VkDescriptorBufferInfo& info = infos[next_info++];
      Resolve(context, static_cast<int>(d), static_cast<int>(b), info);
      VkWriteDescriptorSet write{};
      write.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
      write.dstSet = context.sets[d];
      write.dstBinding = static_cast<uint32_t>(b);
      write.descriptorCount = 1;
      write.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      write.pBufferInfo = &info;
      writes.push_back(write);
    }
  }
  if (!writes.empty()) {
    device->api.vkUpdateDescriptorSets(device->device, static_cast<uint32_t>(writes.size()),
                                       writes.data(), 0, nullptr);
  }
  return RecordCommands(context);
}

absl::Status VulkanExecutable::Impl::RecordCommands(RunContext& context) {
  const DeviceApi& api = device->api;
  const VkCommandBuffer cmd = context.command_buffer;
  VkCommandBufferBeginInfo begin{};
  begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  KILN_VK(api, vkBeginCommandBuffer, cmd, &begin);

  auto barrier = [&](VkPipelineStageFlags from_stage, VkAccessFlags from,
                     VkPipelineStageFlags to_stage, VkAccessFlags to) {
    VkMemoryBarrier memory{};
    memory.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    memory.srcAccessMask = from;
    memory.dstAccessMask = to;
    api.vkCmdPipelineBarrier(cmd, from_stage, to_stage, 0, 1, &memory, 0, nullptr, 0, nullptr);
  };
  constexpr VkAccessFlags kShaderAccess = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;

  // With the caller's buffers bound, only scalars go up and only the flags come back.
  const VkDeviceSize upload_begin = context.external() ? scalars_begin : 0;
  const VkDeviceSize download_end_now = context.external() ? flags_end : download_end;
  if (device->staging) {
    // Inputs and scalars up, error flags zeroed, before the first dispatch.
    if (upload_end > upload_begin) {
      VkBufferCopy copy{upload_begin, upload_begin, upload_end - upload_begin};
      api.vkCmdCopyBuffer(cmd, context.staging.buffer, context.run.buffer, 1, &copy);
    }
    if (flags_end > flags_begin) {
      api.vkCmdFillBuffer(cmd, context.run.buffer, flags_begin, flags_end - flags_begin, 0);
    }
    barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
            VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, kShaderAccess);
  }
  bool first = true;
  for (size_t d = 0; d < dispatches.size(); ++d) {
    const Dispatch& dispatch = dispatches[d];
    if (dispatch.groups[0] == 0 || dispatch.groups[1] == 0 || dispatch.groups[2] == 0) continue;
    if (!first) {
      // Each dispatch sees everything the ones before it wrote.
      barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
              VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, kShaderAccess);
    }
    first = false;
    const Pipeline& pipeline = *pipelines[dispatch.shader];
    api.vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.pipeline);
    if (context.sets[d] != VK_NULL_HANDLE) {
      api.vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.layout, 0, 1,
                                  &context.sets[d], 0, nullptr);
    }
    if (!dispatch.push_constants.empty()) {
      api.vkCmdPushConstants(cmd, pipeline.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                             static_cast<uint32_t>(dispatch.push_constants.size()),
                             dispatch.push_constants.data());
    }
    api.vkCmdDispatch(cmd, dispatch.groups[0], dispatch.groups[1], dispatch.groups[2]);
  }
  if (device->staging) {
    barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
            VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
    if (download_end_now > flags_begin) {
      VkBufferCopy copy{flags_begin, flags_begin, download_end_now - flags_begin};
      api.vkCmdCopyBuffer(cmd, context.run.buffer, context.staging.buffer, 1, &copy);
    }
    barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
            VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
  } else {
    barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
            VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
  }
  KILN_VK(api, vkEndCommandBuffer, cmd);
  return absl::OkStatus();
}

void VulkanExecutable::Impl::DestroyContext(RunContext& context) {
  const DeviceApi& api = device->api;
  const VkDevice vk = device->device;
  if (context.fence != VK_NULL_HANDLE) api.vkDestroyFence(vk, context.fence, nullptr);
  if (context.command_pool != VK_NULL_HANDLE) {
    api.vkDestroyCommandPool(vk, context.command_pool, nullptr);
  }
  if (context.descriptor_pool != VK_NULL_HANDLE) {
    api.vkDestroyDescriptorPool(vk, context.descriptor_pool, nullptr);
  }
  device->DestroyBuffer(context.staging);
  device->DestroyBuffer(context.run);
  context = RunContext{};
}

VulkanExecutable::VulkanExecutable(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VulkanExecutable::~VulkanExecutable() = default;
const std::string& VulkanExecutable::name() const { return impl_->name; }
int VulkanExecutable::num_inputs() const { return static_cast<int>(impl_->input_bytes.size()); }
int VulkanExecutable::num_outputs() const { return static_cast<int>(impl_->output_bytes.size()); }
int VulkanExecutable::num_scalars() const { return impl_->num_scalars; }
int64_t VulkanExecutable::input_bytes(int k) const { return impl_->input_bytes[k]; }
int64_t VulkanExecutable::output_bytes(int k) const { return impl_->output_bytes[k]; }
int64_t VulkanExecutable::scalar_bytes(int k) const { return impl_->scalar_bytes[k]; }
int64_t VulkanExecutable::arena_bytes() const { return impl_->arena_bytes; }
int64_t VulkanExecutable::run_buffer_bytes() const {
  return static_cast<int64_t>(impl_->run_bytes);
}

std::string VulkanExecutable::ToString() const {
  const Impl& e = *impl_;
  std::string text = absl::StrCat(
      "vulkan executable \"", e.name, "\": ", Plural(num_inputs(), "input"), ", ",
      Plural(num_outputs(), "output"), ", ", Plural(e.num_scalars, "scalar"), ", arena ",
      e.arena_bytes, " bytes, ", Plural(static_cast<int64_t>(e.shaders.size()), "shader"), ", ",
      e.dispatches.size(), e.dispatches.size() == 1 ? " dispatch" : " dispatches", ", run buffer ",
      e.run_bytes, " bytes", e.device->staging ? " (staged)" : "", "\n");
  for (size_t i = 0; i < e.slots.size(); ++i) {
    absl::StrAppend(&text, "  slot ", i, ": ", DescribeSlot(e.slots[i]), "\n");
  }
  for (size_t s = 0; s < e.shaders.size(); ++s) {
    const ShaderSpec& shader = e.shaders[s];
    absl::StrAppend(&text, "  shader ", s, ": ", shader.name, " (",
                    Plural(shader.num_buffers, "buffer"), ", ", shader.push_constant_bytes,
                    " push-constant bytes, ", e.spirv_words[s], " SPIR-V words)\n");
  }
  for (size_t d = 0; d < e.dispatches.size(); ++d) {
    const Dispatch& dispatch = e.dispatches[d];
    absl::StrAppend(&text, "  dispatch ", d, ": ", dispatch.name, " shader ", dispatch.shader,
                    " groups [", dispatch.groups[0], ", ", dispatch.groups[1], ", ",
                    dispatch.groups[2], "] bindings [");
    for (size_t b = 0; b < dispatch.buffer_slots.size(); ++b) {
      absl::StrAppend(&text, b == 0 ? "" : ", ", "slot ", dispatch.buffer_slots[b]);
    }
    absl::StrAppend(&text, "]");
    if (!dispatch.push_constants.empty()) {
      absl::StrAppend(&text, " push ");
      static constexpr char kHex[] = "0123456789abcdef";
      for (std::byte byte : dispatch.push_constants) {
        const auto value = static_cast<unsigned>(byte);
        text += kHex[value >> 4];
        text += kHex[value & 15];
      }
    }
    absl::StrAppend(&text, "\n");
  }
  return text;
}

// ---- DeviceInfo, ListDevices, Open
// ---------------------------------------------------------------

std::string DeviceInfo::ToString() const {
  return absl::StrCat(index, ": ", name, " (", type, ", vendor 0x", absl::Hex(vendor_id),
                      ", Vulkan ", VK_API_VERSION_MAJOR(api_version), ".",
                      VK_API_VERSION_MINOR(api_version), ".", VK_API_VERSION_PATCH(api_version),
                      ")");
}

std::vector<DeviceInfo> ListDevices(const OpenOptions& options) {
  absl::StatusOr<std::shared_ptr<InstanceApi>> instance = internal::SharedInstance(options.loader);
  if (!instance.ok()) return {};
  absl::StatusOr<std::vector<PhysicalDevice>> devices = EnumerateDevices(**instance);
  if (!devices.ok()) return {};
  std::vector<DeviceInfo> infos;
  for (const PhysicalDevice& device : *devices) infos.push_back(device.info);
  return infos;
}

VulkanDevice::VulkanDevice(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VulkanDevice::~VulkanDevice() = default;
const DeviceInfo& VulkanDevice::info() const { return impl_->physical.info; }
bool VulkanDevice::uses_staging() const { return impl_->staging; }

absl::StatusOr<std::shared_ptr<VulkanDevice>> VulkanDevice::Open(std::string_view selector,
                                                                 const OpenOptions& options) {
  absl::StatusOr<std::shared_ptr<InstanceApi>> instance = internal::SharedInstance(options.loader);
  if (!instance.ok()) return instance.status();
  absl::StatusOr<std::vector<PhysicalDevice>> devices = EnumerateDevices(**instance);
  if (!devices.ok()) return devices.status();
  if (devices->empty()) {
    return absl::FailedPreconditionError(
        "no Vulkan device: the Vulkan loader found no physical device. Install a driver "
        "(mesa-vulkan-drivers has the CPU driver lavapipe), check VK_DRIVER_FILES / "
        "VK_ICD_FILENAMES, or run on the CPU backend with KILN_DEVICE=cpu");
  }

  std::string choice(selector);
  std::string origin = "selector";
  if (choice.empty()) {
    if (const char* env = std::getenv("KILN_VULKAN_DEVICE"); env != nullptr && *env != '\0') {
      choice = env;
      origin = "KILN_VULKAN_DEVICE";
    }
  }
  const PhysicalDevice* chosen = nullptr;
  if (choice.empty()) {
    for (const char* type : {"discrete GPU", "integrated GPU"}) {
      for (const PhysicalDevice& device : *devices) {
        if (chosen == nullptr && device.info.type == type) chosen = &device;
      }
    }
    if (chosen == nullptr) chosen = &devices->front();
  } else if (std::all_of(choice.begin(), choice.end(),
                         [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    const size_t index = choice.size() > 9 ? devices->size() : std::stoul(choice);
    if (index >= devices->size()) {
      return absl::NotFoundError(absl::StrCat("no Vulkan device ", choice, " (", origin,
                                              "): the devices are ", ListText(*devices)));
    }
    chosen = &(*devices)[index];
  } else {
    const std::string wanted = Lower(choice);
    for (const PhysicalDevice& device : *devices) {
      if (chosen == nullptr && Lower(device.info.name).find(wanted) != std::string::npos) {
        chosen = &device;
      }
    }
    if (chosen == nullptr) {
      return absl::NotFoundError(absl::StrCat("no Vulkan device's name contains \"", choice, "\" (",
                                              origin, "): the devices are ", ListText(*devices)));
    }
  }
  if (chosen->queue_family < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("Vulkan device ", chosen->info.ToString(), " has no compute queue"));
  }

  auto impl = std::make_unique<Impl>();
  impl->instance = *instance;
  impl->physical = *chosen;
  const DeviceInfo& info = impl->physical.info;
  impl->staging = info.device_local_separate;
  if (options.staging >= 0) {
    impl->staging = options.staging != 0;
  } else if (const char* env = std::getenv("KILN_VULKAN_STAGING");
             env != nullptr && (env[0] == '0' || env[0] == '1')) {
    impl->staging = env[0] == '1';
  }

  // Enable every shader feature kernels may use that the device has.
  VkPhysicalDeviceVulkan12Features features12{};
  features12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  features12.storageBuffer8BitAccess = info.int8_storage;
  features12.shaderFloat16 = info.float16;
  features12.shaderInt8 = info.int8;
  VkPhysicalDeviceVulkan11Features features11{};
  features11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  features11.storageBuffer16BitAccess = info.int16_storage;
  features11.pNext = &features12;
  VkPhysicalDeviceFeatures2 features{};
  features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  features.features.shaderFloat64 = info.float64;
  features.features.shaderInt64 = info.int64;
  features.features.shaderInt16 = info.int16;
  if (info.api_version >= VK_API_VERSION_1_2) features.pNext = &features11;

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo queue_info{};
  queue_info.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  queue_info.queueFamilyIndex = static_cast<uint32_t>(impl->physical.queue_family);
  queue_info.queueCount = 1;
  queue_info.pQueuePriorities = &priority;
  VkDeviceCreateInfo device_info{};
  device_info.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  device_info.pNext = &features;
  device_info.queueCreateInfoCount = 1;
  device_info.pQueueCreateInfos = &queue_info;
  const InstanceApi& instance_api = **instance;
  KILN_VK(instance_api, vkCreateDevice, impl->physical.handle, &device_info, nullptr,
          &impl->device);
  if (absl::Status status = internal::LoadDeviceApi(instance_api, impl->device, impl->api);
      !status.ok()) {
    impl->device = VK_NULL_HANDLE;  // ~Impl cannot destroy it without its functions: leaked
    return status;
  }
  impl->api.vkGetDeviceQueue(impl->device, queue_info.queueFamilyIndex, 0, &impl->queue);
  VkPipelineCacheCreateInfo cache_info{};
  cache_info.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO;
  KILN_VK(impl->api, vkCreatePipelineCache, impl->device, &cache_info, nullptr,
          &impl->pipeline_cache);
  return std::shared_ptr<VulkanDevice>(new VulkanDevice(std::move(impl)));
}

// ---- Load
// ----------------------------------------------------------------------------------------

absl::StatusOr<std::shared_ptr<const VulkanExecutable>> VulkanDevice::Load(
    VulkanExecutableSpec spec) {
  const DeviceInfo& info = impl_->physical.info;
  auto invalid = [&](auto&&... parts) {
    return absl::InvalidArgumentError(
        absl::StrCat("vulkan executable \"", spec.name, "\": ", parts...));
  };
  if (spec.num_inputs < 0 || spec.num_outputs < 0 || spec.num_scalars < 0) {
    return invalid("negative input, output or scalar count");
  }

  auto e = std::make_unique<VulkanExecutable::Impl>();
  e->owner = shared_from_this();
  e->device = impl_.get();
  e->name = spec.name;
  e->num_scalars = spec.num_scalars;
  e->alignment = std::max<VkDeviceSize>(
      {info.min_storage_buffer_offset_alignment, 16, static_cast<VkDeviceSize>(kBufferAlignment)});
  const VkDeviceSize align = e->alignment;
  e->input_bytes.assign(spec.num_inputs, 0);
  e->output_bytes.assign(spec.num_outputs, 0);
  e->scalar_bytes.assign(spec.num_scalars, 0);

  // Slots.
  std::vector<std::vector<std::byte>> constant_bytes(spec.slots.size());
  VkDeviceSize constants_size = 0;
  e->constant_offset.assign(spec.slots.size(), 0);
  for (size_t i = 0; i < spec.slots.size(); ++i) {
    Slot& slot = spec.slots[i];
    const std::string slot_name = absl::StrCat("slot ", i, " (", DescribeSlot(slot), ")");
    if (slot.size_bytes < 0) return invalid(slot_name, ": negative size");
    if (static_cast<uint64_t>(slot.size_bytes) > info.max_storage_buffer_range) {
      return invalid(slot_name, ": larger than the device's maxStorageBufferRange of ",
                     info.max_storage_buffer_range, " bytes, the most one binding may cover");
    }
    auto check_index = [&](int count, std::vector<int64_t>& bytes) {
      if (slot.index < 0 || slot.index >= count) return false;
      bytes[slot.index] = std::max(bytes[slot.index], slot.size_bytes);
      return true;
    };
    switch (slot.kind) {
      case SlotKind::kInput:
        if (!check_index(spec.num_inputs, e->input_bytes)) {
          return invalid(slot_name, ": the executable has ", Plural(spec.num_inputs, "input"));
        }
        break;
      case SlotKind::kOutput:
        if (!check_index(spec.num_outputs, e->output_bytes)) {
          return invalid(slot_name, ": the executable has ", Plural(spec.num_outputs, "output"));
        }
        break;
      case SlotKind::kScalar:
        if (!check_index(spec.num_scalars, e->scalar_bytes)) {
          return invalid(slot_name, ": the executable has ", Plural(spec.num_scalars, "scalar"));
        }
        break;
      case SlotKind::kArena:
        if (slot.offset < 0 || slot.offset % kBufferAlignment != 0 ||
            static_cast<VkDeviceSize>(slot.offset) % align != 0) {
          return invalid(slot_name, ": arena offsets must be multiples of ", align,
                         " (kBufferAlignment and the device's minStorageBufferOffsetAlignment)");
        }
        e->arena_bytes = std::max(e->arena_bytes, slot.offset + slot.size_bytes);
        break;
      case SlotKind::kConstant:
        if (static_cast<int64_t>(slot.constant.size()) != slot.size_bytes) {
          return invalid(slot_name, ": holds ", slot.constant.size(), " bytes");
        }
        e->constant_offset[i] = constants_size;
        constants_size = AlignUp(constants_size + std::max<int64_t>(slot.size_bytes, 4), align);
        constant_bytes[i] = std::move(slot.constant);
        slot.constant.clear();
        break;
      case SlotKind::kErrorFlag:
        if (slot.size_bytes != static_cast<int64_t>(sizeof(KernelErrorFlag))) {
          return invalid(slot_name, ": the error flag is two int64 (16 bytes)");
        }
        break;
    }
  }
  std::vector<bool> output_bound(spec.num_outputs, false);
  for (const Slot& slot : spec.slots) {
    if (slot.kind == SlotKind::kOutput) output_bound[slot.index] = true;
  }
  for (int k = 0; k < spec.num_outputs; ++k) {
    if (!output_bound[k]) {
      return invalid("output ", k, " is bound to no slot, so no dispatch would write it");
    }
  }

  // Shaders.
  for (size_t s = 0; s < spec.shaders.size(); ++s) {
    const ShaderSpec& shader = spec.shaders[s];
    const std::string shader_name = absl::StrCat("shader ", s, " (", shader.name, ")");
    if (absl::Status spirv = CheckSpirv(shader.spirv); !spirv.ok()) {
      return invalid(shader_name, ": ", spirv.message());
    }
    if (shader.num_buffers < 0 ||
        static_cast<uint32_t>(shader.num_buffers) > info.max_storage_buffers) {
      return invalid(shader_name, ": ", shader.num_buffers,
                     " storage buffers; the device allows 0 to ", info.max_storage_buffers);
    }
    if (shader.push_constant_bytes < 0 || shader.push_constant_bytes > kMaxPushConstantBytes ||
        shader.push_constant_bytes % 4 != 0) {
      return invalid(shader_name, ": ", shader.push_constant_bytes,
                     " push-constant bytes; 0 to 128 in multiples of 4 are allowed");
    }
  }

  // Dispatches.
  e->flag_offset.assign(spec.dispatches.size(), 0);
  for (size_t d = 0; d < spec.dispatches.size(); ++d) {
    const Dispatch& dispatch = spec.dispatches[d];
    const std::string dispatch_name = absl::StrCat("dispatch ", d, " (", dispatch.name, ")");
    if (dispatch.shader < 0 || dispatch.shader >= static_cast<int>(spec.shaders.size())) {
      return invalid(dispatch_name, ": shader ", dispatch.shader, " does not exist (",
                     Plural(static_cast<int64_t>(spec.shaders.size()), "shader"), ")");
    }
    const ShaderSpec& shader = spec.shaders[dispatch.shader];
    if (static_cast<int>(dispatch.buffer_slots.size()) != shader.num_buffers) {
      return invalid(dispatch_name, ": binds ", dispatch.buffer_slots.size(), " buffers, shader \"",
                     shader.name, "\" takes ", shader.num_buffers);
    }
    bool binds_flag = false;
    for (int slot : dispatch.buffer_slots) {
      if (slot < 0 || slot >= static_cast<int>(spec.slots.size())) {
        return invalid(dispatch_name, ": slot ", slot, " does not exist (",
                       Plural(static_cast<int64_t>(spec.slots.size()), "slot"), ")");
      }
      binds_flag = binds_flag || spec.slots[slot].kind == SlotKind::kErrorFlag;
    }
    if (binds_flag) e->flag_dispatches.push_back(static_cast<int>(d));
    if (static_cast<int>(dispatch.push_constants.size()) != shader.push_constant_bytes) {
      return invalid(dispatch_name, ": ", dispatch.push_constants.size(),
                     " push-constant bytes, shader \"", shader.name, "\" takes ",
                     shader.push_constant_bytes);
    }
    for (int axis = 0; axis < 3; ++axis) {
      if (dispatch.groups[axis] > info.max_workgroup_count[axis]) {
        return invalid(dispatch_name, ": ", dispatch.groups[axis], " workgroups along axis ", axis,
                       ", the device allows ", info.max_workgroup_count[axis]);
      }
    }
  }

  // The run buffer: [inputs][scalars] [flags][outputs] [arena]; every region aligned and at
  // least 4 bytes (a binding cannot be empty).
  VkDeviceSize cursor = 0;
  auto place = [&](int64_t bytes) {
    const VkDeviceSize offset = cursor;
    cursor = AlignUp(cursor + std::max<int64_t>(bytes, 4), align);
    return offset;
  };
  for (int64_t bytes : e->input_bytes) e->input_offset.push_back(place(bytes));
  e->scalars_begin = cursor;
  for (int64_t bytes : e->scalar_bytes) e->scalar_offset.push_back(place(bytes));
  e->upload_end = cursor;
  e->flags_begin = cursor;
  for (int d : e->flag_dispatches) e->flag_offset[d] = place(sizeof(KernelErrorFlag));
  e->flags_end = cursor;
  for (int64_t bytes : e->output_bytes) e->output_offset.push_back(place(bytes));
  e->download_end = cursor;
  e->arena_offset = cursor;
  place(e->arena_bytes);
  e->run_bytes = cursor;

  // Pipelines.
  for (const ShaderSpec& shader : spec.shaders) {
    absl::StatusOr<std::shared_ptr<Pipeline>> pipeline = impl_->GetPipeline(shader);
    if (!pipeline.ok()) {
      return absl::Status(pipeline.status().code(),
                          absl::StrCat("vulkan executable \"", spec.name, "\": shader \"",
                                       shader.name, "\": ", pipeline.status().message()));
    }
    e->pipelines.push_back(*std::move(pipeline));
    e->spirv_words.push_back(shader.spirv.size());
  }

  // Constants, uploaded once.
  if (constants_size > 0) {
    absl::StatusOr<Buffer> constants = impl_->CreateBuffer(constants_size, MemoryUse::kDevice);
    if (!constants.ok()) return constants.status();
    e->constants = *constants;
    Buffer staging;
    std::byte* destination = e->constants.mapped;
    if (destination == nullptr) {
      absl::StatusOr<Buffer> made = impl_->CreateBuffer(constants_size, MemoryUse::kStaging);
      if (!made.ok()) return made.status();
      staging = *made;
      destination = staging.mapped;
    }
    for (size_t i = 0; i < spec.slots.size(); ++i) {
      if (!constant_bytes[i].empty()) {
        std::memcpy(destination + e->constant_offset[i], constant_bytes[i].data(),
                    constant_bytes[i].size());
      }
    }
    if (staging.buffer != VK_NULL_HANDLE) {
      const VkBuffer from = staging.buffer;
      const VkBuffer to = e->constants.buffer;
      const DeviceApi& api = impl_->api;
      absl::Status status = impl_->SubmitOnce([&](VkCommandBuffer cmd) {
        VkBufferCopy copy{0, 0, constants_size};
        api.vkCmdCopyBuffer(cmd, from, to, 1, &copy);
      });
      impl_->DestroyBuffer(staging);
      if (!status.ok()) return status;
      // The fence wait orders the copy before any later submission's shaders.
    }
  }

  e->slots = std::move(spec.slots);
  e->shaders = std::move(spec.shaders);
  for (ShaderSpec& shader : e->shaders) std::vector<uint32_t>().swap(shader.spirv);
  e->dispatches = std::move(spec.dispatches);

  // One run context up front: Load reports what a run would run out of, and the first run is
  // as fast as the next.
  absl::StatusOr<std::unique_ptr<RunContext>> context = e->CreateContext();
  if (!context.ok()) return context.status();
  e->idle_contexts.push_back(*std::move(context));
  return std::shared_ptr<const VulkanExecutable>(new VulkanExecutable(std::move(e)));
}

// ---- Run
// -----------------------------------------------------------------------------------------

// Where a run's inputs and outputs are: host memory (copied through the run buffer) or the
// caller's device buffers (bound in place).
struct VulkanDevice::RunBinding {
  std::span<const void* const> host_inputs;
  std::span<void* const> host_outputs;
  std::vector<VkBuffer> device_inputs, device_outputs;
  bool on_device = false;
};

absl::Status VulkanDevice::Run(const VulkanExecutable& exe, std::span<const void* const> inputs,
                               std::span<void* const> outputs,
                               std::span<const void* const> scalars) {
  VulkanExecutable::Impl& e = *exe.impl_;
  if (e.device != impl_.get()) {
    return absl::InvalidArgumentError(
        absl::StrCat("vulkan executable \"", e.name, "\" was loaded on another device"));
  }
  auto count_error = [&](const char* what, size_t expected, size_t got) {
    return absl::InvalidArgumentError(absl::StrCat("vulkan executable \"", e.name, "\" takes ",
                                                   expected, " ", what, ", got ", got));
  };
  if (inputs.size() != e.input_bytes.size()) {
    return count_error("inputs", e.input_bytes.size(), inputs.size());
  }
  if (outputs.size() != e.output_bytes.size()) {
    return count_error("outputs", e.output_bytes.size(), outputs.size());
  }
  auto null_error = [&](const char* what, size_t k) {
    return absl::InvalidArgumentError(
        absl::StrCat("vulkan executable \"", e.name, "\": ", what, " ", k, " is null"));
  };
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k] == nullptr && e.input_bytes[k] > 0) return null_error("input", k);
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (outputs[k] == nullptr && e.output_bytes[k] > 0) return null_error("output", k);
  }
  RunBinding binding;
  binding.host_inputs = inputs;
  binding.host_outputs = outputs;
  return Execute(exe, binding, scalars);
}

absl::Status VulkanDevice::Execute(const VulkanExecutable& exe, const RunBinding& binding,
                                   std::span<const void* const> scalars) {
  VulkanExecutable::Impl& e = *exe.impl_;
  if (scalars.size() != e.scalar_bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("vulkan executable \"", e.name, "\" takes ",
                                                   e.scalar_bytes.size(), " scalars, got ",
                                                   scalars.size()));
  }
  for (size_t k = 0; k < scalars.size(); ++k) {
    if (scalars[k] == nullptr && e.scalar_bytes[k] > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("vulkan executable \"", e.name, "\": scalar ", k, " is null"));
    }
  }

  std::unique_ptr<RunContext> context;
  {
    std::lock_guard<std::mutex> lock(e.contexts_mutex);
    if (!e.idle_contexts.empty()) {
      context = std::move(e.idle_contexts.back());
      e.idle_contexts.pop_back();
    }
  }
  if (context == nullptr) {  // another run holds every context: make one more
    absl::StatusOr<std::unique_ptr<RunContext>> made = e.CreateContext();
    if (!made.ok()) return made.status();
    context = *std::move(made);
  }
  // Rebinding costs descriptor writes and a re-recorded command buffer; a loop that gets the
  // same buffers back from the caching allocator skips it.
  const bool rebind = binding.on_device ? (context->bound_inputs != binding.device_inputs ||
                                           context->bound_outputs != binding.device_outputs)
                                        : context->external();
  if (rebind) {
    absl::Status bound = binding.on_device
                             ? e.Bind(*context, binding.device_inputs, binding.device_outputs)
                             : e.Bind(*context, {}, {});
    if (!bound.ok()) {
      e.DestroyContext(*context);
      return bound;
    }
  }

  std::byte* host = impl_->staging ? context->staging.mapped : context->run.mapped;
  if (!binding.on_device) {
    for (size_t k = 0; k < binding.host_inputs.size(); ++k) {
      if (e.input_bytes[k] > 0) {
        std::memcpy(host + e.input_offset[k], binding.host_inputs[k], e.input_bytes[k]);
        CountHostToDevice(e.input_bytes[k]);
      }
    }
  }
  for (size_t k = 0; k < scalars.size(); ++k) {
    if (e.scalar_bytes[k] > 0) {
      std::memcpy(host + e.scalar_offset[k], scalars[k], e.scalar_bytes[k]);
      CountHostToDevice(e.scalar_bytes[k]);
    }
  }
  if (!impl_->staging && e.flags_end > e.flags_begin) {
    std::memset(host + e.flags_begin, 0, e.flags_end - e.flags_begin);
  }
  if (absl::Status status = impl_->Submit(context->command_buffer, context->fence); !status.ok()) {
    e.DestroyContext(*context);  // its fence or command buffer may be left pending
    return absl::Status(status.code(),
                        absl::StrCat("vulkan executable \"", e.name, "\": ", status.message()));
  }

  absl::Status result = absl::OkStatus();
  for (int d : e.flag_dispatches) {
    int64_t flag[2];
    std::memcpy(flag, host + e.flag_offset[d], sizeof(flag));
    if (flag[0] == kKernelOk) continue;
    const Dispatch& dispatch = e.dispatches[d];
    result = absl::Status(
        flag[0] == kKernelIndexOutOfRange ? absl::StatusCode::kOutOfRange
                                          : absl::StatusCode::kInternal,
        absl::StrCat("vulkan executable \"", e.name, "\": dispatch ", d, " (", dispatch.name,
                     "): ", dispatch.error_context.empty() ? "" : dispatch.error_context + ": ",
                     KernelErrorMessage(static_cast<int32_t>(flag[0])), " (kernel error code ",
                     flag[0], flag[0] == kKernelIndexOutOfRange ? ", index " : ", detail ", flag[1],
                     ")"));
    break;
  }
  if (result.ok() && !binding.on_device) {
    for (size_t k = 0; k < binding.host_outputs.size(); ++k) {
      if (e.output_bytes[k] > 0) {
        std::memcpy(binding.host_outputs[k], host + e.output_offset[k], e.output_bytes[k]);
        CountDeviceToHost(e.output_bytes[k]);
      }
    }
  }
  std::lock_guard<std::mutex> lock(e.contexts_mutex);
  e.idle_contexts.push_back(std::move(context));
  return result;
}

// ---- runtime::Device
// ------------------------------------------------------------------------------

namespace {

// A storage buffer of a VulkanDevice, handed out through runtime::Device::Allocate.
class VulkanDeviceBuffer final : public DeviceBuffer {
 public:
  VulkanDeviceBuffer(Device& device, VulkanDevice::Impl* impl, Buffer buffer, int64_t size)
      : DeviceBuffer(device, size), impl_(impl), buffer_(buffer) {}
  ~VulkanDeviceBuffer() override { impl_->DestroyBuffer(buffer_); }

  std::byte* host_data() const override { return buffer_.mapped; }
  VkBuffer handle() const { return buffer_.buffer; }

 private:
  VulkanDevice::Impl* impl_;
  Buffer buffer_;
};

}  // namespace

DeviceId VulkanDevice::id() const { return DeviceId{DeviceKind::kVulkan, info().index}; }

absl::StatusOr<std::unique_ptr<DeviceBuffer>> VulkanDevice::Allocate(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(id().ToString(), ": cannot allocate ", bytes, " bytes"));
  }
  absl::StatusOr<Buffer> buffer =
      impl_->CreateBuffer(static_cast<VkDeviceSize>(bytes), MemoryUse::kDevice);
  if (!buffer.ok()) return buffer.status();
  return std::make_unique<VulkanDeviceBuffer>(*this, impl_.get(), *buffer, bytes);
}

namespace {

// Checks that `buffer` is one of `device`'s and that [offset, offset + bytes) fits in it.
absl::Status CheckRange(const VulkanDevice& device, const DeviceBuffer& buffer, int64_t offset,
                        int64_t bytes, const std::string& what) {
  if (&buffer.device() != &device) {
    return absl::InvalidArgumentError(absl::StrCat(device.id().ToString(), ": ", what,
                                                   " got a buffer of another device (",
                                                   buffer.device().id().ToString(), ")"));
  }
  if (offset < 0 || bytes < 0 || offset > buffer.size() - bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(device.id().ToString(), ": ", what, " of ", bytes, " bytes at offset ", offset,
                     " does not fit a buffer of ", buffer.size(), " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status VulkanDevice::CopyToDevice(std::span<const std::byte> source,
                                        DeviceBuffer& destination, int64_t offset) {
  const auto bytes = static_cast<int64_t>(source.size());
  if (absl::Status s = CheckRange(*this, destination, offset, bytes, "CopyToDevice"); !s.ok()) {
    return s;
  }
  if (bytes == 0) return absl::OkStatus();
  CountHostToDevice(bytes);
  if (destination.host_data() != nullptr) {  // host-coherent (MemoryType): no flush needed
    std::memcpy(destination.host_data() + offset, source.data(), source.size());
    return absl::OkStatus();
  }
  absl::StatusOr<Buffer> staging = impl_->CreateBuffer(source.size(), MemoryUse::kStaging);
  if (!staging.ok()) return staging.status();
  std::memcpy(staging->mapped, source.data(), source.size());
  const VkBuffer target = static_cast<const VulkanDeviceBuffer&>(destination).handle();
  absl::Status status = impl_->SubmitOnce([&](VkCommandBuffer commands) {
    const VkBufferCopy region{0, static_cast<VkDeviceSize>(offset), source.size()};
    impl_->api.vkCmdCopyBuffer(commands, staging->buffer, target, 1, &region);
  });
  impl_->DestroyBuffer(*staging);
  return status;
}

absl::Status VulkanDevice::CopyFromDevice(const DeviceBuffer& source, int64_t offset,
                                          std::span<std::byte> destination) {
  const auto bytes = static_cast<int64_t>(destination.size());
  if (absl::Status s = CheckRange(*this, source, offset, bytes, "CopyFromDevice"); !s.ok()) {
    return s;
  }
  if (bytes == 0) return absl::OkStatus();
  CountDeviceToHost(bytes);
  if (source.host_data() != nullptr) {
    std::memcpy(destination.data(), source.host_data() + offset, destination.size());
    return absl::OkStatus();
  }
  absl::StatusOr<Buffer> staging = impl_->CreateBuffer(destination.size(), MemoryUse::kStaging);
  if (!staging.ok()) return staging.status();
  const VkBuffer from = static_cast<const VulkanDeviceBuffer&>(source).handle();
  absl::Status status = impl_->SubmitOnce([&](VkCommandBuffer commands) {
    const VkBufferCopy region{static_cast<VkDeviceSize>(offset), 0, destination.size()};
    impl_->api.vkCmdCopyBuffer(commands, from, staging->buffer, 1, &region);
  });
  if (status.ok()) std::memcpy(destination.data(), staging->mapped, destination.size());
  impl_->DestroyBuffer(*staging);
  return status;
}

absl::Status VulkanDevice::Run(const DeviceExecutable& device_executable,
                               std::span<const DeviceBuffer* const> inputs,
                               std::span<DeviceBuffer* const> outputs,
                               std::span<const void* const> scalars) {
  const auto* executable = dynamic_cast<const VulkanExecutable*>(&device_executable);
  if (executable == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(id().ToString(), ": executable \"", device_executable.name(), "\" is a ",
                     DeviceKindName(device_executable.kind()), " executable"));
  }
  const VulkanExecutable& exe = *executable;
  if (inputs.size() != static_cast<size_t>(exe.num_inputs()) ||
      outputs.size() != static_cast<size_t>(exe.num_outputs())) {
    return absl::InvalidArgumentError(absl::StrCat(id().ToString(), ": executable \"", exe.name(),
                                                   "\" takes ", exe.num_inputs(), " inputs and ",
                                                   exe.num_outputs(), " outputs, got ",
                                                   inputs.size(), " and ", outputs.size()));
  }
  auto check = [&](const DeviceBuffer* buffer, const char* what, size_t k,
                   int64_t needed) -> absl::Status {
    const std::string name = absl::StrCat("executable \"", exe.name(), "\" ", what, " ", k);
    if (buffer == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(id().ToString(), ": ", name, " is null"));
    }
    return CheckRange(*this, *buffer, 0, needed, name);
  };
  RunBinding binding;
  binding.on_device = true;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (absl::Status s = check(inputs[k], "input", k, exe.input_bytes(static_cast<int>(k)));
        !s.ok()) {
      return s;
    }
    binding.device_inputs.push_back(static_cast<const VulkanDeviceBuffer*>(inputs[k])->handle());
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (absl::Status s = check(outputs[k], "output", k, exe.output_bytes(static_cast<int>(k)));
        !s.ok()) {
      return s;
    }
    const VkBuffer handle = static_cast<const VulkanDeviceBuffer*>(outputs[k])->handle();
    // Dispatches read inputs after earlier ones wrote outputs: aliasing would be a race.
    if (std::find(binding.device_inputs.begin(), binding.device_inputs.end(), handle) !=
        binding.device_inputs.end()) {
      return absl::InvalidArgumentError(absl::StrCat(id().ToString(), ": executable \"", exe.name(),
                                                     "\" output ", k,
                                                     " is also one of its inputs"));
    }
    binding.device_outputs.push_back(handle);
  }
  return Execute(exe, binding, scalars);
}

}  // namespace kiln::runtime::vulkan
