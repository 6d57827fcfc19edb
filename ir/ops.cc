#include "ir/ops.h"

namespace kiln::ir {

const char* OpName(Op op) {
  switch (op) {
#define KILN_IR_OP_NAME(name, text, cls) \
  case Op::k##name:                      \
    return text;
    KILN_IR_OPS(KILN_IR_OP_NAME)
#undef KILN_IR_OP_NAME
  }
  return "?";
}

std::optional<Op> ParseOpName(std::string_view name) {
  for (Op op : kAllOps) {
    if (OpName(op) == name) return op;
  }
  return std::nullopt;
}

OpClass GetOpClass(Op op) {
  switch (op) {
#define KILN_IR_OP_CLASS(name, text, cls) \
  case Op::k##name:                       \
    return OpClass::cls;
    KILN_IR_OPS(KILN_IR_OP_CLASS)
#undef KILN_IR_OP_CLASS
  }
  return OpClass::kLeaf;
}

bool IsElementwise(Op op) {
  switch (GetOpClass(op)) {
    case OpClass::kUnary:
    case OpClass::kBinary:
    case OpClass::kCompare:
    case OpClass::kLogical:
    case OpClass::kSelect:
    case OpClass::kCast:
      return true;
    default:
      return false;
  }
}

}  // namespace kiln::ir
