// The lazy engine behind Tensor<B, R, K>: type-erased nodes, recording with type checks at the
// user's line, and realization.
//
// Every op records a LazyNode (op, attributes, inferred type, operands, source line, device); no
// computation happens. Realizing a node (into_data, to_vector, item, printing) collects the
// pending DAG behind it, builds an ir::Graph in which already-realized values enter as
// parameters (never constants: a compile cache keys on structure, not data), runs it on the
// device's executor and stores the result in the node, which then drops its operands so the DAG
// behind it is freed. Nodes that user tensors still hold inside the DAG are stored too, so they
// are not computed twice. Pending parameters (gradient leaves: a layer's lazy initialisation)
// behind the roots are realized first, in a graph of their own, so that a training step's graph is
// the same from the first step on.
//
// Bounded memory: a node whose pending chain grows past kMaxPendingDepth (or whose pending DAG may
// hold more than kMaxPendingNodes: more nodes were created since its oldest pending one) is
// realized as soon as it is recorded (except while
// kiln::jit records a function: RecordingScope), and long chains are released iteratively, so a
// loop of `x = x + 1` runs in constant memory.
//
// Buffer donation: a realized value entering a realization as a parameter that nothing can observe
// afterwards (only edges inside the DAG hold its node, no output's surviving tape reaches it, its
// data is not shared) is handed over to the device's executor (DonatingExecutor), which may write
// an output into its buffer: a training step updates parameters in place (docs/architecture.md).
//
// Tensors live on their device: a backend whose memory is not host memory (Vulkan) registers a
// ResidentExecutor, and its realized values are device buffers (LazyNode::buffer) from a caching
// allocator per device. Only reading a value (Data: into_data, item, printing, checkpoints,
// tracing) copies it to the host; host values used on such a device (a batch made with
// from_data) are uploaded once, when a graph first reads them. A training step on Vulkan thus
// moves the batch in and the loss out, nothing else (kiln::Device::transfer_stats()).
//
// Not thread-safe: one thread at a time may record on and realize a given DAG.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "frontend/backend.h"
#include "ir/graph.h"
#include "ir/tensor_data.h"

namespace kiln::runtime {
class CachingAllocator;
}  // namespace kiln::runtime

namespace kiln::detail {

using Loc = std::source_location;

struct LazyNode;
/// The type-erased handle a Tensor<B, R, K> holds.
using TensorRef = std::shared_ptr<LazyNode>;

struct LazyNode {
  LazyNode();
  ~LazyNode();  // releases long operand chains without deep recursion
  LazyNode(const LazyNode&) = delete;
  LazyNode& operator=(const LazyNode&) = delete;

  bool realized() const { return data != nullptr || buffer != nullptr; }

  ir::Op op = ir::Op::kParameter;
  ir::Attrs attrs;
  ir::TensorType type;
  std::vector<TensorRef> inputs;
  std::source_location loc;
  runtime::DeviceId device;
  /// The value on the host, once realized (operands are dropped then). On a device-memory
  /// backend it is null until the value is read back (Data), or it holds the host bytes the
  /// node was made from (FromTensorData), uploaded when first used.
  std::shared_ptr<const ir::TensorData> data;
  /// The value in its device's memory (device-memory backends: Vulkan), exactly its bytes at
  /// offset 0 of a buffer that may be larger (a size class of the caching allocator).
  std::shared_ptr<const runtime::DeviceBuffer> buffer;
  /// Longest chain of pending nodes ending here (0 when realized).
  int32_t pending_depth = 0;
  /// Upper estimate of the pending nodes behind this one, so that a wide DAG is bounded as well
  /// as a deep one: the nodes created since the oldest pending one behind it (its serial minus
  /// oldest_pending_serial, plus one). Counting nodes per path instead overcounts a DAG with
  /// shared operands exponentially (each diamond of a LayerNorm or an attention block doubles
  /// it), which cut a transformer's layers at arbitrary points.
  int64_t pending_estimate = 0;
  /// The creation serial of the oldest pending node behind this one (itself included).
  uint64_t oldest_pending_serial = 0;
  /// Gradients flow to this node: it requires one, or it was recorded from a node that does
  /// while the tape was on. A tracked node keeps its operands after it is realized (the tape),
  /// so backward() can reach the leaves (frontend/autograd.h).
  bool tracks_grad = false;
  /// A leaf that requires a gradient (a parameter): backward() stops here and reports it.
  bool requires_grad = false;
  /// Creation order (process-wide): kiln::jit tells the values that existed before it started
  /// recording a function from those the function made.
  uint64_t serial = 0;
};

/// Auto-realization thresholds (see the file comment).
inline constexpr int32_t kMaxPendingDepth = 256;
inline constexpr int64_t kMaxPendingNodes = 4096;

/// Records `op` on `inputs` (all on one device) after checking it with ir::InferType; an error
/// throws kiln::Error at `loc`, prefixed with `name` when the user-level op name differs from the
/// primitive's ("linear: matmul: contracting dimensions differ ...").
TensorRef Record(const char* name, ir::Op op, std::vector<TensorRef> inputs, ir::Attrs attrs,
                 const Loc& loc);
/// Records a leaf (fill, iota, random_*) on `device`.
TensorRef RecordLeaf(const char* name, ir::Op op, ir::Attrs attrs, const Device& device,
                     const Loc& loc);
/// A realized node holding `data` on `device`.
TensorRef FromTensorData(ir::TensorData data, const Device& device);
/// A realized node sharing `data` (no copy) on `device`. Once nothing else holds `data`, a
/// realization may donate it (overwrite its buffer and move it out), so it must not be an object
/// created const (share another node's data, or make_shared<ir::TensorData>).
TensorRef FromSharedData(std::shared_ptr<const ir::TensorData> data, runtime::DeviceId device);
/// A realized node sharing `x`'s value (host bytes and device buffer; no copy) on its device.
TensorRef ShareValue(const TensorRef& x);
/// A pending node computing graph node `id` of `graph` from `inputs` (the nodes for its operands),
/// with the graph's type and attributes: how nodes a pass appended become lazy nodes again.
/// `pending_bound` caps the pending-node estimate (the exact size of the graph it came from), and
/// no auto-realization happens here.
TensorRef Import(const ir::Graph& graph, ir::NodeId id, std::vector<TensorRef> inputs,
                 runtime::DeviceId device, int64_t pending_bound);

/// Pending nodes computing every output of `graph` (which must verify) from `arguments`, the
/// values of graph.Parameters() in order, each of its parameter's type: how a graph made outside
/// the frontend (an imported ONNX model) runs on the arguments' device, fused and cached with the
/// ops around it like recorded ones. Constants are shared, not copied. Throws kiln::Error naming
/// the parameter on a count, type or device mismatch.
std::vector<TensorRef> CallGraph(const ir::Graph& graph, std::span<const TensorRef> arguments,
                                 const Loc& loc);

const ir::TensorType& TypeOf(const TensorRef& ref);
Device DeviceOf(const TensorRef& ref);

/// The nodes reachable from `roots`, operands before users: a node's operands are followed only
/// where `expand(node)` holds (the others are collected as leaves). Iterative, so graph depth
/// never becomes stack depth.
std::vector<LazyNode*> TopologicalOrder(std::span<LazyNode* const> roots,
                                        bool (*expand)(const LazyNode*));

/// Realizes every pending node in `refs` in one graph run. Throws kiln::Error on failure.
void Realize(std::span<const TensorRef> refs, const Loc& loc);

/// Realize(refs), except while kiln::jit records a function (which then stays one program): a
/// cut that a model places between its layers. Without it, a deep model meets the bounded-memory
/// auto-realization (above) somewhere inside a layer, where every value still referenced (a
/// composite op's temporaries, the layer's named locals) becomes an output of the graph, and
/// where it lands shifts from layer to layer, so each layer compiles a graph of its own. Cut at
/// layer boundaries, each graph has the layer's result as its only output and every layer of
/// the same shape runs the same compiled graph.
void RealizeBetweenLayers(std::span<const TensorRef> refs, const Loc& loc);
/// Realizes `ref` and returns its value, reading it back from its device's memory (once: the
/// host copy is kept with the node) when it lives there.
const ir::TensorData& Data(const TensorRef& ref, const Loc& loc);
/// As Data, for a realized node, sharing the host value.
std::shared_ptr<const ir::TensorData> HostValue(LazyNode& node, const Loc& loc);

/// Runs a graph: `arguments` are the values of graph.Parameters() in order (shared, not copied:
/// a realized value may be large); returns one value per output. Each device kind with a backend
/// registers one.
using Executor = std::function<absl::StatusOr<std::vector<ir::TensorData>>(
    const ir::Graph& graph, std::span<const std::shared_ptr<const ir::TensorData>> arguments,
    runtime::DeviceId device)>;
/// An executor that may take over donated arguments (buffer donation, like JAX's donate_argnums,
/// decided by the engine): `donated[j]` (one flag per argument) says nothing outside this
/// realization can observe arguments[j] afterwards, so the executor may overwrite its buffer
/// (write an output of the same type into it) and move it out into a result. An executor may
/// ignore the flags. On an error, donated arguments hold unspecified values (the engine then
/// marks their nodes lost).
using DonatingExecutor = std::function<absl::StatusOr<std::vector<ir::TensorData>>(
    const ir::Graph& graph, std::span<const std::shared_ptr<const ir::TensorData>> arguments,
    std::span<const bool> donated, runtime::DeviceId device)>;
/// The reference executor: ir::Interpret on the arguments' values.
absl::StatusOr<std::vector<ir::TensorData>> InterpretOnHost(
    const ir::Graph& graph, std::span<const std::shared_ptr<const ir::TensorData>> arguments,
    runtime::DeviceId device);
/// Installs (or replaces) the executor of a device kind. The reference executor is built in.
/// A plain Executor never sees donation flags.
void RegisterExecutor(runtime::DeviceKind kind, Executor executor);
void RegisterDonatingExecutor(runtime::DeviceKind kind, DonatingExecutor executor);

/// A realized value as a ResidentExecutor takes it: in its device's memory (`buffer`), on the
/// host (`host`), or both.
struct ResidentValue {
  std::shared_ptr<const ir::TensorData> host;
  std::shared_ptr<const runtime::DeviceBuffer> buffer;
};
/// Runs a graph on a backend whose tensors live in device memory: `arguments` are the values of
/// graph.Parameters() in order. The executor uploads each argument that has no `buffer` and
/// stores the buffer it made there (the engine keeps it in the node: a tensor goes up once).
/// Returns one buffer per output holding its bytes at offset 0; nothing is read back.
using ResidentExecutor =
    std::function<absl::StatusOr<std::vector<std::shared_ptr<const runtime::DeviceBuffer>>>(
        const ir::Graph& graph, std::span<ResidentValue> arguments, runtime::DeviceId device)>;
/// Device `index`'s caching allocator (opening the device on first use).
using AllocatorLookup =
    std::function<absl::StatusOr<std::shared_ptr<runtime::CachingAllocator>>(int index)>;
/// Installs a device-memory backend for `kind`: its executor, and its devices' allocators (for
/// kiln::Device::memory_stats, transfer_stats and empty_cache).
void RegisterResidentExecutor(runtime::DeviceKind kind, ResidentExecutor executor,
                              AllocatorLookup allocators);
/// The number of graphs a backend has compiled so far (its compile cache's misses). With one
/// registered, the engine notices a call site whose realizations keep compiling new graphs and
/// warns once, naming it (kRecompileWarningAfter).
using CompileCounter = std::function<int64_t()>;
void RegisterCompileCounter(runtime::DeviceKind kind, CompileCounter counter);
/// Compiles caused by realizations at one source line before the engine warns (as
/// torch.compile's cache_size_limit).
inline constexpr int kRecompileWarningAfter = 8;
/// While one is alive on this thread, the graphs that realizations compile do not count towards
/// the recompile warning: for library code whose shapes vary over a small set by design (the
/// buckets of BertModel's packed tokens), which already does what the warning would advise.
class BucketedShapesScope {
 public:
  BucketedShapesScope();
  ~BucketedShapesScope();
  BucketedShapesScope(const BucketedShapesScope&) = delete;
  BucketedShapesScope& operator=(const BucketedShapesScope&) = delete;
};
/// The allocator of `device`, or null for a backend whose tensors are host memory.
std::shared_ptr<runtime::CachingAllocator> AllocatorOf(runtime::DeviceId device, const Loc& loc);

/// A graph compiled once for one device and run many times without building, hashing or
/// comparing it again: kiln::jit's replay (frontend/jit.h). A backend that registers a Preparer
/// runs it straight from its compiled program; on the others each run goes through the device's
/// executor, which finds the graph in its cache.
class PreparedGraph {
 public:
  /// Compiles `graph` (which must verify; its parameters are realized values on `device`) now.
  /// `donatable` (empty, or one flag per parameter): parameters a run may hand over (Run's
  /// `donated`). Throws kiln::Error at `loc`.
  static std::shared_ptr<const PreparedGraph> Prepare(ir::Graph graph, std::vector<bool> donatable,
                                                      runtime::DeviceId device, const Loc& loc);
  /// Runs on `arguments`, the realized values of the graph's parameters in order (on its
  /// device), and returns one new realized node per graph output. `donated` (empty, or one flag
  /// per argument, set only where Prepare's `donatable` was): the caller holds the only reference
  /// to that value and will not read it again, so its buffer may become an output's; its data
  /// is moved out then. Throws kiln::Error at `loc`.
  std::vector<TensorRef> Run(std::span<const TensorRef> arguments, std::span<const bool> donated,
                             const Loc& loc) const;
  const ir::Graph& graph() const { return graph_; }
  runtime::DeviceId device() const { return device_; }

  /// A backend's run of one compiled graph (Preparer).
  using Program = std::function<absl::StatusOr<std::vector<ir::TensorData>>(
      std::span<const std::shared_ptr<const ir::TensorData>> arguments,
      std::span<const bool> donated)>;

 private:
  PreparedGraph() = default;
  ir::Graph graph_;
  runtime::DeviceId device_;
  Program program_;  // null: run through the device's executor
};

/// Compiles `graph` for `device` into a program run without a cache lookup (PreparedGraph), with
/// `donatable` as the donation flags its runs may set. A host-memory backend registers one.
using Preparer = std::function<absl::StatusOr<PreparedGraph::Program>(
    const ir::Graph& graph, std::span<const bool> donatable, runtime::DeviceId device)>;
void RegisterPreparer(runtime::DeviceKind kind, Preparer preparer);

/// What the engine notes while kiln::jit records a function (frontend/jit.cc), one recording per
/// thread at a time: while a RecordingScope is alive, pending chains never auto-realize (the
/// function becomes one graph, however deep), realizations and tensors made from host values are
/// noted, and so are tensors made from the host arrays the jit passes as arguments.
struct RecordingNotes {
  /// Nodes with a smaller serial existed before the recording started.
  uint64_t first_serial = 0;
  /// The host arrays of the function's arguments (NoteHostSource compares addresses).
  std::vector<const ir::TensorData*> host_sources;
  /// (index into host_sources, the node made from it), in the order they were made.
  std::vector<std::pair<size_t, TensorRef>> host_inputs;
  /// Realized leaves the function made from host values (FromTensorData, FromSharedData).
  std::vector<TensorRef> host_made;
  /// (node, the node whose value it shares): ShareValue during the recording (detach()).
  std::vector<std::pair<TensorRef, TensorRef>> shared;
  /// Where the function first realized a value, when it did.
  std::optional<Loc> realized_at;
};
class RecordingScope {
 public:
  explicit RecordingScope(RecordingNotes& notes);
  ~RecordingScope();
  RecordingScope(const RecordingScope&) = delete;
  RecordingScope& operator=(const RecordingScope&) = delete;

 private:
  RecordingNotes* previous_;
};
/// The current thread's recording, or null.
RecordingNotes* ActiveRecording();
/// Library code that makes a tensor from a host array (Tensor::from_tensor_data, data::Batch::
/// inputs_as) calls this: under a recording whose arguments include `source`, `made` is noted as
/// made from it.
void NoteHostSource(const ir::TensorData* source, const TensorRef& made);
/// The serial the next node gets.
uint64_t NextSerial();

/// Counters for tests and debugging.
struct EngineStats {
  /// LazyNode objects alive now.
  int64_t live_nodes = 0;
  /// Graphs executed since the process started (one per realization that had pending work).
  int64_t graphs_executed = 0;
  /// Nodes executed in those graphs, parameters included.
  int64_t nodes_executed = 0;
  /// Arguments the engine handed over to an executor (buffer donation; the executor may not
  /// have used them all).
  int64_t arguments_donated = 0;
};
EngineStats GetEngineStats();

}  // namespace kiln::detail
