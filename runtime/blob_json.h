// Helpers the blob readers share (runtime/blob.cc and each target driver's plan parser): checked
// reads of JSON fields, errors that name the section and the field path. Internal to the blob
// loader and its drivers; nlohmann/json is header-only and stays out of runtime/blob.h.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace kiln::runtime::blob::internal {

using json = nlohmann::json;

/// InvalidArgument "blob: <parts...>".
template <class... Parts>
absl::Status Bad(const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat("blob: ", parts...));
}

/// Evaluates a StatusOr expression; returns its status from the calling function when it failed,
/// else declares `lhs` holding the value.
#define KILN_BLOB_ASSIGN(lhs, expr)             \
  auto lhs##_or = (expr);                       \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = *std::move(lhs##_or)

/// The product of `dims` times `element_size`, or InvalidArgument when it exceeds 2^62
/// (dimensions already bounded by the caller).
absl::StatusOr<int64_t> CheckedProduct(const std::vector<int64_t>& dims, int64_t element_size);

/// Parses `bytes` as one JSON object; errors "blob: <where>: not valid JSON" / "not a JSON object".
absl::StatusOr<json> ParseJson(std::span<const std::byte> bytes, const std::string& where);

/// Reads JSON fields with type and range checks; errors read "blob: <where>: <path>: <what>".
class Reader {
 public:
  explicit Reader(std::string where) : where_(std::move(where)) {}
  const std::string& where() const { return where_; }

  absl::Status Error(const std::string& path, const std::string& what) const {
    return Bad(where_, ": ", path, ": ", what);
  }
  absl::StatusOr<const json*> Field(const json& object, const std::string& path,
                                    const char* key) const {
    if (!object.is_object()) return Error(path, "is not an object");
    auto it = object.find(key);
    if (it == object.end()) return Error(path, absl::StrCat("has no \"", key, "\""));
    return &*it;
  }
  absl::StatusOr<int64_t> Int(const json& object, const std::string& path, const char* key,
                              int64_t low, int64_t high) const {
    absl::StatusOr<const json*> v = Field(object, path, key);
    if (!v.ok()) return v.status();
    if (!(*v)->is_number_integer()) return Error(absl::StrCat(path, ".", key), "is not an integer");
    int64_t value;
    if ((*v)->is_number_unsigned()) {
      const uint64_t u = (*v)->get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(absl::StrCat(path, ".", key), "is out of range");
      }
      value = static_cast<int64_t>(u);
    } else {
      value = (*v)->get<int64_t>();
    }
    if (value < low || value > high) {
      return Error(absl::StrCat(path, ".", key),
                   absl::StrCat(value, " is outside [", low, ", ", high, "]"));
    }
    return value;
  }
  absl::StatusOr<std::string> String(const json& object, const std::string& path,
                                     const char* key) const {
    absl::StatusOr<const json*> v = Field(object, path, key);
    if (!v.ok()) return v.status();
    if (!(*v)->is_string()) return Error(absl::StrCat(path, ".", key), "is not a string");
    return (*v)->get<std::string>();
  }
  absl::StatusOr<bool> Bool(const json& object, const std::string& path, const char* key) const {
    absl::StatusOr<const json*> v = Field(object, path, key);
    if (!v.ok()) return v.status();
    if (!(*v)->is_boolean()) return Error(absl::StrCat(path, ".", key), "is not a boolean");
    return (*v)->get<bool>();
  }
  absl::StatusOr<double> Number(const json& object, const std::string& path,
                                const char* key) const {
    absl::StatusOr<const json*> v = Field(object, path, key);
    if (!v.ok()) return v.status();
    if (!(*v)->is_number()) return Error(absl::StrCat(path, ".", key), "is not a number");
    return (*v)->get<double>();
  }
  absl::StatusOr<const json*> Array(const json& object, const std::string& path, const char* key,
                                    size_t max_size) const {
    absl::StatusOr<const json*> v = Field(object, path, key);
    if (!v.ok()) return v.status();
    if (!(*v)->is_array()) return Error(absl::StrCat(path, ".", key), "is not an array");
    if ((*v)->size() > max_size) {
      return Error(absl::StrCat(path, ".", key),
                   absl::StrCat("has ", (*v)->size(), " entries (at most ", max_size, ")"));
    }
    return *v;
  }
  absl::StatusOr<std::vector<int64_t>> Ints(const json& object, const std::string& path,
                                            const char* key, size_t max_size, int64_t low,
                                            int64_t high) const {
    absl::StatusOr<const json*> array = Array(object, path, key, max_size);
    if (!array.ok()) return array.status();
    std::vector<int64_t> values;
    for (size_t i = 0; i < (*array)->size(); ++i) {
      const json& e = (**array)[i];
      const std::string at = absl::StrCat(path, ".", key, "[", i, "]");
      if (!e.is_number_integer()) return Error(at, "is not an integer");
      if (e.is_number_unsigned() &&
          e.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(at, "is out of range");
      }
      const int64_t v =
          e.is_number_unsigned() ? static_cast<int64_t>(e.get<uint64_t>()) : e.get<int64_t>();
      if (v < low || v > high) {
        return Error(at, absl::StrCat(v, " is outside [", low, ", ", high, "]"));
      }
      values.push_back(v);
    }
    return values;
  }

 private:
  std::string where_;
};

}  // namespace kiln::runtime::blob::internal
