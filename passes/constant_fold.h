// Constant folding.
#pragma once

#include <cstdint>

#include "passes/pass.h"

namespace kiln::passes {

/// Evaluates nodes whose operands are all known leaves (constant, fill, iota) with the reference
/// interpreter (ir::Interpret), so the folded value is exactly what the node computes:
///  - an elementwise op whose operands are all fills becomes a fill of the result type, whatever
///    its size (the op is evaluated once, on scalars);
///  - any other such node becomes a constant when its result has at most `max_elements` elements
///    and evaluating it is cheap (operand elements plus the op's work, within `max_work`); a
///    uniform result becomes a fill instead;
///  - a constant leaf whose elements are all equal becomes a fill (the canonical form the other
///    rules match); a fill stays a fill, iota stays iota.
/// random_* values and nodes that read them are never folded, nor are results above the limits,
/// nor nodes the interpreter rejects (an out-of-range gather stays, to fail at run time).
class ConstantFolding : public Pass {
 public:
  static constexpr int64_t kDefaultMaxElements = 4096;
  static constexpr int64_t kDefaultMaxWork = int64_t{1} << 18;

  ConstantFolding() = default;
  ConstantFolding(int64_t max_elements, int64_t max_work)
      : max_elements_(max_elements), max_work_(max_work) {}

  const char* name() const override { return "constant_fold"; }
  absl::StatusOr<ir::Graph> Run(ir::Graph graph) override;

 private:
  int64_t max_elements_ = kDefaultMaxElements;
  int64_t max_work_ = kDefaultMaxWork;
};

}  // namespace kiln::passes
