#include "frontend/error.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/builder.h"

namespace kiln::detail {

void ThrowStatus(const absl::Status& status, const std::source_location& loc) {
  throw Error(std::string(ir::AnnotateWithLocation(status, loc).message()));
}

namespace {

template <class Types>
[[noreturn]] void ThrowWithOperands(const char* op, const std::string& message,
                                    const Types& operands, const std::source_location& loc) {
  std::string text = absl::StrCat(op, ": ", message);
  if (operands.size() > 0) {
    absl::StrAppend(&text, "; operands ",
                    absl::StrJoin(operands, ", ", [](std::string* out, const ir::TensorType& t) {
                      out->append(ir::TypeToString(t));
                    }));
  }
  ThrowStatus(absl::InvalidArgumentError(text), loc);
}

}  // namespace

void ThrowOpError(const char* op, const std::string& message,
                  std::initializer_list<ir::TensorType> operands, const std::source_location& loc) {
  ThrowWithOperands(op, message, operands, loc);
}

void ThrowOpErrorByRef(const char* op, const std::string& message, OperandTypes operands,
                       const std::source_location& loc) {
  ThrowWithOperands(op, message, operands, loc);
}

}  // namespace kiln::detail
