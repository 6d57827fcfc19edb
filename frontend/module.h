// Modules: KILN_MODULE(Type, field...) inside a struct registers its parameters.
//
//   template <class B>
//   struct Mlp {
//     kiln::nn::Linear<B> fc1, fc2;
//     KILN_MODULE(Mlp, fc1, fc2);
//   };
//
// It generates:
//   visit(visitor)        calls visitor(name, tensor) for every parameter, in field order, with
//                         dotted names ("fc1.weight"); Tensor fields are parameters,
//                         std::optional<...> fields are visited when set, std::vector<...>
//                         fields name their entries "layers.0.weight", and fields that are
//                         modules themselves are visited recursively. The non-const overload
//                         passes Tensor& so a visitor may replace parameters.
//   num_params()          the total element count of the parameters.
//   named_parameters()    name, type and device of each parameter.
//   to(device)            moves every parameter and buffer to `device` (realizing it).
//   visit_buffers(visitor) like visit, for buffers: fields of type kiln::Buffer<Tensor> (state
//                         such as BatchNorm's running statistics: saved in checkpoints, moved by
//                         to(), never trained). visit() skips them.
//   named_buffers()       name, type and device of each buffer.
//   clone()               a deep copy: every parameter and buffer is a new tensor with the same
//                         value (and requires-grad mark), so updating one copy leaves the other.
//   freeze() / unfreeze() parameters stop / start requiring gradients (detail::SetRequireGrad).
//   visit_modules(fn)     calls fn(module) for every module nested in this one (fields that are
//                         modules, through optionals and vectors), depth first, not for itself.
//   train(on = true) / eval()
//                         sets training mode on this module and every nested one: a module whose
//                         behaviour depends on the mode (Dropout, BatchNorm) defines
//                         `void kiln_set_training(bool)`, which train() calls on it; fields that
//                         are modules (or optionals / vectors of them) are visited recursively.
//
// KILN_MODULE(Type) with no fields declares a module without parameters (pooling, activations).
#pragma once

#include <cstdint>
#include <optional>
#include <source_location>
#include <string>
#include <type_traits>
#include <vector>

#include "frontend/tensor.h"

namespace kiln {

struct ParameterInfo {
  std::string name;
  ir::TensorType type;
  Device device;
};

/// A module's state that is not trained (BatchNorm's running mean and variance): visited by
/// visit_buffers() instead of visit(). `value` is the tensor.
template <class T>
struct Buffer {
  T value;
};

namespace detail {

/// "fc1, fc2" -> {"fc1", "fc2"}: the field names KILN_MODULE stringizes.
std::vector<std::string> SplitFieldNames(const char* names);

template <class T>
struct IsTensor : std::false_type {};
template <class B, int R, class K>
struct IsTensor<Tensor<B, R, K>> : std::true_type {};
template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};
template <class T>
struct IsVector : std::false_type {};
template <class T, class A>
struct IsVector<std::vector<T, A>> : std::true_type {};

template <class T>
struct IsBuffer : std::false_type {};
template <class T>
struct IsBuffer<Buffer<T>> : std::true_type {};

template <class T>
inline constexpr bool kAlwaysFalse = false;

/// Visits parameters (kBuffers false) or buffers (kBuffers true) of one field.
template <bool kBuffers, class Visitor, class Field>
void VisitField(Visitor& visitor, const std::string& name, Field& field) {
  using Plain = std::remove_const_t<Field>;
  if constexpr (IsTensor<Plain>::value) {
    if constexpr (!kBuffers) visitor(name, field);
  } else if constexpr (IsBuffer<Plain>::value) {
    if constexpr (kBuffers) VisitField<false>(visitor, name, field.value);
  } else if constexpr (IsOptional<Plain>::value) {
    if (field.has_value()) VisitField<kBuffers>(visitor, name, *field);
  } else if constexpr (IsVector<Plain>::value) {
    for (size_t i = 0; i < field.size(); ++i) {
      VisitField<kBuffers>(visitor, name + "." + std::to_string(i), field[i]);
    }
  } else if constexpr (requires { field.visit(visitor, name); }) {
    if constexpr (kBuffers) {
      field.visit_buffers(visitor, name + ".");
    } else {
      field.visit(visitor, name + ".");
    }
  } else {
    static_assert(kAlwaysFalse<Plain>,
                  "kiln: a KILN_MODULE field must be a Tensor, a kiln::Buffer, a module, or a "
                  "std::optional or std::vector of them");
  }
}

template <bool kBuffers, class Visitor, class... Fields>
void VisitFields(Visitor& visitor, const std::string& prefix, const std::vector<std::string>& names,
                 Fields&... fields) {
  [[maybe_unused]] size_t i = 0;
  (VisitField<kBuffers>(visitor, prefix + names[i++], fields), ...);
}

/// Sets the training mode of one field (recursing into optionals, vectors and modules).
template <class Field>
void SetFieldTraining(Field& field, bool on) {
  if constexpr (IsOptional<Field>::value) {
    if (field.has_value()) SetFieldTraining(*field, on);
  } else if constexpr (IsVector<Field>::value) {
    for (auto& entry : field) SetFieldTraining(entry, on);
  } else if constexpr (requires { field.train(on); }) {
    field.train(on);
  }
}

/// Calls the module's own kiln_set_training(on) when it has one.
template <class Module>
void SetOwnTraining(Module& module, bool on) {
  if constexpr (requires { module.kiln_set_training(on); }) module.kiln_set_training(on);
}

template <class... Fields>
void SetFieldsTraining([[maybe_unused]] bool on, Fields&... fields) {
  (SetFieldTraining(fields, on), ...);
}

/// Calls fn(module) for a field that is a module, then for the modules nested in it (through
/// optionals and vectors); other fields are skipped: visit_modules().
template <class Fn, class Field>
void VisitModuleField(Fn& fn, Field& field) {
  if constexpr (IsOptional<Field>::value) {
    if (field.has_value()) VisitModuleField(fn, *field);
  } else if constexpr (IsVector<Field>::value) {
    for (auto& entry : field) VisitModuleField(fn, entry);
  } else if constexpr (requires { field.visit_modules(fn); }) {
    fn(field);
    field.visit_modules(fn);
  }
}

template <class Fn, class... Fields>
void VisitModuleFields([[maybe_unused]] Fn& fn, Fields&... fields) {
  (VisitModuleField(fn, fields), ...);
}

/// A new node with `x`'s value (realizing it) and its requires-grad mark: clone()'s deep copy.
TensorRef CloneTensor(const TensorRef& x, const Loc& loc);
/// Marks one parameter as (not) requiring a gradient: freeze() / unfreeze().
TensorRef SetParameterRequiresGrad(const TensorRef& x, bool require, const Loc& loc);

}  // namespace detail
}  // namespace kiln

#define KILN_MODULE(Type, ...)                                                                   \
  static const std::vector<std::string>& kiln_field_names() {                                    \
    static const std::vector<std::string> names = ::kiln::detail::SplitFieldNames(#__VA_ARGS__); \
    return names;                                                                                \
  }                                                                                              \
  template <class KilnVisitor>                                                                   \
  void visit(KilnVisitor&& visitor, const std::string& prefix = "") {                            \
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(*this)>, Type>,                    \
                  "kiln: KILN_MODULE's first argument must be the enclosing type");              \
    ::kiln::detail::VisitFields<false>(visitor, prefix,                                          \
                                       kiln_field_names() __VA_OPT__(, ) __VA_ARGS__);           \
  }                                                                                              \
  template <class KilnVisitor>                                                                   \
  void visit(KilnVisitor&& visitor, const std::string& prefix = "") const {                      \
    ::kiln::detail::VisitFields<false>(visitor, prefix,                                          \
                                       kiln_field_names() __VA_OPT__(, ) __VA_ARGS__);           \
  }                                                                                              \
  template <class KilnVisitor>                                                                   \
  void visit_buffers(KilnVisitor&& visitor, const std::string& prefix = "") {                    \
    ::kiln::detail::VisitFields<true>(visitor, prefix,                                           \
                                      kiln_field_names() __VA_OPT__(, ) __VA_ARGS__);            \
  }                                                                                              \
  template <class KilnVisitor>                                                                   \
  void visit_buffers(KilnVisitor&& visitor, const std::string& prefix = "") const {              \
    ::kiln::detail::VisitFields<true>(visitor, prefix,                                           \
                                      kiln_field_names() __VA_OPT__(, ) __VA_ARGS__);            \
  }                                                                                              \
  int64_t num_params() const {                                                                   \
    int64_t count = 0;                                                                           \
    visit([&count](const std::string&, const auto& t) { count += t.num_elements(); });           \
    return count;                                                                                \
  }                                                                                              \
  std::vector<::kiln::ParameterInfo> named_parameters() const {                                  \
    std::vector<::kiln::ParameterInfo> params;                                                   \
    visit([&params](const std::string& name, const auto& t) {                                    \
      params.push_back(::kiln::ParameterInfo{name, t.type(), t.device()});                       \
    });                                                                                          \
    return params;                                                                               \
  }                                                                                              \
  std::vector<::kiln::ParameterInfo> named_buffers() const {                                     \
    std::vector<::kiln::ParameterInfo> buffers;                                                  \
    visit_buffers([&buffers](const std::string& name, const auto& t) {                           \
      buffers.push_back(::kiln::ParameterInfo{name, t.type(), t.device()});                      \
    });                                                                                          \
    return buffers;                                                                              \
  }                                                                                              \
  void to(const ::kiln::Device& device) {                                                        \
    visit([&device](const std::string&, auto& t) { t = t.to(device); });                         \
    visit_buffers([&device](const std::string&, auto& t) { t = t.to(device); });                 \
  }                                                                                              \
  Type clone(std::source_location kiln_loc = std::source_location::current()) const {            \
    Type copy = *this;                                                                           \
    auto deep = [&kiln_loc](const std::string&, auto& t) {                                       \
      t = std::remove_cvref_t<decltype(t)>(::kiln::detail::CloneTensor(t.ref(), kiln_loc));      \
    };                                                                                           \
    copy.visit(deep);                                                                            \
    copy.visit_buffers(deep);                                                                    \
    return copy;                                                                                 \
  }                                                                                              \
  void freeze(std::source_location kiln_loc = std::source_location::current()) {                 \
    visit([&kiln_loc](const std::string&, auto& t) {                                             \
      ::kiln::detail::SetParameterRequiresGrad(t.ref(), false, kiln_loc);                        \
    });                                                                                          \
  }                                                                                              \
  void unfreeze(std::source_location kiln_loc = std::source_location::current()) {               \
    visit([&kiln_loc](const std::string&, auto& t) {                                             \
      ::kiln::detail::SetParameterRequiresGrad(t.ref(), true, kiln_loc);                         \
    });                                                                                          \
  }                                                                                              \
  template <class KilnFn>                                                                        \
  void visit_modules(KilnFn&& fn) {                                                              \
    ::kiln::detail::VisitModuleFields(fn __VA_OPT__(, ) __VA_ARGS__);                            \
  }                                                                                              \
  void train(bool on = true) {                                                                   \
    ::kiln::detail::SetOwnTraining(*this, on);                                                   \
    ::kiln::detail::SetFieldsTraining(on __VA_OPT__(, ) __VA_ARGS__);                            \
  }                                                                                              \
  void eval() { train(false); }                                                                  \
  static constexpr const char* kModuleName = #Type
