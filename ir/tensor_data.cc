#include "ir/tensor_data.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <new>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/host_memory.h"

namespace kiln::ir {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

std::vector<int64_t> RowMajorStrides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * shape[i + 1];
  }
  return strides;
}

namespace {

// Large blocks are kept for reuse when freed. A fresh multi-megabyte allocation is a new mmap
// whose pages fault in one at a time on first touch, which costs more than the kernel that fills
// it; a training loop or a benchmark realizes tensors of the same sizes over and over, so reusing
// their blocks keeps the pages mapped (PyTorch's caching allocators do the same on GPUs).
class LargeBlockCache {
 public:
  static constexpr size_t kMinBlock = size_t{1} << 20;     // smaller blocks go to malloc
  static constexpr size_t kMaxCached = size_t{512} << 20;  // bytes kept at most

  static LargeBlockCache& Get() {
    static LargeBlockCache* cache = new LargeBlockCache();  // never destroyed: used at exit
    return *cache;
  }

  std::byte* Take(size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(size);
    if (it == blocks_.end()) return nullptr;
    std::byte* block = it->second;
    blocks_.erase(it);
    cached_bytes_ -= size;
    return block;
  }

  // Keeps `block` if there is room (evicting nothing: the oldest sizes stay useful), else false.
  bool Give(std::byte* block, size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cached_bytes_ + size > kMaxCached) return false;
    blocks_.emplace(size, block);
    cached_bytes_ += size;
    return true;
  }

 private:
  std::mutex mutex_;
  std::multimap<size_t, std::byte*> blocks_;
  size_t cached_bytes_ = 0;
};

// Large blocks are rounded up to whole megabytes so similar sizes share blocks.
size_t BlockSize(size_t size) {
  if (size < LargeBlockCache::kMinBlock) return size == 0 ? 1 : size;
  return (size + LargeBlockCache::kMinBlock - 1) & ~(LargeBlockCache::kMinBlock - 1);
}

std::byte* AllocateBlock(size_t size) {
  const size_t block_size = BlockSize(size);
  if (block_size >= LargeBlockCache::kMinBlock) {
    if (std::byte* block = LargeBlockCache::Get().Take(block_size)) return block;
  }
  std::byte* block = base::AllocateHostBlock(block_size, AlignedBytes::kAlignment);
  if (block == nullptr) throw std::bad_alloc();
  return block;
}

}  // namespace

AlignedBytes::AlignedBytes(size_t size, bool zero_fill)
    : data_(AllocateBlock(size), Free{size}), size_(size) {
  if (zero_fill && size > 0) std::memset(data_.get(), 0, size);
}

AlignedBytes::AlignedBytes(const AlignedBytes& other) : AlignedBytes(other.size_, false) {
  if (size_ > 0) std::memcpy(data_.get(), other.data_.get(), size_);
}

AlignedBytes& AlignedBytes::operator=(const AlignedBytes& other) {
  if (this != &other) *this = AlignedBytes(other);
  return *this;
}

bool AlignedBytes::operator==(const AlignedBytes& other) const {
  return size_ == other.size_ && (size_ == 0 || std::memcmp(data(), other.data(), size_) == 0);
}

void AlignedBytes::Free::operator()(std::byte* p) const {
  const size_t block_size = BlockSize(size);
  if (block_size >= LargeBlockCache::kMinBlock && LargeBlockCache::Get().Give(p, block_size)) {
    return;
  }
  base::FreeHostBlock(p, block_size, kAlignment);
}

TensorData::TensorData(DType dtype, Shape shape) : TensorData(dtype, std::move(shape), true) {}

TensorData::TensorData(DType dtype, Shape shape, bool zero_fill)
    : dtype_(dtype),
      shape_(std::move(shape)),
      num_elements_(NumElements(shape_)),
      bytes_(static_cast<size_t>(num_elements_ * DTypeSize(dtype)), zero_fill) {}

TensorData TensorData::Uninitialized(DType dtype, Shape shape) {
  return TensorData(dtype, std::move(shape), false);
}

absl::StatusOr<TensorData> TensorData::FromDoubles(DType dtype, Shape shape,
                                                   std::span<const double> values) {
  TensorData data(dtype, std::move(shape));
  if (static_cast<int64_t>(values.size()) != data.num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor data: ", values.size(), " values given for shape ", ShapeToString(data.shape())));
  }
  for (size_t i = 0; i < values.size(); ++i) data.SetDouble(static_cast<int64_t>(i), values[i]);
  return data;
}

namespace {

template <class T>
T Load(const std::byte* base, int64_t index) {
  T value;
  std::memcpy(&value, base + index * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return value;
}

template <class T>
void Store(std::byte* base, int64_t index, T value) {
  std::memcpy(base + index * static_cast<int64_t>(sizeof(T)), &value, sizeof(T));
}

// Calls f(T{}) with the C++ type T of integer dtype `dtype` (which must be an integer dtype).
template <class F>
decltype(auto) WithIntegerType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kI8:
      return f(int8_t{});
    case DType::kI16:
      return f(int16_t{});
    case DType::kI32:
      return f(int32_t{});
    case DType::kU8:
      return f(uint8_t{});
    case DType::kU16:
      return f(uint16_t{});
    case DType::kU32:
      return f(uint32_t{});
    case DType::kU64:
      return f(uint64_t{});
    default:
      return f(int64_t{});
  }
}

// `value` clamped to the range of integer type T.
template <class T>
T Saturate(int64_t value) {
  constexpr int64_t lo = std::numeric_limits<T>::min();
  constexpr int64_t hi = static_cast<int64_t>(std::numeric_limits<T>::max());
  return static_cast<T>(value < lo ? lo : (value > hi ? hi : value));
}

}  // namespace

int64_t SaturatingCastToInt(double value, DType dtype) {
  if (dtype == DType::kBool) return value != 0 ? 1 : 0;  // NaN != 0, so NaN is true.
  if (std::isnan(value)) return 0;
  double lo = 0, hi = 0;
  switch (dtype) {
    case DType::kI8:
      lo = std::numeric_limits<int8_t>::min();
      hi = std::numeric_limits<int8_t>::max();
      break;
    case DType::kI16:
      lo = std::numeric_limits<int16_t>::min();
      hi = std::numeric_limits<int16_t>::max();
      break;
    case DType::kI32:
      lo = std::numeric_limits<int32_t>::min();
      hi = std::numeric_limits<int32_t>::max();
      break;
    case DType::kU8:
      hi = std::numeric_limits<uint8_t>::max();
      break;
    case DType::kU16:
      hi = std::numeric_limits<uint16_t>::max();
      break;
    case DType::kU32:
      hi = std::numeric_limits<uint32_t>::max();
      break;
    case DType::kU64:
      // The bit pattern of the uint64 value: 2^64 - 1 is -1.
      if (value <= 0) return 0;
      if (value >= 18446744073709551616.0) return -1;
      return static_cast<int64_t>(static_cast<uint64_t>(value));
    default:
      // 2^63 is exactly representable; anything at or above it saturates.
      if (value >= 9223372036854775808.0) return std::numeric_limits<int64_t>::max();
      if (value < -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
      return static_cast<int64_t>(value);
  }
  const double t = std::trunc(value);
  return static_cast<int64_t>(t < lo ? lo : (t > hi ? hi : t));
}

double TensorData::GetDouble(int64_t index) const {
  const std::byte* p = bytes_.data();
  switch (dtype_) {
    case DType::kF32:
      return Load<float>(p, index);
    case DType::kF64:
      return Load<double>(p, index);
    case DType::kF16:
      return HalfToFloat(Load<uint16_t>(p, index));
    case DType::kBF16:
      return BFloat16ToFloat(Load<uint16_t>(p, index));
    case DType::kBool:
      return Load<uint8_t>(p, index) != 0 ? 1.0 : 0.0;
    default:
      return WithIntegerType(
          dtype_, [&](auto t) { return static_cast<double>(Load<decltype(t)>(p, index)); });
  }
}

int64_t TensorData::GetInt64(int64_t index) const {
  const std::byte* p = bytes_.data();
  if (IsBool(dtype_)) return Load<uint8_t>(p, index) != 0 ? 1 : 0;
  if (!IsInteger(dtype_)) return SaturatingCastToInt(GetDouble(index), DType::kI64);
  // u64 comes back as its bit pattern.
  return WithIntegerType(dtype_,
                         [&](auto t) { return static_cast<int64_t>(Load<decltype(t)>(p, index)); });
}

void TensorData::SetDouble(int64_t index, double value) {
  std::byte* p = bytes_.data();
  switch (dtype_) {
    case DType::kF32:
      Store<float>(p, index, static_cast<float>(value));
      return;
    case DType::kF64:
      Store<double>(p, index, value);
      return;
    case DType::kF16:
      Store<uint16_t>(p, index, DoubleToHalf(value));
      return;
    case DType::kBF16:
      Store<uint16_t>(p, index, DoubleToBFloat16(value));
      return;
    default:  // integers and bool (a u64's saturated value as its bit pattern)
      SetInt64(index, SaturatingCastToInt(value, dtype_));
      return;
  }
}

void TensorData::SetInt64(int64_t index, int64_t value) {
  std::byte* p = bytes_.data();
  if (IsBool(dtype_)) {
    Store<uint8_t>(p, index, value != 0 ? 1 : 0);
  } else if (dtype_ == DType::kU64) {
    // An int64 is the bit pattern of a u64 element here (GetInt64's inverse): no clamping.
    Store<uint64_t>(p, index, static_cast<uint64_t>(value));
  } else if (IsInteger(dtype_)) {
    WithIntegerType(dtype_, [&](auto t) {
      using T = decltype(t);
      Store<T>(p, index, Saturate<T>(value));
    });
  } else {
    SetDouble(index, static_cast<double>(value));
  }
}

std::vector<double> TensorData::ToDoubles() const {
  std::vector<double> out(static_cast<size_t>(num_elements_));
  for (int64_t i = 0; i < num_elements_; ++i) out[i] = GetDouble(i);
  return out;
}

std::vector<int64_t> TensorData::ToInt64s() const {
  std::vector<int64_t> out(static_cast<size_t>(num_elements_));
  for (int64_t i = 0; i < num_elements_; ++i) out[i] = GetInt64(i);
  return out;
}

bool TensorData::operator==(const TensorData& other) const {
  return dtype_ == other.dtype_ && shape_ == other.shape_ && bytes_ == other.bytes_;
}

}  // namespace kiln::ir
