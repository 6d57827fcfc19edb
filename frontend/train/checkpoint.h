// Checkpoints: a module's state plus the training state around it, in one safetensors file.
//
//   kiln::train::Checkpoint ckpt;
//   ckpt.epoch = 3;
//   ckpt.optimizer = optimizer.state();               // NamedState
//   ckpt.rng_state = kiln::detail::RandomStreamState();
//   kiln::train::save_checkpoint("run/last.safetensors", model, ckpt);
//
//   kiln::train::Checkpoint back = kiln::train::load_checkpoint("run/last.safetensors", model);
//   optimizer.load_state(back.optimizer);
//   if (back.rng_state) kiln::manual_seed(*back.rng_state);
//
//   kiln::train::load_state_dict("torch_mlp.safetensors", model);  // a PyTorch state_dict
//
// File layout (a plain safetensors file, so PyTorch / safetensors tools read it):
//   tensors    "<dotted module name>" (fc1.weight, ...), "optimizer/<name>", "scheduler/<name>",
//              "extra/<name>"
//   metadata   "kiln.format" = "kiln checkpoint", "kiln.format_version" = "1.0",
//              "kiln.version", "kiln.module_tree" (JSON [[name, dtype, [shape]], ...]),
//              "kiln.epoch", "kiln.step", "kiln.rng_state", and "optimizer/<key>",
//              "scheduler/<key>", "user/<key>" strings.
// Format versions are "major.minor": a reader loads every minor version of its major (minor
// versions only add optional entries, which older readers ignore) and refuses another major,
// naming both versions.
//
// Module state: parameters come from KILN_MODULE's visit. Buffers (running statistics, ...) or any
// other tensors a caller wants saved with the module go through the same path: gather a
// StateRefs (name -> TensorRef) with visit and pass it to the StateRefs overloads.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "frontend/engine.h"
#include "frontend/error.h"
#include "ir/tensor_data.h"

namespace kiln::train {

inline constexpr int kCheckpointFormatMajor = 1;
inline constexpr int kCheckpointFormatMinor = 0;
/// "1.0".
std::string CheckpointFormatVersion();
/// kiln's version ("0.1.0"), recorded in every checkpoint.
const char* KilnVersion();

/// The state of an optimizer or a scheduler: tensors (moments, ...) and strings (step counts,
/// hyperparameters, ...). Optimizers provide `NamedState state() const` and
/// `void load_state(const NamedState&)`.
struct NamedState {
  std::map<std::string, ir::TensorData> tensors;
  std::map<std::string, std::string> values;
  bool empty() const { return tensors.empty() && values.empty(); }
};

/// One entry of the module tree recorded in a checkpoint.
struct ModuleEntry {
  std::string name;
  ir::DType dtype;
  ir::Shape shape;
};

struct Checkpoint {
  /// The module's state by dotted name (filled by save_checkpoint / load_checkpoint).
  std::map<std::string, ir::TensorData> model;
  NamedState optimizer;
  NamedState scheduler;
  std::optional<int64_t> epoch;
  std::optional<int64_t> step;
  /// kiln's global random stream (kiln::detail::RandomStreamState(); restore with manual_seed).
  std::optional<uint64_t> rng_state;
  /// Anything else: tensors and strings of the caller.
  std::map<std::string, ir::TensorData> extra_tensors;
  std::map<std::string, std::string> user;

  // Read from the file on load (ignored on save, which writes the current values).
  std::string format_version;
  std::string kiln_version;
  std::vector<ModuleEntry> module_tree;
};

/// A module's state as handles: parameters, and buffers when a caller adds them.
using StateRefs = std::vector<std::pair<std::string, detail::TensorRef>>;

/// The parameters of a KILN_MODULE, in visit order.
template <class M>
StateRefs module_state(const M& module) {
  StateRefs refs;
  module.visit(
      [&refs](const std::string& name, const auto& t) { refs.emplace_back(name, t.ref()); });
  return refs;
}

/// Realizes `state` (all tensors in one run) and copies it to host.
std::map<std::string, ir::TensorData> RealizeState(
    const StateRefs& state, std::source_location loc = std::source_location::current());

/// Every difference between what a module expects and what a file holds, one per line
/// ("missing 'fc2.bias' (f32[2])", "'fc1.weight': shape [3,4] in the file, [4,3] in the module",
/// "unexpected 'fc3.weight'" when `strict`); empty when they match.
std::string StateMismatches(const StateRefs& expected,
                            const std::map<std::string, ir::TensorData>& values, bool strict);

/// Writes `checkpoint` with `state` as its model part (atomically: an error leaves an existing
/// file intact). Throws kiln::Error.
void SaveCheckpoint(const std::string& path, const StateRefs& state, const Checkpoint& checkpoint,
                    std::source_location loc = std::source_location::current());

/// Reads and checks a kiln checkpoint (format, version) without applying it. Throws kiln::Error.
Checkpoint ReadCheckpoint(const std::string& path,
                          std::source_location loc = std::source_location::current());

/// ReadCheckpoint of a file's bytes held in memory (e.g. received from another process);
/// `source` names it in errors.
Checkpoint ParseCheckpoint(std::span<const std::byte> bytes, const std::string& source,
                           std::source_location loc = std::source_location::current());

/// Reads any safetensors file as name -> tensor (a PyTorch state_dict, a kiln checkpoint's model
/// part included). Throws kiln::Error.
std::map<std::string, ir::TensorData> ReadStateDict(
    const std::string& path, std::source_location loc = std::source_location::current());

/// Checks `values` against `expected` (throws one kiln::Error listing every mismatch, naming
/// `what`) and returns the new handles, in `expected`'s order, on each tensor's device; a tensor
/// that required a gradient is replaced by one that does too.
std::vector<detail::TensorRef> ApplyState(const StateRefs& expected,
                                          const std::map<std::string, ir::TensorData>& values,
                                          bool strict, const std::string& what,
                                          const std::source_location& loc);

namespace detail_ckpt {
template <class M>
void Assign(M& module, const std::vector<detail::TensorRef>& refs) {
  size_t i = 0;
  module.visit([&](const std::string&, auto& t) {
    using T = std::remove_cvref_t<decltype(t)>;
    t = T(refs[i++]);
  });
}
}  // namespace detail_ckpt

/// Saves `module`'s parameters with `checkpoint`'s training state.
template <class M>
void save_checkpoint(const std::string& path, const M& module, const Checkpoint& checkpoint = {},
                     std::source_location loc = std::source_location::current()) {
  SaveCheckpoint(path, module_state(module), checkpoint, loc);
}

/// Loads a checkpoint into `module` (names, shapes and dtypes must match exactly; one error lists
/// every mismatch and the module is left unchanged) and returns the rest of the state.
template <class M>
Checkpoint load_checkpoint(const std::string& path, M& module,
                           std::source_location loc = std::source_location::current()) {
  Checkpoint checkpoint = ReadCheckpoint(path, loc);
  detail_ckpt::Assign(module, ApplyState(module_state(module), checkpoint.model, true, path, loc));
  return checkpoint;
}

/// Loads a plain safetensors state dict (e.g. torch's `model.state_dict()` saved with
/// safetensors) into `module`. With `strict` false, tensors the module lacks are ignored.
template <class M>
void load_state_dict(const std::string& path, M& module, bool strict = true,
                     std::source_location loc = std::source_location::current()) {
  detail_ckpt::Assign(
      module, ApplyState(module_state(module), ReadStateDict(path, loc), strict, path, loc));
}

}  // namespace kiln::train
