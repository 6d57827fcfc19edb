#include "frontend/jit.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "frontend/error.h"
#include "ir/verifier.h"
#include "passes/rewriter.h"

namespace kiln::detail {
namespace {

// Where a value of a call comes from: an argument's tensor, a tensor made from a host-array
// argument, a state slot's value before the call, a constant of the recording, or an output of
// the compiled program.
enum class From : uint8_t { kArgument, kHost, kState, kConstant, kOutput };

struct Source {
  From from = From::kConstant;
  int32_t index = 0;
  bool operator==(const Source&) const = default;
};

// The tape marks a state value carries (a parameter requires a gradient).
struct Marks {
  bool requires_grad = false;
  bool tracks_grad = false;
  bool operator==(const Marks&) const = default;
};

std::string Where(const Loc& loc) { return absl::StrCat(loc.file_name(), ":", loc.line()); }

bool SameBytes(const ir::TensorData& a, const ir::TensorData& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.size_bytes())) == 0;
}

// The result as a value: a tensor that keeps a tape after realization (a loss computed from
// parameters) is returned without it, as replayed results are.
TensorRef AsValue(const TensorRef& ref) {
  if (ref->tracks_grad && !ref->requires_grad) return ShareValue(ref);
  return ref;
}

// alias[i]: the index of the first earlier value that is the same node, or -1.
void Aliases(std::span<const TensorRef> tensors, std::span<TensorRef* const> state,
             std::vector<int32_t>& out) {
  out.clear();
  absl::flat_hash_map<const LazyNode*, int32_t> first;
  const auto add = [&](const LazyNode* node) {
    auto [it, inserted] = first.try_emplace(node, static_cast<int32_t>(out.size()));
    out.push_back(inserted ? -1 : it->second);
  };
  for (const TensorRef& t : tensors) add(t.get());
  for (TensorRef* slot : state) add(slot->get());
}

}  // namespace

struct JitCore::Variant {
  // ---- The signature: what a call must match to use this variant.
  std::vector<ir::TensorType> tensor_types;
  std::vector<runtime::DeviceId> tensor_devices;
  std::vector<ir::TensorType> host_types;
  std::vector<ir::TensorType> state_types;
  std::vector<runtime::DeviceId> state_devices;
  std::vector<int32_t> aliases;

  // ---- How a call runs.
  enum class Mode : uint8_t { kReplay, kConfirm, kEager };
  Mode mode = Mode::kEager;
  std::string eager_reason;  // empty: the recording added state (never worth a warning)
  bool warned = false;

  std::shared_ptr<const PreparedGraph> program;  // null: nothing to compute
  std::vector<Source> parameters;                // per program parameter
  std::vector<uint8_t> donatable;                // per program parameter
  std::vector<TensorRef> constants;
  // Per constant: its value when the function made it from host values during the recording
  // (checked at the confirming recording), else null (a value captured from outside).
  std::vector<std::shared_ptr<const ir::TensorData>> made_values;
  std::vector<Loc> made_at;
  std::vector<runtime::DeviceId> host_devices;  // per host array: the device made from it
  std::vector<Source> results;
  std::vector<int64_t> structure;
  std::vector<Source> state_after;
  std::vector<Marks> state_marks;
  std::vector<std::pair<int32_t, int32_t>> state_aliases;  // (slot, earlier slot, same tensor)
};

JitCore::JitCore() = default;
JitCore::~JitCore() = default;
JitCore::JitCore(JitCore&&) noexcept = default;
JitCore& JitCore::operator=(JitCore&&) noexcept = default;

JitCore::Variant* JitCore::Find(const JitArguments& arguments, std::span<TensorRef* const> state) {
  std::vector<int32_t> aliases;
  bool aliases_known = false;
  for (const std::unique_ptr<Variant>& v : variants_) {
    if (v->tensor_types.size() != arguments.tensors.size() ||
        v->host_types.size() != arguments.host.size() || v->state_types.size() != state.size()) {
      continue;
    }
    bool same = true;
    for (size_t i = 0; same && i < arguments.tensors.size(); ++i) {
      same = arguments.tensors[i]->type == v->tensor_types[i] &&
             arguments.tensors[i]->device == v->tensor_devices[i];
    }
    for (size_t i = 0; same && i < arguments.host.size(); ++i) {
      same = arguments.host[i]->dtype() == v->host_types[i].dtype &&
             arguments.host[i]->shape() == v->host_types[i].shape;
    }
    for (size_t i = 0; same && i < state.size(); ++i) {
      same = (*state[i])->type == v->state_types[i] && (*state[i])->device == v->state_devices[i];
    }
    if (!same) continue;
    if (!aliases_known) {
      Aliases(arguments.tensors, state, aliases);
      aliases_known = true;
    }
    if (aliases == v->aliases) return v.get();
  }
  return nullptr;
}

JitFlat JitCore::Call(const JitArguments& arguments, std::span<TensorRef* const> state,
                      absl::FunctionRef<Recording()> run) {
  ++stats_.calls;
  // Pending arguments and state are computed first, in a graph of their own: the program binds
  // values.
  std::vector<TensorRef> pending;
  for (const TensorRef& t : arguments.tensors) {
    if (!t->realized()) pending.push_back(t);
  }
  for (TensorRef* slot : state) {
    if (*slot == nullptr) {
      ThrowStatus(absl::FailedPreconditionError("kiln::jit: a state object holds an empty tensor"),
                  Loc::current());
    }
    if (!(*slot)->realized()) pending.push_back(*slot);
  }
  if (!pending.empty()) Realize(pending, pending.front()->loc);

  Variant* variant = Find(arguments, state);
  if (variant == nullptr) return Record(nullptr, arguments, state, run);
  switch (variant->mode) {
    case Variant::Mode::kReplay:
      return Replay(*variant, arguments, state);
    case Variant::Mode::kConfirm:
      return Record(variant, arguments, state, run);
    case Variant::Mode::kEager:
      break;
  }
  return Eager(*variant, run);
}

namespace {

// Runs a variant's program on one call's values and stores the results: the part of a call that
// replays and recordings share. `before` holds the state's values before the call; when
// `slots_hold_before`, the slots still hold them (a replay), and those the program may take over
// are released from the slots first so that nothing else holds them.
struct ProgramRun {
  const std::shared_ptr<const PreparedGraph>& program;
  std::span<const Source> parameters;
  std::span<const uint8_t> donatable_flags;
  std::span<const TensorRef> constants;
  std::span<const Source> results;
  std::span<const Source> state_after;
  std::span<const Marks> state_marks;
  // (slot, an earlier slot holding the same tensor): a donated value leaves every slot.
  std::span<const std::pair<int32_t, int32_t>> state_aliases;
};

JitFlat RunProgram(const ProgramRun& p, const JitArguments& arguments,
                   std::span<const TensorRef> host_nodes, std::vector<TensorRef>& before,
                   std::span<TensorRef* const> state, bool slots_hold_before,
                   std::vector<int64_t> structure) {
  std::vector<TensorRef> bound(p.parameters.size());
  std::vector<int32_t> released;  // state slots emptied for donation
  for (size_t k = 0; k < p.parameters.size(); ++k) {
    const Source& s = p.parameters[k];
    switch (s.from) {
      case From::kArgument:
        bound[k] = arguments.tensors[static_cast<size_t>(s.index)];
        break;
      case From::kHost:
        bound[k] = host_nodes[static_cast<size_t>(s.index)];
        break;
      case From::kConstant:
        bound[k] = p.constants[static_cast<size_t>(s.index)];
        break;
      case From::kState:
        if (p.donatable_flags[k]) {
          bound[k] = std::move(before[static_cast<size_t>(s.index)]);
          if (slots_hold_before) {
            state[static_cast<size_t>(s.index)]->reset();
            released.push_back(s.index);
          }
          for (const auto& [slot, first] : p.state_aliases) {
            if (first != s.index) continue;
            before[static_cast<size_t>(slot)].reset();
            if (slots_hold_before) {
              state[static_cast<size_t>(slot)]->reset();
              released.push_back(slot);
            }
          }
        } else {
          bound[k] = before[static_cast<size_t>(s.index)];
        }
        break;
      case From::kOutput:
        break;  // (parameters never come from outputs)
    }
  }
  std::unique_ptr<bool[]> donated(new bool[bound.size()]());
  for (size_t k = 0; k < bound.size(); ++k) {
    const TensorRef& b = bound[k];
    donated[k] = p.donatable_flags[k] && b.use_count() == 1 && b->data != nullptr &&
                 b->buffer == nullptr && b->data.use_count() == 1 && b->data->size_bytes() > 0;
  }
  std::vector<TensorRef> outputs;
  if (p.program != nullptr) {
    try {
      outputs = p.program->Run(
          bound, std::span<const bool>(donated.get(), bound.size()),
          p.program->graph().num_nodes() > 0 ? p.program->graph().node(0).loc : Loc::current());
    } catch (...) {
      // The state keeps its old values (a donated one is lost: reading it says so).
      for (size_t k = 0; k < p.parameters.size(); ++k) {
        if (p.parameters[k].from == From::kState && p.donatable_flags[k]) {
          before[static_cast<size_t>(p.parameters[k].index)] = bound[k];
        }
      }
      for (const auto& [slot, first] : p.state_aliases) {
        if (before[static_cast<size_t>(slot)] == nullptr) {
          before[static_cast<size_t>(slot)] = before[static_cast<size_t>(first)];
        }
      }
      for (int32_t j : released) *state[static_cast<size_t>(j)] = before[static_cast<size_t>(j)];
      throw;
    }
  }
  const auto value = [&](const Source& s) -> TensorRef {
    switch (s.from) {
      case From::kArgument:
        return arguments.tensors[static_cast<size_t>(s.index)];
      case From::kHost:
        return host_nodes[static_cast<size_t>(s.index)];
      case From::kState:
        return before[static_cast<size_t>(s.index)];
      case From::kConstant:
        return p.constants[static_cast<size_t>(s.index)];
      case From::kOutput:
        return outputs[static_cast<size_t>(s.index)];
    }
    return nullptr;
  };
  JitFlat flat;
  flat.structure = std::move(structure);
  flat.refs.reserve(p.results.size());
  for (const Source& s : p.results) flat.refs.push_back(value(s));
  for (size_t i = 0; i < state.size(); ++i) {
    TensorRef v = value(p.state_after[i]);
    if (p.state_after[i].from == From::kOutput) {
      v->requires_grad = p.state_marks[i].requires_grad;
      v->tracks_grad = p.state_marks[i].tracks_grad;
    }
    *state[i] = std::move(v);
  }
  return flat;
}

}  // namespace

JitFlat JitCore::Replay(Variant& v, const JitArguments& arguments,
                        std::span<TensorRef* const> state) {
  ++stats_.replays;
  // A tensor per host array the program reads, holding a copy of its values (as
  // Tensor::from_tensor_data makes).
  std::vector<TensorRef> host_nodes(arguments.host.size());
  for (const Source& s : v.parameters) {
    if (s.from != From::kHost) continue;
    TensorRef& node = host_nodes[static_cast<size_t>(s.index)];
    if (node != nullptr) continue;
    node = std::make_shared<LazyNode>();
    node->type = v.host_types[static_cast<size_t>(s.index)];
    node->device = v.host_devices[static_cast<size_t>(s.index)];
    node->data = std::make_shared<ir::TensorData>(*arguments.host[static_cast<size_t>(s.index)]);
  }
  for (const Source& s : v.results) {
    if (s.from == From::kHost && host_nodes[static_cast<size_t>(s.index)] == nullptr) {
      TensorRef& node = host_nodes[static_cast<size_t>(s.index)];
      node = std::make_shared<LazyNode>();
      node->type = v.host_types[static_cast<size_t>(s.index)];
      node->device = v.host_devices[static_cast<size_t>(s.index)];
      node->data = std::make_shared<ir::TensorData>(*arguments.host[static_cast<size_t>(s.index)]);
    }
  }
  std::vector<TensorRef> before;
  before.reserve(state.size());
  for (TensorRef* slot : state) before.push_back(*slot);
  return RunProgram({v.program, v.parameters, v.donatable, v.constants, v.results, v.state_after,
                     v.state_marks, v.state_aliases},
                    arguments, host_nodes, before, state, /*slots_hold_before=*/true, v.structure);
}

JitFlat JitCore::Eager(Variant& v, absl::FunctionRef<Recording()> run) {
  ++stats_.eager_calls;
  if (!v.warned && !v.eager_reason.empty()) {
    v.warned = true;
    std::fprintf(stderr,
                 "kiln: warning: a kiln::jit function runs eagerly for this signature (each call "
                 "records its ops and looks its graph up again) because %s.\n",
                 v.eager_reason.c_str());
  }
  Recording recording = run();
  std::vector<TensorRef> roots = recording.result.refs;
  for (TensorRef* slot : recording.state_after) roots.push_back(*slot);
  if (!roots.empty()) Realize(roots, roots.front()->loc);
  for (TensorRef& ref : recording.result.refs) ref = AsValue(ref);
  return std::move(recording.result);
}

JitFlat JitCore::Record(Variant* confirming, const JitArguments& arguments,
                        std::span<TensorRef* const> state, absl::FunctionRef<Recording()> run) {
  ++stats_.recordings;
  std::vector<TensorRef> before;
  before.reserve(state.size());
  for (TensorRef* slot : state) before.push_back(*slot);

  auto fresh = std::make_unique<Variant>();
  Variant& v = *fresh;
  for (const TensorRef& t : arguments.tensors) {
    v.tensor_types.push_back(t->type);
    v.tensor_devices.push_back(t->device);
  }
  for (const ir::TensorData* h : arguments.host) v.host_types.push_back({h->dtype(), h->shape()});
  for (const TensorRef& s : before) {
    v.state_types.push_back(s->type);
    v.state_devices.push_back(s->device);
  }
  Aliases(arguments.tensors, state, v.aliases);
  for (size_t i = 0; i < state.size(); ++i) {
    const int32_t first = v.aliases[arguments.tensors.size() + i];
    const auto tensors = static_cast<int32_t>(arguments.tensors.size());
    if (first >= tensors) v.state_aliases.emplace_back(static_cast<int32_t>(i), first - tensors);
  }
  v.host_devices.resize(arguments.host.size());

  RecordingNotes notes;
  notes.host_sources = arguments.host;
  Recording recording;
  {
    RecordingScope scope(notes);
    recording = run();
  }
  const std::vector<TensorRef>& results = recording.result.refs;
  v.structure = recording.result.structure;
  std::vector<TensorRef> after;
  after.reserve(recording.state_after.size());
  for (TensorRef* slot : recording.state_after) after.push_back(*slot);

  // Why this recording cannot be replayed ("" with adds_state: it added state, which a replay
  // cannot do; the signature differs next time anyway).
  std::string reason;
  const bool adds_state = !std::equal(recording.state_after.begin(), recording.state_after.end(),
                                      state.begin(), state.end());
  if (notes.realized_at) {
    reason = absl::StrCat("it realizes a value at ", Where(*notes.realized_at),
                          " (item(), into_data, printing), so its graph depends on the values");
  }

  // The program's outputs: the pending results, then the pending new state, each once.
  std::vector<TensorRef> roots;
  absl::flat_hash_map<const LazyNode*, int32_t> output_of;
  const auto add_root = [&](const TensorRef& ref) {
    if (ref->realized() || output_of.contains(ref.get())) return;
    output_of.emplace(ref.get(), static_cast<int32_t>(roots.size()));
    roots.push_back(ref);
  };
  for (const TensorRef& r : results) add_root(r);
  for (const TensorRef& a : after) add_root(a);

  const auto pending = [](const LazyNode* node) { return !node->realized(); };
  std::vector<LazyNode*> root_nodes;
  for (const TensorRef& r : roots) root_nodes.push_back(r.get());
  std::vector<LazyNode*> order = TopologicalOrder(root_nodes, pending);

  // Pending values that existed before the call (captured, never computed) are computed now, in
  // a graph of their own: inside the program they would be recomputed from the current state on
  // every replay instead of keeping the value they describe.
  {
    std::vector<TensorRef> earlier;
    absl::flat_hash_set<const LazyNode*> seen;
    const auto consider = [&](const TensorRef& ref) {
      if (!ref->realized() && ref->serial < notes.first_serial && seen.insert(ref.get()).second) {
        earlier.push_back(ref);
      }
    };
    for (const TensorRef& r : roots) consider(r);
    for (LazyNode* node : order) {
      if (node->realized()) continue;
      for (const TensorRef& in : node->inputs) consider(in);
    }
    if (!earlier.empty()) {
      Realize(earlier, earlier.front()->loc);
      order = TopologicalOrder(root_nodes, pending);
    }
  }

  runtime::DeviceId device;
  if (!roots.empty()) device = roots.front()->device;
  for (LazyNode* node : order) {
    if (!reason.empty()) break;
    if (node->device != device) {
      reason = absl::StrCat("its results are on several devices (", device.ToString(), " and ",
                            node->device.ToString(), ")");
    } else if (!node->realized() &&
               (node->op == ir::Op::kRandomUniform || node->op == ir::Op::kRandomNormal)) {
      reason = absl::StrCat("it draws random numbers at ", Where(node->loc),
                            " (a random op takes its seed when it is recorded)");
    }
  }

  // Every value the program reads, classified.
  absl::flat_hash_map<const LazyNode*, int32_t> state_index;
  for (size_t j = 0; j < before.size(); ++j) {
    state_index.try_emplace(before[j].get(), static_cast<int32_t>(j));
  }
  absl::flat_hash_map<const LazyNode*, int32_t> host_index;
  for (const auto& [k, made] : notes.host_inputs) {
    host_index.try_emplace(made.get(), static_cast<int32_t>(k));
    v.host_devices[k] = made->device;
  }
  absl::flat_hash_map<const LazyNode*, TensorRef> shares;
  for (const auto& [node, origin] : notes.shared) shares.try_emplace(node.get(), origin);
  absl::flat_hash_set<const LazyNode*> host_made;
  for (const TensorRef& made : notes.host_made) host_made.insert(made.get());
  absl::flat_hash_map<const LazyNode*, int32_t> constant_index;
  const auto classify = [&](TensorRef ref) -> Source {
    // A detach() made during the call shares another value: it is that value.
    for (auto it = shares.find(ref.get()); it != shares.end(); it = shares.find(ref.get())) {
      ref = it->second;
    }
    for (size_t i = 0; i < arguments.tensors.size(); ++i) {
      if (arguments.tensors[i] == ref) return {From::kArgument, static_cast<int32_t>(i)};
    }
    if (auto it = state_index.find(ref.get()); it != state_index.end()) {
      return {From::kState, it->second};
    }
    if (auto it = host_index.find(ref.get()); it != host_index.end()) {
      return {From::kHost, it->second};
    }
    if (auto it = constant_index.find(ref.get()); it != constant_index.end()) {
      return {From::kConstant, it->second};
    }
    const bool made_here = ref->serial >= notes.first_serial;
    if (made_here && !host_made.contains(ref.get()) && reason.empty()) {
      reason = absl::StrCat("it computed the value at ", Where(ref->loc), " inside the call");
    }
    const auto c = static_cast<int32_t>(v.constants.size());
    constant_index.emplace(ref.get(), c);
    v.constants.push_back(ref);
    v.made_values.push_back(made_here ? ref->data : nullptr);
    v.made_at.push_back(ref->loc);
    return {From::kConstant, c};
  };

  // The program: the pending DAG, its realized leaves as parameters.
  ir::Graph graph;
  graph.Reserve(static_cast<int64_t>(order.size()));
  absl::flat_hash_map<const LazyNode*, ir::NodeId> ids;
  ids.reserve(order.size());
  const auto parameter = [&](const TensorRef& ref) {
    if (auto it = ids.find(ref.get()); it != ids.end()) return it->second;
    ir::Attrs attrs;
    attrs.name = absl::StrCat("p", v.parameters.size());
    attrs.dtype = ref->type.dtype;
    attrs.shape = ref->type.shape;
    const ir::NodeId id =
        graph.AddNode(ir::Node{ir::Op::kParameter, {}, std::move(attrs), ref->type, ref->loc});
    ids.emplace(ref.get(), id);
    v.parameters.push_back(classify(ref));
    return id;
  };
  for (LazyNode* node : order) {
    if (node->realized()) continue;
    std::vector<ir::NodeId> inputs;
    inputs.reserve(node->inputs.size());
    for (const TensorRef& in : node->inputs) {
      inputs.push_back(in->realized() ? parameter(in) : ids.at(in.get()));
    }
    ids[node] =
        graph.AddNode(ir::Node{node->op, std::move(inputs), node->attrs, node->type, node->loc});
  }
  for (const TensorRef& r : roots) graph.AddOutput(ids.at(r.get()));

  const auto source_of = [&](const TensorRef& ref) -> Source {
    if (auto it = output_of.find(ref.get()); it != output_of.end()) {
      return {From::kOutput, it->second};
    }
    return classify(ref);
  };
  for (const TensorRef& r : results) v.results.push_back(source_of(r));
  for (size_t i = 0; i < after.size(); ++i) {
    if (i < before.size() && after[i] == before[i]) {
      v.state_after.push_back({From::kState, static_cast<int32_t>(i)});
    } else {
      v.state_after.push_back(source_of(after[i]));
    }
    v.state_marks.push_back({after[i]->requires_grad, after[i]->tracks_grad});
  }
  // A state value may be handed to the program when nothing of the call keeps it.
  // (A slot holding the same tensor as an earlier one counts as that one.)
  const auto kept = [&](int32_t slot) {
    const Source s{From::kState, slot};
    return std::find(v.results.begin(), v.results.end(), s) != v.results.end() ||
           std::find(v.state_after.begin(), v.state_after.end(), s) != v.state_after.end();
  };
  v.donatable.resize(v.parameters.size());
  for (size_t k = 0; k < v.parameters.size(); ++k) {
    const Source& s = v.parameters[k];
    bool donatable = s.from == From::kState && !kept(s.index);
    for (const auto& [slot, first] : v.state_aliases) {
      if (first == s.index && kept(slot)) donatable = false;
    }
    v.donatable[k] = donatable;
  }

  const auto eager_now = [&](Variant& target, std::string why) {
    target.mode = Variant::Mode::kEager;
    target.eager_reason = std::move(why);
    if (!roots.empty()) Realize(roots, roots.front()->loc);
    JitFlat flat;
    flat.structure = v.structure;
    for (const TensorRef& r : results) flat.refs.push_back(AsValue(r));
    return flat;
  };

  if (confirming != nullptr) {
    // The second recording of a signature: its program must be the first one's, and what the
    // function made from host values must not have changed.
    Variant& c = *confirming;
    std::string changed = reason;
    if (changed.empty() && adds_state) changed = "it adds state on every call";
    if (changed.empty() &&
        (c.parameters != v.parameters || c.results != v.results || c.state_after != v.state_after ||
         c.state_marks != v.state_marks || c.structure != v.structure ||
         c.constants.size() != v.constants.size() || (c.program == nullptr) != roots.empty() ||
         (c.program != nullptr && !passes::SameGraph(c.program->graph(), graph)))) {
      changed = "its graph changed between the first two calls with these shapes";
    }
    for (size_t k = 0; changed.empty() && k < c.constants.size(); ++k) {
      if (c.made_values[k] == nullptr) {
        if (c.constants[k] != v.constants[k]) {
          changed = absl::StrCat("the tensor it reads from ", Where(v.made_at[k]),
                                 " is another one on each call");
        }
      } else if (v.made_values[k] == nullptr || !SameBytes(*c.made_values[k], *v.made_values[k])) {
        changed = absl::StrCat("the tensor it makes from host values at ", Where(v.made_at[k]),
                               " changed between calls (pass it as an argument)");
      }
    }
    if (!changed.empty()) return eager_now(c, std::move(changed));
    c.mode = Variant::Mode::kReplay;
    std::vector<TensorRef> host_nodes(arguments.host.size());
    for (const auto& [k, made] : notes.host_inputs) host_nodes[k] = made;
    // (This call's own constants are the recorded ones, byte for byte.)
    return RunProgram({c.program, c.parameters, c.donatable, v.constants, c.results, c.state_after,
                       c.state_marks, c.state_aliases},
                      arguments, host_nodes, before, state, /*slots_hold_before=*/false,
                      c.structure);
  }

  variants_.push_back(std::move(fresh));
  stats_.signatures = static_cast<int64_t>(variants_.size());
  if (static_cast<int>(variants_.size()) == kRecompileWarningAfter && !warned_signatures_) {
    warned_signatures_ = true;
    std::fprintf(stderr,
                 "kiln: warning: a kiln::jit function (results computed at %s) has been recorded "
                 "for %d signatures: its arguments' or state's shapes, dtypes or devices keep "
                 "changing, and each new signature compiles. Pad or bucket the shapes "
                 "(docs/performance.md, \"Recompiles\").\n",
                 results.empty() ? "?" : Where(results.front()->loc).c_str(),
                 kRecompileWarningAfter);
  }
  if (adds_state || !reason.empty()) return eager_now(v, std::move(reason));

  if (!roots.empty()) {
    if (absl::Status verified = ir::Verify(graph); !verified.ok()) {
      ThrowStatus(absl::InternalError(
                      absl::StrCat("kiln::jit built an invalid graph: ", verified.message())),
                  roots.front()->loc);
    }
    std::vector<bool> donatable(v.donatable.begin(), v.donatable.end());
    v.program =
        PreparedGraph::Prepare(std::move(graph), std::move(donatable), device, roots.front()->loc);
  }
  v.mode = std::any_of(v.made_values.begin(), v.made_values.end(),
                       [](const auto& made) { return made != nullptr; })
               ? Variant::Mode::kConfirm
               : Variant::Mode::kReplay;
  std::vector<TensorRef> host_nodes(arguments.host.size());
  for (const auto& [k, made] : notes.host_inputs) host_nodes[k] = made;
  // The state slots hold the recording's pending values, which keep the old ones: nothing is
  // donated on this first run.
  return RunProgram({v.program, v.parameters, v.donatable, v.constants, v.results, v.state_after,
                     v.state_marks, v.state_aliases},
                    arguments, host_nodes, before, state, /*slots_hold_before=*/false, v.structure);
}

}  // namespace kiln::detail
