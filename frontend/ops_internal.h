// Helpers shared by the op implementations (*.cc in frontend/); not part of the public API.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "frontend/engine.h"
#include "frontend/error.h"

namespace kiln::detail {

/// reshape, skipped when the shape is already `shape`.
TensorRef ReshapeTo(const TensorRef& x, ir::Shape shape, const char* name, const Loc& loc);
/// Numpy-style: `x` (rank <= shape's) is reshaped with leading 1s, then broadcast; skipped when
/// nothing changes.
TensorRef BroadcastTo(const TensorRef& x, const ir::Shape& shape, const char* name, const Loc& loc);
/// cast, skipped when the dtype is already `dtype`.
TensorRef CastTo(const TensorRef& x, ir::DType dtype, const char* name, const Loc& loc);
/// fill of `type` on x's device.
TensorRef FillOn(const TensorRef& device_of, const ir::TensorType& type, double value,
                 const char* name, const Loc& loc);
/// A primitive with no attributes beyond `attrs`.
TensorRef Prim(ir::Op op, std::vector<TensorRef> inputs, const char* name, const Loc& loc,
               ir::Attrs attrs = {});
/// reduce_* / argmax over `axes` (sorted), keeping the axes.
TensorRef ReduceKeep(ir::Op op, const TensorRef& x, std::vector<int64_t> axes, const char* name,
                     const Loc& loc);

/// The numpy broadcast of two shapes; throws naming `name` and the operands when they clash.
ir::Shape BroadcastShapes(const ir::Shape& a, const ir::Shape& b, const char* name,
                          OperandTypes operands, const Loc& loc);
/// The wider dtype of one kind (f16/bf16 -> f32 -> f64; integers: the narrowest that holds both,
/// so u8 with i8 is i16); throws across kinds and for u64 with a signed integer.
ir::DType PromoteDTypes(ir::DType a, ir::DType b, const char* name, OperandTypes operands,
                        const Loc& loc);

/// Normalizes a list of dims; throws on a repeat.
std::vector<int64_t> NormalizeDims(const std::vector<int64_t>& dims, int64_t rank, const char* name,
                                   const ir::TensorType& type, const Loc& loc);

std::string DimsToString(const std::vector<int64_t>& dims);

}  // namespace kiln::detail
