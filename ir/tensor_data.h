// TensorData: a dense, row-major tensor value in host memory. Constants in the IR, the inputs and
// outputs of the reference interpreter and the result of realizing a frontend tensor all use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/dtype.h"

namespace kiln::ir {

/// A shape is a list of non-negative dimension sizes; rank 0 is a scalar.
using Shape = std::vector<int64_t>;

/// Number of elements of a shape (1 for a scalar).
int64_t NumElements(const Shape& shape);
/// "[2,3]" — the form used in the text IR and in error messages.
std::string ShapeToString(const Shape& shape);
/// Row-major strides in elements.
std::vector<int64_t> RowMajorStrides(const Shape& shape);

/// Byte storage aligned to kAlignment (64) bytes, with value semantics (copies are deep). Kernels
/// read tensors in place only when they are aligned, so every TensorData is.
class AlignedBytes {
 public:
  static constexpr size_t kAlignment = 64;

  AlignedBytes() = default;
  /// `size` bytes, zero-filled unless `zero_fill` is false (then the contents are unspecified:
  /// for outputs a kernel overwrites completely).
  explicit AlignedBytes(size_t size, bool zero_fill = true);
  AlignedBytes(const AlignedBytes& other);
  AlignedBytes& operator=(const AlignedBytes& other);
  AlignedBytes(AlignedBytes&& other) noexcept = default;
  AlignedBytes& operator=(AlignedBytes&& other) noexcept = default;

  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  size_t size() const { return size_; }
  bool operator==(const AlignedBytes& other) const;

 private:
  struct Free {
    size_t size = 0;  // the requested size: large blocks go back to a reuse cache
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte[], Free> data_;
  size_t size_ = 0;
};

/// A dense row-major tensor value. Elements of f16/bf16 are stored as their 16-bit patterns,
/// bool as one byte holding 0 or 1.
class TensorData {
 public:
  TensorData() = default;
  /// A zero-filled tensor.
  TensorData(DType dtype, Shape shape);
  /// A tensor whose contents are unspecified, for a backend to overwrite completely (skips
  /// zero-filling large outputs).
  static TensorData Uninitialized(DType dtype, Shape shape);

  /// Copies `values` (converted to `dtype`) into a new tensor; values.size() must equal the
  /// number of elements of `shape`.
  static absl::StatusOr<TensorData> FromDoubles(DType dtype, Shape shape,
                                                std::span<const double> values);
  template <class T>
  static TensorData FromVector(DType dtype, Shape shape, const std::vector<T>& values) {
    TensorData data(dtype, std::move(shape));
    for (size_t i = 0; i < values.size() && static_cast<int64_t>(i) < data.num_elements(); ++i) {
      data.SetDouble(static_cast<int64_t>(i), static_cast<double>(values[i]));
    }
    return data;
  }

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t num_elements() const { return num_elements_; }
  int64_t size_bytes() const { return static_cast<int64_t>(bytes_.size()); }

  std::byte* data() { return bytes_.data(); }
  const std::byte* data() const { return bytes_.data(); }

  /// Element `index` (row-major) converted to double. Exact for every dtype except i64 values
  /// beyond 2^53; use GetInt64 for those.
  double GetDouble(int64_t index) const;
  /// Element `index` converted to int64 (floats truncate toward zero). A u64 element comes back
  /// as its bit pattern (values from 2^63 up are negative), so integer code can carry every
  /// element in an int64; SetInt64 on a u64 tensor takes that pattern back.
  int64_t GetInt64(int64_t index) const;
  /// Stores `value` at `index`, rounding or converting it to the tensor's dtype with the same
  /// rules as the IR's cast op.
  void SetDouble(int64_t index, double value);
  /// Stores an integer, saturating at the dtype's limits (u64: the bit pattern, see GetInt64).
  void SetInt64(int64_t index, int64_t value);

  /// All elements as doubles / int64, row-major.
  std::vector<double> ToDoubles() const;
  std::vector<int64_t> ToInt64s() const;

  /// Same dtype, shape and bytes.
  bool operator==(const TensorData& other) const;

 private:
  DType dtype_ = DType::kF32;
  Shape shape_;
  int64_t num_elements_ = 1;
  TensorData(DType dtype, Shape shape, bool zero_fill);

  AlignedBytes bytes_ = AlignedBytes(4);
};

/// The IR's cast of a double to an integer or bool dtype: to bool is `value != 0` (NaN is true);
/// to an integer, NaN gives 0 and values truncate toward zero and saturate at the dtype's limits.
int64_t SaturatingCastToInt(double value, DType dtype);

}  // namespace kiln::ir
