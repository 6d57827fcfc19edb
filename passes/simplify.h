// The simplify pipeline: CSE, constant folding, algebraic identities, movement folding and DCE.
// Each pass is its own class (cse.h, constant_fold.h, algebraic.h, movement_fold.h, dce.h);
// docs/passes.md describes what each one rewrites.
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "passes/algebraic.h"
#include "passes/constant_fold.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/movement_fold.h"
#include "passes/pass_manager.h"

namespace kiln::passes {

/// Rounds of the simplify group before AddSimplifyPasses gives up on a fixed point. Each rule
/// sees the already-rewritten operands, so a round usually finishes a chain and the second round
/// only confirms that nothing changes.
inline constexpr int kSimplifyMaxRounds = 8;

/// Appends the simplify pipeline to `pm`: one fixed-point group of cse, constant_fold,
/// algebraic, movement_fold and dce, repeated until a round changes nothing (at most
/// kSimplifyMaxRounds rounds). Each pass is linear in the graph's size (constant folding also
/// evaluates the small nodes it folds), so the loop is cheap.
void AddSimplifyPasses(PassManager& pm);

/// A simplify pass by its name() ("cse", "dce", "constant_fold", "algebraic", "movement_fold"),
/// for tests and tools; NotFound for another name.
absl::StatusOr<std::unique_ptr<Pass>> MakeSimplifyPass(std::string_view name);

}  // namespace kiln::passes
