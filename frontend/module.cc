#include "frontend/module.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "frontend/autograd.h"

namespace kiln::detail {

std::vector<std::string> SplitFieldNames(const char* names) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(names, ',')) {
    out.emplace_back(absl::StripAsciiWhitespace(part));
  }
  return out;
}

TensorRef CloneTensor(const TensorRef& x, const Loc& loc) {
  // A new node sharing the (immutable) value: the clone's parameters are independent leaves,
  // and an update rebinds a field to a new node, so the copies never affect each other.
  Realize(std::span<const TensorRef>(&x, 1), loc);
  TensorRef copy = ShareValue(x);
  if (RequiresGrad(x)) SetRequireGrad(copy, true, loc);
  return copy;
}

TensorRef SetParameterRequiresGrad(const TensorRef& x, bool require, const Loc& loc) {
  return SetRequireGrad(x, require, loc);
}

}  // namespace kiln::detail
