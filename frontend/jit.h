// kiln::jit: a function over tensors recorded once per signature and replayed afterwards, like
// jax.jit, tinygrad's TinyJit or a CUDA graph.
//
//   auto step = kiln::jit(
//       [&](const kiln::Tensor<Cpu, 2>& x, const kiln::Tensor<Cpu, 1, kiln::Int>& y) {
//         auto loss = kiln::nn::cross_entropy(model.forward(x), y);
//         optimizer.step(model, loss.backward());
//         return loss;
//       },
//       model, optimizer);                    // the state the function reads and replaces
//   for (...) {
//     kiln::Tensor<Cpu, 0> loss = step(x, y);  // realized: the whole step ran
//   }
//
// The first call with a new signature runs the function (recording its ops lazily, as always),
// compiles the graph behind its results and the state it left, and runs it. Later calls with the
// same signature skip the function: no ops are recorded, no graph is built, hashed or compared;
// the arguments and the current state are bound to the compiled program's parameters, it runs,
// and the results and the new state are stored (parameters are updated in place through buffer
// donation, as a realized training step does). Every call returns realized values.
//
// What a call binds, and when it records again:
//   arguments  Tensors (any rank and kind), host arrays (ir::TensorData, data::Batch) and
//              std::tuple / std::pair / std::vector / std::optional of them. A tensor the
//              function makes from a host-array argument (Tensor::from_tensor_data,
//              Batch::inputs_as / targets_as) is an input: a later call binds the new array's
//              values. The signature is every argument's dtype, shape and device, and which
//              arguments and state values are the same tensor.
//   state      the objects after `fn`: modules (KILN_MODULE: parameters and buffers), optimizers
//              (their buffers, step counts and learning rates), anything with a JitState
//              specialization. Each call reads their current tensors (so a checkpoint loaded or a
//              learning rate set between calls is used) and stores the new ones. The state's
//              dtypes, shapes and devices are part of the signature: an optimizer's first step,
//              which creates its buffers, records again at the second.
//   results    what the function returns (Tensors, tuples, ... as for arguments; a JitValue
//              specialization adds types): values without a tape (differentiate inside the
//              function).
//   constants  every other tensor the function reads (one it captures, or makes from host
//              values such as from_data literals) keeps the value it had when the function was
//              recorded, as jax.jit's closures do. A tensor the function makes from host values
//              is checked once: the second call with the signature records again, and if such a
//              tensor's value changed, the signature runs eagerly from then on (its line is
//              named in a warning the next time it does).
//   modes      what the function decided on the host while it was recorded (autocast, no_grad,
//              train/eval mode, control flow) is part of the recording; record one jitted
//              function per mode.
//
// A signature whose recording cannot be replayed runs the function eagerly each call (correct,
// but recorded and compiled-cache-looked-up each time); the second such call warns once, naming
// why: it realizes a value inside (item(), printing), draws random numbers (random ops take
// their seed when recorded), uses several devices, makes a host-valued tensor that changes
// between calls, or adds state (an optimizer's first step: it never recurs, so it never warns).
// After kRecompileWarningAfter signatures the jit warns that the function keeps recording.
//
// Not thread-safe: one thread at a time calls a Jitted function.
#pragma once

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "frontend/data/loader.h"
#include "frontend/engine.h"
#include "frontend/tensor.h"
#include "ir/tensor_data.h"

namespace kiln {

/// Counters of one jitted function.
struct JitStats {
  int64_t calls = 0;
  /// Calls that ran the function to record it (a new signature, or its confirmation).
  int64_t recordings = 0;
  /// Calls that ran the compiled program without running the function.
  int64_t replays = 0;
  /// Calls that ran the function eagerly (a signature that cannot be replayed).
  int64_t eager_calls = 0;
  /// Signatures recorded so far.
  int64_t signatures = 0;
};

namespace detail {

/// The tensors and host arrays of one call's arguments, flattened.
struct JitArguments {
  std::vector<TensorRef> tensors;
  std::vector<const ir::TensorData*> host;
};

/// A result flattened: its tensors, and what Unflatten needs besides (vector sizes, optional
/// presence).
struct JitFlat {
  std::vector<TensorRef> refs;
  std::vector<int64_t> structure;
};

/// Reads a flattened result back, in order.
struct JitReader {
  std::span<const TensorRef> refs;
  std::span<const int64_t> structure;
  TensorRef NextRef() {
    TensorRef ref = refs.front();
    refs = refs.subspan(1);
    return ref;
  }
  int64_t NextInt() {
    const int64_t value = structure.front();
    structure = structure.subspan(1);
    return value;
  }
};

}  // namespace detail

/// How a type crosses a jitted function's boundary: as an argument (a static
/// Argument(const T&, detail::JitArguments&)) and as a result (static Flatten(const T&,
/// detail::JitFlat&) and T Unflatten(detail::JitReader&)). Specialize it for a struct of tensors
/// to pass or return one.
template <class T, class Enable = void>
struct JitValue {};

/// Types a jitted function takes as arguments / returns.
template <class T>
concept JitArgument = requires(const T& value, detail::JitArguments& out) {
  JitValue<T>::Argument(value, out);
};
template <class T>
concept JitResult = std::is_void_v<T> ||
    requires(const T& value, detail::JitFlat& out, detail::JitReader& in) {
  JitValue<T>::Flatten(value, out);
  { JitValue<T>::Unflatten(in) } -> std::same_as<T>;
};

template <class B, int R, class K>
struct JitValue<Tensor<B, R, K>> {
  static void Argument(const Tensor<B, R, K>& t, detail::JitArguments& out) {
    out.tensors.push_back(t.ref());
  }
  static void Flatten(const Tensor<B, R, K>& t, detail::JitFlat& out) {
    out.refs.push_back(t.ref());
  }
  static Tensor<B, R, K> Unflatten(detail::JitReader& in) { return Tensor<B, R, K>(in.NextRef()); }
};

template <>
struct JitValue<ir::TensorData> {
  static void Argument(const ir::TensorData& data, detail::JitArguments& out) {
    out.host.push_back(&data);
  }
};

template <>
struct JitValue<data::Batch> {
  static void Argument(const data::Batch& batch, detail::JitArguments& out) {
    out.host.push_back(&batch.inputs);
    out.host.push_back(&batch.targets);
  }
};

template <class... Ts>
struct JitValue<std::tuple<Ts...>> {
  static void Argument(const std::tuple<Ts...>& t, detail::JitArguments& out) {
    std::apply([&](const auto&... parts) { (JitValue<Ts>::Argument(parts, out), ...); }, t);
  }
  static void Flatten(const std::tuple<Ts...>& t, detail::JitFlat& out) {
    std::apply([&](const auto&... parts) { (JitValue<Ts>::Flatten(parts, out), ...); }, t);
  }
  static std::tuple<Ts...> Unflatten(detail::JitReader& in) {
    // Braced initialisation evaluates left to right.
    return std::tuple<Ts...>{JitValue<Ts>::Unflatten(in)...};
  }
};

template <class A, class B>
struct JitValue<std::pair<A, B>> {
  static void Argument(const std::pair<A, B>& p, detail::JitArguments& out) {
    JitValue<A>::Argument(p.first, out);
    JitValue<B>::Argument(p.second, out);
  }
  static void Flatten(const std::pair<A, B>& p, detail::JitFlat& out) {
    JitValue<A>::Flatten(p.first, out);
    JitValue<B>::Flatten(p.second, out);
  }
  static std::pair<A, B> Unflatten(detail::JitReader& in) {
    A first = JitValue<A>::Unflatten(in);
    return {std::move(first), JitValue<B>::Unflatten(in)};
  }
};

template <class T>
struct JitValue<std::vector<T>> {
  static void Argument(const std::vector<T>& v, detail::JitArguments& out) {
    for (const T& item : v) JitValue<T>::Argument(item, out);
  }
  static void Flatten(const std::vector<T>& v, detail::JitFlat& out) {
    out.structure.push_back(static_cast<int64_t>(v.size()));
    for (const T& item : v) JitValue<T>::Flatten(item, out);
  }
  static std::vector<T> Unflatten(detail::JitReader& in) {
    std::vector<T> v;
    const int64_t n = in.NextInt();
    v.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v.push_back(JitValue<T>::Unflatten(in));
    return v;
  }
};

template <class T>
struct JitValue<std::optional<T>> {
  static void Argument(const std::optional<T>& o, detail::JitArguments& out) {
    if (o) JitValue<T>::Argument(*o, out);
  }
  static void Flatten(const std::optional<T>& o, detail::JitFlat& out) {
    out.structure.push_back(o.has_value() ? 1 : 0);
    if (o) JitValue<T>::Flatten(*o, out);
  }
  static std::optional<T> Unflatten(detail::JitReader& in) {
    if (in.NextInt() == 0) return std::nullopt;
    return JitValue<T>::Unflatten(in);
  }
};

/// How kiln::jit reads and replaces an object's tensors: Visit(object, visitor) calls
/// visitor(name, slot) with a TensorRef& for every tensor the object holds that a call may read
/// or replace, in an order that depends only on the object's structure. Modules (KILN_MODULE)
/// and optimizers (visit_state) have it; specialize it for other state.
template <class T, class Enable = void>
struct JitState {
  template <class Visitor>
  static void Visit(T& object, Visitor&& visitor) {
    if constexpr (requires { object.visit_state(visitor); }) {
      object.visit_state(visitor);
    } else if constexpr (requires { object.named_parameters(); }) {
      const auto slot = [&visitor](const std::string& name, auto& tensor) {
        visitor(name, detail::TensorAccess::Ref(tensor));
      };
      object.visit(slot);
      object.visit_buffers(slot);
    } else {
      static_assert(sizeof(T) == 0,
                    "kiln::jit: a state object must be a module (KILN_MODULE), an optimizer, or "
                    "have a kiln::JitState specialization");
    }
  }
};

namespace detail {

/// The type-independent part of a Jitted function: its signatures, their compiled programs,
/// and the call protocol (frontend/jit.cc).
class JitCore {
 public:
  JitCore();
  ~JitCore();
  JitCore(const JitCore&) = delete;
  JitCore& operator=(const JitCore&) = delete;
  JitCore(JitCore&&) noexcept;
  JitCore& operator=(JitCore&&) noexcept;

  /// What running the function gave: its result flattened, and the state slots afterwards.
  struct Recording {
    JitFlat result;
    std::vector<TensorRef*> state_after;
  };
  /// One call: `arguments` flattened, `state` the state's slots now (each holds a tensor), and
  /// `run` runs the function on the arguments (the recording or eager path). Returns the
  /// result's tensors (realized) and structure; the state slots hold the new state.
  JitFlat Call(const JitArguments& arguments, std::span<TensorRef* const> state,
               absl::FunctionRef<Recording()> run);

  JitStats stats() const { return stats_; }

 private:
  struct Variant;
  Variant* Find(const JitArguments& arguments, std::span<TensorRef* const> state);
  JitFlat Record(Variant* confirming, const JitArguments& arguments,
                 std::span<TensorRef* const> state, absl::FunctionRef<Recording()> run);
  JitFlat Replay(Variant& variant, const JitArguments& arguments,
                 std::span<TensorRef* const> state);
  JitFlat Eager(Variant& variant, absl::FunctionRef<Recording()> run);

  std::vector<std::unique_ptr<Variant>> variants_;
  JitStats stats_;
  bool warned_signatures_ = false;
};

}  // namespace detail

/// A jitted function: call it as the function itself (see the file comment).
template <class Fn, class... States>
class Jitted {
 public:
  explicit Jitted(Fn fn, States&... states) : fn_(std::move(fn)), states_(&states...) {}

  template <class... Args>
  auto operator()(const Args&... args) {
    using Result = std::invoke_result_t<Fn&, const Args&...>;
    static_assert((JitArgument<Args> && ...),
                  "kiln::jit: an argument's type cannot cross a jitted function's boundary; pass "
                  "Tensors, ir::TensorData, data::Batch, or tuples / vectors / optionals of them, "
                  "or specialize kiln::JitValue for it");
    static_assert(JitResult<Result>,
                  "kiln::jit: the function's result type cannot cross its boundary; return "
                  "Tensors, or tuples / vectors / optionals of them, or specialize "
                  "kiln::JitValue for it");
    detail::JitArguments arguments;
    (JitValue<Args>::Argument(args, arguments), ...);
    std::vector<detail::TensorRef*> state = StateSlots();
    std::optional<detail::JitFlat> result_of_run;
    const auto run = [&]() -> detail::JitCore::Recording {
      detail::JitCore::Recording recording;
      if constexpr (std::is_void_v<Result>) {
        fn_(args...);
      } else {
        JitValue<Result>::Flatten(fn_(args...), recording.result);
      }
      recording.state_after = StateSlots();
      return recording;
    };
    detail::JitFlat flat = core_.Call(arguments, state, run);
    if constexpr (!std::is_void_v<Result>) {
      detail::JitReader reader{flat.refs, flat.structure};
      return JitValue<Result>::Unflatten(reader);
    }
  }

  /// Counters (calls, recordings, replays, eager calls, signatures).
  JitStats stats() const { return core_.stats(); }

 private:
  std::vector<detail::TensorRef*> StateSlots() {
    std::vector<detail::TensorRef*> slots;
    std::apply(
        [&](auto*... objects) {
          (JitState<std::remove_pointer_t<decltype(objects)>>::Visit(
               *objects,
               [&slots](const std::string&, detail::TensorRef& slot) { slots.push_back(&slot); }),
           ...);
        },
        states_);
    return slots;
  }

  Fn fn_;
  std::tuple<States*...> states_;
  detail::JitCore core_;
};

/// Jits `fn` with `states` as the objects whose tensors it reads and replaces (see the file
/// comment). The Jitted object refers to them: they must outlive it.
template <class Fn, class... States>
Jitted<std::decay_t<Fn>, States...> jit(Fn&& fn, States&... states) {
  return Jitted<std::decay_t<Fn>, States...>(std::forward<Fn>(fn), states...);
}

}  // namespace kiln
