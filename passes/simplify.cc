#include "passes/simplify.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kiln::passes {

void AddSimplifyPasses(PassManager& pm) {
  // CSE first, so folding and the identities see one node per value; folding before the
  // identities, so "a 1" computed from constants is a fill by the time x * 1 is matched; DCE
  // last, to drop what the others replaced.
  std::vector<std::unique_ptr<Pass>> group;
  group.push_back(std::make_unique<CommonSubexpressionElimination>());
  group.push_back(std::make_unique<ConstantFolding>());
  group.push_back(std::make_unique<AlgebraicSimplification>());
  group.push_back(std::make_unique<MovementFolding>());
  group.push_back(std::make_unique<DeadCodeElimination>());
  pm.AddFixedPoint(std::move(group), kSimplifyMaxRounds);
}

absl::StatusOr<std::unique_ptr<Pass>> MakeSimplifyPass(std::string_view name) {
  if (name == "cse") return std::make_unique<CommonSubexpressionElimination>();
  if (name == "dce") return std::make_unique<DeadCodeElimination>();
  if (name == "constant_fold") return std::make_unique<ConstantFolding>();
  if (name == "algebraic") return std::make_unique<AlgebraicSimplification>();
  if (name == "movement_fold") return std::make_unique<MovementFolding>();
  return absl::NotFoundError(
      absl::StrCat("no simplify pass \"", std::string(name),
                   "\" (cse, dce, constant_fold, algebraic, movement_fold)"));
}

}  // namespace kiln::passes
