// Tracing: a C++ function or module over tensors becomes an ir::Graph with named inputs, named
// outputs and named weights, ready for ahead-of-time compilation (codegen/aot/aot.h).
//
//   Mlp<kiln::Cpu> model = ...;
//   kiln::TracedGraph t = kiln::trace(model, example_x);         // calls model.forward(x)
//   aot::CompileOptions options;
//   options.weights = t.weights;                                 // "fc1.weight", ...
//   aot::CompileToFile(t.graph, options, "mlp.kiln");
//
// The function runs once on placeholders of the example inputs' types (their values are never
// read) and records its ops lazily, as always; the DAG behind the results becomes the graph.
// Realized tensors it captures (a module's parameters, constants made outside) become weight
// parameters: named by the module's parameter names ("fc1.weight") when tracing a module, and
// "weight<i>" otherwise. Graph parameters are the inputs ("input0", ... or TraceNames) first,
// then the weights, in that order.
//
// The function must not realize a value that depends on an input (item(), printing, a data-
// dependent branch): a placeholder has no value, and that throws kiln::Error at the call. Very
// long chains (over 256 pending ops) auto-realize and fail the same way.
#pragma once

#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "frontend/engine.h"
#include "frontend/tensor.h"
#include "ir/graph.h"
#include "ir/tensor_data.h"

namespace kiln {

struct TracedGraph {
  ir::Graph graph;
  /// The weight parameters' names and values (aot::CompileOptions::weights takes them as is).
  std::vector<std::pair<std::string, std::shared_ptr<const ir::TensorData>>> weights;
};

/// Names for the traced graph's inputs and outputs (empty: "input<i>" / "output<i>").
struct TraceNames {
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
};

namespace detail {

/// A placeholder of `like`'s type and device: a pending parameter node with no value.
TensorRef Placeholder(const TensorRef& like, const Loc& loc);

/// The graph behind `outputs`, with `placeholders` as its first parameters; realized tensors in
/// `named` (a module's parameters) are weights under those names. Throws kiln::Error.
TracedGraph BuildTrace(std::span<const TensorRef> placeholders, std::span<const TensorRef> outputs,
                       std::span<const std::pair<std::string, TensorRef>> named,
                       const TraceNames& names, const Loc& loc);

template <class T>
void CollectOutputs(const T& result, std::vector<TensorRef>& out) {
  if constexpr (requires { result.ref(); }) {
    out.push_back(result.ref());
  } else {
    std::apply([&](const auto&... parts) { (CollectOutputs(parts, out), ...); }, result);
  }
}

template <class Fn, class... Ts>
TracedGraph TraceImpl(const TraceNames& names, std::vector<std::pair<std::string, TensorRef>> named,
                      const Loc& loc, Fn&& fn, const Ts&... examples) {
  std::vector<TensorRef> placeholders = {Placeholder(examples.ref(), loc)...};
  size_t i = 0;
  auto result = std::apply([&](const auto&... ph) { return fn(Ts(ph)...); },
                           std::tuple{(static_cast<void>(examples), placeholders[i++])...});
  std::vector<TensorRef> outputs;
  CollectOutputs(result, outputs);
  return BuildTrace(placeholders, outputs, named, names, loc);
}

}  // namespace detail

/// Traces `fn(examples...)`, which returns a tensor or a std::tuple of tensors.
template <class Fn, class... Ts>
requires(!requires(Fn f) { f.named_parameters(); }) TracedGraph
    trace(Fn&& fn, const Ts&... examples) {
  return detail::TraceImpl({}, {}, std::source_location::current(), std::forward<Fn>(fn),
                           examples...);
}

/// Traces `model.forward(examples...)`; the module's parameters and buffers become weights
/// under their dotted names.
template <class Module, class... Ts>
requires requires(Module m) { m.named_parameters(); }
TracedGraph trace(const Module& model, const Ts&... examples) {
  return trace_named(TraceNames{}, model, examples...);
}

/// trace with input and output names.
template <class Module, class... Ts>
requires requires(Module m) { m.named_parameters(); }
TracedGraph trace_named(const TraceNames& names, const Module& model, const Ts&... examples) {
  std::vector<std::pair<std::string, detail::TensorRef>> named;
  model.visit([&](const std::string& name, const auto& t) { named.emplace_back(name, t.ref()); });
  model.visit_buffers(
      [&](const std::string& name, const auto& t) { named.emplace_back(name, t.ref()); });
  return detail::TraceImpl(
      names, std::move(named), std::source_location::current(),
      [&model](const auto&... xs) { return model.forward(xs...); }, examples...);
}

template <class Fn, class... Ts>
requires(!requires(Fn f) { f.named_parameters(); }) TracedGraph
    trace_named(const TraceNames& names, Fn&& fn, const Ts&... examples) {
  return detail::TraceImpl(names, {}, std::source_location::current(), std::forward<Fn>(fn),
                           examples...);
}

}  // namespace kiln
