// Dead code elimination.
#pragma once

#include "passes/pass.h"

namespace kiln::passes {

/// Drops every node no output depends on. Parameters stay, used or not: Graph::Parameters() is
/// the positional calling convention of the compiled graph. Random leaves that no output reads
/// go too (their values are a function of their seed only, so nothing else changes).
class DeadCodeElimination : public Pass {
 public:
  const char* name() const override { return "dce"; }
  absl::StatusOr<ir::Graph> Run(ir::Graph graph) override;
};

}  // namespace kiln::passes
