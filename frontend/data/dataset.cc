#include "frontend/data/dataset.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "frontend/error.h"

namespace kiln::data {
namespace {

[[noreturn]] void Fail(const std::string& message, const std::source_location& loc) {
  kiln::detail::ThrowStatus(absl::InvalidArgumentError(absl::StrCat("data: ", message)), loc);
}

std::string TypeString(ir::DType dtype, const ir::Shape& shape) {
  return absl::StrCat(ir::DTypeName(dtype), ir::ShapeToString(shape));
}

template <class T>
float LoadElementAs(const std::byte* row, int64_t i) {
  T v;
  std::memcpy(&v, row + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return static_cast<float>(v);
}

// Element `i` of a row of `dtype` as float (the dtypes a dataset can hold).
inline float LoadAsFloat(const std::byte* row, int64_t i, ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kU8:
      return static_cast<float>(reinterpret_cast<const uint8_t*>(row)[i]);
    case ir::DType::kI32: {
      int32_t v;
      std::memcpy(&v, row + i * 4, 4);
      return static_cast<float>(v);
    }
    case ir::DType::kI64: {
      int64_t v;
      std::memcpy(&v, row + i * 8, 8);
      return static_cast<float>(v);
    }
    case ir::DType::kF32: {
      float v;
      std::memcpy(&v, row + i * 4, 4);
      return v;
    }
    case ir::DType::kF64: {
      double v;
      std::memcpy(&v, row + i * 8, 8);
      return static_cast<float>(v);
    }
    case ir::DType::kF16: {
      uint16_t v;
      std::memcpy(&v, row + i * 2, 2);
      return ir::HalfToFloat(v);
    }
    case ir::DType::kBF16: {
      uint16_t v;
      std::memcpy(&v, row + i * 2, 2);
      return ir::BFloat16ToFloat(v);
    }
    case ir::DType::kBool:
      return static_cast<float>(reinterpret_cast<const uint8_t*>(row)[i]);
    case ir::DType::kI8:
      return static_cast<float>(reinterpret_cast<const int8_t*>(row)[i]);
    case ir::DType::kI16:
      return LoadElementAs<int16_t>(row, i);
    case ir::DType::kU16:
      return LoadElementAs<uint16_t>(row, i);
    case ir::DType::kU32:
      return LoadElementAs<uint32_t>(row, i);
    case ir::DType::kU64:
      return LoadElementAs<uint64_t>(row, i);
  }
  return 0.0f;
}

// y = (x - shift[c]) * scale[c] on the inputs, as f32; the base of normalize and scale_to_unit.
class AffineDataset : public Dataset {
 public:
  AffineDataset(DatasetPtr base, std::vector<float> shift, std::vector<float> scale)
      : base_(std::move(base)), shift_(std::move(shift)), scale_(std::move(scale)) {
    spec_ = base_->spec();
    spec_.input_dtype = ir::DType::kF32;
    elements_ = ir::NumElements(spec_.input_shape);
    channels_ = static_cast<int64_t>(shift_.size());
  }

  int64_t size() const override { return base_->size(); }
  const ExampleSpec& spec() const override { return spec_; }

  Example get(int64_t index) const override {
    Example example{ir::TensorData::Uninitialized(spec_.input_dtype, spec_.input_shape),
                    ir::TensorData::Uninitialized(spec_.target_dtype, spec_.target_shape)};
    copy_example(index, example.input.data(), example.target.data());
    return example;
  }

  void copy_example(int64_t index, std::byte* input, std::byte* target) const override {
    const ir::DType source = base_->spec().input_dtype;
    float* out = reinterpret_cast<float*>(input);
    if (source == ir::DType::kF32) {
      // In place: the output row has the source's layout.
      base_->copy_example(index, input, target);
      Apply(out, out);
      return;
    }
    // The source row is narrower or wider than f32: read it into a per-thread scratch row.
    thread_local std::vector<std::byte> scratch;
    scratch.resize(static_cast<size_t>(base_->spec().input_bytes()));
    base_->copy_example(index, scratch.data(), target);
    if (source == ir::DType::kU8) {
      // The images' hot path: one fused, vectorisable pass.
      Apply(reinterpret_cast<const uint8_t*>(scratch.data()), out);
      return;
    }
    for (int64_t i = 0; i < elements_; ++i) out[i] = LoadAsFloat(scratch.data(), i, source);
    Apply(out, out);
  }

  /// This transform followed by (x - shift2[c]) * scale2[c]: one affine map (normalize after
  /// scale_to_unit costs one pass, not two). Null when the channel counts do not compose.
  std::shared_ptr<AffineDataset> Then(const std::vector<float>& shift2,
                                      const std::vector<float>& scale2) const {
    const size_t c1 = shift_.size(), c2 = shift2.size();
    if (c1 != 1 && c2 != 1 && c1 != c2) return nullptr;
    const size_t c = std::max(c1, c2);
    std::vector<float> shift(c), scale(c);
    for (size_t i = 0; i < c; ++i) {
      const float s1 = shift_[c1 == 1 ? 0 : i], k1 = scale_[c1 == 1 ? 0 : i];
      const float s2 = shift2[c2 == 1 ? 0 : i], k2 = scale2[c2 == 1 ? 0 : i];
      // ((x - s1) * k1 - s2) * k2 = (x - (s1 + s2 / k1)) * (k1 * k2)
      shift[i] = s1 + s2 / k1;
      scale[i] = k1 * k2;
    }
    return std::make_shared<AffineDataset>(base_, std::move(shift), std::move(scale));
  }

 private:
  template <class T>
  void Apply(const T* in, float* out) const {
    if (channels_ == 1) {
      const float shift = shift_[0], scale = scale_[0];
      for (int64_t i = 0; i < elements_; ++i) out[i] = (static_cast<float>(in[i]) - shift) * scale;
    } else {
      for (int64_t i = 0; i < elements_; ++i) {
        const int64_t c = i % channels_;
        out[i] = (static_cast<float>(in[i]) - shift_[c]) * scale_[c];
      }
    }
  }

  DatasetPtr base_;
  std::vector<float> shift_, scale_;
  ExampleSpec spec_;
  int64_t elements_ = 0;
  int64_t channels_ = 1;
};

class MapDataset : public Dataset {
 public:
  MapDataset(DatasetPtr base, std::function<Example(Example)> fn, ExampleSpec spec)
      : base_(std::move(base)), fn_(std::move(fn)), spec_(std::move(spec)) {}

  int64_t size() const override { return base_->size(); }
  const ExampleSpec& spec() const override { return spec_; }

  Example get(int64_t index) const override {
    Example example = fn_(base_->get(index));
    if (example.input.dtype() != spec_.input_dtype || example.input.shape() != spec_.input_shape ||
        example.target.dtype() != spec_.target_dtype ||
        example.target.shape() != spec_.target_shape) {
      throw Error(absl::StrCat(
          "data: map: example ", index, " gave input ",
          TypeString(example.input.dtype(), example.input.shape()), ", target ",
          TypeString(example.target.dtype(), example.target.shape()), " but example 0 gave ",
          spec_.ToString(), " (every example must have one shape)"));
    }
    return example;
  }

 private:
  DatasetPtr base_;
  std::function<Example(Example)> fn_;
  ExampleSpec spec_;
};

}  // namespace

int64_t ExampleSpec::input_bytes() const {
  return ir::NumElements(input_shape) * ir::DTypeSize(input_dtype);
}
int64_t ExampleSpec::target_bytes() const {
  return ir::NumElements(target_shape) * ir::DTypeSize(target_dtype);
}
std::string ExampleSpec::ToString() const {
  return absl::StrCat("input ", TypeString(input_dtype, input_shape), ", target ",
                      TypeString(target_dtype, target_shape));
}

void Dataset::copy_example(int64_t index, std::byte* input, std::byte* target) const {
  const Example example = get(index);
  const ExampleSpec& s = spec();
  if (example.input.size_bytes() != s.input_bytes() ||
      example.target.size_bytes() != s.target_bytes()) {
    throw Error(absl::StrCat("data: example ", index, " has input ",
                             TypeString(example.input.dtype(), example.input.shape()), ", target ",
                             TypeString(example.target.dtype(), example.target.shape()),
                             " but the dataset's spec is ", s.ToString()));
  }
  std::memcpy(input, example.input.data(), static_cast<size_t>(s.input_bytes()));
  std::memcpy(target, example.target.data(), static_cast<size_t>(s.target_bytes()));
}

namespace detail {
void CheckIndex(const char* op, int64_t index, int64_t size) {
  if (index < 0 || index >= size) {
    throw Error(absl::StrCat("data: ", op, ": index ", index, " out of range for a dataset of ",
                             size, " examples"));
  }
}
}  // namespace detail

InMemoryDataset::InMemoryDataset(ir::TensorData inputs, ir::TensorData targets,
                                 std::source_location loc)
    : inputs_(std::move(inputs)), targets_(std::move(targets)) {
  if (inputs_.rank() < 1 || targets_.rank() < 1 || inputs_.shape()[0] != targets_.shape()[0]) {
    Fail(absl::StrCat("InMemoryDataset: inputs and targets need one leading (example) dim of the "
                      "same size; got inputs ",
                      TypeString(inputs_.dtype(), inputs_.shape()), ", targets ",
                      TypeString(targets_.dtype(), targets_.shape())),
         loc);
  }
  size_ = inputs_.shape()[0];
  spec_.input_dtype = inputs_.dtype();
  spec_.input_shape.assign(inputs_.shape().begin() + 1, inputs_.shape().end());
  spec_.target_dtype = targets_.dtype();
  spec_.target_shape.assign(targets_.shape().begin() + 1, targets_.shape().end());
}

Example InMemoryDataset::get(int64_t index) const {
  detail::CheckIndex("InMemoryDataset::get", index, size_);
  Example example{ir::TensorData::Uninitialized(spec_.input_dtype, spec_.input_shape),
                  ir::TensorData::Uninitialized(spec_.target_dtype, spec_.target_shape)};
  copy_example(index, example.input.data(), example.target.data());
  return example;
}

void InMemoryDataset::copy_example(int64_t index, std::byte* input, std::byte* target) const {
  detail::CheckIndex("InMemoryDataset::copy_example", index, size_);
  const int64_t in_bytes = spec_.input_bytes();
  const int64_t tgt_bytes = spec_.target_bytes();
  std::memcpy(input, inputs_.data() + index * in_bytes, static_cast<size_t>(in_bytes));
  std::memcpy(target, targets_.data() + index * tgt_bytes, static_cast<size_t>(tgt_bytes));
}

DatasetPtr map(DatasetPtr dataset, std::function<Example(Example)> fn, std::source_location loc) {
  if (!dataset) Fail("map: the dataset is null", loc);
  if (!fn) Fail("map: the function is empty", loc);
  ExampleSpec spec = dataset->spec();
  if (dataset->size() > 0) {
    // The output spec is whatever fn makes of example 0; every other example must match it.
    const Example first = fn(dataset->get(0));
    spec = ExampleSpec{first.input.dtype(), first.input.shape(), first.target.dtype(),
                       first.target.shape()};
  }
  return std::make_shared<MapDataset>(std::move(dataset), std::move(fn), std::move(spec));
}

DatasetPtr normalize(DatasetPtr dataset, std::vector<float> mean, std::vector<float> std,
                     std::source_location loc) {
  if (!dataset) Fail("normalize: the dataset is null", loc);
  const ExampleSpec& spec = dataset->spec();
  const int64_t last = spec.input_shape.empty() ? 1 : spec.input_shape.back();
  if (mean.size() != std.size() || mean.empty() ||
      (mean.size() != 1 && static_cast<int64_t>(mean.size()) != last)) {
    Fail(absl::StrCat("normalize: mean and std need 1 entry or one per element of the input's "
                      "last dim (",
                      last, "); got ", mean.size(), " and ", std.size(), " for ", spec.ToString()),
         loc);
  }
  if (ir::IsBool(spec.input_dtype)) {
    Fail(absl::StrCat("normalize: bool inputs cannot be normalised; ", spec.ToString()), loc);
  }
  std::vector<float> scale(std.size());
  for (size_t i = 0; i < std.size(); ++i) {
    if (!(std[i] > 0.0f)) {
      Fail(absl::StrCat("normalize: std[", i, "] = ", std[i], " must be > 0"), loc);
    }
    scale[i] = 1.0f / std[i];
  }
  if (const auto* affine = dynamic_cast<const AffineDataset*>(dataset.get())) {
    if (auto composed = affine->Then(mean, scale)) return composed;
  }
  return std::make_shared<AffineDataset>(std::move(dataset), std::move(mean), std::move(scale));
}

DatasetPtr scale_to_unit(DatasetPtr dataset, std::source_location loc) {
  if (!dataset) Fail("scale_to_unit: the dataset is null", loc);
  if (dataset->spec().input_dtype != ir::DType::kU8) {
    Fail(absl::StrCat("scale_to_unit: needs u8 images (0..255); got ", dataset->spec().ToString()),
         loc);
  }
  return std::make_shared<AffineDataset>(std::move(dataset), std::vector<float>{0.0f},
                                         std::vector<float>{1.0f / 255.0f});
}

}  // namespace kiln::data
