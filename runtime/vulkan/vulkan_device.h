// The Vulkan driver: runs SPIR-V compute shaders with a launch plan, the Vulkan twin of
// runtime/executable.h. No shader compiler here (codegen/vulkan turns GLSL into SPIR-V), and no
// Vulkan header: the loader (libvulkan.so.1) is opened at run time, so a program linking this
// library still starts, and reports a clear error, on a machine without Vulkan.
//
// The contract with codegen/vulkan:
//   - Every shader has entry point "main", takes its storage buffers as descriptor set 0,
//     bindings 0 .. num_buffers - 1 (`layout(set = 0, binding = i) buffer ...`), and at most 128
//     bytes of push constants at offset 0.
//   - A dispatch binds slot buffer_slots[i] to binding i: exactly the slot's bytes, starting at a
//     offset the runtime chooses (a multiple of the device's minStorageBufferOffsetAlignment).
//   - The error-flag slot is 16 bytes, read as two little-endian int64 after the run: [0] a
//     runtime::KernelErrorCode, [1] its detail (the offending index). A shader without int64 can
//     declare it `int flag[4]` and write words 0..3 (code, 0, detail, detail < 0 ? -1 : 0). The
//     runtime zeroes it before each run; each dispatch binding it gets a 16-byte flag of its own,
//     so an error names the dispatch that raised it.
//   - Dispatches run in order; a compute -> compute memory barrier separates each from the next.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/device.h"
#include "runtime/executable.h"

namespace kiln::runtime::vulkan {

/// One compute pipeline.
struct ShaderSpec {
  std::string name;
  std::vector<uint32_t> spirv;  // SPIR-V words, entry point "main"
  int num_buffers = 0;          // storage buffers: set 0, bindings 0 .. num_buffers - 1
  int push_constant_bytes = 0;  // 0 .. 128, a multiple of 4
};

/// One vkCmdDispatch.
struct Dispatch {
  int shader = 0;
  std::vector<int> buffer_slots;          // binding i is slot buffer_slots[i]
  std::vector<std::byte> push_constants;  // exactly the shader's push_constant_bytes
  uint32_t groups[3] = {1, 1, 1};         // workgroup counts; a 0 skips the dispatch
  std::string name;                       // names the dispatch in errors and dumps
  std::string error_context;              // prefixes a kernel error: the op and user line
};

/// Everything VulkanDevice::Load needs.
struct VulkanExecutableSpec {
  std::string name = "executable";
  int num_inputs = 0;
  int num_outputs = 0;
  int num_scalars = 0;
  /// runtime::Slot as for the CPU runtime: kInput, kOutput, kScalar, kArena (offsets from the
  /// memory planner, multiples of runtime::kBufferAlignment), kConstant (uploaded once at Load),
  /// kErrorFlag (16 bytes).
  std::vector<runtime::Slot> slots;
  std::vector<ShaderSpec> shaders;
  std::vector<Dispatch> dispatches;  // in order, a compute -> compute barrier between them
};

/// What a physical device offers, as the codegen needs it.
struct DeviceInfo {
  int index = 0;  // position in ListDevices(), the KILN_VULKAN_DEVICE index
  std::string name;
  std::string type;  // "discrete GPU", "integrated GPU", "virtual GPU", "CPU", "other"
  uint32_t vendor_id = 0;
  uint32_t device_id = 0;
  uint32_t api_version = 0;  // VK_MAKE_API_VERSION packing
  // Shader features; the device is opened with each one that is present enabled.
  bool float64 = false;              // shaderFloat64
  bool int64 = false;                // shaderInt64
  bool float16 = false;              // shaderFloat16 (arithmetic)
  bool int16 = false;                // shaderInt16
  bool int8 = false;                 // shaderInt8 (arithmetic)
  bool int8_storage = false;         // storageBuffer8BitAccess
  bool int16_storage = false;        // storageBuffer16BitAccess
  uint32_t subgroup_size = 0;        // 0 when the device reports none
  bool subgroup_arithmetic = false;  // compute stage, VK_SUBGROUP_FEATURE_ARITHMETIC_BIT
  bool subgroup_shuffle = false;     // compute stage, VK_SUBGROUP_FEATURE_SHUFFLE_BIT
  uint32_t max_shared_memory_bytes = 0;
  uint32_t max_workgroup_invocations = 0;
  uint32_t max_workgroup_size[3] = {0, 0, 0};
  uint32_t max_workgroup_count[3] = {0, 0, 0};
  uint32_t max_storage_buffers = 0;       // per shader (maxPerStageDescriptorStorageBuffers)
  uint64_t max_storage_buffer_range = 0;  // the most bytes one binding may cover
  uint64_t min_storage_buffer_offset_alignment = 0;
  uint64_t device_local_bytes = 0;  // the largest device-local heap
  /// True when device-local memory is not host-visible (a discrete GPU without resizable BAR):
  /// runs then copy through host-visible staging buffers.
  bool device_local_separate = false;

  /// One line: "0: llvmpipe (LLVM 15.0.6, 256 bits) (CPU, vendor 0x10005, Vulkan 1.3.230)".
  std::string ToString() const;
};

/// How Open chooses and sets up a device. The defaults are what programs want; tests override.
struct OpenOptions {
  /// The Vulkan loader library dlopen()ed; empty = $KILN_VULKAN_LOADER or "libvulkan.so.1".
  std::string loader;
  /// -1: use staging only where device_local_separate; 0: never; 1: always (tests the staging
  /// path on a unified-memory device). $KILN_VULKAN_STAGING=0/1 overrides -1.
  int staging = -1;
};

/// Devices the loader finds, in the loader's order; empty when there is no loader or driver.
std::vector<DeviceInfo> ListDevices(const OpenOptions& options = {});

class VulkanDevice;

/// A loaded launch plan: pipelines, constants in device memory, descriptor sets; the Vulkan
/// driver's runtime::DeviceExecutable. Immutable; VulkanDevice::Run may run one executable from
/// several threads at once (each concurrent run takes its own set of run buffers). Keeps its
/// device alive.
class VulkanExecutable final : public runtime::DeviceExecutable {
 public:
  ~VulkanExecutable() override;
  VulkanExecutable(const VulkanExecutable&) = delete;
  VulkanExecutable& operator=(const VulkanExecutable&) = delete;

  runtime::DeviceKind kind() const override { return runtime::DeviceKind::kVulkan; }
  const std::string& name() const override;
  int num_inputs() const override;
  int num_outputs() const override;
  int num_scalars() const override;
  /// The largest slot bound to input k / output k / scalar k (0 when no slot uses it).
  int64_t input_bytes(int k) const override;
  int64_t output_bytes(int k) const override;
  int64_t scalar_bytes(int k) const;
  /// Bytes of the arena (the end of the last arena slot).
  int64_t arena_bytes() const;
  /// Bytes of device memory one concurrent run holds (inputs, outputs, scalars, flags, arena).
  int64_t run_buffer_bytes() const;

  /// A listing for KILN_DUMP:
  ///   vulkan executable "f": 2 inputs, 1 output, 0 scalars, arena 256 bytes, 2 shaders, ...
  ///     slot 0: input 0, 64 bytes
  ///     shader 0: add (3 buffers, 4 push-constant bytes, 412 SPIR-V words)
  ///     dispatch 0: add groups [4, 1, 1] bindings [slot 0, slot 1, slot 2] push 04000000
  std::string ToString() const;

  struct Impl;

 private:
  friend class VulkanDevice;
  explicit VulkanExecutable(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// One opened Vulkan device with a compute queue: the Vulkan driver's runtime::Device (buffers
/// in device memory, VulkanExecutables run on them, every submission waited for). Thread-safe.
class VulkanDevice final : public runtime::Device,
                           public std::enable_shared_from_this<VulkanDevice> {
 public:
  /// Opens the device `selector` names: an index into ListDevices() or a case-insensitive
  /// substring of its name; empty = $KILN_VULKAN_DEVICE, and when that is unset too, the first
  /// discrete GPU, else the first integrated GPU, else the first device. Errors: no loader / no
  /// device (FailedPrecondition, suggesting KILN_DEVICE=cpu), no device matching the selector
  /// (NotFound, listing the devices found).
  static absl::StatusOr<std::shared_ptr<VulkanDevice>> Open(std::string_view selector = "",
                                                            const OpenOptions& options = {});
  ~VulkanDevice() override;

  const DeviceInfo& info() const;
  /// Whether runs copy through staging buffers (OpenOptions::staging resolved).
  bool uses_staging() const;
  /// Bytes of VkDeviceMemory the device holds now: 64 MiB blocks that buffers are carved from
  /// (one empty block per memory type is kept for reuse) plus blocks of their own for buffers
  /// over 32 MiB (freed with their buffer).
  int64_t allocated_bytes() const;

  /// Checks the spec (InvalidArgument naming the slot / shader / dispatch; SPIR-V through
  /// CheckSpirv), creates the
  /// pipelines (through the device's pipeline cache) and uploads the constants.
  absl::StatusOr<std::shared_ptr<const VulkanExecutable>> Load(VulkanExecutableSpec spec);

  /// Runs every dispatch once: copies inputs and scalars in (counted in transfer_stats()),
  /// submits one command buffer, waits
  /// on its fence, checks the error flags, copies outputs out. inputs/outputs/scalars must have
  /// exactly the executable's counts of entries, each addressing at least input_bytes(k) /
  /// output_bytes(k) / scalar_bytes(k) bytes (any alignment). A kernel error is OutOfRange
  /// (kKernelIndexOutOfRange) or Internal naming the dispatch; outputs are then unspecified.
  absl::Status Run(const VulkanExecutable& exe, std::span<const void* const> inputs,
                   std::span<void* const> outputs, std::span<const void* const> scalars = {});

  // ---- runtime::Device
  /// vulkan:<index in ListDevices()>.
  runtime::DeviceId id() const override;
  /// A storage buffer in the memory shaders use (device-local where the device has it): its
  /// host_data() is its mapping on a unified-memory device, nullptr on a staging one.
  absl::StatusOr<std::unique_ptr<runtime::DeviceBuffer>> Allocate(int64_t bytes) override;
  /// Through the mapping, or through a staging buffer and one submitted copy (waited for).
  absl::Status CopyToDevice(std::span<const std::byte> source, runtime::DeviceBuffer& destination,
                            int64_t offset) override;
  absl::Status CopyFromDevice(const runtime::DeviceBuffer& source, int64_t offset,
                              std::span<std::byte> destination) override;
  /// `executable` must be a VulkanExecutable loaded on this device. The shaders read and write
  /// the given buffers in place (no copy: tensors stay in device memory); only scalars go up and
  /// the error flags come back. A run context whose descriptor sets point at other buffers is
  /// rebound first (descriptor writes and a re-recorded command buffer), so a loop that gets
  /// the same buffers back (a caching allocator) rebinds nothing. An output buffer may not also
  /// be an input (InvalidArgument).
  absl::Status Run(const runtime::DeviceExecutable& executable,
                   std::span<const runtime::DeviceBuffer* const> inputs,
                   std::span<runtime::DeviceBuffer* const> outputs,
                   std::span<const void* const> scalars) override;
  /// Every submission (runs, copies, uploads) is waited for before its call returns, so nothing
  /// is ever pending here.
  absl::Status Synchronize() override { return absl::OkStatus(); }

  struct Impl;

 private:
  struct RunBinding;
  // Both Runs: acquires a run context, binds, submits, waits, checks the error flags.
  absl::Status Execute(const VulkanExecutable& exe, const RunBinding& binding,
                       std::span<const void* const> scalars);
  explicit VulkanDevice(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::runtime::vulkan
