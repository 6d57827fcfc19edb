// The backend-under-test: what the conformance suite (tests/conformance) needs to know about a
// compiled backend. The suite's tests (op cases, random graphs, KILN_DUMP, the MLP trajectory,
// AOT blobs) are written once against this description; each backend's test folder defines it
// once, in its backend_under_test.cc, and registers the suite with one CMake call
// (kiln_add_conformance, cmake/KilnHelpers.cmake) and one Bazel macro (kiln_conformance_suite,
// tests/defs.bzl):
//
//   // tests/cuda/backend_under_test.cc
//   const conformance::BackendUnderTest& conformance::Backend() {
//     static const BackendUnderTest* backend = new BackendUnderTest{
//         .name = "cuda", .device = "cuda:0", .run = ..., .compile = ..., ...};
//     return *backend;
//   }
//
// Every answer is compared with ir::Interpret (the reference interpreter) within the case's
// tolerance widened by the backend's documented math bounds (MathBounds), never with another
// compiled backend.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/aot/aot.h"
#include "ir/graph.h"
#include "ir/tensor_data.h"
#include "tests/codegen/random_graph.h"

namespace kiln::conformance {

/// What one compile of a graph produced (the backend's CompiledGraph, in common terms).
struct CompileStats {
  /// Generated kernels (fusion groups compiled to code) launched per run.
  int kernels = 0;
  /// Groups run by the backend's contraction path (CPU: GEMM/convolution steps; Vulkan: the
  /// tiled matmul shader).
  int contractions = 0;
  /// The KILN_DUMP folder of this compile ("" when KILN_DUMP was unset).
  std::string dump_directory;
};

/// A documented error bound of one op's result beyond one correct rounding: `ulps` units in the
/// last place of the result's float type (2^-23 relative for f32, 2^-52 for f64) plus `atol`
/// absolute (cancellation near a function's zeros).
struct UlpBound {
  double ulps = 0;
  double atol = 0;
};

/// How far a backend's math may be from the interpreter's, each bound from the backend's
/// documentation (codegen/math_expand.h, docs/vulkan.md). The suite widens a case's tolerance
/// (tests/codegen/op_cases.h: exact elementwise results, f32 accumulation) by the bounds of the
/// ops its graph uses; see Tolerance().
struct MathBounds {
  /// Ops whose result is not f64 (f32, and f16/bf16 computed in f32): their bound in f32 ulps.
  std::map<ir::Op, UlpBound> f32;
  /// f64 ops: their bound in f64 ulps.
  std::map<ir::Op, UlpBound> f64;
  /// Ops computed in f64 whatever their result type (Vulkan's random_normal: Box-Muller in f64):
  /// their f64 bound applies to every dtype.
  std::set<ir::Op> computed_in_f64;
  /// The f32 sigmoid pattern (exp and reciprocal in one graph, which ExpandMath fuses): its
  /// bound in f32 ulps (0: none).
  double f32_sigmoid_ulps = 0;
  /// f64 ops whose terms are summed in another order than the interpreter's (vectorised or
  /// tiled reductions, GEMMs): (n - 1) 2^-53 sum|x| with the cases' n <= 24, |x| < ~5 gives the
  /// 1e-12 relative and absolute the suite allows them.
  std::set<ir::Op> f64_reordered;
};

/// A file KILN_DUMP writes for each kernel besides kernel_K.kir (kernel_K.<extension>), with text
/// it must contain.
struct KernelDumpFile {
  std::string extension;  // "ll", "glsl", ...
  std::vector<std::string> contains;
};

/// The dump of a softmax over rows, for the backend's own checks (BackendUnderTest::check_dump).
struct SoftmaxDump {
  int rows = 0, cols = 0;
  std::string directory;  // the compile's dump folder
};

/// How a backend's AOT blobs are made and loaded (codegen/aot, the C API of runtime/).
struct BlobTarget {
  /// Adds the backend's section to the compile (Vulkan: options.vulkan = true).
  std::function<void(aot::CompileOptions&)> configure;
  /// The device kiln_model_load_memory_on names ("cpu", "vulkan").
  std::string device;
  /// Called once before the first load (registers the backend's blob runner).
  std::function<void()> enable;
  /// Whether the blob runs the JIT's very code, so its outputs equal `run`'s bit for bit (CPU).
  bool bit_exact_with_jit = false;
};

/// An (op, dtype) the backend cannot compile: a graph with such a node must fail with
/// Unimplemented, not crash or answer wrongly.
struct Unsupported {
  ir::Op op;
  ir::DType dtype;
};

struct BackendUnderTest {
  /// The backend's name ("cpu"): CTest prefixes and messages.
  std::string name;
  /// The kiln::Device it runs on ("cpu:0"), for the frontend-level tests (kiln::Any).
  std::string device;
  /// Compiles (or finds in the backend's graph cache) and runs `graph` on `arguments` (one per
  /// graph.Parameters()).
  std::function<absl::StatusOr<std::vector<ir::TensorData>>(
      const ir::Graph& graph, std::span<const std::shared_ptr<const ir::TensorData>> arguments)>
      run;
  /// Compiles `graph` anew (no run) and says what it produced.
  std::function<absl::StatusOr<CompileStats>(const ir::Graph& graph)> compile;
  /// Graphs compiled so far by the backend's compiled-graph cache (its misses).
  std::function<int64_t()> graph_compiles;
  MathBounds math;
  std::vector<Unsupported> unsupported;
  /// What KILN_DUMP writes per kernel besides kernel_K.kir.
  std::vector<KernelDumpFile> kernel_dump_files;
  /// Text executable.txt of a one-kernel softmax contains ("1 dispatch").
  std::vector<std::string> executable_dump_contains;
  /// The backend's own checks of a softmax's dump folder (shader forms per row length); may be
  /// empty.
  std::function<void(const SoftmaxDump&)> check_dump;
  /// Examples of Fashion-MNIST's training set the MLP learning test trains on (one epoch of
  /// the first ones, batch 128), and the test-set accuracy it must then reach. A full epoch (60000,
  /// 0.84) where a step costs milliseconds; fewer where a step costs a second (lavapipe).
  int64_t mlp_train_examples = 60000;
  double mlp_min_accuracy = 0.84;
  /// Examples of the test set the accuracy is measured on (the first ones; 10000: all).
  int64_t mlp_test_examples = 10000;
  /// Whether the backend's tensors live in device memory (Vulkan; CPU tensors are host memory):
  /// the residency tests then count exact transfers and allocator bytes.
  bool tensors_in_device_memory = false;
  BlobTarget blob;
};

/// The backend this executable tests. Defined once per backend (tests/<backend>/
/// backend_under_test.cc); the suite's sources only declare it.
const BackendUnderTest& Backend();

/// `base` (a case's or random graph's tolerance) widened by the backend's bounds for the ops of
/// `graph`.
test::Tolerance Tolerance(const MathBounds& math, test::Tolerance base, const ir::Graph& graph);

/// The first node of `graph` the backend cannot compile (an Unsupported entry), or nullptr.
const ir::Node* FindUnsupported(const BackendUnderTest& backend, const ir::Graph& graph);

/// Runs `graph` on Backend() with plain arguments (wrapped for `run`).
absl::StatusOr<std::vector<ir::TensorData>> RunOnBackend(
    const ir::Graph& graph, const std::vector<ir::TensorData>& arguments);

}  // namespace kiln::conformance
