#include "frontend/module.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "frontend/error.h"

namespace kiln::detail {

std::vector<std::string> SplitFieldNames(const char* names) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(names, ',')) {
    out.emplace_back(absl::StripAsciiWhitespace(part));
  }
  return out;
}

TensorRef CloneTensor(const TensorRef& x, const Loc& loc) {
  // A new node holding a copy of the value: the clone's parameters are independent leaves.
  TensorRef copy = FromTensorData(Data(x, loc), DeviceOf(x));
  // PENDING(lead, frontend/autograd.h): after `git merge main` also copy the mark:
  //   if (RequiresGrad(x)) SetRequireGrad(copy, true, loc);
  return copy;
}

TensorRef SetParameterRequiresGrad(const TensorRef& x, bool require, const Loc& loc) {
  // PENDING(lead, frontend/autograd.h): after `git merge main` this is
  //   return SetRequireGrad(x, require, loc);
  (void)x;
  (void)require;
  ThrowOpError(require ? "unfreeze" : "freeze",
               "needs kiln's autograd (frontend/autograd.cc), which this build lacks", {}, loc);
}

}  // namespace kiln::detail
