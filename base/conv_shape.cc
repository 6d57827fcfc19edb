#include "base/conv_shape.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::base {
namespace {

int64_t At(std::span<const int64_t> v, size_t i, int64_t fallback) {
  return v.empty() ? fallback : v[i];
}

template <class... Args>
absl::Status Fail(const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat(args...));
}

}  // namespace

int64_t WindowOutputSize(int64_t in, int64_t window, int64_t stride, int64_t low, int64_t high,
                         int64_t dilation, int64_t input_dilation) {
  const int64_t dilated_in = in == 0 ? 0 : (in - 1) * input_dilation + 1;
  const int64_t dilated_window = (window - 1) * dilation + 1;
  const int64_t span = dilated_in + low + high - dilated_window;
  if (span < 0 || stride <= 0) return -1;
  return span / stride + 1;
}

absl::StatusOr<std::vector<int64_t>> ConvOutputShape(std::span<const int64_t> input,
                                                     std::span<const int64_t> weight,
                                                     const ConvGeometry& geometry) {
  if (input.size() < 3 || input.size() != weight.size()) {
    return Fail("needs input [N,C,...] and weight [O,C/groups,...] of equal rank >= 3");
  }
  const size_t spatial = input.size() - 2;
  for (auto [name, v] : {std::pair{"strides", geometry.strides},
                         {"low", geometry.low},
                         {"high", geometry.high},
                         {"dilation", geometry.dilation},
                         {"input_dilation", geometry.input_dilation}}) {
    if (!v.empty() && v.size() != spatial) {
      return Fail(name, " [", absl::StrJoin(v, ","), "] needs ", spatial, " entries");
    }
  }
  const int64_t groups = geometry.groups;
  if (groups < 1 || input[1] % groups != 0 || weight[0] % groups != 0) {
    return Fail("groups ", groups, " must divide input channels ", input[1],
                " and output channels ", weight[0]);
  }
  if (weight[1] * groups != input[1]) {
    return Fail("weight has ", weight[1], " input channels per group, input has ", input[1],
                " channels in ", groups, " groups");
  }
  std::vector<int64_t> shape = {input[0], weight[0]};
  for (size_t i = 0; i < spatial; ++i) {
    const int64_t stride = At(geometry.strides, i, 1), dil = At(geometry.dilation, i, 1),
                  in_dil = At(geometry.input_dilation, i, 1);
    if (stride < 1 || dil < 1 || in_dil < 1) return Fail("strides and dilations must be >= 1");
    const int64_t lo = At(geometry.low, i, 0), hi = At(geometry.high, i, 0);
    const int64_t out = WindowOutputSize(input[i + 2], weight[i + 2], stride, lo, hi, dil, in_dil);
    if (out < 0) {
      return Fail("kernel of size ", weight[i + 2], " does not fit spatial axis ", i, " of size ",
                  input[i + 2]);
    }
    shape.push_back(out);
  }
  return shape;
}

}  // namespace kiln::base
