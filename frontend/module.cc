#include "frontend/module.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"

namespace kiln::detail {

std::vector<std::string> SplitFieldNames(const char* names) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(names, ',')) {
    out.emplace_back(absl::StripAsciiWhitespace(part));
  }
  return out;
}

}  // namespace kiln::detail
