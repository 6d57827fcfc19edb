// Harness of docs/passes.md's fragment: a `graph` to simplify (x * 1 + 0, which the algebraic
// pass folds to x) and `using namespace kiln` (the fragment names passes:: and ir::); the
// simplified graph must be smaller.
#include <iostream>

#include "ir/parser.h"

int doc_run() {
  using namespace kiln;
  absl::StatusOr<ir::Graph> parsed = ir::ParseGraph(R"(graph {
    %0 = parameter() {name="x"} : f32[4]
    %1 = fill() {value=1} : f32[4]
    %2 = mul(%0, %1) : f32[4]
    %3 = fill() : f32[4]
    %4 = add(%2, %3) : f32[4]
    return %4
  })");
  if (!parsed.ok()) {
    std::cerr << parsed.status() << "\n";
    return 1;
  }
  ir::Graph graph = *std::move(parsed);
  const int64_t before = graph.num_nodes();
  //@fragment
  if (!simplified.ok()) {
    std::cerr << simplified.status() << "\n";
    return 1;
  }
  return simplified->num_nodes() < before ? 0 : 1;
}
