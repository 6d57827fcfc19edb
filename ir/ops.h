// The primitive op set: one table, from which the enum, the text names and the op classes come.
// Composite ops (softmax, layer norm, gelu, ...) are built from these by the frontend, so autodiff,
// fusion and every backend need rules only for what is listed here. docs/ir.md describes each op.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln::ir {

/// How an op relates its inputs to its output; passes dispatch on this rather than on each op.
enum class OpClass {
  kLeaf,         // no tensor inputs: parameter, constant, fill, iota, random
  kUnary,        // elementwise, one input, same type out
  kBinary,       // elementwise arithmetic, two inputs of one type, same type out
  kCompare,      // elementwise, two inputs of one type, bool out
  kLogical,      // elementwise and/or/xor on bool (logical) or integers (bitwise)
  kSelect,       // elementwise select(cond, on_true, on_false)
  kCast,         // elementwise dtype conversion
  kReduce,       // reduction over attrs.axes, reduced axes kept with size 1
  kArgReduce,    // index of the max/min along one axis, i64 out
  kMovement,     // reshape, permute, broadcast, slice, pad, concat, flip: data movement only
  kIndex,        // gather, scatter_add
  kContraction,  // matmul, conv
  kWindow,       // windowed reduction (pooling)
  kSort,         // stable sort along one axis: the sorted values, or the permutation (i64)
};

// X(Enum, "text name", OpClass)
#define KILN_IR_OPS(X)                      \
  X(Parameter, "parameter", kLeaf)          \
  X(Constant, "constant", kLeaf)            \
  X(Fill, "fill", kLeaf)                    \
  X(Iota, "iota", kLeaf)                    \
  X(RandomUniform, "random_uniform", kLeaf) \
  X(RandomNormal, "random_normal", kLeaf)   \
  X(Neg, "neg", kUnary)                     \
  X(Abs, "abs", kUnary)                     \
  X(Sign, "sign", kUnary)                   \
  X(Exp, "exp", kUnary)                     \
  X(Log, "log", kUnary)                     \
  X(Sqrt, "sqrt", kUnary)                   \
  X(Rsqrt, "rsqrt", kUnary)                 \
  X(Sin, "sin", kUnary)                     \
  X(Cos, "cos", kUnary)                     \
  X(Tanh, "tanh", kUnary)                   \
  X(Erf, "erf", kUnary)                     \
  X(Floor, "floor", kUnary)                 \
  X(Ceil, "ceil", kUnary)                   \
  X(Round, "round", kUnary)                 \
  X(Reciprocal, "reciprocal", kUnary)       \
  X(Not, "not", kUnary)                     \
  X(Add, "add", kBinary)                    \
  X(Sub, "sub", kBinary)                    \
  X(Mul, "mul", kBinary)                    \
  X(Div, "div", kBinary)                    \
  X(Pow, "pow", kBinary)                    \
  X(Max, "max", kBinary)                    \
  X(Min, "min", kBinary)                    \
  X(Mod, "mod", kBinary)                    \
  X(Eq, "eq", kCompare)                     \
  X(Ne, "ne", kCompare)                     \
  X(Lt, "lt", kCompare)                     \
  X(Le, "le", kCompare)                     \
  X(Gt, "gt", kCompare)                     \
  X(Ge, "ge", kCompare)                     \
  X(And, "and", kLogical)                   \
  X(Or, "or", kLogical)                     \
  X(Xor, "xor", kLogical)                   \
  X(Select, "select", kSelect)              \
  X(Cast, "cast", kCast)                    \
  X(ReduceSum, "reduce_sum", kReduce)       \
  X(ReduceProd, "reduce_prod", kReduce)     \
  X(ReduceMax, "reduce_max", kReduce)       \
  X(ReduceMin, "reduce_min", kReduce)       \
  X(ArgMax, "argmax", kArgReduce)           \
  X(ArgMin, "argmin", kArgReduce)           \
  X(Reshape, "reshape", kMovement)          \
  X(Permute, "permute", kMovement)          \
  X(Broadcast, "broadcast", kMovement)      \
  X(Slice, "slice", kMovement)              \
  X(Pad, "pad", kMovement)                  \
  X(Concat, "concat", kMovement)            \
  X(Flip, "flip", kMovement)                \
  X(Gather, "gather", kIndex)               \
  X(ScatterAdd, "scatter_add", kIndex)      \
  X(MatMul, "matmul", kContraction)         \
  X(Conv, "conv", kContraction)             \
  X(WindowSum, "window_sum", kWindow)       \
  X(WindowMax, "window_max", kWindow)       \
  X(Sort, "sort", kSort)                    \
  X(Argsort, "argsort", kSort)

enum class Op : uint8_t {
#define KILN_IR_OP_ENUM(name, text, cls) k##name,
  KILN_IR_OPS(KILN_IR_OP_ENUM)
#undef KILN_IR_OP_ENUM
};

inline constexpr Op kAllOps[] = {
#define KILN_IR_OP_LIST(name, text, cls) Op::k##name,
    KILN_IR_OPS(KILN_IR_OP_LIST)
#undef KILN_IR_OP_LIST
};

/// Text name of an op as printed in the IR ("reduce_sum").
const char* OpName(Op op);
/// Inverse of OpName.
std::optional<Op> ParseOpName(std::string_view name);
OpClass GetOpClass(Op op);

/// True for ops whose output element i depends only on input elements i (unary, binary,
/// compare, logical, select, cast): the ops fusion merges freely.
bool IsElementwise(Op op);

}  // namespace kiln::ir
