// Harness of docs/onnx.md's export fragment: `graph` (x [1, 4] times the parameter fc1.weight
// [4, 2]) and `w`, fc1.weight's value; both results must be OK.
#include <iostream>

#include "frontend/onnx/export.h"
#include "ir/parser.h"

int doc_run() {
  using namespace kiln;
  absl::StatusOr<ir::Graph> parsed = ir::ParseGraph(R"(graph {
    %0 = parameter() {name="x"} : f32[1,4]
    %1 = parameter() {name="fc1.weight"} : f32[4,2]
    %2 = matmul(%0, %1) : f32[1,2]
    return %2 as "y"
  })");
  if (!parsed.ok()) {
    std::cerr << parsed.status() << "\n";
    return 1;
  }
  const ir::Graph graph = *std::move(parsed);
  ir::TensorData w(ir::DType::kF32, {4, 2});
  //@fragment
  if (!bytes.ok() || !ok.ok()) {
    std::cerr << (bytes.ok() ? ok : bytes.status()) << "\n";
    return 1;
  }
  return 0;
}
