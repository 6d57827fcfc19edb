// The Vulkan backend's graph compiler: ir::Graph → runtime::vulkan::VulkanExecutableSpec, loaded
// on a runtime::vulkan::VulkanDevice. The pipeline is the shared one (codegen/graph_compiler.h);
// this backend supplies its hooks:
//
//   simplify passes → Fuse → per group:
//     elementwise / reduction / scatter / copy → LowerGroup → kernel IR → GLSL (glsl.h; long
//       reductions run one workgroup per row, combined through subgroup arithmetic where the
//       device has it in compute shaders, and through shared memory) → SPIR-V
//       (spirv.h: shaderc, validated, optimised)
//     f32/f64 matmul → a GLSL matmul tiled through workgroup shared memory (64 x 64 tiles,
//       4 x 4 register blocks per invocation, batched; a permute of the last two axes feeding
//       it is read in place with swapped strides), then the group's elementwise epilogue as a
//       kernel over its result (LowerEpilogue)
//     other contractions (conv, integer matmul) → LowerGroup's direct loop nest, one invocation per
//       output element, epilogue fused
//   → PlanMemory (liveness → arena offsets) → VulkanExecutableSpec (slots, shaders, dispatches).
//
// The spec is plain data (SPIR-V words, slot table, dispatch list), so it can be serialised into
// an AOT blob and loaded on any device with the features it was compiled for.
//
// KILN_DUMP=<dir> writes, per compile, the graph after each pass, fusion.txt, and for each
// kernel kernel_K.kir (kernel IR), kernel_K.glsl and kernel_K.spvasm (SPIR-V disassembly of the
// optimised module), then memory_plan.txt and executable.txt.
//
// Compiled graphs are cached in memory per device by ir::SignatureHash, checked with
// passes::SameGraph; SPIR-V modules are cached by the hash of their GLSL.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/graph_compiler.h"
#include "codegen/vulkan/glsl.h"
#include "ir/graph.h"
#include "ir/tensor_data.h"
#include "runtime/vulkan/vulkan_device.h"

namespace kiln::codegen::vulkan {

/// A graph compiled for one Vulkan device.
struct CompiledGraph {
  /// The graph as given (the cache compares against it).
  ir::Graph source;
  /// The launch plan as data (what an AOT blob would carry) and as loaded on the device.
  runtime::vulkan::VulkanExecutableSpec spec;
  std::shared_ptr<const runtime::vulkan::VulkanExecutable> executable;
  std::shared_ptr<runtime::vulkan::VulkanDevice> device;
  std::vector<ir::TensorType> parameter_types;
  std::vector<ir::TensorType> output_types;
  /// The GLSL of each shader (spec.shaders order), for tests and dumps.
  std::vector<std::string> glsl;
  int num_kernels = 0;
  int num_matmuls = 0;  // groups run by the tiled matmul shader
  std::string dump_directory;
};

/// The GLSL features `info` offers.
GlslTarget TargetFor(const runtime::vulkan::DeviceInfo& info);

/// The process's device for `kiln::Vulkan::Device(index)`, opened once and shared: index 0 is the
/// default device (KILN_VULKAN_DEVICE, else the first discrete GPU, integrated GPU, any device),
/// index N > 0 is runtime::vulkan::ListDevices()[N]. With no Vulkan device, FailedPrecondition
/// saying so and suggesting the Cpu backend (KILN_DEVICE=cpu).
absl::StatusOr<std::shared_ptr<runtime::vulkan::VulkanDevice>> DeviceForIndex(int index);

/// Compiles `graph` (which must verify) for `device`. Errors name the stage, the fusion group and
/// its root op; an op the device cannot run names the missing feature.
absl::StatusOr<std::shared_ptr<const CompiledGraph>> CompileGraph(
    const ir::Graph& graph, std::shared_ptr<runtime::vulkan::VulkanDevice> device);
/// As above, generating code for `info` instead of the device's own DeviceInfo (which must offer
/// at least what `info` claims): tests force fallbacks with it (subgroup_arithmetic = false).
absl::StatusOr<std::shared_ptr<const CompiledGraph>> CompileGraph(
    const ir::Graph& graph, std::shared_ptr<runtime::vulkan::VulkanDevice> device,
    const runtime::vulkan::DeviceInfo& info);

/// The device AOT compiles for when no device is at hand: every shader feature the GLSL may use is
/// assumed present (the blob records the ones its SPIR-V declares, checked when it is loaded),
/// limits are Vulkan 1.1's minimums, and minStorageBufferOffsetAlignment is 256 (the largest the
/// specification allows, so arena offsets suit every device). Subgroup arithmetic is off: blob
/// reductions combine through workgroup memory only (portable, no subgroup feature recorded).
runtime::vulkan::DeviceInfo PortableDeviceInfo();

/// Compiles `graph` for a device described by `info` without opening one (codegen/aot): the
/// result has `spec`, `glsl` and the types; `executable` and `device` are null.
absl::StatusOr<std::shared_ptr<const CompiledGraph>> CompileSpec(
    const ir::Graph& graph, const runtime::vulkan::DeviceInfo& info);

/// Runs a compiled graph on its device (argument types checked).
absl::StatusOr<std::vector<ir::TensorData>> RunCompiledGraph(
    const CompiledGraph& compiled,
    std::span<const std::shared_ptr<const ir::TensorData>> arguments);

/// Counters of the process-wide compiled-graph cache.
using codegen::GraphCacheStats;
GraphCacheStats GetGraphCacheStats();

/// Finds `graph` compiled for DeviceForIndex(device_index) in the process-wide cache, or
/// compiles it.
absl::StatusOr<std::shared_ptr<const CompiledGraph>> FindOrCompile(const ir::Graph& graph,
                                                                   int device_index = 0);

/// Compiles (or finds in the cache) and runs `graph` on DeviceForIndex(device_index), with host
/// values in and out (tests; the `kiln::Vulkan` backend keeps tensors in device memory instead:
/// backends/vulkan.cc).
absl::StatusOr<std::vector<ir::TensorData>> CompileAndRun(
    const ir::Graph& graph, std::span<const std::shared_ptr<const ir::TensorData>> arguments,
    int device_index = 0);

}  // namespace kiln::codegen::vulkan
