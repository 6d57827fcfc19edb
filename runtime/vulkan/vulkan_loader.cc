#include "runtime/vulkan/vulkan_loader.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace kiln::runtime::vulkan::internal {

absl::StatusOr<PFN_vkGetInstanceProcAddr> LoadLoader(const std::string& path) {
  std::string library = path;
  if (library.empty()) {
    const char* env = std::getenv("KILN_VULKAN_LOADER");
    library = env != nullptr && *env != '\0' ? env : "libvulkan.so.1";
  }
  // Loaded once per process and never closed: drivers (lavapipe's LLVM) do not like being
  // unloaded, and the handful of dlopen()s a process makes costs nothing to keep.
  static std::mutex mutex;
  static std::map<std::string, void*>* handles = new std::map<std::string, void*>;
  std::lock_guard<std::mutex> lock(mutex);
  void*& handle = (*handles)[library];
  if (handle == nullptr) {
    handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      return absl::FailedPreconditionError(absl::StrCat(
          "no Vulkan loader: dlopen(\"", library, "\") failed: ", why != nullptr ? why : "?",
          ". Install libvulkan1 and a Vulkan driver (mesa-vulkan-drivers has the CPU driver "
          "lavapipe), or run on the CPU backend with KILN_DEVICE=cpu"));
    }
  }
  auto get = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(handle, "vkGetInstanceProcAddr"));
  if (get == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("\"", library, "\" is not a Vulkan loader: it has no vkGetInstanceProcAddr"));
  }
  return get;
}

absl::StatusOr<std::shared_ptr<InstanceApi>> CreateInstance(const std::string& loader_path) {
  absl::StatusOr<PFN_vkGetInstanceProcAddr> get = LoadLoader(loader_path);
  if (!get.ok()) return get.status();
  auto api = std::shared_ptr<InstanceApi>(new InstanceApi, [](InstanceApi* api) {
    if (api->instance != VK_NULL_HANDLE) api->vkDestroyInstance(api->instance, nullptr);
    delete api;
  });
  api->vkGetInstanceProcAddr = *get;
#define KILN_VK_LOAD_GLOBAL(name) \
  api->name = reinterpret_cast<PFN_##name>((*get)(VK_NULL_HANDLE, #name));
  KILN_VK_GLOBAL_FUNCTIONS(KILN_VK_LOAD_GLOBAL)
#undef KILN_VK_LOAD_GLOBAL
  if (api->vkCreateInstance == nullptr) {
    return absl::FailedPreconditionError("the Vulkan loader has no vkCreateInstance");
  }
  uint32_t version = VK_API_VERSION_1_0;
  if (api->vkEnumerateInstanceVersion != nullptr) api->vkEnumerateInstanceVersion(&version);
  if (version < VK_API_VERSION_1_1) {
    return absl::FailedPreconditionError(
        "the Vulkan loader offers only Vulkan 1.0; kiln needs 1.1 or newer (or use "
        "KILN_DEVICE=cpu)");
  }
  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "kiln";
  app.pEngineName = "kiln";
  app.apiVersion = std::min<uint32_t>(version, VK_API_VERSION_1_3);
  VkInstanceCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  info.pApplicationInfo = &app;
  const VkResult result = api->vkCreateInstance(&info, nullptr, &api->instance);
  if (result == VK_ERROR_INCOMPATIBLE_DRIVER) {
    api->instance = VK_NULL_HANDLE;
    return absl::FailedPreconditionError(
        "no Vulkan device: the Vulkan loader found no driver (vkCreateInstance: "
        "VK_ERROR_INCOMPATIBLE_DRIVER). Install one (mesa-vulkan-drivers has the CPU driver "
        "lavapipe), check VK_DRIVER_FILES / VK_ICD_FILENAMES, or run on the CPU backend with "
        "KILN_DEVICE=cpu");
  }
  if (result != VK_SUCCESS) {
    api->instance = VK_NULL_HANDLE;
    return CallError("vkCreateInstance", result);
  }
#define KILN_VK_LOAD_INSTANCE(name)                                          \
  api->name = reinterpret_cast<PFN_##name>((*get)(api->instance, #name));    \
  if (api->name == nullptr) {                                                \
    return absl::FailedPreconditionError("the Vulkan loader has no " #name); \
  }
  KILN_VK_INSTANCE_FUNCTIONS(KILN_VK_LOAD_INSTANCE)
#undef KILN_VK_LOAD_INSTANCE
  return api;
}

absl::StatusOr<std::shared_ptr<InstanceApi>> SharedInstance(const std::string& loader_path) {
  std::string key = loader_path;
  for (const char* variable :
       {"KILN_VULKAN_LOADER", "VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_INSTANCE_LAYERS"}) {
    const char* value = std::getenv(variable);
    absl::StrAppend(&key, "\n", value != nullptr ? value : "");
  }
  static std::mutex mutex;
  static auto* instances = new std::map<std::string, std::shared_ptr<InstanceApi>>;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = instances->find(key); it != instances->end()) return it->second;
  absl::StatusOr<std::shared_ptr<InstanceApi>> instance = CreateInstance(loader_path);
  if (instance.ok()) (*instances)[key] = *instance;
  return instance;
}

absl::Status LoadDeviceApi(const InstanceApi& instance, VkDevice device, DeviceApi& api) {
#define KILN_VK_LOAD_DEVICE(name)                                                       \
  api.name = reinterpret_cast<PFN_##name>(instance.vkGetDeviceProcAddr(device, #name)); \
  if (api.name == nullptr) {                                                            \
    return absl::FailedPreconditionError("the Vulkan device has no " #name);            \
  }
  KILN_VK_DEVICE_FUNCTIONS(KILN_VK_LOAD_DEVICE)
#undef KILN_VK_LOAD_DEVICE
  return absl::OkStatus();
}

std::string ResultName(VkResult result) {
  switch (result) {
#define KILN_VK_RESULT(name) \
  case name:                 \
    return #name;
    KILN_VK_RESULT(VK_SUCCESS)
    KILN_VK_RESULT(VK_NOT_READY)
    KILN_VK_RESULT(VK_TIMEOUT)
    KILN_VK_RESULT(VK_INCOMPLETE)
    KILN_VK_RESULT(VK_ERROR_OUT_OF_HOST_MEMORY)
    KILN_VK_RESULT(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    KILN_VK_RESULT(VK_ERROR_INITIALIZATION_FAILED)
    KILN_VK_RESULT(VK_ERROR_DEVICE_LOST)
    KILN_VK_RESULT(VK_ERROR_MEMORY_MAP_FAILED)
    KILN_VK_RESULT(VK_ERROR_LAYER_NOT_PRESENT)
    KILN_VK_RESULT(VK_ERROR_EXTENSION_NOT_PRESENT)
    KILN_VK_RESULT(VK_ERROR_FEATURE_NOT_PRESENT)
    KILN_VK_RESULT(VK_ERROR_INCOMPATIBLE_DRIVER)
    KILN_VK_RESULT(VK_ERROR_TOO_MANY_OBJECTS)
    KILN_VK_RESULT(VK_ERROR_FORMAT_NOT_SUPPORTED)
    KILN_VK_RESULT(VK_ERROR_FRAGMENTED_POOL)
    KILN_VK_RESULT(VK_ERROR_UNKNOWN)
    KILN_VK_RESULT(VK_ERROR_OUT_OF_POOL_MEMORY)
    KILN_VK_RESULT(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    KILN_VK_RESULT(VK_ERROR_FRAGMENTATION)
    KILN_VK_RESULT(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
    KILN_VK_RESULT(VK_PIPELINE_COMPILE_REQUIRED)
#undef KILN_VK_RESULT
    default:
      return absl::StrCat("VkResult ", static_cast<int>(result));
  }
}

absl::Status CallError(const char* call, VkResult result) {
  const std::string message = absl::StrCat(call, " failed: ", ResultName(result));
  switch (result) {
    case VK_ERROR_OUT_OF_HOST_MEMORY:
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
    case VK_ERROR_OUT_OF_POOL_MEMORY:
    case VK_ERROR_TOO_MANY_OBJECTS:
      return absl::ResourceExhaustedError(message);
    case VK_ERROR_DEVICE_LOST:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace kiln::runtime::vulkan::internal
