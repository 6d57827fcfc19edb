#include "passes/patterns.h"

#include <cstring>

namespace kiln::passes {

bool IsKnownLeaf(ir::Op op) {
  return op == ir::Op::kConstant || op == ir::Op::kFill || op == ir::Op::kIota;
}

std::optional<ir::TensorData> UniformElement(const ir::Node& node) {
  if (node.op == ir::Op::kFill) {
    ir::TensorData element(node.type.dtype, {});
    element.SetDouble(0, node.attrs.value);
    return element;
  }
  if (node.op != ir::Op::kConstant || !node.attrs.literal) return std::nullopt;
  return UniformElementOf(*node.attrs.literal);
}

std::optional<ir::TensorData> UniformElementOf(const ir::TensorData& literal) {
  const int64_t count = literal.num_elements();
  if (count == 0) return std::nullopt;
  const size_t size = static_cast<size_t>(ir::DTypeSize(literal.dtype()));
  const std::byte* first = literal.data();
  for (int64_t i = 1; i < count; ++i) {
    if (std::memcmp(first, first + static_cast<size_t>(i) * size, size) != 0) return std::nullopt;
  }
  ir::TensorData element(literal.dtype(), {});
  std::memcpy(element.data(), first, size);
  return element;
}

bool IsUniform(const ir::Node& node, double value) {
  const std::optional<ir::TensorData> element = UniformElement(node);
  if (!element) return false;
  ir::TensorData expected(element->dtype(), {});
  expected.SetDouble(0, value);
  return *element == expected;
}

std::optional<double> FillValueFor(const ir::TensorData& element) {
  const double value = element.GetDouble(0);
  ir::TensorData again(element.dtype(), {});
  again.SetDouble(0, value);
  if (again == element) return value;
  return std::nullopt;
}

std::optional<double> AsFillValue(const ir::Node& node) {
  if (node.op == ir::Op::kFill) return node.attrs.value;
  if (node.op == ir::Op::kConstant && node.attrs.literal &&
      node.attrs.literal->num_elements() == 0) {
    return 0.0;
  }
  const std::optional<ir::TensorData> element = UniformElement(node);
  if (!element) return std::nullopt;
  return FillValueFor(*element);
}

bool MovesOnlyUnitAxes(const std::vector<int64_t>& axes, const ir::Shape& shape) {
  int64_t previous = -1;
  for (int64_t axis : axes) {
    if (shape[static_cast<size_t>(axis)] <= 1) continue;
    if (axis < previous) return false;
    previous = axis;
  }
  return true;
}

}  // namespace kiln::passes
