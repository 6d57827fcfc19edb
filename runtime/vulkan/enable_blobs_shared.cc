// Compiled into libkiln_runtime.so only (runtime/CMakeLists.txt): installs the Vulkan runner for
// blobs when the library is loaded, so C programs need no extra call to run on "vulkan".
#include "runtime/vulkan/blob_vulkan.h"

namespace {
[[maybe_unused]] const bool installed = (kiln::runtime::vulkan::EnableVulkanBlobs(), true);
}  // namespace
