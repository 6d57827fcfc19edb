// Kernel IR → GLSL compute shaders (Vulkan flavour: #version 450, std430 storage buffers in
// descriptor set 0). The statements and expressions come from the shared C-style renderer
// (codegen/c_render.h); this file holds the GLSL hooks and the shader frame:
//
//   #version 450
//   #extension GL_EXT_shader_explicit_arithmetic_types_int64 : require   (indices are i64)
//   #extension GL_EXT_shader_8bit_storage / 16bit_storage                 (u8/bool, f16/bf16 args)
//   layout(local_size_x = 64) in;
//   layout(std430, set = 0, binding = 0) readonly buffer Arg0 { float d[]; } a0;   // arg 0
//   ...
//   void main() { int64_t gid = ...; if (gid >= EXTENT) return; <body> }
//
// Binding i is kernel arg i. Buffer element types: f32 float, f64 double, i32 int, i64 int64_t,
// u8/bool uint8_t, f16/bf16 uint16_t (converted by integer bit operations: exact, ties to even).
// The launch is one invocation per gid (workgroups of `workgroup_size`, laid out over x and y
// when there are more than the device's x limit) or, for long reductions, one workgroup per gid
// (RenderOptions::cooperative; with GlslTarget::subgroup_arithmetic the partial results combine
// through GL_KHR_shader_subgroup_arithmetic first). Shapes are static: extents are constants in the
// source.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "codegen/kernel_ir.h"

namespace kiln::codegen::vulkan {

/// What the device offers that the GLSL may use (from runtime::vulkan::DeviceInfo).
struct GlslTarget {
  bool float64 = false;        // shaderFloat64: f64 args and values
  bool int64 = true;           // shaderInt64: required (indices are i64)
  bool int8_storage = false;   // storageBuffer8BitAccess: u8/bool args
  bool int16_storage = false;  // storageBuffer16BitAccess: f16/bf16 args
  /// Subgroup arithmetic in compute shaders (VK_SUBGROUP_FEATURE_ARITHMETIC_BIT): long-row
  /// reductions combine within subgroups (subgroupAdd/Mul/Max/Min) before workgroup memory;
  /// false keeps the workgroup-memory tree only.
  bool subgroup_arithmetic = false;
  uint32_t max_workgroup_count_x = 65535;
  uint32_t max_workgroup_count_y = 65535;
};

/// One kernel as a shader.
struct GlslKernel {
  std::string source;
  int workgroup_size = 64;
  /// Workgroups to launch (x, y, z).
  std::array<uint32_t, 3> groups = {1, 1, 1};
  bool cooperative = false;
};

/// Renders `kernel` (after ExpandMath: f32 exp/log/tanh/erf become polynomials with documented
/// accuracy, codegen/math_expand.h). Fails with FailedPrecondition naming the kernel, the op or
/// arg and the missing device feature (f64 without shaderFloat64, ...), or Unimplemented for an
/// op GLSL lacks (f64 transcendental functions).
absl::StatusOr<GlslKernel> KernelToGlsl(const Kernel& kernel, const GlslTarget& target);

}  // namespace kiln::codegen::vulkan
