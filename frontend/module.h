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
//   to(device)            moves every parameter to `device` (realizing it).
#pragma once

#include <cstdint>
#include <optional>
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
inline constexpr bool kAlwaysFalse = false;

template <class Visitor, class Field>
void VisitField(Visitor& visitor, const std::string& name, Field& field) {
  using Plain = std::remove_const_t<Field>;
  if constexpr (IsTensor<Plain>::value) {
    visitor(name, field);
  } else if constexpr (IsOptional<Plain>::value) {
    if (field.has_value()) VisitField(visitor, name, *field);
  } else if constexpr (IsVector<Plain>::value) {
    for (size_t i = 0; i < field.size(); ++i) {
      VisitField(visitor, name + "." + std::to_string(i), field[i]);
    }
  } else if constexpr (requires { field.visit(visitor, name); }) {
    field.visit(visitor, name + ".");
  } else {
    static_assert(kAlwaysFalse<Plain>,
                  "kiln: a KILN_MODULE field must be a Tensor, a module, or a std::optional or "
                  "std::vector of them");
  }
}

template <class Visitor, class... Fields>
void VisitFields(Visitor& visitor, const std::string& prefix, const std::vector<std::string>& names,
                 Fields&... fields) {
  size_t i = 0;
  (VisitField(visitor, prefix + names[i++], fields), ...);
}

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
    ::kiln::detail::VisitFields(visitor, prefix, kiln_field_names(), __VA_ARGS__);               \
  }                                                                                              \
  template <class KilnVisitor>                                                                   \
  void visit(KilnVisitor&& visitor, const std::string& prefix = "") const {                      \
    ::kiln::detail::VisitFields(visitor, prefix, kiln_field_names(), __VA_ARGS__);               \
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
  void to(const ::kiln::Device& device) {                                                        \
    visit([&device](const std::string&, auto& t) { t = t.to(device); });                         \
  }                                                                                              \
  static constexpr const char* kModuleName = #Type
