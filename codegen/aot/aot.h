// Ahead-of-time compilation: an ir::Graph becomes a `.kiln` blob (runtime/blob.h,
// docs/deploy.md) that libkiln_runtime loads and runs without any compiler.
//
//   ir::Graph g = kiln::trace(model, example_x);          // frontend/trace.h
//   aot::CompileOptions options;
//   options.name = "mlp";
//   options.triples = {"aarch64-unknown-linux-gnu"};      // extra targets; the host is implied
//   absl::Status s = aot::CompileToFile(g, options, "mlp.kiln");
//
// The graph goes through the CPU backend's graph compiler (the same fusion, memory plan and
// launch plan as the JIT), then every kernel and every GEMM micro-kernel it uses is compiled to
// machine code once per triple (the host's CPU for the host triple, or the x86-64 level KILN_CPU
// pins, as the JIT compiles; a generic CPU of the triple for the others) and linked into a shared
// object per triple (host: `cc -shared`; other triples: `ld.lld`), stored as the blob's code
// sections. With CompileOptions::vulkan the blob also carries the Vulkan graph compiler's plan and
// SPIR-V (docs/deploy.md, docs/vulkan.md), with CompileOptions::cuda the CUDA graph compiler's
// plan and PTX (docs/deploy.md).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/graph.h"
#include "ir/tensor_data.h"

namespace kiln::aot {

struct CompileOptions {
  /// Extra LLVM target triples (e.g. "aarch64-unknown-linux-gnu" or "aarch64-linux-gnu"); the
  /// host triple is always included.
  std::vector<std::string> triples;
  /// The code the host triple gets, one code section each: "host" (the host's CPU with every
  /// feature it has, whatever KILN_CPU says), "x86-64-v2", "x86-64-v3", "x86-64-v4" (LLVM's CPU of
  /// that name with exactly its features, whether or not the host has them). They are stored best
  /// first, whatever the order here, and the runtime loads the first one the CPU runs (or the
  /// level KILN_CPU pins there). Empty (the default): on an x86-64 host, "host" and the three
  /// levels, so that one blob runs on every x86-64 from x86-64-v2 on, at the best code each CPU
  /// takes; when KILN_CPU pins a level here, that level alone; on other hosts, "host".
  std::vector<std::string> cpu_levels;
  /// Store the graph's IR text in the blob (for `kiln inspect` and debugging).
  bool include_ir_text = true;
  /// The model's name in the signature ("" → "model").
  std::string name;
  /// Weights: parameters of the graph named here are bound to these values at compile time
  /// (kiln::trace returns a module's parameters this way, TracedGraph::weights). They go into the
  /// blob's weights section and are listed by name in the signature's "weights"; the remaining
  /// parameters are the blob's inputs, in graph order. A name that is no parameter, or a value
  /// whose type differs from the parameter's, is an error.
  std::vector<std::pair<std::string, std::shared_ptr<const ir::TensorData>>> weights;
  /// Also compile for Vulkan: the graph goes through the Vulkan graph compiler
  /// (codegen/vulkan) for codegen::vulkan::PortableDeviceInfo() (no device needed), and the blob
  /// gains a "vulkan plan" section (slots, shaders, dispatches, the Vulkan version and the device
  /// features the SPIR-V declares) and a "spirv" section. Constants are shared with the CPU plan's
  /// weights section where their bytes are equal. Unimplemented in a build without Vulkan.
  bool vulkan = false;
  /// Also compile for CUDA: the graph goes through the CUDA graph compiler (codegen/cuda,
  /// CompileSpec for `cuda_arch`: no GPU needed, but NVRTC is, see codegen::cuda::NvrtcAvailable)
  /// and the blob gains a "cuda" plan section (slots, modules, kernels, launches, the
  /// architecture) and a "cuda:ptx" payload of the kernels' PTX. Constants are shared with the
  /// other plans' weights where their bytes are equal. Running the blob needs only the NVIDIA
  /// driver (runtime/cuda/blob_cuda.h). Unimplemented in a build without CUDA.
  bool cuda = false;
  /// The architecture the CUDA section's PTX is written for. The driver JIT-compiles PTX forward
  /// to every newer GPU, never back: the default, sm_80, runs on A100, H100, H200 and later
  /// GPUs; "sm_90" uses Hopper's instructions and runs on Hopper and later only.
  std::string cuda_arch = "sm_80";
  /// The CUDA section's f32 matmuls run on tensor cores as tf32 (codegen::cuda::AllowTf32; like
  /// `torch.backends.cuda.matmul.allow_tf32`): faster, 10 mantissa bits instead of 23.
  bool cuda_allow_tf32 = false;
};

/// Compiles `graph` (which must verify; parameters are the blob's inputs in order, named by
/// their parameter names, outputs by their output names) into blob bytes. Errors name the stage
/// (graph compile, code generation for triple T, link) and, for link failures, the command.
absl::StatusOr<std::string> Compile(const ir::Graph& graph, const CompileOptions& options);

/// Compile, then writes the bytes to `path` (atomically: a temporary file renamed into place).
absl::Status CompileToFile(const ir::Graph& graph, const CompileOptions& options,
                           const std::string& path);

}  // namespace kiln::aot
