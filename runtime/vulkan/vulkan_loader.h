// The Vulkan entry points kiln uses, loaded at run time from the loader library
// (libvulkan.so.1) with dlopen, so that linking runtime/vulkan never makes a program need
// Vulkan to start. Internal to runtime/vulkan: this header includes <vulkan/vulkan.h>.
#pragma once

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::runtime::vulkan::internal {

// X(name) for every function; global ones come from vkGetInstanceProcAddr(nullptr, ...),
// instance ones from the instance, device ones from vkGetDeviceProcAddr.
#define KILN_VK_GLOBAL_FUNCTIONS(X) \
  X(vkCreateInstance)               \
  X(vkEnumerateInstanceVersion)

#define KILN_VK_INSTANCE_FUNCTIONS(X)         \
  X(vkDestroyInstance)                        \
  X(vkEnumeratePhysicalDevices)               \
  X(vkGetPhysicalDeviceProperties)            \
  X(vkGetPhysicalDeviceProperties2)           \
  X(vkGetPhysicalDeviceFeatures2)             \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkGetPhysicalDeviceMemoryProperties)      \
  X(vkCreateDevice)                           \
  X(vkGetDeviceProcAddr)

#define KILN_VK_DEVICE_FUNCTIONS(X) \
  X(vkDestroyDevice)                \
  X(vkGetDeviceQueue)               \
  X(vkDeviceWaitIdle)               \
  X(vkAllocateMemory)               \
  X(vkFreeMemory)                   \
  X(vkMapMemory)                    \
  X(vkUnmapMemory)                  \
  X(vkCreateBuffer)                 \
  X(vkDestroyBuffer)                \
  X(vkGetBufferMemoryRequirements)  \
  X(vkBindBufferMemory)             \
  X(vkCreateShaderModule)           \
  X(vkDestroyShaderModule)          \
  X(vkCreateDescriptorSetLayout)    \
  X(vkDestroyDescriptorSetLayout)   \
  X(vkCreatePipelineLayout)         \
  X(vkDestroyPipelineLayout)        \
  X(vkCreatePipelineCache)          \
  X(vkDestroyPipelineCache)         \
  X(vkCreateComputePipelines)       \
  X(vkDestroyPipeline)              \
  X(vkCreateDescriptorPool)         \
  X(vkDestroyDescriptorPool)        \
  X(vkAllocateDescriptorSets)       \
  X(vkUpdateDescriptorSets)         \
  X(vkCreateCommandPool)            \
  X(vkDestroyCommandPool)           \
  X(vkAllocateCommandBuffers)       \
  X(vkBeginCommandBuffer)           \
  X(vkEndCommandBuffer)             \
  X(vkCmdBindPipeline)              \
  X(vkCmdBindDescriptorSets)        \
  X(vkCmdPushConstants)             \
  X(vkCmdDispatch)                  \
  X(vkCmdPipelineBarrier)           \
  X(vkCmdCopyBuffer)                \
  X(vkCmdFillBuffer)                \
  X(vkCreateFence)                  \
  X(vkDestroyFence)                 \
  X(vkResetFences)                  \
  X(vkWaitForFences)                \
  X(vkQueueSubmit)

#define KILN_VK_DECLARE(name) PFN_##name name = nullptr;

/// The loader's global and instance functions for one VkInstance.
struct InstanceApi {
  KILN_VK_GLOBAL_FUNCTIONS(KILN_VK_DECLARE)
  KILN_VK_INSTANCE_FUNCTIONS(KILN_VK_DECLARE)
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  VkInstance instance = VK_NULL_HANDLE;
};

/// Device functions for one VkDevice.
struct DeviceApi {
  KILN_VK_DEVICE_FUNCTIONS(KILN_VK_DECLARE)
};

/// dlopen()s `path` (empty: $KILN_VULKAN_LOADER, else "libvulkan.so.1") once per process and
/// returns its vkGetInstanceProcAddr. FailedPrecondition naming the library and dlerror().
absl::StatusOr<PFN_vkGetInstanceProcAddr> LoadLoader(const std::string& path);

/// Creates an instance (Vulkan 1.1 .. 1.3, whatever the loader offers) and loads the instance
/// functions. FailedPrecondition when the loader has no driver.
absl::StatusOr<std::shared_ptr<InstanceApi>> CreateInstance(const std::string& loader_path);

/// The process's instance for `loader_path` and the driver-selecting environment
/// (VK_DRIVER_FILES, VK_ICD_FILENAMES, VK_INSTANCE_LAYERS): created on first use, then kept for
/// the life of the process. Destroying an instance makes the loader unload the drivers, and
/// drivers (lavapipe's LLVM) leak their one-time initialisation on every unload; a kept instance
/// also makes later ListDevices / Open calls cheap. Failures are not kept.
absl::StatusOr<std::shared_ptr<InstanceApi>> SharedInstance(const std::string& loader_path);

/// Loads the device functions of `device`.
absl::Status LoadDeviceApi(const InstanceApi& instance, VkDevice device, DeviceApi& api);

/// "VK_ERROR_OUT_OF_DEVICE_MEMORY", ... ; unknown values as "VkResult -1000".
std::string ResultName(VkResult result);

/// The error for a failed call: "vkCreateBuffer failed: VK_ERROR_OUT_OF_DEVICE_MEMORY" (out of
/// memory is ResourceExhausted, a lost device Unavailable, everything else Internal).
absl::Status CallError(const char* call, VkResult result);

}  // namespace kiln::runtime::vulkan::internal
