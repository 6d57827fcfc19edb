// The CUDA backend's graph compiler: ir::Graph → runtime::cuda::CudaExecutableSpec, loaded on a
// runtime::cuda::CudaDevice. The pipeline is the shared one (codegen/graph_compiler.h); this
// backend supplies its hooks:
//
//   simplify passes → Fuse → per group:
//     elementwise / reduction / scatter / copy → LowerGroup → kernel IR → CUDA C (cuda_c.h; long
//       reductions run one block per row, combined with warp shuffles and shared memory) → PTX
//       (nvrtc.h)
//     matmul → a CUDA C tiled template (matmul.h; batched; a permute of the last two axes
//       feeding it is read in place with swapped strides): f16/bf16 on tensor cores (mma.sync,
//       f32 accumulation; sm_80+), f32 on tensor cores as tf32 when AllowTf32(), else f32/f64
//       with fma; then the group's elementwise epilogue as a kernel over its result
//     other contractions (conv, integer matmul, f16/bf16 before sm_80) → LowerGroup's direct
//       loop nest, one thread per output element, epilogue fused
//   → PlanMemory → CudaExecutableSpec (slots, one PTX module per kernel, launches).
//
// The spec is plain data (PTX text, slot table, launch list): it can be serialised into an AOT
// blob and loaded by the driver alone (no NVRTC needed to run PTX).
//
// The architecture compiled for: $KILN_CUDA_ARCH ("sm_90"), else the device's, else sm_80 (no
// device: CompileSpec). KILN_DUMP=<dir> writes, per compile, the graph after each pass,
// fusion.txt, and for each kernel kernel_K.kir, kernel_K.cu and kernel_K.ptx, then
// memory_plan.txt and executable.txt.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/graph_compiler.h"
#include "ir/graph.h"
#include "ir/tensor_data.h"
#include "runtime/cuda/cuda_device.h"

namespace kiln::codegen::cuda {

/// A graph compiled for one CUDA architecture (and loaded on one device, unless compiled ahead of
/// time).
struct CompiledGraph {
  /// The graph as given (the cache compares against it).
  ir::Graph source;
  /// The launch plan as data (what an AOT blob carries) and as loaded on the device.
  runtime::cuda::CudaExecutableSpec spec;
  std::shared_ptr<const runtime::cuda::CudaExecutable> executable;
  std::shared_ptr<runtime::cuda::CudaDevice> device;
  std::vector<ir::TensorType> parameter_types;
  std::vector<ir::TensorType> output_types;
  /// The CUDA C of each module (spec.modules order), for tests and dumps.
  std::vector<std::string> cuda_sources;
  std::string arch;         // "sm_90"
  bool allow_tf32 = false;  // f32 matmuls ran on tensor cores as tf32
  int num_kernels = 0;
  int num_matmuls = 0;  // groups run by the tiled matmul template
  std::string dump_directory;
};

/// The architecture to compile for on `device` (null: none at hand): $KILN_CUDA_ARCH when set,
/// else the device's compute capability, else "sm_80".
std::string ArchFor(const runtime::cuda::CudaDevice* device);

/// Whether f32 matmuls may run on tensor cores as tf32 (10 mantissa bits; PyTorch's
/// `torch.backends.cuda.matmul.allow_tf32`, off by default as there): SetAllowTf32's value, else
/// $KILN_CUDA_ALLOW_TF32 ("1" or "true"). Read when a graph compiles; the cache keeps graphs
/// compiled either way apart.
bool AllowTf32();
void SetAllowTf32(bool allow);

/// The process's device for `kiln::Cuda::Device(index)` (the CUDA ordinal), opened once and
/// shared. Without a driver or device, FailedPrecondition saying so and suggesting the Cpu
/// backend (KILN_DEVICE=cpu).
absl::StatusOr<std::shared_ptr<runtime::cuda::CudaDevice>> DeviceForIndex(int index);

/// Compiles `graph` (which must verify) for `device` (ArchFor(device), AllowTf32()) and loads it.
/// Errors name the stage, the fusion group and its root op.
absl::StatusOr<std::shared_ptr<const CompiledGraph>> CompileGraph(
    const ir::Graph& graph, std::shared_ptr<runtime::cuda::CudaDevice> device);

/// Compiles `graph` for `arch` ("sm_80") without a device (AOT, tests): the result has `spec`,
/// `cuda_sources` and the types; `executable` and `device` are null. `allow_tf32`: as AllowTf32.
absl::StatusOr<std::shared_ptr<const CompiledGraph>> CompileSpec(const ir::Graph& graph,
                                                                 const std::string& arch,
                                                                 bool allow_tf32 = false);

/// Runs a compiled graph on its device with host values in and out (argument types checked).
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

/// Compiles (or finds) and runs `graph` on DeviceForIndex(device_index), host values in and out
/// (tests; the kiln::Cuda backend keeps tensors in device memory: backends/cuda.cc).
absl::StatusOr<std::vector<ir::TensorData>> CompileAndRun(
    const ir::Graph& graph, std::span<const std::shared_ptr<const ir::TensorData>> arguments,
    int device_index = 0);

}  // namespace kiln::codegen::cuda
