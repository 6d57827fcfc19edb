// kiln::Error: the one exception type of the public API. Every error a user can cause (a shape
// mismatch, a bad dim, an unknown device) throws it, with a message that starts with the user's
// source line and the op, and lists the operand types:
//   "model.cc:12: add: cannot broadcast [2,3] with [4,3]; operands f32[2,3], f32[4,3]"
// Inside the library, layers return absl::Status; the frontend converts at its boundary.
#pragma once

#include <functional>
#include <initializer_list>
#include <source_location>
#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "ir/graph.h"

namespace kiln {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {

/// Throws kiln::Error with `status`'s message prefixed by the user's line (when known).
[[noreturn]] void ThrowStatus(const absl::Status& status, const std::source_location& loc);

/// Throws kiln::Error "<loc>: <op>: <message>; operands <types>".
[[noreturn]] void ThrowOpError(const char* op, const std::string& message,
                               std::initializer_list<ir::TensorType> operands,
                               const std::source_location& loc);

/// Operand types by reference, for checks on the recording path that only need them to throw
/// (an initializer_list of TensorType would copy every shape on every call).
using OperandTypes = std::initializer_list<std::reference_wrapper<const ir::TensorType>>;
[[noreturn]] void ThrowOpErrorByRef(const char* op, const std::string& message,
                                    OperandTypes operands, const std::source_location& loc);

}  // namespace detail
}  // namespace kiln
