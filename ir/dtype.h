// Element types of kiln tensors: the IR's names for base/dtype.h (the leaf library the runtime
// shares), so ir::DType, ir::DTypeName, ir::IsFloat, ... are the same entities as base::'s.
#pragma once

#include "base/dtype.h"

namespace kiln::ir {

using base::BFloat16ToFloat;
using base::DoubleToBFloat16;
using base::DoubleToHalf;
using base::DType;
using base::DTypeName;
using base::DTypeSize;
using base::FloatToBFloat16;
using base::FloatToHalf;
using base::HalfToFloat;
using base::IsBool;
using base::IsFloat;
using base::IsInteger;
using base::IsSignedInteger;
using base::IsUnsignedInteger;
using base::kAllDTypes;
using base::ParseDType;
using base::RoundToDType;

}  // namespace kiln::ir
