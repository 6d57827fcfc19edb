// The suite's shared helpers (tests/conformance/backend_under_test.h): tolerance widening by a
// backend's math bounds, unsupported-node lookup, and running a graph on the backend under test.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "tests/conformance/backend_under_test.h"

namespace kiln::conformance {

test::Tolerance Tolerance(const MathBounds& math, test::Tolerance base, const ir::Graph& graph) {
  UlpBound f32, f64;
  bool has_exp = false, has_reciprocal = false, reordered = false;
  const auto widen = [](UlpBound& into, const std::map<ir::Op, UlpBound>& table, ir::Op op) {
    if (auto it = table.find(op); it != table.end()) {
      into.ulps = std::max(into.ulps, it->second.ulps);
      into.atol = std::max(into.atol, it->second.atol);
    }
  };
  for (const ir::Node& node : graph.nodes()) {
    const bool is_f64 = node.type.dtype == ir::DType::kF64;
    if (is_f64 || math.computed_in_f64.contains(node.op)) {
      reordered |= is_f64 && math.f64_reordered.contains(node.op);
      widen(f64, math.f64, node.op);
      if (is_f64) continue;
    }
    widen(f32, math.f32, node.op);
    has_exp |= node.op == ir::Op::kExp;
    has_reciprocal |= node.op == ir::Op::kReciprocal;
  }
  if (has_exp && has_reciprocal) f32.ulps = std::max(f32.ulps, math.f32_sigmoid_ulps);
  test::Tolerance tolerance = base;
  if (reordered) {
    tolerance.rtol = std::max(tolerance.rtol, 1e-12);
    tolerance.atol = std::max(tolerance.atol, 1e-12);
  }
  if (f64.ulps > 0 || f64.atol > 0) {
    tolerance.rtol = std::max(tolerance.rtol, f64.ulps * std::ldexp(1.0, -52));
    tolerance.atol = std::max(tolerance.atol, f64.atol);
  }
  if (f32.ulps > 0 || f32.atol > 0) {
    // One f32 ulp is at most 2^-23 of the value, and 2^-149 absolute for subnormal results.
    tolerance.rtol = std::max(tolerance.rtol, f32.ulps * std::ldexp(1.0, -23));
    tolerance.atol = std::max(tolerance.atol, std::max(f32.atol, f32.ulps * std::ldexp(1.0, -149)));
  }
  return tolerance;
}

const ir::Node* FindUnsupported(const BackendUnderTest& backend, const ir::Graph& graph) {
  for (const ir::Node& node : graph.nodes()) {
    for (const Unsupported& u : backend.unsupported) {
      if (node.op == u.op && node.type.dtype == u.dtype) return &node;
    }
  }
  return nullptr;
}

absl::StatusOr<std::vector<ir::TensorData>> RunOnBackend(
    const ir::Graph& graph, const std::vector<ir::TensorData>& arguments) {
  std::vector<std::shared_ptr<const ir::TensorData>> shared;
  shared.reserve(arguments.size());
  for (const ir::TensorData& arg : arguments) {
    shared.push_back(std::make_shared<const ir::TensorData>(arg));
  }
  return Backend().run(graph, shared);
}

}  // namespace kiln::conformance
