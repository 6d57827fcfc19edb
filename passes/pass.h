// The interface every graph-to-graph pass implements. PassManager (pass_manager.h) runs passes in
// order, verifying, dumping and timing each one.
#pragma once

#include "absl/status/statusor.h"
#include "ir/graph.h"

namespace kiln::passes {

/// One transformation of an ir::Graph. A pass does one thing (DCE, CSE, ...), takes the graph by
/// value and returns the rewritten graph, which must compute the same outputs from the same
/// parameters (in the same order: they are the calling convention). It must return a graph that
/// passes ir::Verify; the PassManager checks that and names the pass that broke it.
class Pass {
 public:
  virtual ~Pass() = default;
  /// Short lower_snake_case name, used in dump file names, timing lines and errors.
  virtual const char* name() const = 0;
  virtual absl::StatusOr<ir::Graph> Run(ir::Graph graph) = 0;
};

}  // namespace kiln::passes
