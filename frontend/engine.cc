#include "frontend/engine.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "frontend/autograd.h"
#include "frontend/error.h"
#include "ir/builder.h"
#include "ir/infer.h"
#include "ir/interpreter.h"
#include "ir/verifier.h"
#include "passes/pass_manager.h"
#include "runtime/caching_allocator.h"

namespace kiln::detail {
namespace {

std::atomic<int64_t> g_live_nodes{0};
std::atomic<int64_t> g_graphs_executed{0};
std::atomic<int64_t> g_nodes_executed{0};
std::atomic<int64_t> g_arguments_donated{0};
std::atomic<uint64_t> g_next_serial{1};
thread_local RecordingNotes* g_recording = nullptr;

struct ExecutorRegistry {
  std::mutex mutex;
  struct Entry {
    DonatingExecutor run;
    bool takes_donation = false;  // false: a plain Executor, which never sees the flags
  };
  std::map<runtime::DeviceKind, Entry> executors;
  struct ResidentEntry {
    ResidentExecutor run;
    AllocatorLookup allocators;
  };
  std::map<runtime::DeviceKind, ResidentEntry> resident;
  // Devices that ran a resident graph: their traffic is reported at exit (KILN_TIME_PASSES).
  std::vector<runtime::DeviceId> used_devices;
  std::map<runtime::DeviceKind, CompileCounter> compile_counters;
  std::map<runtime::DeviceKind, Preparer> preparers;

  // The reference interpreter is built in; every other backend registers itself from its own
  // library (kiln_backend_cpu, kiln_backend_vulkan), so this library names none of them.
  ExecutorRegistry() {
    executors[runtime::DeviceKind::kReference] = {Ignoring(InterpretOnHost), false};
  }

  // A plain executor, which never sees the donation flags.
  static DonatingExecutor Ignoring(Executor executor) {
    return
        [executor = std::move(executor)](
            const ir::Graph& graph,
            std::span<const std::shared_ptr<const ir::TensorData>> arguments, std::span<const bool>,
            runtime::DeviceId device) { return executor(graph, arguments, device); };
  }
};

ExecutorRegistry& Registry() {
  static ExecutorRegistry registry;
  return registry;
}

// What runs graphs on one device: a device-memory backend's executor (`resident`), or a host one.
struct DeviceExecutor {
  DonatingExecutor run;
  bool takes_donation = false;
  ResidentExecutor resident;
  CompileCounter compiles;
};

DeviceExecutor LookupExecutor(runtime::DeviceId device);

// BucketedShapesScope objects alive on this thread.
thread_local int g_bucketed_scopes = 0;

// A realization at `loc` compiled a graph: the kRecompileWarningAfter-th such compile at one source
// line warns, once (not under a BucketedShapesScope). (A loop that compiles every time runs at
// compile speed, silently otherwise.)
void NoteCompile(const Loc& loc) {
  if (g_bucketed_scopes > 0) return;
  static std::mutex mutex;
  static auto* counts = new std::map<std::pair<std::string, uint32_t>, int>();
  int count;
  {
    std::lock_guard<std::mutex> lock(mutex);
    count = ++(*counts)[{loc.file_name(), loc.line()}];
  }
  if (count != kRecompileWarningAfter) return;
  std::fprintf(stderr,
               "kiln: warning: %s:%u: realizations here have compiled %d different graphs. A "
               "graph that changes from call to call compiles each time: shapes or dtypes that "
               "vary (pad or bucket them), or a loop that realizes one value of each step (a "
               "loss read with item()) and leaves the rest pending, so that each realization "
               "cuts the work elsewhere. Realize a training step as one graph with "
               "kiln::optim::realize_step(model, optimizer, loss), or use train::Learner "
               "(docs/performance.md, \"Recompiles\"). This warning is shown once per line.\n",
               loc.file_name(), static_cast<unsigned>(loc.line()), count);
}

// Drops `inputs` without recursing once per node of a long chain: operands whose last owner is
// being dropped are unlinked onto an explicit stack first, so each node dies with no operands.
void ReleaseIteratively(std::vector<TensorRef>& inputs) {
  std::vector<TensorRef> stack = std::move(inputs);
  inputs.clear();
  while (!stack.empty()) {
    TensorRef node = std::move(stack.back());
    stack.pop_back();
    if (node != nullptr && node.use_count() == 1) {
      for (TensorRef& in : node->inputs) stack.push_back(std::move(in));
      node->inputs.clear();
    }
  }
}

}  // namespace

std::vector<LazyNode*> TopologicalOrder(std::span<LazyNode* const> roots,
                                        bool (*expand)(const LazyNode*)) {
  std::vector<LazyNode*> order;
  absl::flat_hash_map<LazyNode*, bool> state;  // false: on the stack, true: emitted
  std::vector<std::pair<LazyNode*, size_t>> stack;
  for (LazyNode* root : roots) {
    if (state.count(root)) continue;
    stack.emplace_back(root, 0);
    state[root] = false;
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (expand(node) && next < node->inputs.size()) {
        LazyNode* in = node->inputs[next++].get();
        if (!state.count(in)) {
          state[in] = false;
          stack.emplace_back(in, 0);
        }
        continue;
      }
      state[node] = true;
      order.push_back(node);
      stack.pop_back();
    }
  }
  return order;
}

namespace {

// Counts a finished graph run and makes its outputs realized values. Operand lists are dropped
// only now: they keep every node of the DAG alive until here. A tracked interior node keeps
// them: they are the tape backward() walks. A leaf that requires a gradient (an updated
// parameter) does not: backward() stops there, and keeping them would chain every training
// step's tape to the next.
void FinishRealization(const ir::Graph& graph, std::span<LazyNode* const> outputs) {
  g_graphs_executed.fetch_add(1, std::memory_order_relaxed);
  g_nodes_executed.fetch_add(graph.num_nodes(), std::memory_order_relaxed);
  for (LazyNode* node : outputs) {
    node->pending_depth = 0;
    node->pending_estimate = 0;
  }
  for (LazyNode* node : outputs) {
    if (!node->tracks_grad || node->requires_grad) ReleaseIteratively(node->inputs);
  }
}

// A graph on a device-memory backend: arguments go up only where they have no device buffer yet
// (and keep the one the executor made), outputs stay in device memory.
void RunResident(const ResidentExecutor& executor, const ir::Graph& graph,
                 std::span<LazyNode* const> argument_nodes, std::span<LazyNode* const> outputs,
                 runtime::DeviceId device, const Loc& loc) {
  std::vector<ResidentValue> values;
  values.reserve(argument_nodes.size());
  for (LazyNode* node : argument_nodes) values.push_back({node->data, node->buffer});
  absl::StatusOr<std::vector<std::shared_ptr<const runtime::DeviceBuffer>>> results =
      executor(graph, std::span<ResidentValue>(values), device);
  // Uploads that happened are kept even when the run failed afterwards.
  for (size_t j = 0; j < argument_nodes.size(); ++j) {
    if (argument_nodes[j]->buffer == nullptr) argument_nodes[j]->buffer = values[j].buffer;
  }
  if (!results.ok()) ThrowStatus(results.status(), loc);
  if (results->size() != outputs.size()) {
    ThrowStatus(absl::InternalError(absl::StrCat("realize: the executor for ", device.ToString(),
                                                 " returned ", results->size(), " values for ",
                                                 outputs.size(), " outputs")),
                loc);
  }
  for (size_t i = 0; i < outputs.size(); ++i) outputs[i]->buffer = std::move((*results)[i]);
  FinishRealization(graph, outputs);
}

// At exit under KILN_TIME_PASSES: what each device-memory device moved and held.
void ReportTransfers() {
  ExecutorRegistry& registry = Registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  for (const runtime::DeviceId& device : registry.used_devices) {
    auto it = registry.resident.find(device.kind);
    if (it == registry.resident.end()) continue;
    absl::StatusOr<std::shared_ptr<runtime::CachingAllocator>> allocator =
        it->second.allocators(device.index);
    if (!allocator.ok()) continue;
    const runtime::TransferStats t = (*allocator)->device().transfer_stats();
    const runtime::AllocatorStats m = (*allocator)->stats();
    std::fprintf(
        stderr,
        "kiln: %s: host->device %lld bytes in %lld copies, device->host %lld bytes in "
        "%lld copies; memory: %lld bytes in use, peak %lld, %lld cached, %lld of %lld "
        "allocations from the driver\n",
        device.ToString().c_str(), static_cast<long long>(t.host_to_device_bytes),
        static_cast<long long>(t.host_to_device_copies),
        static_cast<long long>(t.device_to_host_bytes),
        static_cast<long long>(t.device_to_host_copies), static_cast<long long>(m.bytes_in_use),
        static_cast<long long>(m.peak_bytes_in_use), static_cast<long long>(m.bytes_cached),
        static_cast<long long>(m.system_allocations), static_cast<long long>(m.allocations));
  }
}

DeviceExecutor LookupExecutor(runtime::DeviceId device) {
  DeviceExecutor found;
  ExecutorRegistry& registry = Registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  if (auto it = registry.compile_counters.find(device.kind);
      it != registry.compile_counters.end()) {
    found.compiles = it->second;
  }
  if (auto it = registry.resident.find(device.kind); it != registry.resident.end()) {
    found.resident = it->second.run;
    if (std::find(registry.used_devices.begin(), registry.used_devices.end(), device) ==
        registry.used_devices.end()) {
      if (registry.used_devices.empty() && passes::TimePassesFromEnv()) {
        std::atexit(ReportTransfers);
      }
      registry.used_devices.push_back(device);
    }
  } else if (auto it = registry.executors.find(device.kind); it != registry.executors.end()) {
    found.run = it->second.run;
    found.takes_donation = it->second.takes_donation;
  }
  return found;
}

// Realizes the pending nodes behind `roots`, all on `device`.
void RealizeOnDevice(std::span<LazyNode* const> roots, runtime::DeviceId device, const Loc& loc) {
  // Pending nodes behind the roots; realized ones are collected (they become parameters) but
  // not expanded.
  const auto pending = [](const LazyNode* node) { return !node->realized(); };
  std::vector<LazyNode*> order = TopologicalOrder(roots, pending);

  // Parameters still pending (a layer's lazy initialisation) are realized first, in a graph of
  // their own: inside this one they would make the first training step's graph differ from every
  // later step's, which reads them as realized values, and the step would compile twice.
  std::vector<LazyNode*> parameters;
  for (LazyNode* node : order) {
    if (node->requires_grad && !node->realized() &&
        std::find(roots.begin(), roots.end(), node) == roots.end()) {
      parameters.push_back(node);
    }
  }
  if (!parameters.empty()) {
    RealizeOnDevice(parameters, device, loc);  // (every pending parameter there is a root)
    order = TopologicalOrder(roots, pending);
  }

  // Per node of the DAG: its id in the graph; for a pending node's operands, the edges inside
  // this DAG that reach them and their owners in all (a pending node with more owners than edges
  // here is also held from outside: a user tensor or a pending node elsewhere, worth keeping).
  struct NodeInfo {
    ir::NodeId id = ir::kInvalidNode;
    long internal_uses = 0;
    long owners = 0;  // 0: no operand edge points at it (a root)
  };
  absl::flat_hash_map<LazyNode*, NodeInfo> info;
  info.reserve(order.size());
  for (LazyNode* node : order) {
    if (node->realized()) continue;
    for (const TensorRef& in : node->inputs) {
      NodeInfo& operand = info[in.get()];
      ++operand.internal_uses;
      operand.owners = in.use_count();
    }
  }

  // Every pending node was type-checked when it was recorded (RecordOn, or a verified graph for
  // Import), so the graph is assembled directly with the recorded types: no second inference and
  // no verification on this per-call path (debug builds still verify below).
  ir::Graph graph;
  graph.Reserve(static_cast<int64_t>(order.size()));
  std::vector<std::shared_ptr<const ir::TensorData>> arguments;
  for (LazyNode* node : order) {
    ir::NodeId id;
    if (node->realized()) {
      ir::Attrs attrs;
      attrs.name = absl::StrCat("p", arguments.size());
      attrs.dtype = node->type.dtype;
      attrs.shape = node->type.shape;
      id = graph.AddNode(ir::Node{ir::Op::kParameter, {}, std::move(attrs), node->type, node->loc});
      arguments.push_back(node->data);
    } else if (node->op == ir::Op::kParameter) {
      ThrowStatus(absl::FailedPreconditionError(absl::StrCat(
                      "realize: a ", ir::TypeToString(node->type), " value recorded at ",
                      node->loc.file_name(), ":", node->loc.line(),
                      " was lost: its buffer was donated to a graph run that failed")),
                  loc);
    } else {
      std::vector<ir::NodeId> inputs;
      inputs.reserve(node->inputs.size());
      for (const TensorRef& in : node->inputs) inputs.push_back(info.at(in.get()).id);
      id = graph.AddNode(ir::Node{node->op, std::move(inputs), node->attrs, node->type, node->loc});
    }
    info[node].id = id;
  }

  std::vector<LazyNode*> outputs;
  for (LazyNode* root : roots) {
    if (!root->realized() && std::find(outputs.begin(), outputs.end(), root) == outputs.end()) {
      outputs.push_back(root);
    }
  }
  // Intermediates held from outside are outputs too.
  for (LazyNode* node : order) {
    if (node->realized()) continue;
    const NodeInfo& i = info.at(node);
    if (i.owners > i.internal_uses &&
        std::find(outputs.begin(), outputs.end(), node) == outputs.end()) {
      outputs.push_back(node);
    }
  }
  if (outputs.empty()) return;
  for (LazyNode* out : outputs) graph.AddOutput(info.at(out).id);

  // Buffer donation: a realized value that enters as a parameter is handed over to the executor
  // (which may write an output into its buffer) when nothing can observe it once this
  // realization is done: (1) only operand edges inside this DAG hold its node (no user tensor,
  // no pending node elsewhere, no Gradients entry); (2) no output that keeps its tape after
  // realization (tracked, not a leaf requiring a gradient) reaches it through pending nodes,
  // which such a tape keeps alive; (3) its data is not shared with another node (detach()).
  // Then the node dies with the DAG below. Typical case: the old parameter and the old momentum
  // after optimizer.step() replaced them in the module.
  const auto keeps_tape = [](const LazyNode* node) {
    return node->tracks_grad && !node->requires_grad;
  };
  absl::flat_hash_set<LazyNode*> observable;
  {
    absl::flat_hash_set<LazyNode*> is_output(outputs.begin(), outputs.end());
    std::vector<LazyNode*> stack;
    for (LazyNode* out : outputs) {
      if (keeps_tape(out)) stack.push_back(out);
    }
    while (!stack.empty()) {
      LazyNode* node = stack.back();
      stack.pop_back();
      if (!observable.insert(node).second || node->realized()) continue;
      // An output that drops its operands keeps nothing behind it.
      if (is_output.count(node) != 0 && !keeps_tape(node)) continue;
      for (const TensorRef& in : node->inputs) stack.push_back(in.get());
    }
  }
  // (A plain array: std::vector<bool> cannot be viewed as a span.)
  std::unique_ptr<bool[]> donated(new bool[arguments.size()]());
  std::vector<LazyNode*> argument_nodes;
  for (LazyNode* node : order) {
    if (node->realized()) argument_nodes.push_back(node);
  }
  bool any_donated = false;
  for (size_t j = 0; j < argument_nodes.size(); ++j) {
    LazyNode* node = argument_nodes[j];
    const NodeInfo& i = info.at(node);
    // `arguments` holds one more reference to the data.
    donated[j] = i.owners != 0 && i.owners == i.internal_uses && observable.count(node) == 0 &&
                 node->data.use_count() == 2 && node->data->size_bytes() > 0;
    any_donated |= donated[j];
  }

#ifndef NDEBUG
  if (absl::Status verified = ir::Verify(graph); !verified.ok()) {
    ThrowStatus(absl::InternalError(absl::StrCat("realize: the engine built an invalid graph: ",
                                                 verified.message())),
                loc);
  }
#endif

  const DeviceExecutor found = LookupExecutor(device);
  const DonatingExecutor& executor = found.run;
  const ResidentExecutor& resident = found.resident;
  const CompileCounter& compiles = found.compiles;
  const bool takes_donation = found.takes_donation;
  const int64_t compiles_before = compiles ? compiles() : 0;
  if (resident) {
    RunResident(resident, graph, argument_nodes, outputs, device, loc);
    if (compiles && compiles() > compiles_before) NoteCompile(loc);
    return;
  }
  if (!takes_donation) {
    std::fill(donated.get(), donated.get() + arguments.size(), false);
    any_donated = false;
  }
  if (!executor) {
    ThrowStatus(absl::UnavailableError(absl::StrCat("realize: no executor for device ",
                                                    device.ToString(), " in this build")),
                loc);
  }
  absl::StatusOr<std::vector<ir::TensorData>> results =
      executor(graph, arguments,
               any_donated ? std::span<const bool>(donated.get(), arguments.size())
                           : std::span<const bool>(),
               device);
  if (!results.ok()) {
    // A donated buffer may have been partly overwritten: its node is lost, and realizing anything
    // that still reads it fails with a clear error instead of a wrong value.
    for (size_t j = 0; j < argument_nodes.size(); ++j) {
      if (donated[j]) argument_nodes[j]->data.reset();
    }
    ThrowStatus(results.status(), loc);
  }
  if (results->size() != outputs.size()) {
    ThrowStatus(absl::InternalError(absl::StrCat("realize: the executor for ", device.ToString(),
                                                 " returned ", results->size(), " values for ",
                                                 outputs.size(), " outputs")),
                loc);
  }
  g_arguments_donated.fetch_add(std::count(donated.get(), donated.get() + arguments.size(), true),
                                std::memory_order_relaxed);
  for (size_t i = 0; i < outputs.size(); ++i) {
    // A mutable object behind the const view: a later realization may donate it (move its
    // buffer out), which must not modify an object created const.
    outputs[i]->data = std::make_shared<ir::TensorData>(std::move((*results)[i]));
  }
  FinishRealization(graph, outputs);
  if (compiles && compiles() > compiles_before) NoteCompile(loc);
}

// Gives `node` its operands and the counters that follow from them: the pending chain's depth
// and size estimate (auto-realization), and whether the tape tracks it.
void LinkOperands(LazyNode& node, std::vector<TensorRef> inputs) {
  int32_t depth = 0;
  uint64_t oldest = node.serial;
  for (const TensorRef& in : inputs) {
    depth = std::max(depth, in->pending_depth);
    if (!in->realized()) oldest = std::min(oldest, in->oldest_pending_serial);
    if (GradEnabled()) node.tracks_grad |= in->tracks_grad;
  }
  node.pending_depth = depth + 1;
  node.oldest_pending_serial = oldest;
  node.pending_estimate = static_cast<int64_t>(
      std::min<uint64_t>(node.serial - oldest + 1, static_cast<uint64_t>(2 * kMaxPendingNodes)));
  node.inputs = std::move(inputs);
}

TensorRef RecordOn(const char* name, ir::Op op, std::vector<TensorRef> inputs, ir::Attrs attrs,
                   runtime::DeviceId device, const Loc& loc) {
  std::vector<ir::TensorType> types;
  types.reserve(inputs.size());
  for (const TensorRef& in : inputs) types.push_back(in->type);
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i]->device != inputs[0]->device) {
      std::string operand_list;
      for (size_t k = 0; k < types.size(); ++k) {
        absl::StrAppend(&operand_list, k ? ", " : "", ir::TypeToString(types[k]), " on ",
                        inputs[k]->device.ToString());
      }
      ThrowStatus(absl::InvalidArgumentError(absl::StrCat(
                      name, ": operands on different devices; operands ", operand_list)),
                  loc);
    }
  }
  absl::StatusOr<ir::TensorType> type = ir::InferType(op, types, attrs);
  if (!type.ok()) {
    const std::string primitive = ir::OpName(op);
    if (primitive == name) ThrowStatus(type.status(), loc);
    ThrowStatus(
        absl::Status(type.status().code(), absl::StrCat(name, ": ", type.status().message())), loc);
  }

  auto node = std::make_shared<LazyNode>();
  node->op = op;
  node->attrs = std::move(attrs);
  node->type = *std::move(type);
  node->loc = loc;
  node->device = device;
  LinkOperands(*node, std::move(inputs));
  if ((node->pending_depth > kMaxPendingDepth || node->pending_estimate > kMaxPendingNodes) &&
      g_recording == nullptr) {
    const TensorRef roots[] = {node};
    Realize(roots, loc);
  }
  return node;
}

}  // namespace

TensorRef Record(const char* name, ir::Op op, std::vector<TensorRef> inputs, ir::Attrs attrs,
                 const Loc& loc) {
  if (inputs.empty()) {
    ThrowStatus(absl::InternalError(absl::StrCat(name, ": a leaf needs a device")), loc);
  }
  const runtime::DeviceId device = inputs[0]->device;
  return RecordOn(name, op, std::move(inputs), std::move(attrs), device, loc);
}

TensorRef RecordLeaf(const char* name, ir::Op op, ir::Attrs attrs, const Device& device,
                     const Loc& loc) {
  return RecordOn(name, op, {}, std::move(attrs), device.id(), loc);
}

LazyNode::LazyNode() : serial(g_next_serial.fetch_add(1, std::memory_order_relaxed)) {
  oldest_pending_serial = serial;
  g_live_nodes.fetch_add(1, std::memory_order_relaxed);
}

LazyNode::~LazyNode() {
  if (!inputs.empty()) ReleaseIteratively(inputs);
  g_live_nodes.fetch_sub(1, std::memory_order_relaxed);
}

TensorRef FromTensorData(ir::TensorData data, const Device& device) {
  auto node = std::make_shared<LazyNode>();
  node->type = ir::TensorType{data.dtype(), data.shape()};
  node->device = device.id();
  node->data = std::make_shared<ir::TensorData>(std::move(data));  // donatable (see above)
  if (g_recording != nullptr) g_recording->host_made.push_back(node);
  return node;
}

TensorRef FromSharedData(std::shared_ptr<const ir::TensorData> data, runtime::DeviceId device) {
  auto node = std::make_shared<LazyNode>();
  node->type = ir::TensorType{data->dtype(), data->shape()};
  node->device = device;
  node->data = std::move(data);
  if (g_recording != nullptr) g_recording->host_made.push_back(node);
  return node;
}

TensorRef ShareValue(const TensorRef& x) {
  auto node = std::make_shared<LazyNode>();
  node->type = x->type;
  node->device = x->device;
  node->data = x->data;
  node->buffer = x->buffer;
  if (g_recording != nullptr) g_recording->shared.emplace_back(node, x);
  return node;
}

TensorRef Import(const ir::Graph& graph, ir::NodeId id, std::vector<TensorRef> inputs,
                 runtime::DeviceId device, int64_t pending_bound) {
  const ir::Node& source = graph.node(id);
  auto node = std::make_shared<LazyNode>();
  node->op = source.op;
  node->attrs = source.attrs;
  node->type = source.type;
  node->loc = source.loc;
  node->device = device;
  LinkOperands(*node, std::move(inputs));
  node->pending_estimate = std::min(node->pending_estimate, pending_bound);
  return node;
}

std::vector<TensorRef> CallGraph(const ir::Graph& graph, std::span<const TensorRef> arguments,
                                 const Loc& loc) {
  const std::vector<ir::NodeId> params = graph.Parameters();
  if (params.size() != arguments.size()) {
    ThrowStatus(absl::InvalidArgumentError(absl::StrCat("call_graph: the graph has ", params.size(),
                                                        " parameters, but ", arguments.size(),
                                                        " arguments were given")),
                loc);
  }
  if (params.empty()) {
    ThrowStatus(absl::InvalidArgumentError("call_graph: a graph without parameters has no device"),
                loc);
  }
  const runtime::DeviceId device = arguments[0]->device;
  std::vector<TensorRef> refs(static_cast<size_t>(graph.num_nodes()));
  for (size_t i = 0; i < params.size(); ++i) {
    const ir::Node& p = graph.node(params[i]);
    const TensorRef& a = arguments[i];
    if (a->type != p.type || a->device != device) {
      ThrowStatus(absl::InvalidArgumentError(absl::StrCat(
                      "call_graph: parameter '", p.attrs.name, "' is ", ir::TypeToString(p.type),
                      ", but argument ", i, " is ", ir::TypeToString(a->type),
                      a->device != device ? " on another device than argument 0" : "")),
                  loc);
    }
    refs[static_cast<size_t>(params[i])] = a;
  }
  // Nodes come operands first (ir::Graph appends), so one pass in id order suffices.
  const int64_t bound = graph.num_nodes();
  for (ir::NodeId id = 0; id < graph.num_nodes(); ++id) {
    const ir::Node& node = graph.node(id);
    if (node.op == ir::Op::kParameter) continue;
    std::vector<TensorRef> inputs;
    inputs.reserve(node.inputs.size());
    for (ir::NodeId in : node.inputs) inputs.push_back(refs[static_cast<size_t>(in)]);
    refs[static_cast<size_t>(id)] = Import(graph, id, std::move(inputs), device, bound);
  }
  std::vector<TensorRef> outputs;
  for (const ir::Output& o : graph.outputs()) outputs.push_back(refs[static_cast<size_t>(o.node)]);
  return outputs;
}

const ir::TensorType& TypeOf(const TensorRef& ref) { return ref->type; }

Device DeviceOf(const TensorRef& ref) { return Device(ref->device); }

void Realize(std::span<const TensorRef> refs, const Loc& loc) {
  // One graph per device; a program normally uses one.
  std::vector<runtime::DeviceId> devices;
  for (const TensorRef& ref : refs) {
    if (!ref->realized() &&
        std::find(devices.begin(), devices.end(), ref->device) == devices.end()) {
      devices.push_back(ref->device);
    }
  }
  if (g_recording != nullptr && !devices.empty() && !g_recording->realized_at) {
    g_recording->realized_at = loc;
  }
  for (const runtime::DeviceId& device : devices) {
    std::vector<LazyNode*> roots;
    for (const TensorRef& ref : refs) {
      if (!ref->realized() && ref->device == device) roots.push_back(ref.get());
    }
    RealizeOnDevice(roots, device, loc);
  }
}

BucketedShapesScope::BucketedShapesScope() { ++g_bucketed_scopes; }
BucketedShapesScope::~BucketedShapesScope() { --g_bucketed_scopes; }

void RealizeBetweenLayers(std::span<const TensorRef> refs, const Loc& loc) {
  if (g_recording == nullptr) Realize(refs, loc);
}

std::shared_ptr<const ir::TensorData> HostValue(LazyNode& node, const Loc& loc) {
  if (node.data == nullptr && node.buffer != nullptr) {
    auto value = std::make_shared<ir::TensorData>(
        ir::TensorData::Uninitialized(node.type.dtype, node.type.shape));
    const std::span<std::byte> bytes(reinterpret_cast<std::byte*>(value->data()),
                                     static_cast<size_t>(value->size_bytes()));
    if (absl::Status s = node.buffer->device().CopyFromDevice(*node.buffer, 0, bytes); !s.ok()) {
      ThrowStatus(absl::Status(s.code(), absl::StrCat("reading a ", ir::TypeToString(node.type),
                                                      " value back from ", node.device.ToString(),
                                                      ": ", s.message())),
                  loc);
    }
    node.data = std::move(value);
  }
  return node.data;
}

const ir::TensorData& Data(const TensorRef& ref, const Loc& loc) {
  if (!ref->realized()) Realize(std::span<const TensorRef>(&ref, 1), loc);
  return *HostValue(*ref, loc);
}

absl::StatusOr<std::vector<ir::TensorData>> InterpretOnHost(
    const ir::Graph& graph, std::span<const std::shared_ptr<const ir::TensorData>> arguments,
    runtime::DeviceId) {
  std::vector<ir::TensorData> values;
  values.reserve(arguments.size());
  for (const auto& argument : arguments) values.push_back(*argument);
  return ir::Interpret(graph, values);
}

void RegisterExecutor(runtime::DeviceKind kind, Executor executor) {
  ExecutorRegistry& registry = Registry();
  {
    std::lock_guard<std::mutex> lock(registry.mutex);
    registry.resident.erase(kind);
    registry.executors[kind] = {ExecutorRegistry::Ignoring(std::move(executor)), false};
  }
  runtime::MarkBackendAvailable(kind);
}

void RegisterCompileCounter(runtime::DeviceKind kind, CompileCounter counter) {
  ExecutorRegistry& registry = Registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.compile_counters[kind] = std::move(counter);
}

void RegisterDonatingExecutor(runtime::DeviceKind kind, DonatingExecutor executor) {
  ExecutorRegistry& registry = Registry();
  {
    std::lock_guard<std::mutex> lock(registry.mutex);
    registry.resident.erase(kind);
    registry.executors[kind] = {std::move(executor), true};
  }
  runtime::MarkBackendAvailable(kind);
}

void RegisterResidentExecutor(runtime::DeviceKind kind, ResidentExecutor executor,
                              AllocatorLookup allocators) {
  ExecutorRegistry& registry = Registry();
  {
    std::lock_guard<std::mutex> lock(registry.mutex);
    registry.executors.erase(kind);
    registry.resident[kind] = {std::move(executor), std::move(allocators)};
  }
  runtime::MarkBackendAvailable(kind);
}

std::shared_ptr<runtime::CachingAllocator> AllocatorOf(runtime::DeviceId device, const Loc& loc) {
  AllocatorLookup lookup;
  {
    ExecutorRegistry& registry = Registry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    auto it = registry.resident.find(device.kind);
    if (it == registry.resident.end()) return nullptr;
    lookup = it->second.allocators;
  }
  absl::StatusOr<std::shared_ptr<runtime::CachingAllocator>> allocator = lookup(device.index);
  if (!allocator.ok()) ThrowStatus(allocator.status(), loc);
  return *std::move(allocator);
}

void RegisterPreparer(runtime::DeviceKind kind, Preparer preparer) {
  ExecutorRegistry& registry = Registry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.preparers[kind] = std::move(preparer);
}

std::shared_ptr<const PreparedGraph> PreparedGraph::Prepare(ir::Graph graph,
                                                            std::vector<bool> donatable,
                                                            runtime::DeviceId device,
                                                            const Loc& loc) {
  std::shared_ptr<PreparedGraph> prepared(new PreparedGraph());
  prepared->device_ = device;
  Preparer preparer;
  {
    ExecutorRegistry& registry = Registry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    if (auto it = registry.preparers.find(device.kind); it != registry.preparers.end()) {
      preparer = it->second;
    }
  }
  if (preparer) {
    // (A std::vector<bool> has no span view.)
    std::unique_ptr<bool[]> flags(new bool[donatable.size()]());
    std::copy(donatable.begin(), donatable.end(), flags.get());
    absl::StatusOr<Program> program =
        preparer(graph, std::span<const bool>(flags.get(), donatable.size()), device);
    if (!program.ok()) ThrowStatus(program.status(), loc);
    prepared->program_ = *std::move(program);
  }
  prepared->graph_ = std::move(graph);
  return prepared;
}

std::vector<TensorRef> PreparedGraph::Run(std::span<const TensorRef> arguments,
                                          std::span<const bool> donated, const Loc& loc) const {
  const std::vector<ir::Output>& graph_outputs = graph_.outputs();
  std::vector<TensorRef> outputs;
  outputs.reserve(graph_outputs.size());
  const auto output_node = [&](size_t i) {
    auto node = std::make_shared<LazyNode>();
    node->type = graph_.node(graph_outputs[i].node).type;
    node->device = device_;
    return node;
  };
  const auto check_count = [&](size_t returned) {
    if (returned != graph_outputs.size()) {
      ThrowStatus(absl::InternalError(absl::StrCat("realize: the executor for ", device_.ToString(),
                                                   " returned ", returned, " values for ",
                                                   graph_outputs.size(), " outputs")),
                  loc);
    }
  };
  const DeviceExecutor found = program_ ? DeviceExecutor{} : LookupExecutor(device_);
  if (found.resident) {
    std::vector<ResidentValue> values;
    values.reserve(arguments.size());
    for (const TensorRef& argument : arguments)
      values.push_back({argument->data, argument->buffer});
    absl::StatusOr<std::vector<std::shared_ptr<const runtime::DeviceBuffer>>> results =
        found.resident(graph_, std::span<ResidentValue>(values), device_);
    for (size_t j = 0; j < arguments.size(); ++j) {
      if (arguments[j]->buffer == nullptr) arguments[j]->buffer = values[j].buffer;
    }
    if (!results.ok()) ThrowStatus(results.status(), loc);
    check_count(results->size());
    for (size_t i = 0; i < results->size(); ++i) {
      outputs.push_back(output_node(i));
      outputs.back()->buffer = std::move((*results)[i]);
    }
  } else {
    std::vector<std::shared_ptr<const ir::TensorData>> values;
    values.reserve(arguments.size());
    for (const TensorRef& argument : arguments) values.push_back(argument->data);
    const bool any_donated = std::find(donated.begin(), donated.end(), true) != donated.end();
    absl::StatusOr<std::vector<ir::TensorData>> results;
    if (program_) {
      results = program_(values, any_donated ? donated : std::span<const bool>());
    } else if (found.run) {
      results = found.run(graph_, values,
                          any_donated && found.takes_donation ? donated : std::span<const bool>(),
                          device_);
    } else {
      ThrowStatus(absl::UnavailableError(absl::StrCat("realize: no executor for device ",
                                                      device_.ToString(), " in this build")),
                  loc);
    }
    if (!results.ok()) {
      // As RealizeOnDevice: a donated buffer may have been partly overwritten.
      for (size_t j = 0; j < donated.size(); ++j) {
        if (donated[j]) arguments[j]->data.reset();
      }
      ThrowStatus(results.status(), loc);
    }
    check_count(results->size());
    g_arguments_donated.fetch_add(std::count(donated.begin(), donated.end(), true),
                                  std::memory_order_relaxed);
    for (size_t i = 0; i < results->size(); ++i) {
      outputs.push_back(output_node(i));
      outputs.back()->data = std::make_shared<ir::TensorData>(std::move((*results)[i]));
    }
  }
  g_graphs_executed.fetch_add(1, std::memory_order_relaxed);
  g_nodes_executed.fetch_add(graph_.num_nodes(), std::memory_order_relaxed);
  return outputs;
}

RecordingScope::RecordingScope(RecordingNotes& notes) : previous_(g_recording) {
  notes.first_serial = g_next_serial.load(std::memory_order_relaxed);
  g_recording = &notes;
}

RecordingScope::~RecordingScope() { g_recording = previous_; }

RecordingNotes* ActiveRecording() { return g_recording; }

void NoteHostSource(const ir::TensorData* source, const TensorRef& made) {
  if (g_recording == nullptr) return;
  const std::vector<const ir::TensorData*>& sources = g_recording->host_sources;
  for (size_t k = 0; k < sources.size(); ++k) {
    if (sources[k] == source) {
      g_recording->host_inputs.emplace_back(k, made);
      return;
    }
  }
}

uint64_t NextSerial() { return g_next_serial.load(std::memory_order_relaxed); }

EngineStats GetEngineStats() {
  return EngineStats{g_live_nodes.load(), g_graphs_executed.load(), g_nodes_executed.load(),
                     g_arguments_donated.load()};
}

}  // namespace kiln::detail
