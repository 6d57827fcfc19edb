// operator<< for tensors: torch-like nested brackets with the middle elided for big tensors.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "frontend/tensor_ops.h"

namespace kiln::detail {
namespace {

// Tensors with more elements than this print only kEdgeItems at each end of every dim.
constexpr int64_t kSummarizeThreshold = 1000;
constexpr int64_t kEdgeItems = 3;

class Formatter {
 public:
  explicit Formatter(const ir::TensorData& data)
      : data_(data),
        strides_(ir::RowMajorStrides(data.shape())),
        summarize_(data.num_elements() > kSummarizeThreshold) {
    ChooseFloatStyle();
    int width = 0;
    VisitShown(0, 0, [&](int64_t index) {
      width = std::max(width, static_cast<int>(Element(index).size()));
    });
    width_ = width;
  }

  std::string Format(int indent) const {
    std::string out;
    Write(0, 0, indent, out);
    return out;
  }

 private:
  // Calls `f` with the linear index of every element that is printed.
  void VisitShown(size_t dim, int64_t offset, const std::function<void(int64_t)>& f) const {
    if (dim == data_.shape().size()) {
      f(offset);
      return;
    }
    for (int64_t i : Shown(dim)) {
      if (i >= 0) VisitShown(dim + 1, offset + i * strides_[dim], f);
    }
  }

  // The indices printed along `dim`; -1 marks the elision.
  std::vector<int64_t> Shown(size_t dim) const {
    const int64_t size = data_.shape()[dim];
    std::vector<int64_t> shown;
    if (summarize_ && size > 2 * kEdgeItems) {
      for (int64_t i = 0; i < kEdgeItems; ++i) shown.push_back(i);
      shown.push_back(-1);
      for (int64_t i = size - kEdgeItems; i < size; ++i) shown.push_back(i);
    } else {
      for (int64_t i = 0; i < size; ++i) shown.push_back(i);
    }
    return shown;
  }

  void ChooseFloatStyle() {
    if (!ir::IsFloat(data_.dtype())) return;
    double max_abs = 0, min_abs = INFINITY;
    VisitShown(0, 0, [&](int64_t index) {
      const double v = std::fabs(data_.GetDouble(index));
      if (!std::isfinite(v)) return;
      max_abs = std::max(max_abs, v);
      if (v > 0) min_abs = std::min(min_abs, v);
    });
    scientific_ = max_abs >= 1e8 || (min_abs < 1e-4 && max_abs > 0);
  }

  std::string Element(int64_t index) const {
    const ir::DType dtype = data_.dtype();
    if (ir::IsBool(dtype)) return data_.GetInt64(index) ? "true" : "false";
    if (ir::IsInteger(dtype)) return absl::StrCat(data_.GetInt64(index));
    const double v = data_.GetDouble(index);
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return scientific_ ? absl::StrFormat("%.4e", v) : absl::StrFormat("%.4f", v);
  }

  void Write(size_t dim, int64_t offset, int indent, std::string& out) const {
    const size_t rank = data_.shape().size();
    if (dim == rank) {
      const std::string e = Element(offset);
      out.append(static_cast<size_t>(width_) - std::min(e.size(), static_cast<size_t>(width_)),
                 ' ');
      out += e;
      return;
    }
    out += '[';
    const std::vector<int64_t> shown = Shown(dim);
    for (size_t k = 0; k < shown.size(); ++k) {
      if (k > 0) {
        if (dim + 1 == rank) {
          out += ", ";
        } else {
          // A blank line between blocks of rank >= 3, like torch.
          out += ",\n";
          if (rank - dim > 2) out += '\n';
          out.append(static_cast<size_t>(indent) + dim + 1, ' ');
        }
      }
      if (shown[k] < 0) {
        out += "...";
        continue;
      }
      Write(dim + 1, offset + shown[k] * strides_[dim], indent, out);
    }
    out += ']';
  }

  const ir::TensorData& data_;
  std::vector<int64_t> strides_;
  bool summarize_;
  bool scientific_ = false;
  int width_ = 0;
};

}  // namespace

std::string FormatValues(const ir::TensorData& data, int indent) {
  return Formatter(data).Format(indent);
}

void Print(std::ostream& os, const TensorRef& x) {
  const ir::TensorData& data = Data(x, std::source_location());
  os << "tensor(" << FormatValues(data, 7) << ", shape=[" << absl::StrJoin(data.shape(), ", ")
     << "], dtype=" << ir::DTypeName(data.dtype()) << ", device=" << DeviceOf(x).ToString() << ")";
}

}  // namespace kiln::detail

namespace kiln::ir {

std::ostream& operator<<(std::ostream& os, const TensorData& data) {
  return os << "tensor(" << detail::FormatValues(data, 7) << ", shape=["
            << absl::StrJoin(data.shape(), ", ") << "], dtype=" << DTypeName(data.dtype()) << ")";
}

}  // namespace kiln::ir
